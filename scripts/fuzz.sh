#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Builds the libFuzzer targets with clang and runs each for a bounded time on a scratch copy of
# its corpus in the repo. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! command -v clang++ >/dev/null; then
  echo "clang++ not found: fuzzing skipped"
  exit 0
fi
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset fuzz "${launcher[@]}" >/dev/null
# The fuzz targets alone: they build the parts of the library they exercise (test/fuzz/CMakeLists.txt).
cmake --build --preset fuzz --target resp_parser_fuzz read_path_fuzz
for target in resp_parser read_path; do
  work=$(mktemp -d)
  cp -r "test/fuzz/corpus/${target}/." "${work}/"
  echo "=== fuzzing ${target} for ${seconds} s"
  "build/fuzz/test/fuzz/${target}_fuzz" -max_total_time="${seconds}" -print_final_stats=1 "${work}" 2>&1 | tail -n 15
  rm -rf "${work}"
done
