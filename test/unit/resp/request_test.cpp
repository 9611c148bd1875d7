// SPDX-License-Identifier: BSL-1.0
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <list>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::resp {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;

// bool and characters are ambiguous (number or text?), so they are refused at compile time.
template <class... Args>
concept pushable = requires(request r, const Args&... args) {
  r.push("X", args...);
};
static_assert(!pushable<bool>);
static_assert(!pushable<char>);
static_assert(!pushable<double>);
static_assert(pushable<int, unsigned, std::int64_t, const char*, std::string, std::string_view>);
static_assert(detail::array_header<3>::view() == "*3\r\n");
static_assert(detail::array_header<12>::view() == "*12\r\n");
static_assert(detail::array_header<100>::view() == "*100\r\n");

std::string bulk(std::string_view s) { return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n"; }

TEST(Request, EmptyByDefault) {
  request r;
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.commands(), 0u);
  EXPECT_EQ(r.payload(), "");
}

TEST(Request, CommandWithoutArguments) {
  request r;
  r.push("PING");
  EXPECT_EQ(r.payload(), "*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(r.commands(), 1u);
  EXPECT_FALSE(r.empty());
}

TEST(Request, ExactBytes) {
  request r;
  r.push("SET", "k", "v");
  EXPECT_EQ(r.payload(), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
}

TEST(Request, LockCommand) {
  request r;
  const std::string key = "resource";
  const std::string_view token = "0123456789abcdef";
  r.push("SET", key, token, "NX", "PX", 10000);
  EXPECT_EQ(r.payload(),
            "*6\r\n$3\r\nSET\r\n$8\r\nresource\r\n$16\r\n0123456789abcdef\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n");
}

TEST(Request, EmptyArgument) {
  request r;
  r.push("ECHO", "");
  EXPECT_EQ(r.payload(), "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n");
}

TEST(Request, ManyArgumentsHaveMultiDigitHeader) {
  request r;
  r.push("DEL", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k");
  std::string expected = "*12\r\n" + bulk("DEL");
  for (char c = 'a'; c <= 'k'; ++c) expected += bulk(std::string(1, c));
  EXPECT_EQ(r.payload(), expected);
}

TEST(Request, IntegralArguments) {
  request r;
  r.push("X", 0, -1, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::uint64_t>::max(),
         std::numeric_limits<std::int64_t>::max(), static_cast<short>(-32768), static_cast<unsigned char>(255),
         static_cast<signed char>(-128), 42u, 7L);
  EXPECT_EQ(r.payload(), "*11\r\n" + bulk("X") + bulk("0") + bulk("-1") + bulk("-9223372036854775808") +
                             bulk("18446744073709551615") + bulk("9223372036854775807") + bulk("-32768") + bulk("255") +
                             bulk("-128") + bulk("42") + bulk("7"));
}

TEST(Request, BinarySafeArguments) {
  request r;
  const std::string with_nul("a\0b", 3);
  const std::string_view crlf = "\r\n";
  const std::string utf8 = "h\xc3\xa9llo \xe2\x82\xac";
  const std::string all_bytes = [] {
    std::string s;
    for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
    return s;
  }();
  r.push("SET", with_nul, crlf, utf8, all_bytes);
  EXPECT_EQ(r.payload(), "*5\r\n" + bulk("SET") + bulk(with_nul) + bulk(crlf) + bulk(utf8) + bulk(all_bytes));
  EXPECT_EQ(r.payload().substr(13, 9), std::string("$3\r\na\0b\r\n", 9));  // the NUL is kept
}

TEST(Request, OneMebibyteArgument) {
  request r;
  const std::string big(1024 * 1024, 'x');
  r.push("SET", "k", big);
  const std::string expected = "*3\r\n" + bulk("SET") + bulk("k") + "$1048576\r\n" + big + "\r\n";
  EXPECT_EQ(r.payload(), expected);
}

TEST(Request, Pipeline) {
  request r;
  r.push("SET", "k", "v", "NX", "PX", 30000);
  r.push("GET", "k");
  r.push("DEL", "k");
  EXPECT_EQ(r.commands(), 3u);
  EXPECT_EQ(r.payload(), "*6\r\n" + bulk("SET") + bulk("k") + bulk("v") + bulk("NX") + bulk("PX") + bulk("30000") +
                             "*2\r\n" + bulk("GET") + bulk("k") + "*2\r\n" + bulk("DEL") + bulk("k"));
}

TEST(Request, SizedCommandMatchesPushAfterEarlierCommands) {
  // Room made once for a whole command, after a command already in the buffer: the same bytes as
  // push, a key and its suffix joined into one bulk string, an empty one kept.
  request r;
  r.push("GET", "k");
  const std::size_t bytes = detail::bulk_size(7) + detail::bulk_size(10) + detail::bulk_size(0);
  auto w = r.begin_sized(3, bytes);
  EXPECT_FALSE(w.full());
  w.put("EVALSHA");
  w.put("key", ":suffix");
  w.put("");
  EXPECT_TRUE(w.full());
  request expected;
  expected.push("GET", "k");
  expected.push("EVALSHA", "key:suffix", "");
  EXPECT_EQ(r.payload(), expected.payload());
  EXPECT_EQ(r.commands(), 2u);
}

TEST(Request, ClearKeepsCapacityAndWorks) {
  request r;
  r.reserve(4096);
  r.push("SET", "k", std::string(1000, 'v'));
  const auto capacity = r.payload().capacity();
  EXPECT_GE(capacity, 4096u);
  r.clear();
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.commands(), 0u);
  EXPECT_EQ(r.payload(), "");
  EXPECT_EQ(r.payload().capacity(), capacity);
  r.push("GET", "k");
  EXPECT_EQ(r.payload(), "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
  EXPECT_EQ(r.commands(), 1u);
}

TEST(Request, PushRange) {
  request r;
  const std::vector<std::string> keys = {"a", std::string("\0\r\n", 3), ""};
  r.push_range("DEL", keys);
  EXPECT_EQ(r.payload(), "*4\r\n" + bulk("DEL") + bulk("a") + bulk(std::string("\0\r\n", 3)) + bulk(""));
  EXPECT_EQ(r.commands(), 1u);
}

TEST(Request, PushRangeOfIntegersAndViews) {
  request r;
  r.push_range("X", std::vector<long long>{-5, 0, 12345678901234});
  r.push_range("Y", std::list<std::string_view>{"p", "q"});
  r.push_range("Z", std::vector<std::string>{});
  EXPECT_EQ(r.commands(), 3u);
  EXPECT_EQ(r.payload(), "*4\r\n" + bulk("X") + bulk("-5") + bulk("0") + bulk("12345678901234") + "*3\r\n" + bulk("Y") +
                             bulk("p") + bulk("q") + "*1\r\n" + bulk("Z"));
}

TEST(Request, PushRangeMatchesPush) {
  request a;
  request b;
  a.push("SET", "key", "value", "PX", "100");
  b.push_range("SET", std::vector<std::string>{"key", "value", "PX", "100"});
  EXPECT_EQ(a.payload(), b.payload());
}

// The encoder's output read back by the parser: one array of blob strings per command.
TEST(Request, RoundTripThroughParser) {
  request r;
  const std::string binary("\0\r\n$*", 5);
  r.push("SET", binary, -42, "NX");
  r.push("PING");
  parser p;
  response out;
  boost::system::error_code ec;
  std::string_view rest = r.payload();
  rest.remove_prefix(p.consume(rest, out, ec));
  ASSERT_FALSE(ec);
  ASSERT_TRUE(p.done());
  rest.remove_prefix(p.consume(rest, out, ec));
  ASSERT_FALSE(ec);
  ASSERT_TRUE(p.done());
  EXPECT_TRUE(rest.empty());
  const response expected = {
      {type::array, 4, 0, ""},           {type::blob_string, 0, 1, "SET"}, {type::blob_string, 0, 1, binary},
      {type::blob_string, 0, 1, "-42"},  {type::blob_string, 0, 1, "NX"},  {type::array, 1, 0, ""},
      {type::blob_string, 0, 1, "PING"},
  };
  EXPECT_EQ(out, expected);
}

}  // namespace
}  // namespace redlock::resp
