// SPDX-License-Identifier: BSL-1.0
// The words of the `redlock` tool for what masters answered (output.hpp) and the verdict of
// `redlock status` over every kind of lock (status_view.hpp): pure functions, on made-up answers.

#include "output.hpp"
#include "status_view.hpp"
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using redlock::master_result;
using redlock::master_status;
using redlock::quorum_report;
using namespace redlock::cli;

master_result answer(master_status s, boost::system::error_code e = {}, std::string text = {}) {
  master_result r;
  r.status = s;
  r.error = e;
  r.server_text = std::move(text);
  return r;
}

// A failing master always has a reason: never empty, never "Success" (what an empty error code
// says). Catches a master still connecting printed as "unreachable: Success".
TEST(cli_words, a_failing_master_always_has_a_reason) {
  for (const auto s :
       {master_status::unreachable, master_status::timeout, master_status::failed, master_status::server_error}) {
    const auto why = master_reason(answer(s));
    EXPECT_FALSE(why.empty()) << to_string(s);
    EXPECT_EQ(why.find("Success"), std::string::npos) << to_string(s);
  }
  EXPECT_EQ(master_reason(answer(master_status::unreachable)), "still connecting");
  EXPECT_EQ(master_reason(answer(master_status::unreachable, redlock::error::not_connected)), "still connecting");
  EXPECT_EQ(master_reason(master_status::pending, {}, {}), "still connecting");
  EXPECT_EQ(master_reason(answer(master_status::unreachable, boost::asio::error::connection_refused)),
            "Connection refused");
  EXPECT_EQ(master_reason(answer(master_status::server_error, redlock::error::server_error, "ERR no\x01")),
            "ERR no\\x01");
  EXPECT_EQ(master_reason(answer(master_status::unreachable, redlock::error::auth_failed, "WRONGPASS")),
            redlock::make_error_code(redlock::error::auth_failed).message() + " (WRONGPASS)");
  EXPECT_EQ(master_reason(answer(master_status::granted)), "");
  EXPECT_EQ(master_reason(answer(master_status::pending)), "");
}

// A release's and an extension's answers are named for what they did, not "granted".
TEST(cli_words, statuses_are_named_for_their_step) {
  EXPECT_EQ(status_name(master_status::granted, step_kind::acquire), "granted");
  EXPECT_EQ(status_name(master_status::granted, step_kind::release), "released");
  EXPECT_EQ(status_name(master_status::taken, step_kind::release), "not_held");
  EXPECT_EQ(status_name(master_status::granted, step_kind::extend), "extended");
  EXPECT_EQ(status_name(master_status::taken, step_kind::extend), "not_held");
  EXPECT_EQ(status_name(master_status::timeout, step_kind::release), "timeout");
  EXPECT_EQ(status_words(master_status::taken, step_kind::release), "not held");
  EXPECT_EQ(status_words(master_status::pending, step_kind::acquire), "still pending");
  EXPECT_EQ(status_words(master_status::server_error, step_kind::acquire), "server error");
  EXPECT_EQ(master_label(0, "10.0.0.1:7001"), "master 1 (10.0.0.1:7001)");
}

// Counted answers: every master in exactly one count, and the text says each that is not zero.
TEST(cli_words, answers_are_counted_as_they_were_when_the_outcome_was_decided) {
  const std::vector<master_result> round{answer(master_status::taken), answer(master_status::taken),
                                         answer(master_status::taken), answer(master_status::pending),
                                         answer(master_status::pending)};
  const auto c = count_answers(round);
  EXPECT_EQ(c.taken, 3u);
  EXPECT_EQ(c.pending, 2u);
  EXPECT_EQ(c.answered(), 3u);
  EXPECT_EQ(answers_text(c, 5, "queued behind readers"), "5 masters: 3 taken, 2 still pending");
  const std::vector<master_result> writer{answer(master_status::queued), answer(master_status::queued),
                                          answer(master_status::unreachable)};
  EXPECT_EQ(answers_text(count_answers(writer), 3, "queued behind readers"),
            "3 masters: 2 queued behind readers, 1 failed");
}

quorum_report report_of(std::size_t masters, std::size_t needed) {
  quorum_report r;
  r.masters = masters;
  r.needed = needed;
  return r;
}

quorum_report::master failing(std::size_t index, master_status s, boost::system::error_code e = {}) {
  quorum_report::master m;
  m.index = index;
  m.address = "10.0.0." + std::to_string(index + 1) + ":7001";
  m.status = s;
  m.error = e;
  return m;
}

// "usable" against "needed", and answered / still pending / failed told apart. Catches "0 of 5
// answered, 3 needed" for two healthy masters still pending, and "3 of 5 masters could not be used
// (3 needed)".
TEST(cli_words, unavailable_and_readiness_say_usable_against_needed) {
  auto rep = report_of(5, 3);
  for (std::size_t i : {2u, 3u, 4u}) {
    rep.failing.push_back(failing(i, master_status::unreachable, boost::asio::error::connection_refused));
  }
  answer_counts c;
  c.pending = 2;
  c.failed = 3;
  const std::string three =
      "master 3 (10.0.0.3:7001) unreachable: Connection refused; master 4 (10.0.0.4:7001) unreachable: Connection "
      "refused; master 5 (10.0.0.5:7001) unreachable: Connection refused";
  EXPECT_EQ(unavailable_text(rep, c),
            "at most 2 of 5 masters usable, 3 needed (0 answered, 2 still pending, 3 failed: " + three + ")");
  c.pending = 0;
  c.taken = 2;
  EXPECT_EQ(unavailable_text(rep, c),
            "only 2 of 5 masters usable, 3 needed (2 answered, 0 still pending, 3 failed: " + three + ")");
  EXPECT_EQ(readiness_text(rep), "2 of 5 masters connected, 3 needed (3 failed: " + three + ")");
  rep.failing.insert(rep.failing.begin(), failing(0, master_status::pending));
  EXPECT_EQ(readiness_text(rep), "1 of 5 masters connected, 3 needed (3 failed: " + three +
                                     "; 1 still connecting: master 1 (10.0.0.1:7001))");
  EXPECT_EQ(readiness_text(report_of(3, 2)), "3 of 3 masters connected, 2 needed");
}

master_view token_view(const std::string& token, std::int64_t pttl = 10000) {
  master_view m;
  m.answered = m.reachable = m.exists = true;
  m.shape = key_shape::token;
  m.value = token;
  m.pttl = pttl;
  return m;
}

master_view set_view(key_shape shape, std::vector<std::string> ids, std::int64_t pttl = 10000) {
  master_view m;
  m.answered = m.reachable = m.exists = true;
  m.shape = shape;
  m.pttl = pttl;
  if (shape == key_shape::readers) m.value = "redlock:readers";
  for (auto& id : ids) m.members.push_back({std::move(id), pttl});
  return m;
}

master_view down_view() {
  master_view m;
  m.error = "Connection refused";
  return m;
}

// Each kind's verdict: a token on a majority, readers each on a majority behind the marker, a
// semaphore's holders each on its quorum; else free, split or unavailable.
TEST(cli_words, the_verdict_over_every_kind) {
  auto v = decide({token_view("aaaa"), token_view("aaaa", 5000), down_view()});
  EXPECT_EQ(v.state, "held");
  EXPECT_EQ(v.kind, "exclusive");
  EXPECT_EQ(v.holders, 2u);
  EXPECT_EQ(*v.expires_in, 5000);  // the majority-th longest-lived key

  v = decide({set_view(key_shape::readers, {"r1", "r2"}), set_view(key_shape::readers, {"r1"}),
              set_view(key_shape::readers, {"r2", "r3"})});
  EXPECT_EQ(v.state, "held");
  EXPECT_EQ(v.kind, "read");
  EXPECT_EQ(v.readers, 2u);  // r3 is on one master only

  // 3 masters, 2 permits: each holder needs all three.
  std::vector<master_view> sem{set_view(key_shape::semaphore, {"h1", "h2"}), set_view(key_shape::semaphore, {"h1"}),
                               set_view(key_shape::semaphore, {"h1", "h2"})};
  for (auto& m : sem) m.permits = 2;
  v = decide(sem);
  EXPECT_EQ(v.state, "held");
  EXPECT_EQ(v.kind, "semaphore");
  EXPECT_EQ(v.semaphore_quorum, 3u);
  EXPECT_EQ(v.in_use, std::vector<std::string>{"h1"});
  EXPECT_EQ(v.exit, 0);
  const auto text = status_text("s", "s", v, sem, false);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "'s' is held: 1 of 2 permits in use (h1; semaphore quorum 3 of 3 masters)");

  sem[1].members.clear();
  sem[2].members.clear();
  v = decide(sem);
  EXPECT_EQ(v.state, "split");
  EXPECT_EQ(v.exit, 2);

  master_view none;
  none.answered = none.reachable = true;
  v = decide({none, none, down_view()});
  EXPECT_EQ(v.state, "free");
  EXPECT_EQ(v.kind, "");
  v = decide({none, down_view(), down_view()});
  EXPECT_EQ(v.state, "unavailable");
  EXPECT_EQ(v.exit, 69);
}

}  // namespace
