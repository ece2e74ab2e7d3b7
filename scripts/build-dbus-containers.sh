#!/usr/bin/env bash
# Builds dbus 1.14.10 from Debian's source tarball with the experimental
# org.freedesktop.DBus.Containers1 turned back on, for dbus's own
# test/containers.c (test-containers) and a reference dbus-daemon that has
# the interface. Distributions compile Containers1 out, and Debian's
# dbus-tests ships test-containers without it (it skips 15 of its 17
# subtests), so this is the only way to run those tests.
#
#   scripts/build-dbus-containers.sh      prints the build directory
#
# The build is cached in ${XDG_CACHE_HOME:-$HOME/.cache}/quickbus/, in a
# directory named after a hash of this script: editing the recipe (or the
# patches) gives a fresh build, an unchanged script reuses the last one. A
# build that did not finish (no stamp) is wiped and redone. The last line
# on stdout is the build directory; everything else goes to stderr. In it:
#   bus/dbus-daemon         the reference daemon (a libtool wrapper)
#   test/test-containers    the test (DBUS_TEST_EXEC=BUILD/test,
#                           DBUS_TEST_DATA=BUILD/test/data)
#
# The tarball comes from deb.debian.org (github and freedesktop.org are not
# reachable from CI), checked against its sha256. Build dependencies (a C
# compiler, make, pkg-config, libexpat1-dev, libglib2.0-dev, curl, xz-utils)
# are in scripts/test.sh's package list; this script only checks for them.
#
# dbus 1.14 keeps bus/containers.c and test/containers.c but compiled out;
# re-enabling it takes, as dbus 1.13 (where it last built) had it:
#   - bus/containers.c: drop the `#error This feature is not ready for
#     production use`;
#   - dbus/dbus-shared.h: define DBUS_INTERFACE_CONTAINERS1 again;
#   - test/data/valid-config-files/limit-containers.conf.in: the four
#     <limit> lines the limit subtests rely on;
#   - configure with CPPFLAGS=-DDBUS_ENABLE_CONTAINERS (1.14's configure
#     has no --enable-containers).
# And one change to the test itself: upstream's
# /containers/get-supported-arguments asserts that SupportedArguments is
# empty ("No arguments are defined yet"), which is true of dbus-daemon but
# not of quickbus, whose Containers1 offers one named argument
# (org.quickbus.Filter, the per-app filter). The patched test expects the
# comma-separated list in $DBUS_TEST_CONTAINERS_SUPPORTED_ARGUMENTS (in any
# order, nothing more, nothing less); unset or empty means upstream's
# expectation, an empty list, so the reference still passes unchanged.
# Every patch fails the script if the upstream text it replaces is not
# there exactly once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=1.14.10
tarball=dbus_$version.orig.tar.xz
url=http://deb.debian.org/debian/pool/main/d/dbus/$tarball
sha256=ba1f21d2bd9d339da2d4aa8780c09df32fea87998b73da24f49ab9df1e36a50f

say() { printf 'build-dbus-containers: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

cache=${XDG_CACHE_HOME:-$HOME/.cache}/quickbus
recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
build=$cache/dbus-$version-containers-$recipe
stamp=$build/.quickbus-build-complete

if [[ -e $stamp ]]; then
    say "cached build (recipe $recipe)"
    printf '%s\n' "$build"
    exit 0
fi

missing=()
for tool in cc make pkg-config curl xz sha256sum; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
for module in expat glib-2.0 gio-unix-2.0; do
    pkg-config --exists "$module" 2>/dev/null || missing+=("pkg-config:$module")
done
if ((${#missing[@]} > 0)); then
    die "missing ${missing[*]}: apt-get install build-essential pkg-config libexpat1-dev libglib2.0-dev curl xz-utils (scripts/test.sh does)"
fi

mkdir -p "$cache"
# One build at a time per cache (two test runs starting together).
exec 9>"$cache/.dbus-containers.lock"
flock 9
if [[ -e $stamp ]]; then
    say "cached build (recipe $recipe), finished by another run"
    printf '%s\n' "$build"
    exit 0
fi

# Earlier recipes' builds are of no further use.
for old in "$cache"/dbus-$version-containers-*; do
    if [[ -d $old && $old != "$build" ]]; then
        say "removing the build of an older recipe: $old"
        rm -rf "$old"
    fi
done

download=$cache/$tarball
if [[ ! -f $download ]] || ! sha256sum --check --status <<<"$sha256  $download"; then
    say "downloading $url"
    curl --fail --silent --show-error --location --retry 3 --output "$download.part" "$url"
    if ! sha256sum --check --status <<<"$sha256  $download.part"; then
        rm -f "$download.part"
        die "$url: sha256 is not $sha256"
    fi
    mv "$download.part" "$download"
fi

started=$SECONDS
say "unpacking into $build"
rm -rf "$build"
mkdir -p "$build"
tar -xJf "$download" -C "$build" --strip-components=1

# Replaces the one occurrence of OLD in FILE with NEW; fails if OLD is
# missing or appears more than once (upstream changed: the recipe must be
# looked at again, not applied blindly).
replace_once() {
    local file=$build/$1 old=$2 new=$3 text rest
    text=$(<"$file") || die "$1: cannot read"
    rest=${text/"$old"/}
    if [[ $rest == "$text" ]]; then
        die "$1: the text to patch is not there: $old"
    fi
    if [[ $rest == *"$old"* ]]; then
        die "$1: the text to patch is there more than once: $old"
    fi
    printf '%s\n' "${text/"$old"/"$new"}" >"$file"
}

replace_once bus/containers.c \
    $'#error This feature is not ready for production use\n' \
    ''

replace_once dbus/dbus-shared.h \
    $'#define DBUS_INTERFACE_MONITORING     "org.freedesktop.DBus.Monitoring"\n' \
    $'#define DBUS_INTERFACE_MONITORING     "org.freedesktop.DBus.Monitoring"\n/** The containers interface (re-enabled by quickbus\'s scripts/build-dbus-containers.sh) */\n#define DBUS_INTERFACE_CONTAINERS1    "org.freedesktop.DBus.Containers1"\n'

replace_once test/data/valid-config-files/limit-containers.conf.in \
    $'    <allow own="*"/>\n  </policy>\n</busconfig>' \
    $'    <allow own="*"/>\n  </policy>\n\n  <limit name="max_containers">5</limit>\n  <limit name="max_containers_per_user">3</limit>\n  <limit name="max_container_metadata_bytes">4096</limit>\n  <limit name="max_connections_per_container">3</limit>\n</busconfig>'

replace_once test/containers.c \
    $'  /* No arguments are defined yet */\n  g_assert_cmpuint (len, ==, 0);\n' \
    '  /* quickbus (scripts/build-dbus-containers.sh): the bus under test may
   * offer named arguments of its own; expect exactly those listed,
   * comma-separated, in $DBUS_TEST_CONTAINERS_SUPPORTED_ARGUMENTS (unset:
   * none, as upstream, whose dbus-daemon defines none yet). */
  {
    const gchar *listed = g_getenv ("DBUS_TEST_CONTAINERS_SUPPORTED_ARGUMENTS");
    gchar **expected = (listed == NULL || listed[0] == '"'\\0'"')
      ? g_new0 (gchar *, 1)
      : g_strsplit (listed, ",", -1);
    gsize i;

    for (i = 0; i < len; i++)
      g_test_message ("SupportedArguments[%" G_GSIZE_FORMAT "]: %s", i, args[i]);

    g_assert_cmpuint (len, ==, g_strv_length (expected));

    for (i = 0; expected[i] != NULL; i++)
      {
        if (!g_strv_contains (args, expected[i]))
          g_error ("SupportedArguments lacks %s", expected[i]);
      }

    g_strfreev (expected);
  }
'

say "configuring"
(
    cd "$build"
    ./configure CPPFLAGS=-DDBUS_ENABLE_CONTAINERS \
        --prefix=/usr --sysconfdir=/etc --localstatedir=/var --runstatedir=/run \
        --enable-installed-tests --enable-modular-tests \
        --disable-doxygen-docs --disable-xml-docs --disable-systemd --without-x \
        >configure.log 2>&1
) || die "configure failed: see $build/configure.log"
grep -q -- '-DDBUS_ENABLE_CONTAINERS' "$build/config.status" ||
    die "configure did not take CPPFLAGS=-DDBUS_ENABLE_CONTAINERS"

say "building with make -j$(nproc)"
make -C "$build" -j"$(nproc)" >"$build/make.log" 2>&1 || {
    tail -n 40 "$build/make.log" >&2
    die "make failed: see $build/make.log"
}
for built in bus/dbus-daemon test/test-containers test/data/valid-config-files/limit-containers.conf; do
    [[ -e $build/$built ]] || die "the build did not produce $built"
done
# The daemon itself (behind libtool's wrapper when linked to the shared
# libdbus) must know the interface, or every subtest would test nothing.
grep -qs 'org.freedesktop.DBus.Containers1' "$build/bus/dbus-daemon" "$build/bus/.libs/dbus-daemon" ||
    die "bus/dbus-daemon was built without Containers1"
grep -q 'max_connections_per_container' "$build/test/data/valid-config-files/limit-containers.conf" ||
    die "test/data/valid-config-files/limit-containers.conf lacks the container limits"

touch "$stamp"
say "built in $((SECONDS - started))s (recipe $recipe)"
printf '%s\n' "$build"
