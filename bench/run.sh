#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Runs every benchmark in one go on this machine: builds the release preset, installs the peers
# (npm ci), runs ours (the four-process scenario g included), the independent floor and the peers
# against the same five masters, the auto-extension cost, the instruction, allocation and
# scheduler-pass counts, and regenerates the plots. Results land in bench/results/.
# Usage: bench/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
scripts/install-deps.sh
command -v gnuplot >/dev/null && command -v strace >/dev/null || { sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_=sudo; $sudo_ apt-get install -y -qq gnuplot-nox valgrind strace >/dev/null; }
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset release "${launcher[@]}" >/dev/null
# redlock_worker: the safety suite's worker, which scenario (g) runs as four processes; delay_proxy:
# the delaying proxy that (d)'s two slow masters sit behind, one process each.
cmake --build --preset release --target redlock_bench redlock_worker delay_proxy keep_alive_bench connection_bench \
  cycle_cost_bench floor_bench kinds_bench tls_bench tls_floor_bench cluster_bench
mkdir -p bench/results
out=bench/results

peers=""
if command -v node >/dev/null && [ -f bench/peers/package-lock.json ]; then
  (cd bench/peers && npm ci --silent --no-audit --no-fund)
  peers="python3 bench/peers/run_peers.py ${out}"
  if [ "$quick" = 1 ]; then peers+=" --quick"; fi
fi

if [ "$quick" = 1 ]; then
  args=(--cycles 2000 --seconds 2 --contention-runs 3 --g-seconds 10 --g-no-fair-seconds 10)
  ka=(--locks 2000 --seconds 10)
  kinds=(--rounds 3 --cycles 200 --seconds 2)
else
  args=(--cycles 5000 --seconds 3 --contention-runs 10 --g-seconds 40 --g-no-fair-seconds 20)
  ka=(--locks 10000 --seconds 30)
  kinds=(--rounds 10 --cycles 300 --seconds 5)
fi
# --floor-bench: the independent floor (no redlock code) on the same masters, right before (a).
# --delay-proxy: the out-of-process proxy in front of (d)'s slow masters (also the peers' (d)).
build/release/bench/redlock_bench "${args[@]}" --json "${out}/redlock_bench.json" \
  --floor-bench build/release/bench/floor_bench --delay-proxy build/release/bench/delay_proxy \
  ${peers:+--hold-for-peers "$peers"}
build/release/bench/keep_alive_bench "${ka[@]}" --json "${out}/keep_alive_bench.json"
build/release/bench/connection_bench --json "${out}/connection_bench.json"
build/release/bench/kinds_bench "${kinds[@]}" --json "${out}/kinds_bench.json"
python3 bench/report.py cycle-cost build/release/bench/cycle_cost_bench "${out}"
python3 bench/report.py cycle-cost-kinds build/release/bench/cycle_cost_bench "${out}"
# Syscalls per lock+unlock on the client thread, ours next to the independent floor.
python3 bench/report.py syscalls build/release/bench/cycle_cost_bench build/release/bench/floor_bench "${out}"
# TLS next to plain TCP on the same five servers.
if [ "$quick" = 1 ]; then tls=(--rounds 2 --cycles 1000); else tls=(--rounds 8 --cycles 3000); fi
build/release/bench/tls_bench latency "${tls[@]}" --json "${out}/tls_latency.json"
python3 bench/report.py tls-cost build/release/bench/tls_bench "${out}"
# Cluster masters: 3 plain masters, then 3 clusters of 1, 2 and 3 shards.
if [ "$quick" = 1 ]; then cb=(--seconds 1); else cb=(--seconds 3); fi
build/release/bench/cluster_bench "${cb[@]}" --json "${out}/cluster_bench.json"
python3 bench/report.py "${out}"
