// SPDX-License-Identifier: BSL-1.0
// Bad input from the caller's side: every invalid configuration and argument is
// refused with its own error, which maps to condition::invalid_input, and it is refused before any
// I/O. The lock-argument table therefore runs twice: against masters that refuse connections (the
// check must not need them) and against real masters (which must never see one of these commands).

#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock/connection.hpp>
#include <redlock/error.hpp>
#include <redlock/lock.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock_test/configs.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::client_config;
using redlock::condition;
using redlock::connection_config;
using redlock::error;
using redlock::test::run_test;
using redlock::test::use_tuple;
using redlock::test::wait_connected;
using ms = std::chrono::milliseconds;

// Every error of this file is caller input: retrying cannot help, and nothing else may claim it.
void expect_invalid_input(error_code ec, error want) {
  EXPECT_EQ(ec, want) << ec.message();
  EXPECT_EQ(ec.category(), redlock::error_category());
  EXPECT_EQ(ec, condition::invalid_input);
  EXPECT_NE(ec, condition::master_failure);
  EXPECT_NE(ec, condition::timeout);
  EXPECT_NE(ec, condition::contention);
}

// Loopback ports that refuse connections: bound, so that no other process gets them while the
// test runs, but never listening, so that a connect is answered with a reset.
class refusing_ports {
 public:
  explicit refusing_ports(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      asio::ip::tcp::socket s{ctx_};
      s.open(asio::ip::tcp::v4());
      s.bind({asio::ip::address_v4::loopback(), 0});
      sockets_.push_back(std::move(s));
    }
  }
  std::uint16_t operator[](std::size_t i) const { return sockets_[i].local_endpoint().port(); }
  std::size_t size() const { return sockets_.size(); }

 private:
  asio::io_context ctx_;
  std::vector<asio::ip::tcp::socket> sockets_;
};

// A usable single-node configuration that is never connected to by the validate() tests.
connection_config good_connection() {
  connection_config cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 7001;
  return cfg;
}

// Three usable, distinct masters (validate() only: nothing connects to them).
client_config good_client() {
  client_config cfg;
  for (std::uint16_t port : {7001, 7002, 7003}) {
    auto m = good_connection();
    m.port = port;
    cfg.masters.push_back(m);
  }
  return cfg;
}

// ---- validate(connection_config) ----------------------------------------------------------------

struct connection_case {
  std::string name;
  std::function<void(connection_config&)> change;
  std::string field;  // empty: still valid; otherwise a word that `what` must contain
};

std::vector<connection_case> connection_cases() {
  using c = connection_config;
  constexpr auto hard = redlock::resp::parser::hard_max_depth;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"valid_default_limits", [](c&) {}, ""},
      {"valid_unix_socket_ignores_host_and_port",
       [](c& x) {
         x.unix_socket = "/tmp/redis.sock";
         x.host.clear();
         x.port = 0;
       },
       ""},
      {"valid_backoff_edges",
       [](c& x) {
         x.reconnect = {0ms, 0ms, 0.0};  // no delay at all, no jitter: allowed
       },
       ""},
      {"valid_full_jitter", [](c& x) { x.reconnect.jitter = 1.0; }, ""},
      {"valid_max_depth_at_hard_limit", [](c& x) { x.limits.max_depth = hard; }, ""},
      {"valid_smallest_line_length", [](c& x) { x.limits.max_line_length = 16; }, ""},
      {"empty_host", [](c& x) { x.host.clear(); }, "host"},
      {"port_zero", [](c& x) { x.port = 0; }, "port"},
      {"negative_database", [](c& x) { x.database = -1; }, "database"},
      {"zero_connect_timeout", [](c& x) { x.connect_timeout = 0ms; }, "connect_timeout"},
      {"negative_connect_timeout", [](c& x) { x.connect_timeout = -5ms; }, "connect_timeout"},
      {"backoff_initial_above_max",
       [](c& x) {
         x.reconnect = {500ms, 100ms, 0.5};
       },
       "reconnect"},
      {"backoff_negative_initial",
       [](c& x) {
         x.reconnect = {-1ms, 100ms, 0.5};
       },
       "reconnect"},
      {"backoff_negative_max",
       [](c& x) {
         x.reconnect = {0ms, -1ms, 0.5};
       },
       "reconnect"},
      {"jitter_negative", [](c& x) { x.reconnect.jitter = -0.1; }, "jitter"},
      {"jitter_above_one", [](c& x) { x.reconnect.jitter = 1.5; }, "jitter"},
      {"jitter_nan", [nan](c& x) { x.reconnect.jitter = nan; }, "jitter"},
      {"max_depth_zero", [](c& x) { x.limits.max_depth = 0; }, "max_depth"},
      {"max_depth_above_hard_limit", [](c& x) { x.limits.max_depth = hard + 1; }, "max_depth"},
      {"tiny_line_length", [](c& x) { x.limits.max_line_length = 15; }, "limits"},
      {"zero_line_length", [](c& x) { x.limits.max_line_length = 0; }, "limits"},
      {"zero_bulk_length", [](c& x) { x.limits.max_bulk_length = 0; }, "limits"},
      {"zero_max_nodes", [](c& x) { x.limits.max_nodes = 0; }, "limits"},
      // sockaddr_un holds at most 107 bytes of path: a longer one can never be connected to.
      {"unix_socket_path_too_long", [](c& x) { x.unix_socket = "/tmp/" + std::string(200, 's'); }, "unix_socket"},
  };
}

// Failure messages name the case rather than dumping its bytes.
void PrintTo(const connection_case& tc, std::ostream* os) { *os << tc.name; }

class connection_config_table : public ::testing::TestWithParam<connection_case> {};

TEST_P(connection_config_table, validate_names_the_field_and_async_run_refuses_to_start) {
  const auto& tc = GetParam();
  auto cfg = good_connection();
  tc.change(cfg);
  std::string what = "stale text from an earlier call";
  const error_code ec = redlock::validate(cfg, &what);
  EXPECT_EQ(redlock::validate(cfg), ec);  // `what` is optional
  if (tc.field.empty()) {
    EXPECT_FALSE(ec) << what;
    EXPECT_TRUE(what.empty()) << what;  // cleared on success
    return;                             // valid: nothing to refuse (and nothing listens there)
  }
  expect_invalid_input(ec, error::invalid_config);
  EXPECT_NE(what.find(tc.field), std::string::npos) << "what: " << what;
  if (!ec) return;  // accepted after all: running it would connect somewhere

  // The connection refuses to start with the same error and says why, and stays closed.
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::connection conn{ioc.get_executor(), cfg};
    auto [run_ec] = co_await conn.async_run(use_tuple);
    expect_invalid_input(run_ec, error::invalid_config);
    const auto status = conn.status();
    EXPECT_EQ(status.state, redlock::connection_state::closed);
    EXPECT_EQ(status.last_error, error::invalid_config);
    EXPECT_EQ(status.last_error_text, what);
    redlock::resp::request ping;
    ping.push("PING");
    auto [exec_ec, reply] = co_await conn.async_exec(std::move(ping), 1s, use_tuple);
    EXPECT_EQ(exec_ec, error::not_connected);
    EXPECT_TRUE(reply.empty());
  });
}

INSTANTIATE_TEST_SUITE_P(cases, connection_config_table, ::testing::ValuesIn(connection_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- validate(client_config) --------------------------------------------------------------------

struct client_case {
  std::string name;
  std::function<void(client_config&)> change;
  std::string field;
};

std::vector<client_case> client_cases() {
  using c = client_config;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"valid_three_masters", [](c&) {}, ""},
      {"valid_tcp_and_unix_masters",
       [](c& x) {
         x.masters[0].unix_socket = "/tmp/a.sock";
         x.masters[1].unix_socket = "/tmp/b.sock";
       },
       ""},
      {"valid_drift_edges",
       [](c& x) {
         x.drift = {0.0, 0ms};  // no allowance at all is the caller's choice
         x.retry = {0, 0ms, 0ms, 0ms};
       },
       ""},
      {"valid_drift_just_below_one", [](c& x) { x.drift.factor = 0.999; }, ""},
      {"no_masters", [](c& x) { x.masters.clear(); }, "no masters"},
      {"same_host_port_twice", [](c& x) { x.masters[2].port = x.masters[0].port; }, "twice"},
      {"same_unix_socket_twice",
       [](c& x) {
         x.masters[0].unix_socket = "/tmp/redis.sock";
         x.masters[2].unix_socket = "/tmp/redis.sock";
       },
       "twice"},
      // One server under two database numbers is still one master: it would cast two votes (and
      // lose both at once), which is what the duplicate check is for.
      {"same_server_other_database",
       [](c& x) {
         x.masters[2].port = x.masters[0].port;
         x.masters[2].database = 1;
       },
       "twice"},
      {"invalid_master_inside", [](c& x) { x.masters[1].port = 0; }, "master 2"},
      {"invalid_master_field_named", [](c& x) { x.masters[2].connect_timeout = 0ms; }, "connect_timeout"},
      {"zero_request_timeout", [](c& x) { x.request_timeout = 0ms; }, "request_timeout"},
      {"negative_request_timeout", [](c& x) { x.request_timeout = -250ms; }, "request_timeout"},
      {"zero_release_timeout", [](c& x) { x.release_timeout = 0ms; }, "release_timeout"},
      {"negative_release_timeout", [](c& x) { x.release_timeout = -1ms; }, "release_timeout"},
      {"drift_factor_negative", [](c& x) { x.drift.factor = -0.01; }, "drift.factor"},
      {"drift_factor_one", [](c& x) { x.drift.factor = 1.0; }, "drift.factor"},
      {"drift_factor_nan", [nan](c& x) { x.drift.factor = nan; }, "drift.factor"},
      {"drift_factor_infinite", [inf](c& x) { x.drift.factor = inf; }, "drift.factor"},
      {"drift_fixed_negative", [](c& x) { x.drift.fixed = -1ms; }, "drift.fixed"},
      {"retry_base_delay_negative", [](c& x) { x.retry.base_delay = -1ms; }, "retry"},
      {"retry_jitter_negative", [](c& x) { x.retry.jitter = -1ms; }, "retry"},
      {"retry_max_wait_negative", [](c& x) { x.retry.max_wait = -1ms; }, "retry"},
      {"max_resource_length_zero", [](c& x) { x.max_resource_length = 0; }, "max_resource_length"},
      {"fairness_entry_timeout_negative", [](c& x) { x.fairness.entry_timeout = -1ms; }, "fairness.entry_timeout"},
      // Shorter than the longest gap between a waiter's attempts: its place would lapse between them.
      {"fairness_entry_timeout_below_the_retry_gap",
       [](c& x) { x.fairness.entry_timeout = x.retry.base_delay + x.retry.jitter + x.request_timeout; },
       "fairness.entry_timeout"},
  };
}

void PrintTo(const client_case& tc, std::ostream* os) { *os << tc.name; }

class client_config_table : public ::testing::TestWithParam<client_case> {};

TEST_P(client_config_table, validate_names_the_problem_and_the_client_refuses_every_lock) {
  const auto& tc = GetParam();
  auto cfg = good_client();
  tc.change(cfg);
  std::string what = "stale text from an earlier call";
  const error_code ec = redlock::validate(cfg, &what);
  EXPECT_EQ(redlock::validate(cfg), ec);
  if (tc.field.empty()) {
    EXPECT_FALSE(ec) << what;
    EXPECT_TRUE(what.empty()) << what;
    return;
  }
  expect_invalid_input(ec, error::invalid_config);
  EXPECT_NE(what.find(tc.field), std::string::npos) << "what: " << what;
  if (!ec) return;  // accepted after all: a client would connect to the placeholder ports

  // A client built from it does not throw, opens nothing, and refuses every lock with that error,
  // even one whose own arguments are also wrong (the configuration is the first problem).
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), cfg};
    EXPECT_TRUE(c.masters().empty());
    auto [e1, l1] = co_await c.async_lock("r", 10s, use_tuple);
    expect_invalid_input(e1, error::invalid_config);
    EXPECT_FALSE(l1.owns_lock());
    EXPECT_EQ(l1.attempts(), 0u);
    auto [e2, l2] = co_await c.async_try_lock("r", 10s, use_tuple);
    expect_invalid_input(e2, error::invalid_config);
    auto [e3, l3] = co_await c.async_try_lock("", 0ms, use_tuple);
    expect_invalid_input(e3, error::invalid_config);
  });
}

INSTANTIATE_TEST_SUITE_P(cases, client_config_table, ::testing::ValuesIn(client_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// ---- lock arguments -------------------------------------------------------------------------------

// The limits the lock table is written against: a short name limit, and the test bed's
// request_timeout with the default drift (1% + 2 ms).
constexpr std::size_t name_limit = 32;
constexpr ms request_timeout = 200ms;
// The shortest ttl that leaves validity after a decision at the very end of the per-master
// deadline: 205 ms - (2.05 ms + 2 ms) = 200.95 ms > 200 ms, whereas 204 ms leaves 199.96 ms.
constexpr ms shortest_ttl = 205ms;

struct lock_case {
  const char* name;
  std::size_t resource_length;  // the resource is this many 'r's
  ms ttl;
  bool try_lock;  // async_try_lock rather than async_lock
};

// Every one is refused with invalid_argument before any request is sent.
const std::vector<lock_case> invalid_locks = {
    {"empty_resource", 0, 10s, false},
    {"empty_resource_try", 0, 10s, true},
    {"resource_one_over_limit", name_limit + 1, 10s, false},
    {"resource_far_over_limit", 64 * 1024, 10s, true},
    {"ttl_zero", 8, 0ms, false},
    {"ttl_zero_try", 8, 0ms, true},
    {"ttl_negative", 8, -1ms, false},
    {"ttl_most_negative", 8, ms::min(), true},
    {"ttl_equal_to_request_timeout", 8, request_timeout, false},
    {"ttl_not_above_drift_plus_request_timeout", 8, shortest_ttl - 1ms, true},
};

// The same checks' edges from the accepted side: these go to the masters.
const std::vector<lock_case> edge_locks = {
    {"resource_at_limit_shortest_ttl", name_limit, shortest_ttl, true},
    {"resource_of_one_byte", 1, 10s, true},
};

std::string resource_of(const lock_case& tc) { return std::string(tc.resource_length, 'r'); }

asio::awaitable<std::tuple<error_code, redlock::lock>> lock_with(redlock::client& c, const lock_case& tc) {
  if (tc.try_lock) co_return co_await c.async_try_lock(resource_of(tc), tc.ttl, use_tuple);
  co_return co_await c.async_lock(resource_of(tc), tc.ttl, use_tuple);
}

// Runs the invalid half of the table on `c`: each refused as invalid_argument, no attempt made, and
// the handle it returns holds nothing (so unlock and extend on it say not_locked).
asio::awaitable<void> expect_invalid_locks_refused(redlock::client& c) {
  for (const auto& tc : invalid_locks) {
    SCOPED_TRACE(tc.name);
    auto [ec, l] = co_await lock_with(c, tc);
    expect_invalid_input(ec, error::invalid_argument);
    EXPECT_FALSE(l.owns_lock());
    EXPECT_EQ(l.attempts(), 0u);       // refused before the first attempt
    EXPECT_TRUE(l.masters().empty());  // no master was asked
    EXPECT_EQ(l.resource(), resource_of(tc));
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    expect_invalid_input(uec, error::not_locked);
    EXPECT_EQ(held, 0u);
    auto [xec] = co_await l.async_extend(10s, use_tuple);
    expect_invalid_input(xec, error::not_locked);
  }
}

client_config refusing_client(const refusing_ports& ports) {
  client_config cfg;
  for (std::size_t i = 0; i < ports.size(); ++i) {
    connection_config m;
    m.host = "127.0.0.1";
    m.port = ports[i];
    m.connect_timeout = 300ms;
    m.reconnect = {10ms, 50ms, 0.5};
    cfg.masters.push_back(m);
  }
  cfg.request_timeout = request_timeout;
  cfg.max_resource_length = name_limit;
  return cfg;
}

TEST(lock_arguments, refused_without_any_master) {
  refusing_ports ports{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), refusing_client(ports)};
    co_await expect_invalid_locks_refused(c);
    // The accepted edges pass the check and reach the (absent) masters: the boundaries are exact,
    // and the refusals above came from the check, not from the masters being down.
    for (const auto& tc : edge_locks) {
      SCOPED_TRACE(tc.name);
      auto [ec, l] = co_await lock_with(c, tc);
      EXPECT_EQ(ec, error::quorum_unavailable) << ec.message();
      EXPECT_EQ(l.attempts(), 1u);
      EXPECT_FALSE(l.owns_lock());
    }
  });
}

struct real_masters : ::testing::Test {
  redlock::test::master_set servers{3};

  client_config config() {
    auto cfg = redlock::test::client_config_for(servers, request_timeout);
    cfg.max_resource_length = name_limit;
    return cfg;
  }

  // How many times each master ran `command` (lower case, as INFO commandstats names it).
  std::vector<long> calls(const std::string& command) {
    std::vector<long> out;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const std::string info = servers[i].command({"INFO", "commandstats"});
      const std::string key = "cmdstat_" + command + ":calls=";
      const auto at = info.find(key);
      out.push_back(at == std::string::npos ? 0 : std::stol(info.substr(at + key.size())));
    }
    return out;
  }

  void expect_masters_untouched(const char* what) {
    SCOPED_TRACE(what);
    for (std::size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(servers[i].command({"DBSIZE"}), ":0\r\n");
    for (const char* cmd : {"set", "evalsha", "eval"}) {
      for (long n : calls(cmd)) EXPECT_EQ(n, 0) << cmd;
    }
  }
};

TEST_F(real_masters, invalid_lock_arguments_never_reach_them) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);  // connected: a command sent by mistake would really arrive
    co_await expect_invalid_locks_refused(c);
    expect_masters_untouched("after the invalid lock arguments");

    for (const auto& tc : edge_locks) {
      SCOPED_TRACE(tc.name);
      auto [ec, l] = co_await lock_with(c, tc);
      EXPECT_FALSE(ec) << ec.message();
      EXPECT_TRUE(l.owns_lock());
      auto [uec, held] = co_await l.async_unlock(use_tuple);
      EXPECT_FALSE(uec) << uec.message();
    }
  });
}

TEST_F(real_masters, extend_with_an_invalid_ttl_changes_nothing) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), config()};
    co_await wait_connected(c);
    auto [ec, l] = co_await c.async_lock("held", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (!l.owns_lock()) co_return;  // reported above; nothing to extend
    const auto deadline = l.validity_deadline();
    const auto scripts_before = calls("evalsha");

    for (const ms ttl : {0ms, -1ms, ms::min(), request_timeout, shortest_ttl - 1ms}) {
      SCOPED_TRACE(ttl.count());
      auto [xec] = co_await l.async_extend(ttl, use_tuple);
      expect_invalid_input(xec, error::invalid_argument);
      EXPECT_TRUE(l.owns_lock());                  // still held: a refused extend loses nothing
      EXPECT_EQ(l.validity_deadline(), deadline);  // and moves nothing
      EXPECT_EQ(l.extensions(), 0u);
    }
    EXPECT_EQ(calls("evalsha"), scripts_before);  // no extend script was sent
    EXPECT_EQ(calls("eval"), std::vector<long>(servers.size(), 0));
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const auto pttl = std::stol(servers[i].command({"PTTL", "held"}).substr(1));
      EXPECT_GT(pttl, 0);
      EXPECT_LE(pttl, 10000);  // the masters' ttl was not touched either
    }

    auto [xec] = co_await l.async_extend(shortest_ttl, use_tuple);  // the edge from the accepted side
    EXPECT_FALSE(xec) << xec.message();
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    EXPECT_FALSE(uec) << uec.message();
  });
}

// ttl values so large that time arithmetic in signed 64-bit microseconds or nanoseconds would
// overflow: refused (client_config::max_ttl) before any conversion or I/O.
TEST(lock_arguments_huge_ttl, ttl_max_is_refused_without_overflow) {
  refusing_ports ports{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), refusing_client(ports)};
    auto [ec, l] = co_await c.async_try_lock("r", ms::max(), use_tuple);
    expect_invalid_input(ec, error::invalid_argument);
    EXPECT_EQ(l.attempts(), 0u);
  });
}

// 10^13 ms (about 317 years) and 9 * 10^15 ms would reach the masters and then overflow the
// validity arithmetic; they are refused before any I/O.
TEST(lock_arguments_huge_ttl, ttl_beyond_the_clock_is_refused_before_any_io) {
  redlock::test::master_set servers{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = redlock::test::client_config_for(servers, request_timeout);
    redlock::client c{ioc.get_executor(), cfg};
    for (const ms ttl : {ms{10'000'000'000'000}, ms{9'000'000'000'000'000}}) {
      SCOPED_TRACE(ttl.count());
      // A name per ttl: a late release of the first must not decide the second.
      auto [ec, l] = co_await c.async_try_lock("forever:" + std::to_string(ttl.count()), ttl, use_tuple);
      expect_invalid_input(ec, error::invalid_argument);
      EXPECT_EQ(l.attempts(), 0u);
    }
    for (std::size_t i = 0; i < servers.size(); ++i) {
      EXPECT_EQ(servers[i].command({"INFO", "commandstats"}).find("cmdstat_set:"), std::string::npos);
    }
  });
}

// ---- handles that hold nothing ------------------------------------------------------------------

TEST(lock_handles, an_empty_handle_says_not_locked) {
  run_test([&](asio::io_context&) -> asio::awaitable<void> {
    redlock::lock empty;
    EXPECT_FALSE(empty.owns_lock());
    auto [u1, held] = co_await empty.async_unlock(use_tuple);
    expect_invalid_input(u1, error::not_locked);
    EXPECT_EQ(held, 0u);
    auto [x1] = co_await empty.async_extend(10s, use_tuple);
    expect_invalid_input(x1, error::not_locked);
    auto [x2] = co_await empty.async_extend(0ms, use_tuple);  // no lock comes before a bad ttl
    expect_invalid_input(x2, error::not_locked);
    auto [w1] = co_await empty.async_wait_lost(use_tuple);
    expect_invalid_input(w1, error::not_locked);
    empty.keep_alive();  // does nothing on a handle that holds nothing
  });
}

TEST(lock_handles, moved_from_and_refused_handles_say_not_locked) {
  refusing_ports ports{3};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    redlock::client c{ioc.get_executor(), refusing_client(ports)};
    auto [ec, refused] = co_await c.async_try_lock("", 10s, use_tuple);  // a handle with state, not held
    expect_invalid_input(ec, error::invalid_argument);
    redlock::lock target = std::move(refused);
    EXPECT_EQ(target.resource(), "");
    // The moved-from handle is empty; the target holds nothing: both say so, neither crashes.
    auto [u1, h1] = co_await refused.async_unlock(use_tuple);  // use after move on purpose
    expect_invalid_input(u1, error::not_locked);
    auto [x1] = co_await refused.async_extend(10s, use_tuple);
    expect_invalid_input(x1, error::not_locked);
    auto [u2, h2] = co_await target.async_unlock(use_tuple);
    expect_invalid_input(u2, error::not_locked);
    auto [x2] = co_await target.async_extend(10s, use_tuple);
    expect_invalid_input(x2, error::not_locked);
    auto [w2] = co_await target.async_wait_lost(use_tuple);
    expect_invalid_input(w2, error::not_locked);
  });
}

// ---- a client built from an invalid configuration -------------------------------------------------

TEST(invalid_client, every_operation_completes_with_the_config_error_through_any_token) {
  auto cfg = good_client();
  cfg.masters.push_back(cfg.masters.front());  // listed twice
  asio::io_context ioc;
  std::optional<redlock::client> c;
  EXPECT_NO_THROW(c.emplace(ioc.get_executor(), cfg));
  EXPECT_TRUE(c->masters().empty());
  EXPECT_EQ(c->config().masters.size(), 4u);  // kept as given

  // A plain callback: never invoked inline, then exactly once.
  int calls = 0;
  error_code got;
  c->async_lock("r", 10s, [&](error_code ec, redlock::lock l) {
    ++calls;
    got = ec;
    EXPECT_FALSE(l.owns_lock());
  });
  EXPECT_EQ(calls, 0);
  ioc.run();
  ioc.restart();
  EXPECT_EQ(calls, 1);
  expect_invalid_input(got, error::invalid_config);

  // use_future: the error arrives as a system_error carrying our code, never as a crash.
  auto fut = c->async_try_lock("r", 10s, asio::use_future);
  ioc.run();
  ioc.restart();
  try {
    fut.get();
    ADD_FAILURE() << "expected invalid_config";
  } catch (const boost::system::system_error& e) {
    expect_invalid_input(e.code(), error::invalid_config);
  }

  // use_awaitable throws into the coroutine; as_tuple hands it over as a value.
  run_test([&](asio::io_context& tioc) -> asio::awaitable<void> {
    redlock::client in{tioc.get_executor(), cfg};
    try {
      co_await in.async_lock("r", 10s, asio::use_awaitable);
      ADD_FAILURE() << "expected invalid_config";
    } catch (const boost::system::system_error& e) {
      expect_invalid_input(e.code(), error::invalid_config);
    }
    auto [ec, l] = co_await in.async_try_lock("r", 10s, use_tuple);
    expect_invalid_input(ec, error::invalid_config);
    // The handle it hands back holds nothing, so every handle operation says so.
    auto [uec, held] = co_await l.async_unlock(use_tuple);
    expect_invalid_input(uec, error::not_locked);
    auto [xec] = co_await l.async_extend(10s, use_tuple);
    expect_invalid_input(xec, error::not_locked);
    auto [wec] = co_await l.async_wait_lost(use_tuple);
    expect_invalid_input(wec, error::not_locked);
    l.keep_alive();
    in.close();
    in.close();  // idempotent
    auto [after_close, l2] = co_await in.async_lock("r", 10s, use_tuple);
    expect_invalid_input(after_close, error::invalid_config);  // the config is still the first problem
  });
  c.reset();  // destruction of a client that never connected
}

// ---- the connection's own arguments ---------------------------------------------------------------

TEST(connection_arguments, exec_refuses_empty_requests_and_non_positive_timeouts_before_any_io) {
  refusing_ports ports{1};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = good_connection();
    cfg.port = ports[0];
    redlock::connection idle{ioc.get_executor(), cfg};  // never run: any I/O would be impossible
    using duration = redlock::connection::clock::duration;
    struct exec_case {
      const char* name;
      bool empty_request;
      duration timeout;
    };
    const exec_case cases[] = {
        {"empty_request", true, duration{1s}},
        {"empty_request_zero_timeout", true, duration::zero()},
        {"zero_timeout", false, duration::zero()},
        {"negative_timeout", false, duration{-1ms}},
        {"most_negative_timeout", false, duration::min()},
    };
    for (const auto& tc : cases) {
      SCOPED_TRACE(tc.name);
      redlock::resp::request req;
      if (!tc.empty_request) req.push("PING");
      auto [ec, reply] = co_await idle.async_exec(std::move(req), tc.timeout, use_tuple);
      expect_invalid_input(ec, error::invalid_argument);  // not not_connected: arguments come first
      EXPECT_TRUE(reply.empty());
    }
    // The edge from the accepted side: a valid request on a connection that never ran.
    redlock::resp::request ping;
    ping.push("PING");
    auto [ec, reply] = co_await idle.async_exec(std::move(ping), 1ns, use_tuple);
    EXPECT_EQ(ec, error::not_connected);
  });
}

TEST_F(real_masters, exec_arguments_are_refused_on_a_live_connection_too) {
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    connection_config cfg;
    cfg.host = servers[0].host();
    cfg.port = servers[0].port();
    redlock::connection conn{ioc.get_executor(), cfg};
    conn.async_run([](error_code) {});
    redlock::resp::request ping;
    ping.push("PING");
    auto [ok, pong] = co_await conn.async_exec(std::move(ping), 2s, use_tuple);
    EXPECT_FALSE(ok) << ok.message();  // up and serving
    auto [e1, r1] = co_await conn.async_exec(redlock::resp::request{}, 2s, use_tuple);
    expect_invalid_input(e1, error::invalid_argument);
    redlock::resp::request set;
    set.push("SET", "k", "v");
    auto [e2, r2] = co_await conn.async_exec(std::move(set), 0s, use_tuple);
    expect_invalid_input(e2, error::invalid_argument);
    EXPECT_EQ(servers[0].command({"DBSIZE"}), ":0\r\n");  // the SET never went out
    conn.close();
  });
}

TEST(connection_arguments, async_run_twice_is_refused_and_the_first_run_goes_on) {
  refusing_ports ports{1};
  run_test([&](asio::io_context& ioc) -> asio::awaitable<void> {
    auto cfg = good_connection();
    cfg.port = ports[0];
    cfg.reconnect = {10ms, 50ms, 0.5};
    redlock::connection conn{ioc.get_executor(), cfg};
    bool first_done = false;
    error_code first;
    conn.async_run([&](error_code ec) {
      first_done = true;
      first = ec;
    });
    auto [second] = co_await conn.async_run(use_tuple);
    expect_invalid_input(second, error::invalid_argument);
    auto [third] = co_await conn.async_run(use_tuple);
    expect_invalid_input(third, error::invalid_argument);
    EXPECT_FALSE(first_done);  // the refusals did not disturb the running one
    EXPECT_NE(conn.status().state, redlock::connection_state::closed);
    conn.close();
    EXPECT_TRUE(co_await redlock::test::until([&] { return first_done; }, 1s)) << "close did not end the first run";
    EXPECT_TRUE(first_done);
    EXPECT_EQ(first, asio::error::operation_aborted);

    // A connection closed before it ever ran cannot be started either.
    redlock::connection closed{ioc.get_executor(), cfg};
    closed.close();
    auto [late] = co_await closed.async_run(use_tuple);
    expect_invalid_input(late, error::invalid_argument);
  });
}

}  // namespace
