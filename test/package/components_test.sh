#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# What each install component of a build tree holds, and what a shared library exports. Installs
# the tree by component into private prefixes and checks, for the build's kind of library:
#   static (the default): `lib` installs nothing (an archive only serves the link, so it is part of
#     `dev`); `dev` holds libredlock.a, the headers, the CMake package and redlock.pc; the consumer
#     project (test/package/consumer) builds from the `dev` prefix alone and runs.
#   shared (BUILD_SHARED_LIBS=ON): `lib` holds libredlock.so.X.Y.Z and the SONAME link
#     libredlock.so.X.Y, without a run path; `dev` the libredlock.so link, the headers, the CMake
#     package and redlock.pc; every exported symbol of ours is something the installed headers
#     declare (none of the library's src/ internals), none is fmt's or OpenSSL's, and Asio's error
#     categories stay one object shared with the user; the consumer builds against both components
#     and runs on the installed library.
# Usage: components_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$(realpath "$1")
build=$(realpath "$2")
work=$3
start=$(date +%s)
rm -rf "$work"
mkdir -p "$work"
work=$(realpath "$work")
consumer=$src/test/package/consumer
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# CMake reads this variable from the environment for new build trees.
command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache

step() { echo "=== components test: $*"; }
fail() {
  echo "components test: FAILED: $*" >&2
  exit 1
}

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
libdir=$(cache CMAKE_INSTALL_LIBDIR)
[[ -n $libdir ]] || fail "no CMAKE_INSTALL_LIBDIR in $build/CMakeCache.txt (REDLOCK_INSTALL off?)"
case $(cache BUILD_SHARED_LIBS | tr '[:lower:]' '[:upper:]') in
  ON | 1 | TRUE | YES | Y) kind=shared ;;
  *) kind=static ;;
esac
config=$(cache CMAKE_BUILD_TYPE | tr '[:upper:]' '[:lower:]')
config=${config:-noconfig}
version=$(for part in MAJOR MINOR PATCH; do
  sed -n "s/^#define REDLOCK_VERSION_${part} \([0-9]*\)$/\1/p" "$src/include/redlock/version.hpp"
done | paste -sd.)
soname=libredlock.so.${version%.*}

# install_component COMPONENT PREFIX
install_component() { cmake --install "$build" --component "$1" --prefix "$2" >/dev/null; }
# The files (and links) under a prefix. A build configured for Debian packages also installs each
# package's share/doc/<package>/copyright with its component: deb_test.sh checks those.
files_under() { (cd "$1" && find . ! -type d | sed 's|^\./||' | grep -v '^share/doc/' | sort); }
# expect PREFIX FILE...: the prefix holds exactly these files
expect() {
  local prefix=$1
  shift
  if [[ -d $prefix ]]; then files_under "$prefix" >"$work/got.txt"; else : >"$work/got.txt"; fi
  printf '%s\n' "$@" | sed '/^$/d' | sort >"$work/want.txt"
  diff -u "$work/want.txt" "$work/got.txt" || fail "$(basename "$prefix"): not the expected files (- missing, + extra)"
}
mapfile -t headers < <(cd "$src/include" && find redlock -type f | sed 's|^|include/|')
package=("$libdir/pkgconfig/redlock.pc" "$libdir/cmake/redlock/redlockConfig.cmake"
  "$libdir/cmake/redlock/redlockConfigVersion.cmake" "$libdir/cmake/redlock/redlockTargets.cmake"
  "$libdir/cmake/redlock/redlockTargets-$config.cmake")

# consume PREFIX: the consumer project through find_package against PREFIX, built and run
consume() {
  cmake -S "$consumer" -B "$work/consumer" "${gen[@]}" -DREDLOCK_CONSUME=find_package \
    -DCMAKE_PREFIX_PATH="$1" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >/dev/null
  found=$(sed -n 's/^redlock_DIR:PATH=//p' "$work/consumer/CMakeCache.txt")
  [[ $found == "$1/$libdir/cmake/redlock" ]] || fail "find_package found redlock in '$found'"
  cmake --build "$work/consumer" >/dev/null
  "$work/consumer/consumer"
}

step "a $kind library ($config), version $version, libdir $libdir"
install_component lib "$work/lib"
install_component dev "$work/dev"

if [[ $kind == static ]]; then
  step "lib: nothing (the archive is only needed to link: dev has it)"
  expect "$work/lib"
  step "dev: libredlock.a, headers, CMake package, redlock.pc"
  expect "$work/dev" "$libdir/libredlock.a" "${headers[@]}" "${package[@]}"
  step "the consumer, from the dev component alone"
  consume "$work/dev"
  step "passed in $(($(date +%s) - start)) s"
  exit 0
fi

step "lib: libredlock.so.$version and its SONAME link $soname"
expect "$work/lib" "$libdir/libredlock.so.$version" "$libdir/$soname"
so=$work/lib/$libdir/libredlock.so.$version
[[ -f $so && ! -L $so ]] || fail "libredlock.so.$version is not a file"
[[ $(readlink "$work/lib/$libdir/$soname") == "libredlock.so.$version" ]] || fail "$soname does not point at libredlock.so.$version"
dynamic=$(readelf -d "$so")
grep -F "Library soname: [$soname]" <<<"$dynamic" >/dev/null || fail "SONAME: $(grep -F soname <<<"$dynamic")"
if grep -E 'RPATH|RUNPATH' <<<"$dynamic"; then fail "the installed library carries a run path"; fi

step "dev: the libredlock.so link, headers, CMake package, redlock.pc"
expect "$work/dev" "$libdir/libredlock.so" "${headers[@]}" "${package[@]}"
[[ $(readlink "$work/dev/$libdir/libredlock.so") == "$soname" ]] || fail "libredlock.so does not point at $soname"

step "exports: only what the installed headers declare"
nm -D --defined-only "$so" | awk '{ print $NF }' | sort -u >"$work/exports.txt"
c++filt <"$work/exports.txt" >"$work/exports.demangled.txt"
total=$(wc -l <"$work/exports.txt")
# none_of WHAT PATTERN FILE: no line of FILE matches (grep -E)
none_of() {
  local found
  found=$(grep -E "$2" "$3" || true)
  [[ -z $found ]] || { head -n 5 <<<"$found" >&2; fail "$1's symbols are exported ($(wc -l <<<"$found"))"; }
}
none_of fmt 'fmt::' "$work/exports.demangled.txt"
none_of OpenSSL '^(SSL|EVP|OPENSSL|CRYPTO|BIO|X509|ERR|RAND|PEM)_' "$work/exports.txt"
# Ours: the symbols of namespace redlock (functions, objects, vtables, type_info, guards, thunks).
grep -E '^_Z(TV|TI|TS|GV|TH|TW|Z|Th[n]?[0-9]+_|Tv[n]?[0-9]+_[n]?[0-9]+_)?N[rVKOR]*7redlock' "$work/exports.txt" |
  c++filt >"$work/ours.txt" || true
ours=$(wc -l <"$work/ours.txt")
((ours > 0)) || fail "no symbol of namespace redlock is exported"
# Each becomes the names it is made of: "redlock::detail::logger::write(...) const" gives
# `logger` and `write`; every one that is not a namespace must be declared by an installed header
# (a class, struct or enum defined there, or a function or object declared there), looked up in
# the headers without their comments.
find "$work/dev/include/redlock" -name '*.hpp' -exec cat {} + | sed 's|//.*$||' >"$work/declared.txt"
mapfile -t namespaces < <(grep -oE '^[[:space:]]*namespace [a-z_:]+' "$work/declared.txt" |
  sed -E 's/^[[:space:]]*namespace //; s/::/\n/g' | sort -u)
sed -E 's/^(vtable|typeinfo|typeinfo name|guard variable|VTT|TLS init function|TLS wrapper function) for //;
        s/^(non-)?virtual thunk to //; s/operator[^a-zA-Z_ (]*/operator/g; s/\[abi:[a-z0-9]*\]//g' "$work/ours.txt" |
  sed -E ':a; s/<[^<>]*>//g; ta' | sed -E 's/\(.*//; s/.* //' >"$work/names.txt"
tr ':' '\n' <"$work/names.txt" | sed 's/^~//' | grep -vxE 'operator|' | sort -u |
  grep -vxFf <(printf '%s\n' "${namespaces[@]}") >"$work/components.txt" || true
undeclared=()
while read -r name; do
  grep -qE "(^|[^a-zA-Z0-9_])${name}(\[[^]]*\])?[[:space:]]*[({=]|(class|struct|union|enum)[^;(]*[[:space:]]${name}([[:space:]]|\{|$)" \
    "$work/declared.txt" || undeclared+=("$name")
done <"$work/components.txt"
if ((${#undeclared[@]})); then
  echo "exported, but no installed header declares: ${undeclared[*]}" >&2
  for name in "${undeclared[@]:0:5}"; do grep -m 3 -E "::${name}(::|\(|$)" "$work/ours.txt" >&2 || true; done
  fail "$((${#undeclared[@]})) internal names exported (of $ours symbols of ours, $total in all)"
fi
# Asio keeps the function-local objects of its error categories visible, so that the library and
# its user share one `asio::error::get_misc_category()` and the like: errors compare equal on both
# sides. With the symbol table at hand (not stripped), every one the library holds is exported.
categories() { grep -cE ' boost::asio::.*_category\(\)::instance$' || true; }
symtab=$(nm --defined-only -C "$so" 2>/dev/null || true)
if [[ -n $symtab ]]; then
  exported=$(nm -D --defined-only -C "$so" | categories)
  held=$(categories <<<"$symtab")
  ((exported == held)) ||
    fail "$((held - exported)) of Asio's error categories are not exported (BOOST_ASIO_DISABLE_VISIBILITY?)"
fi
echo "$total symbols exported, $ours of them of namespace redlock, made of $(wc -l <"$work/components.txt") names that include/redlock declares"

step "the consumer, against both components, on the installed library"
install_component lib "$work/both"
install_component dev "$work/both"
consume "$work/both"
loaded=$(ldd "$work/consumer/consumer" | awk -v so="$soname" '$1 == so && $2 == "=>" { print $3 }')
[[ -n $loaded && $(realpath "$loaded") == $(realpath "$work/both/$libdir/$soname") ]] ||
  fail "the consumer loads '$loaded', not $work/both/$libdir/$soname"
step "passed in $(($(date +%s) - start)) s"
