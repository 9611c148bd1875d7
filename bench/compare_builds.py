#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Two builds of the library, measured side by side: the same scenarios, interleaved pair by pair
(before, after, before, after, ...), so that a busy moment of the shared machine lands on both
builds rather than on one. Prints, for each figure, both builds' medians with their ranges and the
median of the after ÷ before ratios taken within each pair, and writes every run's JSON under OUT.

Usage: bench/compare_builds.py BEFORE_BENCH_DIR AFTER_BENCH_DIR OUT [--pairs N=3]
                               [--only a,f,c] [--floor-bench BIN]

BEFORE_BENCH_DIR, AFTER_BENCH_DIR: the `bench` directories of two release builds (for an older
commit: `git worktree add ../before COMMIT`, then build its release preset there). Both builds'
own programs run, so an older build is measured by its own benchmark code; the scenarios used are
the ones whose flags and JSON fields did not change:
  a  redlock_bench --only a (lock+unlock, sequential) with the independent floor right before it
     (--floor-bench: the after build's floor_bench by default, the same floor for both)
  f  keep_alive_bench (10,000 kept-alive locks, 30 s)
  c  redlock_bench --only c --contention-runs 1 (16 contenders, the library's defaults)
The deterministic counts (callgrind, strace) need no pairs: run `bench/report.py cycle-cost` and
`bench/report.py syscalls` once with each build's binaries.
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import get, mr, ratios  # noqa: E402 (the page's own median-and-range formatting)

SCENARIOS = {
    "a": lambda bench, floor, out: [f"{bench}/redlock_bench", "--only", "a", "--cycles", "5000", "--json",
                                    str(out / "redlock_bench.json"), "--floor-bench", floor],
    "f": lambda bench, floor, out: [f"{bench}/keep_alive_bench", "--locks", "10000", "--seconds", "30", "--json",
                                    str(out / "keep_alive_bench.json")],
    "c": lambda bench, floor, out: [f"{bench}/redlock_bench", "--only", "c", "--contention-runs", "1", "--seconds",
                                    "2", "--json", str(out / "redlock_bench.json")],
}


def figures(scenario: str, out: Path) -> dict:
    """The figures of one run, by name (None when the build's JSON lacks one)."""
    if scenario == "f":
        d = json.loads((out / "keep_alive_bench.json").read_text())
        return {
            "(f) CPU per extension (µs)": d.get("cpu_us_per_extension"),
            "(f) heap per lock at the peak (KiB)": d.get("kib_per_lock"),
            "(f) heap per lock once taken (KiB)": d.get("kib_per_lock_taken"),
            "(f) lost": d.get("lost"),
        }
    d = json.loads((out / "redlock_bench.json").read_text())
    if scenario == "a":
        return {
            "(a) lock+unlock p50 (µs)": get(d, "a", "lock_unlock_us", "p50"),
            "(a) lock+unlock p99 (µs)": get(d, "a", "lock_unlock_us", "p99"),
            "(a) client CPU per cycle (µs)": get(d, "a", "cpu_us_per_cycle"),
            "(a) ÷ independent floor (p50)": get(d, "a_vs_floor_bench", "ratio_p50"),
        }
    runs = get(d, "c", "runs") or []
    return {
        "(c) hand-overs/s": statistics.median(r["handovers_per_s"] for r in runs) if runs else None,
        "(c) fairness min ÷ mean": statistics.median(r["fairness"] for r in runs) if runs else None,
        "(c) release → next grant p50 (quorum round trips)": get(d, "c", "handover_p50_in_rtt"),
        "(c) failures": sum(r.get("failures", 0) for r in runs) if runs else None,
    }


def summary(values: list) -> str:
    """Median and range, with two decimals for the small figures (ratios, µs per extension)."""
    v = [x for x in values if x is not None]
    return mr(v, ".2f" if v and statistics.median(v) < 10 else ".0f")


def main() -> int:
    args = sys.argv[1:]
    if len(args) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    before, after, out = args[0], args[1], Path(args[2])
    pairs, only, floor = 3, ["a", "f", "c"], f"{args[1]}/floor_bench"
    rest = args[3:]
    for i in range(0, len(rest) - 1, 2):
        if rest[i] == "--pairs":
            pairs = int(rest[i + 1])
        elif rest[i] == "--only":
            only = rest[i + 1].split(",")
        elif rest[i] == "--floor-bench":
            floor = rest[i + 1]
    if any(s not in SCENARIOS for s in only):
        print(f"--only takes {','.join(SCENARIOS)}", file=sys.stderr)
        return 2
    results = {"before": {}, "after": {}}
    for k in range(1, pairs + 1):
        for scenario in only:
            for label, bench in (("before", before), ("after", after)):
                run_dir = out / f"pair{k}" / label / scenario
                run_dir.mkdir(parents=True, exist_ok=True)
                cmd = SCENARIOS[scenario](bench, floor, run_dir)
                print(f"=== pair {k}, {label}, ({scenario}): {' '.join(cmd)}", flush=True)
                with open(run_dir / "stdout.txt", "w") as log:
                    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
                if rc != 0:
                    print(f"    exited with {rc}; see {run_dir / 'stdout.txt'}", flush=True)
                for name, value in figures(scenario, run_dir).items():
                    results[label].setdefault(name, []).append(value)
    lines = [f"{pairs} interleaved pairs; before: {before}, after: {after}", "",
             "| figure | before | after | after ÷ before, per pair |", "| --- | --- | --- | --- |"]
    for name in results["after"]:
        b, a = results["before"].get(name, []), results["after"][name]
        per_pair = ratios(zip(a, b))
        lines.append(f"| {name} | {summary(b)} | {summary(a)} | {summary(per_pair)} |")
    table = "\n".join(lines)
    print(table)
    (out / "compare.md").write_text(table + "\n")
    (out / "compare.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
