// SPDX-License-Identifier: BSL-1.0
#include <redlock/error.hpp>
#include <redlock/resp/parser.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

// The size of the largest allocation made since the last reset: shows that a declared length or
// count is not allocated up front. Replacing the global allocation functions is allowed in any
// translation unit of the program; these only observe, then defer to malloc.
namespace {
std::atomic<std::size_t> largest_allocation{0};
}  // namespace

void* operator new(std::size_t size) {
  std::size_t seen = largest_allocation.load(std::memory_order_relaxed);
  while (size > seen && !largest_allocation.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// GCC's -Wmismatched-new-delete cannot see that these deletes pair with the malloc-based new
// above once they are inlined (a known false positive at -O2).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace redlock::resp {
namespace {

using namespace std::string_literals;
using boost::system::error_code;

node val(type t, std::string_view value, std::size_t depth = 0) { return node{t, 0, depth, std::string(value)}; }
node agg(type t, std::size_t size, std::size_t depth = 0) { return node{t, size, depth, {}}; }

/// What a connection would see feeding a parser chunk by chunk.
struct outcome {
  response nodes;
  std::vector<std::size_t> reply_ends;  // nodes.size() each time a reply was done
  error_code ec;
  std::size_t unconsumed = 0;  // bytes handed over but not consumed when the input ran out

  friend bool operator==(const outcome&, const outcome&) = default;
};

/// Feeds `chunks` in order as a connection does: unconsumed bytes are kept and followed by the next
/// chunk; complete replies are taken one at a time until the error or the end of the input.
outcome feed(const std::vector<std::string_view>& chunks, const parser_limits& limits = {}) {
  parser p(limits);
  outcome r;
  std::string buffer;
  for (const auto chunk : chunks) {
    buffer.append(chunk);
    while (!buffer.empty()) {
      const std::size_t consumed = p.consume(buffer, r.nodes, r.ec);
      EXPECT_LE(consumed, buffer.size());
      buffer.erase(0, consumed);
      if (r.ec) return r;
      if (!p.done()) break;  // needs more
      r.reply_ends.push_back(r.nodes.size());
    }
  }
  r.unconsumed = buffer.size();
  return r;
}

outcome feed_whole(std::string_view data, const parser_limits& limits = {}) { return feed({data}, limits); }

outcome feed_split(std::string_view data, std::size_t at, const parser_limits& limits = {}) {
  return feed({data.substr(0, at), data.substr(at)}, limits);
}

outcome feed_bytewise(std::string_view data, const parser_limits& limits = {}) {
  std::vector<std::string_view> chunks;
  for (std::size_t i = 0; i < data.size(); ++i) chunks.push_back(data.substr(i, 1));
  return feed(chunks, limits);
}

/// Parses exactly one complete reply that spans all of `data`.
response parse_one(std::string_view data) {
  parser p;
  response out;
  error_code ec;
  const std::size_t consumed = p.consume(data, out, ec);
  EXPECT_FALSE(ec) << ec.message() << " for " << testing::PrintToString(std::string(data));
  EXPECT_TRUE(p.done()) << testing::PrintToString(std::string(data));
  EXPECT_EQ(consumed, data.size());
  return out;
}

error_code parse_error(std::string_view data, const parser_limits& limits = {}) { return feed_whole(data, limits).ec; }

// --- Scalars ---------------------------------------------------------------------------------

TEST(Parser, SimpleString) {
  EXPECT_EQ(parse_one("+OK\r\n"), response{val(type::simple_string, "OK")});
  EXPECT_EQ(parse_one("+\r\n"), response{val(type::simple_string, "")});
}

TEST(Parser, SimpleError) {
  EXPECT_EQ(parse_one("-ERR unknown command 'x'\r\n"), response{val(type::simple_error, "ERR unknown command 'x'")});
}

TEST(Parser, Integer) {
  EXPECT_EQ(parse_one(":0\r\n"), response{val(type::integer, "0")});
  EXPECT_EQ(parse_one(":-1\r\n"), response{val(type::integer, "-1")});
  EXPECT_EQ(parse_one(":9223372036854775807\r\n"), response{val(type::integer, "9223372036854775807")});
  EXPECT_EQ(parse_one(":-9223372036854775808\r\n"), response{val(type::integer, "-9223372036854775808")});
  // Either side of the 18 digits that are read without an overflow check.
  EXPECT_EQ(parse_one(":999999999999999999\r\n"), response{val(type::integer, "999999999999999999")});
  EXPECT_EQ(parse_one(":-999999999999999999\r\n"), response{val(type::integer, "-999999999999999999")});
  EXPECT_EQ(parse_one(":1000000000000000000\r\n"), response{val(type::integer, "1000000000000000000")});
  EXPECT_EQ(parse_one(":00000000000000000000042\r\n"), response{val(type::integer, "00000000000000000000042")});
  EXPECT_EQ(parse_one(":-0\r\n"), response{val(type::integer, "-0")});
}

TEST(Parser, BlobString) {
  EXPECT_EQ(parse_one("$5\r\nhello\r\n"), response{val(type::blob_string, "hello")});
  EXPECT_EQ(parse_one("$0\r\n\r\n"), response{val(type::blob_string, "")});
  // Binary-safe: CR, LF and NUL inside the body are data.
  EXPECT_EQ(parse_one("$6\r\n\r\n\0\r\n$\r\n"s), response{val(type::blob_string, "\r\n\0\r\n$"s)});
}

TEST(Parser, BlobError) {
  EXPECT_EQ(parse_one("!21\r\nSYNTAX invalid syntax\r\n"), response{val(type::blob_error, "SYNTAX invalid syntax")});
}

TEST(Parser, Nulls) {
  EXPECT_EQ(parse_one("_\r\n"), response{val(type::null, "")});
  EXPECT_EQ(parse_one("$-1\r\n"), response{val(type::null, "")});
  EXPECT_EQ(parse_one("*-1\r\n"), response{val(type::null, "")});
}

TEST(Parser, Boolean) {
  EXPECT_EQ(parse_one("#t\r\n"), response{val(type::boolean, "t")});
  EXPECT_EQ(parse_one("#f\r\n"), response{val(type::boolean, "f")});
}

TEST(Parser, Double) {
  for (const std::string_view text : {"3.14", "-1.5E-3", "1e10", "0", "inf", "-inf", "nan", "+inf", "10"}) {
    EXPECT_EQ(parse_one("," + std::string(text) + "\r\n"), response{val(type::double_type, text)}) << text;
  }
}

TEST(Parser, BigNumber) {
  EXPECT_EQ(parse_one("(3492890328409238509324850943850943825024385\r\n"),
            response{val(type::big_number, "3492890328409238509324850943850943825024385")});
  EXPECT_EQ(parse_one("(-12\r\n"), response{val(type::big_number, "-12")});
  EXPECT_EQ(parse_one("(+7\r\n"), response{val(type::big_number, "+7")});
}

TEST(Parser, Verbatim) {
  EXPECT_EQ(parse_one("=15\r\ntxt:Some string\r\n"), response{val(type::verbatim_string, "txt:Some string")});
  EXPECT_EQ(parse_one("=4\r\nmkd:\r\n"), response{val(type::verbatim_string, "mkd:")});
}

// --- Aggregates ------------------------------------------------------------------------------

TEST(Parser, Array) {
  EXPECT_EQ(parse_one("*3\r\n:1\r\n$3\r\nfoo\r\n+bar\r\n"),
            (response{agg(type::array, 3), val(type::integer, "1", 1), val(type::blob_string, "foo", 1),
                      val(type::simple_string, "bar", 1)}));
}

TEST(Parser, NestedAggregates) {
  EXPECT_EQ(parse_one("*3\r\n:1\r\n*2\r\n+a\r\n*1\r\n$1\r\nb\r\n%1\r\n+k\r\n~2\r\n#f\r\n_\r\n"),
            (response{agg(type::array, 3), val(type::integer, "1", 1), agg(type::array, 2, 1),
                      val(type::simple_string, "a", 2), agg(type::array, 1, 2), val(type::blob_string, "b", 3),
                      agg(type::map, 1, 1), val(type::simple_string, "k", 2), agg(type::set, 2, 2),
                      val(type::boolean, "f", 3), val(type::null, "", 3)}));
}

TEST(Parser, NullInsideArray) {
  EXPECT_EQ(parse_one("*3\r\n$-1\r\n*-1\r\n_\r\n"),
            (response{agg(type::array, 3), val(type::null, "", 1), val(type::null, "", 1), val(type::null, "", 1)}));
}

TEST(Parser, Map) {
  EXPECT_EQ(parse_one("%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n"),
            (response{agg(type::map, 2), val(type::simple_string, "first", 1), val(type::integer, "1", 1),
                      val(type::simple_string, "second", 1), val(type::integer, "2", 1)}));
}

TEST(Parser, Set) {
  EXPECT_EQ(parse_one("~3\r\n+a\r\n+b\r\n+c\r\n"),
            (response{agg(type::set, 3), val(type::simple_string, "a", 1), val(type::simple_string, "b", 1),
                      val(type::simple_string, "c", 1)}));
}

TEST(Parser, Push) {
  EXPECT_EQ(parse_one(">3\r\n+message\r\n+chan\r\n$5\r\nhello\r\n"),
            (response{agg(type::push, 3), val(type::simple_string, "message", 1), val(type::simple_string, "chan", 1),
                      val(type::blob_string, "hello", 1)}));
}

TEST(Parser, EmptyAggregatesAreComplete) {
  EXPECT_EQ(parse_one("*0\r\n"), response{agg(type::array, 0)});
  EXPECT_EQ(parse_one("%0\r\n"), response{agg(type::map, 0)});
  EXPECT_EQ(parse_one("~0\r\n"), response{agg(type::set, 0)});
  EXPECT_EQ(parse_one(">0\r\n"), response{agg(type::push, 0)});
  EXPECT_EQ(parse_one("*2\r\n*0\r\n%0\r\n"),
            (response{agg(type::array, 2), agg(type::array, 0, 1), agg(type::map, 0, 1)}));
}

// --- Attributes ------------------------------------------------------------------------------

TEST(Parser, TopLevelAttributeBelongsToTheNextValue) {
  // From the RESP3 specification.
  const std::string_view data =
      "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n";
  EXPECT_EQ(parse_one(data),
            (response{agg(type::attribute, 1), val(type::simple_string, "key-popularity", 1), agg(type::map, 2, 1),
                      val(type::blob_string, "a", 2), val(type::double_type, "0.1923", 2),
                      val(type::blob_string, "b", 2), val(type::double_type, "0.0012", 2), agg(type::array, 2),
                      val(type::integer, "2039123", 1), val(type::integer, "9543892", 1)}));
}

TEST(Parser, AttributeAloneIsNotAReply) {
  parser p;
  response out;
  error_code ec;
  const std::string_view attribute = "|1\r\n+a\r\n+b\r\n";
  EXPECT_EQ(p.consume(attribute, out, ec), attribute.size());
  EXPECT_FALSE(ec);
  EXPECT_FALSE(p.done());
  EXPECT_EQ(p.consume("+OK\r\n", out, ec), 5u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, (response{agg(type::attribute, 1), val(type::simple_string, "a", 1), val(type::simple_string, "b", 1),
                           val(type::simple_string, "OK")}));
}

TEST(Parser, NestedAttributeDoesNotCountAsElement) {
  EXPECT_EQ(parse_one("*3\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n:3\r\n"),
            (response{agg(type::array, 3), val(type::integer, "1", 1), agg(type::attribute, 1, 1),
                      val(type::simple_string, "ttl", 2), val(type::integer, "3600", 2), val(type::integer, "2", 1),
                      val(type::integer, "3", 1)}));
}

TEST(Parser, AttributeBeforeLastElementAndInsideMap) {
  EXPECT_EQ(parse_one("%1\r\n+k\r\n|0\r\n|1\r\n+a\r\n|1\r\n+x\r\n+y\r\n+b\r\n*1\r\n|1\r\n+c\r\n+d\r\n:7\r\n"),
            (response{agg(type::map, 1), val(type::simple_string, "k", 1), agg(type::attribute, 0, 1),
                      agg(type::attribute, 1, 1), val(type::simple_string, "a", 2), agg(type::attribute, 1, 2),
                      val(type::simple_string, "x", 3), val(type::simple_string, "y", 3),
                      val(type::simple_string, "b", 2), agg(type::array, 1, 1), agg(type::attribute, 1, 2),
                      val(type::simple_string, "c", 3), val(type::simple_string, "d", 3), val(type::integer, "7", 2)}));
}

TEST(Parser, EmptyTopLevelAttribute) {
  EXPECT_EQ(parse_one("|0\r\n:1\r\n"), (response{agg(type::attribute, 0), val(type::integer, "1")}));
}

// --- Streams of replies ----------------------------------------------------------------------

TEST(Parser, BackToBackRepliesOneAtATime) {
  parser p;
  response out;
  error_code ec;
  std::string_view data = "+OK\r\n*2\r\n:1\r\n:2\r\n$-1\r\n";
  EXPECT_EQ(p.consume(data, out, ec), 5u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, response{val(type::simple_string, "OK")});
  data.remove_prefix(5);
  out.clear();
  EXPECT_EQ(p.consume(data, out, ec), 12u);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, (response{agg(type::array, 2), val(type::integer, "1", 1), val(type::integer, "2", 1)}));
  data.remove_prefix(12);
  out.clear();
  EXPECT_EQ(p.consume(data, out, ec), 5u);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, response{val(type::null, "")});
  // Nothing left: the next call starts a new reply and needs more.
  EXPECT_EQ(p.consume("", out, ec), 0u);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(p.done());
}

TEST(Parser, NeedMoreThenComplete) {
  parser p;
  response out;
  error_code ec;
  EXPECT_EQ(p.consume("*2\r\n$5\r\nhel", out, ec), 11u);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(p.done());
  EXPECT_EQ(out, response{agg(type::array, 2)});  // only complete nodes are appended
  EXPECT_EQ(p.consume("lo\r", out, ec), 3u);
  EXPECT_FALSE(p.done());
  EXPECT_EQ(p.consume("\n:4", out, ec), 3u);
  EXPECT_FALSE(p.done());
  EXPECT_EQ(p.consume("2\r\n+next\r\n", out, ec), 3u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, (response{agg(type::array, 2), val(type::blob_string, "hello", 1), val(type::integer, "42", 1)}));
}

// --- Parsegrind: any split gives the same nodes ----------------------------------------------

const std::vector<std::string> messages = {
    "+OK\r\n",
    "-ERR unknown command\r\n",
    ":0\r\n",
    ":-9223372036854775808\r\n",
    "$5\r\nhello\r\n",
    "$0\r\n\r\n",
    "$4\r\n\r\n\r\n\r\n",
    "$-1\r\n",
    "*-1\r\n",
    "_\r\n",
    "#t\r\n",
    ",3.14\r\n",
    ",-inf\r\n",
    "(3492890328409238509324850943850943825024385\r\n",
    "!21\r\nSYNTAX invalid syntax\r\n",
    "=15\r\ntxt:Some string\r\n",
    "*3\r\n:1\r\n*2\r\n+a\r\n$1\r\nb\r\n%1\r\n+k\r\n~2\r\n#f\r\n_\r\n",
    "%2\r\n+first\r\n:1\r\n+second\r\n*0\r\n",
    "~0\r\n",
    "*0\r\n",
    "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n",
    "*3\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n:3\r\n",
    ">3\r\n+message\r\n+chan\r\n$5\r\nhello\r\n",
    "*2\r\n$3\r\n\0\r\n\r\n$-1\r\n"s,
};

TEST(Parser, ParsegrindEverySplitAndBytewise) {
  for (const auto& message : messages) {
    SCOPED_TRACE(testing::PrintToString(message));
    const outcome whole = feed_whole(message);
    ASSERT_FALSE(whole.ec);
    ASSERT_EQ(whole.reply_ends, std::vector<std::size_t>{whole.nodes.size()});
    for (std::size_t at = 0; at <= message.size(); ++at) {
      EXPECT_EQ(feed_split(message, at), whole) << "split at " << at;
    }
    EXPECT_EQ(feed_bytewise(message), whole);
  }
}

TEST(Parser, ParsegrindAllMessagesInOneStream) {
  std::string stream;
  for (const auto& message : messages) stream += message;
  const outcome whole = feed_whole(stream);
  ASSERT_FALSE(whole.ec);
  // The top-level attribute message is still a single reply.
  EXPECT_EQ(whole.reply_ends.size(), messages.size());
  EXPECT_EQ(whole.unconsumed, 0u);
  for (std::size_t at = 0; at <= stream.size(); ++at) {
    ASSERT_EQ(feed_split(stream, at), whole) << "split at " << at;
  }
  EXPECT_EQ(feed_bytewise(stream), whole);
  // Three chunks too, at a few coprime strides.
  for (std::size_t stride : {3u, 7u, 13u}) {
    std::vector<std::string_view> chunks;
    for (std::size_t i = 0; i < stream.size(); i += stride) {
      chunks.push_back(std::string_view(stream).substr(i, stride));
    }
    EXPECT_EQ(feed(chunks), whole) << "stride " << stride;
  }
}

TEST(Parser, TruncatedInputNeedsMore) {
  for (const auto& message : messages) {
    for (std::size_t length = 0; length < message.size(); ++length) {
      const outcome r = feed_whole(std::string_view(message).substr(0, length));
      EXPECT_FALSE(r.ec) << testing::PrintToString(message) << " cut at " << length;
      EXPECT_TRUE(r.reply_ends.empty()) << testing::PrintToString(message) << " cut at " << length;
      EXPECT_EQ(r.unconsumed, 0u);  // everything given is consumed: the caller keeps nothing
    }
  }
}

// --- Big inputs ------------------------------------------------------------------------------

TEST(Parser, LargeBulkInChunks) {
  const std::string body(3 * 1024 * 1024 + 17, 'z');
  const std::string message = "$" + std::to_string(body.size()) + "\r\n" + body + "\r\n";
  std::vector<std::string_view> chunks;
  for (std::size_t i = 0; i < message.size(); i += 1000) chunks.push_back(std::string_view(message).substr(i, 1000));
  const outcome r = feed(chunks);
  ASSERT_FALSE(r.ec);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].value, body);
  EXPECT_EQ(r.reply_ends, std::vector<std::size_t>{1});
}

TEST(Parser, LargeArrayInSmallChunksIsLinear) {
  constexpr std::size_t count = 200'000;
  std::string message = "*" + std::to_string(count) + "\r\n";
  for (std::size_t i = 0; i < count; ++i) message += ":" + std::to_string(i) + "\r\n";
  std::vector<std::string_view> chunks;
  for (std::size_t i = 0; i < message.size(); i += 7) chunks.push_back(std::string_view(message).substr(i, 7));
  const outcome r = feed(chunks);
  ASSERT_FALSE(r.ec);
  ASSERT_EQ(r.nodes.size(), count + 1);
  EXPECT_EQ(r.nodes.back(), val(type::integer, std::to_string(count - 1), 1));
  EXPECT_EQ(r.reply_ends, std::vector<std::size_t>{count + 1});
}

TEST(Parser, LongLineBytewise) {
  const std::string text(60 * 1024, 'q');
  const outcome r = feed_bytewise("+" + text + "\r\n");
  ASSERT_FALSE(r.ec);
  EXPECT_EQ(r.nodes, response{val(type::simple_string, text)});
}

// --- Malformed input -------------------------------------------------------------------------

TEST(Parser, MalformedInputIsProtocolError) {
  const std::vector<std::string> malformed = {
      "?x\r\n",          // unknown type byte
      "\r\n",            // no type byte
      ";4\r\nabcd\r\n",  // streamed chunk
      ":12a\r\n",        // bad integers
      ":+5\r\n",
      ":\r\n",
      ":-\r\n",
      ": 1\r\n",
      ":9223372036854775808\r\n",  // int64 overflow
      ":99999999999999999999\r\n",
      ":1-\r\n",
      ":-1a\r\n",
      ":-9223372036854775809\r\n",
      "+OK\n",  // bare LF
      "+O\nK\r\n",
      "+OK\rX",  // CR not followed by LF
      "+OK\r\r\n",
      "$3\r\nabcd\r\n",  // bulk not followed by CRLF
      "$3\r\nabc\n",
      "$3\r\nabc\r\r",
      "$3\r\nabc\nx",
      "$0\r\nx\r\n",
      "#x\r\n",  // bad booleans
      "#tt\r\n",
      "#\r\n",
      "#T\r\n",
      "=3\r\nabc\r\n",    // verbatim too short
      "=5\r\ntxt;a\r\n",  // verbatim without ':' at index 3
      "=-1\r\n",
      "$-2\r\n",  // negative lengths other than -1
      "*-2\r\n",
      "%-1\r\n",
      "~-1\r\n",
      ">-1\r\n",
      "|-1\r\n",
      "!-1\r\n",
      "$-01\r\n",
      "$99999999999999999999999\r\n",  // huge digit strings
      "*123456789012345678901234567890\r\n",
      "$9223372036854775808\r\n",
      "$\r\n",  // bad lengths
      "$ 3\r\n",
      "$3 \r\n",
      "$+3\r\n",
      "*x\r\n",
      "$?\r\n",  // streamed strings and aggregates
      "*?\r\n",
      "_x\r\n",  // bad null
      ",\r\n",   // bad doubles
      ",abc\r\n",
      ",1.5x\r\n",
      "(\r\n",  // bad big numbers
      "(-\r\n",
      "(12x\r\n",
      "*2\r\n:1\r\n?\r\n",  // bad element inside an aggregate
  };
  for (const auto& message : malformed) {
    SCOPED_TRACE(testing::PrintToString(message));
    const outcome whole = feed_whole(message);
    EXPECT_EQ(whole.ec, error::protocol_error);
    EXPECT_TRUE(whole.reply_ends.empty());
    for (std::size_t at = 0; at <= message.size(); ++at) EXPECT_EQ(feed_split(message, at), whole) << "split at " << at;
    EXPECT_EQ(feed_bytewise(message), whole);
  }
}

// --- Limits ----------------------------------------------------------------------------------

struct limit_case {
  std::string message;
  parser_limits limits;
  error_code expected;  // empty: the message is within the limits
};

TEST(Parser, LimitsAreEnforced) {
  const std::vector<limit_case> cases = {
      {"$10\r\n0123456789\r\n", {.max_bulk_length = 10}, {}},
      {"$11\r\n", {.max_bulk_length = 10}, error::reply_too_large},
      {"!11\r\n", {.max_bulk_length = 10}, error::reply_too_large},
      {"=11\r\n", {.max_bulk_length = 10}, error::reply_too_large},
      {"+12345678\r\n", {.max_line_length = 8}, {}},
      {"+123456789\r\n", {.max_line_length = 8}, error::reply_too_large},
      {"-123456789\r\n", {.max_line_length = 8}, error::reply_too_large},
      {":123456789\r\n", {.max_line_length = 8}, error::reply_too_large},
      {"+aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", {.max_line_length = 8}, error::reply_too_large},  // never a CRLF
      {"*1\r\n*1\r\n:1\r\n", {.max_depth = 2}, {}},
      {"*1\r\n*1\r\n*1\r\n:1\r\n", {.max_depth = 2}, error::nesting_too_deep},
      {"*1\r\n%1\r\n*0\r\n:1\r\n", {.max_depth = 2}, error::nesting_too_deep},
      {"*1\r\n|1\r\n*0\r\n:1\r\n:1\r\n", {.max_depth = 2}, error::nesting_too_deep},
      {"*0\r\n", {.max_depth = 0}, error::nesting_too_deep},
      {"*3\r\n:1\r\n:2\r\n:3\r\n", {.max_aggregate_size = 3}, {}},
      {"*4\r\n", {.max_aggregate_size = 3}, error::reply_too_large},
      {"%3\r\n", {.max_aggregate_size = 3}, {}},  // three pairs are three elements
      {"%4\r\n", {.max_aggregate_size = 3}, error::reply_too_large},
      {"~4\r\n", {.max_aggregate_size = 3}, error::reply_too_large},
      {">4\r\n", {.max_aggregate_size = 3}, error::reply_too_large},
      {"|4\r\n", {.max_aggregate_size = 3}, error::reply_too_large},
      {"*2\r\n:1\r\n:2\r\n", {.max_nodes = 3}, {}},
      {"*3\r\n:1\r\n:2\r\n:3\r\n", {.max_nodes = 3}, error::reply_too_large},
      {"|1\r\n+a\r\n+b\r\n+c\r\n", {.max_nodes = 3}, error::reply_too_large},  // attributes count
      {"*1\r\n$5\r\n", {.max_nodes = 1}, error::reply_too_large},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.message));
    const outcome whole = feed_whole(c.message, c.limits);
    EXPECT_EQ(whole.ec, c.expected) << whole.ec.message();
    for (std::size_t at = 0; at <= c.message.size(); ++at) {
      EXPECT_EQ(feed_split(c.message, at, c.limits), whole) << "split at " << at;
    }
    EXPECT_EQ(feed_bytewise(c.message, c.limits), whole);
  }
}

TEST(Parser, NodeLimitIsPerReply) {
  const outcome r = feed_whole("*2\r\n:1\r\n:2\r\n*2\r\n:1\r\n:2\r\n", {.max_nodes = 3});
  EXPECT_FALSE(r.ec);
  EXPECT_EQ(r.reply_ends, (std::vector<std::size_t>{3, 6}));
}

TEST(Parser, LengthLineLimitIsAProtocolError) {
  // A length line cannot hold more than an int64: an endless one is refused early.
  EXPECT_EQ(parse_error("$" + std::string(100, '1')), error::protocol_error);
  EXPECT_EQ(parse_error("*" + std::string(21, '0') + "\r\n"), error::protocol_error);
  EXPECT_FALSE(parse_error("$00000000000000000003\r\nabc\r\n"));  // 20 bytes is still fine
}

TEST(Parser, MaxDepthIsClampedToHardMaximum) {
  const parser p({.max_depth = 1000});
  EXPECT_EQ(p.limits().max_depth, parser::hard_max_depth);
  std::string deepest;
  for (std::size_t i = 0; i < parser::hard_max_depth; ++i) deepest += "*1\r\n";
  deepest += ":1\r\n";
  const outcome ok = feed_whole(deepest, {.max_depth = 1000});
  EXPECT_FALSE(ok.ec);
  EXPECT_EQ(ok.nodes.back(), val(type::integer, "1", parser::hard_max_depth));
  EXPECT_EQ(parse_error("*1\r\n" + deepest, {.max_depth = 1000}), error::nesting_too_deep);
}

TEST(Parser, DefaultLimits) {
  const parser p;
  EXPECT_EQ(p.limits().max_bulk_length, 64u * 1024 * 1024);
  EXPECT_EQ(p.limits().max_line_length, 64u * 1024);
  EXPECT_EQ(p.limits().max_depth, 16u);
  EXPECT_EQ(p.limits().max_aggregate_size, 1024u * 1024);
  EXPECT_EQ(p.limits().max_nodes, 4u * 1024 * 1024);
}

TEST(Parser, DeclaredSizesAreNotAllocated) {
  constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
  {
    parser p;
    response out;
    error_code ec;
    largest_allocation = 0;
    p.consume("$999999999999\r\n", out, ec);
    EXPECT_EQ(ec, error::reply_too_large);
    EXPECT_LT(largest_allocation.load(), 4096u);
  }
  {
    // Even when allowed, a declared length or count is not reserved: memory follows the bytes received.
    parser p({.max_bulk_length = unlimited, .max_aggregate_size = unlimited});
    response out;
    error_code ec;
    largest_allocation = 0;
    EXPECT_EQ(p.consume("$999999999999\r\nab", out, ec), 17u);
    EXPECT_FALSE(ec);
    EXPECT_FALSE(p.done());
    EXPECT_LT(largest_allocation.load(), 4096u);
    p.reset();
    out.clear();
    largest_allocation = 0;
    EXPECT_EQ(p.consume("*1000000000\r\n%1000000000\r\n", out, ec), 26u);
    EXPECT_FALSE(ec);
    EXPECT_LT(largest_allocation.load(), 4096u);
  }
}

// --- Error state and reset -------------------------------------------------------------------

TEST(Parser, ErrorPersistsUntilReset) {
  parser p;
  response out;
  error_code ec;
  p.consume("*2\r\n:1\r\n:x\r\n", out, ec);
  EXPECT_EQ(ec, error::protocol_error);
  EXPECT_FALSE(p.done());
  ec = {};
  EXPECT_EQ(p.consume("+OK\r\n", out, ec), 0u);
  EXPECT_EQ(ec, error::protocol_error);
  EXPECT_EQ(p.consume("", out, ec), 0u);
  EXPECT_EQ(ec, error::protocol_error);
  p.reset();
  out.clear();
  EXPECT_EQ(p.consume("+OK\r\n", out, ec), 5u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, response{val(type::simple_string, "OK")});
}

TEST(Parser, LimitErrorPersistsUntilReset) {
  parser p({.max_depth = 1});
  response out;
  error_code ec;
  p.consume("*1\r\n*1\r\n", out, ec);
  EXPECT_EQ(ec, error::nesting_too_deep);
  EXPECT_EQ(p.consume("*1\r\n:1\r\n", out, ec), 0u);
  EXPECT_EQ(ec, error::nesting_too_deep);
  p.reset();
  out.clear();
  EXPECT_EQ(p.consume("*1\r\n:1\r\n", out, ec), 8u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.done());
}

TEST(Parser, ResetDropsPartialReply) {
  parser p;
  response out;
  error_code ec;
  p.consume("*2\r\n:1\r\n$10\r\nabc", out, ec);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(p.done());
  p.reset();
  out.clear();
  EXPECT_EQ(p.consume(":7\r\n", out, ec), 4u);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(out, response{val(type::integer, "7")});
}

TEST(Parser, ErrorCodesMapToNodeFailure) {
  EXPECT_EQ(parse_error("?"), condition::master_failure);
  EXPECT_EQ(parse_error("$11\r\n", {.max_bulk_length = 10}), condition::master_failure);
}

}  // namespace
}  // namespace redlock::resp
