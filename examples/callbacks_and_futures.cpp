// SPDX-License-Identifier: BSL-1.0
// callbacks_and_futures: the lock API without coroutines.
//
// Every operation of the library takes any Asio completion token. This program uses two:
//   1. completion handlers (callbacks), run on the io_context's thread;
//   2. std::future (asio::use_future), waited for from another thread, here the main thread,
//      as code outside the event loop (a legacy thread, a test) would.
//
// Usage: callbacks_and_futures [host:port,host:port,...]
//   masters from the argument or REDLOCK_NODES; password (if any) from REDLOCK_PASSWORD
// Exit status: 0 when every step went as expected, 1 otherwise, 2 bad usage.

#include <redlock/client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
using boost::system::error_code;

namespace {

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
  return std::chrono::duration_cast<std::chrono::milliseconds>(l.validity_deadline() - clock_type::now()).count();
}

std::atomic<int> failures{0};

void unexpected(std::string_view step, const error_code& ec, std::string_view detail = {}) {
  fmt::print("{}: unexpected: {}{}\n", step, ec ? ec.message() : "success", detail);
  ++failures;
}

// Part 1: completion handlers. Each step starts the next from its handler; `done` tells the main
// thread that the chain has ended.
void with_callbacks(redlock::client& locks, std::promise<void>& done) {
  locks.async_lock("example:callbacks", 2s, [&locks, &done](error_code ec, redlock::lock l) {
    if (ec) {
      unexpected("callbacks: lock", ec, masters_down(locks));  // e.g. quorum_unavailable
      done.set_value();
      return;
    }
    fmt::print("callbacks: acquired {} on {} masters, valid for {} ms\n", l.resource(), l.masters().size(), ms_left(l));

    // The handle must live until its unlock completes: the handlers below share its ownership.
    auto held = std::make_shared<redlock::lock>(std::move(l));

    // A second attempt while we hold it fails with not_acquired: contention is an ordinary
    // outcome, an error code to test, not an exception.
    locks.async_try_lock("example:callbacks", 2s, [held, &done](error_code ec2, redlock::lock) {
      if (ec2 == redlock::error::not_acquired) {
        fmt::print("callbacks: a second try_lock is refused, as expected: {}\n", ec2.message());
      } else {
        unexpected("callbacks: second try_lock", ec2);
      }
      held->async_unlock([held, &done](error_code ec3, std::size_t masters) {
        if (ec3) {
          unexpected("callbacks: unlock", ec3);
        } else {
          // It completes once a majority answered; the remaining masters finish in the background.
          fmt::print("callbacks: released ({} masters confirmed)\n", masters);
        }
        done.set_value();
      });
    });
  });
}

// Part 2: futures, from a thread that is not the io_context's. `.get()` blocks this thread until
// the operation completes on the io thread, and throws boost::system::system_error on failure.
// (Never call .get() on the io thread itself: it would wait for itself forever.)
void with_futures(redlock::client& locks) {
  try {
    redlock::lock l = locks.async_lock("example:futures", 2s, asio::use_future).get();
    fmt::print("futures: acquired {}, valid for {} ms\n", l.resource(), ms_left(l));

    l.async_extend(5s, asio::use_future).get();
    fmt::print("futures: extended to 5 s, valid for {} ms, {} extension\n", ms_left(l), l.extensions());

    // A plain use_future turns a failure into an exception. Given a function, use_future passes it
    // the error code and the handle instead and the future carries what it returns: right for an
    // expected failure, and to see what each master answered (masters()).
    auto outcome = [](error_code ec, redlock::lock other) {
      int taken = 0;
      for (const auto& n : other.masters()) taken += n.status == redlock::master_status::taken;
      return std::pair{ec, taken};
    };
    auto second = locks.async_try_lock("example:futures", 2s, asio::use_future(outcome));
    if (auto [ec, taken] = second.get(); ec == redlock::error::not_acquired) {
      fmt::print("futures: a second try_lock is refused, as expected: {} master(s) answered taken\n", taken);
    } else {
      unexpected("futures: second try_lock", ec);
    }

    // A loss notification, as a callback: it completes with operation_aborted here, because we
    // release first. Had the keep-alive failed, it would complete with success (the awaited event).
    l.keep_alive();
    std::promise<error_code> lost;
    l.async_wait_lost([&lost](error_code e) { lost.set_value(e); });

    const std::size_t masters = l.async_unlock(asio::use_future).get();
    fmt::print("futures: released ({} masters confirmed)\n", masters);
    const error_code why = lost.get_future().get();
    fmt::print("futures: the loss wait ended: {}\n", why == asio::error::operation_aborted ? "released first"
                                                     : !why                                ? "the lock was lost"
                                                                                           : why.message());
  } catch (const boost::system::system_error& e) {
    unexpected("futures", e.code(), masters_down(locks));
  }
}

// ---------------------------------------------------------------------------------------------
// Command line

[[noreturn]] void usage(std::string_view problem) {
  fmt::print(stderr,
             "callbacks_and_futures: {}\n"
             "usage: callbacks_and_futures [host:port,host:port,...]\n"
             "  masters from the argument or REDLOCK_NODES, password from REDLOCK_PASSWORD\n",
             problem);
  std::exit(2);
}

// The masters come from the command line or REDLOCK_NODES; a password only from the environment
// (REDLOCK_PASSWORD), so that it shows neither in `ps` nor in the shell's history.
redlock::client_config load_config(int argc, char** argv) {
  std::string list;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("-")) usage(fmt::format("unknown option {}", arg));
    if (!list.empty()) usage("more than one list of masters");
    list = arg;
  }
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
  if (redlock::validate(cfg, &problem)) usage(problem);
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, also into a pipe or a file
  const redlock::client_config cfg = load_config(argc, argv);

  asio::io_context ioc;
  // The io thread runs the event loop; the work guard keeps run() from returning while the main
  // thread has nothing in flight.
  auto work = asio::make_work_guard(ioc);
  std::thread io_thread{[&ioc] { ioc.run(); }};
  {
    redlock::client locks{ioc.get_executor(), cfg};

    std::promise<void> done;
    with_callbacks(locks, done);
    done.get_future().wait();

    with_futures(locks);
    locks.close();
  }
  work.reset();  // let run() return once the connections have closed
  io_thread.join();
  fmt::print("{}\n", failures == 0 ? "all steps went as expected" : "some steps failed");
  return failures == 0 ? 0 : 1;
}
