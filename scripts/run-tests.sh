#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Builds and runs every test (unit and integration, against real redis-server processes that the
# tests start themselves). Usage: scripts/run-tests.sh [PRESET...]   (default: dev; also asan, tsan,
# deb: each preset runs the tests that find bugs there, docs/design.md "Tests and CI")
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

presets=("$@")
((${#presets[@]})) || presets=(dev)
for preset in "${presets[@]}"; do
  echo "=== preset ${preset}: configure, build, test"
  start=$(date +%s)
  cmake --preset "${preset}" "${launcher[@]}" >/dev/null
  cmake --build --preset "${preset}"
  built=$(date +%s)
  ctest --preset "${preset}"
  echo "=== preset ${preset}: build $((built - start)) s, tests $(($(date +%s) - built)) s"
done
