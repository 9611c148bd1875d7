// SPDX-License-Identifier: BSL-1.0
#include <redlock/config.hpp>
#include <redlock/version.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using redlock::connection_config;
using redlock::parse_masters;

TEST(ParseMasters, AcceptsEveryForm) {
  std::vector<connection_config> out;
  std::string what;
  ASSERT_FALSE(parse_masters(" 10.0.0.1:7001, redis-b ,[::1]:7003,[fe80::1],unix:/run/r.sock", out, &what)) << what;
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].host, "10.0.0.1");
  EXPECT_EQ(out[0].port, 7001);
  EXPECT_EQ(out[1].host, "redis-b");
  EXPECT_EQ(out[1].port, 6379);
  EXPECT_EQ(out[2].host, "::1");
  EXPECT_EQ(out[2].port, 7003);
  EXPECT_EQ(out[3].host, "fe80::1");
  EXPECT_EQ(out[3].port, 6379);
  EXPECT_EQ(out[4].unix_socket, "/run/r.sock");
  EXPECT_TRUE(what.empty());
}

// rediss:// turns TLS on for that entry only, redis:// is the plain default, and address_of
// writes each back so that it reads the same. Catches: TLS applied to every master, the scheme
// taken for a host name, an address that loses its scheme in logs and JSON.
TEST(ParseMasters, SchemesSelectTlsAndRoundTrip) {
  std::vector<connection_config> out;
  std::string what;
  ASSERT_FALSE(parse_masters("rediss://db1:6380,redis://db2:6379,db3,rediss://[::1]:7000", out, &what)) << what;
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].tls.enabled);
  EXPECT_EQ(out[0].host, "db1");
  EXPECT_EQ(out[0].port, 6380);
  EXPECT_FALSE(out[1].tls.enabled);
  EXPECT_EQ(out[1].host, "db2");
  EXPECT_FALSE(out[2].tls.enabled);
  EXPECT_TRUE(out[3].tls.enabled);
  EXPECT_EQ(out[3].host, "::1");
  EXPECT_EQ(redlock::address_of(out[0]), "rediss://db1:6380");
  EXPECT_EQ(redlock::address_of(out[1]), "db2:6379");
  EXPECT_EQ(redlock::address_of(out[3]), "rediss://[::1]:7000");
  for (const auto& m : out) {
    std::vector<connection_config> again;
    ASSERT_FALSE(parse_masters(redlock::address_of(m), again, &what)) << what;
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].host, m.host);
    EXPECT_EQ(again[0].port, m.port);
    EXPECT_EQ(again[0].tls.enabled, m.tls.enabled);
  }
  for (const char* bad : {"rediss://unix:/run/r.sock", "redis://unix:/x", "http://a:1", "rediss://", "rediss://:1"}) {
    std::vector<connection_config> none;
    EXPECT_EQ(parse_masters(bad, none, &what), redlock::error::invalid_config) << bad;
    EXPECT_TRUE(none.empty()) << bad;
  }
}

// TLS combinations that cannot work are refused naming the field; a plain master ignores tls.*.
TEST(ValidateConnection, RejectsUnusableTlsCombinations) {
  std::string what;
  connection_config c;
  c.tls.cert_file = "/nonexistent/cert.pem";  // ignored: TLS is off
  EXPECT_FALSE(redlock::validate(c, &what)) << what;
  c.tls.enabled = true;
  EXPECT_EQ(redlock::validate(c, &what), redlock::error::invalid_config);
  EXPECT_NE(what.find("tls.cert_file without tls.key_file"), std::string::npos) << what;
  c.tls.cert_file.clear();
  c.tls.key_file = "/k.pem";
  EXPECT_EQ(redlock::validate(c, &what), redlock::error::invalid_config);
  EXPECT_NE(what.find("tls.key_file without tls.cert_file"), std::string::npos) << what;
  c.tls.key_file.clear();
  c.tls.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(redlock::validate(c, &what), redlock::error::invalid_config);
  EXPECT_NE(what.find("/nonexistent/ca.pem"), std::string::npos) << what;
  c.tls.ca_file.clear();
  c.unix_socket = "/run/redis.sock";
  EXPECT_EQ(redlock::validate(c, &what), redlock::error::invalid_config);
  EXPECT_NE(what.find("unix_socket"), std::string::npos) << what;
}

TEST(ParseMasters, AppendsToWhatIsThere) {
  std::vector<connection_config> out(1);
  ASSERT_FALSE(parse_masters("a:1", out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].host, "a");
}

TEST(ParseMasters, RejectsBadEntriesAndKeepsOutputUnchanged) {
  for (const char* bad : {"", " ", "a:1,", ",a:1", "a:1,,b:2", "a:", ":7001", "a:0", "a:65536", "a:70x", "a:-1",
                          "::1:7001", "[::1", "[::1]x", "[::1]:", "[]:1", "unix:", "a:1,b:99999"}) {
    std::vector<connection_config> out;
    std::string what;
    const auto ec = parse_masters(bad, out, &what);
    EXPECT_EQ(ec, redlock::error::invalid_config) << '"' << bad << '"';
    EXPECT_TRUE(out.empty()) << bad;
    EXPECT_FALSE(what.empty()) << bad;
    EXPECT_NE(what.find("master "), std::string::npos) << what;
  }
}

TEST(ParseMasters, NamesTheBadEntry) {
  std::vector<connection_config> out;
  std::string what;
  ASSERT_TRUE(parse_masters("a:1,b:2,c:0", out, &what));
  EXPECT_NE(what.find("master 3"), std::string::npos) << what;
  EXPECT_NE(what.find("'c:0'"), std::string::npos) << what;
}

}  // namespace

namespace {

redlock::client_config one_master() {
  redlock::client_config cfg;
  cfg.masters.emplace_back();
  cfg.masters.back().host = "127.0.0.1";
  cfg.masters.back().port = 6379;
  return cfg;
}

// Each refusal names its argument and reason; what async_lock refuses, this refuses the same way.
TEST(ValidateLock, NamesTheArgumentAndTheReason) {
  using namespace std::chrono_literals;
  const auto cfg = one_master();
  std::string what = "stale";
  EXPECT_FALSE(redlock::validate_lock(cfg, "orders:42", 10s, {}, &what));
  EXPECT_TRUE(what.empty());
  struct bad_case {
    std::string resource;
    std::chrono::milliseconds ttl;
    redlock::lock_options opts;
    std::string says;
  };
  // Named, not `{}`: GCC 12 at -O3 takes the owner string of a `{}` member of a braced
  // initializer list for uninitialized (a false -Wmaybe-uninitialized).
  const redlock::lock_options plain;
  redlock::lock_options permits2;
  permits2.permits = 2;
  redlock::lock_options fenced_reader;
  fenced_reader.kind = redlock::lock_kind::read;
  fenced_reader.fence = true;
  redlock::lock_options blank_owner;
  blank_owner.owner = "a b";
  const std::vector<bad_case> cases{
      {"", 10s, plain, "resource is empty"},
      {std::string(cfg.max_resource_length + 1, 'r'), 10s, plain, "longer than max_resource_length"},
      {"r", 0ms, plain, "ttl 0 ms is not positive"},
      {"r", 25h, plain, "above max_ttl"},
      {"r", 200ms, plain, "leaves no validity"},
      {"r", 10s, permits2, "permits other than 1"},
      {"r", 10s, fenced_reader, "fence is only for"},
      {"r", 10s, blank_owner, "owner: 1 to 256 bytes"},
  };
  for (const auto& c : cases) {
    what.clear();
    EXPECT_EQ(redlock::validate_lock(cfg, c.resource, c.ttl, c.opts, &what), redlock::error::invalid_argument)
        << c.says;
    EXPECT_NE(what.find(c.says), std::string::npos) << "got: " << what;
  }
}

TEST(ValidateLock, AnInvalidConfigurationComesFirst) {
  using namespace std::chrono_literals;
  redlock::client_config cfg;  // no masters
  std::string what;
  EXPECT_EQ(redlock::validate_lock(cfg, "", 0ms, {}, &what), redlock::error::invalid_config);
  EXPECT_EQ(what, "no masters");
}

}  // namespace

// The version string once said 0.8.0 while the numbers said 0.10.0.
TEST(Version, TheStringIsTheNumbers) {
  EXPECT_EQ(std::string(redlock::version_string), std::to_string(REDLOCK_VERSION_MAJOR) + "." +
                                                      std::to_string(REDLOCK_VERSION_MINOR) + "." +
                                                      std::to_string(REDLOCK_VERSION_PATCH));
  EXPECT_STREQ(redlock::library_version(), redlock::version_string);
}
