#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# The safety suite's two hazard schedules (test/safety/safety_test.cpp, safety_hazards.*), each with
# the hazard guards on and off, run RUNS times: rolling kill -9 with an immediate restart without
# persistence, and rolling forward wall-clock jumps (> ttl), both on two of five masters at a time.
# Prints the overlaps (and sections, past-validity sections) of every run from the rows the tests
# append to safety_report.md. Guard on must show 0 overlaps; guard off usually shows some.
#
# Usage: bench/hazard_schedules.sh [BUILD_DIR] [RUNS]   (defaults: build/dev, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
runs=${2:-3}
binary=$(realpath "$build/test/safety_test" 2>/dev/null || true)
[ -x "$binary" ] || {
  echo "build the safety suite first: cmake --build --preset dev --target safety_test redlock_worker" >&2
  exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
# Own directory: the tests append their rows to ./safety_report.md.
(cd "$work" && nice "$binary" --gtest_filter='safety_hazards.*' --gtest_repeat="$runs" >"$work/log.txt" 2>&1) || {
  status=1
  grep -E '^\[  FAILED  \]|Failure|violation:' "$work/log.txt" | sort | uniq -c >&2 || true
}
# A row: | name | sections | violations other than past validity | past validity | gap | counts |
awk -F'|' -v runs="$runs" '
  /guard (on|off) \|/ {
    name = $2; gsub(/^ +| +$/, "", name)
    if (!(name in n)) order[++names] = name
    k = ++n[name]
    overlaps[name, k] = $4 + 0; sections[name, k] = $3 + 0; late[name, k] = $5 + 0
    total[name] += $4 + 0
  }
  END {
    if (names == 0) { print "no rows in safety_report.md" > "/dev/stderr"; exit 1 }
    printf "%-78s", "schedule (each run: overlaps/sections/past validity)"
    for (k = 1; k <= runs; ++k) printf " %14s", "run " k
    printf " %8s\n", "overlaps"
    for (i = 1; i <= names; ++i) {
      name = order[i]
      printf "%-78s", name
      for (k = 1; k <= runs; ++k) {
        if (k <= n[name]) printf " %14s", overlaps[name, k] "/" sections[name, k] "/" late[name, k]
        else printf " %14s", "-"
      }
      printf " %8d\n", total[name]
    }
  }' "$work/safety_report.md" || status=1
exit $status
