#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Benchmark report: ratios of ours to the peers, the floor and the ceiling, from one run's JSON.

  report.py RESULTS_DIR                  print the comparison, write RESULTS_DIR/summary.md and plots
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
  report.py syscalls COST_BINARY FLOOR_BINARY RESULTS_DIR   syscalls per lock+unlock on the client
                                            thread, ours next to the independent floor (perf stat,
                                            strace -c without perf); writes syscalls.json
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIBS = ("node-redlock", "redlock-universal")
# redlock_bench's (c) configurations, in the order of the tables.
C_CONFIGS = ("c", "c_no_fair", "c_poll_2ms")


def c_config_name(key: str, c: dict) -> str:
    conf = c.get("config")
    if not conf:  # a JSON from before fair hand-over: retry settings only
        r = c.get("retry", {})
        return f"retry {r.get('base_ms', '?')}–{r.get('base_ms', 0) + r.get('jitter_ms', 0)} ms"
    r = conf["retry"]
    return f"`{key}`: fair {'on' if conf['fairness'] else 'off'}, retry {r['base_ms']}–{r['base_ms'] + r['jitter_ms']} ms"


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
        subprocess.run([binary, "latency", "--rounds", str(rounds), "--cycles", "2000", "--json", str(lat)],
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


def syscalls(cost_binary: str, floor_binary: str, out: Path) -> int:
    """Syscalls per lock+unlock (5 masters) on the client thread: ours (cycle_cost_bench) and the
    independent floor (floor_bench, on five masters started here), by the two-length method, the
    median of three interleaved runs."""
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
        for _ in range(3):
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
    result = {"tool": "perf stat" if perf else "strace -c", "runs": 3}
    for who, rs in runs.items():
        result[who] = {k: median([r[k] for r in rs]) for k in rs[0]}
        result[who + "_range"] = {k: [min(r[k] for r in rs), max(r[k] for r in rs)] for k in rs[0]}
    print(f"syscalls per lock+unlock, client thread, 5 masters ({result['tool']}, median of 3):")
    print(f"  {'':18}{'ours':>8}{'floor':>8}")
    for k in ("total",) + SYSCALLS + ("recvfrom_failed",):
        print(f"  {k:18}{result['ours'][k]:8.1f}{result['floor'][k]:8.1f}")
    (out / "syscalls.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def fmt_ratio(a, b):
    return f"{a / b:.2f}" if a and b else "n/a"


def report(out: Path) -> int:
    ours = load(out / "redlock_bench.json") or {}
    peers = {lib: {} for lib in LIBS}
    for lib in LIBS:
        peers[lib]["a"] = load(out / "peers" / f"{lib}_a.json")
        peers[lib]["d"] = load(out / "peers" / f"{lib}_d.json")
        peers[lib]["b"] = {}
        for c in (1, 16, 64, 256, 1024):
            for ap in ("0", "1"):
                peers[lib]["b"][(c, ap)] = load(out / "peers" / f"{lib}_b_{c}_{ap}.json")
        peers[lib]["c"] = [load(out / "peers" / f"{lib}_c_{r}.json") for r in range(3)]
    ka = load(out / "keep_alive_bench.json") or {}
    conn = load(out / "connection_bench.json") or {}
    cost = load(out / "cycle_cost.json") or {}

    lines = []
    w = lines.append
    floor_q = ours.get("floor", {}).get("ping_quorum_us", {}).get("p50")
    indep = (load(out / "floor_bench.json") or {}).get("lock_unlock_us", {})
    ceiling = ours.get("ceiling", {}).get("lock_cycles_per_s")
    a = ours.get("a", {}).get("lock_unlock_us", {})
    w("## (a) uncontended lock+unlock, sequential (µs)\n")
    w("| library | p50 | p90 | p99 | p99.9 | max | ours ÷ it (p50) |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    if a:
        w(f"| redlock-asio | {a['p50']:.0f} | {a['p90']:.0f} | {a['p99']:.0f} | {a['p99_9']:.0f} | {a['max']:.0f} | 1.00 |")
    for lib in LIBS:
        p = (peers[lib]["a"] or {}).get("lock_unlock_us")
        if p:
            w(f"| {lib} | {p['p50']:.0f} | {p['p90']:.0f} | {p['p99']:.0f} | {p['p99_9']:.0f} | {p['max']:.0f} | "
              f"{fmt_ratio(a.get('p50'), p['p50'])} |")
    if floor_q and a:
        w(f"\nFloor (one quorum round trip = PING to all 5 until 3 answered) p50 {floor_q:.0f} µs; "
          f"lock+unlock is about two: ours ÷ (2 × floor) = {a['p50'] / (2 * floor_q):.2f}.")
    if indep and a:
        mean = ours.get("a", {}).get("mean_us")
        w(f"\nIndependent floor (`bench/floor_bench`: the same SET NX PX + EVALSHA release to a majority of the "
          f"same masters over raw sockets and epoll, no redlock code) p50 {indep['p50']:.0f} µs, mean "
          f"{indep['mean']:.0f} µs: ours ÷ floor = {a['p50'] / indep['p50']:.2f} (p50)"
          + (f", {mean / indep['mean']:.2f} (mean)." if mean else "."))

    w("\n## (b) throughput, C coroutines / async loops on distinct resources (lock cycles/s)\n")
    w("| C | redlock-asio | CPU µs/cycle | " + " | ".join(f"{lib} (autopipeline off / on)" for lib in LIBS) +
      " | ours ÷ best peer | ours ÷ ceiling |")
    w("| --- | --- | --- | " + " | ".join("---" for _ in LIBS) + " | --- | --- |")
    plot_tp = []
    for row in ours.get("b", []):
        c = row["concurrency"]
        best = 0
        cells = []
        for lib in LIBS:
            vals = []
            for ap in ("0", "1"):
                r = peers[lib]["b"].get((c, ap)) or {}
                v = r.get("cycles_per_s")
                vals.append(f"{v:.0f}" if v else "n/a")
                best = max(best, v or 0)
            cells.append(" / ".join(vals))
        w(f"| {c} | {row['cycles_per_s']:.0f} | {row['cpu_us_per_cycle']:.1f} | " + " | ".join(cells) +
          f" | {fmt_ratio(row['cycles_per_s'], best)} | {fmt_ratio(row['cycles_per_s'], ceiling)} |")
        plot_tp.append((c, row["cycles_per_s"],
                        *[(peers[lib]["b"].get((c, ap)) or {}).get("cycles_per_s", 0) or 0 for lib in LIBS for ap in ("0", "1")]))
    if ceiling:
        w(f"\nCeiling: redis-benchmark pipelined on all 5 masters ⇒ {ceiling:.0f} lock cycles/s.")

    w("\n## (c) 16 contenders on one resource\n")
    w("Each contender locks, releases at once and locks again, for 2 s per run. Release → next grant: from a "
      "contender calling `async_unlock` to the next successful `async_lock` of any contender (itself included), "
      "over all runs of the configuration; also in quorum round trips: the floor's PING to all 5 until 3 answered, "
      "p50 of 2,000 measured right before the configuration.\n")
    w("| library | configuration | runs | hand-overs/s (median, range) | fairness min ÷ mean (median, range) | "
      "release → next grant p50 / p99 (µs) | p50 / p99 in quorum round trips | self re-grants | "
      "CPU µs per grant: client / masters | failures |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rtt = floor_q
    for key in C_CONFIGS:
        c = ours.get(key)
        if not c or "runs" not in c:
            continue
        runs = c["runs"]
        rates = [r["handovers_per_s"] for r in runs]
        fair = [r["fairness"] for r in runs]
        h = c.get("handover_us")
        lat = f"{h['p50']:.0f} / {h['p99']:.0f}" if h else "n/a"
        rtt_c = c.get("quorum_rtt_p50_us") or rtt
        in_rtt = f"{h['p50'] / rtt_c:.2f} / {h['p99'] / rtt_c:.2f} (RTT {rtt_c:.0f} µs)" if h and rtt_c else "n/a"
        grants = sum(r.get("handovers", 0) for r in runs)
        selfs = sum(r.get("self_regrants", 0) for r in runs)
        self_share = f"{selfs / grants:.0%}" if grants and "self_regrants" in runs[0] else "n/a"
        cpu = (f"{median([r['client_cpu_us_per_grant'] for r in runs]):.0f} / "
               f"{median([r['masters_cpu_us_per_grant'] for r in runs]):.0f}"
               if "client_cpu_us_per_grant" in runs[0] else "n/a")
        w(f"| redlock-asio | {c_config_name(key, c)} | {len(runs)} | {median(rates):.0f} ({min(rates):.0f}–{max(rates):.0f}) | "
          f"{median(fair):.2f} ({min(fair):.2f}–{max(fair):.2f}) | {lat} | {in_rtt} | {self_share} | {cpu} | "
          f"{sum(r['failures'] for r in runs)} |")
    for lib in LIBS:
        runs = [r for r in peers[lib]["c"] if r and "handovers_per_s" in r]
        if not runs:
            continue
        rates = [r["handovers_per_s"] for r in runs]
        fair = [r["fairness"] for r in runs]
        retry = runs[0].get("retry") or {}
        jitter = retry.get("retryJitter")
        conf = ("its defaults" if "retryDelay" not in retry else
                f"retry {retry['retryDelay']} ms" + (f" ± {jitter} ms" if jitter else " (no jitter)"))
        w(f"| {lib} | {conf} | {len(runs)} | {median(rates):.0f} ({min(rates):.0f}–{max(rates):.0f}) | "
          f"{median(fair):.2f} ({min(fair):.2f}–{max(fair):.2f}) | n/a | n/a | n/a | "
          f"{median([r['cpu_us_per_handover'] for r in runs]):.0f} / n/a | {sum(r['failures'] for r in runs)} |")
    per_run = [(key, ours[key]["runs"]) for key in C_CONFIGS if ours.get(key, {}).get("runs")]
    if per_run:
        w("\nPer run, hand-overs/s (fairness): " + "; ".join(
            f"`{key}` " + ", ".join(f"{r['handovers_per_s']:.0f} ({r['fairness']:.2f})" for r in runs)
            for key, runs in per_run) + ".")

    g_rows = [(key, ours[key]) for key in ("g", "g_no_fair") if key in ours]
    if g_rows:
        w("\n## (g) 4 processes, one resource, default-configured clients\n")
        w("Four `redlock_worker --defaults --hold-ms 20-300` processes (ttl 10 s), each with its own client, "
          "contending for one resource. Longest wait: the longest single `async_lock` call (a call gives up after "
          "`retry.max_wait`, 2 s); longest without the lock: the longest time a process went without a critical "
          "section (start to first, between two of its own, last to end).\n")
        w("| fair hand-over | seconds | sections per process | min ÷ mean | longest wait (ms) | "
          "longest without the lock (ms) | queued / wake-ups (all processes) | not acquired | overlaps |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for key, g in g_rows:
            procs = g.get("per_process", [])
            w(f"| {'on' if g.get('fairness_enabled') else 'off'} | {g['seconds']:.0f} | "
              f"{' / '.join(str(p['sections']) for p in procs)} | {g['fairness']:.2f} | {g['longest_wait_ms']} | "
              f"{g['longest_gap_ms']:.0f} | {sum(p['queued'] for p in procs)} / {sum(p['wakeups'] for p in procs)} | "
              f"{sum(p['not_acquired'] for p in procs)} | {g['overlaps']} |")

    w("\n## (d) 2 of 5 masters +50 ms, and (e) 1 of 5 down: lock+unlock (µs)\n")
    w("| library | (d) p50 | (d) p99 | (d) p50 ÷ no-fault p50 | (e) p50 | (e) p99 |")
    w("| --- | --- | --- | --- | --- | --- |")
    d = ours.get("d", {}).get("lock_unlock_us", {})
    e = ours.get("e", {}).get("lock_unlock_us", {})
    if d:
        w(f"| redlock-asio | {d['p50']:.0f} | {d['p99']:.0f} | {fmt_ratio(d['p50'], a.get('p50'))} | "
          f"{e.get('p50', 0):.0f} | {e.get('p99', 0):.0f} |")
    for lib in LIBS:
        pd = (peers[lib]["d"] or {}).get("lock_unlock_us")
        pa = (peers[lib]["a"] or {}).get("lock_unlock_us")
        if pd:
            w(f"| {lib} | {pd['p50']:.0f} | {pd['p99']:.0f} | {fmt_ratio(pd['p50'], (pa or {}).get('p50'))} | | |")

    if ka:
        w("\n## (f) auto-extension cost\n")
        w(f"{ka['locks']} locks, ttl {ka['ttl_ms']} ms, held {ka['seconds']:.0f} s: {ka['kib_per_lock']:.2f} KiB heap per lock, "
          f"{ka['cpu_us_per_lock_second']:.2f} µs CPU per lock per second, {ka['cpu_us_per_extension']:.1f} µs CPU per "
          f"extension, {ka['extend_commands_per_s']:.0f} extend commands/s to the masters; lost: {ka['lost']}.")
    if cost:
        w("\n## Noise-free cost of one lock+unlock (callgrind)\n")
        w(f"{cost['instructions_per_cycle']:.0f} instructions and {cost['allocations_per_cycle']:.1f} heap allocations "
          "per cycle in the client (5 masters, sequential).")
        if "scheduler_passes_per_cycle" in cost:
            w(f"Scheduler passes (handlers the io_context runs): {cost['scheduler_passes_per_cycle']:.1f} per cycle, "
              f"{cost['scheduler_passes_per_reply']:.2f} per reply (native run; "
              f"{cost['scheduler_passes_per_cycle_callgrind']:.1f} per cycle under callgrind).")
    if conn:
        w("\n## One connection\n")
        c64 = next((r for r in conn.get("set", []) if r["concurrency"] == 64), None)
        if c64:
            w(f"SET through one connection with 64 coroutines: {c64['requests_per_s']:.0f}/s; redis-benchmark -P 16 -c 1: "
              f"{conn['redis_benchmark_set_P16_c1']:.0f}/s; ratio {conn['ratio_c64_vs_redis_benchmark']:.2f}.")

    text = "\n".join(lines) + "\n"
    print(text)
    (out / "summary.md").write_text(text)

    if shutil.which("gnuplot") and plot_tp:
        data = out / "throughput.dat"
        data.write_text("".join(" ".join(str(x) for x in row) + "\n" for row in plot_tp))
        lat = out / "latency.dat"
        rows = []
        for q, key in ((1, "p50"), (2, "p90"), (3, "p99"), (4, "p99_9")):
            rows.append([q, a.get(key, 0)] + [((peers[lib]["a"] or {}).get("lock_unlock_us") or {}).get(key, 0) for lib in LIBS])
        lat.write_text("".join(" ".join(str(x) for x in r) + "\n" for r in rows))
        script = f"""
set terminal pngcairo size 900,520
set output '{out}/throughput.png'
set title 'Lock cycles/s vs concurrency, 5 local masters'
set logscale x 2
set xlabel 'concurrent lockers (distinct resources)'
set ylabel 'lock+unlock cycles/s'
set key left top
plot '{data}' u 1:2 w lp lw 2 t 'redlock-asio', \\
     '' u 1:3 w lp t 'node-redlock', '' u 1:4 w lp t 'node-redlock autopipeline', \\
     '' u 1:5 w lp t 'redlock-universal', '' u 1:6 w lp t 'redlock-universal autopipeline'
set output '{out}/latency.png'
set title 'Uncontended lock+unlock latency percentiles (sequential)'
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
        return syscalls(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    if len(sys.argv) >= 4 and sys.argv[1] == "cycle-cost":
        return cycle_cost(sys.argv[2], Path(sys.argv[3]))
    return report(Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
