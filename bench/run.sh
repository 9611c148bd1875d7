#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Runs every benchmark in one go on this machine: builds the release preset, installs the peers
# (npm ci), runs ours (the four-process scenario g included), the independent floor and the peers
# against the same five masters, the auto-extension cost, one connection, the lock kinds and the
# cluster fleets, N times interleaved: run 1 of every program, then run 2 of every program, ...,
# so that a busy moment of the shared machine does not land on one configuration only. Then, once,
# the instruction, allocation and scheduler-pass counts (callgrind: deterministic), the system
# calls (N interleaved runs of their own) and TLS (its own interleaved rounds), and the report:
# the median of the N runs of every figure with its range, the plots.
#
# Usage: bench/run.sh [--runs N] [--quick] [--build DIR] [--out DIR]
#   --runs N     runs of each program (3 by default, 2 with --quick)
#   --quick      a short smoke run: shorter scenarios; its figures are not for the page
#   --build DIR  an existing, configured build directory to build in and run from, instead of
#                configuring and building the release preset in build/release
#   --out DIR    where the results go (bench/results by default): run K's raw results in
#                DIR/runK/, the rest and summary.md in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
runs=""
build=""
out=bench/results
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --runs) runs="$2"; shift ;;
    --build) build="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "usage: bench/run.sh [--runs N] [--quick] [--build DIR] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$runs" ]; then runs=3; [ "$quick" = 1 ] && runs=2; fi
if ! [ "$runs" -ge 1 ] 2>/dev/null; then echo "--runs needs a number >= 1" >&2; exit 2; fi
started=$(date +%s)

scripts/install-deps.sh
command -v gnuplot >/dev/null && command -v strace >/dev/null || { sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_=sudo; $sudo_ apt-get install -y -qq gnuplot-nox valgrind strace >/dev/null; }
# redlock_worker: the safety suite's worker, which scenario (g) runs as four processes; delay_proxy:
# the delaying proxy that (d)'s two slow masters sit behind, one process each.
targets=(redlock_bench redlock_worker delay_proxy keep_alive_bench connection_bench cycle_cost_bench floor_bench
  kinds_bench tls_bench tls_floor_bench cluster_bench)
if [ -z "$build" ]; then
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake --preset release "${launcher[@]}" >/dev/null
  cmake --build --preset release --target "${targets[@]}"
  build=build/release
else
  cmake --build "$build" --target "${targets[@]}"
fi
bin="${build}/bench"
mkdir -p "$out"
# The runs of an earlier layout or count would mix with these ones; git keeps them.
rm -rf "${out}"/run[0-9]* "${out}/peers" "${out}/g" "${out}/redlock_bench.json" "${out}/floor_bench.json" \
  "${out}/keep_alive_bench.json" "${out}/connection_bench.json" "${out}/kinds_bench.json" "${out}/cluster_bench.json"

peers=""
if command -v node >/dev/null && [ -f bench/peers/package-lock.json ]; then
  (cd bench/peers && npm ci --silent --no-audit --no-fund)
  peers="python3 bench/peers/run_peers.py"
fi

if [ "$quick" = 1 ]; then
  args=(--cycles 2000 --seconds 2 --g-seconds 10 --g-no-fair-seconds 10)
  c_total=3 kinds_total=3 peers_c_total=2
  ka=(--locks 2000 --seconds 10)
  conn=(--seconds 1)
  kinds=(--cycles 200 --seconds 2)
  cb=(--seconds 1)
  tls=(--rounds 2 --cycles 1000)
else
  args=(--cycles 5000 --seconds 3 --g-seconds 40 --g-no-fair-seconds 20)
  c_total=10 kinds_total=10 peers_c_total=3
  ka=(--locks 10000 --seconds 30)
  conn=(--seconds 3)
  kinds=(--cycles 300 --seconds 5)
  cb=(--seconds 3)
  tls=(--rounds 8 --cycles 3000)
fi
# Run K's share of TOTAL repetitions spread over the runs (K = 1..runs): 10 over 3 is 4, 3, 3.
share() { local total=$1 k=$2; if [ "$k" -le "$total" ]; then echo $(((total - k) / runs + 1)); else echo 0; fi; }

for ((k = 1; k <= runs; k++)); do
  r="${out}/run${k}"
  mkdir -p "$r"
  echo "=== run ${k} of ${runs} -> ${r}"
  # (c): the configurations take turns inside redlock_bench, and its runs are spread over ours.
  # --ceiling-runs 1: one round of the ceiling's settings per run, so that ours ÷ ceiling is per run.
  # --floor-bench: the independent floor (no redlock code) on the same masters, right before (a).
  # --delay-proxy: the out-of-process proxy in front of (d)'s slow masters (also the peers' (d)).
  # --hold-for-peers: the peers measure each scenario right after ours, on the same masters.
  peers_cmd=""
  if [ -n "$peers" ]; then
    peers_cmd="${peers} ${r} --c-runs $(share "$peers_c_total" "$k")"
    if [ "$quick" = 1 ]; then peers_cmd+=" --quick"; fi
  fi
  "${bin}/redlock_bench" "${args[@]}" --contention-runs "$(share "$c_total" "$k")" --ceiling-runs 1 \
    --json "${r}/redlock_bench.json" --floor-bench "${bin}/floor_bench" --delay-proxy "${bin}/delay_proxy" \
    ${peers_cmd:+--hold-for-peers "$peers_cmd"}
  "${bin}/keep_alive_bench" "${ka[@]}" --json "${r}/keep_alive_bench.json"
  "${bin}/connection_bench" "${conn[@]}" --json "${r}/connection_bench.json"
  kr=$(share "$kinds_total" "$k")
  "${bin}/kinds_bench" "${kinds[@]}" --rounds "$((kr > 0 ? kr : 1))" --json "${r}/kinds_bench.json"
  # Cluster masters: 3 plain masters, then 3 clusters of 1, 2 and 3 shards.
  "${bin}/cluster_bench" "${cb[@]}" --json "${r}/cluster_bench.json"
done

# Deterministic counts: one run each.
python3 bench/report.py cycle-cost "${bin}/cycle_cost_bench" "${out}"
python3 bench/report.py cycle-cost-kinds "${bin}/cycle_cost_bench" "${out}"
# Syscalls per lock+unlock on the client thread, ours next to the independent floor, interleaved.
python3 bench/report.py syscalls "${bin}/cycle_cost_bench" "${bin}/floor_bench" "${out}" --runs "$((runs > 3 ? runs : 3))"
# TLS next to plain TCP on the same five servers: its rounds alternate plain and TLS.
"${bin}/tls_bench" latency "${tls[@]}" --floor-bench "${bin}/floor_bench" --json "${out}/tls_latency.json"
python3 bench/report.py tls-cost "${bin}/tls_bench" "${out}"
python3 bench/report.py "${out}"
echo "bench/run.sh: ${runs} runs in $(($(date +%s) - started)) s"
