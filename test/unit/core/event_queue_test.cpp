// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/event_queue.hpp>
#include <redlock/lock_event.hpp>

#include <gtest/gtest.h>

#include <cstddef>

namespace {

using redlock::lock_event;
using redlock::core::event_queue;
using type = lock_event::type;

lock_event ev(type t, std::size_t n = 0) {
  lock_event e;
  e.what = t;
  e.extensions = n;
  return e;
}

TEST(event_queue, events_come_out_in_order_once_each) {
  event_queue<lock_event> q{4};
  EXPECT_FALSE(q.next().has_value());
  q.push(ev(type::extended, 1));
  q.push(ev(type::extend_failed, 1));
  q.push(ev(type::extended, 2));
  EXPECT_EQ(q.next()->extensions, 1u);
  EXPECT_EQ(q.next()->what, type::extend_failed);
  const auto third = q.next();
  EXPECT_EQ(third->extensions, 2u);
  EXPECT_EQ(third->missed, 0u);
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.next().has_value());
}

// Full: the oldest goes, and the event now first counts it (and what it had counted itself), so
// that a reader can tell how many it missed. The total is conserved.
TEST(event_queue, a_full_queue_drops_the_oldest_and_counts_it) {
  event_queue<lock_event> q{3};
  for (std::size_t n = 1; n <= 10; ++n) EXPECT_EQ(q.push(ev(type::extended, n)), n > 3 ? 1u : 0u);
  EXPECT_EQ(q.size(), 3u);
  std::size_t accounted = 0;
  auto first = q.next();
  EXPECT_EQ(first->extensions, 8u);
  EXPECT_EQ(first->missed, 7u);
  accounted += 1 + first->missed;
  while (auto e = q.next()) accounted += 1 + e->missed;
  EXPECT_EQ(accounted, 10u);
}

// The final event is never dropped, nothing follows it, and it is handed out again and again
// (counting the missed ones only the first time).
TEST(event_queue, the_final_event_is_kept_and_sticky) {
  event_queue<lock_event> q{2};
  q.push(ev(type::extended, 1));
  q.push(ev(type::extended, 2));
  q.push(ev(type::lost));  // full: extension 1 goes
  EXPECT_TRUE(q.closed());
  q.push(ev(type::extended, 3));  // ignored after the end
  q.push(ev(type::released));     // ignored: the lock was lost, not released
  EXPECT_EQ(q.size(), 2u);
  const auto a = q.next();
  EXPECT_EQ(a->extensions, 2u);
  EXPECT_EQ(a->missed, 1u);
  const auto b = q.next();
  EXPECT_EQ(b->what, type::lost);
  for (int i = 0; i < 3; ++i) {
    const auto again = q.next();
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->what, type::lost);
    EXPECT_EQ(again->missed, 0u);
  }
}

// A final event pushed on a queue full of extensions is kept; a cap below 2 is raised to 2.
TEST(event_queue, a_final_event_always_finds_room) {
  event_queue<lock_event> q{1};
  q.push(ev(type::extended, 1));
  q.push(ev(type::extended, 2));
  q.push(ev(type::extended, 3));
  q.push(ev(type::released));
  const auto a = q.next();
  EXPECT_EQ(a->extensions, 3u);
  EXPECT_EQ(a->missed, 2u);
  EXPECT_EQ(q.next()->what, type::released);
}

TEST(event_queue, the_missed_count_goes_to_the_final_event_when_it_is_alone) {
  event_queue<lock_event> q{2};
  q.push(ev(type::extended, 1));
  q.push(ev(type::extended, 2));
  q.push(ev(type::extended, 3));  // drops 1; 2 counts it
  EXPECT_EQ(q.next()->missed, 1u);
  EXPECT_EQ(q.next()->missed, 0u);
  EXPECT_TRUE(q.empty());
}

}  // namespace
