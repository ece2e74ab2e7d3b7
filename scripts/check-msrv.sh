#!/usr/bin/env bash
# Checks that the workspace's declared `rust-version` (root Cargo.toml) is
# true of the dependencies too: every package Cargo.lock resolves (normal,
# build and dev dependencies) that declares a rust-version must declare one
# no newer than ours, or a user of that compiler could not build or test
# quickbus. Our own code is checked by clippy's `incompatible_msrv` lint (a
# workspace lint, denied), which reads the same rust-version: only one
# toolchain is installed, so nothing compiles with the old compiler itself.
# Packages that declare no rust-version are listed, not judged.
# Exits non-zero naming each dependency that needs a newer compiler.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

metadata=$(cargo metadata --format-version 1 --locked)
ours=$(jq -r '[.packages[] | select(.source == null) | .rust_version] | unique | .[]' <<<"$metadata")
if [[ $(wc -l <<<"$ours") -ne 1 || $ours == null ]]; then
    echo "every workspace package must inherit one rust-version (rust-version.workspace = true); found: $ours" >&2
    exit 1
fi

# One line per resolved dependency: rust-version (or "none"), name, version.
dependencies=$(jq -r '
    [.resolve.nodes[].id] as $resolved
    | .packages[]
    | select(.source != null and (.id as $id | $resolved | index($id)))
    | "\(.rust_version // "none") \(.name) \(.version)"' <<<"$metadata")

# `sort -V` orders version numbers; a dependency is too new when it sorts
# after ours (1.88 and 1.88.0 count as equal).
newer=()
undeclared=()
while read -r needs name version; do
    if [[ $needs == none ]]; then
        undeclared+=("$name $version")
        continue
    fi
    if [[ ${needs%.0} != "${ours%.0}" && $(printf '%s\n%s\n' "$ours" "$needs" | sort -V | tail -n 1) == "$needs" ]]; then
        newer+=("$name $version needs rust $needs")
    fi
done <<<"$dependencies"

echo "rust-version $ours; $(wc -l <<<"$dependencies") dependencies, ${#undeclared[@]} declare none (${undeclared[*]})"
if ((${#newer[@]} > 0)); then
    echo "dependencies needing a newer compiler than rust-version $ours:" >&2
    printf '  %s\n' "${newer[@]}" >&2
    exit 1
fi
