#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Builds and runs the demonstration. With no arguments it starts its own local Redis masters;
# pass masters as host:port,host:port,... (or set REDLOCK_NODES) to use running ones.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset release "${launcher[@]}" >/dev/null
cmake --build --preset release --target demo
exec build/release/examples/demo "$@"
