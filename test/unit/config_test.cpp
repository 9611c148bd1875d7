#include <redlock/config.hpp>

#include <gtest/gtest.h>

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
  redlock::lock_options permits2;
  permits2.permits = 2;
  redlock::lock_options fenced_reader;
  fenced_reader.kind = redlock::lock_kind::read;
  fenced_reader.fence = true;
  redlock::lock_options blank_owner;
  blank_owner.owner = "a b";
  const std::vector<bad_case> cases{
      {"", 10s, {}, "resource is empty"},
      {std::string(cfg.max_resource_length + 1, 'r'), 10s, {}, "longer than max_resource_length"},
      {"r", 0ms, {}, "ttl 0 ms is not positive"},
      {"r", 25h, {}, "above max_ttl"},
      {"r", 200ms, {}, "leaves no validity"},
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
