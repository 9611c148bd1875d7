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
