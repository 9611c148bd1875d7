#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Configures and builds one preset (default: release), with ccache when it is there.
# Usage: scripts/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$(date +%s)
cmake --preset "${preset}" "${launcher[@]}" >/dev/null
cmake --build --preset "${preset}"
echo "=== preset ${preset}: build $(($(date +%s) - start)) s"
