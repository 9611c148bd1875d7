#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Long runs of the script model (script_model_test) and the fleet simulation (fleet_sim_test):
# more seeds and more steps than CI's short runs, against real redis-server processes.
# Prints each kind's seeds, steps, steps per second and violations (0 expected).
#
# Usage: bench/model_run.sh [BUILD_DIR] [SEEDS] [MODEL_STEPS] [SIM_STEPS]
#        (defaults: build/dev, 40 seeds, 2000 model steps, 50000 simulation steps)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
seeds=${2:-40}
model_steps=${3:-2000}
sim_steps=${4:-50000}
[ -x "$build/test/script_model_test" ] && [ -x "$build/test/fleet_sim_test" ] || {
  echo "build the tests first: cmake --build --preset dev" >&2
  exit 2
}
status=0
REDLOCK_MODEL_SEEDS=$seeds REDLOCK_MODEL_STEPS=$model_steps \
  "$build/test/script_model_test" --gtest_filter='kinds/*' | grep -E '^model|FAILED|kind .* seed' || status=1
REDLOCK_SIM_SEEDS=$seeds REDLOCK_SIM_STEPS=$sim_steps \
  "$build/test/fleet_sim_test" --gtest_filter='scenarios/*' | grep -E '^sim|FAILED|seed .* step' || status=1
exit $status
