// SPDX-License-Identifier: BSL-1.0
#include "transcript.hpp"
#include <redlock/core/outcome.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace {

using namespace redlock::test;
using redlock::master_result;
using redlock::master_status;
using redlock::to_string;
using redlock::core::classify;
using redlock::core::command;
using redlock::core::counts_as_yes;
using redlock::core::is_noscript;
using redlock::core::majority;
using redlock::core::quorum_state;
using redlock::core::round_table;
namespace resp = redlock::resp;

const char* name(command c) {
  switch (c) {
    case command::acquire:
      return "acquire";
    case command::extend:
      return "extend";
    case command::release:
      return "release";
    case command::acquire_fair:
      return "acquire_fair";
    case command::confirm:
      return "confirm";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// classify: clean replies

struct reply_case {
  command cmd;
  resp::response reply;
  master_status status;
  bool unexpected;  // failed with error::unexpected_reply
  const char* what;
};

class classify_reply : public ::testing::TestWithParam<reply_case> {};

TEST_P(classify_reply, means_what_the_command_says) {
  const auto& c = GetParam();
  const master_result r = classify(c.cmd, {}, c.reply);
  EXPECT_EQ(to_string(r.status), to_string(c.status)) << name(c.cmd) << ": " << c.what;
  if (c.unexpected) {
    EXPECT_EQ(r.error, redlock::error::unexpected_reply) << c.what;
  } else {
    EXPECT_FALSE(r.error) << c.what << ": " << describe(r.error);
  }
  EXPECT_TRUE(r.server_text.empty());
  EXPECT_EQ(r.latency, std::chrono::microseconds{0});  // set by the round table, not here
}

// A RESP3 attribute (metadata) in front of the value it describes.
resp::response with_attribute(resp::node value) {
  return {{resp::type::attribute, 1, 0, ""},
          {resp::type::simple_string, 0, 1, "key"},
          {resp::type::simple_string, 0, 1, "meta"},
          std::move(value)};
}

const reply_case reply_cases[] = {
    // SET NX PX: +OK granted, nil taken, anything else is garbage.
    {command::acquire, ok_reply(), master_status::granted, false, "+OK"},
    {command::acquire, nil_reply(), master_status::taken, false, "nil"},
    {command::acquire, int_reply("1"), master_status::failed, true, "integer 1 is not +OK"},
    {command::acquire, int_reply("0"), master_status::failed, true, "integer 0 is not nil"},
    {command::acquire, {{resp::type::simple_string, 0, 0, "QUEUED"}}, master_status::failed, true, "+QUEUED"},
    {command::acquire, {{resp::type::simple_string, 0, 0, "ok"}}, master_status::failed, true, "+ok (case)"},
    {command::acquire, no_reply(), master_status::failed, true, "no node at all"},
    {command::acquire, with_attribute({resp::type::simple_string, 0, 0, "OK"}), master_status::granted, false,
     "attribute then +OK"},
    {command::acquire, error_reply("ERR x"), master_status::failed, true, "error node without server_error ec"},
    // The extend script: 1 granted, 0 taken.
    {command::extend, int_reply("1"), master_status::granted, false, ":1"},
    {command::extend, int_reply("0"), master_status::taken, false, ":0"},
    {command::extend, int_reply("2"), master_status::failed, true, ":2"},
    {command::extend, int_reply("-1"), master_status::failed, true, ":-1"},
    {command::extend, ok_reply(), master_status::failed, true, "+OK to a script"},
    {command::extend, nil_reply(), master_status::failed, true, "nil to a script"},
    {command::extend, {{resp::type::blob_string, 0, 0, "1"}}, master_status::failed, true, "$1 \"1\" (not integer)"},
    {command::extend, no_reply(), master_status::failed, true, "no node at all"},
    {command::extend, with_attribute({resp::type::integer, 0, 0, "1"}), master_status::granted, false,
     "attribute then :1"},
    // The release script: 1 granted, 0 taken.
    {command::release, int_reply("1"), master_status::granted, false, ":1"},
    {command::release, int_reply("0"), master_status::taken, false, ":0"},
    {command::release, int_reply("3"), master_status::failed, true, ":3"},
    {command::release, ok_reply(), master_status::failed, true, "+OK to a script"},
    {command::release, nil_reply(), master_status::failed, true, "nil to a script"},
    {command::release, no_reply(), master_status::failed, true, "no node at all"},
};

INSTANTIATE_TEST_SUITE_P(outcome, classify_reply, ::testing::ValuesIn(reply_cases));

// ---------------------------------------------------------------------------------------------
// classify: errors

constexpr command all_commands[] = {command::acquire, command::extend, command::release};

TEST(classify, server_error_keeps_the_servers_text) {
  for (const command cmd : all_commands) {
    const auto r = classify(cmd, redlock::error::server_error, error_reply("WRONGTYPE Operation against a key"));
    EXPECT_EQ(r.status, master_status::server_error) << name(cmd);
    EXPECT_EQ(r.error, redlock::error::server_error) << name(cmd);
    EXPECT_EQ(r.server_text, "WRONGTYPE Operation against a key") << name(cmd);
  }
}

TEST(classify, server_error_with_a_blob_error_or_no_node) {
  const auto blob =
      classify(command::acquire, redlock::error::server_error, {{resp::type::blob_error, 0, 0, "ERR binary\r\ntext"}});
  EXPECT_EQ(blob.status, master_status::server_error);
  EXPECT_EQ(blob.server_text, "ERR binary\r\ntext");
  const auto none = classify(command::release, redlock::error::server_error, no_reply());
  EXPECT_EQ(none.status, master_status::server_error);
  EXPECT_TRUE(none.server_text.empty());
}

struct error_case {
  boost::system::error_code ec;
  master_status status;
};

TEST(classify, each_error_kind_has_its_status) {
  const error_case cases[] = {
      {redlock::error::master_timeout, master_status::timeout},
      {redlock::error::not_connected, master_status::unreachable},
      {redlock::error::connection_lost, master_status::failed},
      {redlock::error::protocol_error, master_status::failed},
      {redlock::error::reply_too_large, master_status::failed},
      {boost::asio::error::operation_aborted, master_status::failed},
      {boost::asio::error::connection_reset, master_status::failed},
  };
  for (const command cmd : all_commands) {
    for (const auto& c : cases) {
      const auto r = classify(cmd, c.ec, no_reply());
      EXPECT_EQ(to_string(r.status), to_string(c.status)) << name(cmd) << " " << describe(c.ec);
      EXPECT_EQ(r.error, c.ec) << name(cmd) << " " << describe(c.ec);  // the cause is kept
      EXPECT_TRUE(r.server_text.empty());
    }
  }
}

// An error wins over whatever reply bytes came with it: a reply that arrived after the deadline
// (or on a broken connection) is not a vote.
TEST(classify, an_error_wins_over_a_yes_reply) {
  EXPECT_EQ(classify(command::acquire, redlock::error::master_timeout, ok_reply()).status, master_status::timeout);
  EXPECT_EQ(classify(command::extend, redlock::error::connection_lost, int_reply("1")).status, master_status::failed);
  EXPECT_EQ(classify(command::release, redlock::error::not_connected, int_reply("1")).status,
            master_status::unreachable);
  EXPECT_EQ(classify(command::acquire, redlock::error::server_error, ok_reply()).status, master_status::server_error);
}

// ---------------------------------------------------------------------------------------------
// is_noscript

TEST(is_noscript, only_a_server_error_starting_with_noscript) {
  EXPECT_TRUE(is_noscript(redlock::error::server_error, error_reply("NOSCRIPT No matching script. Use EVAL.")));
  EXPECT_TRUE(is_noscript(redlock::error::server_error, {{resp::type::blob_error, 0, 0, "NOSCRIPT x"}}));
  EXPECT_TRUE(is_noscript(redlock::error::server_error, error_reply("NOSCRIPT")));
  EXPECT_FALSE(is_noscript(redlock::error::server_error, error_reply("NOSCRIP")));
  EXPECT_FALSE(is_noscript(redlock::error::server_error, error_reply("ERR NOSCRIPT inside")));
  EXPECT_FALSE(is_noscript(redlock::error::server_error, error_reply("WRONGTYPE Operation")));
  EXPECT_FALSE(is_noscript(redlock::error::server_error, no_reply()));
  // The text alone is not enough: the connection layer says it is an error reply.
  EXPECT_FALSE(is_noscript({}, error_reply("NOSCRIPT No matching script.")));
  EXPECT_FALSE(is_noscript(redlock::error::connection_lost, error_reply("NOSCRIPT No matching script.")));
  EXPECT_FALSE(is_noscript(redlock::error::master_timeout, error_reply("NOSCRIPT No matching script.")));
}

// ---------------------------------------------------------------------------------------------
// counts_as_yes

TEST(counts_as_yes, granted_always_taken_only_for_release) {
  const master_status all[] = {master_status::pending,      master_status::granted, master_status::taken,
                               master_status::server_error, master_status::timeout, master_status::unreachable,
                               master_status::failed};
  for (const command cmd : all_commands) {
    for (const auto s : all) {
      const bool expected = s == master_status::granted || (cmd == command::release && s == master_status::taken);
      EXPECT_EQ(counts_as_yes(cmd, s), expected) << name(cmd) << " " << to_string(s);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// round_table: quorum over N = 1, 3, 5

master_result answer(master_status s) {
  master_result r;
  r.status = s;
  return r;
}

struct round_case {
  const char* name;
  command cmd;
  std::vector<master_status> answers;  // master i answers answers[i], at t0 + 10ms * (i + 1)
  quorum_state decision;
  std::size_t decisive;  // index of the answer that decides
};

std::ostream& operator<<(std::ostream& os, const round_case& c) { return os << c.name; }

class round_quorum : public ::testing::TestWithParam<round_case> {};

constexpr auto G = master_status::granted;
constexpr auto T = master_status::taken;
constexpr auto O = master_status::timeout;
constexpr auto F = master_status::failed;
constexpr auto U = master_status::unreachable;
constexpr auto E = master_status::server_error;

const round_case round_cases[] = {
    {"n1_granted", command::acquire, {G}, quorum_state::reached, 0},
    {"n1_taken", command::acquire, {T}, quorum_state::impossible, 0},
    {"n1_timeout", command::acquire, {O}, quorum_state::impossible, 0},
    {"n1_release_taken_is_yes", command::release, {T}, quorum_state::reached, 0},
    {"n3_two_grants", command::acquire, {G, G, T}, quorum_state::reached, 1},
    {"n3_tie_then_grant", command::acquire, {G, T, G}, quorum_state::reached, 2},
    {"n3_tie_then_taken", command::acquire, {T, G, T}, quorum_state::impossible, 2},
    {"n3_two_failures", command::acquire, {O, F, G}, quorum_state::impossible, 1},
    {"n3_extend_taken_is_no", command::extend, {G, T, T}, quorum_state::impossible, 2},
    {"n3_release_clean_answers", command::release, {T, G, O}, quorum_state::reached, 1},
    {"n3_release_failures", command::release, {U, G, E}, quorum_state::impossible, 2},
    {"n5_three_grants_first", command::acquire, {G, G, G, T, T}, quorum_state::reached, 2},
    {"n5_two_two_then_grant", command::acquire, {G, T, G, O, G}, quorum_state::reached, 4},
    {"n5_two_two_then_no", command::acquire, {G, T, G, O, U}, quorum_state::impossible, 4},
    {"n5_three_noes_first", command::acquire, {T, O, E, G, G}, quorum_state::impossible, 2},
    {"n5_extend", command::extend, {G, F, G, G, T}, quorum_state::reached, 3},
    {"n5_release_taken_counts", command::release, {T, T, E, T, G}, quorum_state::reached, 3},
};

TEST_P(round_quorum, decided_at_the_first_decisive_answer_and_not_before) {
  const auto& c = GetParam();
  const std::size_t n = c.answers.size();
  round_table table;
  table.begin(c.cmd, n, at(0ms));
  EXPECT_EQ(table.size(), n);
  EXPECT_EQ(table.cmd(), c.cmd);
  for (std::size_t i = 0; i < n; ++i) {
    const auto when = at(10ms * static_cast<int>(i + 1));
    const bool decided_now = table.record(i, answer(c.answers[i]), when);
    EXPECT_EQ(decided_now, i == c.decisive) << "answer " << i;
    EXPECT_EQ(table.decided(), i >= c.decisive) << "answer " << i;
    EXPECT_EQ(table.state(), i >= c.decisive ? c.decision : quorum_state::pending) << "answer " << i;
    // Late answers are still recorded for the report, but change neither decision nor its time.
    if (i >= c.decisive) {
      EXPECT_EQ(describe(table.decided_at()), describe(at(10ms * static_cast<int>(c.decisive + 1))));
    }
    EXPECT_EQ(table.results()[i].latency, std::chrono::duration_cast<std::chrono::microseconds>(when - at(0ms)));
  }
  // A majority decides; the count needed is N / 2 + 1.
  const std::size_t yes = static_cast<std::size_t>(
      std::count_if(c.answers.begin(), c.answers.begin() + static_cast<std::ptrdiff_t>(c.decisive) + 1,
                    [&](master_status s) { return counts_as_yes(c.cmd, s); }));
  if (c.decision == quorum_state::reached) {
    EXPECT_EQ(yes, majority(n));
  } else {
    EXPECT_EQ(c.decisive + 1 - yes, n - majority(n) + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(outcome, round_quorum, ::testing::ValuesIn(round_cases),
                         [](const auto& tpi) { return std::string{tpi.param.name}; });

class round_sizes : public ::testing::TestWithParam<std::size_t> {};

// Only yes answers: reached exactly at the majority-th, never earlier.
TEST_P(round_sizes, all_yes_reaches_at_the_majority) {
  const std::size_t n = GetParam();
  round_table table;
  table.begin(command::acquire, n, at(0ms));
  for (std::size_t i = 0; i < n; ++i) {
    const bool decided = table.record(i, answer(G), at(1ms * static_cast<int>(i + 1)));
    EXPECT_EQ(decided, i + 1 == majority(n)) << "n=" << n << " i=" << i;
    EXPECT_EQ(table.state(), i + 1 >= majority(n) ? quorum_state::reached : quorum_state::pending);
  }
  EXPECT_EQ(table.count(G), n);
}

// Only failures: impossible as soon as a majority can no longer say yes.
TEST_P(round_sizes, all_no_is_impossible_once_a_majority_cannot_say_yes) {
  const std::size_t n = GetParam();
  round_table table;
  table.begin(command::acquire, n, at(0ms));
  const std::size_t noes_needed = n - majority(n) + 1;
  for (std::size_t i = 0; i < n; ++i) {
    const bool decided = table.record(i, answer(O), at(1ms * static_cast<int>(i + 1)));
    EXPECT_EQ(decided, i + 1 == noes_needed) << "n=" << n << " i=" << i;
    EXPECT_EQ(table.state(), i + 1 >= noes_needed ? quorum_state::impossible : quorum_state::pending);
  }
}

// A yes after "impossible", or noes after "reached", do not flip the decision.
TEST_P(round_sizes, late_answers_do_not_change_the_decision) {
  const std::size_t n = GetParam();
  {
    round_table table;
    table.begin(command::acquire, n, at(0ms));
    std::size_t i = 0;
    for (; !table.decided(); ++i) table.record(i, answer(T), at(1ms));
    for (; i < n; ++i) EXPECT_FALSE(table.record(i, answer(G), at(2ms)));
    EXPECT_EQ(table.state(), quorum_state::impossible);
    EXPECT_EQ(table.decided_at(), at(1ms));
  }
  {
    round_table table;
    table.begin(command::acquire, n, at(0ms));
    std::size_t i = 0;
    for (; !table.decided(); ++i) table.record(i, answer(G), at(1ms));
    for (; i < n; ++i) EXPECT_FALSE(table.record(i, answer(F), at(2ms)));
    EXPECT_EQ(table.state(), quorum_state::reached);
    EXPECT_EQ(table.decided_at(), at(1ms));
  }
}

INSTANTIATE_TEST_SUITE_P(outcome, round_sizes, ::testing::Values(1u, 3u, 5u));

TEST(round_table, a_second_answer_from_the_same_master_is_ignored) {
  round_table table;
  table.begin(command::acquire, 3, at(0ms));
  EXPECT_FALSE(table.record(1, answer(G), at(5ms)));
  EXPECT_FALSE(table.record(1, answer(G), at(6ms)));  // would be the second yes of a majority
  EXPECT_FALSE(table.decided());
  EXPECT_EQ(table.state(), quorum_state::pending);
  EXPECT_FALSE(table.record(1, answer(T), at(7ms)));
  EXPECT_EQ(table.results()[1].status, G);  // the first answer stays
  EXPECT_EQ(table.results()[1].latency, std::chrono::microseconds{5ms});
  EXPECT_EQ(table.count(G), 1u);
  EXPECT_TRUE(table.record(2, answer(G), at(8ms)));
}

TEST(round_table, an_index_out_of_range_is_ignored) {
  round_table table;
  table.begin(command::acquire, 3, at(0ms));
  EXPECT_FALSE(table.record(3, answer(G), at(1ms)));
  EXPECT_FALSE(table.record(99, answer(G), at(1ms)));
  EXPECT_FALSE(table.record(0, answer(G), at(1ms)));
  EXPECT_EQ(table.count(G), 1u);
  EXPECT_EQ(table.state(), quorum_state::pending);
}

TEST(round_table, latency_counts_from_the_round_start) {
  round_table table;
  table.begin(command::extend, 3, at(100ms));
  EXPECT_EQ(table.start(), at(100ms));
  table.record(2, answer(G), at(130ms));
  table.record(0, answer(T), at(100ms) + 1500us);
  EXPECT_EQ(table.results()[2].latency, 30'000us);
  EXPECT_EQ(table.results()[0].latency, 1'500us);
  EXPECT_EQ(table.results()[1].latency, 0us);  // no answer yet
  EXPECT_EQ(table.results()[1].status, master_status::pending);
}

TEST(round_table, a_pending_answer_is_recorded_as_failed) {
  round_table table;
  table.begin(command::acquire, 1, at(0ms));
  EXPECT_TRUE(table.record(0, answer(master_status::pending), at(1ms)));
  EXPECT_EQ(table.results()[0].status, F);
  EXPECT_EQ(table.state(), quorum_state::impossible);
}

TEST(round_table, keeps_the_classified_detail) {
  round_table table;
  table.begin(command::acquire, 3, at(0ms));
  table.record(0, classify(command::acquire, redlock::error::server_error, error_reply("OOM command not allowed")),
               at(1ms));
  EXPECT_EQ(table.results()[0].status, E);
  EXPECT_EQ(table.results()[0].server_text, "OOM command not allowed");
  EXPECT_EQ(table.results()[0].error, redlock::error::server_error);
  EXPECT_TRUE(table.any(E));
  EXPECT_FALSE(table.any(T));
}

TEST(round_table, begin_starts_a_fresh_round) {
  round_table table;
  table.begin(command::acquire, 3, at(0ms));
  table.record(0, answer(G), at(1ms));
  table.record(1, answer(G), at(2ms));
  ASSERT_TRUE(table.decided());
  table.begin(command::release, 5, at(10ms));
  EXPECT_FALSE(table.decided());
  EXPECT_EQ(table.state(), quorum_state::pending);
  EXPECT_EQ(table.size(), 5u);
  EXPECT_EQ(table.cmd(), command::release);
  EXPECT_EQ(table.start(), at(10ms));
  EXPECT_EQ(table.count(master_status::pending), 5u);
  // The new round needs its own majority: the old yes votes do not count.
  EXPECT_FALSE(table.record(0, answer(T), at(11ms)));
  EXPECT_FALSE(table.record(1, answer(T), at(12ms)));
  EXPECT_TRUE(table.record(2, answer(T), at(13ms)));
  EXPECT_EQ(table.state(), quorum_state::reached);
}

}  // namespace
