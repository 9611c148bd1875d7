#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Runs the peer drivers against the masters redlock_bench started (same masters, same run).

redlock_bench calls this with REDLOCK_BENCH_MASTERS and REDLOCK_BENCH_SLOW_MASTERS set (host:port
lists; in the slow list, two of the five go through +50 ms proxies). Results go to OUT/peers/.
Usage: run_peers.py OUT_DIR [--quick] [--only a,b,c,d]
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


def main() -> int:
    out = Path(sys.argv[1]) / "peers"
    quick = "--quick" in sys.argv
    only = set(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv[:-1] else {"a", "b", "c", "d"}
    masters = os.environ["REDLOCK_BENCH_MASTERS"]
    slow = os.environ["REDLOCK_BENCH_SLOW_MASTERS"]
    cycles = "2000" if quick else "5000"
    seconds = "2" if quick else "3"
    for lib in DRIVERS:
        if "a" in only:
            run(lib, "a", out / f"{lib}_a.json", masters, "--cycles", cycles)
        for c in (1, 16, 64, 256, 1024) if "b" in only else ():
            for ap in ("0", "1"):
                run(lib, "b", out / f"{lib}_b_{c}_{ap}.json", masters, "--concurrency", str(c), "--seconds", seconds,
                    "--autopipeline", ap)
        for r in range(3) if "c" in only else ():
            run(lib, "c", out / f"{lib}_c_{r}.json", masters, "--seconds", "2")
        if "d" in only:
            # A peer that waits for every master pays the +50 ms on every cycle: fewer cycles suffice.
            d_cycles = cycles if lib == "node-redlock" else "300"
            run(lib, "d", out / f"{lib}_d.json", slow, "--cycles", d_cycles, "--warmup", "50")
    return 0


if __name__ == "__main__":
    sys.exit(main())
