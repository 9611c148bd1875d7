// Demonstration: one multiplexed connection per Redis master, many coroutines sharing them, and a
// master killed and restarted mid-way while the others carry on.
//
// Usage: demo [host:port,host:port,...]     (or REDLOCK_NODES=...). With no masters given, it
// starts three local redis-server processes of its own and stops them at the end.

#include <redlock/connection.hpp>
#include <redlock_test/redis_cluster.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/core.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct endpoint {
  std::string host;
  std::uint16_t port;
};

std::vector<endpoint> parse_nodes(std::string_view list) {
  std::vector<endpoint> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto item = list.substr(0, comma);
    const auto colon = item.rfind(':');
    if (colon == std::string_view::npos) throw std::invalid_argument(fmt::format("expected host:port, got '{}'", item));
    out.push_back({std::string{item.substr(0, colon)},
                   static_cast<std::uint16_t>(std::stoul(std::string{item.substr(colon + 1)}))});
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return out;
}

struct tally {
  int ok = 0, taken = 0, not_connected = 0, other = 0;
};

asio::awaitable<void> sleep_for(clock_type::duration d) {
  asio::steady_timer t{co_await asio::this_coro::executor, d};
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

// One round: every worker sends SET key token NX PX to every master at once and counts answers.
asio::awaitable<void> round(std::vector<std::unique_ptr<redlock::connection>>& conns, std::vector<tally>& tallies,
                            int round_no, int workers) {
  int pending = workers * static_cast<int>(conns.size());
  auto ex = co_await asio::this_coro::executor;
  for (int w = 0; w < workers; ++w) {
    for (std::size_t m = 0; m < conns.size(); ++m) {
      redlock::resp::request req;
      req.push("SET", fmt::format("demo:{}", w % 8), fmt::format("r{}w{}", round_no, w), "NX", "PX", 50);
      conns[m]->async_exec(std::move(req), 100ms,
                           [&, m](boost::system::error_code ec, redlock::resp::response r) {
                             auto& t = tallies[m];
                             if (!ec && !r.empty() && r[0].data_type == redlock::resp::type::simple_string) ++t.ok;
                             else if (!ec) ++t.taken;
                             else if (ec == redlock::error::not_connected) ++t.not_connected;
                             else ++t.other;
                             --pending;
                           });
    }
  }
  while (pending > 0) co_await sleep_for(1ms);
  (void)ex;
}

void print_tallies(std::string_view title, const std::vector<tally>& tallies) {
  fmt::print("{:<34}", title);
  for (const auto& t : tallies) {
    fmt::print("| set {:>4} taken {:>4} down {:>4} other {:>3} ", t.ok, t.taken, t.not_connected, t.other);
  }
  fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string list = argc > 1 ? argv[1] : (std::getenv("REDLOCK_NODES") ? std::getenv("REDLOCK_NODES") : "");
    std::optional<redlock::test::redis_cluster> local;
    std::vector<endpoint> nodes;
    if (list.empty()) {
      local.emplace(3);
      for (std::size_t i = 0; i < local->size(); ++i) nodes.push_back({(*local)[i].host(), (*local)[i].port()});
      fmt::print("started {} local redis-server masters\n", nodes.size());
    } else {
      nodes = parse_nodes(list);
    }
    for (const auto& n : nodes) fmt::print("  master {}:{}\n", n.host, n.port);

    asio::io_context ioc;
    std::vector<std::unique_ptr<redlock::connection>> conns;
    for (const auto& n : nodes) {
      redlock::connection_config cfg;
      cfg.host = n.host;
      cfg.port = n.port;
      cfg.client_name = "redlock-demo";
      cfg.reconnect = {20ms, 200ms, 0.5};
      conns.push_back(std::make_unique<redlock::connection>(ioc.get_executor(), cfg));
      conns.back()->async_run(asio::detached);
    }

    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          constexpr int workers = 64;
          fmt::print("\n{} workers send SET NX PX to every master at once, over one socket per master:\n", workers);
          std::vector<tally> tallies(conns.size());
          co_await sleep_for(100ms);
          for (int r = 0; r < 5; ++r) co_await round(conns, tallies, r, workers);
          print_tallies("all masters up", tallies);

          if (local) {
            (*local)[1].kill();
            fmt::print("\nkill -9 master 2 ...\n");
            co_await sleep_for(50ms);
            tallies.assign(conns.size(), {});
            const auto t0 = clock_type::now();
            for (int r = 0; r < 5; ++r) co_await round(conns, tallies, 100 + r, workers);
            print_tallies("master 2 down", tallies);
            fmt::print("  (requests to the dead master fail at once: 5 rounds took {} ms, deadline is 100 ms)\n",
                       std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count());

            (*local)[1].restart();
            fmt::print("\nrestart master 2 on the same port ...\n");
            while (conns[1]->status().state != redlock::connection_state::up) co_await sleep_for(10ms);
            tallies.assign(conns.size(), {});
            for (int r = 0; r < 5; ++r) co_await round(conns, tallies, 200 + r, workers);
            print_tallies("master 2 back", tallies);
          }
          fmt::print("\n");
          for (std::size_t m = 0; m < conns.size(); ++m) {
            const auto st = conns[m]->status();
            fmt::print("master {}: {} handshake(s), {} late replies dropped\n", m + 1, st.connects, st.dropped_replies);
            conns[m]->close();
          }
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    ioc.run();
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "demo: {}\n", e.what());
    return 1;
  }
}
