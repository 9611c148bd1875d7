// SPDX-License-Identifier: BSL-1.0
// leader_election: one instance works, the others stand by and take over when it dies.
//
// Every instance campaigns for the lock "example:leader". The one that gets it is the leader: it
// keeps the lock alive for as long as it lives (keep_alive with no cap) and does the leader's
// work, here a heartbeat line. The others are standbys: they try again every --retry. When the
// leader dies, its lock expires after at most one ttl and a standby becomes leader. A leader that
// loses its lock (a partition, masters that forgot it) steps down at once and campaigns again.
//
// Try it in three terminals with the same masters:
//   leader_election --name A --for 60s      leader_election --name B --for 60s      (kill -9 A)
//
// Usage: leader_election --name NAME [--for D] [--ttl D] [--retry D] [host:port,host:port,...]
//   masters from the argument or REDLOCK_NODES; password (if any) from REDLOCK_PASSWORD
//   --name NAME   this instance's name, printed in its lines
//   --for D       campaign and lead for D, then step down and exit (default 10s)
//   --ttl D       the leader lock's ttl (default 1s): a dead leader is replaced within about this
//   --retry D     a standby's pause between attempts (default a quarter of the ttl)
//
// Every line starts with the time of CLOCK_MONOTONIC in seconds (the same clock for every process
// on the machine), so the lines of several instances can be merged and compared.

#include <redlock/client.hpp>
#include <redlock/timer.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;  // a || b: run both, the first to finish cancels the other
using clock_type = redlock::clock;                        // CLOCK_MONOTONIC on Linux
using std::chrono::milliseconds;

// With as_tuple an operation's error is returned as a value instead of thrown.
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

constexpr std::string_view resource = "example:leader";

struct options {
  std::string masters;
  std::string name;
  milliseconds run_for{10000};
  milliseconds ttl{1000};
  milliseconds retry{0};
  milliseconds heartbeat{250};
};

// Prints a line prefixed with the monotonic clock, in seconds.
template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  const auto now = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
  fmt::print("[{:.3f}] {}\n", now, fmt::format(format, std::forward<Args>(args)...));
}

// For an error such as quorum_unavailable: which masters are not up, and why (e.g. a wrong password).
std::string masters_down(const redlock::client& locks) {
  std::string text;
  const auto status = locks.masters();
  for (std::size_t i = 0; i < status.size(); ++i) {
    if (status[i].state == redlock::connection_state::up) continue;
    const auto& m = locks.config().masters[i];
    text += fmt::format("; {} is down ({})", redlock::address_of(m),
                        status[i].last_error ? status[i].last_error.message() : "not connected yet");
  }
  return text;
}

long long ms_left(const redlock::lock& l) {
  return std::chrono::duration_cast<milliseconds>(l.validity_deadline() - clock_type::now()).count();
}

// The leader's work: a heartbeat every so often until the term ends (time is up) or this is
// cancelled (the lock was lost). It acts only while the lock is certainly valid: a leader that
// cannot prove it still leads must not act as one.
asio::awaitable<void> lead(const redlock::lock& l, const options& o, clock_type::time_point end, int term) {
  redlock::timer tick{co_await asio::this_coro::executor};
  for (int beat = 1; clock_type::now() < end && clock_type::now() < l.validity_deadline(); ++beat) {
    say("{} is leader: heartbeat {} of term {} (extended {} times, valid for {} ms more)", o.name, beat, term,
        l.extensions(), ms_left(l));
    tick.expires_at(std::min(clock_type::now() + o.heartbeat, end));
    auto [ec] = co_await tick.async_wait(use_tuple);
    if (ec) co_return;  // cancelled: the lock was lost
  }
}

asio::awaitable<void> campaign(redlock::client& locks, const options& o) {
  redlock::timer pause{co_await asio::this_coro::executor};
  const auto end = clock_type::now() + o.run_for;
  int term = 0;
  bool standby = false;
  say("{} campaigns for {} (ttl {} ms) for {} ms", o.name, resource, o.ttl.count(), o.run_for.count());
  while (clock_type::now() < end) {
    // One attempt, no retry: a standby retries on its own schedule below.
    auto [ec, l] = co_await locks.async_try_lock(resource, o.ttl, use_tuple);
    if (!ec) {
      standby = false;
      say("{} becomes leader (term {})", o.name, ++term);
      // Keep the lock for as long as we live: no cap on the time held (the default is one hour).
      redlock::keep_alive_options keep;
      keep.max_hold = 0ms;
      l.keep_alive(keep);
      // Lead until the lock is lost or the time is up, whichever comes first; the other is cancelled.
      co_await (lead(l, o, end, term) || l.async_wait_lost(use_tuple));
      if (l.lost()) {
        say("{} steps down: lock lost ({})", o.name, l.loss_reason().message());
        continue;  // campaign again at once
      }
      // Release, so that a standby takes over now rather than when the ttl runs out.
      auto [uec, held] = co_await l.async_unlock(use_tuple);
      say("{} steps down: {}; lock released on {} masters", o.name,
          clock_type::now() >= end ? "time is up" : "the validity ran out", uec ? 0 : held);
      continue;
    }
    if (ec == redlock::error::not_acquired) {
      if (!standby) say("{} is standby: another instance leads", o.name);  // said once, not every retry
      standby = true;
    } else {
      say("{} cannot campaign: {}{}", o.name, ec.message(), masters_down(locks));
      standby = false;
    }
    pause.expires_at(std::min(clock_type::now() + o.retry, end));
    co_await pause.async_wait(use_tuple);
  }
  say("{} exits", o.name);
}

// ---------------------------------------------------------------------------------------------
// Command line

[[noreturn]] void usage(std::string_view problem) {
  fmt::print(stderr,
             "leader_election: {}\n"
             "usage: leader_election --name NAME [--for D] [--ttl D] [--retry D] [host:port,host:port,...]\n"
             "  masters from the argument or REDLOCK_NODES, password from REDLOCK_PASSWORD;\n"
             "  durations such as 500ms, 2s\n",
             problem);
  std::exit(2);
}

// "500ms", "2s", "1.5s" -> milliseconds.
std::optional<milliseconds> parse_duration(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit{end, static_cast<std::size_t>(text.data() + text.size() - end)};
  if (ec != std::errc{} || value < 0) return std::nullopt;
  if (unit == "ms") return milliseconds{static_cast<long long>(value)};
  if (unit == "s") return milliseconds{static_cast<long long>(value * 1000)};
  return std::nullopt;
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    auto duration = [&] {
      const auto v = value();
      if (auto d = parse_duration(v); d && d->count() > 0) return *d;
      usage(fmt::format("{} wants a positive duration such as 500ms or 2s, not '{}'", arg, v));
    };
    if (arg == "--name") {
      o.name = value();
    } else if (arg == "--for") {
      o.run_for = duration();
    } else if (arg == "--ttl") {
      o.ttl = duration();
    } else if (arg == "--retry") {
      o.retry = duration();
    } else if (arg.starts_with("-")) {
      usage(fmt::format("unknown option {}", arg));
    } else if (o.masters.empty()) {
      o.masters = arg;
    } else {
      usage("more than one list of masters");
    }
  }
  if (o.name.empty()) usage("--name is required");
  if (o.retry.count() == 0) o.retry = o.ttl / 4;
  return o;
}

// The masters come from the command line or REDLOCK_NODES; a password only from the environment
// (REDLOCK_PASSWORD), so that it shows neither in `ps` nor in the shell's history.
redlock::client_config load_config(std::string list) {
  if (list.empty()) {
    const char* env = std::getenv("REDLOCK_NODES");
    list = env ? env : "";
  }
  if (list.empty()) usage("no masters: give host:port,... or set REDLOCK_NODES");
  redlock::client_config cfg;
  std::string problem;
  if (redlock::parse_masters(list, cfg.masters, &problem)) usage(problem);
  if (const char* password = std::getenv("REDLOCK_PASSWORD"); password && *password) {
    for (auto& m : cfg.masters) m.password = password;
  }
  // REDLOCK_RESTART_GUARD=off for masters that were just started and have held no lock (tests,
  // demos): else the first locks wait out the restart quarantine (docs/safety.md).
  if (const char* guard = std::getenv("REDLOCK_RESTART_GUARD"); guard && *guard) {
    if (!redlock::parse_restart_detection(guard, cfg.guard.restarts))
      throw std::invalid_argument("REDLOCK_RESTART_GUARD: expected run_id, reconnect or off");
  }
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, also into a pipe or a file
  const options o = parse_options(argc, argv);
  const redlock::client_config cfg = load_config(o.masters);
  if (std::string problem; redlock::validate(cfg, &problem)) usage(problem);
  if (o.ttl <= cfg.request_timeout) {
    usage(fmt::format("--ttl must be longer than the per-master request timeout ({} ms)", cfg.request_timeout.count()));
  }

  try {
    asio::io_context ioc;
    redlock::client locks{ioc.get_executor(), cfg};
    int exit_code = 0;
    asio::co_spawn(ioc, campaign(locks, o), [&](std::exception_ptr e) {
      if (e) exit_code = 1;
      locks.close();  // ends the connections, so that run() returns
    });
    ioc.run();
    return exit_code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "leader_election: {}\n", e.what());
    return 1;
  }
}
