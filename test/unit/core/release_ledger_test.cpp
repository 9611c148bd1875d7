// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/release_ledger.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace {

using namespace std::chrono_literals;
using redlock::core::release_ledger;
using clock_type = release_ledger::clock;

const clock_type::time_point t0{};
// For the entries that yield: no bound of their own (a first deferral).
constexpr bool yields = true;
constexpr auto none = clock_type::time_point::min();

TEST(release_ledger, hands_over_what_is_still_worth_sending_in_order_and_forgets_it) {
  release_ledger l;
  l.defer("a", 2s, t0);
  l.defer("b", 500ms, t0);
  l.defer("c", 2s, t0 + 100ms);
  std::size_t expired = 99;
  auto due = l.take(t0 + 1s, expired);  // b's key (500 ms) cannot exist any more
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].payload, "a");
  EXPECT_EQ(due[1].payload, "c");
  EXPECT_EQ(due[1].until, t0 + 2100ms);
  EXPECT_EQ(expired, 1u);
  EXPECT_TRUE(l.empty());
  EXPECT_TRUE(l.take(t0 + 1s, expired).empty());
  EXPECT_EQ(expired, 0u);
}

TEST(release_ledger, a_broken_connection_moves_every_bound_to_one_lifetime_from_the_break) {
  release_ledger l;
  l.defer("a", 1s, t0);            // until 1 s
  l.defer("b", 3s, t0);            // until 3 s
  l.connection_lost(t0 + 1500ms);  // requests still queued could have run until now
  std::size_t expired = 0;
  auto due = l.take(t0 + 2400ms, expired);
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].until, t0 + 2500ms);  // 1.5 s + its 1 s
  EXPECT_EQ(due[1].until, t0 + 4500ms);  // 1.5 s + its 3 s
  EXPECT_EQ(expired, 0u);
}

TEST(release_ledger, a_re_sent_release_keeps_its_bound) {
  // Taken, sent, and in doubt again: nothing extended its key since, so its bound stays.
  std::size_t expired = 0;
  release_ledger m;
  m.defer("a", 2s, t0 + 1s, t0 + 1200ms);
  auto due = m.take(t0 + 1100ms, expired);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].until, t0 + 1200ms);
  EXPECT_EQ(m.defer("late", 2s, t0 + 2s, t0 + 1500ms), 0u);  // already past: not kept
  EXPECT_TRUE(m.empty());
}

TEST(release_ledger, the_same_release_deferred_twice_in_a_row_is_kept_once) {
  release_ledger l;
  l.defer("a", 1s, t0);
  l.defer("a", 1s, t0 + 400ms);
  std::size_t expired = 0;
  auto due = l.take(t0, expired);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].until, t0 + 1400ms);
}

TEST(release_ledger, a_full_ledger_drops_an_expired_entry_wherever_it_is_kept) {
  release_ledger l{3};
  l.defer("a", 5s, t0);
  l.defer("short", 100ms, t0 + 10ms);  // expires first, though not the oldest
  l.defer("c", 5s, t0 + 20ms);
  EXPECT_EQ(l.defer("d", 5s, t0 + 50ms), 1u);   // none expired yet: the oldest ("a") goes
  EXPECT_EQ(l.defer("e", 5s, t0 + 200ms), 1u);  // "short" has expired: it goes, not "c"
  std::size_t expired = 0;
  auto due = l.take(t0 + 200ms, expired);
  ASSERT_EQ(due.size(), 3u);
  EXPECT_EQ(due[0].payload, "c");
  EXPECT_EQ(due[1].payload, "d");
  EXPECT_EQ(due[2].payload, "e");
}

TEST(release_ledger, a_full_ledger_keeps_an_entry_whose_bound_a_broken_connection_moved) {
  release_ledger l{2};
  l.defer("a", 100ms, t0);                      // until 100 ms
  l.defer("b", 5s, t0);                         // until 5 s
  l.connection_lost(t0 + 80ms);                 // "a" until 180 ms
  EXPECT_EQ(l.defer("c", 5s, t0 + 150ms), 1u);  // "a" has not expired: the oldest goes, and only it
  EXPECT_EQ(l.size(), 2u);
  l.connection_lost(t0 + 160ms);  // every bound moves later again
  EXPECT_EQ(l.defer("d", 5s, t0 + 190ms), 1u);
  std::size_t expired = 0;
  auto due = l.take(t0 + 190ms, expired);
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].payload, "c");
  EXPECT_EQ(due[1].payload, "d");
  EXPECT_EQ(expired, 0u);
}

TEST(release_ledger, is_bounded_dropping_expired_entries_first_then_the_oldest) {
  release_ledger l{3};
  l.defer("short", 100ms, t0);
  l.defer("b", 5s, t0);
  l.defer("c", 5s, t0);
  EXPECT_EQ(l.defer("d", 5s, t0 + 200ms), 1u);  // "short" had expired: it goes
  EXPECT_EQ(l.size(), 3u);
  EXPECT_EQ(l.defer("e", 5s, t0 + 300ms), 1u);  // none expired: the oldest ("b") goes
  std::size_t expired = 0;
  auto due = l.take(t0 + 300ms, expired);
  ASSERT_EQ(due.size(), 3u);
  EXPECT_EQ(due[0].payload, "c");
  EXPECT_EQ(due[1].payload, "d");
  EXPECT_EQ(due[2].payload, "e");
}

// A fair waiter's dequeue (an entry that yields) mostly frees queue places, which expire on their
// own, while a release's key is there whenever the release is: when the ledger is full, dequeues
// go before releases, and a dequeue never pushes a release out.
TEST(release_ledger, a_full_ledger_drops_dequeues_before_releases) {
  release_ledger l{3};
  l.defer("dq1", 5s, t0, none, yields);
  l.defer("r1", 5s, t0);
  l.defer("dq2", 5s, t0, none, yields);
  EXPECT_EQ(l.defer("r2", 5s, t0 + 1ms), 1u);                 // the oldest dequeue goes, not the older release
  EXPECT_EQ(l.defer("r3", 5s, t0 + 2ms), 1u);                 // then the other one
  EXPECT_EQ(l.defer("dq3", 5s, t0 + 3ms, none, yields), 1u);  // no room: it is dropped itself
  EXPECT_EQ(l.defer("r4", 5s, t0 + 4ms), 1u);                 // releases alone: the oldest release goes
  std::size_t expired = 0;
  auto due = l.take(t0 + 5ms, expired);
  ASSERT_EQ(due.size(), 3u);
  EXPECT_EQ(due[0].payload, "r2");
  EXPECT_EQ(due[1].payload, "r3");
  EXPECT_EQ(due[2].payload, "r4");
  EXPECT_FALSE(due[0].yields);
}

TEST(release_ledger, releases_and_dequeues_are_handed_over_in_the_order_they_were_deferred) {
  release_ledger l;
  l.defer("r1", 5s, t0);
  l.defer("dq1", 5s, t0, none, yields);
  l.defer("dq2", 100ms, t0, none, yields);
  l.defer("r2", 5s, t0);
  l.defer("dq3", 5s, t0, none, yields);
  l.defer("dq3", 6s, t0, none, yields);  // the same one twice in a row: kept once, with the later bound
  EXPECT_EQ(l.size(), 5u);
  std::size_t expired = 0;
  auto due = l.take(t0 + 1s, expired);
  ASSERT_EQ(due.size(), 4u);
  EXPECT_EQ(due[0].payload, "r1");
  EXPECT_EQ(due[1].payload, "dq1");
  EXPECT_TRUE(due[1].yields);
  EXPECT_EQ(due[2].payload, "r2");
  EXPECT_EQ(due[3].payload, "dq3");
  EXPECT_EQ(due[3].until, t0 + 6s);
  EXPECT_EQ(expired, 1u);  // dq2
  EXPECT_TRUE(l.empty());
}

TEST(release_ledger, a_dequeue_pushes_out_an_older_dequeue_but_never_a_release) {
  release_ledger l{2};
  l.defer("r1", 5s, t0);
  l.defer("dq1", 5s, t0, none, yields);
  EXPECT_EQ(l.defer("dq2", 5s, t0 + 1ms, none, yields), 1u);  // dq1 goes
  EXPECT_EQ(l.defer("dq2", 6s, t0 + 2ms, none, yields), 0u);  // a repeat drops nothing, even when full
  std::size_t expired = 0;
  auto due = l.take(t0 + 3ms, expired);
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].payload, "r1");
  EXPECT_EQ(due[1].payload, "dq2");
  EXPECT_EQ(due[1].until, t0 + 6002ms);  // the repeat's later bound
}

TEST(release_ledger, a_repeat_is_kept_once_within_its_lane) {
  release_ledger l;
  l.defer("r1", 5s, t0);
  l.defer("dq1", 5s, t0, none, yields);
  l.defer("r1", 5s, t0 + 1ms);  // the last release kept: the same one
  EXPECT_EQ(l.size(), 2u);
}

TEST(release_ledger, a_full_ledger_drops_the_expired_entries_of_both_lanes) {
  release_ledger l{4};
  l.defer("r-short", 100ms, t0);
  l.defer("dq-short", 100ms, t0, none, yields);
  l.defer("r2", 5s, t0);
  l.defer("dq2", 5s, t0, none, yields);
  EXPECT_EQ(l.defer("r3", 5s, t0 + 200ms), 2u);  // both short ones had expired
  EXPECT_EQ(l.size(), 3u);
  std::size_t expired = 0;
  auto due = l.take(t0 + 300ms, expired);
  ASSERT_EQ(due.size(), 3u);
  EXPECT_EQ(due[0].payload, "r2");
  EXPECT_EQ(due[1].payload, "dq2");
  EXPECT_EQ(due[2].payload, "r3");
}

}  // namespace
