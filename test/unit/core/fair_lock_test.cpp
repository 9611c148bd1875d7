// SPDX-License-Identifier: BSL-1.0
// Fair hand-over in the acquisition machine (docs/design.md, "Fair hand-over"): when the first,
// plain round finds the lock taken the waiter queues at once; its ticket is the highest any master
// gave it; a majority of wake-ups starts the next round before the retry delay ends; a majority of
// hand-overs grants the round; a waiter that cannot reach a majority moves to the back. Also the
// replies of the fair and release scripts.

#include "transcript.hpp"
#include <redlock/core/lock_fsm.hpp>
#include <redlock/core/outcome.hpp>
#include <redlock/core/unlock_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace {

using namespace redlock::test;
using redlock::master_status;
using redlock::core::command;
using redlock::core::fair_reply_of;
using redlock::core::lock_action;
using redlock::core::lock_fsm;
using redlock::core::lock_rules;
using redlock::core::retry_policy;
namespace resp = redlock::resp;
using boost::system::error_code;

lock_rules fair_rules(std::size_t masters = 5, bool retry = true) {
  lock_rules r;
  r.masters = masters;
  r.ttl = 10s;
  r.request_timeout = 250ms;
  r.retry = retry_policy{0, 2000ms, 50ms, 100ms};
  r.retry_enabled = retry;
  r.fair = true;
  return r;
}

// Fair rules whose rounds leave offers: releases may hand the lock over.
lock_rules handover_rules() {
  auto r = fair_rules();
  r.hand_over = true;
  return r;
}

// `{status, ticket}` as the fair acquire script answers (a RESP array of two integers).
resp::response fair(std::int64_t status, std::int64_t ticket) {
  return {{resp::type::array, 2, 0, ""},
          {resp::type::integer, 0, 1, std::to_string(status)},
          {resp::type::integer, 0, 1, std::to_string(ticket)}};
}

std::string what(const lock_action& a) {
  switch (a.what) {
    case lock_action::type::wait:
      return "wait";
    case lock_action::type::acquire:
      return a.fair ? "fair " + std::to_string(a.ticket) : "plain";
    case lock_action::type::sleep:
      return "sleep " + describe(a.at) + (a.release ? " +release" : "");
    case lock_action::type::complete:
      return "complete " + describe(a.ec) + (a.release ? " +release" : "");
    case lock_action::type::confirm:
      return "confirm " + std::to_string(a.fence);
  }
  return "?";
}

// Answers `r` from every master in `first..last` at `t`; returns the first action other than
// `wait` (the one that decided), or `wait`.
lock_action answer_all(lock_fsm& f, std::size_t first, std::size_t last, const resp::response& r, clock::duration t) {
  lock_action decided;
  for (std::size_t m = first; m <= last; ++m) {
    const auto a = f.on_reply(f.round(), m, {}, r, at(t), 0.0);
    if (decided.what == lock_action::type::wait) decided = a;
  }
  return decided;
}

TEST(fair_lock, the_first_round_is_plain_and_a_taken_lock_queues_at_once) {
  lock_fsm f{fair_rules()};
  EXPECT_EQ(what(f.start(at(0ms))), "plain");
  EXPECT_FALSE(f.queued());
  // Three masters say taken: the round fails, is released, and the next round comes at once.
  EXPECT_EQ(what(answer_all(f, 0, 2, nil_reply(), 1ms)), "sleep +1000us +release");
  EXPECT_EQ(f.last_error(), redlock::error::not_acquired);
  EXPECT_EQ(what(f.on_timer(at(1ms))), "fair 0");
  EXPECT_TRUE(f.queued());
  EXPECT_EQ(f.table().cmd(), command::acquire_fair);
}

TEST(fair_lock, without_fairness_every_round_is_plain_and_wake_ups_are_ignored) {
  auto r = fair_rules();
  r.fair = false;
  lock_fsm f{r};
  EXPECT_EQ(what(f.start(at(0ms), true)), "plain");
  EXPECT_EQ(what(answer_all(f, 0, 2, nil_reply(), 1ms)), "sleep +51000us +release");  // 50 ms + 0 jitter
  for (std::size_t m = 0; m < 5; ++m) EXPECT_EQ(what(f.on_wake(m, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_timer(at(51ms))), "plain");
  EXPECT_FALSE(f.queued());
}

TEST(fair_lock, a_client_that_saw_waiters_queues_from_the_first_round) {
  lock_fsm f{fair_rules()};
  EXPECT_EQ(what(f.start(at(0ms), true)), "fair 0");
  EXPECT_TRUE(f.queued());
}

TEST(fair_lock, granted_by_a_majority_of_fair_answers) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  EXPECT_EQ(what(answer_all(f, 0, 1, fair(1, 4), 1ms)), "wait");
  EXPECT_EQ(what(f.on_reply(f.round(), 2, {}, fair(1, 4), at(2ms), 0.0)), "complete ok");
  EXPECT_EQ(f.validity_deadline(), at(10s - 102ms));  // ttl - drift (1 % + 2 ms), from the round's start
  EXPECT_EQ(f.table().results()[0].status, master_status::granted);
}

TEST(fair_lock, queued_answers_fail_the_round_as_contention_and_the_ticket_is_the_highest_given) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  f.on_reply(f.round(), 0, {}, fair(-1, 7), at(1ms), 0.0);
  f.on_reply(f.round(), 1, {}, fair(0, 9), at(1ms), 0.0);
  EXPECT_EQ(what(f.on_reply(f.round(), 2, {}, fair(-1, 8), at(1ms), 0.0)), "sleep +51000us +release");
  EXPECT_EQ(f.last_error(), redlock::error::not_acquired);
  EXPECT_EQ(f.table().results()[0].status, master_status::queued);
  EXPECT_EQ(f.ticket(), 9);
  // Answers after the decision still count for the ticket? No: the round is over.
  f.on_reply(f.round(), 3, {}, fair(0, 20), at(2ms), 0.0);
  EXPECT_EQ(f.ticket(), 9);
  // Every master gets the same ticket from now on.
  EXPECT_EQ(what(f.on_timer(at(51ms))), "fair 9");
}

TEST(fair_lock, a_majority_of_wake_ups_starts_the_next_round_before_the_delay_ends) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  answer_all(f, 0, 2, fair(0, 3), 1ms);  // asleep until 51 ms
  EXPECT_EQ(what(f.on_wake(4, at(5ms))), "wait");
  EXPECT_EQ(what(f.on_wake(4, at(5ms))), "wait");  // one master counts once
  EXPECT_EQ(what(f.on_wake(1, at(6ms))), "wait");
  EXPECT_EQ(what(f.on_wake(9, at(6ms))), "wait");  // no such master
  EXPECT_EQ(what(f.on_wake(0, at(7ms))), "fair 3");
  EXPECT_EQ(f.wakeups(), 1U);
  EXPECT_EQ(f.attempts(), 2U);
  // The retry delay's end finds the machine waiting for the new round: nothing happens.
  EXPECT_EQ(what(f.on_timer(at(51ms))), "wait");
  // Wake-ups heard before a round was sent do not count for the next one.
  EXPECT_EQ(what(answer_all(f, 0, 2, fair(0, 3), 8ms)), "sleep +58000us +release");
  EXPECT_EQ(what(f.on_wake(0, at(9ms))), "wait");
  EXPECT_EQ(what(f.on_wake(1, at(9ms))), "wait");
  EXPECT_EQ(what(f.on_wake(2, at(9ms))), "fair 3");
}

TEST(fair_lock, wake_ups_during_a_failing_round_retry_at_once) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  // The holder released while our round was on its way: the masters woke us, then said taken.
  for (std::size_t m = 0; m < 3; ++m) f.on_wake(m, at(1ms));
  EXPECT_EQ(what(answer_all(f, 0, 2, fair(0, 1), 2ms)), "sleep +2000us +release");
  EXPECT_EQ(what(f.on_timer(at(2ms))), "fair 1");
}

TEST(fair_lock, a_waiter_that_cannot_reach_a_majority_moves_to_the_back) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  f.on_reply(f.round(), 0, {}, fair(1, 2), at(1ms), 0.0);
  f.on_reply(f.round(), 1, {}, fair(1, 2), at(1ms), 0.0);
  f.on_reply(f.round(), 2, redlock::error::master_timeout, no_reply(), at(250ms), 0.0);
  f.on_reply(f.round(), 3, redlock::error::master_timeout, no_reply(), at(250ms), 0.0);
  EXPECT_EQ(what(f.on_reply(f.round(), 4, redlock::error::not_connected, no_reply(), at(250ms), 0.0)),
            "sleep +300000us +release");
  EXPECT_EQ(f.last_error(), redlock::error::quorum_unavailable);
  EXPECT_EQ(what(f.on_timer(at(300ms))), "fair -1");
  // The masters answer with its new place; the round after keeps it.
  answer_all(f, 0, 2, fair(0, 12), 301ms);
  EXPECT_EQ(what(f.on_timer(at(351ms))), "fair 12");
}

TEST(fair_lock, two_failures_out_of_five_keep_the_place) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  f.on_reply(f.round(), 0, redlock::error::master_timeout, no_reply(), at(250ms), 0.0);
  f.on_reply(f.round(), 1, redlock::error::master_timeout, no_reply(), at(250ms), 0.0);
  EXPECT_EQ(what(answer_all(f, 2, 4, fair(-1, 5), 250ms)), "sleep +300000us +release");
  EXPECT_EQ(what(f.on_timer(at(300ms))), "fair 5");
}

TEST(fair_lock, try_lock_makes_one_round_and_ends_queued_when_it_queued) {
  lock_fsm f{fair_rules(5, false)};
  EXPECT_EQ(what(f.start(at(0ms), true)), "fair 0");
  EXPECT_EQ(what(answer_all(f, 0, 2, fair(-1, 1), 1ms)),
            "complete redlock:the lock is held by another client +release");
  EXPECT_TRUE(f.queued());  // the shell takes it out of the queues
  lock_fsm plain{fair_rules(5, false)};
  plain.start(at(0ms));
  answer_all(plain, 0, 2, nil_reply(), 1ms);
  EXPECT_TRUE(plain.done());
  EXPECT_FALSE(plain.queued());
}

TEST(fair_lock, the_retry_bound_still_ends_a_waiter) {
  auto r = fair_rules();
  r.retry = retry_policy{3, 0ms, 50ms, 0ms};  // three attempts in all
  lock_fsm f{r};
  f.start(at(0ms));
  answer_all(f, 0, 2, nil_reply(), 1ms);
  EXPECT_EQ(what(f.on_timer(at(1ms))), "fair 0");
  answer_all(f, 0, 2, fair(0, 1), 2ms);
  EXPECT_EQ(what(f.on_wake(0, at(3ms))), "wait");
  EXPECT_EQ(what(f.on_wake(1, at(3ms))), "wait");
  EXPECT_EQ(what(f.on_wake(2, at(3ms))), "fair 1");
  EXPECT_EQ(what(answer_all(f, 0, 2, fair(0, 1), 4ms)), "complete redlock:the lock is held by another client +release");
  EXPECT_EQ(what(f.on_wake(3, at(5ms))), "wait");  // done: nothing moves it
}

TEST(fair_lock, cancelled_while_queued) {
  lock_fsm f{fair_rules()};
  f.start(at(0ms), true);
  answer_all(f, 0, 2, fair(0, 1), 1ms);
  EXPECT_EQ(what(f.cancel()), "complete system:Operation canceled");
  EXPECT_TRUE(f.queued());
  EXPECT_EQ(what(f.on_wake(0, at(2ms))), "wait");
}

// ---- hand-over: a holder's release sets the key for the first waiter -------------------------------

TEST(fair_lock, a_majority_of_hand_overs_grants_the_round_with_validity_from_its_start) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  // A round that leaves offers fails once every master answered (not at the third "taken").
  EXPECT_EQ(what(answer_all(f, 0, 4, fair(0, 3), 1ms)), "sleep +51000us +release");
  const auto r = f.round();
  EXPECT_EQ(what(f.on_handover(r, 2, at(5ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 2, at(5ms))), "wait");  // one master counts once
  EXPECT_EQ(what(f.on_handover(r, 9, at(5ms))), "wait");  // no such master
  EXPECT_EQ(what(f.on_handover(r, 0, at(6ms))), "wait");
  EXPECT_FALSE(f.done());
  // No release: the keys are the lock now.
  EXPECT_EQ(what(f.on_handover(r, 1, at(7ms))), "complete ok");
  EXPECT_TRUE(f.handed());
  // The key was set after the round began: the validity counts from there, as for a grant.
  EXPECT_EQ(f.validity_deadline(), at(10s - 102ms));
  EXPECT_EQ(f.table().status(0), master_status::granted);
  EXPECT_EQ(f.table().status(2), master_status::granted);
  EXPECT_EQ(f.table().status(3), master_status::taken);
  EXPECT_EQ(what(f.on_timer(at(51ms))), "wait");  // the retry delay's end finds it done
  EXPECT_EQ(what(f.on_handover(r, 4, at(8ms))), "wait");
}

TEST(fair_lock, hand_overs_count_with_the_grants_of_a_round_still_being_answered) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  EXPECT_EQ(what(f.on_reply(r, 0, {}, fair(1, 2), at(1ms), 0.0)), "wait");
  EXPECT_EQ(what(f.on_reply(r, 1, {}, fair(0, 2), at(1ms), 0.0)), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_reply(r, 2, {}, fair(0, 2), at(2ms), 0.0)), "wait");
  // The grant and two hand-overs are a majority, though two masters said "taken".
  EXPECT_EQ(what(f.on_handover(r, 2, at(3ms))), "complete ok");
  EXPECT_EQ(f.table().count(master_status::granted), 3U);
  // A grant that comes with a hand-over already counted makes the majority too.
  lock_fsm g{handover_rules()};
  g.start(at(0ms), true);
  const auto r2 = g.round();
  g.on_reply(r2, 0, {}, fair(0, 2), at(1ms), 0.0);
  g.on_handover(r2, 0, at(1ms));
  g.on_reply(r2, 1, {}, fair(1, 2), at(1ms), 0.0);
  g.on_reply(r2, 2, {}, fair(0, 2), at(1ms), 0.0);
  EXPECT_EQ(what(g.on_reply(r2, 3, {}, fair(1, 2), at(2ms), 0.0)), "complete ok");
}

TEST(fair_lock, a_failed_round_that_released_anything_takes_hand_overs_as_wake_ups_only) {
  // Its release may be sent again later with the same token (a reply lost: `defer_release`) and
  // delete a key handed over with it, on a master the lock would then count.
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  f.on_reply(r, 0, {}, fair(1, 2), at(1ms), 0.0);
  f.on_reply(r, 1, {}, fair(1, 2), at(1ms), 0.0);
  f.on_reply(r, 2, {}, fair(0, 2), at(1ms), 0.0);
  f.on_reply(r, 3, {}, fair(0, 2), at(1ms), 0.0);
  EXPECT_EQ(what(f.on_reply(r, 4, {}, fair(0, 2), at(1ms), 0.0)), "sleep +51000us +release");
  EXPECT_EQ(what(f.on_handover(r, 2, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 3, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 4, at(3ms))), "fair 2");  // three wake-ups: the next round
  EXPECT_FALSE(f.handed());
  // The same with a request that timed out (its release goes there).
  lock_fsm g{handover_rules()};
  g.start(at(0ms), true);
  const auto r2 = g.round();
  answer_all(g, 0, 1, fair(0, 1), 1ms);
  g.on_reply(r2, 2, redlock::error::master_timeout, no_reply(), at(250ms), 0.0);
  EXPECT_EQ(what(answer_all(g, 3, 4, fair(0, 1), 250ms)), "sleep +300000us +release");
  EXPECT_EQ(what(g.on_handover(r2, 0, at(251ms))), "wait");
  EXPECT_EQ(what(g.on_handover(r2, 1, at(251ms))), "wait");
  EXPECT_EQ(what(g.on_handover(r2, 3, at(251ms))), "fair 1");
}

TEST(fair_lock, only_the_round_in_progress_and_its_answered_masters_take_hand_overs) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  answer_all(f, 0, 2, fair(0, 1), 1ms);  // masters 3 and 4 have not answered
  // Not answered yet: kept until its answer comes (which this test never sends).
  EXPECT_EQ(what(f.on_handover(r, 3, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r + 1, 0, at(2ms))), "wait");  // no such round yet: a wake-up too
  EXPECT_EQ(what(f.on_handover(r, 0, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 4, at(3ms))), "wait");  // masters 1 and 2 may still hand it over
  EXPECT_FALSE(f.done());
  EXPECT_EQ(what(f.on_handover(r, 1, at(3ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 2, at(4ms))), "complete ok");
  EXPECT_EQ(f.validity_deadline(), at(10s - 102ms));
  EXPECT_EQ(f.wakeups(), 0U);
}

TEST(fair_lock, wake_ups_wait_for_hand_overs_that_can_still_make_the_quorum) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  // A round that leaves offers fails once every master answered, not at the third "taken".
  for (std::size_t m = 0; m < 4; ++m) EXPECT_EQ(what(f.on_reply(r, m, {}, fair(0, 1), at(1ms), 0.0)), "wait");
  EXPECT_EQ(what(f.on_reply(r, 4, {}, fair(0, 1), at(1ms), 0.0)), "sleep +51000us +release");
  EXPECT_EQ(what(f.on_handover(r, 0, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(2ms))), "wait");
  // A plain wake-up says master 4 hands nothing over; three masters said the holder released,
  // but masters 2 and 3 can still hand over: no new round yet.
  EXPECT_EQ(what(f.on_wake(4, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 2, at(2ms))), "complete ok");
  EXPECT_EQ(f.wakeups(), 0U);
  // Plain wake-ups from three masters: no quorum of hand-overs can come, the next round starts.
  lock_fsm h{handover_rules()};
  h.start(at(0ms), true);
  answer_all(h, 0, 4, fair(0, 1), 1ms);
  h.on_wake(0, at(2ms));
  h.on_wake(1, at(2ms));
  EXPECT_EQ(what(h.on_wake(2, at(2ms))), "fair 1");
  // Without hand-overs, wake-ups start the next round, and a round fails at the third "taken".
  lock_fsm g{fair_rules()};
  g.start(at(0ms), true);
  EXPECT_EQ(what(answer_all(g, 0, 2, fair(0, 1), 1ms)), "sleep +51000us +release");
  g.on_wake(0, at(2ms));
  g.on_wake(1, at(2ms));
  EXPECT_EQ(what(g.on_wake(2, at(2ms))), "fair 1");
  // A try_lock does not wait for the last answers of a round that cannot succeed either.
  auto once = handover_rules();
  once.retry_enabled = false;
  lock_fsm t{once};
  t.start(at(0ms), true);
  EXPECT_EQ(what(answer_all(t, 0, 2, fair(0, 1), 1ms)), "complete redlock:the lock is held by another client +release");
}

TEST(fair_lock, each_round_starts_without_the_last_ones_hand_overs_and_releases) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  f.on_reply(r, 0, {}, fair(1, 1), at(1ms), 0.0);  // a grant: released when the round fails
  for (std::size_t m = 1; m < 5; ++m) f.on_reply(r, m, {}, fair(0, 1), at(1ms), 0.0);
  EXPECT_EQ(what(f.on_timer(at(60ms))), "fair 1");
  const auto r2 = f.round();
  answer_all(f, 0, 4, fair(0, 1), 61ms);  // nothing granted: nothing released
  EXPECT_EQ(what(f.on_handover(r2, 0, at(62ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r2, 1, at(62ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r2, 2, at(62ms))), "complete ok");
  EXPECT_EQ(f.validity_deadline(), at(60ms + 10s - 102ms));
}

TEST(fair_lock, an_early_hand_over_of_a_master_that_then_times_out_is_not_counted) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  answer_all(f, 0, 1, fair(0, 1), 1ms);
  f.on_handover(r, 0, at(2ms));
  f.on_handover(r, 1, at(2ms));
  EXPECT_EQ(what(f.on_handover(r, 2, at(2ms))), "wait");  // before its answer
  EXPECT_EQ(what(f.on_reply(r, 2, redlock::error::master_timeout, no_reply(), at(250ms), 0.0)), "wait");
  EXPECT_FALSE(f.done());
  // An early hand-over the guard withdrew (`drop_early`) is not counted either.
  lock_fsm g{handover_rules()};
  g.start(at(0ms), true);
  const auto r2 = g.round();
  answer_all(g, 0, 1, fair(0, 1), 1ms);
  g.on_handover(r2, 0, at(2ms));
  g.on_handover(r2, 1, at(2ms));
  g.on_handover(r2, 2, at(2ms));
  g.drop_early(2);
  EXPECT_EQ(what(g.on_reply(r2, 2, {}, fair(0, 1), at(3ms), 0.0)), "wait");
  EXPECT_FALSE(g.done());
}

TEST(fair_lock, a_hand_over_that_comes_before_its_masters_answer_counts_once_the_answer_comes) {
  // The answer and the TIME behind it are delivered together: a release that ran between the two
  // sends its hand-over first.
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  answer_all(f, 0, 1, fair(0, 1), 1ms);
  EXPECT_EQ(what(f.on_handover(r, 0, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 2, at(2ms))), "wait");  // not answered yet
  EXPECT_EQ(what(f.on_reply(r, 2, {}, fair(0, 1), at(3ms), 0.0)), "complete ok");
  EXPECT_EQ(f.table().count(master_status::granted), 3U);
  // A master with no hand-over to tell (RESP2: `set_deaf`) is not waited for.
  lock_fsm g{handover_rules()};
  g.start(at(0ms), true);
  for (std::size_t m = 0; m < 3; ++m) g.set_deaf(m, true);
  EXPECT_EQ(what(answer_all(g, 0, 4, fair(0, 1), 1ms)), "sleep +51000us +release");
  EXPECT_EQ(what(g.on_wake(3, at(2ms))), "wait");
  EXPECT_EQ(what(g.on_wake(4, at(2ms))), "wait");  // two of five: no majority
}

TEST(fair_lock, hand_overs_too_late_for_the_validity_are_not_relied_on) {
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  answer_all(f, 0, 4, fair(0, 1), 1ms);
  EXPECT_EQ(what(f.on_handover(r, 0, at(10s - 102ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(10s - 102ms))), "wait");
  // Three masters handed the round its key, too late to rely on: only a wake-up.
  EXPECT_EQ(what(f.on_handover(r, 2, at(10s - 102ms))), "fair 1");
  EXPECT_FALSE(f.done());
}

TEST(fair_lock, without_fairness_hand_overs_are_ignored_and_a_cancel_ends_a_waiter_holding_some) {
  auto rules = handover_rules();
  rules.fair = false;
  lock_fsm plain{rules};
  plain.start(at(0ms), true);
  answer_all(plain, 0, 4, nil_reply(), 1ms);
  for (std::size_t m = 0; m < 5; ++m) EXPECT_EQ(what(plain.on_handover(plain.round(), m, at(2ms))), "wait");
  EXPECT_FALSE(plain.done());
  lock_fsm f{handover_rules()};
  f.start(at(0ms), true);
  answer_all(f, 0, 4, fair(0, 1), 1ms);
  f.on_handover(f.round(), 0, at(2ms));
  f.on_handover(f.round(), 1, at(2ms));
  // Its dequeue gives the two keys back (the shell sends it when the acquisition ends).
  EXPECT_EQ(what(f.cancel()), "complete system:Operation canceled");
  EXPECT_FALSE(f.handed());
}

// ---- a fenced lock's hand-over: each one grants a fence ----------------------------------------------

// Fair rules of a fenced lock whose releases hand it over.
lock_rules fenced_handover_rules() {
  auto r = handover_rules();
  r.scripted = true;
  r.fence = true;
  return r;
}

// `{status, number, ticket}` as a fenced lock's fair round is answered (the number: a fence, a
// counter, or a clock negated).
resp::response fenced_fair(std::int64_t status, std::int64_t number, std::int64_t ticket) {
  return {{resp::type::array, 3, 0, ""},
          {resp::type::integer, 0, 1, std::to_string(status)},
          {resp::type::integer, 0, 1, std::to_string(number)},
          {resp::type::integer, 0, 1, std::to_string(ticket)}};
}

TEST(fenced_fair_lock, hand_overs_that_agree_on_the_fence_grant_it_without_a_confirmation) {
  lock_fsm f{fenced_handover_rules()};
  EXPECT_EQ(what(f.start(at(0ms), true)), "fair 0");
  EXPECT_EQ(what(answer_all(f, 0, 4, fenced_fair(0, 42, 3), 1ms)), "sleep +51000us +release");
  // The ticket is the third number, the counters the second.
  EXPECT_EQ(f.ticket(), 3);
  EXPECT_EQ(f.fence_floor(), 42);
  const auto r = f.round();
  EXPECT_EQ(what(f.on_handover(r, 0, at(5ms), 43)), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(5ms), 43)), "wait");
  EXPECT_EQ(what(f.on_handover(r, 2, at(6ms), 43)), "complete ok");
  EXPECT_TRUE(f.handed());
  EXPECT_EQ(f.fence(), 43);
  EXPECT_EQ(f.confirm_rounds(), 0U);
  EXPECT_EQ(f.table().value(2), 43);
  EXPECT_EQ(f.validity_deadline(), at(10s - 102ms));
}

TEST(fenced_fair_lock, hand_overs_and_grants_that_disagree_confirm_the_largest_fence) {
  lock_fsm f{fenced_handover_rules()};
  f.start(at(0ms), true);
  const auto r = f.round();
  EXPECT_EQ(what(f.on_reply(r, 0, {}, fenced_fair(1, 50, 3), at(1ms), 0.0)), "wait");
  EXPECT_EQ(what(f.on_reply(r, 1, {}, fenced_fair(0, 42, 3), at(1ms), 0.0)), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(2ms), 43)), "wait");
  EXPECT_EQ(what(f.on_reply(r, 2, {}, fenced_fair(-1, 42, 3), at(2ms), 0.0)), "wait");
  // A grant and two hand-overs: a majority, whose fences differ. The two behind are raised first.
  EXPECT_EQ(what(f.on_handover(r, 2, at(3ms), 43)), "confirm 50");
  EXPECT_FALSE(f.needs_confirm(0));
  EXPECT_TRUE(f.needs_confirm(1));
  EXPECT_TRUE(f.needs_confirm(2));
  EXPECT_FALSE(f.needs_confirm(3));
  const auto c = f.round();
  EXPECT_EQ(what(f.on_reply(c, 1, {}, int_reply("1"), at(4ms), 0.0)), "wait");
  EXPECT_EQ(what(f.on_reply(c, 2, {}, int_reply("1"), at(4ms), 0.0)), "complete ok");
  EXPECT_EQ(f.fence(), 50);
  // The hand-over's key left a master before its confirmation: a failed round, released (the
  // release takes back each step its grants and hand-overs made).
  lock_fsm g{fenced_handover_rules()};
  g.start(at(0ms), true);
  const auto r2 = g.round();
  answer_all(g, 0, 4, fenced_fair(0, 42, 3), 1ms);
  g.on_handover(r2, 0, at(2ms), 43);
  g.on_handover(r2, 1, at(2ms), 44);
  EXPECT_EQ(what(g.on_handover(r2, 2, at(2ms), 43)), "confirm 44");
  const auto c2 = g.round();
  // Master 1 holds the fence; with master 0's "not ours", master 2 alone cannot make a majority.
  EXPECT_EQ(what(g.on_reply(c2, 0, {}, int_reply("0"), at(3ms), 0.0)), "sleep +53000us +release");
  EXPECT_EQ(what(g.on_reply(c2, 2, {}, int_reply("1"), at(3ms), 0.0)), "wait");
  EXPECT_EQ(g.fence(), 0);
  EXPECT_EQ(g.last_error(), redlock::error::not_acquired);
}

// A plain lock's release on the same name hands the key over with no fence: a fenced waiter
// cannot count it (it would hold a fence no master vouches for). It only wakes.
TEST(fenced_fair_lock, a_hand_over_without_a_fence_only_wakes) {
  lock_fsm f{fenced_handover_rules()};
  f.start(at(0ms), true);
  answer_all(f, 0, 4, fenced_fair(0, 42, 3), 1ms);
  const auto r = f.round();
  EXPECT_EQ(what(f.on_handover(r, 0, at(2ms))), "wait");
  EXPECT_EQ(what(f.on_handover(r, 1, at(2ms), -5)), "wait");
  // The third wake-up is a majority, and the other two masters cannot make one: the next round.
  EXPECT_EQ(what(f.on_handover(r, 2, at(2ms), 0)), "fair 3");
  EXPECT_FALSE(f.done());
  EXPECT_EQ(f.fence(), 0);
  // A fence with a plain lock's rules is ignored: its hand-overs count as ever.
  lock_fsm g{handover_rules()};
  g.start(at(0ms), true);
  answer_all(g, 0, 4, fair(0, 3), 1ms);
  const auto r2 = g.round();
  g.on_handover(r2, 0, at(2ms), 43);
  g.on_handover(r2, 1, at(2ms), 43);
  EXPECT_EQ(what(g.on_handover(r2, 2, at(2ms), 43)), "complete ok");
  EXPECT_EQ(g.fence(), 0);
}

TEST(fair_reply, reads_status_and_ticket) {
  auto g = fair_reply_of(fair(1, 0));
  EXPECT_TRUE(g.valid);
  EXPECT_EQ(g.status, master_status::granted);
  EXPECT_EQ(fair_reply_of(fair(0, 3)).status, master_status::taken);
  EXPECT_EQ(fair_reply_of(fair(-1, 4)).status, master_status::queued);
  EXPECT_EQ(fair_reply_of(fair(-1, 4)).number, 4);
  EXPECT_EQ(fair_reply_of(fair(-1, 4)).ticket, 0);
}

// The fair acquisition of a fenced lock answers {status, fence or counter, ticket}.
TEST(fair_reply, reads_a_fenced_answer_with_its_ticket) {
  const auto f = fair_reply_of({{resp::type::array, 3, 0, ""},
                                {resp::type::integer, 0, 1, "-1"},
                                {resp::type::integer, 0, 1, "-1700000000000000"},
                                {resp::type::integer, 0, 1, "7"}});
  EXPECT_TRUE(f.valid);
  EXPECT_EQ(f.status, master_status::queued);
  EXPECT_EQ(f.number, -1700000000000000);
  EXPECT_EQ(f.ticket, 7);
  // Three elements, the last not an integer; or four.
  EXPECT_FALSE(fair_reply_of({{resp::type::array, 3, 0, ""},
                              {resp::type::integer, 0, 1, "1"},
                              {resp::type::integer, 0, 1, "5"},
                              {resp::type::blob_string, 0, 1, "7"}})
                   .valid);
  EXPECT_FALSE(fair_reply_of({{resp::type::array, 4, 0, ""},
                              {resp::type::integer, 0, 1, "1"},
                              {resp::type::integer, 0, 1, "5"},
                              {resp::type::integer, 0, 1, "7"},
                              {resp::type::integer, 0, 1, "8"}})
                   .valid);
}

TEST(fair_reply, rejects_other_shapes) {
  EXPECT_FALSE(fair_reply_of(fair(2, 1)).valid);
  EXPECT_FALSE(fair_reply_of(ok_reply()).valid);
  EXPECT_FALSE(fair_reply_of(int_reply("1")).valid);
  EXPECT_FALSE(fair_reply_of({{resp::type::array, 2, 0, ""}, {resp::type::integer, 0, 1, "1"}}).valid);
  EXPECT_FALSE(
      fair_reply_of(
          {{resp::type::array, 2, 0, ""}, {resp::type::integer, 0, 1, "1"}, {resp::type::blob_string, 0, 1, "x"}})
          .valid);
  EXPECT_FALSE(
      fair_reply_of(
          {{resp::type::array, 2, 0, ""}, {resp::type::integer, 0, 1, "1"}, {resp::type::integer, 0, 1, "12x"}})
          .valid);
  // classify turns a malformed answer into a failed vote.
  const auto r = redlock::core::classify(command::acquire_fair, {}, ok_reply());
  EXPECT_EQ(r.status, master_status::failed);
  EXPECT_EQ(r.error, redlock::error::unexpected_reply);
}

TEST(release_reply, two_means_released_with_waiters) {
  EXPECT_EQ(redlock::core::classify(command::release, {}, int_reply("2")).status, master_status::granted);
  EXPECT_EQ(redlock::core::classify(command::extend, {}, int_reply("2")).status, master_status::failed);
  redlock::core::unlock_fsm u{3, 1s};
  u.start(at(0ms));
  u.on_reply(0, {}, int_reply("1"), at(1ms));
  EXPECT_FALSE(u.waiters());
  u.on_reply(1, {}, int_reply("2"), at(1ms));
  EXPECT_TRUE(u.done());
  EXPECT_TRUE(u.waiters());
  EXPECT_EQ(u.held(), 2U);
}

}  // namespace
