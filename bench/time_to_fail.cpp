// SPDX-License-Identifier: BSL-1.0
// How long an acquisition takes to fail when no retry can help: the client uses the
// library's default configuration (what a new user gets), against three local masters that
// require a password, in these scenarios:
//
//  (w3)  every master refuses the password; the lock is asked at once after the client starts;
//  (w3s) the same, asked 300 ms after the client started (every connection has failed already);
//  (w2)  two of three masters refuse the password, the third accepts it;
//  (h2)  two of three masters are host names that do not resolve ("*.invalid").
//
// Each scenario runs --runs times with a new client; prints the p50 and max of the time from
// async_lock to its completion, the error, and what masters()[i].error said, and writes JSON
// (--json FILE).
//
// Usage: time_to_fail [--runs N] [--json FILE]

#include "bench_util.hpp"
#include <redlock/client.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = redlock::clock;
constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

struct outcome {
  double ms = 0;
  std::string error;
  std::string masters;  // each master's error in the lock's result
};

// One acquisition with a new client; `delay` between the client's start and the lock.
outcome one(const redlock::client_config& cfg, std::chrono::milliseconds delay) {
  asio::io_context io;
  outcome out;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        redlock::client c{io.get_executor(), cfg};
        if (delay > 0ms) {
          asio::steady_timer t{io, delay};
          co_await t.async_wait(tuple);
        }
        const auto t0 = clock_type::now();
        auto [ec, l] = co_await c.async_lock("time-to-fail", 10s, tuple);
        out.ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
        out.error = ec ? ec.message() : "acquired";
        for (const auto& m : l.masters()) {
          if (!out.masters.empty()) out.masters += "; ";
          out.masters += fmt::format("{}: {}", redlock::to_string(m.status), m.error ? m.error.message() : "-");
        }
        c.close();
      },
      asio::detached);
  io.run();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 10;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--runs") {
      runs = std::atoi(argv[i + 1]);
    } else if (a == "--json") {
      json_path = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }

  redlock::test::redis_options opts;
  opts.password = "right-password";
  redlock::test::master_set servers{3, opts};
  const auto config = [&](int wrong, int unresolvable) {
    redlock::client_config cfg;  // the library's defaults
    for (int i = 0; i < 3; ++i) {
      redlock::connection_config m;
      m.host = servers[static_cast<std::size_t>(i)].host();
      m.port = servers[static_cast<std::size_t>(i)].port();
      m.password = i < wrong ? "wrong-password" : "right-password";
      if (i < unresolvable) m.host = fmt::format("master{}.nohost.invalid", i);
      cfg.masters.push_back(m);
    }
    return cfg;
  };
  struct scenario {
    std::string name;
    redlock::client_config cfg;
    std::chrono::milliseconds delay;
  };
  const std::vector<scenario> scenarios{
      {"w3", config(3, 0), 0ms},
      {"w3s", config(3, 0), 300ms},
      {"w2", config(2, 0), 0ms},
      {"h2", config(0, 2), 0ms},
  };

  std::string json;
  std::printf("%-5s %10s %10s  %-24s %s\n", "case", "p50 ms", "max ms", "error", "masters (last run)");
  for (const auto& s : scenarios) {
    std::vector<double> ms;
    outcome last;
    for (int r = 0; r < runs; ++r) {
      last = one(s.cfg, s.delay);
      ms.push_back(last.ms);
    }
    const auto st = redlock::bench::summarize(ms);
    std::printf("%-5s %10.1f %10.1f  %-24s %s\n", s.name.c_str(), st.p50, st.max, last.error.c_str(),
                last.masters.c_str());
    json += fmt::format("{}\"{}\": {{\"p50_ms\": {:.2f}, \"max_ms\": {:.2f}, \"error\": \"{}\", \"masters\": \"{}\"}}",
                        json.empty() ? "" : ",\n  ", s.name, st.p50, st.max, last.error, last.masters);
  }
  if (!json_path.empty()) {
    std::ofstream j{json_path};
    j << "{\"runs\": " << runs << ",\n  " << json << "}\n";
  }
  return 0;
}
