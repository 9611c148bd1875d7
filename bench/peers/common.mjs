// SPDX-License-Identifier: BSL-1.0
// Shared harness for the peer drivers (node-redlock.mjs, redlock-universal.mjs): argument parsing,
// the five ioredis clients, scenarios a-d, percentiles, the JSON result and a hard run-time bound.
//
// A driver supplies a `peer` object:
//   name, package                         library name and npm package (its version is read from node_modules)
//   defaults                              the library's documented retry defaults (recorded in the JSON)
//   contentionRetry(opts)                 retry settings used for scenario c (recorded in the JSON)
//   make(clients, {retry, ttlMs})         -> { locker(resource) -> { acquire(): handle, release(handle): bool } }

import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Redis from 'ioredis';

const here = dirname(fileURLToPath(import.meta.url));

export function packageVersion(name) {
  try {
    return JSON.parse(readFileSync(join(here, 'node_modules', name, 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
}

const now = () => process.hrtime.bigint();
const usSince = (t0) => Number(process.hrtime.bigint() - t0) / 1000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const round = (x, d = 1) => (Number.isFinite(x) ? Number(x.toFixed(d)) : null);

// Same rule as bench/bench_util.hpp summarize(): sorted sample, element at floor(p/100 * (n-1)).
export function summarize(sample) {
  if (sample.length === 0) return { p50: null, p90: null, p99: null, p99_9: null, max: null };
  const v = Float64Array.from(sample).sort();
  const at = (p) => round(v[Math.floor((p / 100) * (v.length - 1))]);
  return { p50: at(50), p90: at(90), p99: at(99), p99_9: at(99.9), max: round(v[v.length - 1]) };
}

const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

function parse(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      masters: { type: 'string' },
      scenario: { type: 'string' },
      json: { type: 'string' },
      seconds: { type: 'string', default: '3' },
      cycles: { type: 'string', default: '5000' },
      warmup: { type: 'string', default: '500' },
      concurrency: { type: 'string', default: '16' },
      contenders: { type: 'string', default: '16' },
      autopipeline: { type: 'string', default: '0' },
      'hold-ms': { type: 'string', default: '0' },
      'retry-delay': { type: 'string' },
      'retry-jitter': { type: 'string' },
      'ttl-ms': { type: 'string', default: '10000' },
      'max-seconds': { type: 'string', default: '120' },
      timeout: { type: 'string' },
    },
    strict: true,
  });
  if (!values.masters || !values.scenario || !values.json) {
    throw new Error('usage: --masters h:p,... --scenario a|b|c|d --json OUT [--seconds S] [--cycles N] ' +
      '[--warmup W] [--concurrency C] [--contenders K] [--autopipeline 0|1] [--hold-ms H] ' +
      '[--retry-delay MS] [--retry-jitter MS] [--ttl-ms T] [--max-seconds S] [--timeout S]');
  }
  if (!['a', 'b', 'c', 'd'].includes(values.scenario)) throw new Error(`unknown scenario ${values.scenario}`);
  const int = (k) => {
    const n = Number(values[k]);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${k} must be a non-negative number`);
    return n;
  };
  const masters = values.masters.split(',').filter(Boolean).map((hp) => {
    const i = hp.lastIndexOf(':');
    return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) };
  });
  if (masters.length === 0 || masters.some((m) => !m.host || !(m.port > 0))) throw new Error('bad --masters');
  const o = {
    masters,
    scenario: values.scenario,
    json: values.json,
    seconds: int('seconds'),
    cycles: Math.floor(int('cycles')),
    warmup: Math.floor(int('warmup')),
    concurrency: Math.max(1, Math.floor(int('concurrency'))),
    contenders: Math.max(1, Math.floor(int('contenders'))),
    autopipeline: values.autopipeline === '1',
    holdMs: int('hold-ms'),
    retryDelay: values['retry-delay'] === undefined ? undefined : Math.floor(int('retry-delay')),
    retryJitter: values['retry-jitter'] === undefined ? undefined : Math.floor(int('retry-jitter')),
    ttlMs: Math.floor(int('ttl-ms')),
    maxSeconds: int('max-seconds'),
  };
  // Hard bound on the whole process: generous, but a hung master or a stuck retry loop cannot keep
  // it alive forever.
  o.timeoutS = values.timeout !== undefined ? int('timeout')
    : (o.scenario === 'a' || o.scenario === 'd') ? o.maxSeconds + 60 : 3 * o.seconds + 30;
  return o;
}

// Five ioredis clients, one per master, as both libraries' READMEs show. Waits up to 5 s for all
// of them; goes on with a majority (reported as masters_ready), fails below that.
async function connect(masters, autopipeline) {
  const clients = masters.map((m) => new Redis({ host: m.host, port: m.port, enableAutoPipelining: autopipeline }));
  // Errors are reported by the libraries through failed operations; keep ioredis from printing
  // unhandled 'error' events on its own.
  for (const c of clients) c.on('error', () => {});
  let t;
  await Promise.race([
    Promise.all(clients.map((c) => (c.status === 'ready' ? null : new Promise((resolve) => c.once('ready', resolve))))),
    new Promise((resolve) => { t = setTimeout(resolve, 5000); }),
  ]);
  clearTimeout(t);
  const ready = clients.filter((c) => c.status === 'ready').length;
  if (ready < Math.floor(clients.length / 2) + 1) {
    const err = new Error(`only ${ready} of ${clients.length} masters ready after 5 s`);
    err.clients = clients;
    throw err;
  }
  return { clients, ready };
}

// QUIT each client and wait for its connection to end. disconnect() only as a fallback: on a
// connection that has already ended, ioredis's disconnect() arms a 2 s timer nothing clears.
async function disconnect(clients) {
  const within = (p, ms) => {
    let t;
    return Promise.race([p, new Promise((resolve) => { t = setTimeout(resolve, ms); })]).finally(() => clearTimeout(t));
  };
  await Promise.all(clients.map(async (c) => {
    if (c.status === 'end') return;
    if (c.status !== 'ready') {
      c.disconnect(); // never connected, or reconnecting: stop it
      return;
    }
    const ended = new Promise((resolve) => c.once('end', resolve));
    try {
      await within(c.quit(), 1000);
    } catch { /* the connection closed first */ }
    await within(ended, 500);
    if (c.status !== 'end') c.disconnect();
  }));
}

// (a) and (d): sequential lock+unlock on one resource; warm-up cycles are not measured. Stops
// early (truncated: true) once --max-seconds have passed, warm-up included: a peer that waits for
// every master takes ~100 ms a cycle in (d).
async function sequential(impl, o, resource, live) {
  const locker = impl.locker(resource);
  const lockUnlock = [], lockOnly = [];
  live.lockUnlock = lockUnlock;
  let failures = 0, releaseFailures = 0, measured = 0, wallUs = 0, cpu = 0, truncated = false;
  const until = now() + BigInt(Math.round(o.maxSeconds * 1e9));
  for (let i = 0; i < o.warmup + o.cycles; ++i) {
    if (now() >= until) {
      truncated = true;
      break;
    }
    if (i === o.warmup) {
      live.t0 = now();
      live.cpu0 = cpuUs();
    }
    const s = now();
    let h;
    try {
      h = await locker.acquire();
    } catch {
      ++failures;
      continue;
    }
    const locked = usSince(s);
    let ok = false;
    try { ok = await locker.release(h); } catch { ok = false; }
    if (!ok) ++releaseFailures;
    if (i >= o.warmup) {
      lockUnlock.push(usSince(s));
      lockOnly.push(locked);
      ++measured;
    }
  }
  if (live.t0 !== undefined) {
    wallUs = usSince(live.t0);
    cpu = cpuUs() - live.cpu0;
  }
  return {
    cycles: measured,
    cycles_requested: o.cycles,
    truncated,
    warmup: o.warmup,
    lock_unlock_us: summarize(lockUnlock),
    lock_us: summarize(lockOnly),
    cycles_per_s: measured ? round(measured / (wallUs / 1e6), 1) : 0,
    cpu_us_per_cycle: measured ? round(cpu / measured, 2) : null,
    failures,
    release_failures: releaseFailures,
  };
}

// (b): C concurrent loops, each locking its own resource back to back for S seconds.
async function throughput(impl, o, prefix, live) {
  const lat = [];
  live.lockUnlock = lat;
  let cycles = 0, failures = 0, releaseFailures = 0;
  const until = now() + BigInt(Math.round(o.seconds * 1e9));
  const cpu0 = cpuUs();
  const t0 = now();
  const loop = async (k) => {
    const locker = impl.locker(`${prefix}:${k}`);
    while (now() < until) {
      const s = now();
      let h;
      try {
        h = await locker.acquire();
      } catch {
        ++failures;
        continue;
      }
      let ok = false;
      try { ok = await locker.release(h); } catch { ok = false; }
      if (!ok) ++releaseFailures;
      lat.push(usSince(s));
      ++cycles;
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, (_, k) => loop(k)));
  const wall = usSince(t0) / 1e6;
  const cpu = cpuUs() - cpu0;
  return {
    concurrency: o.concurrency,
    autopipeline: o.autopipeline,
    seconds: round(wall, 3),
    cycles,
    cycles_per_s: round(cycles / wall, 1),
    latency_us: summarize(lat),
    cpu_us_per_cycle: cycles ? round(cpu / cycles, 2) : null,
    failures,
    release_failures: releaseFailures,
  };
}

// (c): K contenders on ONE resource with the library's retries for S seconds. As in the C++
// benchmark, a contender keeps going until the deadline, then finishes the acquisition it is in;
// hand-overs per second = all successful acquisitions / wall time until every contender stopped.
async function contention(impl, o, resource, live) {
  const shares = new Array(o.contenders).fill(0);
  const waits = [];
  live.shares = shares;
  let failures = 0, releaseFailures = 0, afterDeadline = 0;
  const until = now() + BigInt(Math.round(o.seconds * 1e9));
  const cpu0 = cpuUs();
  const t0 = now();
  const loop = async (k) => {
    const locker = impl.locker(resource);
    while (now() < until) {
      const s = now();
      let h;
      try {
        h = await locker.acquire();
      } catch {
        ++failures;
        continue;
      }
      waits.push(usSince(s));
      ++shares[k];
      if (now() >= until) ++afterDeadline;
      if (o.holdMs > 0) await sleep(o.holdMs);
      let ok = false;
      try { ok = await locker.release(h); } catch { ok = false; }
      if (!ok) ++releaseFailures;
    }
  };
  await Promise.all(Array.from({ length: o.contenders }, (_, k) => loop(k)));
  const wall = usSince(t0) / 1e6;
  const total = shares.reduce((a, b) => a + b, 0);
  const mean = total / o.contenders;
  return {
    contenders: o.contenders,
    hold_ms: o.holdMs,
    seconds: round(wall, 3),
    handovers: total,
    handovers_per_s: round(total / wall, 1),
    handovers_after_deadline: afterDeadline,
    fairness: total ? round(Math.min(...shares) / mean, 3) : 0,
    shares,
    acquire_wait_us: summarize(waits),
    cpu_us_per_handover: total ? round((cpuUs() - cpu0) / total, 2) : null,
    failures,
    release_failures: releaseFailures,
  };
}

function line(r) {
  const lu = r.lock_unlock_us;
  switch (r.scenario) {
    case 'a':
    case 'd':
      return `(${r.scenario}) ${r.library}: lock+unlock p50 ${lu.p50} p90 ${lu.p90} p99 ${lu.p99} p99.9 ${lu.p99_9} max ${lu.max} us; ` +
        `${r.cycles_per_s} cycles/s; CPU ${r.cpu_us_per_cycle} us/cycle; failures ${r.failures}`;
    case 'b':
      return `(b) ${r.library} C=${r.concurrency} autopipeline=${r.autopipeline ? 1 : 0}: ${r.cycles_per_s} cycles/s ` +
        `p50 ${r.latency_us.p50} p99 ${r.latency_us.p99} us; CPU ${r.cpu_us_per_cycle} us/cycle; failures ${r.failures}`;
    case 'c':
      return `(c) ${r.library} ${r.contenders} contenders: ${r.handovers_per_s} hand-overs/s fairness ${r.fairness} ` +
        `failures ${r.failures} shares [${r.shares.join(' ')}]`;
    default:
      return JSON.stringify(r);
  }
}

export async function main(peer) {
  let o;
  try {
    o = parse(process.argv.slice(2));
  } catch (e) {
    console.error(`${peer.name}: ${e.message}`);
    process.exit(2);
  }
  const retry = o.scenario === 'c' ? peer.contentionRetry(o) : null;
  const base = {
    library: peer.name,
    package: peer.package,
    version: packageVersion(peer.package),
    client: 'ioredis',
    client_version: packageVersion('ioredis'),
    node: process.version,
    scenario: o.scenario,
    masters: o.masters.map((m) => `${m.host}:${m.port}`),
    ttl_ms: o.ttlMs,
    // What the run used for retries: the library's documented defaults in a, b and d (uncontended,
    // they never retry); in c the settings below.
    retry: retry ?? { ...peer.defaults, source: 'library defaults' },
  };
  const write = (r) => {
    writeFileSync(o.json, `${JSON.stringify(r, null, 2)}\n`);
    return r;
  };

  // Partial results reachable from the watchdog.
  const live = {};
  let clients = [];
  const watchdog = setTimeout(() => {
    const r = write({ ...base, error: `run exceeded its bound of ${o.timeoutS} s`, timed_out: true,
      partial_lock_unlock_us: live.lockUnlock ? summarize(live.lockUnlock) : undefined,
      partial_shares: live.shares });
    console.log(`${peer.name} (${o.scenario}): TIMED OUT after ${o.timeoutS} s; wrote ${o.json}`);
    for (const c of clients) c.disconnect();
    process.exit(3);
  }, o.timeoutS * 1000);

  let result;
  try {
    let ready;
    try {
      ({ clients, ready } = await connect(o.masters, o.autopipeline));
    } catch (e) {
      clients = e.clients ?? [];
      throw e;
    }
    base.masters_ready = ready;
    const impl = peer.make(clients, { retry, ttlMs: o.ttlMs });
    const prefix = `peers:${peer.name}:${o.scenario}:${process.pid}:${Date.now().toString(36)}`;
    let r;
    if (o.scenario === 'a' || o.scenario === 'd') r = await sequential(impl, o, prefix, live);
    else if (o.scenario === 'b') r = await throughput(impl, o, prefix, live);
    else r = await contention(impl, o, prefix, live);
    result = write({ ...base, ...r });
    console.log(line(result));
  } catch (e) {
    write({ ...base, error: String(e?.message ?? e) });
    console.error(`${peer.name} (${o.scenario}): ${e?.stack ?? e}`);
    process.exitCode = 1;
  } finally {
    clearTimeout(watchdog);
    await disconnect(clients);
  }
  // Everything is closed; if a library left something behind (a retry timer, a socket), do not
  // wait for it. unref(): this timer itself keeps nothing alive.
  setTimeout(() => {
    console.error(`${peer.name}: still open 2 s after the run (${process.getActiveResourcesInfo().join(', ')}); exiting`);
    process.exit(process.exitCode ?? 0);
  }, 2000).unref();
}
