#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Builds a tiny separate project (test/package/consumer) against redlock-asio the ways users do:
# the installed CMake package, the installed pkg-config file, add_subdirectory (configured only)
# and FetchContent. Each consumer built runs once and must report the outage of its unreachable
# master. The consumer uses a deprecated Asio interface: the library must not impose
# BOOST_ASIO_NO_DEPRECATED on its users.
# Usage: package_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$(realpath "$1")
build=$(realpath "$2")
work=$3
rm -rf "$work"
mkdir -p "$work"
work=$(realpath "$work")
consumer=$src/test/package/consumer
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# CMake reads this variable from the environment for new build trees.
command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache

step() { echo "=== package test: $*"; }

step "cmake --install into a private prefix"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/redlock/redlock.hpp"
test -f "$work/prefix/include/redlock/version.hpp"
# A shared library (BUILD_SHARED_LIBS) is installed without a run path, as packages want it: the
# programs that cmake has not given one find it through LD_LIBRARY_PATH.
pc_dir=$(dirname "$(find "$work/prefix" -name redlock.pc | head -n1)")
libdir=$(dirname "$pc_dir")
# The tool is installed when the build tree has it (REDLOCK_CLI, on by default).
if [[ -f "$build/tools/redlock" ]]; then
  LD_LIBRARY_PATH="$libdir" "$work/prefix/bin/redlock" --version
fi

step "each installed header compiles on its own, with and without BOOST_ASIO_NO_DEPRECATED"
"$src/test/package/check_headers.sh" "$work/prefix/include"

step "find_package(redlock CONFIG REQUIRED) against the installed package"
cmake -S "$consumer" -B "$work/find_package" "${gen[@]}" -DREDLOCK_CONSUME=find_package \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/find_package"
"$work/find_package/consumer"

step "pkg-config --cflags --libs redlock"
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs redlock)
# shellcheck disable=SC2086  # the flags are words
c++ -std=c++20 "$consumer/main.cpp" -o "$work/pkg-config-consumer" $flags
LD_LIBRARY_PATH="$libdir" "$work/pkg-config-consumer"

step "add_subdirectory (configured, not built)"
# FetchContent below adds the library the same way, from fewer files, and builds it; building it
# here too would only compile the same sources with the same flags a second time (a minute or
# more of the suite). What add_subdirectory of the whole tree adds is checked here: it configures,
# and as a subproject it brings the library and its alias but none of its tests, tools, examples or
# benchmarks (the consumer's CMakeLists.txt checks both at configure time).
cmake -S "$consumer" -B "$work/subdirectory" "${gen[@]}" -DREDLOCK_CONSUME=subdirectory \
  -DREDLOCK_SOURCE_DIR="$src" >/dev/null

step "FetchContent from a source archive"
# Only what a release archive would hold; the consumer must not need the tests or the tools.
tar -C "$src" -czf "$work/redlock.tar.gz" CMakeLists.txt cmake include src
cmake -S "$consumer" -B "$work/fetchcontent" "${gen[@]}" -DREDLOCK_CONSUME=fetchcontent \
  -DREDLOCK_URL="$work/redlock.tar.gz" >/dev/null
cmake --build "$work/fetchcontent"
"$work/fetchcontent/consumer"

size=$(cat "$consumer/CMakeLists.txt" "$consumer/main.cpp" | wc -l)
step "all four ways work; the consumer project is ${size} lines (CMakeLists.txt + main.cpp)"
