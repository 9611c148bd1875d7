#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Benchmark report: ratios of ours to the peers, the floor and the ceiling, from bench/run.sh's runs.

  report.py RESULTS_DIR                  print every table of docs/benchmarks.md that bench/run.sh
                                            measures, each figure the median of the runs
                                            (RESULTS_DIR/run1, run2, ...; or RESULTS_DIR itself as
                                            one run, the layout before) with its range, ratios
                                            taken run by run; write RESULTS_DIR/summary.md and plots
  report.py cycle-cost BINARY RESULTS_DIR   instructions (callgrind), allocations and scheduler passes
                                            per lock+unlock
  report.py cycle-cost-kinds BINARY RESULTS_DIR   the same per lock kind, next to the plain
                                            lock; writes kinds_cost.json
  report.py tls-cost BINARY RESULTS_DIR [--floor FLOOR] [--rounds R]   instructions and
                                            allocations per lock+unlock over TLS next to plain TCP
                                            (tls_bench cost) and to the bare OpenSSL floor
                                            (tls_floor_bench, beside BINARY by default), then p50
                                            plain and TLS (RESULTS_DIR/tls_latency.json if there
                                            and no R given, else R rounds of tls_bench latency,
                                            3 by default); writes tls_cost.json
  report.py syscalls COST_BINARY FLOOR_BINARY RESULTS_DIR [--runs N=3]   syscalls per lock+unlock
                                            on the client thread, ours next to the independent floor
                                            (perf stat, strace -c without perf), N interleaved runs;
                                            writes syscalls.json
"""

import json
import os
import re
import shutil
import socket
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path

LIBS = ("node-redlock", "redlock-universal")
# redlock_bench's (c) configurations, in the order of the tables.
C_CONFIGS = ("c", "c_wake_only", "c_no_fair", "c_poll_2ms")


def c_config_name(key: str, c: dict) -> str:
    conf = c.get("config")
    if not conf:  # a JSON from before fair hand-over: retry settings only
        r = c.get("retry", {})
        return f"retry {r.get('base_ms', '?')}–{r.get('base_ms', 0) + r.get('jitter_ms', 0)} ms"
    r = conf["retry"]
    fair = "off" if not conf["fairness"] else "on, hand-over off" if conf.get("hand_over") is False else "on"
    return f"`{key}`: fair {fair}, retry {r['base_ms']}–{r['base_ms'] + r['jitter_ms']} ms"


def median(v):
    v = sorted(v)
    n = len(v)
    return 0 if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


KINDS = ("plain", "fence", "reentrant", "read", "write", "semaphore", "multi1", "multi4", "multi16", "cluster")


# The C library's allocation entry points, counted as callgrind's calls into them (the other
# functions of the set are not counted when they call one another: realloc(NULL) is one malloc).
ALLOC_FUNCTIONS = ("malloc", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign")


def callgrind_allocations(path: Path) -> int:
    """Calls into the C allocator in a callgrind output file (C++ and OpenSSL allocations alike)."""
    names, caller, total, pending = {}, None, 0, None
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            name = names.get(m.group(2), "")
            if m.group(1):
                pending = name
            else:
                caller = name
            continue
        if line.startswith("calls=") and pending is not None:
            if pending in ALLOC_FUNCTIONS and caller not in ALLOC_FUNCTIONS:
                total += int(line[6:].split()[0])
            pending = None
    return total


def tls_cost(binary: str, out: Path, floor: str = "", rounds: int | None = None) -> int:
    """Per lock+unlock over TLS: instructions and allocations next to plain TCP and to the bare
    OpenSSL floor (tls_floor_bench, beside BINARY unless named; left out when not built), by the
    two-length method; then the p50 of plain and TLS: RESULTS_DIR/tls_latency.json when it exists
    and ROUNDS is not given, else `tls_bench latency` for ROUNDS rounds (3 by default)."""
    out.mkdir(parents=True, exist_ok=True)
    floor = floor or str(Path(binary).parent / "tls_floor_bench")
    rows = {}
    runs_of = {"plain": [binary, "cost", None, "plain"], "tls": [binary, "cost", None, "tls"]}
    if Path(floor).exists():
        runs_of["floor"] = [floor, None]
    else:
        print(f"no floor: {floor} is not built")
    for mode, argv in runs_of.items():
        runs = {}
        for n in (100, 600):
            cg = out / f"callgrind.tls.{mode}.{n}.out"
            cmd = [a if a is not None else str(n) for a in argv]
            # The floor counts its client's calls only; tls_bench zeroes the counts after its warm-up.
            toggle = ["--toggle-collect=floor_client_*"] if mode == "floor" else []
            res = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}"] + toggle + cmd,
                                 capture_output=True, text=True, check=True)
            instr = int(re.search(r"Collected : (\d+)", res.stderr).group(1))
            cxx = int(re.search(r"allocations=(\d+)", res.stdout).group(1))
            runs[n] = (instr, callgrind_allocations(cg), cxx)
            m = re.search(r"version=(\S+) cipher=(\S+)", res.stdout)
            if m:
                rows.setdefault("negotiated", f"{m.group(1)} {m.group(2)}")
            cg.unlink(missing_ok=True)
        rows[mode] = {"instructions_per_cycle": (runs[600][0] - runs[100][0]) / 500,
                      "allocations_per_cycle": (runs[600][1] - runs[100][1]) / 500,
                      # operator new for ours, OpenSSL's own counter for the floor
                      "counted_allocations_per_cycle": (runs[600][2] - runs[100][2]) / 500}
    plain, tls = rows["plain"], rows["tls"]
    fl = rows.get("floor", {"instructions_per_cycle": float("nan"), "allocations_per_cycle": float("nan"),
                            "counted_allocations_per_cycle": float("nan")})
    tls["instructions_vs_plain"] = tls["instructions_per_cycle"] / plain["instructions_per_cycle"]
    # What TLS adds to a cycle, against what the records cost OpenSSL alone.
    tls["added_instructions"] = tls["instructions_per_cycle"] - plain["instructions_per_cycle"]
    tls["added_vs_floor"] = tls["added_instructions"] / fl["instructions_per_cycle"]
    tls["vs_plain_plus_floor"] = tls["instructions_per_cycle"] / (plain["instructions_per_cycle"] +
                                                                  fl["instructions_per_cycle"])
    lat = out / "tls_latency.json"
    if rounds is None and not lat.exists():
        rounds = 3
    if rounds:
        floor_sockets = Path(binary).parent / "floor_bench"
        extra = ["--floor-bench", str(floor_sockets)] if floor_sockets.exists() else []
        subprocess.run([binary, "latency", "--rounds", str(rounds), "--cycles", "2000", "--json", str(lat)] + extra,
                       check=True, stdout=subprocess.DEVNULL)
    if lat.exists():
        j = json.loads(lat.read_text())
        rows["latency"] = {k: j[k] for k in ("rounds", "cycles", "median_p50_plain_us", "median_p50_tls_us",
                                             "median_tls_over_plain_p50", "tls_over_plain_p50")}
    print(f"negotiated: {rows.get('negotiated', '?')}")
    print(f"{'per lock+unlock':28} {'plain':>10} {'TLS':>10} {'TLS-plain':>10} {'floor':>10}")
    print(f"{'instructions':28} {plain['instructions_per_cycle']:10.0f} {tls['instructions_per_cycle']:10.0f} "
          f"{tls['added_instructions']:10.0f} {fl['instructions_per_cycle']:10.0f}")
    print(f"{'allocations (C allocator)':28} {plain['allocations_per_cycle']:10.1f} {tls['allocations_per_cycle']:10.1f} "
          f"{tls['allocations_per_cycle'] - plain['allocations_per_cycle']:10.1f} {fl['allocations_per_cycle']:10.1f}")
    print(f"{'allocations (operator new)':28} {plain['counted_allocations_per_cycle']:10.1f} "
          f"{tls['counted_allocations_per_cycle']:10.1f} "
          f"{tls['counted_allocations_per_cycle'] - plain['counted_allocations_per_cycle']:10.1f} {0.0:10.1f}")
    if "latency" in rows:
        la = rows["latency"]
        print(f"{'p50 us (median of rounds)':28} {la['median_p50_plain_us']:10.1f} {la['median_p50_tls_us']:10.1f}")
        r = la["tls_over_plain_p50"]
        print(f"TLS / plain p50 {la['median_tls_over_plain_p50']:.3f} (rounds {min(r):.3f}-{max(r):.3f})")
        f = [x for x in j.get("tls_over_floor_tls_p50", []) if x > 0]
        if f:
            fr = [t / p for t, p in zip(j["floor_p50_tls_us"], j["floor_p50_plain_us"]) if p > 0]
            la["floor_tls_over_plain_p50"] = statistics.median(fr)
            la["tls_over_floor_tls_p50"] = statistics.median(f)
            print(f"the socket floor's TLS / plain p50 {statistics.median(fr):.3f}; our TLS / the floor's TLS p50 "
                  f"{statistics.median(f):.3f} (rounds {min(f):.3f}-{max(f):.3f})")
    print(f"TLS / plain instructions {tls['instructions_vs_plain']:.2f}; TLS's addition / floor "
          f"{tls['added_vs_floor']:.2f}; TLS / (plain + floor) {tls['vs_plain_plus_floor']:.2f}")
    (out / "tls_cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def cycle_cost_kinds(binary: str, out: Path) -> int:
    """Instructions and allocations per lock+unlock of each kind, by the same two-length method."""
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for kind in KINDS:
        runs = {}
        for n in (100, 600):
            res = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.{kind}.{n}.out", binary,
                 str(n), kind], capture_output=True, text=True, check=True)
            instr = int(re.search(r"Collected : (\d+)", res.stderr).group(1))
            allocs = int(re.search(r"allocations=(\d+)", res.stdout).group(1))
            runs[n] = (instr, allocs)
            Path(f"{out}/callgrind.{kind}.{n}.out").unlink(missing_ok=True)
        rows[kind] = {"instructions_per_cycle": (runs[600][0] - runs[100][0]) / 500,
                      "allocations_per_cycle": (runs[600][1] - runs[100][1]) / 500}
    base = rows["plain"]["instructions_per_cycle"]
    for kind, r in rows.items():
        r["instructions_vs_plain"] = r["instructions_per_cycle"] / base
        print(f"{kind:10} {r['instructions_per_cycle']:9.0f} instructions ({r['instructions_vs_plain']:.2f}x plain), "
              f"{r['allocations_per_cycle']:5.1f} allocations per lock+unlock")
    (out / "kinds_cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def cycle_cost(binary: str, out: Path) -> int:
    """Runs the cost program under callgrind at two lengths; the difference is per-cycle cost."""
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for n in (100, 600):
        res = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.{n}.out", binary, str(n)],
            capture_output=True, text=True, check=True)
        instr = int(re.search(r"Collected : (\d+)", res.stderr).group(1))
        allocs = int(re.search(r"allocations=(\d+)", res.stdout).group(1))
        handlers = int(re.search(r"handlers=(\d+)", res.stdout).group(1))
        runs[n] = (instr, allocs, handlers)
    # Scheduler passes are counted exactly over the measured cycles, but depend a little on timing
    # (replies arriving together are drained in one strand pass): also take them from a native run.
    native = subprocess.run([binary, "5000"], capture_output=True, text=True, check=True)
    native_handlers = int(re.search(r"handlers=(\d+)", native.stdout).group(1))
    replies = 10  # SET + release on each of 5 masters
    per_cycle = {
        "instructions_per_cycle": (runs[600][0] - runs[100][0]) / 500,
        "allocations_per_cycle": (runs[600][1] - runs[100][1]) / 500,
        "scheduler_passes_per_cycle": native_handlers / 5000,
        "scheduler_passes_per_reply": native_handlers / 5000 / replies,
        "scheduler_passes_per_cycle_callgrind": runs[600][2] / 600,
    }
    (out / "cycle_cost.json").write_text(json.dumps(per_cycle, indent=2) + "\n")
    print(f"lock+unlock cycle: {per_cycle['instructions_per_cycle']:.0f} instructions, "
          f"{per_cycle['allocations_per_cycle']:.1f} heap allocations (callgrind, 5 masters); "
          f"{per_cycle['scheduler_passes_per_cycle']:.1f} scheduler passes "
          f"({per_cycle['scheduler_passes_per_reply']:.2f} per reply; "
          f"{per_cycle['scheduler_passes_per_cycle_callgrind']:.1f} under callgrind)")
    return 0


SYSCALLS = ("sendto", "recvfrom", "epoll_wait", "epoll_ctl", "getrandom", "timerfd_settime")


def perf_usable() -> bool:
    if not shutil.which("perf"):
        return False
    r = subprocess.run(["perf", "stat", "-i", "-x,", "-e", "raw_syscalls:sys_enter", "true"], capture_output=True,
                       text=True)
    return r.returncode == 0 and "not supported" not in r.stderr and "<not" not in r.stderr


def count_syscalls(cmd: list, perf: bool) -> dict:
    """Syscalls of the command's first thread only (not the masters it forks, not other threads)."""
    if perf:
        events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{s}" for s in SYSCALLS]
        args = ["perf", "stat", "-i", "-x,"]
        for e in events:
            args += ["-e", e]
        # Failed reads: recvfrom returning an error (EAGAIN, in practice).
        args += ["-e", "syscalls:sys_exit_recvfrom", "--filter", "ret < 0"]
        r = subprocess.run(args + ["--"] + cmd, capture_output=True, text=True, check=True)
        counts = {}
        for line in r.stderr.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                counts[f[2]] = int(f[0])
        out = {"total": counts["raw_syscalls:sys_enter"], "recvfrom_failed": counts["syscalls:sys_exit_recvfrom"]}
        for s in SYSCALLS:
            out[s] = counts[f"syscalls:sys_enter_{s}"]
        return out
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as t:
        subprocess.run(["strace", "-c", "-o", t.name] + cmd, capture_output=True, text=True, check=True)
        text = t.read()
    out = {s: 0 for s in SYSCALLS}
    out["recvfrom_failed"] = 0
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[-1] == "total":
            out["total"] = int(f[2])
        elif len(f) >= 5 and f[-1] in SYSCALLS:
            out[f[-1]] = int(f[3])
            if f[-1] == "recvfrom" and len(f) == 6:
                out["recvfrom_failed"] = int(f[4])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def syscalls(cost_binary: str, floor_binary: str, out: Path, n_runs: int = 3) -> int:
    """Syscalls per lock+unlock (5 masters) on the client thread: ours (cycle_cost_bench) and the
    independent floor (floor_bench, on five masters started here), by the two-length method, the
    median of N_RUNS interleaved runs (every run is kept in syscalls.json)."""
    out.mkdir(parents=True, exist_ok=True)
    perf = perf_usable()
    if not perf and not shutil.which("strace"):
        print("syscalls: neither perf nor strace is installed; skipped")
        return 0
    ports = [free_port() for _ in range(5)]
    servers = [subprocess.Popen(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=subprocess.DEVNULL) for p in ports]
    try:
        for p in ports:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
        masters = ",".join(f"127.0.0.1:{p}" for p in ports)
        lengths = (1000, 4000)
        runs = {"ours": [], "floor": []}
        for _ in range(n_runs):
            for who in ("ours", "floor"):
                at = {}
                for n in lengths:
                    cmd = ([cost_binary, str(n)] if who == "ours" else
                           [floor_binary, "--masters", masters, "--cycles", str(n), "--json", os.devnull])
                    at[n] = count_syscalls(cmd, perf)
                runs[who].append({k: (at[lengths[1]][k] - at[lengths[0]][k]) / (lengths[1] - lengths[0])
                                  for k in at[lengths[0]]})
    finally:
        for s in servers:
            s.terminate()
        for s in servers:
            s.wait()
    result = {"tool": "perf stat" if perf else "strace -c", "runs": n_runs, "per_run": runs}
    for who, rs in runs.items():
        result[who] = {k: median([r[k] for r in rs]) for k in rs[0]}
        result[who + "_range"] = {k: [min(r[k] for r in rs), max(r[k] for r in rs)] for k in rs[0]}
    print(f"syscalls per lock+unlock, client thread, 5 masters ({result['tool']}, median of {n_runs}):")
    print(f"  {'':18}{'ours':>8}{'floor':>8}")
    for k in ("total",) + SYSCALLS + ("recvfrom_failed",):
        print(f"  {k:18}{result['ours'][k]:8.1f}{result['floor'][k]:8.1f}")
    (out / "syscalls.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def fmt_ratio(a, b):
    return f"{a / b:.2f}" if a and b else "n/a"


def num(v, spec: str) -> str:
    text = format(v, spec)
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text  # no "-0.0"


def mr(vals, spec: str = ".0f") -> str:
    """The median of a figure's runs with their range: "170 (160–185)"; one run: "170"."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    text = num(median(vals), spec)
    if len(vals) > 1:
        text += f" ({num(min(vals), spec)}–{num(max(vals), spec)})"
    return text


def runs_of(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def ratios(pairs):
    """Per-run ratios a / b of the runs where both are there."""
    return [a / b for a, b in pairs if a and b]


def get(d, *keys):
    """d[k1][k2]..., None where any is missing."""
    for k in keys:
        if not isinstance(d, (dict, list)):
            return None
        try:
            d = d[k]
        except (KeyError, IndexError, TypeError):
            return None
    return d


def run_dirs(out: Path) -> list:
    """RESULTS_DIR/run1, run2, ... (bench/run.sh), or RESULTS_DIR itself: one run's results."""
    dirs = [d for d in out.glob("run*") if d.is_dir() and d.name[3:].isdigit()]
    return sorted(dirs, key=lambda d: int(d.name[3:])) or [out]


def load_run(d: Path) -> dict:
    peers = {}
    for lib in LIBS:
        p = {"a": load(d / "peers" / f"{lib}_a.json"), "d": load(d / "peers" / f"{lib}_d.json"), "b": {}}
        for c in (1, 16, 64, 256, 1024):
            for ap in ("0", "1"):
                p["b"][(c, ap)] = load(d / "peers" / f"{lib}_b_{c}_{ap}.json")
        p["c"] = [load(f) for f in sorted((d / "peers").glob(f"{lib}_c_*.json"))]
        peers[lib] = p
    return {"ours": load(d / "redlock_bench.json") or {}, "floor_bench": load(d / "floor_bench.json") or {},
            "peers": peers, "ka": load(d / "keep_alive_bench.json") or {}, "conn": load(d / "connection_bench.json") or {},
            "kinds": load(d / "kinds_bench.json") or {}, "cluster": load(d / "cluster_bench.json") or {}}


KIND_LABELS = {"plain": "plain (`SET NX PX`)", "fence": "fenced", "reentrant": "reentrant", "read": "reader",
               "write": "writer", "semaphore": "semaphore, P = {p} (quorum {q} of 5)",
               "multi1": "`async_lock_all`, 1 resource", "multi4": "`async_lock_all`, 4 resources",
               "multi16": "`async_lock_all`, 16 resources"}


def report(out: Path) -> int:
    dirs = run_dirs(out)
    runs = [load_run(d) for d in dirs]
    n = len(runs)
    cost = load(out / "cycle_cost.json") or {}

    lines = []
    w = lines.append
    w(f"{runs_of(n).capitalize()} ({', '.join(d.name for d in dirs)}); every figure is the median of the runs with their range "
      "(min–max) in brackets, ratios taken run by run; callgrind's counts are one run (they are deterministic).\n")

    def ours(r, *keys):
        return get(r["ours"], *keys)

    def peer(r, lib, scen, *keys):
        return get(r["peers"][lib][scen], *keys)

    # (a), the floors
    w("## (a) uncontended lock+unlock, sequential (µs)\n")
    w("| library | p50 | p90 | p99 | p99.9 | max | ours ÷ it (p50) |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    pct = ("p50", "p90", "p99", "p99_9", "max")
    a_p50 = [ours(r, "a", "lock_unlock_us", "p50") for r in runs]
    if any(a_p50):
        w("| redlock-asio | " + " | ".join(mr([ours(r, "a", "lock_unlock_us", k) for r in runs]) for k in pct) +
          " | 1.00 |")
    for lib in LIBS:
        if any(peer(r, lib, "a", "lock_unlock_us", "p50") for r in runs):
            w(f"| {lib} | " + " | ".join(mr([peer(r, lib, "a", "lock_unlock_us", k) for r in runs]) for k in pct) +
              f" | {mr(ratios((ours(r, 'a', 'lock_unlock_us', 'p50'), peer(r, lib, 'a', 'lock_unlock_us', 'p50')) for r in runs), '.2f')} |")
    floor_q = [ours(r, "floor", "ping_quorum_us", "p50") for r in runs]
    if any(floor_q) and any(a_p50):
        w(f"\nFloor (one quorum round trip = PING to all 5 until 3 answered) p50 {mr(floor_q)} µs; "
          f"lock+unlock is about two: ours ÷ (2 × floor) = "
          f"{mr(ratios((a, 2 * f if f else None) for a, f in zip(a_p50, floor_q)), '.2f')}.")
    indep_p50 = [ours(r, "a_vs_floor_bench", "floor_p50_us") or get(r["floor_bench"], "lock_unlock_us", "p50")
                 for r in runs]
    indep_mean = [ours(r, "a_vs_floor_bench", "floor_mean_us") or get(r["floor_bench"], "lock_unlock_us", "mean")
                  for r in runs]
    if any(indep_p50) and any(a_p50):
        a_mean = [ours(r, "a", "mean_us") for r in runs]
        w(f"\nIndependent floor (`bench/floor_bench`: the same SET NX PX + EVALSHA release to a majority of the "
          f"same masters over raw sockets and epoll, no redlock code) p50 {mr(indep_p50)} µs, mean "
          f"{mr(indep_mean)} µs: ours ÷ floor = {mr(ratios(zip(a_p50, indep_p50)), '.2f')} (p50)"
          + (f", {mr(ratios(zip(a_mean, indep_mean)), '.2f')} (mean)." if any(a_mean) else "."))

    # (b), the ceiling
    w("\n## (b) throughput, C coroutines / async loops on distinct resources (lock cycles/s)\n")
    w("| C | redlock-asio | CPU µs/cycle | " + " | ".join(f"{lib} (autopipeline off / on)" for lib in LIBS) +
      " | ours ÷ best peer | ours ÷ ceiling |")
    w("| --- | --- | --- | " + " | ".join("---" for _ in LIBS) + " | --- | --- |")
    ceilings = [ours(r, "ceiling", "lock_cycles_per_s") for r in runs]
    plot_tp = []
    for c in (1, 16, 64, 256, 1024):
        rows = [next((x for x in ours(r, "b") or [] if x["concurrency"] == c), None) for r in runs]
        if not any(rows):
            continue
        tp = [x["cycles_per_s"] if x else None for x in rows]
        cells = []
        for lib in LIBS:
            cells.append(" / ".join(mr([peer(r, lib, "b", (c, ap), "cycles_per_s") for r in runs]) for ap in ("0", "1")))
        best = [max([peer(r, lib, "b", (c, ap), "cycles_per_s") or 0 for lib in LIBS for ap in ("0", "1")]) for r in runs]
        w(f"| {c} | {mr(tp)} | {mr([x['cpu_us_per_cycle'] if x else None for x in rows], '.1f')} | " +
          " | ".join(cells) + f" | {mr(ratios(zip(tp, best)), '.2f')} | {mr(ratios(zip(tp, ceilings)), '.2f')} |")
        plot_tp.append((c, median([v for v in tp if v]),
                        *[median([peer(r, lib, "b", (c, ap), "cycles_per_s") or 0 for r in runs])
                          for lib in LIBS for ap in ("0", "1")]))
    if any(ceilings):
        w(f"\nCeiling: redis-benchmark pipelined on all 5 masters ⇒ {mr(ceilings)} lock cycles/s.")

    # (c)
    w("\n## (c) 16 contenders on one resource\n")
    w("Each contender locks, releases at once and locks again, for 2 s per run; the configurations take turns run by "
      "run. Release → next grant: from a contender calling `async_unlock` to the next successful `async_lock` of any "
      "contender (itself included), the p50 and p99 of each run; also in quorum round trips: the floor's PING to all "
      "5 until 3 answered, p50 of 2,000 measured right before each run. Medians of the runs, range in brackets.\n")
    w("| library | configuration | runs | hand-overs/s | fairness min ÷ mean | "
      "release → next grant p50 / p99 (µs) | p50 / p99 in quorum round trips | self re-grants | "
      "CPU µs per grant: client / masters | failures |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    per_run = []
    for key in C_CONFIGS:
        confs = [ours(r, key) for r in runs if ours(r, key) and ours(r, key).get("runs")]
        if not confs:
            continue
        cr = [(x, conf.get("quorum_rtt_p50_us") or None) for conf in confs for x in conf["runs"]]
        rs = [x for x, _ in cr]
        rtts = [x.get("quorum_rtt_p50_us") or rtt for x, rtt in cr]
        p50 = [get(x, "handover_us", "p50") for x in rs]
        p99 = [get(x, "handover_us", "p99") for x in rs]
        lat = f"{mr(p50)} / {mr(p99)}" if any(p50) else "n/a"
        in_rtt = (f"{mr(ratios(zip(p50, rtts)), '.2f')} / {mr(ratios(zip(p99, rtts)), '.2f')} "
                  f"(RTT {mr(rtts)} µs)" if any(p50) and any(rtts) else "n/a")
        selfs = [x["self_regrants"] / x["handovers"] * 100 for x in rs if x.get("handovers") and "self_regrants" in x]
        self_share = mr(selfs) + " %" if selfs else "n/a"
        cpu = (f"{mr([x.get('client_cpu_us_per_grant') for x in rs])} / "
               f"{mr([x.get('masters_cpu_us_per_grant') for x in rs])}" if "client_cpu_us_per_grant" in rs[0] else "n/a")
        w(f"| redlock-asio | {c_config_name(key, confs[0])} | {len(rs)} | {mr([x['handovers_per_s'] for x in rs])} | "
          f"{mr([x['fairness'] for x in rs], '.2f')} | {lat} | {in_rtt} | {self_share} | {cpu} | "
          f"{sum(x['failures'] for x in rs)} |")
        per_run.append((key, rs))
    for lib in LIBS:
        rs = [x for r in runs for x in r["peers"][lib]["c"] if x and "handovers_per_s" in x]
        if not rs:
            continue
        retry = rs[0].get("retry") or {}
        jitter = retry.get("retryJitter")
        conf = ("its defaults" if "retryDelay" not in retry else
                f"retry {retry['retryDelay']} ms" + (f" ± {jitter} ms" if jitter else " (no jitter)"))
        w(f"| {lib} | {conf} | {len(rs)} | {mr([x['handovers_per_s'] for x in rs])} | "
          f"{mr([x['fairness'] for x in rs], '.2f')} | n/a | n/a | n/a | "
          f"{mr([x.get('cpu_us_per_handover') for x in rs])} / n/a | {sum(x['failures'] for x in rs)} |")
    if per_run:
        w("\nPer run, hand-overs/s (fairness): " + "; ".join(
            f"`{key}` " + ", ".join(f"{x['handovers_per_s']:.0f} ({x['fairness']:.2f})" for x in rs)
            for key, rs in per_run) + ".")

    # (g)
    g_keys = [key for key in ("g", "g_no_fair") if any(ours(r, key) for r in runs)]
    if g_keys:
        w("\n## (g) 4 processes, one resource, default-configured clients\n")
        w("Four `redlock_worker --defaults --hold-ms 20-300` processes (ttl 10 s), each with its own client, "
          "contending for one resource. Longest wait: the longest single `async_lock` call (a call gives up after "
          "`retry.max_wait`, 2 s); longest without the lock: the longest time a process went without a critical "
          "section (start to first, between two of its own, last to end). Sections per process: each run's, "
          "separated by semicolons; the rest: medians of the runs, range in brackets; overlaps: all runs'.\n")
        w("| fair hand-over | seconds | runs | sections per process | min ÷ mean | longest wait (ms) | "
          "longest without the lock (ms) | queued / wake-ups (all processes) | not acquired | overlaps |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for key in g_keys:
            gs = [ours(r, key) for r in runs if ours(r, key)]
            procs = [g.get("per_process", []) for g in gs]
            w(f"| {'on' if gs[0].get('fairness_enabled') else 'off'} | {gs[0]['seconds']:.0f} | {len(gs)} | "
              + "; ".join(" / ".join(str(p["sections"]) for p in ps) for ps in procs) +
              f" | {mr([g['fairness'] for g in gs], '.2f')} | {mr([g['longest_wait_ms'] for g in gs])} | "
              f"{mr([g['longest_gap_ms'] for g in gs])} | {mr([sum(p['queued'] for p in ps) for ps in procs])} / "
              f"{mr([sum(p['wakeups'] for p in ps) for ps in procs])} | "
              f"{mr([sum(p['not_acquired'] for p in ps) for ps in procs])} | {sum(g['overlaps'] for g in gs)} |")

    # (d), (e)
    w("\n## (d) 2 of 5 masters +50 ms, and (e) 1 of 5 down: lock+unlock (µs)\n")
    w("| library | (d) p50 | (d) p99 | (d) p50 ÷ no-fault p50 | (e) p50 | (e) p99 |")
    w("| --- | --- | --- | --- | --- | --- |")
    d_p50 = [ours(r, "d", "lock_unlock_us", "p50") for r in runs]
    if any(d_p50):
        w(f"| redlock-asio | {mr(d_p50)} | {mr([ours(r, 'd', 'lock_unlock_us', 'p99') for r in runs])} | "
          f"{mr(ratios(zip(d_p50, a_p50)), '.2f')} | {mr([ours(r, 'e', 'lock_unlock_us', 'p50') for r in runs])} | "
          f"{mr([ours(r, 'e', 'lock_unlock_us', 'p99') for r in runs])} |")
    for lib in LIBS:
        pd = [peer(r, lib, "d", "lock_unlock_us", "p50") for r in runs]
        if any(pd):
            pa = [peer(r, lib, "a", "lock_unlock_us", "p50") for r in runs]
            w(f"| {lib} | {mr(pd)} | {mr([peer(r, lib, 'd', 'lock_unlock_us', 'p99') for r in runs])} | "
              f"{mr(ratios(zip(pd, pa)), '.2f')} | | |")

    # (f)
    kas = [r["ka"] for r in runs if r["ka"]]
    if kas:
        ka = kas[0]
        w("\n## (f) auto-extension cost\n")
        w(f"{ka['locks']} locks, ttl {ka['ttl_ms']} ms, held {ka['seconds']:.0f} s, {runs_of(len(kas))}: "
          f"{mr([k['kib_per_lock'] for k in kas], '.2f')} KiB heap per lock at the peak while kept alive "
          f"({mr([k.get('kib_per_lock_taken', k['kib_per_lock']) for k in kas], '.2f')} once taken), "
          f"{mr([k['cpu_us_per_lock_second'] for k in kas], '.2f')} µs CPU per lock per second, "
          f"{mr([k['cpu_us_per_extension'] for k in kas], '.1f')} µs CPU per extension, "
          f"{mr([k['extend_commands_per_s'] for k in kas])} extend commands/s to the masters; "
          f"lost: {sum(k['lost'] for k in kas)}.")
    if cost:
        w("\n## Noise-free cost of one lock+unlock (callgrind)\n")
        w(f"{cost['instructions_per_cycle']:.0f} instructions and {cost['allocations_per_cycle']:.1f} heap allocations "
          "per cycle in the client (5 masters, sequential; callgrind, one run: the counts are deterministic).")
        if "scheduler_passes_per_cycle" in cost:
            w(f"Scheduler passes (handlers the io_context runs): {cost['scheduler_passes_per_cycle']:.1f} per cycle, "
              f"{cost['scheduler_passes_per_reply']:.2f} per reply (native run; "
              f"{cost['scheduler_passes_per_cycle_callgrind']:.1f} per cycle under callgrind).")

    # System calls
    sc = load(out / "syscalls.json")
    if sc and "ours" in sc:
        w("\n## System calls per lock+unlock\n")
        w(f"Client thread, 5 masters, sequential, by two run lengths ({sc.get('tool', '?')}), the median of "
          f"{sc.get('runs', '?')} interleaved runs with their range:\n")
        w("| per cycle | ours | floor |")
        w("| --- | --- | --- |")
        for k, label in (("total", "all"), ("sendto", "`sendto`"), ("recvfrom", "`recvfrom`"),
                         ("recvfrom_failed", "`recvfrom` failed (`EAGAIN`)"), ("epoll_wait", "`epoll_wait`"),
                         ("epoll_ctl", "`epoll_ctl`"), ("getrandom", "`getrandom`")):
            cells = []
            for who in ("ours", "floor"):
                m, rg = get(sc, who, k), get(sc, who + "_range", k)
                cells.append("n/a" if m is None else num(m, ".1f") +
                             (f" ({num(rg[0], '.1f')}–{num(rg[1], '.1f')})" if rg else ""))
            w(f"| {label} | " + " | ".join(cells) + " |")

    # One connection
    conns = [r["conn"] for r in runs if r["conn"]]
    if conns:
        c64 = [next((x["requests_per_s"] for x in c.get("set", []) if x["concurrency"] == 64), None) for c in conns]
        rb = [c.get("redis_benchmark_set_P16_c1") for c in conns]
        w("\n## One connection\n")
        w(f"SET through one connection with 64 coroutines: {mr(c64)}/s; redis-benchmark -P 16 -c 1: {mr(rb)}/s; "
          f"ratio {mr(ratios(zip(c64, rb)), '.2f')} ({runs_of(len(conns))}).")

    # Lock kinds
    kinds = [r["kinds"] for r in runs if r["kinds"]]
    if kinds:
        kc = load(out / "kinds_cost.json") or {}
        k3 = [k["k3"] for k in kinds if "k3" in k]
        permits, quorum = (k3[0].get("permits", 4), k3[0].get("quorum", 5)) if k3 else (4, 5)
        rounds = [get(k, "k1", "rounds") for k in kinds]
        w("\n## Lock kinds\n")
        w(f"**Uncontended acquire+release** ({runs_of(len(kinds))} of {'/'.join(str(x) for x in rounds)} rounds × "
          f"{get(kinds[0], 'k1', 'cycles')} cycles per kind; instructions and allocations: callgrind, one run):\n")
        w("| kind | p50 µs | p90 µs | p99 µs | p50 ÷ plain | instructions per lock+unlock | ÷ plain | heap allocations |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for kind, label in KIND_LABELS.items():
            vals = [get(k, "k1", "kinds", kind) for k in kinds]
            if not any(vals):
                continue
            instr = get(kc, kind, "instructions_per_cycle")
            vs = get(kc, kind, "instructions_vs_plain")
            allocs = get(kc, kind, "allocations_per_cycle")
            w(f"| {label.format(p=permits, q=quorum)} | {mr([get(v, 'p50_us') for v in vals])} | "
              f"{mr([get(v, 'p90_us') for v in vals])} | {mr([get(v, 'p99_us') for v in vals])} | "
              f"{mr([get(v, 'vs_plain') for v in vals], '.2f')} | "
              f"{f'{instr:,.0f}' if instr else 'n/a'} | {f'{vs:.2f}' if vs else 'n/a'} | "
              f"{f'{allocs:.1f}' if allocs is not None else 'n/a'} |")
        if k3:
            w(f"\n**Contention** ({k3[0].get('contenders')} contenders, each lock held {k3[0].get('hold_us', 0) / 1000:g} "
              f"ms, {k3[0].get('seconds')} s per configuration, {runs_of(len(k3))}):\n")
            w("| configuration | hand-overs/s | most holders at once |")
            w("| --- | --- | --- |")
            w(f"| semaphore, P = {permits} (quorum {quorum} of 5) | {mr([k.get('semaphore_per_s') for k in k3])} | "
              f"{max(k.get('semaphore_most_holders', 0) for k in k3)} |")
            w(f"| exclusive lock | {mr([k.get('exclusive_per_s') for k in k3])} | "
              f"{max(k.get('exclusive_most_holders', 0) for k in k3)} |")
            if any(k.get("fenced_per_s") for k in k3):
                conf = [k["fenced_confirmations"] / k.get("fenced_all", k["fenced_acquired"]) * 100 for k in k3
                        if k.get("fenced_acquired")]
                w(f"| fenced exclusive lock | {mr([k.get('fenced_per_s') for k in k3])} ({mr(conf)} % of them needed "
                  f"the fence confirmed) | 1 |")
            fair = [k["fair"] for k in k3 if "fair" in k]
            if fair:
                w(f"\nThe same with fairness on, as by default ({runs_of(len(fair))}):\n")
                w("| configuration | hand-overs/s | by a release's hand-over | fence confirmed | most holders at once |")
                w("| --- | --- | --- | --- | --- |")
                pct = lambda n, d: [f[n] / f[d] * 100 for f in fair if f.get(d)]
                w(f"| exclusive lock | {mr([f.get('exclusive_per_s') for f in fair])} | "
                  f"{mr(pct('exclusive_handovers', 'exclusive_all'))} % | | "
                  f"{max(f.get('exclusive_most_holders', 0) for f in fair)} |")
                w(f"| fenced exclusive lock | {mr([f.get('fenced_per_s') for f in fair])} | "
                  f"{mr(pct('fenced_handovers', 'fenced_all'))} % | {mr(pct('fenced_confirmations', 'fenced_all'))} % | "
                  f"{max(f.get('fenced_most_holders', 0) for f in fair)} |")

    # TLS
    tl = load(out / "tls_latency.json")
    tc = load(out / "tls_cost.json") or {}
    if tl and "p50_plain_us" in tl:
        w("\n## TLS\n")
        w(f"{tl['rounds']} rounds × {tl['cycles']} cycles, plain and TLS alternating which goes first; medians of "
          "the rounds, range in brackets; instructions and allocations: callgrind, one run.\n")
        w("| | plain TCP | TLS | TLS ÷ plain |")
        w("| --- | --- | --- | --- |")
        w(f"| lock+unlock p50 µs | {mr(tl['p50_plain_us'])} | {mr(tl['p50_tls_us'])} | "
          f"{mr(tl['tls_over_plain_p50'], '.2f')} (paired per round) |")
        w(f"| lock+unlock p99 µs | {mr(tl['p99_plain_us'])} | {mr(tl['p99_tls_us'])} | "
          f"{mr(ratios(zip(tl['p99_tls_us'], tl['p99_plain_us'])), '.2f')} |")
        ip, it = get(tc, "plain", "instructions_per_cycle"), get(tc, "tls", "instructions_per_cycle")
        if ip and it:
            w(f"| client instructions per lock+unlock | {ip:,.0f} | {it:,.0f} | {it / ip:.1f} |")
        ap = get(tc, "plain", "counted_allocations_per_cycle") or get(tc, "plain", "allocations_per_cycle")
        at = get(tc, "tls", "counted_allocations_per_cycle") or get(tc, "tls", "allocations_per_cycle")
        if ap and at:
            w(f"| client heap allocations per lock+unlock | {ap:.1f} | {at:.1f} | {at / ap:.1f} |")
        if tl.get("floor_p50_tls_us"):
            w(f"| independent floor (`floor_bench`, `--tls-ca` for TLS) p50 µs | {mr(tl['floor_p50_plain_us'])} | "
              f"{mr(tl['floor_p50_tls_us'])} | "
              f"{mr(ratios(zip(tl['floor_p50_tls_us'], tl['floor_p50_plain_us'])), '.2f')} |")
            w(f"| ours ÷ floor, p50 | | {mr(tl['tls_over_floor_tls_p50'], '.2f')} | |")
    if get(tc, "floor", "instructions_per_cycle"):
        p, t, f = tc["plain"], tc["tls"], tc["floor"]
        w("\n### Against a bare OpenSSL floor (callgrind, one run)\n")
        w("| | plain TCP | TLS | bare OpenSSL floor |")
        w("| --- | --- | --- | --- |")
        w(f"| client instructions | {p['instructions_per_cycle']:,.0f} | {t['instructions_per_cycle']:,.0f} | "
          f"{f['instructions_per_cycle']:,.0f} |")
        w(f"| TLS's addition (TLS − plain) | | {t['added_instructions']:,.0f} | |")
        w(f"| addition ÷ floor | | {t['added_vs_floor']:.2f} | 1 |")
        w(f"| heap allocations, operator new | {p['counted_allocations_per_cycle']:.1f} | "
          f"{t['counted_allocations_per_cycle']:.1f} | 0 |")
        w(f"| calls into the C allocator | {p['allocations_per_cycle']:.1f} | {t['allocations_per_cycle']:.1f} | "
          f"{f['allocations_per_cycle']:.1f} |")

    # Cluster masters
    cls = [r["cluster"] for r in runs if r["cluster"].get("fleets")]
    if cls:
        w("\n## Cluster masters: scale-out\n")
        w(f"{runs_of(len(cls))} of {cls[0].get('seconds')} s per fleet, {cls[0].get('workers')} coroutines; medians, "
          "range in brackets.\n")
        w("| fleet | cycles/s | client µs/cycle | per shard µs/cycle | evenness | uncontended p50 µs |")
        w("| --- | --- | --- | --- | --- | --- |")
        for fleet in cls[0]["fleets"]:
            fs = [x for c in cls for x in c["fleets"] if x["name"] == fleet["name"]]
            shards = " / ".join(mr([x["shard_us_per_cycle"][i] for x in fs if len(x["shard_us_per_cycle"]) > i], ".1f")
                                for i in range(len(fleet["shard_us_per_cycle"])))
            name = fleet["name"].replace(" x ", " × ").replace("× 1 shards", "× 1 shard")
            w(f"| {name} | {mr([x['cycles_per_s'] for x in fs])} | "
              f"{mr([x['client_us_per_cycle'] for x in fs], '.1f')} | {shards} | "
              f"{mr([x['evenness'] for x in fs], '.2f')} | {mr([x['p50_us'] for x in fs])} |")

    text = "\n".join(lines) + "\n"
    print(text)
    (out / "summary.md").write_text(text)

    if shutil.which("gnuplot") and plot_tp:
        data = out / "throughput.dat"
        data.write_text("".join(" ".join(str(x) for x in row) + "\n" for row in plot_tp))
        lat = out / "latency.dat"
        rows = []
        for q, key in ((1, "p50"), (2, "p90"), (3, "p99"), (4, "p99_9")):
            rows.append([q, median([ours(r, "a", "lock_unlock_us", key) or 0 for r in runs])] +
                        [median([peer(r, lib, "a", "lock_unlock_us", key) or 0 for r in runs]) for lib in LIBS])
        lat.write_text("".join(" ".join(str(x) for x in r) + "\n" for r in rows))
        script = f"""
set terminal pngcairo size 900,520
set output '{out}/throughput.png'
set title 'Lock cycles/s vs concurrency, 5 local masters (median of the runs)'
set logscale x 2
set xlabel 'concurrent lockers (distinct resources)'
set ylabel 'lock+unlock cycles/s'
set key left top
plot '{data}' u 1:2 w lp lw 2 t 'redlock-asio', \\
     '' u 1:3 w lp t 'node-redlock', '' u 1:4 w lp t 'node-redlock autopipeline', \\
     '' u 1:5 w lp t 'redlock-universal', '' u 1:6 w lp t 'redlock-universal autopipeline'
set output '{out}/latency.png'
set title 'Uncontended lock+unlock latency percentiles (sequential, median of the runs)'
unset logscale x
set logscale y
set xlabel 'percentile'
set ylabel 'microseconds'
set xtics ('p50' 1, 'p90' 2, 'p99' 3, 'p99.9' 4)
plot '{lat}' u 1:2 w lp lw 2 t 'redlock-asio', '' u 1:3 w lp t 'node-redlock', '' u 1:4 w lp t 'redlock-universal'
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=False)
        print(f"plots: {out}/throughput.png, {out}/latency.png")
    return 0


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "cycle-cost-kinds":
        return cycle_cost_kinds(sys.argv[2], Path(sys.argv[3]))
    if len(sys.argv) >= 4 and sys.argv[1] == "tls-cost":
        extra = sys.argv[4:]
        rounds = int(extra[extra.index("--rounds") + 1]) if "--rounds" in extra else None
        floor = extra[extra.index("--floor") + 1] if "--floor" in extra else ""
        return tls_cost(sys.argv[2], Path(sys.argv[3]), floor, rounds)
    if len(sys.argv) >= 5 and sys.argv[1] == "syscalls":
        extra = sys.argv[5:]
        n_runs = int(extra[extra.index("--runs") + 1]) if "--runs" in extra else 3
        return syscalls(sys.argv[2], sys.argv[3], Path(sys.argv[4]), max(1, n_runs))
    if len(sys.argv) >= 4 and sys.argv[1] == "cycle-cost":
        return cycle_cost(sys.argv[2], Path(sys.argv[3]))
    return report(Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
