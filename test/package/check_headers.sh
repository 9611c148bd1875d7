#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Every installed header compiles on its own, in a translation unit that includes nothing else,
# both with and without BOOST_ASIO_NO_DEPRECATED: the library is built with the macro, but it is
# the user's choice, so no header may need it or break under it. Syntax checks only (no code is
# generated), two at a time: about a minute on two cores.
# Usage: check_headers.sh INCLUDE_DIR   (the directory holding redlock/)
set -euo pipefail
include=$(realpath "$1")
cxx=${CXX:-c++}

check() {   # check HEADER DEFINE...: one header, one set of definitions
  local header=$1
  shift
  if ! echo "#include <$header>" | "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Wshadow \
    -Werror -I"$include" "$@" -x c++ -; then
    echo "check_headers: <$header> does not compile on its own with: ${*:-(no definitions)}" >&2
    return 1
  fi
}
export -f check
export cxx include

mapfile -t headers < <(cd "$include" && find redlock -name '*.hpp' | sort)
((${#headers[@]} > 0)) || { echo "check_headers: no headers under $include/redlock" >&2; exit 1; }

# Each line: a header, then the definitions to try it with (none, or the macro).
for h in "${headers[@]}"; do
  printf '%s\n%s -DBOOST_ASIO_NO_DEPRECATED\n' "$h" "$h"
done | xargs -P 2 -L 1 bash -c 'check "$@"' check_headers
echo "check_headers: ${#headers[@]} headers compile on their own, with and without BOOST_ASIO_NO_DEPRECATED"
