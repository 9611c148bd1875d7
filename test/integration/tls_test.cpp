// SPDX-License-Identifier: BSL-1.0
// TLS to the masters (docs/api.md, "TLS"): real redis-server processes with both a plain
// port and a --tls-port, and certificates this test makes at run time with the `openssl` command
// line tool (a private CA, a server certificate for 127.0.0.1 and localhost, one for another name,
// an expired one, a client certificate, and a second CA that signed none of them). Each test names
// the wrong implementation it would catch.

#include <redlock/client.hpp>
#include <redlock/config.hpp>
#include <redlock/connection.hpp>
#include <redlock_test/coro.hpp>
#include <redlock_test/master_set.hpp>
#include <redlock_test/raw_reply.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

// Heap allocations by operator new while `counting_allocations` is set (one test below counts
// them); replacing the global operator new is for the whole binary, which only pays a relaxed load.
// Not under the sanitizers: their runtimes allocate with their own operator new what ours would
// free (GCC says so with __SANITIZE_*__, Clang with __has_feature).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REDLOCK_TLS_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(REDLOCK_TLS_TEST_SANITIZED)
#define REDLOCK_TLS_TEST_COUNTS_ALLOCATIONS 0
#else
#define REDLOCK_TLS_TEST_COUNTS_ALLOCATIONS 1
#endif
namespace {
std::atomic<unsigned long> allocations_counted{0};
std::atomic<bool> counting_allocations{false};
}  // namespace

#if REDLOCK_TLS_TEST_COUNTS_ALLOCATIONS
void* operator new(std::size_t size) {
  if (counting_allocations.load(std::memory_order_relaxed)) allocations_counted.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using boost::system::error_code;
using redlock::connection_state;
using redlock::error;
using redlock::test::bulk_of;
using redlock::test::run_test;
using redlock::test::sleep_for;
using redlock::test::until;
using redlock::test::use_tuple;

constexpr auto limit = std::chrono::seconds{30};  // per test body

// The certificates, made once for the whole suite.
struct certificates {
  fs::path dir;
  std::string ca, other_ca, server_crt, server_key, wrong_name_crt, expired_crt, client_crt, client_key, garbage;
};

const certificates* certs = nullptr;

// Runs `script` with sh in `dir`; the output goes to dir/openssl.log.
bool shell(const fs::path& dir, const std::string& script) {
  const auto cmd = fmt::format("cd '{}' && ( set -e; {} ) > openssl.log 2>&1", dir.string(), script);
  return std::system(cmd.c_str()) == 0;
}

class tls_environment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto dir = fs::temp_directory_path() / fmt::format("redlock-tls-{}", ::getpid());
    fs::create_directories(dir);
    // rsa:2048 keys: what OpenSSL's default security level accepts, quick enough to make.
    const std::string script =
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj '/CN=redlock test CA';"
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other_ca.crt -days 2 "
        "  -subj '/CN=redlock other CA';"
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext;"
        "printf 'subjectAltName=DNS:wrong.example\\n' > wrong.ext;"
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj '/CN=localhost';"
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 "
        "  -extfile server.ext;"
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out wrong.crt -days 2 "
        "  -extfile wrong.ext;"
        // -days -1: not after = one day before not before (now), so the certificate has expired.
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out expired.crt -days -1 "
        "  -extfile server.ext;"
        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj '/CN=redlock client';"
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2;"
        "printf 'not a pem file\\n' > garbage.pem";
    if (!shell(dir, script)) {
      std::ifstream log{dir / "openssl.log"};
      std::string text{std::istreambuf_iterator<char>{log}, {}};
      FAIL() << "making the test certificates failed (is the openssl tool installed?):\n" << text;
    }
    auto* c = new certificates{};
    c->dir = dir;
    c->ca = (dir / "ca.crt").string();
    c->other_ca = (dir / "other_ca.crt").string();
    c->server_crt = (dir / "server.crt").string();
    c->server_key = (dir / "server.key").string();
    c->wrong_name_crt = (dir / "wrong.crt").string();
    c->expired_crt = (dir / "expired.crt").string();
    c->client_crt = (dir / "client.crt").string();
    c->client_key = (dir / "client.key").string();
    c->garbage = (dir / "garbage.pem").string();
    certs = c;
  }
  void TearDown() override {
    if (!certs) return;
    std::error_code ignored;
    fs::remove_all(certs->dir, ignored);
    delete certs;
    certs = nullptr;
  }
};

const auto* const environment = ::testing::AddGlobalTestEnvironment(new tls_environment);

struct server_options {
  std::string cert;  // empty: the good server certificate
  bool require_client_cert = false;
};

// One redis-server with a plain port and a TLS port (the test bed holds both). A set of one
// per master, so that each can have its own certificate.
struct tls_master {
  std::uint16_t tls_port = 0;
  std::unique_ptr<redlock::test::master_set> servers;

  explicit tls_master(const server_options& o = {}) {
    redlock::test::redis_options opts;
    opts.tls = redlock::test::tls_options{};
    opts.tls->cert_file = o.cert.empty() ? certs->server_crt : o.cert;
    opts.tls->key_file = certs->server_key;
    opts.tls->ca_file = certs->ca;
    opts.tls->require_client_cert = o.require_client_cert;
    servers = std::make_unique<redlock::test::master_set>(1, opts);
    tls_port = node().tls_port();
  }
  redlock::test::redis_node& node() { return (*servers)[0]; }
  std::uint16_t plain_port() { return node().port(); }
};

// A master's configuration for TLS to `m`, trusting the test CA.
redlock::connection_config tls_config(tls_master& m) {
  redlock::connection_config c;
  c.host = "127.0.0.1";
  c.port = m.tls_port;
  c.tls.enabled = true;
  c.tls.ca_file = certs->ca;
  // Not the tests' usual 300 ms: a TLS handshake on a loaded machine (or under a sanitizer) costs
  // more, and the plain-port detection happens at half of it.
  c.connect_timeout = 2000ms;
  c.reconnect = {10ms, 100ms, 0.5};
  return c;
}

redlock::client_config client_config_for(std::vector<tls_master>& masters) {
  redlock::client_config cfg;
  for (auto& m : masters) cfg.masters.push_back(tls_config(m));
  cfg.request_timeout = 500ms;
  cfg.retry.max_attempts = 3;
  cfg.guard.restarts = redlock::restart_detection::off;  // fresh masters (see configs.hpp)
  return cfg;
}

std::vector<tls_master> start_masters(std::size_t n, const server_options& o = {}) {
  std::vector<tls_master> v;
  v.reserve(n);
  for (std::size_t i = 0; i < n; ++i) v.emplace_back(o);
  return v;
}

std::optional<std::string> get(tls_master& m, const std::string& key) {
  return bulk_of(m.node().command({"GET", key}));
}

// Waits until every one of `masters` holds `key` with `token`: a lock completes as soon as a
// quorum granted it, so the last master's answer may still be on its way.
asio::awaitable<bool> held_everywhere(std::vector<tls_master>& masters, const std::string& key,
                                      const std::string& token) {
  co_return co_await until([&] {
    for (auto& m : masters)
      if (get(m, key) != token) return false;
    return true;
  });
}

// Runs one connection with `cfg` until its first attempt failed or it came up; returns its status.
asio::awaitable<redlock::connection_status> first_outcome(asio::io_context& io, redlock::connection_config cfg) {
  redlock::connection c{io.get_executor(), std::move(cfg)};
  auto ran = std::make_shared<bool>(false);
  c.async_run([ran](boost::system::error_code) { *ran = true; });
  co_await until([&] { return c.status().state == connection_state::up || c.status().last_error; }, 10s);
  auto s = c.status();
  c.close();
  if (!co_await until([&] { return *ran; })) ADD_FAILURE() << "the connection's run did not end after close";
  co_return s;
}

// Allocations counted over `cycles` lock+unlock cycles of a client of `cfg`, after a warm-up.
asio::awaitable<unsigned long> allocations_per_cycles(asio::io_context& io, redlock::client_config cfg, int cycles) {
  redlock::client c{io.get_executor(), std::move(cfg)};
  for (int i = 0; i < 20; ++i) {
    auto [ec, l] = co_await c.async_lock("alloc-count", 10s, use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    if (!ec) co_await l.async_unlock(use_tuple);
  }
  allocations_counted = 0;
  counting_allocations = true;
  for (int i = 0; i < cycles; ++i) {
    auto [ec, l] = co_await c.async_lock("alloc-count", 10s, use_tuple);
    if (!ec) co_await l.async_unlock(use_tuple);
  }
  counting_allocations = false;
  co_return allocations_counted.load();
}

// ---- the lock suite's happy path over TLS ------------------------------------------------------

// Lock, extend and unlock on three TLS masters: the key holds our token on every master (read back
// over the plain port, so the TLS connection reached the same server) and is gone after unlock.
// Catches: TLS set up but bytes still written to the raw socket (the server would drop the
// connection: no quorum), a handshake that never completes, the name or CA check refusing a good
// certificate.
TEST(tls, lock_extend_unlock_on_three_masters) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client a{io.get_executor(), client_config_for(masters)};
        auto [ec, l] = co_await a.async_lock("tls-job", 10s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        if (ec) co_return;
        const bool everywhere = co_await held_everywhere(masters, "tls-job", l.token());
        EXPECT_TRUE(everywhere);
        auto [ee] = co_await l.async_extend(20s, use_tuple);
        EXPECT_FALSE(ee) << ee.message();
        EXPECT_GT(redlock::test::integer_of(masters[0].node().command({"PTTL", "tls-job"})).value_or(0), 10000);
        auto [eu, held] = co_await l.async_unlock(use_tuple);
        EXPECT_FALSE(eu) << eu.message();
        EXPECT_GE(held, 2u);  // a quorum released it; the third answer may come after
        const bool released = co_await until([&] {
          for (auto& m : masters)
            if (get(m, "tls-job")) return false;
          return true;
        });
        EXPECT_TRUE(released);
        for (const auto& s : a.masters()) {
          EXPECT_EQ(s.state, connection_state::up);
          EXPECT_EQ(s.connects, 1u);
        }
      },
      1, limit);
}

// A second client is excluded while the first holds the lock (both over TLS), and many requests
// pipelined on the TLS connections from two threads all complete. Catches: TLS reads and writes
// racing on OpenSSL's state from two threads (corrupt records, a dropped connection).
TEST(tls, exclusion_and_concurrent_requests_on_two_threads) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client a{io.get_executor(), client_config_for(masters)};
        redlock::client b{io.get_executor(), client_config_for(masters)};
        auto [ea, la] = co_await a.async_lock("shared", 10s, use_tuple);
        EXPECT_FALSE(ea) << ea.message();
        auto [eb, lb] = co_await b.async_try_lock("shared", 10s, use_tuple);
        EXPECT_EQ(eb, error::not_acquired) << eb.message();
        co_await la.async_unlock(use_tuple);
        // 200 lock/unlock cycles on distinct names, 20 at a time.
        std::atomic<int> granted{0};
        auto worker = [&](int w) -> asio::awaitable<void> {
          for (int i = 0; i < 10; ++i) {
            auto [e, l] = co_await a.async_lock(fmt::format("r{}-{}", w, i), 10s, use_tuple);
            if (!e) ++granted;
            co_await l.async_unlock(use_tuple);
          }
        };
        std::atomic<int> done{0};
        for (int w = 0; w < 20; ++w) {
          asio::co_spawn(io, worker(w), [&](std::exception_ptr) { ++done; });
        }
        const bool ok1 = co_await until([&] { return done.load() == 20; }, 20s);
        EXPECT_TRUE(ok1);
        EXPECT_EQ(granted.load(), 200);
        for (const auto& s : a.masters()) EXPECT_EQ(s.connects, 1u);  // no connection was lost
      },
      2, limit);
}

// keep_alive extends over TLS: a 1 s lock is still held, and still on the masters, after 2.5 s.
// Catches: extension requests that never reach the masters through the TLS stream.
TEST(tls, keep_alive_extends) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client a{io.get_executor(), client_config_for(masters)};
        auto [ec, l] = co_await a.async_lock("kept", 1s, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        if (ec) co_return;
        l.keep_alive();
        co_await sleep_for(2500ms);
        EXPECT_TRUE(l.owns_lock());
        EXPECT_GE(l.extensions(), 2u);
        const bool everywhere = co_await held_everywhere(masters, "kept", l.token());
        EXPECT_TRUE(everywhere);
        co_await l.async_unlock(use_tuple);
      },
      1, limit);
}

// A fenced lock over TLS: fencing tokens strictly increase. Catches: scripts (EVALSHA, with their
// NOSCRIPT fallback) that do not make it through the TLS layer.
TEST(tls, fenced_lock_tokens_increase) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client a{io.get_executor(), client_config_for(masters)};
        redlock::lock_options o;
        o.fence = true;
        auto [e1, l1] = co_await a.async_lock("fenced", 10s, o, use_tuple);
        EXPECT_FALSE(e1) << e1.message();
        const auto f1 = l1.fence();
        co_await l1.async_unlock(use_tuple);
        auto [e2, l2] = co_await a.async_lock("fenced", 10s, o, use_tuple);
        EXPECT_FALSE(e2) << e2.message();
        EXPECT_GT(f1, 0u);
        EXPECT_GT(l2.fence(), f1);
        co_await l2.async_unlock(use_tuple);
      },
      1, limit);
}

// Readers share, a writer is excluded while they hold, and a multi-resource lock takes every key,
// all over TLS. Catches: kind-specific scripts or replies (sorted sets, arrays) mangled by the
// TLS layer, e.g. a reply split across records and read short.
TEST(tls, read_write_and_multi_resource_locks) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto cfg = client_config_for(masters);
        cfg.retry.max_attempts = 1;
        redlock::client a{io.get_executor(), cfg};
        redlock::lock_options reader;
        reader.kind = redlock::lock_kind::read;
        redlock::lock_options writer;
        writer.kind = redlock::lock_kind::write;
        auto [e1, r1] = co_await a.async_lock("rw", 10s, reader, use_tuple);
        EXPECT_FALSE(e1) << e1.message();
        auto [e2, r2] = co_await a.async_lock("rw", 10s, reader, use_tuple);
        EXPECT_FALSE(e2) << e2.message();
        auto [e3, w] = co_await a.async_try_lock("rw", 10s, writer, use_tuple);
        EXPECT_EQ(e3, error::not_acquired) << e3.message();
        co_await r1.async_unlock(use_tuple);
        co_await r2.async_unlock(use_tuple);
        auto [e4, w2] = co_await a.async_lock("rw", 10s, writer, use_tuple);
        EXPECT_FALSE(e4) << e4.message();
        co_await w2.async_unlock(use_tuple);

        const std::vector<std::string> names{"m1", "m2", "m3"};
        auto [e5, all] = co_await a.async_lock_all(names, 10s, use_tuple);
        EXPECT_FALSE(e5) << e5.message();
        for (const auto& n : names) {
          const bool everywhere = co_await held_everywhere(masters, n, all.token());
          EXPECT_TRUE(everywhere) << n;
        }
        co_await all.async_unlock(use_tuple);
      },
      1, limit);
}

// ---- mutual TLS -----------------------------------------------------------------------------

// A master that requires client certificates serves a client that has one, and refuses (with
// tls_refused in the master's status) one that has none. Catches: the client certificate not
// sent, a refusal reported as a plain connection loss.
TEST(tls, mutual_tls_accepted_with_client_certificate_refused_without) {
  auto masters = start_masters(3, {.cert = {}, .require_client_cert = true});
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto with_cert = client_config_for(masters);
        for (auto& m : with_cert.masters) {
          m.tls.cert_file = certs->client_crt;
          m.tls.key_file = certs->client_key;
        }
        {
          redlock::client a{io.get_executor(), with_cert};
          auto [ec, l] = co_await a.async_lock("mtls", 10s, use_tuple);
          EXPECT_FALSE(ec) << ec.message();
          const bool everywhere = co_await held_everywhere(masters, "mtls", l.token());
          EXPECT_TRUE(everywhere);
          co_await l.async_unlock(use_tuple);
        }
        auto without = client_config_for(masters);
        without.retry.max_attempts = 1;
        redlock::client b{io.get_executor(), without};
        const bool ok2 = co_await until([&] {
          for (const auto& s : b.masters())
            if (!s.last_error) return false;
          return true;
        });
        EXPECT_TRUE(ok2);
        for (const auto& s : b.masters()) {
          EXPECT_EQ(s.last_error, error::tls_refused) << s.last_error.message() << " / " << s.last_error_text;
          EXPECT_TRUE(s.last_error_text.find("certificate required") != std::string::npos ||
                      s.last_error_text.find("client certificate") != std::string::npos)
              << s.last_error_text;
        }
        auto [eb, lb] = co_await b.async_try_lock("mtls", 10s, use_tuple);
        EXPECT_TRUE(eb);
        EXPECT_FALSE(lb.owns_lock());
      },
      1, limit);
}

// ---- distinct errors ------------------------------------------------------------------------

// TLS spoken to the plain port: the master answers in RESP, reported as tls_not_offered (not as a
// connect timeout). Catches: the handshake waiting out the timeout on a plain Redis.
TEST(tls, tls_to_a_plain_port_is_tls_not_offered) {
  tls_master m;
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto cfg = tls_config(m);
        cfg.port = m.plain_port();
        const auto s = co_await first_outcome(io, cfg);
        EXPECT_EQ(s.last_error, error::tls_not_offered) << s.last_error.message() << " / " << s.last_error_text;
        EXPECT_NE(s.state, connection_state::up);
      },
      1, limit);
}

// Plain RESP spoken to the TLS port: reported as tls_expected. Catches: the reset reported as a
// bare connection_reset, which says nothing about the cause.
TEST(tls, plain_to_a_tls_port_is_tls_expected) {
  tls_master m;
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::connection_config cfg;
        cfg.port = m.tls_port;
        cfg.connect_timeout = 2000ms;
        const auto s = co_await first_outcome(io, cfg);
        EXPECT_EQ(s.last_error, error::tls_expected) << s.last_error.message();
        EXPECT_NE(s.state, connection_state::up);
      },
      1, limit);
}

// A CA that did not sign the master's certificate, and the system store (which knows nothing of
// the test CA): both fail closed with tls_certificate_untrusted. Catches: verification off by
// default, a failed verification ignored.
TEST(tls, untrusted_certificate_fails_closed) {
  tls_master m;
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto other = tls_config(m);
        other.tls.ca_file = certs->other_ca;
        auto s = co_await first_outcome(io, other);
        EXPECT_EQ(s.last_error, error::tls_certificate_untrusted) << s.last_error.message();
        EXPECT_FALSE(s.last_error_text.empty());
        auto system = tls_config(m);
        system.tls.ca_file.clear();
        s = co_await first_outcome(io, system);
        EXPECT_EQ(s.last_error, error::tls_certificate_untrusted) << s.last_error.message();
      },
      1, limit);
}

// A client that trusts the wrong CA on a majority of masters: async_lock gives up after its
// first round (no retry can mend a certificate), and each master's result names the cause.
// Catches: TLS verification failures treated as transient (retrying for the whole max_wait), or
// the cause hidden behind not_connected.
TEST(tls, untrusted_certificates_on_a_majority_end_the_lock_at_once_naming_the_cause) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto cfg = client_config_for(masters);
        cfg.masters[1].tls.ca_file = certs->other_ca;
        cfg.masters[2].tls.ca_file = certs->other_ca;
        cfg.retry.max_attempts = 50;
        cfg.retry.max_wait = 60s;
        redlock::client a{io.get_executor(), cfg};
        auto [ready_ec, report] = co_await a.async_wait_ready(30s, use_tuple);
        EXPECT_EQ(ready_ec, error::quorum_unavailable) << ready_ec.message();
        auto [ec, l] = co_await a.async_lock("tls-untrusted", 10s, use_tuple);
        EXPECT_EQ(ec, error::quorum_unavailable) << ec.message();
        EXPECT_EQ(a.stats().lock_attempts, 1u);
        const auto results = l.masters();
        EXPECT_EQ(results.size(), 3u);
        if (results.size() == 3) {
          EXPECT_EQ(results[1].error, error::tls_certificate_untrusted) << results[1].error.message();
          EXPECT_EQ(results[2].error, error::tls_certificate_untrusted) << results[2].error.message();
        }
        const auto text = redlock::to_string(a.report(l));
        EXPECT_NE(text.find(make_error_code(error::tls_certificate_untrusted).message()), std::string::npos) << text;
        // The failed attempt releases what it got (after completing: wait for it).
        const bool released = co_await until([&] { return !get(masters[0], "tls-untrusted"); });
        EXPECT_TRUE(released);
      },
      1, limit);
}

// An expired server certificate: tls_certificate_expired. Catches: the validity period not checked
// or reported as a generic untrusted certificate.
TEST(tls, expired_certificate) {
  tls_master m{{.cert = certs->expired_crt}};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        const auto s = co_await first_outcome(io, tls_config(m));
        EXPECT_EQ(s.last_error, error::tls_certificate_expired) << s.last_error.message();
        EXPECT_NE(s.last_error_text.find("expired"), std::string::npos) << s.last_error_text;
      },
      1, limit);
}

// Name checks: the good certificate is valid for 127.0.0.1 (an IP entry) and for "localhost" (a
// DNS entry, also sent as SNI); another server name, or the certificate made for another name
// reached by IP, is tls_name_mismatch; insecure_skip_verify connects anyway. Catches: no host
// name check at all, an IP address checked as a DNS name, the server_name option ignored.
TEST(tls, server_name_is_checked) {
  tls_master good;
  tls_master wrong{{.cert = certs->wrong_name_crt}};
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto by_name = tls_config(good);
        by_name.tls.server_name = "localhost";
        auto s = co_await first_outcome(io, by_name);
        EXPECT_EQ(s.state, connection_state::up) << s.last_error.message() << " / " << s.last_error_text;

        auto other_name = tls_config(good);
        other_name.tls.server_name = "db.example";
        s = co_await first_outcome(io, other_name);
        EXPECT_EQ(s.last_error, error::tls_name_mismatch) << s.last_error.message();

        s = co_await first_outcome(io, tls_config(wrong));
        EXPECT_EQ(s.last_error, error::tls_name_mismatch) << s.last_error.message();

        auto named = tls_config(wrong);
        named.tls.server_name = "wrong.example";
        s = co_await first_outcome(io, named);
        EXPECT_EQ(s.state, connection_state::up) << s.last_error.message() << " / " << s.last_error_text;

        auto insecure = tls_config(wrong);
        insecure.tls.ca_file.clear();
        insecure.tls.insecure_skip_verify = true;
        s = co_await first_outcome(io, insecure);
        EXPECT_EQ(s.state, connection_state::up) << s.last_error.message();
      },
      1, limit);
}

// Files that cannot be used are refused at start-up (validate, hence client construction and
// async_run) with invalid_config and the path in `what`. Catches: a bad key found only at connect
// time, over and over, or an error that does not say which file.
TEST(tls, unusable_files_are_invalid_config_naming_the_path) {
  auto base = [] {
    redlock::connection_config c;
    c.tls.enabled = true;
    c.tls.ca_file = certs->ca;
    return c;
  };
  std::string what;
  EXPECT_FALSE(redlock::validate(base(), &what)) << what;

  auto missing_ca = base();
  missing_ca.tls.ca_file = (certs->dir / "nope.crt").string();
  EXPECT_EQ(redlock::validate(missing_ca, &what), error::invalid_config);
  EXPECT_NE(what.find("nope.crt"), std::string::npos) << what;
  EXPECT_NE(what.find("tls.ca_file"), std::string::npos) << what;

  auto garbage_key = base();
  garbage_key.tls.cert_file = certs->client_crt;
  garbage_key.tls.key_file = certs->garbage;
  EXPECT_EQ(redlock::validate(garbage_key, &what), error::invalid_config);
  EXPECT_NE(what.find("tls.key_file"), std::string::npos) << what;
  EXPECT_NE(what.find(certs->garbage), std::string::npos) << what;

  auto mismatched = base();
  mismatched.tls.cert_file = certs->client_crt;
  mismatched.tls.key_file = certs->server_key;
  EXPECT_EQ(redlock::validate(mismatched, &what), error::invalid_config);
  EXPECT_NE(what.find("tls.key_file"), std::string::npos) << what;
  EXPECT_NE(what.find("mismatch"), std::string::npos) << what;

  auto unreadable = base();
  unreadable.tls.cert_file = certs->client_crt;
  unreadable.tls.key_file = (certs->dir / "missing.key").string();
  EXPECT_EQ(redlock::validate(unreadable, &what), error::invalid_config);
  EXPECT_NE(what.find("missing.key"), std::string::npos) << what;

  auto key_only = base();
  key_only.tls.key_file = certs->client_key;
  EXPECT_EQ(redlock::validate(key_only, &what), error::invalid_config);
  EXPECT_NE(what.find("tls.key_file without tls.cert_file"), std::string::npos) << what;

  auto ca_dir = base();
  ca_dir.tls.ca_dir = (certs->dir / "no-such-dir").string();
  EXPECT_EQ(redlock::validate(ca_dir, &what), error::invalid_config);
  EXPECT_NE(what.find("tls.ca_dir"), std::string::npos) << what;

  auto over_unix = base();
  over_unix.unix_socket = "/tmp/redis.sock";
  EXPECT_EQ(redlock::validate(over_unix, &what), error::invalid_config);

  auto insecure_with_ca = base();
  insecure_with_ca.tls.insecure_skip_verify = true;
  EXPECT_EQ(redlock::validate(insecure_with_ca, &what), error::invalid_config);

  // The client refuses the same configuration at construction.
  redlock::client_config cc;
  cc.masters = {garbage_key};
  EXPECT_EQ(redlock::validate(cc, &what), error::invalid_config);
  EXPECT_NE(what.find(certs->garbage), std::string::npos) << what;
}

// ---- a fault over TLS -----------------------------------------------------------------------

// One master of three is killed: locks are still granted by the other two; once it is restarted
// (same TLS port), its connection comes back over TLS and it grants again. Catches: a TLS layer
// reused across connections (the new handshake fails or old records leak), no reconnect after a
// TLS connection was reset.
TEST(tls, a_killed_master_reconnects_over_tls) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        redlock::client a{io.get_executor(), client_config_for(masters)};
        // Not while a master's first (slow, under load) TLS handshake still runs: the "reconnect"
        // would then be its first connection.
        co_await redlock::test::wait_connected(a, 10s);
        auto [e0, l0] = co_await a.async_lock("fault", 10s, use_tuple);
        EXPECT_FALSE(e0) << e0.message();
        co_await l0.async_unlock(use_tuple);

        masters[1].node().kill();
        auto [e1, l1] = co_await a.async_lock("fault", 10s, use_tuple);
        EXPECT_FALSE(e1) << e1.message();
        EXPECT_EQ(get(masters[0], "fault"), l1.token());
        co_await l1.async_unlock(use_tuple);

        masters[1].node().restart();
        const bool ok3 = co_await until(
            [&] {
              const auto s = a.masters()[1];
              return s.state == connection_state::up && s.connects >= 2;
            },
            10s);
        EXPECT_TRUE(ok3) << "state " << static_cast<int>(a.masters()[1].state) << ", connects "
                         << a.masters()[1].connects << ", last error " << a.masters()[1].last_error.message() << " ("
                         << a.masters()[1].last_error_text << ")";
        auto [e2, l2] = co_await a.async_lock("fault", 10s, use_tuple);
        EXPECT_FALSE(e2) << e2.message();
        const bool everywhere = co_await held_everywhere(masters, "fault", l2.token());
        EXPECT_TRUE(everywhere);  // the restarted master granted too
        co_await l2.async_unlock(use_tuple);
      },
      1, limit);
}

// A stopped (SIGSTOP) master over TLS is detected as stalled and replaced; once resumed, it comes
// back. Catches: the abortive close not reaching the TLS stream (a hung reader), a TLS write left
// pending on the closed socket that blocks the reconnect.
TEST(tls, a_stopped_master_stalls_and_comes_back) {
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        auto cfg = client_config_for(masters);
        for (auto& m : cfg.masters) m.stall_grace = 300ms;
        redlock::client a{io.get_executor(), cfg};
        // Not while a master's first (slow, under load) TLS handshake still runs: the "reconnect"
        // would then be its first connection.
        co_await redlock::test::wait_connected(a, 10s);
        auto [e0, l0] = co_await a.async_lock("stall", 10s, use_tuple);
        EXPECT_FALSE(e0) << e0.message();
        co_await l0.async_unlock(use_tuple);

        masters[2].node().pause();
        for (int i = 0; i < 3; ++i) {
          auto [e, l] = co_await a.async_lock("stall", 10s, use_tuple);
          EXPECT_FALSE(e) << e.message();
          co_await l.async_unlock(use_tuple);
        }
        // The stall is counted (last_error moves on to connect_timeout once a reconnect to the
        // paused server has timed out, so the counter is what to wait for).
        const bool ok4 = co_await until([&] { return a.stats().masters[2].stalls >= 1; }, 10s);
        EXPECT_TRUE(ok4) << a.masters()[2].last_error.message();
        masters[2].node().resume();
        const bool ok5 = co_await until(
            [&] {
              const auto s = a.masters()[2];
              return s.state == connection_state::up && s.connects >= 2;
            },
            15s);
        EXPECT_TRUE(ok5) << "state " << static_cast<int>(a.masters()[2].state) << ", connects "
                         << a.masters()[2].connects << ", last error " << a.masters()[2].last_error.message() << " ("
                         << a.masters()[2].last_error_text << ")";
        auto [e2, l2] = co_await a.async_lock("stall2", 10s, use_tuple);
        EXPECT_FALSE(e2) << e2.message();
        const bool everywhere = co_await held_everywhere(masters, "stall2", l2.token());
        EXPECT_TRUE(everywhere);
        co_await l2.async_unlock(use_tuple);
      },
      1, limit);
}

// A TLS lock+unlock allocates (operator new) at most a few more times per cycle than the same
// cycle over the same masters' plain ports (two more, when the strand is entered from outside in
// the lock's and the unlock's round): the TLS layer's completions enter the strand without a heap
// allocation each. Catches: TLS handlers bound to the strand itself (strand<any_io_executor>::
// execute allocates per completion: about thirteen more per cycle on three masters).
TEST(tls, a_cycle_allocates_about_as_much_as_over_plain_tcp) {
  if (!REDLOCK_TLS_TEST_COUNTS_ALLOCATIONS) GTEST_SKIP() << "allocations are not counted under a sanitizer";
  auto masters = start_masters(3);
  run_test(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        constexpr int cycles = 50;
        auto plain_cfg = client_config_for(masters);
        for (std::size_t i = 0; i < masters.size(); ++i) {
          plain_cfg.masters[i].tls.enabled = false;
          plain_cfg.masters[i].port = masters[i].plain_port();
        }
        const unsigned long plain = co_await allocations_per_cycles(io, plain_cfg, cycles);
        const unsigned long tls = co_await allocations_per_cycles(io, client_config_for(masters), cycles);
        EXPECT_LE(tls, plain + 4 * cycles) << "per cycle: plain " << static_cast<double>(plain) / cycles << ", TLS "
                                           << static_cast<double>(tls) / cycles;
      },
      1, limit);
}

}  // namespace
