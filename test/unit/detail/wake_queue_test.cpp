// SPDX-License-Identifier: BSL-1.0
// The keep-alive queue (src/detail/wake_queue.hpp): when the one timer fires, which items it wakes,
// stale entries skipped, and no timer left behind the last item.

#include "detail/wake_queue.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = redlock::clock;
using tp = clock_type::time_point;

struct item : std::enable_shared_from_this<item> {
  explicit item(int n) : id(n) {}
  int id;
  tp scheduled = tp::max();
};
using queue = redlock::detail::wake_queue<item>;

const tp t0 = tp{} + 1h;

TEST(wake_queue, arms_at_the_earliest_and_wakes_what_is_due) {
  queue q;
  auto a = std::make_shared<item>(1);
  auto b = std::make_shared<item>(2);
  EXPECT_EQ(q.schedule(*a, t0 + 10ms), t0 + 10ms);
  EXPECT_EQ(q.schedule(*b, t0 + 20ms), std::nullopt) << "later than the armed time: the timer stays";
  EXPECT_EQ(q.schedule(*b, t0 + 5ms), t0 + 5ms) << "earlier: re-armed";
  EXPECT_EQ(q.live(), 2u);
  std::vector<int> woken;
  const auto next = q.fired(t0 + 5ms, [&](item& i) { woken.push_back(i.id); });
  EXPECT_EQ(woken, std::vector<int>{2}) << "b's stale entry at 20 ms is not woken at all";
  EXPECT_EQ(next, t0 + 10ms);
  EXPECT_EQ(b->scheduled, tp::max());
  woken.clear();
  EXPECT_EQ(q.fired(t0 + 20ms, [&](item& i) { woken.push_back(i.id); }), queue::never);
  EXPECT_EQ(woken, std::vector<int>{1});
  EXPECT_EQ(q.live(), 0u);
  EXPECT_EQ(q.entries(), 0u) << "stale entries go with the last live one";
}

TEST(wake_queue, a_pass_wakes_at_most_its_limit_earliest_first_and_stale_entries_do_not_count) {
  queue q;
  std::vector<std::shared_ptr<item>> items;
  for (int n = 0; n < 5; ++n) items.push_back(std::make_shared<item>(n));
  // Due at 5, 4, 3, 2 and 1 ms; item 4's first entry (at 1 ms) goes stale when it moves to 9 ms.
  for (int n = 0; n < 5; ++n) (void)q.schedule(*items[n], t0 + std::chrono::milliseconds(5 - n));
  (void)q.schedule(*items[4], t0 + 9ms);
  std::vector<int> woken;
  const auto wake = [&](item& i) { woken.push_back(i.id); };
  EXPECT_EQ(q.fired(t0 + 6ms, wake, 2), t0 + 4ms) << "item 1, due and left for the next pass, fires it at once";
  EXPECT_EQ(woken, (std::vector<int>{3, 2})) << "the earliest two; the stale entry is skipped, not counted";
  EXPECT_EQ(q.live(), 3u);
  EXPECT_EQ(q.fired(t0 + 6ms, wake, 1), t0 + 5ms);
  EXPECT_EQ(q.fired(t0 + 6ms, wake, 2), t0 + 9ms) << "nothing due is left: the next wake-up as usual";
  EXPECT_EQ(woken, (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(q.fired(t0 + 9ms, wake, 0), t0 + 9ms) << "a limit of none wakes nothing and loses nothing";
  EXPECT_EQ(q.live(), 1u);
}

TEST(wake_queue, unscheduling_the_last_item_cancels_the_timer) {
  queue q;
  auto a = std::make_shared<item>(1);
  auto b = std::make_shared<item>(2);
  (void)q.schedule(*a, t0 + 10ms);
  (void)q.schedule(*b, t0 + 30ms);
  EXPECT_EQ(q.schedule(*a, queue::never), std::nullopt) << "b is still due";
  EXPECT_EQ(q.schedule(*a, queue::never), std::nullopt) << "twice is nothing";
  EXPECT_EQ(q.schedule(*b, queue::never), queue::never);
  EXPECT_EQ(q.entries(), 0u);
  EXPECT_EQ(q.schedule(*a, t0 + 40ms), t0 + 40ms) << "a fresh start arms again";
}

TEST(wake_queue, an_item_woken_may_schedule_itself_again_and_a_gone_item_is_skipped) {
  queue q;
  auto a = std::make_shared<item>(1);
  auto gone = std::make_shared<item>(2);
  (void)q.schedule(*a, t0 + 10ms);
  (void)q.schedule(*gone, t0 + 5ms);
  gone.reset();
  int wakes = 0;
  const auto next = q.fired(t0 + 10ms, [&](item& i) {
    ++wakes;
    EXPECT_EQ(q.schedule(i, t0 + 50ms), std::nullopt) << "the result of fired() says when to fire";
  });
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(next, t0 + 50ms);
}

// The caller's timer could not be armed (its wait threw): after disarm(), the next schedule asks
// for the timer at the earliest wake-up due, even when that is another item's, earlier than its
// own, and rearm() (the end of a timer pass) says when to fire for what is held. Catches: a queue
// that believes in a wait that does not exist (no later schedule arms the timer, and no watched
// lock is woken again), one that arms only for the item scheduled, and a timer pass that reads a
// failed arm as "nothing left" and cancels the timer.
TEST(wake_queue, after_a_failed_arm_the_next_schedule_arms_at_the_earliest_due) {
  queue q;
  auto a = std::make_shared<item>(1);
  auto b = std::make_shared<item>(2);
  ASSERT_EQ(q.schedule(*a, t0 + 10ms), t0 + 10ms);
  q.disarm();
  EXPECT_EQ(q.armed(), queue::never);
  EXPECT_EQ(q.schedule(*b, t0 + 30ms), t0 + 10ms) << "a is due first";
  EXPECT_EQ(q.schedule(*b, t0 + 40ms), std::nullopt) << "armed again: later ones leave it";
  q.disarm();
  EXPECT_EQ(q.schedule(*b, queue::never), std::nullopt) << "unscheduling never arms";
  EXPECT_EQ(q.armed(), queue::never);
  EXPECT_EQ(q.rearm(), t0 + 10ms) << "the end of a timer pass arms for a, not for nothing";
  EXPECT_EQ(q.armed(), t0 + 10ms);
  std::vector<int> woken;
  EXPECT_EQ(q.fired(t0 + 10ms, [&](item& i) { woken.push_back(i.id); }), queue::never);
  EXPECT_EQ(woken, std::vector<int>{1});
}

// A kept-alive lock moves its wake-up twice per renewal (to its loss point while it extends, back
// to its next renewal), each move leaving a stale entry until its time. Catches a queue that
// keeps them all (10 moves of 1,000 items: 10,000 entries, 24 bytes each, for 1,000 wake-ups), and
// one whose clean-up drops a live entry or wakes an item at a time it has left.
TEST(wake_queue, stale_entries_are_dropped_once_they_outnumber_half_the_live_ones) {
  queue q;
  std::vector<std::shared_ptr<item>> items;
  for (int n = 0; n < 1000; ++n) items.push_back(std::make_shared<item>(n));
  for (int move = 0; move < 10; ++move) {
    for (int n = 0; n < 1000; ++n) (void)q.schedule(*items[n], t0 + std::chrono::milliseconds(1000 * (10 - move) + n));
    EXPECT_LE(q.entries(), 1000u + 500u + 64u) << "after move " << move;
  }
  EXPECT_EQ(q.live(), 1000u);
  // A duplicate that survives (moved away and back) is skipped when woken twice.
  (void)q.schedule(*items[0], t0 + 5000ms);
  (void)q.schedule(*items[0], t0 + 1000ms);
  std::vector<int> woken;
  EXPECT_EQ(q.fired(t0 + 1999ms, [&](item& i) { woken.push_back(i.id); }), queue::never);
  ASSERT_EQ(woken.size(), 1000u) << "every item once, at its last time";
  for (int n = 0; n < 1000; ++n) EXPECT_EQ(woken[static_cast<std::size_t>(n)], n);
  EXPECT_EQ(q.entries(), 0u);
}

}  // namespace
