// SPDX-License-Identifier: BSL-1.0
// A master that misbehaves on the wire, for real: a scripted fake server answers with garbage,
// truncated, oversized or deeply nested replies, replies of the wrong type, extra replies and
// error replies, first to a single connection, then as the fifth master of a lock client whose
// four other masters are real redis-server processes. Each time the failure must be precise (the
// right error code, the server's own text), contained (the quorum of good masters still decides,
// nothing crashes or hangs) and temporary (once the node behaves, the next request is answered,
// on the same socket when the stream was still in step, after a reconnect when it was not).
// Where a real Redis can produce the error itself (WRONGTYPE, READONLY, OOM, BUSY, NOSCRIPT), a
// real master produces it too.

#include <redlock/client.hpp>
#include <redlock/connection.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/fake_server.hpp>
#include <redlock_test/fault_proxy.hpp>
#include <redlock_test/master_set.hpp>

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::connection;
using redlock::connection_config;
using redlock::connection_state;
using redlock::error;
using redlock::master_status;
using redlock::resp::request;
using redlock::resp::response;
using redlock::test::fake_server;
using redlock::test::reply_action;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::use_tuple;
using clock_type = redlock::clock;

// Bounds every test body: a misbehaving node must never make anything hang.
constexpr auto test_limit = 30s;

connection_config node_config(const std::string& host, std::uint16_t port) {
  connection_config cfg;
  cfg.host = host;
  cfg.port = port;
  cfg.connect_timeout = 300ms;
  cfg.reconnect = {10ms, 100ms, 0.5};
  return cfg;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

template <class... Args>
request make(std::string_view cmd, const Args&... args) {
  request r;
  r.push(cmd, args...);
  return r;
}

// Answers every command named `name` with `action`; everything else as the built-in Redis would.
fake_server::responder on(std::string name, reply_action action) {
  return [name = std::move(name),
          action = std::move(action)](const fake_server::command& c) -> std::optional<reply_action> {
    if (!c.empty() && c.front() == name) return action;
    return std::nullopt;
  };
}

// Polls `done` every few milliseconds; false (and a test failure saying `what`) after `limit`.
template <class Pred>
asio::awaitable<bool> eventually(Pred done, std::string_view what, clock_type::duration limit = 5s) {
  const bool ok = co_await redlock::test::until(done, limit, 2ms);
  if (!ok) ADD_FAILURE() << "timed out waiting for: " << what;
  co_return ok;
}

// `levels` arrays, each holding the next, around one integer.
std::string nested(int levels) {
  std::string out;
  for (int i = 0; i < levels; ++i) out += "*1\r\n";
  return out + ":1\r\n";
}

// ---- the misbehaviours --------------------------------------------------------------------------

// One way of answering `SET key value NX PX ttl` wrongly, and what must come of it.
struct bad_reply {
  std::string name;
  reply_action answer;  // the fake server's answer to SET
  // On a single connection: what the request completes with. Success for replies that are valid
  // RESP but of a type the lock client cannot use (the connection does not judge types).
  error_code request_error;
  // In a lock client: what the fake master's entry of `lock.masters()` says.
  master_status status;
  error_code node_error;    // master_result::error
  std::string server_text;  // master_result::server_text, and the response's text on a connection
  // Whether the stream can no longer be trusted, so that the connection must reconnect; and what
  // `connection_status::last_error` then says.
  bool reconnects = false;
  error_code broken_by;
  // Replies the connection reads and drops (the answer came after the request's deadline).
  std::uint64_t dropped = 0;
};

void PrintTo(const bad_reply& c, std::ostream* os) { *os << c.name; }

bad_reply stream_breaker(std::string name, reply_action answer, error e, error_code broken_by = {}) {
  const error_code ec = make_error_code(e);
  return {std::move(name), std::move(answer), ec, master_status::failed, ec, "", true, broken_by ? broken_by : ec, 0};
}

bad_reply wrong_type(std::string name, std::string bytes) {
  return {std::move(name),
          reply_action::send(std::move(bytes)),
          {},
          master_status::failed,
          make_error_code(error::unexpected_reply),
          "",
          false,
          {},
          0};
}

bad_reply error_reply(std::string name, std::string text) {
  const error_code ec = make_error_code(error::server_error);
  return {std::move(name),
          reply_action::send("-" + text + "\r\n"),
          ec,
          master_status::server_error,
          ec,
          text,
          false,
          {},
          0};
}

std::vector<bad_reply> bad_replies() {
  std::vector<bad_reply> v;
  // Bytes that are not RESP, or RESP the client refuses to read: the connection fails and resets.
  v.push_back(stream_breaker("garbage_text", reply_action::send("hello\r\n"), error::protocol_error));
  v.push_back(stream_breaker("garbage_binary", reply_action::send(std::string("\x00\xff", 2)), error::protocol_error));
  v.push_back(stream_breaker("bad_integer", reply_action::send(":12x\r\n"), error::protocol_error));
  v.push_back(stream_breaker("negative_bulk_length", reply_action::send("$-7\r\n"), error::protocol_error));
  v.push_back(stream_breaker("huge_bulk_length", reply_action::send("$99999999999\r\n"), error::reply_too_large));
  v.push_back(stream_breaker("huge_array_count", reply_action::send("*99999999999\r\n"), error::reply_too_large));
  v.push_back(stream_breaker("huge_map_count", reply_action::send("%99999999\r\n"), error::reply_too_large));
  v.push_back(stream_breaker("overlong_line", reply_action::send("+" + std::string(100 * 1024, 'x') + "\r\n"),
                             error::reply_too_large));
  v.push_back(stream_breaker("deep_nesting", reply_action::send(nested(100)), error::nesting_too_deep));
  // The node hangs up mid-reply, or without replying: the outcome of the SET is unknown.
  v.push_back(stream_breaker("truncated_then_close", reply_action::send_and_close("$40\r\nabc"), error::connection_lost,
                             asio::error::eof));
  v.push_back(
      stream_breaker("close_without_reply", reply_action::send_and_close(), error::connection_lost, asio::error::eof));
  // Two replies to one request: the first answers it, the second belongs to nobody, so the
  // stream cannot be trusted any more.
  v.push_back({"unsolicited_extra_reply",
               reply_action::send("+OK\r\n+OK\r\n"),
               {},
               master_status::granted,
               {},
               "",
               true,
               make_error_code(error::protocol_error),
               0});
  // A RESP3 push message before the reply is out-of-band data, not the reply: skipped.
  v.push_back({"push_before_reply",
               reply_action::send(">2\r\n$7\r\nmessage\r\n$2\r\nhi\r\n+OK\r\n"),
               {},
               master_status::granted,
               {},
               "",
               false,
               {},
               0});
  // Valid RESP of a type SET never answers with: a failed master, the stream still in step.
  v.push_back(wrong_type("integer", ":42\r\n"));
  v.push_back(wrong_type("array", "*1\r\n+OK\r\n"));
  v.push_back(wrong_type("map", "%1\r\n+OK\r\n+OK\r\n"));
  v.push_back(wrong_type("boolean", "#t\r\n"));
  v.push_back(wrong_type("blob_string_ok", "$2\r\nOK\r\n"));
  // Error replies: the command did not run; the node's own words reach the caller.
  v.push_back(error_reply("wrongtype", "WRONGTYPE Operation against a key holding the wrong kind of value"));
  v.push_back(error_reply("noauth_mid_session", "NOAUTH Authentication required."));
  v.push_back(error_reply("readonly", "READONLY You can't write against a read only replica."));
  v.push_back(error_reply("loading", "LOADING Redis is loading the dataset in memory"));
  v.push_back(
      error_reply("busy", "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."));
  v.push_back(error_reply("oom", "OOM command not allowed when used memory > 'maxmemory'."));
  {
    auto blob = error_reply("blob_error", "SYNTAX invalid syntax");
    blob.answer = reply_action::send("!21\r\nSYNTAX invalid syntax\r\n");
    v.push_back(std::move(blob));
  }
  // An answer after the deadline: the request times out, the late reply is read and dropped, and
  // the socket stays open. (In a lock client the quorum decides before that master's deadline.)
  v.push_back({"late_reply",
               reply_action::send("+OK\r\n", 600ms),
               make_error_code(error::master_timeout),
               master_status::pending,
               {},
               "",
               false,
               {},
               1});
  return v;
}

std::string case_name(const ::testing::TestParamInfo<bad_reply>& info) { return info.param.name; }

// ---- one connection ------------------------------------------------------------------------------

struct bad_connection_test : ::testing::TestWithParam<bad_reply> {
  fake_server fake;
};

TEST_P(bad_connection_test, request_gets_a_precise_error_and_the_next_request_is_answered) {
  const bad_reply& c = GetParam();
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        connection conn{ioc.get_executor(), node_config(fake.host(), fake.port())};
        conn.async_run(asio::detached);
        co_await eventually([&] { return conn.status().state == connection_state::up; }, "connected");

        fake.set_responder(on("SET", c.answer));
        auto [ec, r] = co_await conn.async_exec(make("SET", "res", "token", "NX", "PX", 10000), 200ms, use_tuple);
        EXPECT_EQ(ec, c.request_error) << ec.message();
        if (ec == error::server_error) {
          EXPECT_EQ(r.size(), 1u);
          EXPECT_TRUE(!r.empty() && r.front().value == c.server_text) << (r.empty() ? "" : r.front().value);
        } else if (!ec) {
          EXPECT_FALSE(r.empty());  // the reply of the wrong type is handed over as it is
        }

        // The node behaves again. A broken stream is replaced by a new connection; a stream in
        // step keeps its socket (a late reply is dropped first).
        fake.set_responder({});
        const std::uint64_t want_connects = c.reconnects ? 2 : 1;
        co_await eventually(
            [&] {
              const auto s = conn.status();
              return s.state == connection_state::up && s.connects == want_connects && s.dropped_replies == c.dropped;
            },
            "the connection to be up again");
        if (c.reconnects) {
          EXPECT_EQ(conn.status().last_error, c.broken_by) << conn.status().last_error.message();
        }

        auto [ec2, r2] = co_await conn.async_exec(make("SET", "res2", "token", "NX", "PX", 10000), 2s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_TRUE(r2.size() == 1 && r2.front().value == "OK");
        auto [ec3, r3] = co_await conn.async_exec(make("GET", "res2"), 2s, use_tuple);
        EXPECT_FALSE(ec3) << ec3.message();
        EXPECT_TRUE(r3.size() == 1 && r3.front().value == "token");
        const auto s = conn.status();
        EXPECT_EQ(s.connects, want_connects);
        EXPECT_EQ(s.dropped_replies, c.dropped);
        EXPECT_EQ(fake.connections_accepted(), want_connects);
        conn.close();
      },
      1, test_limit);
}

INSTANTIATE_TEST_SUITE_P(misbehaviours, bad_connection_test, ::testing::ValuesIn(bad_replies()), case_name);

// ---- one of five masters -------------------------------------------------------------------------

// Four real masters, each behind a proxy that delays it by a few milliseconds, and the fake as the
// fifth master. The delay makes the fake answer first, so that its (bad) answer is recorded in
// `lock.masters()` before the four good masters decide, instead of racing them.
struct five_masters : ::testing::Test {
  static constexpr std::size_t fake_index = 4;
  static constexpr auto real_latency = 20ms;

  redlock::test::master_set servers{4};
  std::vector<std::unique_ptr<redlock::test::fault_proxy>> proxies;
  fake_server fake;

  five_masters() {
    for (std::size_t i = 0; i < servers.size(); ++i) {
      proxies.push_back(std::make_unique<redlock::test::fault_proxy>(servers[i].host(), servers[i].port()));
      proxies.back()->set_latency(real_latency);
    }
  }

  redlock::client_config config() {
    redlock::client_config cfg;
    for (const auto& p : proxies) cfg.masters.push_back(node_config(p->host(), p->port()));
    cfg.masters.push_back(node_config(fake.host(), fake.port()));
    cfg.request_timeout = 200ms;
    cfg.guard.restarts = redlock::restart_detection::off;  // fresh masters (see configs.hpp)
    return cfg;
  }

  // How many real masters hold `key` with `token`.
  std::size_t real_holders(const std::string& key, const std::string& token) {
    std::size_t n = 0;
    const std::string want = "$" + std::to_string(token.size()) + "\r\n" + token + "\r\n";
    for (std::size_t i = 0; i < servers.size(); ++i) n += servers[i].command({"GET", key}) == want;
    return n;
  }

  static asio::awaitable<void> wait_connected(redlock::client& c) {
    co_await eventually(
        [&] {
          for (const auto& s : c.masters())
            if (s.state != connection_state::up) return false;
          return true;
        },
        "every master connected");
  }
};

struct bad_master_test : five_masters, ::testing::WithParamInterface<bad_reply> {};

TEST_P(bad_master_test, quorum_of_good_masters_decides_and_the_bad_master_recovers) {
  const bad_reply& c = GetParam();
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);

        fake.set_responder(on("SET", c.answer));
        auto [ec, l] = co_await locks.async_try_lock("bad:" + c.name, 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_TRUE(l.owns_lock());
        const auto nodes = l.masters();
        EXPECT_EQ(nodes.size(), 5u);
        if (nodes.size() == 5) {
          const auto& bad = nodes[fake_index];
          EXPECT_EQ(bad.status, c.status) << static_cast<int>(bad.status);
          EXPECT_EQ(bad.error, c.node_error) << bad.error.message();
          EXPECT_EQ(bad.server_text, c.server_text);
          for (std::size_t i = 0; i < fake_index; ++i) {
            EXPECT_TRUE(nodes[i].status == master_status::granted || nodes[i].status == master_status::pending) << i;
          }
        }
        // The lock rests on the four real masters (those still pending at the decision set it
        // shortly after).
        co_await eventually([&, &l = l] { return real_holders("bad:" + c.name, l.token()) == 4; }, "four real holders");

        // The fake behaves again: once its connection is back in step, it grants like the others.
        fake.set_responder({});
        const std::uint64_t want_connects = c.reconnects ? 2 : 1;
        co_await eventually(
            [&] {
              const auto s = locks.masters().at(fake_index);
              return s.state == connection_state::up && s.connects == want_connects && s.dropped_replies == c.dropped;
            },
            "the fake master's connection to be up again");
        if (c.reconnects) {
          EXPECT_EQ(locks.masters().at(fake_index).last_error, c.broken_by);
        }

        auto [ec2, l2] = co_await locks.async_try_lock("good:" + c.name, 10s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(l2.masters().at(fake_index).status, master_status::granted);
        EXPECT_EQ(fake.value("good:" + c.name), l2.token());

        auto [uec, held] = co_await l.async_unlock(use_tuple);
        EXPECT_FALSE(uec) << uec.message();
        auto [uec2, held2] = co_await l2.async_unlock(use_tuple);
        EXPECT_FALSE(uec2) << uec2.message();
        EXPECT_GE(held2, 3u);
        co_await eventually([&] { return !fake.value("good:" + c.name); }, "released on the fake master");
        EXPECT_EQ(locks.masters().at(fake_index).connects, want_connects);
      },
      1, test_limit);
}

INSTANTIATE_TEST_SUITE_P(misbehaviours, bad_master_test, ::testing::ValuesIn(bad_replies()), case_name);

// ---- misbehaviour during the handshake ---------------------------------------------------------

// One way of refusing the handshake, and what the connection must say about it.
struct bad_handshake {
  std::string name;
  std::string command;  // the handshake command answered wrongly: HELLO or SELECT
  reply_action answer;
  error_code error;  // connection_status::last_error while the node refuses
  std::string text;  // the start of connection_status::last_error_text
};

void PrintTo(const bad_handshake& c, std::ostream* os) { *os << c.name; }

std::vector<bad_handshake> bad_handshakes() {
  const auto e = [](error x) { return make_error_code(x); };
  return {
      {"hello_noauth", "HELLO",
       reply_action::send(
           "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH "
           "<user> <pass> option can be used to authenticate the client and select the RESP protocol "
           "version at the same time\r\n"),
       e(error::auth_failed), "NOAUTH HELLO must be called"},
      {"hello_wrongpass", "HELLO",
       reply_action::send("-WRONGPASS invalid username-password pair or user is disabled.\r\n"), e(error::auth_failed),
       "WRONGPASS"},
      {"hello_other_error", "HELLO", reply_action::send("-ERR something went wrong\r\n"), e(error::handshake_failed),
       "ERR something went wrong"},
      {"hello_not_a_map", "HELLO", reply_action::send("+OK\r\n"), e(error::handshake_failed), ""},
      {"hello_garbage", "HELLO", reply_action::send("hello\r\n"), e(error::protocol_error), ""},
      {"hello_huge_map", "HELLO", reply_action::send("%99999999999\r\n"), e(error::reply_too_large), ""},
      {"hello_deep_nesting", "HELLO", reply_action::send(nested(100)), e(error::nesting_too_deep), ""},
      {"hello_closed", "HELLO", reply_action::send_and_close(), asio::error::eof, ""},
      {"hello_truncated_then_closed", "HELLO", reply_action::send_and_close("%3\r\n$6\r\nser"), asio::error::eof, ""},
      {"hello_silent", "HELLO", reply_action::silence(), e(error::connect_timeout), ""},
      {"select_out_of_range", "SELECT", reply_action::send("-ERR DB index is out of range\r\n"),
       e(error::handshake_failed), "ERR DB index is out of range"},
  };
}

std::string handshake_name(const ::testing::TestParamInfo<bad_handshake>& info) { return info.param.name; }

struct bad_handshake_test : ::testing::TestWithParam<bad_handshake> {
  fake_server fake;
};

TEST_P(bad_handshake_test, node_is_refused_with_a_clear_reason_until_it_behaves) {
  const bad_handshake& c = GetParam();
  fake.set_responder(on(c.command, c.answer));
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        auto cfg = node_config(fake.host(), fake.port());
        if (c.command == "SELECT") cfg.database = 1;
        connection conn{ioc.get_executor(), cfg};
        conn.async_run(asio::detached);
        co_await eventually([&] { return conn.status().last_error == c.error; }, "the handshake to be refused");
        const auto s = conn.status();
        EXPECT_EQ(s.last_error, c.error) << s.last_error.message();
        EXPECT_TRUE(starts_with(s.last_error_text, c.text)) << s.last_error_text;
        EXPECT_EQ(s.connects, 0u);
        // Nothing is sent to a node that refused the handshake: requests fail as not connected
        // (at once, or when the attempt under way fails), never with a stale or foreign reply.
        auto [ec, r] = co_await conn.async_exec(make("PING"), 2s, use_tuple);
        EXPECT_EQ(ec, error::not_connected) << ec.message();
        EXPECT_EQ(fake.commands_seen("PING"), 0u);

        fake.set_responder({});
        co_await eventually([&] { return conn.status().state == connection_state::up; }, "connected at last");
        EXPECT_EQ(conn.status().connects, 1u);
        auto [ec2, r2] = co_await conn.async_exec(make("PING"), 2s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_TRUE(r2.size() == 1 && r2.front().value == "PONG");
        conn.close();
      },
      1, test_limit);
}

INSTANTIATE_TEST_SUITE_P(misbehaviours, bad_handshake_test, ::testing::ValuesIn(bad_handshakes()), handshake_name);

// ---- single-connection cases outside the tables --------------------------------------------------

struct fake_node_test : ::testing::Test {
  fake_server fake;
};

TEST_F(fake_node_test, server_without_hello_gets_resp2_auth_and_setname) {
  // A Redis older than 6 does not know HELLO: the connection falls back to AUTH and CLIENT SETNAME.
  fake.set_responder(
      on("HELLO", reply_action::send("-ERR unknown command 'HELLO', with args beginning with: '3' \r\n")));
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        auto cfg = node_config(fake.host(), fake.port());
        cfg.password = "secret";
        cfg.client_name = "bad-server-test";
        connection conn{ioc.get_executor(), cfg};
        conn.async_run(asio::detached);
        co_await eventually([&] { return conn.status().state == connection_state::up; }, "connected");
        EXPECT_EQ(fake.commands_seen("HELLO"), 1u);
        EXPECT_EQ(fake.commands_seen("AUTH"), 1u);
        EXPECT_EQ(fake.commands_seen("CLIENT"), 1u);
        auto [ec, r] = co_await conn.async_exec(make("SET", "k", "v", "NX", "PX", 10000), 2s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(fake.value("k"), "v");
        conn.close();
      },
      1, test_limit);
}

TEST_F(fake_node_test, node_that_never_answers_times_out_and_a_new_connection_recovers) {
  // A node that swallows a request cannot be told from a slow one: the request times out and
  // the connection waits for the late reply. When the node drops the connection, the new one is
  // in step again.
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        connection conn{ioc.get_executor(), node_config(fake.host(), fake.port())};
        conn.async_run(asio::detached);
        co_await eventually([&] { return conn.status().state == connection_state::up; }, "connected");
        fake.set_responder(on("SET", reply_action::silence()));
        const auto start = clock_type::now();
        auto [ec, r] = co_await conn.async_exec(make("SET", "k", "v", "NX", "PX", 10000), 100ms, use_tuple);
        EXPECT_EQ(ec, error::master_timeout) << ec.message();
        EXPECT_GE(clock_type::now() - start, 100ms);
        fake.set_responder({});
        fake.close_connections();
        co_await eventually([&] { return conn.status().state == connection_state::up && conn.status().connects == 2; },
                            "reconnected");
        auto [ec2, r2] = co_await conn.async_exec(make("SET", "k", "v2", "NX", "PX", 10000), 2s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_TRUE(r2.size() == 1 && r2.front().value == "OK");
        EXPECT_EQ(fake.value("k"), "v2");  // the swallowed SET never ran
        conn.close();
      },
      1, test_limit);
}

TEST_F(fake_node_test, oversized_bulk_reply_against_lowered_limits_fails_the_connection_not_the_process) {
  // A reply really that large on the wire (not just declared): over the configured bulk limit the
  // parser stops at the header, so the bytes are never buffered.
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        auto cfg = node_config(fake.host(), fake.port());
        cfg.limits.max_bulk_length = 1024;
        connection conn{ioc.get_executor(), cfg};
        conn.async_run(asio::detached);
        co_await eventually([&] { return conn.status().state == connection_state::up; }, "connected");
        const std::string big(4 * 1024 * 1024, 'x');
        fake.set_responder(on("GET", reply_action::send("$" + std::to_string(big.size()) + "\r\n" + big + "\r\n")));
        auto [ec, r] = co_await conn.async_exec(make("GET", "big"), 2s, use_tuple);
        EXPECT_EQ(ec, error::reply_too_large) << ec.message();
        fake.set_responder({});
        co_await eventually([&] { return conn.status().state == connection_state::up && conn.status().connects == 2; },
                            "reconnected");
        auto [ec2, r2] = co_await conn.async_exec(make("ECHO", std::string(1024, 'y')), 2s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_TRUE(r2.size() == 1 && r2.front().value.size() == 1024);
        conn.close();
      },
      1, test_limit);
}

TEST_F(fake_node_test, error_reply_preceded_by_an_attribute_is_a_server_error) {
  // RESP3: an attribute (`|`) describes the reply that follows it and may precede any reply.
  fake.set_responder(on("GET", reply_action::send("|1\r\n+key-popularity\r\n:1\r\n-ERR boom\r\n")));
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        connection conn{ioc.get_executor(), node_config(fake.host(), fake.port())};
        conn.async_run(asio::detached);
        co_await eventually([&] { return conn.status().state == connection_state::up; }, "connected");
        auto [ec, r] = co_await conn.async_exec(make("GET", "k"), 2s, use_tuple);
        EXPECT_EQ(ec, error::server_error) << ec.message();
        auto [ec2, r2] = co_await conn.async_exec(make("PING"), 2s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(conn.status().connects, 1u);
        conn.close();
      },
      1, test_limit);
}

// ---- errors a real Redis produces itself ---------------------------------------------------------

struct real_error_test : five_masters {
  // Lets real master `i` answer as fast as the fake, so that its answer too is recorded before the
  // slower masters decide.
  void make_fast(std::size_t i) { proxies[i]->set_latency(0ms); }

  static bool server_error_starting(const redlock::master_result& n, std::string_view prefix) {
    return n.status == master_status::server_error && n.error == error::server_error &&
           starts_with(n.server_text, prefix);
  }
};

TEST_F(real_error_test, wrongtype_in_the_scripts_is_a_server_error_and_the_good_majority_decides) {
  make_fast(0);
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        auto [ec, l] = co_await locks.async_try_lock("wt", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        co_await eventually([&, &l = l] { return real_holders("wt", l.token()) == 4; }, "four real holders");
        // Someone turns the lock key into a list on master 0: its scripts fail with WRONGTYPE.
        servers[0].command({"DEL", "wt"});
        servers[0].command({"LPUSH", "wt", "x"});
        auto [eec] = co_await l.async_extend(20s, use_tuple);
        EXPECT_FALSE(eec) << eec.message();
        auto nodes = l.masters();
        EXPECT_TRUE(server_error_starting(nodes.at(0), "WRONGTYPE")) << nodes.at(0).server_text;
        EXPECT_EQ(nodes.at(fake_index).status, master_status::granted);
        auto [uec, held] = co_await l.async_unlock(use_tuple);
        EXPECT_FALSE(uec) << uec.message();
        nodes = l.masters();
        EXPECT_TRUE(server_error_starting(nodes.at(0), "WRONGTYPE")) << nodes.at(0).server_text;
        EXPECT_EQ(servers[0].command({"TYPE", "wt"}), "+list\r\n");  // someone else's key: untouched
        // Master 0 is repaired: the next lock is granted there, on the same connection.
        servers[0].command({"DEL", "wt"});
        auto [ec2, l2] = co_await locks.async_try_lock("wt", 10s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(l2.masters().at(0).status, master_status::granted);
        EXPECT_EQ(locks.masters().at(0).connects, 1u);
        co_await l2.async_unlock(use_tuple);
      },
      1, test_limit);
}

TEST_F(real_error_test, readonly_replica_is_a_server_error_until_it_is_a_master_again) {
  make_fast(1);
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        // Master 0 would wait 5 s for more replicas before its first diskless sync; none will come.
        servers[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
        servers[1].command({"REPLICAOF", servers[0].host(), std::to_string(servers[0].port())});
        co_await eventually(
            [&] {
              return servers[1].command({"INFO", "replication"}).find("master_link_status:up") != std::string::npos;
            },
            "the replica to be in sync");
        auto [ec, l] = co_await locks.async_try_lock("ro", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_TRUE(server_error_starting(l.masters().at(1), "READONLY")) << l.masters().at(1).server_text;
        EXPECT_EQ(l.masters().at(fake_index).status, master_status::granted);
        servers[1].command({"REPLICAOF", "NO", "ONE"});
        auto [ec2, l2] = co_await locks.async_try_lock("ro2", 10s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(l2.masters().at(1).status, master_status::granted);
        EXPECT_EQ(locks.masters().at(1).connects, 1u);
        co_await l.async_unlock(use_tuple);
        co_await l2.async_unlock(use_tuple);
      },
      1, test_limit);
}

TEST_F(real_error_test, oom_over_maxmemory_is_a_server_error_until_memory_is_freed) {
  make_fast(2);
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        servers[2].command({"CONFIG", "SET", "maxmemory", "1"});  // with the default noeviction policy
        auto [ec, l] = co_await locks.async_try_lock("oom", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_TRUE(server_error_starting(l.masters().at(2), "OOM")) << l.masters().at(2).server_text;
        servers[2].command({"CONFIG", "SET", "maxmemory", "0"});
        auto [ec2, l2] = co_await locks.async_try_lock("oom2", 10s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(l2.masters().at(2).status, master_status::granted);
        EXPECT_EQ(locks.masters().at(2).connects, 1u);
        co_await l.async_unlock(use_tuple);
        co_await l2.async_unlock(use_tuple);
      },
      1, test_limit);
}

TEST_F(real_error_test, busy_script_is_a_server_error_until_it_is_killed) {
  make_fast(3);
  servers[3].command({"CONFIG", "SET", "busy-reply-threshold", "10"});
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        // Another client's runaway script keeps master 3 busy.
        connection hog{ioc.get_executor(), node_config(servers[3].host(), servers[3].port())};
        hog.async_run(asio::detached);
        co_await eventually([&] { return hog.status().state == connection_state::up; }, "hog connected");
        bool hog_done = false;
        error_code hog_error;
        std::string hog_text;
        hog.async_exec(make("EVAL", "while true do end", 0), 20s, [&](error_code e, response r) {
          hog_error = e;
          if (!r.empty()) hog_text = r.front().value;
          hog_done = true;
        });
        co_await eventually([&] { return starts_with(servers[3].command({"PING"}), "-BUSY"); }, "master 3 busy");
        auto [ec, l] = co_await locks.async_try_lock("busy", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_TRUE(server_error_starting(l.masters().at(3), "BUSY")) << l.masters().at(3).server_text;
        servers[3].command({"SCRIPT", "KILL"});
        co_await eventually([&] { return hog_done; }, "the script to be killed");
        EXPECT_EQ(hog_error, error::server_error);
        EXPECT_NE(hog_text.find("killed"), std::string::npos) << hog_text;
        auto [ec2, l2] = co_await locks.async_try_lock("busy2", 10s, use_tuple);
        EXPECT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(l2.masters().at(3).status, master_status::granted);
        EXPECT_EQ(locks.masters().at(3).connects, 1u);
        co_await l.async_unlock(use_tuple);
        co_await l2.async_unlock(use_tuple);
        hog.close();
      },
      1, test_limit);
}

TEST_F(real_error_test, noscript_falls_back_to_eval_on_real_and_fake_masters) {
  make_fast(0);
  // The fake never has the script cached; the real masters lose theirs to SCRIPT FLUSH.
  fake.set_responder(on("EVALSHA", reply_action::send("-NOSCRIPT No matching script. Please use EVAL.\r\n")));
  const auto flush_scripts = [&] {
    for (std::size_t i = 0; i < servers.size(); ++i) servers[i].command({"SCRIPT", "FLUSH"});
  };
  const auto pttl = [&](std::size_t i, const std::string& key) {
    return std::stol(servers[i].command({"PTTL", key}).substr(1));
  };
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        auto [ec, l] = co_await locks.async_try_lock("ns", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        co_await eventually([&, &l = l] { return real_holders("ns", l.token()) == 4; }, "four real holders");

        flush_scripts();
        auto [eec] = co_await l.async_extend(30s, use_tuple);
        EXPECT_FALSE(eec) << eec.message();
        EXPECT_EQ(l.masters().at(fake_index).status, master_status::granted);
        EXPECT_EQ(l.masters().at(0).status, master_status::granted);
        EXPECT_EQ(fake.commands_seen("EVALSHA"), 1u);
        EXPECT_EQ(fake.commands_seen("EVAL"), 1u);
        EXPECT_GT(fake.ttl("ns").value_or(0ms), 20s);
        EXPECT_GT(pttl(0, "ns"), 20000);
        const auto stats = servers[0].command({"INFO", "commandstats"});
        EXPECT_NE(stats.find("cmdstat_eval:calls=1,"), std::string::npos) << stats;

        flush_scripts();
        auto [uec, held] = co_await l.async_unlock(use_tuple);
        EXPECT_FALSE(uec) << uec.message();
        EXPECT_GE(held, 3u);
        EXPECT_EQ(l.masters().at(fake_index).status, master_status::granted);
        EXPECT_EQ(l.masters().at(0).status, master_status::granted);
        EXPECT_EQ(fake.commands_seen("EVAL"), 2u);
        EXPECT_FALSE(fake.value("ns"));
        co_await eventually([&, &l = l] { return real_holders("ns", l.token()) == 0; }, "released on the real masters");
      },
      1, test_limit);
}

TEST_F(real_error_test, noscript_for_eval_too_is_a_server_error_not_a_retry_loop) {
  // A node that refuses the script both ways: one fallback, then the error is the answer.
  const std::string noscript = "-NOSCRIPT No matching script. Please use EVAL.\r\n";
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        auto [ec, l] = co_await locks.async_try_lock("ns2", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        fake.set_responder([noscript](const fake_server::command& c) -> std::optional<reply_action> {
          if (c.front() == "EVALSHA" || c.front() == "EVAL") return reply_action::send(noscript);
          return std::nullopt;
        });
        auto [eec] = co_await l.async_extend(20s, use_tuple);
        EXPECT_FALSE(eec) << eec.message();
        EXPECT_TRUE(server_error_starting(l.masters().at(fake_index), "NOSCRIPT"))
            << l.masters().at(fake_index).server_text;
        EXPECT_EQ(fake.commands_seen("EVALSHA"), 1u);
        EXPECT_EQ(fake.commands_seen("EVAL"), 1u);
        fake.set_responder({});
        auto [uec, held] = co_await l.async_unlock(use_tuple);
        EXPECT_FALSE(uec) << uec.message();
        EXPECT_EQ(l.masters().at(fake_index).status, master_status::granted);
        EXPECT_FALSE(fake.value("ns2"));
      },
      1, test_limit);
}

// ---- a master whose script digests are not ours ---------------------------------------------------

// The fake answers `SCRIPT LOAD` of the extend script with another digest: a master that does not
// compute our scripts' SHA-1 (a proxy rewriting them, say) cannot be trusted to run what we send.
// The client stops using it for good (`script_mismatch`, no reconnect) and locks on the others;
// every later result names the cause.
TEST_F(five_masters, a_master_whose_script_digest_differs_is_not_used) {
  const std::string wrong = "0123456789012345678901234567890123456789";
  fake.set_responder([wrong](const fake_server::command& c) -> std::optional<reply_action> {
    if (c.size() == 3 && c[0] == "SCRIPT" && c[1] == "LOAD" && c[2] == redlock::detail::extend_script.body)
      return reply_action::send("$40\r\n" + wrong + "\r\n");
    return std::nullopt;
  });
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await eventually([&] { return locks.masters().at(fake_index).state == connection_state::closed; },
                            "the fake master refused");
        auto [ec, l] = co_await locks.async_try_lock("digest", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        const auto n = l.masters().at(fake_index);
        EXPECT_EQ(n.status, master_status::unreachable);
        EXPECT_EQ(n.error, error::script_mismatch) << n.error.message();
        EXPECT_FALSE(fake.value("digest"));
        co_await sleep_for(300ms);  // several reconnect delays (10-100 ms): none is attempted
        EXPECT_EQ(fake.connections_accepted(), 1u);
        EXPECT_EQ(fake.commands_seen("SET"), 0u);
        // A report names the cause, as for any master that cannot be used.
        const auto report = locks.report(l);
        EXPECT_EQ(report.failing.size(), 1u);
        for (const auto& m : report.failing) EXPECT_EQ(m.error, error::script_mismatch) << m.address;
        co_await l.async_unlock(use_tuple);
      },
      1, test_limit);
}

// A vote sent again with EVAL after its EVALSHA met NOSCRIPT is judged by the TIME behind that
// EVAL: here the fake master's clock reads 3 s behind from the EVAL on (a lone backward reading),
// so its yes does not count. Catches: an EVAL fallback without TIME, or whose TIME is not read.
TEST_F(five_masters, a_vote_sent_again_by_eval_is_judged_by_the_time_behind_it) {
  struct clock_state {
    std::atomic<bool> refuse_sha{false}, behind{false};
  };
  const auto state = std::make_shared<clock_state>();
  fake.set_responder([state](const fake_server::command& c) -> std::optional<reply_action> {
    if (c.empty()) return std::nullopt;
    if (c[0] == "TIME") {
      const auto now = std::chrono::system_clock::now() - (state->behind ? 3s : 0s);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
      const auto secs = std::to_string(us / 1'000'000), micros = std::to_string(us % 1'000'000);
      return reply_action::send("*2\r\n$" + std::to_string(secs.size()) + "\r\n" + secs + "\r\n$" +
                                std::to_string(micros.size()) + "\r\n" + micros + "\r\n");
    }
    if (!state->refuse_sha) return std::nullopt;
    if (c[0] == "EVALSHA") return reply_action::send("-NOSCRIPT No matching script. Please use EVAL.\r\n");
    if (c[0] == "EVAL") state->behind = true;  // read by the TIME queued right behind it
    return std::nullopt;
  });
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        auto cfg = config();
        cfg.guard.clock_probe_interval = 0ms;  // only the votes sample the clocks
        redlock::client locks{ioc.get_executor(), cfg};
        co_await wait_connected(locks);
        auto [ec, l] = co_await locks.async_try_lock("eval-time", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_TRUE(fake.value("eval-time"));
        const auto before = locks.stats().votes_quarantined;
        state->refuse_sha = true;
        auto [eec] = co_await l.async_extend(30s, use_tuple);
        EXPECT_FALSE(eec) << eec.message();  // the four real masters
        co_await eventually([&] { return locks.stats().votes_quarantined > before; }, "the fake's yes refused");
        EXPECT_EQ(locks.stats().votes_quarantined, before + 1);
        EXPECT_EQ(fake.commands_seen("EVAL"), 1u);
        state->refuse_sha = false;
        co_await l.async_unlock(use_tuple);
      },
      1, test_limit);
}

// ---- RESP3 attributes before a lock reply --------------------------------------------------------

TEST_F(five_masters, set_reply_preceded_by_an_attribute_still_grants) {
  // RESP3 lets a server put an attribute before any reply; a client that does not use it must
  // look past it. `+OK` with an attribute in front is a grant.
  fake.set_responder(on("SET", reply_action::send("|1\r\n+key-popularity\r\n:1\r\n+OK\r\n")));
  run_test(
      [&](asio::io_context& ioc) -> asio::awaitable<void> {
        redlock::client locks{ioc.get_executor(), config()};
        co_await wait_connected(locks);
        auto [ec, l] = co_await locks.async_try_lock("attr", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        const auto n = l.masters().at(fake_index);
        EXPECT_EQ(n.status, master_status::granted) << static_cast<int>(n.status) << " " << n.error.message();
        co_await l.async_unlock(use_tuple);
      },
      1, test_limit);
}

}  // namespace
