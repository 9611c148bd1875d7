// SPDX-License-Identifier: BSL-1.0
// A worker process of the safety suite: contends for a few resources for a bounded time and
// writes every critical section it ran (resource, token, enter, exit, validity deadline on
// redlock::clock, CLOCK_BOOTTIME, which every process of the machine shares, and the bitmask of
// the masters that granted it: bit i for master i) to a file, plus a summary line of its errors.
//
// Modes: `normal` uses redlock::client. `no_nx` and `first_ok` are deliberately broken clients
// (SET without NX; "acquired" at the first OK) so the checker can be shown to catch them.
//
// The lock kinds (the checker holds each to its own invariant): `--kind exclusive|read|write|rw|
// semaphore` (`rw`: each lock is a write with `--write-percent W`, else a read), `--permits P` for
// a semaphore, `--fence` for a fenced exclusive lock (each section writes once, at a logged time,
// to the checker's toy fenced store), `--multi A-B` for locks of A..B resources drawn from
// `--resources` (by `async_lock_all`; a set of one by plain `async_lock`, so both interoperate).
// Every section line then carries the kind's fields (`kind=`, `permits=`, `fence=`, `write=`), and
// a multi-resource section names its resources joined by commas.
//
// Deliberately broken kinds, for the negative tests (the line says what the worker claims):
// `writer_reads` locks its writes as reads; `over_permits` locks the semaphore with P + 1 permits
// and claims P; `fake_fence` reports a fence of its own counting instead of the lock's;
// `first_only` locks only the first resource of a set and claims the set; `one_owner` (with
// `--kind reentrant`) locks under one owner shared by every worker and claims its own;
// `plain_reads` (with `--kind mixed`) takes its plain locks as reads and claims them exclusive. And the hazard fencing
// is for: `paused_writer` (with `--fence`) stalls every tenth section until 100 ms past its
// validity before its write, which the fenced store must then refuse.
//
// `--defaults` runs `normal` with the library's defaults: default-constructed connection_config
// per master (only host and port set) and client_config (only masters and max_ttl set), so
// request timeout, retry, connect timeout and reconnect are what an application gets out of the
// box. Without it the worker uses the short timeouts the safety suite needs
// (`--request-timeout-ms` applies). Either way `client_config::max_ttl` is the worker's ttl: it
// bounds the hazard guards' quarantine of a restarted or clock-jumped master (ttl + drift + 1 s),
// which the library's 60 s would stretch past any test's run.
//
// The hazard guards are on, as the library sets them: masters up for less than the quarantine
// (fresh ones too) do not count until it has passed. `--no-guard` turns both off (restart
// detection and the clock-jump check), to show what they prevent; `--no-restart-guard` only the
// first (masters the run started fresh, for tests of other faults). The summary line counts the
// restarts and clock jumps the client's guards saw (`restarts_seen`, `jumps_seen`).
//
// `--hold-ms A-B` holds each lock for a uniform A..B ms (default 1-8) and, for the fair
// hand-over tests, reports the longest `async_lock` wait (`longest_wait_ms`), the waits that
// queued, the attempts started by wake-ups and the locks handed over; `--no-fair` turns
// `client_config::fairness` off, `--no-hand-over` only its hand-over.
// `--max-wait-ms N` and `--entry-timeout-ms N` set `retry.max_wait` and `fairness.entry_timeout`
// (also with `--defaults`): a waiter that stays queued for the fair hand-over tests.
//
// SIGUSR1 ends the run before `--seconds` (at the next attempt): for a test that starts its
// workers with time to spare and stops them once what it watches is over.
//
// Usage: redlock_worker --masters h:p,... --resources a,b --seconds S --ttl-ms T --out FILE
//                       [--mode normal|no_nx|first_ok] [--request-timeout-ms R] [--seed N]
//                       [--defaults] [--no-fair] [--no-hand-over] [--hold-ms A-B] [--max-wait-ms N]
//                       [--entry-timeout-ms N] [--kind K] [--write-percent W] [--permits P]
//                       [--fence] [--multi A-B] [--owners N] [--no-guard] [--no-restart-guard]
//                       [--mode writer_reads|over_permits|fake_fence|first_only|paused_writer|
//                               one_owner|plain_reads]

#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/timer.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using redlock::lock_options;

namespace {

volatile std::sig_atomic_t stop_requested = 0;  // SIGUSR1

void request_stop(int) { stop_requested = 1; }

// Whether to start another attempt: before `until`, and not told to stop.
bool keep_going(clock_type::time_point until) { return stop_requested == 0 && clock_type::now() < until; }

struct options {
  std::vector<redlock::connection_config> masters;
  std::vector<std::string> resources;
  double seconds = 5;
  long ttl_ms = 500;
  long request_timeout_ms = 50;
  std::string out;
  std::string mode = "normal";
  unsigned seed = 1;
  bool defaults = false;
  bool fair = true;
  bool hand_over = true;
  bool guard = true;          // the hazard guards (restarts, clock jumps) as the library sets them
  bool restart_guard = true;  // the restart guard alone (--no-restart-guard)
  int hold_min_ms = 1, hold_max_ms = 8;
  long max_wait_ms = -1;       // -1: the mode's own
  long entry_timeout_ms = -1;  // -1: the library's
  // exclusive, read, write, rw (each lock a read or a write), semaphore, reentrant (owner
  // "owner-<seed % owners>"), mixed (each lock plain, a read or a write, at random)
  std::string kind = "exclusive";
  int write_percent = 30;  // rw: the share of writes
  int owners = 2;          // reentrant: how many owners the workers are spread over
  std::size_t permits = 1;
  bool fence = false;
  std::size_t multi_min = 0, multi_max = 0;  // 0: one resource per lock
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::int64_t ns(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

asio::awaitable<void> sleep_for(clock_type::duration d) {
  redlock::timer t{co_await asio::this_coro::executor, d};
  co_await t.async_wait(use_tuple);
}

asio::awaitable<void> sleep_until(clock_type::time_point at) {
  redlock::timer t{co_await asio::this_coro::executor, at};
  co_await t.async_wait(use_tuple);
}

struct recorder {
  std::ofstream file;
  std::map<std::string, long> counts;
  void section(const std::string& resource, const std::string& token, clock_type::time_point enter,
               clock_type::time_point exit, clock_type::time_point deadline, std::uint32_t granted,
               const std::string& fields) {
    file << resource << ' ' << token << ' ' << ns(enter) << ' ' << ns(exit) << ' ' << ns(deadline) << ' ' << granted
         << fields << '\n';
    ++counts["sections"];
  }
};

// What a section line says about its lock beyond the plain one (the checker's key=value fields).
struct claim {
  std::string kind = "exclusive";
  std::size_t permits = 0;  // 0: not a semaphore
  std::uint64_t fence = 0;  // 0: not fenced; a fenced section writes to the store once
  bool pause = false;       // stall past the validity before that write (`paused_writer`)
  std::string owner;        // reentrant: the owner whose holds may share the resource

  std::string fields() const {
    std::string out;
    if (kind != "exclusive") out += " kind=" + kind;
    if (!owner.empty()) out += " owner=" + owner;
    if (permits != 0) out += fmt::format(" permits={}", permits);
    if (fence != 0) out += fmt::format(" fence={}", fence);
    return out;
  }
};

// The guarded work: `hold` ms drawn uniformly, never started past the validity.
asio::awaitable<void> critical_section(recorder& rec, std::mt19937& rng, const std::string& resource,
                                       const std::string& token, clock_type::time_point deadline, std::uint32_t granted,
                                       std::pair<int, int> hold, claim what) {
  const auto enter = clock_type::now();
  if (enter >= deadline) {
    ++rec.counts["late_grant"];
    co_return;
  }
  const auto work = std::chrono::milliseconds{std::uniform_int_distribution<int>{hold.first, hold.second}(rng)};
  const auto span = std::min<clock_type::duration>(work, (deadline - enter) / 2);
  auto fields = what.fields();
  if (what.fence != 0) {  // the guarded write, halfway through
    co_await sleep_for(span / 2);
    if (what.pause) co_await sleep_until(deadline + 100ms);  // a holder stalled past its validity
    fields += fmt::format(" write={}", ns(clock_type::now()));
    co_await sleep_for(span - span / 2);
  } else {
    co_await sleep_for(span);
  }
  rec.section(resource, token, enter, clock_type::now(), deadline, granted, fields);
}

// `k` of `pool`, drawn at random, in the pool's order.
std::vector<std::string> pick_set(const std::vector<std::string>& pool, std::size_t k, std::mt19937& rng) {
  std::vector<std::string> out;
  std::sample(pool.begin(), pool.end(), std::back_inserter(out), std::min(k, pool.size()), rng);
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// Bit i set when master i granted the lock (its answer in the acquisition that decided).
std::uint32_t granted_mask(const redlock::lock& l) {
  std::uint32_t mask = 0;
  const auto answers = l.masters();
  for (std::size_t i = 0; i < answers.size() && i < 32; ++i) {
    if (answers[i].status == redlock::master_status::granted) mask |= std::uint32_t{1} << i;
  }
  return mask;
}

asio::awaitable<void> run_normal(const options& o, recorder& rec) {
  redlock::client_config cfg;
  cfg.masters = o.masters;
  // REDLOCK_WORKER_LOG=1: the client's debug log, stamped on redlock::clock (ns, like the
  // records), in OUT.log; for finding out what a gap in the records was made of.
  std::shared_ptr<std::ofstream> log;
  if (const char* v = std::getenv("REDLOCK_WORKER_LOG"); v && *v && std::string_view{v} != "0") {
    log = std::make_shared<std::ofstream>(o.out + ".log");
    cfg.logging.level = redlock::log_level::debug;
    cfg.logging.sink = [log](redlock::log_level, std::string_view m) {
      *log << ns(clock_type::now()) << ' ' << m << '\n';
    };
  }
  cfg.fairness.enabled = o.fair;
  // Also with --defaults: the quarantine is derived from it, and 60 s would outlast every run.
  cfg.max_ttl = std::chrono::milliseconds{o.ttl_ms};
  if (!o.restart_guard) cfg.guard.restarts = redlock::restart_detection::off;
  if (!o.guard) {
    cfg.guard.restarts = redlock::restart_detection::off;
    cfg.guard.clock_jumps = false;
  }
  if (!o.defaults) {
    cfg.request_timeout = std::chrono::milliseconds{o.request_timeout_ms};
    cfg.retry.max_wait = 1000ms;
    cfg.retry.base_delay = 5ms;
    cfg.retry.jitter = 30ms;
  }
  if (o.max_wait_ms >= 0) cfg.retry.max_wait = std::chrono::milliseconds{o.max_wait_ms};
  if (o.entry_timeout_ms >= 0) cfg.fairness.entry_timeout = std::chrono::milliseconds{o.entry_timeout_ms};
  cfg.fairness.hand_over = o.hand_over;
  redlock::client c{co_await asio::this_coro::executor, cfg};
  std::mt19937 rng{o.seed};
  const auto until =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.seconds));
  const auto ttl = std::chrono::milliseconds{o.ttl_ms};
  std::uint64_t made_up_fence = 0;  // `fake_fence`
  while (keep_going(until)) {
    std::vector<std::string> set;
    if (o.multi_max > 0) {
      set = pick_set(o.resources, std::uniform_int_distribution<std::size_t>{o.multi_min, o.multi_max}(rng), rng);
    } else {
      set = pick_set(o.resources, 1, rng);
    }
    const auto resource = join(set);
    claim what;
    lock_options opts;
    if (o.kind == "rw") {
      what.kind = std::uniform_int_distribution<int>{0, 99}(rng) < o.write_percent ? "write" : "read";
    } else if (o.kind == "mixed") {
      static constexpr const char* kinds[] = {"exclusive", "read", "write"};
      what.kind = kinds[std::uniform_int_distribution<int>{0, 2}(rng)];
    } else if (o.kind == "reentrant") {
      what.kind = "exclusive";
      // The owner it claims; `one_owner` locks under one owner shared by every worker instead.
      what.owner = fmt::format("owner-{}", o.seed % static_cast<unsigned>(o.owners));
      opts.owner = o.mode == "one_owner" ? std::string{"everyone"} : what.owner;
    } else {
      what.kind = o.kind;
    }
    if (what.kind == "read") opts.kind = redlock::lock_kind::read;
    // `plain_reads` takes its plain locks as reads and claims them exclusive.
    if (what.kind == "exclusive" && o.kind == "mixed" && o.mode == "plain_reads") opts.kind = redlock::lock_kind::read;
    if (what.kind == "write")
      opts.kind = o.mode == "writer_reads" ? redlock::lock_kind::read : redlock::lock_kind::write;
    if (what.kind == "semaphore") {
      opts.kind = redlock::lock_kind::semaphore;
      what.permits = o.permits;
      opts.permits = o.mode == "over_permits" ? o.permits + 1 : o.permits;
    }
    opts.fence = o.fence;
    const auto asked = clock_type::now();
    boost::system::error_code ec;
    redlock::lock l;
    if (set.size() > 1 && o.mode == "first_only") {
      std::tie(ec, l) = co_await c.async_lock(set.front(), ttl, use_tuple);
    } else if (set.size() > 1) {
      std::tie(ec, l) = co_await c.async_lock_all(set, ttl, use_tuple);
    } else if (what.kind == "exclusive" && !o.fence && opts.owner.empty() &&
               opts.kind == redlock::lock_kind::exclusive) {  // the plain path (fair hand-over included)
      std::tie(ec, l) = co_await c.async_lock(resource, ttl, use_tuple);
    } else {
      std::tie(ec, l) = co_await c.async_lock(resource, ttl, opts, use_tuple);
    }
    ++rec.counts["attempted"];
    auto& longest = rec.counts["longest_wait_ms"];
    longest = std::max<long>(
        longest,
        static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - asked).count()));
    if (ec) {
      ++rec.counts[ec == redlock::error::not_acquired         ? "not_acquired"
                   : ec == redlock::error::quorum_unavailable ? "quorum_unavailable"
                   : ec == redlock::error::validity_expired   ? "validity_expired"
                                                              : "other_error"];
      continue;
    }
    if (o.fence) what.fence = o.mode == "fake_fence" ? ++made_up_fence : l.fence();
    what.pause = o.mode == "paused_writer" && rec.counts["sections"] % 10 == 9;
    co_await critical_section(rec, rng, resource, l.token(), l.validity_deadline(), granted_mask(l),
                              {o.hold_min_ms, o.hold_max_ms}, what);
    co_await l.async_unlock(use_tuple);
    co_await sleep_for(std::chrono::milliseconds{std::uniform_int_distribution<int>{0, 3}(rng)});
  }
  // How the connections fared (reported beside the errors; zero counts are left out).
  const auto stats = c.stats();
  for (const auto& m : stats.masters) {
    rec.counts["reconnects"] += static_cast<long>(m.disconnects);
    rec.counts["stalls"] += static_cast<long>(m.stalls);
    rec.counts["master_timeouts"] += static_cast<long>(m.timeouts);
  }
  rec.counts["releases_resent"] += static_cast<long>(stats.releases_resent);
  rec.counts["queued"] += static_cast<long>(stats.locks_queued);
  rec.counts["wakeups"] += static_cast<long>(stats.lock_wakeups);
  rec.counts["handovers"] += static_cast<long>(stats.lock_handovers);
  rec.counts["fence_confirmations"] += static_cast<long>(stats.fence_confirmations);
  for (const auto& h : c.hazards()) {
    rec.counts["restarts_seen"] += static_cast<long>(h.restarts);
    rec.counts["jumps_seen"] += static_cast<long>(h.clock_jumps);
  }
  std::erase_if(rec.counts, [](const auto& kv) { return kv.second == 0; });
  c.close();
}

// A deliberately broken client on raw connections: `no_nx` overwrites whatever is there (and
// believes a majority of OKs), `first_ok` believes the first master that says OK.
asio::awaitable<void> run_broken(const options& o, recorder& rec) {
  auto ex = co_await asio::this_coro::executor;
  std::vector<std::unique_ptr<redlock::connection>> conns;
  for (const auto& m : o.masters) {
    conns.push_back(std::make_unique<redlock::connection>(ex, m));
    conns.back()->async_run(asio::detached);
  }
  co_await sleep_for(100ms);
  std::mt19937 rng{o.seed};
  const bool no_nx = o.mode == "no_nx";
  const std::pair<int, int> hold{1, 8};
  const auto until =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.seconds));
  while (keep_going(until)) {
    const auto& resource = o.resources[std::uniform_int_distribution<std::size_t>{0, o.resources.size() - 1}(rng)];
    const std::string token = fmt::format("broken-{}-{}", o.seed, rec.counts["attempted"]++);
    const auto start = clock_type::now();
    auto ok = std::make_shared<std::size_t>(0);
    auto answered = std::make_shared<std::size_t>(0);
    auto granted = std::make_shared<std::uint32_t>(0);
    for (std::size_t i = 0; i < conns.size(); ++i) {
      auto& c = conns[i];
      redlock::resp::request r;
      if (no_nx) {
        r.push("SET", resource, token, "PX", o.ttl_ms);
      } else {
        r.push("SET", resource, token, "NX", "PX", o.ttl_ms);
      }
      c->async_exec(std::move(r), std::chrono::milliseconds{o.request_timeout_ms},
                    [ok, answered, granted, i](boost::system::error_code ec, redlock::resp::response resp) {
                      ++*answered;
                      if (!ec && !resp.empty() && resp[0].value == "OK") {
                        ++*ok;
                        if (i < 32) *granted |= std::uint32_t{1} << i;
                      }
                    });
    }
    const std::size_t need = no_nx ? redlock::core::majority(conns.size()) : 1;
    while (*ok < need && *answered < conns.size()) co_await sleep_for(100us);
    if (*ok >= need) {
      const auto deadline = redlock::core::validity_deadline<clock_type>(std::chrono::milliseconds{o.ttl_ms}, start,
                                                                         redlock::core::drift_policy{});
      // Named, not temporaries: GCC 12 destroys a temporary argument of a coroutine twice here.
      const claim plain;
      co_await critical_section(rec, rng, resource, token, deadline, *granted, hold, plain);
      for (auto& c : conns) {
        redlock::resp::request del;
        del.push("DEL", resource);
        c->async_exec(std::move(del), 100ms, [](boost::system::error_code, redlock::resp::response) {});
      }
    }
    co_await sleep_for(std::chrono::milliseconds{std::uniform_int_distribution<int>{0, 3}(rng)});
  }
  for (auto& c : conns) c->close();
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::string masters;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--defaults") {  // the flags without a value
      o.defaults = true;
      continue;
    }
    if (a == "--no-fair") {
      o.fair = false;
      continue;
    }
    if (a == "--no-hand-over") {
      o.hand_over = false;
      continue;
    }
    if (a == "--fence") {
      o.fence = true;
      continue;
    }
    if (a == "--no-guard") {
      o.guard = false;
      continue;
    }
    if (a == "--no-restart-guard") {
      o.restart_guard = false;
      continue;
    }
    if (i + 1 >= argc) break;
    const std::string v = argv[++i];
    if (a == "--masters") {
      masters = v;
    } else if (a == "--resources") {
      o.resources = split(v);
    } else if (a == "--seconds") {
      o.seconds = std::stod(v);
    } else if (a == "--ttl-ms") {
      o.ttl_ms = std::stol(v);
    } else if (a == "--request-timeout-ms") {
      o.request_timeout_ms = std::stol(v);
    } else if (a == "--out") {
      o.out = v;
    } else if (a == "--mode") {
      o.mode = v;
    } else if (a == "--seed") {
      o.seed = static_cast<unsigned>(std::stoul(v));
    } else if (a == "--hold-ms") {
      const auto dash = v.find('-');
      o.hold_min_ms = std::stoi(v.substr(0, dash));
      o.hold_max_ms = dash == std::string::npos ? o.hold_min_ms : std::stoi(v.substr(dash + 1));
    } else if (a == "--max-wait-ms") {
      o.max_wait_ms = std::stol(v);
    } else if (a == "--entry-timeout-ms") {
      o.entry_timeout_ms = std::stol(v);
    } else if (a == "--kind") {
      o.kind = v;
    } else if (a == "--write-percent") {
      o.write_percent = std::stoi(v);
    } else if (a == "--permits") {
      o.permits = std::stoul(v);
    } else if (a == "--owners") {
      o.owners = std::stoi(v);
    } else if (a == "--multi") {
      const auto dash = v.find('-');
      o.multi_min = std::stoul(v.substr(0, dash));
      o.multi_max = dash == std::string::npos ? o.multi_min : std::stoul(v.substr(dash + 1));
    }
  }
  if (!masters.empty()) {
    for (const auto& hp : split(masters)) {
      redlock::connection_config m;
      if (hp.starts_with("redis-cluster://")) {  // a cluster master: the library reads its seeds
        std::vector<redlock::connection_config> one;
        if (redlock::parse_masters(hp, one)) throw std::runtime_error("bad cluster master " + hp);
        m = one.front();
      } else {
        const auto colon = hp.rfind(':');
        m.host = hp.substr(0, colon);
        m.port = static_cast<std::uint16_t>(std::stoul(hp.substr(colon + 1)));
      }
      if (!o.defaults) {
        m.connect_timeout = 200ms;
        m.reconnect = {10ms, 100ms, 0.5};
      }
      o.masters.push_back(m);
    }
  }
  const bool known_kind = o.kind == "exclusive" || o.kind == "read" || o.kind == "write" || o.kind == "rw" ||
                          o.kind == "semaphore" || o.kind == "reentrant" || o.kind == "mixed";
  if (o.masters.empty() || o.resources.empty() || o.out.empty() || !known_kind || o.multi_min > o.multi_max ||
      (o.multi_max > 0 && o.multi_min == 0)) {
    std::fprintf(stderr, "usage: redlock_worker --masters h:p,... --resources a,b --out FILE [...]\n");
    return 2;
  }
  std::signal(SIGUSR1, request_stop);
  recorder rec;
  rec.file.open(o.out);
  asio::io_context ioc;
  const bool raw = o.mode == "no_nx" || o.mode == "first_ok";
  asio::co_spawn(ioc, raw ? run_broken(o, rec) : run_normal(o, rec), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  ioc.run();
  // The summary line the test reads: counts by kind.
  rec.file << "#";
  for (const auto& [k, v] : rec.counts) rec.file << ' ' << k << '=' << v;
  rec.file << '\n';
  return 0;
}
