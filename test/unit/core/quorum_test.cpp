// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/quorum.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace {

using redlock::core::majority;
using redlock::core::quorum;
using redlock::core::quorum_state;

// The answers a master can give to one request, as the lock layer sees them.
enum class answer { grant, refuse, error, timeout };

TEST(quorum, majority_is_n_over_two_plus_one) {
  EXPECT_EQ(majority(1), 1u);
  EXPECT_EQ(majority(2), 2u);
  EXPECT_EQ(majority(3), 2u);
  EXPECT_EQ(majority(4), 3u);
  EXPECT_EQ(majority(5), 3u);
  EXPECT_EQ(majority(7), 4u);
}

class quorum_orderings : public ::testing::TestWithParam<std::size_t> {};

// Every sequence of answers for N masters (4^N of them), fed one at a time in that order. After
// every answer the collector must say "reached" or "impossible" exactly when the answers so far
// make that outcome certain whatever the rest say, and "pending" otherwise (the caller never
// waits for a master whose answer cannot change the outcome, and never decides too early).
TEST_P(quorum_orderings, decides_exactly_when_the_outcome_is_certain) {
  const std::size_t n = GetParam();
  const std::size_t need = majority(n);
  std::size_t sequences = 1;
  for (std::size_t i = 0; i < n; ++i) sequences *= 4;
  for (std::size_t code = 0; code < sequences; ++code) {
    quorum q{n};
    std::size_t yes = 0, no = 0, c = code;
    quorum_state first_decision = quorum_state::pending;
    for (std::size_t i = 0; i < n; ++i, c /= 4) {
      const auto a = static_cast<answer>(c % 4);
      if (a == answer::grant) {
        q.yes();
        ++yes;
      } else {
        q.no();
        ++no;
      }
      const std::size_t left = n - yes - no;
      const bool surely_yes = yes >= need;
      const bool surely_no = yes + left < need;
      const auto expected = surely_yes  ? quorum_state::reached
                            : surely_no ? quorum_state::impossible
                                        : quorum_state::pending;
      ASSERT_EQ(q.state(), expected) << "n=" << n << " code=" << code << " step=" << i;
      if (first_decision == quorum_state::pending) first_decision = q.state();
      // Once decided, no later answer changes the decision.
      if (first_decision != quorum_state::pending) {
        ASSERT_EQ(q.state(), first_decision);
      }
    }
    // With every answer in, the outcome is decided, and it is the majority rule.
    ASSERT_NE(q.state(), quorum_state::pending);
    ASSERT_EQ(q.state() == quorum_state::reached, yes >= need);
    ASSERT_EQ(q.pending_votes(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(n_1_to_7, quorum_orderings, ::testing::Range<std::size_t>(1, 8));

TEST(quorum, a_dead_minority_does_not_delay_success_or_failure) {
  quorum q{5};
  q.yes();
  q.yes();
  EXPECT_EQ(q.state(), quorum_state::pending);
  q.yes();  // two masters never answer
  EXPECT_EQ(q.state(), quorum_state::reached);

  quorum f{5};
  f.no();
  f.no();
  EXPECT_EQ(f.state(), quorum_state::pending);
  f.no();  // three refusals: two more grants could not make a majority
  EXPECT_EQ(f.state(), quorum_state::impossible);
}

TEST(quorum, even_fleet_tie_is_a_failure) {
  quorum q{4};
  q.yes();
  q.yes();
  q.no();
  q.no();
  EXPECT_EQ(q.state(), quorum_state::impossible);
}

}  // namespace
