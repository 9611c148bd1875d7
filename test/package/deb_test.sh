#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# The Debian packages (cmake/packaging.cmake): builds them with cpack from the build tree, checks
# their names, versions, Depends and files, then installs them on this machine with apt (which
# proves that the Depends resolve from Debian's archive) and uses them as a user would: the
# consumer project (test/package/consumer) through find_package and through pkg-config, and
# `redlock --version`. The packages are purged on exit, also when a step fails, with whatever apt
# installed for them. Installing needs root: without it, the packages are built and inspected and
# the test reports itself skipped (exit 77).
# Usage: deb_test.sh SOURCE_DIR BUILD_DIR WORK_DIR LIBDIR LIB_PACKAGE DEV_PACKAGE [CLI_PACKAGE]
#   LIBDIR is the install libdir relative to /usr (lib/<multiarch triplet>)
set -euo pipefail
start=$(date +%s)
src=$(realpath "$1")
build=$(realpath "$2")
work=$3
libdir=/usr/$4
lib_pkg=$5
dev_pkg=$6
cli_pkg=${7:-}
packages=("$lib_pkg" "$dev_pkg" ${cli_pkg:+"$cli_pkg"})
consumer=$src/test/package/consumer

step() { echo "=== deb test: $*"; }
fail() {
  echo "deb test: FAILED: $*" >&2
  exit 1
}
skip() {
  echo "=== deb test: SKIPPED: $*"
  exit 77
}

for tool in cpack dpkg dpkg-deb dpkg-query readelf; do
  command -v "$tool" >/dev/null || skip "no $tool here: the Debian packages are built and tested on Debian"
done
rm -rf "$work"
mkdir -p "$work/debs"
work=$(realpath "$work")

# The expected version: the project's (include/redlock/version.hpp), then the Debian revision.
version=$(for part in MAJOR MINOR PATCH; do
  sed -n "s/^#define REDLOCK_VERSION_${part} \([0-9]*\)$/\1/p" "$src/include/redlock/version.hpp"
done | paste -sd.)
revision=$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_RELEASE "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
debver=$version-$revision
arch=$(dpkg --print-architecture)
soname=libredlock.so.${version%.*}
config=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" | tr '[:upper:]' '[:lower:]')
config=${config:-noconfig}

step "cpack -G DEB (version $debver, $arch)"
cpack --config "$build/CPackConfig.cmake" -B "$work/debs" >"$work/cpack.log" ||
  { cat "$work/cpack.log"; fail "cpack"; }
deb() { echo "$work/debs/${1}_${debver}_${arch}.deb"; }
for p in "${packages[@]}"; do
  [[ -f $(deb "$p") ]] || { ls -l "$work/debs"; fail "no package $(basename "$(deb "$p")")"; }
done
count=$(find "$work/debs" -maxdepth 1 -name '*.deb' | wc -l)
((count == ${#packages[@]})) || fail "$count packages built, ${#packages[@]} expected"

step "inspect: control fields"
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
has() { grep -qE "$2" <<<"$1" || fail "$3: '$1' lacks /$2/"; }
for p in "${packages[@]}"; do
  dpkg-deb -I "$(deb "$p")"
  [[ $(field "$p" Package) == "$p" && $(field "$p" Version) == "$debver" ]] || fail "$p: name or version"
  [[ $(field "$p" Architecture) == "$arch" ]] || fail "$p: architecture"
  for f in Maintainer Homepage Section Description; do
    [[ -n $(field "$p" $f) ]] || fail "$p: no $f field"
  done
done
exact="${lib_pkg//./\\.} \(= ${debver//./\\.}\)"
lib_depends=$(field "$lib_pkg" Depends)
has "$lib_depends" '(^|, )libc6 ' "$lib_pkg Depends"
has "$lib_depends" '(^|, )libstdc\+\+6 ' "$lib_pkg Depends"
has "$lib_depends" '(^|, )libfmt[0-9]+ ' "$lib_pkg Depends"
has "$lib_depends" '(^|, )libssl[0-9.]+ ' "$lib_pkg Depends"
dev_depends=$(field "$dev_pkg" Depends)
has "$dev_depends" "^$exact(, |$)" "$dev_pkg Depends"
for d in 'libboost[0-9.]+-dev' libfmt-dev libssl-dev; do has "$dev_depends" "(^|, )$d(, |$)" "$dev_pkg Depends"; done
if [[ -n $cli_pkg ]]; then
  cli_depends=$(field "$cli_pkg" Depends)
  has "$cli_depends" "^$exact(, |$)" "$cli_pkg Depends"
  has "$cli_depends" '(^|, )libc6 ' "$cli_pkg Depends"
fi
shlibs=$(dpkg-deb --ctrl-tarfile "$(deb "$lib_pkg")" | tar -xO ./shlibs)
[[ $shlibs == "libredlock ${version%.*} $lib_pkg (>= $debver)" ]] || fail "$lib_pkg: DEBIAN/shlibs '$shlibs'"

step "inspect: files"
# Each package holds exactly these files (directories aside), owned by root.
expect_files() {
  local p=$1
  shift
  dpkg-deb -c "$(deb "$p")" | tee "$work/$p.contents"
  [[ -z $(awk '$2 != "root/root"' "$work/$p.contents") ]] || fail "$p: a file not owned by root"
  awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' "$work/$p.contents" | sort >"$work/$p.files"
  printf '%s\n' "$@" | sort | diff -u - "$work/$p.files" || fail "$p: not the expected files"
}
expect_files "$lib_pkg" "$libdir/libredlock.so.$version" "$libdir/$soname" "/usr/share/doc/$lib_pkg/copyright"
mapfile -t headers < <(cd "$src/include" && find redlock -type f | sed 's|^|/usr/include/|')
expect_files "$dev_pkg" "${headers[@]}" "$libdir/libredlock.so" "$libdir/pkgconfig/redlock.pc" \
  "$libdir/cmake/redlock/redlockConfig.cmake" "$libdir/cmake/redlock/redlockConfigVersion.cmake" \
  "$libdir/cmake/redlock/redlockTargets.cmake" "$libdir/cmake/redlock/redlockTargets-$config.cmake" \
  "/usr/share/doc/$dev_pkg/copyright"
if [[ -n $cli_pkg ]]; then
  expect_files "$cli_pkg" /usr/bin/redlock "/usr/share/doc/$cli_pkg/copyright"
fi
mkdir "$work/root"
for p in "${packages[@]}"; do dpkg-deb -x "$(deb "$p")" "$work/root"; done
for p in "${packages[@]}"; do
  cmp "$src/LICENSE" "$work/root/usr/share/doc/$p/copyright" || fail "$p: copyright is not LICENSE"
done
[[ $(readlink "$work/root$libdir/libredlock.so") == "$soname" ]] || fail "the namelink"
dynamic=$(readelf -d "$work/root$libdir/libredlock.so.$version")
grep -F "Library soname: [$soname]" <<<"$dynamic" >/dev/null || fail "SONAME"
for elf in "$work/root$libdir/libredlock.so.$version" ${cli_pkg:+"$work/root/usr/bin/redlock"}; do
  if readelf -d "$elf" | grep -E 'RPATH|RUNPATH'; then fail "$elf: carries a run path"; fi
done

if [[ $(id -u) -ne 0 ]]; then
  skip "not root: the packages are built and inspected; installing them needs root"
fi

# Leave the machine as it was: refuse to run where our files are already present (purging
# them afterwards would remove what someone installed), and purge on exit what we installed.
step "install with apt"
for p in "${packages[@]}"; do
  state=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ -z $state || $state == not-installed ]] ||
    fail "$p is already on this machine ($state): purge it first (dpkg --purge $p), or run elsewhere"
done
for f in /usr/include/redlock "$libdir/$soname" "$libdir/libredlock.so" "$libdir/cmake/redlock" \
  "$libdir/pkgconfig/redlock.pc" ${cli_pkg:+/usr/bin/redlock}; do
  [[ ! -e $f ]] || fail "$f exists already (installed by hand?): installing the packages would replace it"
done
dpkg-query -W -f='${binary:Package}\n' | sort >"$work/before.txt"
installed=0
cleanup() {
  local status=$?
  if ((installed)); then
    step "purge the packages"
    dpkg --purge "${packages[@]}" >/dev/null || status=1
    # What apt installed for ours: absent before, and marked as installed automatically.
    mapfile -t pulled < <(comm -13 "$work/before.txt" <(dpkg-query -W -f='${binary:Package}\n' | sort) |
      grep -Fxf <(apt-mark showauto) || true)
    if ((${#pulled[@]})); then
      echo "purging what apt installed for them: ${pulled[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${pulled[@]}" >/dev/null || status=1
    fi
    if [[ -e /usr/include/redlock || -e $libdir/$soname ]]; then
      echo "deb test: files left after the purge" >&2
      status=1
    fi
  fi
  echo "=== deb test: $(($(date +%s) - start)) s"
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
debs=()
for p in "${packages[@]}"; do debs+=("$(deb "$p")"); done
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=120 "${debs[@]}"
}
installed=1
if ! apt_install; then
  step "apt-get update (the archive's index is needed for the Depends), then install again"
  apt-get update -q
  apt_install
fi
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${db:Status-Status} ${Version}' "$p") == "installed $debver" ]] || fail "$p not installed"
done
ldconfig -p | grep -F "$soname (" >/dev/null || fail "$soname is not in the dynamic linker's cache"

unset CMAKE_PREFIX_PATH PKG_CONFIG_PATH LD_LIBRARY_PATH
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache

# The consumer must find the installed library, not the build tree's.
uses_installed() {
  local libs
  libs=$(ldd "$1")
  # ldd may name it through /lib, which is /usr/lib on a merged-/usr system (Debian 12).
  loaded=$(awk -v so="$soname" '$1 == so && $2 == "=>" { print $3 }' <<<"$libs")
  [[ -n $loaded && $(realpath "$loaded") == $(realpath "$libdir/$soname") ]] ||
    { echo "$libs"; fail "$1 does not load $libdir/$soname"; }
}
if [[ -n $cli_pkg ]]; then
  step "redlock --version"
  [[ $(command -v redlock) == /usr/bin/redlock ]] || fail "redlock is not /usr/bin/redlock on PATH"
  said=$(redlock --version)
  echo "$said"
  [[ $said == "redlock $version "* ]] || fail "redlock --version"
  uses_installed /usr/bin/redlock
fi

step "find_package(redlock CONFIG REQUIRED) against the installed packages"
cmake -S "$consumer" -B "$work/find_package" "${gen[@]}" -DREDLOCK_CONSUME=find_package \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >/dev/null
found=$(sed -n 's/^redlock_DIR:PATH=//p' "$work/find_package/CMakeCache.txt")
[[ $found == "$libdir/cmake/redlock" ]] || fail "find_package found redlock in '$found'"
cmake --build "$work/find_package"
"$work/find_package/consumer"
uses_installed "$work/find_package/consumer"

step "pkg-config --cflags --libs redlock against the installed packages"
[[ $(pkg-config --variable=pcfiledir redlock) == "$libdir/pkgconfig" ]] || fail "pkg-config found another redlock.pc"
[[ $(pkg-config --modversion redlock) == "$version" ]] || fail "redlock.pc version"
flags=$(pkg-config --cflags --libs redlock)
echo "$flags"
# shellcheck disable=SC2086  # the flags are words
c++ -std=c++20 "$consumer/main.cpp" -o "$work/pkg-config-consumer" $flags
"$work/pkg-config-consumer"
uses_installed "$work/pkg-config-consumer"

step "the packages install, and their files serve both consumers and the tool"
