#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Runs the peer drivers against the masters redlock_bench started (same masters, same run).

redlock_bench calls this right after each of its scenarios a, b, c and d, with
REDLOCK_BENCH_SCENARIO set to that scenario (only it is run then) and REDLOCK_BENCH_MASTERS set
(and, for d, REDLOCK_BENCH_SLOW_MASTERS, in which two of the five go through +50 ms proxies);
host:port lists. Results go to OUT_DIR/peers/.
Usage: run_peers.py OUT_DIR [--quick] [--only a,b,c,d] [--c-runs R=3]
"""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVERS = {"node-redlock": "node-redlock.mjs", "redlock-universal": "redlock-universal.mjs"}


def run(driver: str, scenario: str, out: Path, masters: str, *extra: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["node", str(HERE / DRIVERS[driver]), "--masters", masters, "--scenario", scenario, "--json", str(out), *extra]
    print("  " + " ".join(cmd[1:3] + cmd[5:7] + list(extra)), flush=True)
    # A peer that fails or hangs is reported in its JSON (the drivers bound their own run time);
    # it must not stop the comparison.
    subprocess.run(cmd, check=False, timeout=600)


def option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv[:-1] else default


def main() -> int:
    out = Path(sys.argv[1]) / "peers"
    quick = "--quick" in sys.argv
    only = set(option("--only", "a,b,c,d").split(","))
    if os.environ.get("REDLOCK_BENCH_SCENARIO"):
        only &= {os.environ["REDLOCK_BENCH_SCENARIO"]}
    c_runs = int(option("--c-runs", "3"))
    masters = os.environ["REDLOCK_BENCH_MASTERS"]
    cycles = "2000" if quick else "5000"
    seconds = "2" if quick else "3"
    # The libraries take turns scenario by scenario, so that neither gets all of a busy moment.
    if "a" in only:
        for lib in DRIVERS:
            run(lib, "a", out / f"{lib}_a.json", masters, "--cycles", cycles)
    for c in (1, 16, 64, 256, 1024) if "b" in only else ():
        for lib in DRIVERS:
            for ap in ("0", "1"):
                run(lib, "b", out / f"{lib}_b_{c}_{ap}.json", masters, "--concurrency", str(c), "--seconds", seconds,
                    "--autopipeline", ap)
    for r in range(c_runs) if "c" in only else ():
        for lib in DRIVERS:
            run(lib, "c", out / f"{lib}_c_{r}.json", masters, "--seconds", "2")
    if "d" in only:
        slow = os.environ["REDLOCK_BENCH_SLOW_MASTERS"]
        for lib in DRIVERS:
            # A peer that waits for every master pays the +50 ms on every cycle: fewer cycles suffice.
            d_cycles = cycles if lib == "node-redlock" else ("100" if quick else "300")
            run(lib, "d", out / f"{lib}_d.json", slow, "--cycles", d_cycles, "--warmup", "50")
    return 0


if __name__ == "__main__":
    sys.exit(main())
