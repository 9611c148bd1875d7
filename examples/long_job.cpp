// SPDX-License-Identifier: BSL-1.0
// long_job: a job that runs much longer than its lock's ttl, under redlock::with_lock.
//
// with_lock acquires the lock, keeps it alive in the background (extending it before it expires)
// while the job runs, and releases it afterwards. If the lock cannot be kept (a partition, a
// master that says the key is no longer ours), the job is cancelled before the lock's validity
// ends, so it never runs unprotected, and with_lock throws `redlock::lock_lost_error` (its code()
// is `error::lock_lost`, its reason() why).
//
// --steal-after D shows that: after D, a "thief" overwrites the lock's key on every master through
// plain connections (standing in for a partition, or for a process that ignores the lock); the
// next extension finds the key is not ours, and the job is cancelled.
//
// Usage: long_job [--ttl D] [--job D] [--steal-after D] [host:port,host:port,...]
//   masters from the argument or REDLOCK_NODES; password (if any) from REDLOCK_PASSWORD
//   --ttl D           the lock's ttl (default 1s); the keep-alive extends it when half is left
//   --job D           how long the job takes (default 5s), in steps of 250 ms
//   --steal-after D   overwrite the lock's key after D
// Exit status: 0 the job completed under the lock; 3 the lock was lost and the job cancelled;
// 1 other failures (e.g. the lock could not be acquired); 2 bad usage.

#include <redlock/client.hpp>
#include <redlock/connection.hpp>
#include <redlock/with_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/core.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
using std::chrono::milliseconds;

// With as_tuple an operation's error is returned as a value instead of thrown.
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

constexpr std::string_view resource = "example:reports:nightly";
constexpr milliseconds step_length = 250ms;

struct options {
  std::string masters;
  milliseconds ttl{1000};
  milliseconds job{5000};
  std::optional<milliseconds> steal_after;
};

const clock_type::time_point started = clock_type::now();

// Prints a line prefixed with the time since the program started.
template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  const auto ms = std::chrono::duration_cast<milliseconds>(clock_type::now() - started).count();
  fmt::print("{:6} ms  {}\n", ms, fmt::format(format, std::forward<Args>(args)...));
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

// The job: steps of work, for much longer than the ttl. It runs under with_lock, which cancels it
// (terminal cancellation) if the lock is lost; it then stops at once and reports why.
asio::awaitable<int> job(redlock::lock& l, milliseconds length) {
  const int steps = static_cast<int>((length + step_length - 1ms) / step_length);
  asio::steady_timer timer{co_await asio::this_coro::executor};
  say("acquired {}: valid for {} ms; the job takes {} steps of {} ms", l.resource(), ms_left(l), steps,
      step_length.count());
  for (int step = 1; step <= steps; ++step) {
    timer.expires_after(step_length);  // stands for a slice of real work (I/O, a computation...)
    auto [ec] = co_await timer.async_wait(use_tuple);
    // A cancelled wait, or a cancellation that arrived between two waits: the lock is gone.
    auto cancelled = (co_await asio::this_coro::cancellation_state).cancelled();
    if (ec || cancelled != asio::cancellation_type::none) {
      say("step {} cancelled, {} ms before the lock's validity deadline: {}", step, ms_left(l),
          l.loss_reason().message());
      co_return step - 1;
    }
    say("step {}/{} done; extended {} times so far, valid for {} ms more", step, steps, l.extensions(), ms_left(l));
  }
  say("job done: {} steps, the lock was extended {} times", steps, l.extensions());
  co_return steps;
}

// The thief: overwrites the lock's key on every master, behind the holder's back. It uses plain
// connections, not Redlock, as a process that ignores the lock (or a partition healed the wrong
// way) would. Its value expires after 10 s so that it does not linger.
asio::awaitable<void> steal(redlock::client_config cfg, milliseconds after) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer{ex, after};
  co_await timer.async_wait(use_tuple);
  int overwritten = 0;
  for (const auto& master : cfg.masters) {
    redlock::connection c{ex, master};
    c.async_run(asio::detached);
    redlock::resp::request req;
    req.push("SET", cfg.key_prefix + std::string{resource}, "stolen-by-the-thief", "PX", 10000);
    auto [ec, reply] = co_await c.async_exec(std::move(req), 1s, use_tuple);  // waits for the connect
    if (!ec) ++overwritten;
    c.close();
  }
  say("*** thief: overwrote {} on {} of {} masters", resource, overwritten, cfg.masters.size());
}

asio::awaitable<int> run(redlock::client& locks, const options& o) {
  if (o.steal_after) {
    asio::co_spawn(co_await asio::this_coro::executor, steal(locks.config(), *o.steal_after), asio::detached);
  }

  try {
    // The work is called as work(lock&) and returns an awaitable. Calling a plain function from
    // the lambda keeps the coroutine's state in its own frame (a coroutine lambda with captures
    // would depend on the lambda object's lifetime).
    const int steps = co_await redlock::with_lock(locks, std::string{resource}, o.ttl,
                                                  [&](redlock::lock& l) { return job(l, o.job); });
    say("completed: {} steps under the lock, released", steps);
    co_return 0;
  } catch (const redlock::lock_lost_error& e) {
    // code() is lock_lost; reason() says why (not_owner: the key was taken), as the job was told.
    say("with_lock: {}; reason: {}", e.code().message(), e.reason().message());
    co_return 3;
  } catch (const boost::system::system_error& e) {
    say("failed: {}{}", e.code().message(), masters_down(locks));  // e.g. not_acquired: held elsewhere
    co_return 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Command line

[[noreturn]] void usage(std::string_view problem) {
  fmt::print(stderr,
             "long_job: {}\n"
             "usage: long_job [--ttl D] [--job D] [--steal-after D] [host:port,host:port,...]\n"
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
    auto duration = [&] {
      if (i + 1 >= argc) usage(fmt::format("{} needs a value", arg));
      const std::string_view v = argv[++i];
      if (auto d = parse_duration(v)) return *d;
      usage(fmt::format("{} wants a duration such as 500ms or 2s, not '{}'", arg, v));
    };
    if (arg == "--ttl") {
      o.ttl = duration();
    } else if (arg == "--job") {
      o.job = duration();
    } else if (arg == "--steal-after") {
      o.steal_after = duration();
    } else if (arg.starts_with("-")) {
      usage(fmt::format("unknown option {}", arg));
    } else if (o.masters.empty()) {
      o.masters = arg;
    } else {
      usage("more than one list of masters");
    }
  }
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
    int exit_code = 1;
    asio::co_spawn(ioc, run(locks, o), [&](std::exception_ptr e, int code) {
      exit_code = e ? 1 : code;
      locks.close();  // ends the connections, so that run() returns
    });
    ioc.run();
    return exit_code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "long_job: {}\n", e.what());
    return 1;
  }
}
