#!/usr/bin/env bash
# Builds the Debian package of this checkout with cargo-deb (installed from
# crates.io when missing) and prints its path:
# ${CARGO_TARGET_DIR:-target}/debian/quickbus_<version>-1_<arch>.deb.
# The manual pages come from the programs' own clap definitions
# (quickbus-daemon --generate-man, quickbus generate-man) and from
# docs/quickbus-daemon-config.md (go-md2man): quickbus-daemon(1),
# quickbus(1), quickbus-daemon.conf(5). Package metadata: the
# [package.metadata.deb] of crates/daemon/Cargo.toml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target=${CARGO_TARGET_DIR:-target}
log() { printf '%s\n' "$*" >&2; }

if ! cargo deb --version >/dev/null 2>&1; then
    log "installing cargo-deb"
    cargo install --locked cargo-deb >&2
fi
if ! command -v go-md2man >/dev/null; then
    log "go-md2man is missing: apt-get install go-md2man (scripts/test.sh installs it)"
    exit 1
fi

cargo build --release -p quickbus-daemon -p quickbus >&2

man="$target/release/man"
mkdir -p "$man"
"$target/release/quickbus-daemon" --generate-man | gzip -9n >"$man/quickbus-daemon.1.gz"
"$target/release/quickbus" generate-man | gzip -9n >"$man/quickbus.1.gz"
version=$(cargo pkgid -p quickbus-daemon | sed 's/.*[#@]//')
{
    printf '%% QUICKBUS-DAEMON.CONF 5 "" "quickbus %s"\n' "$version"
    # The page's own first heading is the title line above.
    tail -n +2 docs/quickbus-daemon-config.md
} | go-md2man | gzip -9n >"$man/quickbus-daemon.conf.5.gz"

cargo deb -p quickbus-daemon --no-build --strip --output "$target/debian/" >&2
ls -t "$target"/debian/quickbus_"$version"-*.deb | head -n 1
