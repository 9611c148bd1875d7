// SPDX-License-Identifier: BSL-1.0
// Mutual exclusion under real faults: several worker processes, each with its own client, contend
// for a few resources while masters are killed, stopped, delayed, blackholed, reset and
// restarted; the checker proves no two critical sections on one resource overlapped and none ran
// past its validity. Negative tests show the checker catches broken clients, and the documented
// hazards (an immediate restart without persistence, a forward jump of a master's wall clock) are
// reproduced on purpose with the hazard guards off, and shown caught with them on.

#include "checker.hpp"
#include <redlock/client.hpp>
#include <redlock/core/key_slot.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/hazard.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_clock.hpp>
#include <redlock_test/master_set.hpp>

#include <gtest/gtest.h>

#include <fmt/core.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
using redlock::test::check;
using redlock::test::section;

constexpr long ttl_ms = 300;
constexpr int workers = 4;
constexpr double worker_seconds = 5.0;

std::int64_t ns(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The hazard guards' quarantine for workers of `ttl`, which set max_ttl to it: the default of
// hazard_guard_options::quarantine (max_ttl, its drift allowance and 1 s).
std::chrono::milliseconds quarantine_for(std::chrono::milliseconds ttl) {
  return ttl + std::chrono::ceil<std::chrono::milliseconds>(redlock::core::drift(ttl, {})) + 1s;
}

// What the workers of a scenario do: their mode, number, resources, time, ttl, whether their
// hazard guards are on, and the kind's flags.
struct workload {
  std::string mode = "normal";
  int count = workers;
  std::string resources = "alpha,beta";
  double seconds = worker_seconds;
  std::chrono::milliseconds ttl{ttl_ms};
  bool guard = true;
  std::vector<std::string> flags;
  std::string masters;  // the workers' master list; empty: the run's own five servers
};

// One scenario: five masters (optionally behind fault proxies; started with `options`, e.g. the
// clock shim), worker processes, a fault script.
class contention_run {
 public:
  explicit contention_run(bool proxied, redlock::test::redis_options options = {}, std::size_t servers = 5)
      : servers_{servers, std::move(options)} {
    if (proxied) {
      for (std::size_t i = 0; i < servers_.size(); ++i) {
        proxies_.push_back(std::make_unique<redlock::test::fault_proxy>(servers_[i].host(), servers_[i].port()));
      }
    }
    dir_ = std::filesystem::temp_directory_path() / fmt::format("redlock-safety-{}-{}", ::getpid(), ++runs_);
    std::filesystem::create_directories(dir_);
  }
  ~contention_run() {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    // REDLOCK_SAFETY_KEEP=1 keeps the workers' records (and, with REDLOCK_WORKER_LOG=1, their
    // clients' logs) for a look at what happened.
    if (const char* keep = std::getenv("REDLOCK_SAFETY_KEEP"); keep && *keep && std::string_view{keep} != "0") {
      std::printf("  records kept in %s\n", dir_.c_str());
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  redlock::test::master_set& servers() { return servers_; }
  redlock::test::fault_proxy& proxy(std::size_t i) { return *proxies_.at(i); }

  void start(const std::string& mode = "normal", int count = workers) {
    workload w;
    w.mode = mode;
    w.count = count;
    start(w);
  }

  // Starts the workers. Guarded ones (the library's default) first sit out the quarantine of the
  // fresh masters: a master up for less than the quarantine looks restarted to a client, which
  // cannot tell a start from a restart, so no vote counts until one quarantine after the workers
  // connect. They run that much longer, and `started()` (the schedule's offsets) is its end.
  void start(const workload& load) {
    kinds_ = std::any_of(load.flags.begin(), load.flags.end(),
                         [](const std::string& f) { return f == "--kind" || f == "--fence" || f == "--multi"; });
    const bool client = load.mode != "no_nx" && load.mode != "first_ok";  // the broken modes have none
    const auto warm_up = client && load.guard ? quarantine_for(load.ttl) + 500ms : 0ms;
    seconds_ = load.seconds;
    std::string masters = load.masters;
    if (masters.empty()) {
      for (std::size_t i = 0; i < servers_.size(); ++i) {
        const auto port = proxies_.empty() ? servers_[i].port() : proxies_[i]->port();
        masters += fmt::format("{}127.0.0.1:{}", i ? "," : "", port);
      }
    }
    for (int w = 0; w < load.count; ++w) {
      const auto out = (dir_ / fmt::format("worker-{}.txt", w)).string();
      outputs_.push_back(out);
      std::vector<std::string> args{REDLOCK_WORKER_PATH,
                                    "--masters",
                                    masters,
                                    "--resources",
                                    load.resources,
                                    "--seconds",
                                    fmt::format("{}", load.seconds + std::chrono::duration<double>(warm_up).count()),
                                    "--ttl-ms",
                                    std::to_string(load.ttl.count()),
                                    "--request-timeout-ms",
                                    "50",
                                    "--out",
                                    out,
                                    "--mode",
                                    load.mode,
                                    "--seed",
                                    std::to_string(w + 1)};
      if (!load.guard) args.emplace_back("--no-guard");
      args.insert(args.end(), load.flags.begin(), load.flags.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = -1;
      if (posix_spawn(&pid, REDLOCK_WORKER_PATH, nullptr, nullptr, argv.data(), environ) != 0) {
        throw std::runtime_error("cannot start the worker");
      }
      pids_.push_back(pid);
    }
    started_ = clock_type::now() + warm_up;
  }

  // Runs `faults` (on this thread, while the workers run), then waits for the workers.
  redlock::test::check_result finish(std::string_view name) {
    for (pid_t p : pids_) {
      int status = 0;
      ::waitpid(p, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker failed, status " << status;
    }
    pids_.clear();
    std::vector<section> all;
    std::map<std::string, long> errors;
    for (std::size_t w = 0; w < outputs_.size(); ++w) {
      auto s = redlock::test::read_sections(outputs_[w], static_cast<int>(w));
      all.insert(all.end(), s.begin(), s.end());
      redlock::test::read_counts(outputs_[w], errors);
    }
    counts_ = errors;
    sections_ = all;
    auto r = check(std::move(all), fault_healed_ ? ns(*fault_healed_) : 0);
    std::string kinds;
    for (const auto& [k, v] : errors) kinds += fmt::format(" {}={}", k, v);
    // The kinds' checks beside the workers' counts: each invariant's violations, then what shows
    // the kind was exercised (reads shared, holders of the semaphore at once, writes fenced).
    std::string checks;
    if (kinds_) {
      checks = fmt::format(
          " overlaps={} rw_conflicts={} over_permits={} fence_regressions={} stale_writes={};"
          " shared_reads={} write_sections={} max_holders={} fenced_writes={} multi_sections={} shared_holds={}"
          " exclusive_sections={};",
          r.overlaps, r.rw_conflicts, r.over_permits, r.fence_regressions, r.stale_writes, r.shared_reads,
          r.write_sections, r.max_holders, r.fenced_writes, r.multi_sections, r.shared_holds, r.exclusive_sections);
    }
    const auto row =
        fmt::format("| {} | {} | {} | {} | {:.0f} ms |{}{} |", name, r.sections, r.violations() - r.past_validity,
                    r.past_validity, static_cast<double>(r.max_gap_ns) / 1e6, checks, kinds);
    std::printf("%s\n", row.c_str());
    std::ofstream{"safety_report.md", std::ios::app} << row << '\n';
    for (const auto& e : r.examples) std::printf("  violation: %s\n", e.c_str());
    return r;
  }

  // The workers' summed counts (errors, and the fair hand-over's queued and wakeups), after finish().
  const std::map<std::string, long>& counts() const { return counts_; }

  // Every section the workers recorded, after finish().
  const std::vector<section>& sections() const { return sections_; }

  clock_type::time_point started() const { return started_; }
  // When the workers stop contending (about: each counts from its own start, and a stopped one
  // ends the attempt it is in).
  clock_type::time_point ends() const {
    const auto planned =
        started_ + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds_));
    return stopped_at_ ? std::min(*stopped_at_, planned) : planned;
  }
  // Stops the workers at `t` (SIGUSR1: each ends at its next attempt), before their `seconds`
  // when they were started with time to spare: a run that must go on for a while after its
  // faults, however long the faults took on a loaded machine.
  void stop_at(clock_type::time_point t) {
    std::this_thread::sleep_until(t);
    for (pid_t p : pids_) ::kill(p, SIGUSR1);
    stopped_at_ = t;
  }
  void sleep_until_offset(std::chrono::milliseconds offset) { std::this_thread::sleep_until(started_ + offset); }
  void healed_now() { fault_healed_ = clock_type::now(); }
  // For a fault whose effect lasts past it (a quarantine): when the lock may be had again.
  void healed_at(clock_type::time_point t) { fault_healed_ = t; }

 private:
  static inline int runs_ = 0;
  redlock::test::master_set servers_{5};
  std::vector<std::unique_ptr<redlock::test::fault_proxy>> proxies_;
  std::filesystem::path dir_;
  std::vector<std::string> outputs_;
  std::vector<pid_t> pids_;
  clock_type::time_point started_{};
  double seconds_ = 0;
  std::optional<clock_type::time_point> fault_healed_;
  std::optional<clock_type::time_point> stopped_at_;
  std::map<std::string, long> counts_;
  std::vector<section> sections_;
  bool kinds_ = false;
};

// Liveness: once a majority is healthy the lock is back within about one ttl (plus retry delays
// and the time a stopped master's connection needs to notice). Generous: machines are shared.
constexpr std::int64_t liveness_bound_ns = 3'000'000'000;

void expect_safe(const redlock::test::check_result& r) {
  EXPECT_GT(r.sections, 100u);  // the workers really contended
  EXPECT_EQ(r.overlaps, 0u);
  EXPECT_EQ(r.past_validity, 0u);
  EXPECT_LT(r.max_gap_ns, liveness_bound_ns);
}

TEST(safety, no_fault_baseline) {
  contention_run run{false};
  run.start();
  expect_safe(run.finish("no fault"));
  // Fairness is on by default: the contended workers queued and were woken, so the suite runs
  // the fair acquire and release scripts, not only plain SET NX.
  const auto& c = run.counts();
  EXPECT_GT(c.count("queued") ? c.at("queued") : 0, 0);
  EXPECT_GT(c.count("wakeups") ? c.at("wakeups") : 0, 0);
}

TEST(safety, minority_kill_with_delayed_restart) {
  contention_run run{false};
  run.start();
  run.sleep_until_offset(1000ms);
  run.servers()[0].kill();
  run.servers()[1].kill();
  run.sleep_until_offset(1000ms + std::chrono::milliseconds{ttl_ms} + 300ms);  // down for longer than the ttl
  run.servers()[0].restart();
  run.servers()[1].restart();
  run.healed_now();
  expect_safe(run.finish("kill -9 2 of 5, restart after > ttl"));
}

TEST(safety, minority_stopped_longer_than_the_ttl) {
  contention_run run{false};
  run.start();
  run.sleep_until_offset(1000ms);
  run.servers()[3].pause();
  run.servers()[4].pause();
  run.sleep_until_offset(2500ms);
  run.servers()[3].resume();
  run.servers()[4].resume();
  run.healed_now();
  expect_safe(run.finish("SIGSTOP 2 of 5 for 1.5 s"));
}

TEST(safety, minority_behind_added_latency) {
  contention_run run{true};
  run.start();
  run.sleep_until_offset(1000ms);
  run.proxy(0).set_latency(60ms);  // beyond the 50 ms per-master deadline
  run.proxy(1).set_latency(60ms);
  run.sleep_until_offset(3000ms);
  run.proxy(0).set_latency(0ms);
  run.proxy(1).set_latency(0ms);
  run.healed_now();
  expect_safe(run.finish("+60 ms on 2 of 5"));
}

TEST(safety, blackholed_minority) {
  contention_run run{true};
  run.start();
  run.sleep_until_offset(1000ms);
  run.proxy(2).set_blackhole(true);
  run.proxy(3).set_blackhole(true);
  run.sleep_until_offset(3000ms);
  run.proxy(2).set_blackhole(false);
  run.proxy(3).set_blackhole(false);
  run.proxy(2).reset_all();  // the swallowed connections are useless now
  run.proxy(3).reset_all();
  run.healed_now();
  expect_safe(run.finish("blackhole 2 of 5 (half-open)"));
}

TEST(safety, connections_reset_mid_reply) {
  contention_run run{true};
  run.start();
  for (int i = 0; i < 8; ++i) {
    run.sleep_until_offset(1000ms + i * 250ms);
    for (std::size_t m = 0; m < 5; ++m) run.proxy(m).reset_all();  // every master, repeatedly
  }
  run.healed_now();
  expect_safe(run.finish("RST on all 5, every 250 ms for 2 s"));
}

TEST(safety, all_masters_restarted_one_after_another) {
  contention_run run{false};
  run.start();
  for (std::size_t m = 0; m < 5; ++m) {
    run.sleep_until_offset(800ms + m * 700ms);
    run.servers()[m].kill();
    run.sleep_until_offset(800ms + m * 700ms + std::chrono::milliseconds{ttl_ms} + 200ms);
    run.servers()[m].restart();
  }
  run.healed_now();
  expect_safe(run.finish("rolling restart of all 5, each down > ttl"));
}

// The checker must bite: clients that break the algorithm are caught.
TEST(safety, checker_catches_a_client_without_nx) {
  contention_run run{false};
  run.start("no_nx");
  const auto r = run.finish("broken client: SET without NX");
  EXPECT_GT(r.overlaps, 0u);
}

TEST(safety, checker_catches_a_client_that_ignores_the_quorum) {
  contention_run run{false};
  run.start("first_ok");
  const auto r = run.finish("broken client: first OK wins");
  EXPECT_GT(r.overlaps, 0u);
}

TEST(safety_checker, finds_overlaps_and_overruns_in_synthetic_records) {
  std::vector<section> s{{"r", "a", 0, 10, 20, 0},
                         {"r", "b", 10, 20, 30, 1},
                         {"r", "c", 15, 40, 30, 2},
                         {"q", "d", 0, 100, 200, 3},
                         {"q", "e", 150, 160, 200, 4}};
  const auto r = check(s, 0);
  EXPECT_EQ(r.overlaps, 1u);       // c entered while b held r (touching ends are fine)
  EXPECT_EQ(r.past_validity, 1u);  // c ran past its deadline
  EXPECT_EQ(r.max_gap_ns, 50);     // q was free from 100 to 150
}

TEST(safety_checker, measures_the_longest_wait_within_a_window) {
  std::vector<section> s{{"r", "a", 0, 10, 100, 0}, {"r", "b", 50, 60, 100, 1}, {"q", "c", 0, 5, 100, 2}};
  EXPECT_EQ(redlock::test::longest_wait(s, 20, 100), 80);  // q: free from 20 (its holder left at 5) to the end
  s.push_back({"q", "d", 30, 95, 100, 3});
  EXPECT_EQ(redlock::test::longest_wait(s, 20, 100), 40);  // r: from 60 to the end; q: 20 to 30
  EXPECT_EQ(redlock::test::longest_wait(s, 0, 50), 40);    // r: from 10 to 50, where b enters
}

TEST(safety_checker, reads_section_lines_with_and_without_the_granting_masters) {
  section s;
  ASSERT_TRUE(redlock::test::parse_section("r tok 10 20 30", 2, s));  // a worker without the mask column
  EXPECT_EQ(s.resource, "r");
  EXPECT_EQ(s.token, "tok");
  EXPECT_EQ(s.enter, 10);
  EXPECT_EQ(s.exit, 20);
  EXPECT_EQ(s.deadline, 30);
  EXPECT_EQ(s.worker, 2);
  EXPECT_EQ(s.granted, 0u);
  ASSERT_TRUE(redlock::test::parse_section("r tok 10 20 30 26", 1, s));  // masters 1, 3 and 4
  EXPECT_EQ(s.deadline, 30);
  EXPECT_EQ(s.granted, 26u);
  EXPECT_FALSE(redlock::test::parse_section("# attempted=3 sections=2", 0, s));  // the summary line
}

// ---- lock kinds ---------------------------------------------------------------------------------
// Each kind under one shortened fault schedule that runs the suite's faults back to back (kill -9
// and delayed restart, SIGSTOP, added latency, half-open blackhole, TCP resets), checked against
// the kind's own invariant (checker.hpp); then each kind's deliberately broken variant, which the
// checker must catch.

constexpr double kinds_seconds = 6.0;

// Which masters each fault of `fault_schedule` hits.
struct fault_targets {
  std::vector<std::size_t> killed, stopped, delayed, blackholed;
};

// When the schedule SIGSTOPs its masters, and resumes them (offsets from the workers' start).
constexpr auto stop_at = 1600ms;
constexpr auto resume_at = 2600ms;

// The suite's faults back to back on a proxied run, healed by 5.3 s of the 6 s: kill -9 and a
// restart after > ttl, SIGSTOP for 1 s, +60 ms (beyond the 50 ms per-master deadline), a half-open
// blackhole, then TCP resets on every master three times.
void fault_schedule(contention_run& run, const fault_targets& t) {
  run.sleep_until_offset(700ms);
  for (auto m : t.killed) run.servers()[m].kill();
  run.sleep_until_offset(700ms + std::chrono::milliseconds{ttl_ms} + 300ms);  // down for longer than the ttl
  for (auto m : t.killed) run.servers()[m].restart();
  run.sleep_until_offset(stop_at);
  for (auto m : t.stopped) run.servers()[m].pause();
  run.sleep_until_offset(resume_at);
  for (auto m : t.stopped) run.servers()[m].resume();
  run.sleep_until_offset(2900ms);
  for (auto m : t.delayed) run.proxy(m).set_latency(60ms);
  run.sleep_until_offset(3700ms);
  for (auto m : t.delayed) run.proxy(m).set_latency(0ms);
  run.sleep_until_offset(3900ms);
  for (auto m : t.blackholed) run.proxy(m).set_blackhole(true);
  run.sleep_until_offset(4500ms);
  for (auto m : t.blackholed) {
    run.proxy(m).set_blackhole(false);
    run.proxy(m).reset_all();  // the swallowed connections are useless now
  }
  for (int i = 0; i < 3; ++i) {
    run.sleep_until_offset(4800ms + i * 250ms);
    for (std::size_t m = 0; m < 5; ++m) run.proxy(m).reset_all();
  }
  run.healed_now();
}

// Two of five at a time, as in the exclusive scenarios: what a majority quorum (read/write,
// fencing, multi-resource) rides out.
fault_targets minority_of_two() { return {{0, 1}, {3, 4}, {0, 1}, {2, 3}}; }

redlock::test::check_result run_kind(const std::string& name, workload load, bool faults = true) {
  contention_run run{faults};
  load.seconds = faults ? kinds_seconds : 3.0;
  // Without faults the hazard guards have nothing to catch: off, the checker's negative tests do
  // not sit out the fresh masters' quarantine first.
  if (!faults) load.guard = false;
  run.start(load);
  if (faults) fault_schedule(run, minority_of_two());
  return run.finish(name);
}

void expect_kind_safe(const redlock::test::check_result& r) {
  expect_safe(r);
  EXPECT_EQ(r.violations(), 0u);
  for (const auto& e : r.examples) ADD_FAILURE() << e;
}

workload rw_mix() {
  workload w;
  w.count = 5;
  w.flags = {"--kind", "rw", "--write-percent", "30"};
  return w;
}

TEST(safety_kinds, readers_and_writers_under_faults) {
  const auto r = run_kind("rw: 5 workers, 30 % writes, faults", rw_mix());
  expect_kind_safe(r);
  EXPECT_GT(r.shared_reads, 0u);     // readers really shared
  EXPECT_GT(r.write_sections, 50u);  // and writers got in
}

// N = 5, P = 2: a permit needs q = semaphore_quorum(5, 2) = 4 masters (4 * 3 > 2 * 5; 3 * 3 is
// not), so the semaphore rides out one master down and no more: its schedule kills, delays and
// blackholes one master at a time. For the 1 s of SIGSTOP it stops two, on purpose: with 3 of 5
// left it must refuse (quorum_unavailable), and no section may begin then.
TEST(safety_kinds, semaphore_with_more_workers_than_permits_under_faults) {
  workload w;
  w.count = 5;
  w.resources = "pool";
  w.seconds = kinds_seconds;
  w.flags = {"--kind", "semaphore", "--permits", "2"};
  contention_run run{true};
  run.start(w);
  fault_schedule(run, {{0}, {3, 4}, {1}, {2}});
  const auto r = run.finish("semaphore: 5 workers, 2 permits, faults (4 of 5 needed)");
  expect_kind_safe(r);
  EXPECT_EQ(r.max_holders, 2u);  // both permits were used at once, never more
  // Grants answered before the stop end within a request timeout (50 ms); 250 ms is a margin
  // for a worker not scheduled at once, not a speed bound.
  const auto from = ns(run.started() + stop_at + 250ms);
  const auto to = ns(run.started() + resume_at);
  const auto begun = std::count_if(run.sections().begin(), run.sections().end(),
                                   [&](const section& s) { return s.enter >= from && s.enter < to; });
  EXPECT_EQ(begun, 0) << "sections began while only 3 of 5 masters answered";
}

// With the default fairness, the fenced workers queue and are handed the lock (each hand-over
// granting the next fence) under the same faults: the fences still strictly increase and the
// fenced store refuses none of the holders' writes.
TEST(safety_kinds, fenced_exclusive_under_faults) {
  workload w;
  w.flags = {"--fence"};
  contention_run run{true};
  w.seconds = kinds_seconds;
  run.start(w);
  fault_schedule(run, minority_of_two());
  const auto r = run.finish("fenced exclusive: 4 workers, faults");
  expect_kind_safe(r);
  EXPECT_GT(r.fenced_writes, 100u);  // the store was written to
  EXPECT_EQ(r.fenced_writes, r.sections);
  const auto& c = run.counts();
  EXPECT_GT(c.count("handovers") ? c.at("handovers") : 0, 0) << "no fenced lock was handed over";
}

workload multi() {
  workload w;
  w.resources = "a,b,c,d";
  w.flags = {"--multi", "1-3"};  // sets of one go through plain async_lock: both must exclude each other
  return w;
}

// Cluster masters: three Redis Clusters of two shards. Multi-resource locks over four names in
// different slots (cut by slot on every cluster) and single ones, while the slots of all four
// names move back and forth between the shards of every cluster (a reshard with MIGRATE), and one
// shard is killed and restarted without its data (its cluster quarantined, the other two carry).
TEST(safety_clusters, multi_resource_through_reshards_and_a_restarted_shard) {
  redlock::test::cluster_set clusters{3, 2};
  workload w = multi();
  w.masters = clusters.masters();
  w.seconds = kinds_seconds;
  contention_run run{false, {}, 0};
  run.start(w);
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  int moves = 0;
  bool killed = false, restarted = false;
  for (int round = 0; redlock::clock::now() < run.ends() - 500ms; ++round) {
    for (const auto& n : names) {
      const auto slot = redlock::core::key_slot(n);
      for (std::size_t c = 0; c < clusters.size(); ++c) {
        if (c == 2 && (killed && !restarted)) continue;  // its shard is down: no reshard there
        const auto home = slot * 2 / redlock::core::slot_count;
        clusters.move_slot(c, slot, clusters.primary(c, (home + 1 + round) % 2));
        ++moves;
        std::this_thread::sleep_for(20ms);
      }
    }
    const auto now = redlock::clock::now();
    if (!killed && now > run.started() + 2s) {
      clusters.primary(2, 0).kill();
      killed = true;
    } else if (killed && !restarted && now > run.started() + 3s) {
      clusters.primary(2, 0).restart();
      clusters.wait_stable(2);
      restarted = true;
    }
  }
  const auto r =
      run.finish(fmt::format("clusters: 3 x 2 shards, multi 1-3 of 4, {} slot moves, a shard restarted", moves));
  expect_kind_safe(r);
  EXPECT_GT(r.multi_sections, 50u);
  EXPECT_GT(moves, 20);
  EXPECT_TRUE(restarted);
}

TEST(safety_kinds, multi_resource_under_faults) {
  const auto r = run_kind("multi-resource: 4 workers, 1-3 of 4, faults", multi());
  expect_kind_safe(r);
  EXPECT_GT(r.multi_sections, 50u);
  EXPECT_LT(r.multi_sections, r.sections);  // single-resource locks took part too
}

// Reentrant holds (opt-in owner ids) across processes: four workers spread over two owners. Holds
// of one owner share the resource, holds of the other exclude them; checked under the faults.
TEST(safety_kinds, reentrant_holds_under_faults) {
  workload w;
  w.flags = {"--kind", "reentrant", "--owners", "2"};
  const auto r = run_kind("reentrant: 4 workers, 2 owners, faults", w);
  expect_kind_safe(r);
  EXPECT_GT(r.shared_holds, 0u);  // holds of one owner really shared
}

// Plain locks and the two sides of a read/write lock on the same names: a plain lock is a writer
// that does not claim (docs/safety.md, "Read/write locks"), so it excludes readers and writers
// and is excluded by them.
TEST(safety_kinds, plain_and_read_write_locks_together_under_faults) {
  workload w;
  w.count = 5;
  w.flags = {"--kind", "mixed"};
  const auto r = run_kind("mixed: plain, read and write locks on the same names, faults", w);
  expect_kind_safe(r);
  EXPECT_GT(r.shared_reads, 0u);
  EXPECT_GT(r.write_sections, 0u);
  EXPECT_GT(r.exclusive_sections, 0u);
}

// The checker must bite on each kind's invariant.
TEST(safety_kinds, checker_catches_two_owners_sharing_one_id) {
  workload w;
  w.mode = "one_owner";
  w.flags = {"--kind", "reentrant", "--owners", "2"};
  const auto r = run_kind("broken reentrant: one owner id, two owners claimed", w, false);
  EXPECT_GT(r.overlaps, 0u);
  EXPECT_EQ(r.rw_conflicts + r.over_permits + r.fence_regressions + r.stale_writes, 0u);
}

TEST(safety_kinds, checker_catches_plain_locks_taken_as_reads) {
  workload w;
  w.count = 5;
  w.mode = "plain_reads";
  w.flags = {"--kind", "mixed"};
  const auto r = run_kind("broken mixed: plain locks taken as reads", w, false);
  EXPECT_GT(r.overlaps + r.rw_conflicts, 0u);
  EXPECT_EQ(r.over_permits + r.fence_regressions + r.stale_writes, 0u);
}

TEST(safety_kinds, checker_catches_writers_that_lock_as_readers) {
  auto w = rw_mix();
  w.mode = "writer_reads";
  const auto r = run_kind("broken rw: writes locked as reads", w, false);
  EXPECT_GT(r.rw_conflicts, 0u);
  EXPECT_EQ(r.overlaps + r.over_permits + r.fence_regressions + r.stale_writes, 0u);
}

TEST(safety_kinds, checker_catches_a_semaphore_with_one_permit_too_many) {
  workload w;
  w.count = 5;
  w.resources = "pool";
  w.mode = "over_permits";
  w.flags = {"--kind", "semaphore", "--permits", "2"};
  const auto r = run_kind("broken semaphore: 3 permits used, 2 claimed", w, false);
  EXPECT_GT(r.over_permits, 0u);
  EXPECT_EQ(r.max_holders, 3u);
  EXPECT_EQ(r.overlaps + r.rw_conflicts + r.fence_regressions + r.stale_writes, 0u);
}

TEST(safety_kinds, checker_catches_made_up_fences) {
  workload w;
  w.mode = "fake_fence";
  w.flags = {"--fence"};
  const auto r = run_kind("broken fencing: each worker counts its own", w, false);
  EXPECT_GT(r.fence_regressions, 0u);
  EXPECT_GT(r.stale_writes, 0u);
  EXPECT_EQ(r.overlaps + r.rw_conflicts + r.over_permits, 0u);  // the lock itself was sound
}

TEST(safety_kinds, checker_catches_a_multi_lock_of_the_first_resource_only) {
  auto w = multi();
  w.mode = "first_only";
  const auto r = run_kind("broken multi-resource: only the first locked", w, false);
  EXPECT_GT(r.overlaps, 0u);
  EXPECT_EQ(r.rw_conflicts + r.over_permits + r.fence_regressions + r.stale_writes, 0u);
}

// What fencing is for: a holder that stalls past its validity (a pause the lock cannot see) and
// then writes. The lock and its fences are sound (the fences still increase by start); the store
// that checks them refuses the stale write that mutual exclusion alone would have let through.
TEST(safety_kinds, the_fenced_store_refuses_a_holder_stalled_past_its_validity) {
  workload w;
  w.mode = "paused_writer";
  w.flags = {"--fence"};
  const auto r = run_kind("fenced holders stalled past validity before writing", w, false);
  EXPECT_GT(r.past_validity, 0u);  // the stalls happened
  EXPECT_GT(r.stale_writes, 0u);   // and the store caught their writes
  EXPECT_EQ(r.fence_regressions, 0u);
}

TEST(safety_checker, holds_each_kind_to_its_invariant_in_synthetic_records) {
  using redlock::test::section_kind;
  const auto make = [](std::string res, std::int64_t enter, std::int64_t exit, section_kind k, int worker) {
    section s{std::move(res), "t" + std::to_string(worker), enter, exit, 1000, worker};
    s.kind = k;
    return s;
  };
  // Read/write: r0 and r1 share; w2 enters while r1 reads; w3 after them all; r4 inside w3.
  std::vector<section> rw{make("x", 0, 10, section_kind::read, 0), make("x", 5, 20, section_kind::read, 1),
                          make("x", 15, 30, section_kind::write, 2), make("x", 30, 40, section_kind::write, 3),
                          make("x", 35, 38, section_kind::read, 4)};
  auto r = check(rw);
  EXPECT_EQ(r.shared_reads, 1u);
  EXPECT_EQ(r.rw_conflicts, 2u);  // w2 (against r1), r4 (against w3)
  EXPECT_EQ(r.overlaps, 0u);
  // Reentrant: holds of owner A share; B's hold inside A's is an overlap; a plain lock inside too.
  std::vector<section> re{make("o", 0, 10, section_kind::exclusive, 0), make("o", 2, 8, section_kind::exclusive, 1),
                          make("o", 4, 6, section_kind::exclusive, 2), make("o", 12, 14, section_kind::exclusive, 3),
                          make("o", 13, 15, section_kind::exclusive, 4)};
  re[0].owner = re[1].owner = "A";
  re[2].owner = "B";
  re[3].owner = "A";  // worker 4: a plain lock (no owner) inside A's hold
  r = check(re);
  EXPECT_EQ(r.shared_holds, 1u);
  EXPECT_EQ(r.overlaps, 2u);  // B against A, the plain lock against A
  // Semaphore with 2 permits: three at once between 8 and 10.
  std::vector<section> sem{make("s", 0, 10, section_kind::semaphore, 0), make("s", 2, 20, section_kind::semaphore, 1),
                           make("s", 8, 9, section_kind::semaphore, 2), make("s", 10, 12, section_kind::semaphore, 3)};
  for (auto& s : sem) s.permits = 2;
  r = check(sem);
  EXPECT_EQ(r.over_permits, 1u);
  EXPECT_EQ(r.max_holders, 3u);
  // Fencing: ordered by start 5, 7, 6 (a regression); the store sees writes 5 (t=1), 7 (t=12),
  // 6 (t=13, rejected) and 7 again from another token (t=25, rejected).
  std::vector<section> fenced{make("f", 0, 10, section_kind::exclusive, 0),
                              make("f", 10, 20, section_kind::exclusive, 1),
                              make("f", 20, 30, section_kind::exclusive, 2)};
  fenced[0].fence = 5;
  fenced[0].write = 1;
  fenced[1].fence = 7;
  fenced[1].write = 12;
  fenced[2].fence = 6;
  fenced[2].write = 25;
  fenced.push_back(fenced[1]);
  fenced.back().token = "other";
  fenced.back().enter = 30;
  fenced.back().exit = 40;
  fenced.back().write = 35;
  r = check(fenced);
  EXPECT_EQ(r.fence_regressions, 2u);  // 6 after 7, and the second 7
  EXPECT_EQ(r.stale_writes, 2u);
  EXPECT_EQ(r.fenced_writes, 4u);
  // Multi-resource: {a,b} and {b,c} overlap on b; {c,d} after {b,c} ends; {a} inside nothing.
  std::vector<section> multi{
      make("a,b", 0, 10, section_kind::exclusive, 0), make("b,c", 5, 15, section_kind::exclusive, 1),
      make("c,d", 15, 20, section_kind::exclusive, 2), make("a", 12, 14, section_kind::exclusive, 3)};
  r = check(multi);
  EXPECT_EQ(r.overlaps, 1u);
  EXPECT_EQ(r.multi_sections, 3u);
}

TEST(safety_checker, reads_the_kinds_fields) {
  section s;
  ASSERT_TRUE(redlock::test::parse_section("a,b tok 10 20 30 7 kind=semaphore permits=2 fence=99 write=15", 3, s));
  EXPECT_EQ(s.resource, "a,b");
  EXPECT_EQ(s.granted, 7u);
  EXPECT_EQ(s.kind, redlock::test::section_kind::semaphore);
  EXPECT_EQ(s.permits, 2u);
  EXPECT_EQ(s.fence, 99u);
  EXPECT_EQ(s.write, 15);
  ASSERT_TRUE(redlock::test::parse_section("r tok 10 20 30 1 kind=write", 0, s));
  EXPECT_EQ(s.kind, redlock::test::section_kind::write);
  EXPECT_EQ(s.fence, 0u);
  EXPECT_FALSE(redlock::test::parse_section("r tok 10 20 30 1 kind=bogus", 0, s));
  EXPECT_FALSE(redlock::test::parse_section("r tok 10 20 30 1 stray", 0, s));
}

// ---- hazards: restarts without persistence, forward wall-clock jumps ---------------------------
// Each schedule hits two of the five masters at a time, rolling over them faster than a hold
// lasts, so a holder can lose its keys on a majority: with the hazard guards off another worker
// then gets the lock while the holder still runs (overlaps; usually, not always: it takes a hold
// that spans two rounds). With the guards on, every master hit has its votes not counted for a
// quarantine (about ttl + 1 s): while that is a majority the lock cannot be had at all, and once
// the quarantines end it must come back within the liveness bound. The guarded runs must be safe;
// the unguarded ones only report what they saw (safety_report.md, bench/hazard_schedules.sh).

constexpr std::chrono::milliseconds hazard_ttl{500};

// How long a guarded run goes on once its last quarantine has ended: longer than the liveness
// bound, so that a lock that never came back fails the check of it.
constexpr auto hazard_watch = std::chrono::milliseconds{liveness_bound_ns / 1'000'000} + 1s;

// Six workers, three resources, holds up to half the validity (the worker's cap, about 240 ms):
// long enough for a hold to span the next round of a schedule. Fewer sections than the other
// runs: each hold is long, and the guarded runs are unavailable for a while on purpose. The
// guarded workers get time to spare and are stopped `hazard_watch` after the quarantines end,
// which come later than planned when the restarts are slow (a loaded machine).
workload hazard_load(bool guard) {
  workload w;
  w.count = 6;
  w.resources = "alpha,beta,gamma";
  w.seconds = guard ? 15 : 5.5;
  w.ttl = hazard_ttl;
  w.guard = guard;
  w.flags = {"--hold-ms", "20-300"};
  return w;
}

constexpr std::size_t hazard_min_sections = 40;
constexpr int hazard_rounds = 10;
constexpr auto hazard_first_round = 800ms;
constexpr auto hazard_round_every = 120ms;  // shorter than most holds: a hold spans two rounds

// Round k hits masters 2k and 2k + 1 (mod 5): 0 1, 2 3, 4 0, 1 2, 3 4, ...
std::pair<std::size_t, std::size_t> hazard_pair(int k) {
  return {static_cast<std::size_t>(2 * k) % 5, static_cast<std::size_t>(2 * k + 1) % 5};
}

// kill -9 two masters and restart them at once, empty (the test bed's servers run without RDB or
// AOF; a restart takes some 25 ms). Returns when the last restart was done.
clock_type::time_point rolling_restarts(contention_run& run) {
  for (int k = 0; k < hazard_rounds; ++k) {
    run.sleep_until_offset(hazard_first_round + k * hazard_round_every);
    const auto [a, b] = hazard_pair(k);
    run.servers()[a].kill();
    run.servers()[b].kill();
    run.servers()[a].restart();
    run.servers()[b].restart();
  }
  return clock_type::now();
}

// Steps the wall clocks of two masters (started with the clock shim) forward by more than the
// ttl. Each round by a quarter more than the last: the clocks of independent machines do not jump
// alike, and a majority of masters jumping alike (within a tenth) at once is what a client takes
// for a pause of its own, which lifts their quarantine. Returns when the last jump was made.
clock_type::time_point rolling_clock_jumps(contention_run& run) {
  std::vector<std::unique_ptr<redlock::test::master_clock>> clocks;
  for (std::size_t m = 0; m < 5; ++m) clocks.push_back(std::make_unique<redlock::test::master_clock>(run.servers()[m]));
  std::vector<std::chrono::milliseconds> offset(5, 0ms);
  auto jump = hazard_ttl + 200ms;
  for (int k = 0; k < hazard_rounds; ++k, jump = jump * 5 / 4) {
    run.sleep_until_offset(hazard_first_round + k * hazard_round_every);
    for (const auto m : {hazard_pair(k).first, hazard_pair(k).second}) {
      offset[m] += jump;
      clocks[m]->shift(offset[m]);
    }
  }
  return clock_type::now();
}

// The guarded runs: safe, and the lock back within the liveness bound once the last quarantine
// has ended (one quarantine after the last hit; the guards start it when they see the hit, a
// reconnect or a vote later, which the bound covers).
void expect_guarded(contention_run& run, const redlock::test::check_result& r, clock_type::time_point last_hit) {
  EXPECT_GT(r.sections, hazard_min_sections);
  EXPECT_EQ(r.overlaps, 0u);
  EXPECT_EQ(r.past_validity, 0u);
  for (const auto& e : r.examples) ADD_FAILURE() << e;
  const auto healed = last_hit + quarantine_for(hazard_ttl);
  const auto watched = run.ends() - 300ms;
  // A window shorter than the bound would pass a lock that never came back.
  EXPECT_GT(ns(watched) - ns(healed), liveness_bound_ns) << "the workers stopped too soon after the quarantines";
  const auto wait = redlock::test::longest_wait(run.sections(), ns(healed), ns(watched));
  std::printf("  longest wait for a resource from the end of the quarantines on: %.0f ms\n",
              static_cast<double>(wait) / 1e6);
  EXPECT_LT(wait, liveness_bound_ns);
  const auto& c = run.counts();
  EXPECT_GT(c.count("restarts_seen") + c.count("jumps_seen"), 0u) << "the guards saw nothing";
}

TEST(safety_hazards, rolling_immediate_restarts_without_persistence_guarded) {
  contention_run run{false};
  run.start(hazard_load(true));
  const auto last = rolling_restarts(run);
  run.healed_at(last + quarantine_for(hazard_ttl));
  run.stop_at(last + quarantine_for(hazard_ttl) + hazard_watch);
  const auto r = run.finish("rolling kill -9 + immediate restart of 2 of 5, no persistence: guard on");
  expect_guarded(run, r, last);
}

TEST(safety_hazards, rolling_immediate_restarts_without_persistence_unguarded) {
  contention_run run{false};
  run.start(hazard_load(false));
  rolling_restarts(run);
  run.healed_now();
  const auto r = run.finish("rolling kill -9 + immediate restart of 2 of 5, no persistence: guard off");
  EXPECT_GT(r.sections, hazard_min_sections);  // it contended; overlaps are likely, not certain
}

TEST(safety_hazards, rolling_forward_clock_jumps_guarded) {
  contention_run run{false, redlock::test::with_clock_shim()};
  run.start(hazard_load(true));
  const auto last = rolling_clock_jumps(run);
  run.healed_at(last + quarantine_for(hazard_ttl));
  run.stop_at(last + quarantine_for(hazard_ttl) + hazard_watch);
  const auto r = run.finish("rolling forward clock jumps (> ttl) of 2 of 5: guard on");
  expect_guarded(run, r, last);
}

TEST(safety_hazards, rolling_forward_clock_jumps_unguarded) {
  contention_run run{false, redlock::test::with_clock_shim()};
  run.start(hazard_load(false));
  rolling_clock_jumps(run);
  run.healed_now();
  const auto r = run.finish("rolling forward clock jumps (> ttl) of 2 of 5: guard off");
  EXPECT_GT(r.sections, hazard_min_sections);  // it contended; overlaps are likely, not certain
}

// The documented hazard, deterministically: a master that restarts at once, without persistence,
// forgets the key; with 3 of 5 held and one of them restarted, another client can collect 3
// again. With the hazard guards off (both clients) it happens: this is why the spec asks for
// delayed restarts.
TEST(safety, immediate_restart_without_persistence_lets_two_clients_hold_the_lock) {
  redlock::test::master_set servers{5};
  redlock::test::run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    using redlock::test::use_tuple;
    auto cfg = redlock::test::client_config_for(servers, 100ms);
    cfg.guard.restarts = redlock::restart_detection::off;
    cfg.guard.clock_jumps = false;
    redlock::client a{ioc.get_executor(), cfg};
    redlock::client b{ioc.get_executor(), cfg};
    servers[3].kill();
    servers[4].kill();
    co_await redlock::test::sleep_for(50ms);
    auto [ea, la] = co_await a.async_try_lock("hazard", 10s, use_tuple);  // granted by masters 1, 2, 3
    EXPECT_FALSE(ea) << ea.message();
    servers[3].restart();  // back, empty
    servers[4].restart();
    servers[2].restart();                      // one of A's three, restarted at once: A's key there is forgotten
    co_await redlock::test::sleep_for(300ms);  // the clients reconnect
    auto [eb, lb] = co_await b.async_try_lock("hazard", 10s, use_tuple);  // masters 3, 4, 5 say yes
    EXPECT_FALSE(eb) << eb.message();
    EXPECT_TRUE(la.owns_lock() && lb.owns_lock() && clock_type::now() < la.validity_deadline() &&
                clock_type::now() < lb.validity_deadline())
        << "expected the hazard: both hold the lock within their validity";

    // With the restart delayed past A's ttl instead, B cannot get it while A's validity lasts.
    auto [ea2, la2] = co_await a.async_try_lock("hazard2", 1000ms, use_tuple);
    EXPECT_FALSE(ea2);
    servers[0].kill();  // one of A's masters crashes and stays down for longer than the ttl
    auto [eb2, lb2] = co_await b.async_try_lock("hazard2", 1000ms, use_tuple);
    EXPECT_TRUE(eb2 == redlock::error::not_acquired || eb2 == redlock::error::quorum_unavailable) << eb2.message();
    co_await redlock::test::sleep_for(1100ms);  // A's lock has expired everywhere
    servers[0].restart();
    co_await redlock::test::sleep_for(300ms);
    auto [eb3, lb3] = co_await b.async_try_lock("hazard2", 1000ms, use_tuple);
    EXPECT_FALSE(eb3) << eb3.message();
  });
}

// The same immediate restart under the library's default hazard guards: B's client sees the three
// masters that would say yes restarted, and does not count their votes for the quarantine (longer
// than any ttl), so B does not get the lock while A holds it; after the quarantine it does.
TEST(safety, immediate_restart_without_persistence_is_quarantined_by_the_default_guard) {
  constexpr std::chrono::milliseconds ttl{1500};
  redlock::test::master_set servers{5};
  redlock::test::run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    using redlock::test::use_tuple;
    auto cfg = redlock::test::client_config_for(servers, 100ms);
    cfg.guard = redlock::hazard_guard_options{};  // the library's defaults, whatever the test bed's are
    cfg.max_ttl = ttl;                            // the quarantine: ttl + drift + 1 s, about 2.5 s
    redlock::client a{ioc.get_executor(), cfg};
    redlock::client b{ioc.get_executor(), cfg};
    const auto all_count = [](const redlock::client& c) {  // every master identified, none quarantined
      const auto hz = c.hazards();
      return std::all_of(hz.begin(), hz.end(), [](const redlock::master_hazard& h) {
        return !h.run_id.empty() && h.cause == redlock::hazard_cause::none;
      });
    };
    // Masters started a moment ago look restarted to a client (it cannot tell a start from a
    // restart): every vote is quarantined until one quarantine after the clients connected.
    EXPECT_TRUE(co_await redlock::test::until([&] { return all_count(a) && all_count(b); }, 10s, 20ms))
        << "the fresh masters' quarantine did not end";
    servers[3].kill();
    servers[4].kill();
    co_await redlock::test::sleep_for(50ms);
    auto [ea, la] = co_await a.async_try_lock("hazard", ttl, use_tuple);  // granted by masters 1, 2, 3
    EXPECT_FALSE(ea) << ea.message();
    servers[3].restart();
    servers[4].restart();
    servers[2].restart();  // one of A's three: A's key there is forgotten
    const auto restarted = [&] {
      const auto h = b.hazards();
      return h[2].cause == redlock::hazard_cause::restarted && h[3].cause == redlock::hazard_cause::restarted &&
             h[4].cause == redlock::hazard_cause::restarted;
    };
    EXPECT_TRUE(co_await redlock::test::until(restarted, 2s, 5ms)) << "B's client did not see the restarts";
    auto [eb, lb] = co_await b.async_try_lock("hazard", ttl, use_tuple);  // masters 3, 4, 5 say yes, uncounted
    EXPECT_TRUE(clock_type::now() < la.validity_deadline()) << "A's lock expired before B tried: nothing was shown";
    EXPECT_TRUE(eb == redlock::error::not_acquired || eb == redlock::error::quorum_unavailable) << eb.message();
    EXPECT_FALSE(lb.owns_lock());
    // The quarantine outlasts A's keys on masters 1 and 2; then B gets the lock.
    EXPECT_TRUE(co_await redlock::test::until([&] { return all_count(b); }, 10s, 20ms));
    auto [eb2, lb2] = co_await b.async_try_lock("hazard", ttl, use_tuple);
    EXPECT_FALSE(eb2) << eb2.message();
  });
}

}  // namespace
