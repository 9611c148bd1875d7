// SPDX-License-Identifier: BSL-1.0
// Many plain extensions in one call (redlock/core/extend_batch.hpp): which kinds' extensions may
// join one, the bytes of the call, and how strictly its answer is read. The expected bytes are
// written out here by hand, not with the library's encoder.

#include <redlock/core/extend_batch.hpp>
#include <redlock/core/kind_spec.hpp>
#include <redlock/detail/scripts.hpp>

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace {

using redlock::core::extend_batch;
using redlock::core::extend_many_answer;
using redlock::core::joins_extend_many;
using redlock::core::read_extend_many;
using redlock::resp::node;
using redlock::resp::response;
using redlock::resp::type;
namespace kinds = redlock::core::kinds;

std::string bulk(std::string_view s) { return "$" + std::to_string(s.size()) + "\r\n" + std::string{s} + "\r\n"; }

TEST(extend_batch, only_the_kinds_that_extend_with_the_plain_script_join) {
  EXPECT_TRUE(joins_extend_many(kinds::plain.extend));
  EXPECT_TRUE(joins_extend_many(kinds::fenced.extend));
  EXPECT_TRUE(joins_extend_many(kinds::writer.extend));
  EXPECT_FALSE(joins_extend_many(kinds::reentrant.extend));
  EXPECT_FALSE(joins_extend_many(kinds::reader.extend));
  EXPECT_FALSE(joins_extend_many(kinds::semaphore.extend));
  EXPECT_FALSE(joins_extend_many(kinds::multi.extend));
  // The same script with other arguments would be read wrongly by the batch script.
  auto swapped = kinds::plain.extend;
  swapped.args[0] = redlock::core::arg_ref::ttl;
  swapped.args[1] = redlock::core::arg_ref::token;
  EXPECT_FALSE(joins_extend_many(swapped));
}

TEST(extend_batch, keys_come_first_then_each_token_with_its_own_ttl) {
  extend_batch b;
  std::string out = "before";
  b.encode(out);
  EXPECT_EQ(out, "before");  // nothing when empty
  b.add("k:a", "tok-a", 3000);
  b.add("k:b", std::string_view{"t\0b", 3}, 12);
  EXPECT_EQ(b.size(), 2u);
  b.encode(out);
  const auto& sha = redlock::detail::extend_many_script.sha1;
  EXPECT_EQ(out, "before*9\r\n" + bulk("EVALSHA") + bulk(sha) + bulk("2") + bulk("k:a") + bulk("k:b") + bulk("tok-a") +
                     bulk("3000") + bulk(std::string_view{"t\0b", 3}) + bulk("12"));
  std::string eval;
  b.encode(eval, false);
  EXPECT_EQ(eval.substr(0, 4 + bulk("EVAL").size()), "*9\r\n" + bulk("EVAL"));
  EXPECT_NE(eval.find(bulk(redlock::detail::extend_many_script.body)), std::string::npos);
  b.clear();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.bytes(), 0u);
  b.add("k:c", "c", 5);
  std::string one;
  b.encode(one);
  EXPECT_EQ(one, "*6\r\n" + bulk("EVALSHA") + bulk(sha) + bulk("1") + bulk("k:c") + bulk("c") + bulk("5"));
}

node at(type t, std::size_t depth, std::string v = {}, std::size_t size = 0) {
  return node{t, size, depth, std::move(v)};
}

TEST(extend_batch, an_answer_of_ones_zeros_and_errors_is_one_a_key) {
  const response r{at(type::integer, 0, "7"),  // an answer before it
                   at(type::array, 0, {}, 3), at(type::integer, 1, "1"), at(type::simple_error, 1, "WRONGTYPE x"),
                   at(type::integer, 1, "0"), at(type::array, 0, {}, 2)};  // TIME's after it
  EXPECT_EQ(read_extend_many(r, 1, 3), extend_many_answer::elements);
  EXPECT_EQ(read_extend_many(r, 1, 2), extend_many_answer::malformed);  // not the count sent
  EXPECT_EQ(read_extend_many(r, 1, 4), extend_many_answer::malformed);
}

TEST(extend_batch, anything_else_is_not_read_as_answers) {
  const auto one_of = [](node e) { return response{at(type::array, 0, {}, 1), std::move(e)}; };
  EXPECT_EQ(read_extend_many(one_of(at(type::integer, 1, "2")), 0, 1), extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many(one_of(at(type::integer, 1, "-1")), 0, 1), extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many(one_of(at(type::blob_string, 1, "1")), 0, 1), extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many(one_of(at(type::null, 1)), 0, 1), extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many(one_of(at(type::blob_error, 1, "ERR x")), 0, 1), extend_many_answer::elements);
  // An aggregate among the elements, or a set instead of an array.
  EXPECT_EQ(read_extend_many({at(type::array, 0, {}, 1), at(type::array, 1, {}, 1), at(type::integer, 2, "1")}, 0, 1),
            extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many({at(type::set, 0, {}, 1), at(type::integer, 1, "1")}, 0, 1),
            extend_many_answer::malformed);
  // Cut short, or nothing there.
  EXPECT_EQ(read_extend_many({at(type::array, 0, {}, 2), at(type::integer, 1, "1")}, 0, 2),
            extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many({}, 0, 1), extend_many_answer::malformed);
  EXPECT_EQ(read_extend_many({at(type::integer, 0, "1")}, 0, 1), extend_many_answer::malformed);
}

TEST(extend_batch, a_top_level_error_is_the_whole_call_s) {
  EXPECT_EQ(read_extend_many({at(type::simple_error, 0, "NOSCRIPT No matching script.")}, 0, 3),
            extend_many_answer::noscript);
  EXPECT_EQ(read_extend_many({at(type::simple_error, 0, "NOPERM this user has no permissions")}, 0, 3),
            extend_many_answer::refused);
  EXPECT_EQ(read_extend_many({at(type::blob_error, 0, "ERR extend_many: two ARGV per key")}, 0, 3),
            extend_many_answer::refused);
}

}  // namespace
