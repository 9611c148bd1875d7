#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Fails when a C++ file in the repository differs from what .clang-format makes of it, and names
# the files. `scripts/check-format.sh --fix` rewrites them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]})); then
  echo "not formatted with .clang-format (run scripts/check-format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format: ${#files[@]} files as .clang-format has them"
# Every source file says its license (LICENSE: the Boost Software License).
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.sh' '*.py' '*.mjs' '*CMakeLists.txt' '*.cmake' \
  '*.cmake.in' .ci/run)
missing=()
for f in "${sources[@]}"; do
  head -n 3 "$f" | grep -q 'SPDX-License-Identifier: BSL-1.0' || missing+=("$f")
done
if ((${#missing[@]})); then
  echo "no SPDX-License-Identifier line in the first three lines:"
  printf '  %s\n' "${missing[@]}"
  exit 1
fi
echo "license: ${#sources[@]} files carry the SPDX line"
