// SPDX-License-Identifier: BSL-1.0
// The lock kinds' rules in the sans-I/O machines (docs/design.md, "Lock kinds"): the semaphore's
// quorum and why it excludes a holder too many, a quorum larger than a majority in `quorum`,
// `lock_fsm` and `extend_fsm`, the fence and its confirmation, a writer that finds readers, and
// what the kinds' script answers mean.

#include "transcript.hpp"
#include <redlock/core/extend_fsm.hpp>
#include <redlock/core/lock_fsm.hpp>
#include <redlock/core/outcome.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace redlock::test;
using redlock::master_status;
using redlock::core::classify;
using redlock::core::command;
using redlock::core::drift_policy;
using redlock::core::extend_action;
using redlock::core::extend_fsm;
using redlock::core::lock_action;
using redlock::core::lock_fsm;
using redlock::core::lock_rules;
using redlock::core::majority;
using redlock::core::quorum;
using redlock::core::quorum_state;
using redlock::core::retry_policy;
using redlock::core::semaphore_quorum;
using redlock::test::describe;
namespace resp = redlock::resp;
using boost::system::error_code;

const error_code aborted = boost::asio::error::operation_aborted;

// ttl 1000 ms with the default drift (1 % + 2 ms): a round started at `s` may be relied on until
// s + 988 ms. Per-master deadline 250 ms; the retry delay at unit_random 0.5 is 50 + 50 ms.
constexpr auto ttl = 1000ms;
constexpr auto usable = 988ms;
constexpr auto timeout = 250ms;
constexpr auto delay = 100ms;

lock_rules kind_rules(std::size_t masters, bool retry = true) {
  lock_rules r;
  r.masters = masters;
  r.ttl = ttl;
  r.request_timeout = timeout;
  r.drift = drift_policy{};
  r.retry = retry_policy{0, 2000ms, 50ms, 100ms};
  r.retry_enabled = retry;
  r.scripted = true;
  return r;
}

lock_rules fence_rules(std::size_t masters, bool retry = true) {
  auto r = kind_rules(masters, retry);
  r.fence = true;
  return r;
}

lock_rules semaphore_rules(std::size_t masters, std::size_t permits, bool retry = true) {
  auto r = kind_rules(masters, retry);
  r.quorum = semaphore_quorum(masters, permits);
  return r;
}

// `{status, number}` as every kind's acquire script answers (a RESP array of two integers).
resp::response script(std::int64_t status, std::int64_t number) {
  return {{resp::type::array, 2, 0, ""},
          {resp::type::integer, 0, 1, std::to_string(status)},
          {resp::type::integer, 0, 1, std::to_string(number)}};
}

std::string describe(const lock_action& a) {
  std::string s;
  switch (a.what) {
    case lock_action::type::wait:
      s = "wait";
      break;
    case lock_action::type::acquire:
      s = "acquire until " + describe(a.at);
      break;
    case lock_action::type::sleep:
      s = "sleep until " + describe(a.at);
      break;
    case lock_action::type::complete:
      s = "complete(" + describe(a.ec) + ")";
      break;
    case lock_action::type::confirm:
      s = "confirm " + std::to_string(a.fence) + (a.create ? " creating" : "") + " until " + describe(a.at);
      break;
  }
  if (a.release) s += " +release";
  if (a.fair) s += " fair";
  if (a.what != lock_action::type::complete && a.ec) s += " ec=" + describe(a.ec);
  return s;
}

// The actions a step must return, described as `describe` does.
const std::string waits = "wait";
std::string acquire_until(clock::duration t) {
  return describe(lock_action{lock_action::type::acquire, false, at(t), {}});
}
std::string sleep_until(clock::duration t) { return describe(lock_action{lock_action::type::sleep, true, at(t), {}}); }
std::string completes(error_code ec, bool release) {
  return describe(lock_action{lock_action::type::complete, release, {}, ec});
}
std::string confirms(std::int64_t fence, clock::duration until, bool creating = false) {
  lock_action a{lock_action::type::confirm, false, at(until), {}};
  a.fence = fence;
  a.create = creating;
  return describe(a);
}

// One lock_fsm and the events of its round in progress, each returning the described action.
struct machine {
  explicit machine(const lock_rules& r) : f(r), masters(r.masters) {}

  std::string start(clock::duration t) {
    auto a = describe(f.start(at(t)));
    started_round = f.round();
    return a;
  }
  /// An answer to the round in progress (acquire or confirmation).
  std::string reply(std::size_t m, const resp::response& r, clock::duration t) {
    return describe(f.on_reply(f.round(), m, {}, r, at(t), 0.5));
  }
  std::string grant(std::size_t m, std::int64_t number, clock::duration t) { return reply(m, script(1, number), t); }
  std::string refuse(std::size_t m, std::int64_t number, clock::duration t) { return reply(m, script(0, number), t); }
  std::string fail(std::size_t m, redlock::error e, clock::duration t) {
    return describe(f.on_reply(f.round(), m, e, no_reply(), at(t), 0.5));
  }
  /// An answer carrying an explicit round (a straggler).
  std::string reply_of_round(std::uint64_t round, std::size_t m, const resp::response& r, clock::duration t) {
    return describe(f.on_reply(round, m, {}, r, at(t), 0.5));
  }
  std::string timer(clock::duration t) { return describe(f.on_timer(at(t))); }
  std::string cancel() { return describe(f.cancel()); }

  /// The masters `needs_confirm` names, as "0,3".
  std::string to_confirm() const {
    std::string s;
    for (std::size_t i = 0; i < masters + 2; ++i) {
      if (!f.needs_confirm(i)) continue;
      if (!s.empty()) s += ",";
      s += std::to_string(i);
    }
    return s;
  }

  lock_fsm f;
  std::size_t masters;
  std::uint64_t started_round = 0;  // the round `start` sent
};

// ---- semaphore_quorum ----------------------------------------------------------------------------

TEST(semaphore_quorum, is_the_smallest_q_with_q_times_p_plus_one_above_p_times_n) {
  for (std::size_t n = 1; n <= 9; ++n) {
    for (std::size_t p = 1; p <= 8; ++p) {
      SCOPED_TRACE("n=" + std::to_string(n) + " p=" + std::to_string(p));
      std::size_t smallest = 1;
      while (smallest * (p + 1) <= p * n) ++smallest;
      const auto q = semaphore_quorum(n, p);
      EXPECT_EQ(q, smallest);
      EXPECT_GE(q, majority(n));
      EXPECT_LE(q, n);
      if (p > 1) {
        EXPECT_GE(q, semaphore_quorum(n, p - 1)) << "more permits never need fewer masters";
      }
    }
  }
  // A few by hand.
  EXPECT_EQ(semaphore_quorum(5, 2), 4u);
  EXPECT_EQ(semaphore_quorum(3, 2), 3u);
  EXPECT_EQ(semaphore_quorum(4, 2), 3u);
  EXPECT_EQ(semaphore_quorum(7, 2), 5u);
  EXPECT_EQ(semaphore_quorum(7, 3), 6u);
  EXPECT_EQ(semaphore_quorum(8, 3), 7u);
  EXPECT_EQ(semaphore_quorum(9, 2), 7u);
  EXPECT_EQ(semaphore_quorum(9, 3), 7u);
}

TEST(semaphore_quorum, one_permit_is_a_majority_and_n_minus_one_permits_need_every_master) {
  for (std::size_t n = 1; n <= 9; ++n) {
    EXPECT_EQ(semaphore_quorum(n, 1), majority(n)) << "n=" << n;
    for (std::size_t p = std::max<std::size_t>(n - 1, 1); p <= n + 8; ++p) {
      EXPECT_EQ(semaphore_quorum(n, p), n) << "n=" << n << " p=" << p;
    }
  }
}

// Every set of `size` masters out of `n`, as bit masks.
std::vector<unsigned> sets_of(std::size_t n, std::size_t size) {
  std::vector<unsigned> out;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (static_cast<std::size_t>(std::popcount(mask)) == size) out.push_back(mask);
  }
  return out;
}

// Whether `holders` holders, each admitted by one of `sets` (several may pick the same), can be
// placed so that no master admits more than `permits` of them: then every master keeps its own
// limit, yet all the holders hold at once. Picks in non-decreasing order (the holders are alike).
bool holders_fit(const std::vector<unsigned>& sets, std::size_t holders, std::size_t n, std::size_t permits,
                 std::vector<std::size_t>& load, std::size_t from = 0) {
  if (holders == 0) return true;
  for (std::size_t s = from; s < sets.size(); ++s) {
    bool fits = true;
    for (std::size_t m = 0; m < n; ++m) {
      if (((sets[s] >> m) & 1u) && load[m] == permits) fits = false;
    }
    if (!fits) continue;
    for (std::size_t m = 0; m < n; ++m) load[m] += ((sets[s] >> m) & 1u);
    const bool ok = holders_fit(sets, holders - 1, n, permits, load, s);
    for (std::size_t m = 0; m < n; ++m) load[m] -= ((sets[s] >> m) & 1u);
    if (ok) return true;
  }
  return false;
}

bool holders_fit(std::size_t n, std::size_t q, std::size_t permits) {
  std::vector<std::size_t> load(n, 0);
  return holders_fit(sets_of(n, q), permits + 1, n, permits, load);
}

// P + 1 holders, each granted by q masters: with q = semaphore_quorum(N, P) some master is among
// all of them (and admits at most P), so they cannot all hold at once; with one master fewer, some
// placement keeps every master within P.
TEST(semaphore_quorum, any_p_plus_one_quorums_share_a_master_and_one_fewer_would_not) {
  for (std::size_t n = 1; n <= 6; ++n) {
    for (std::size_t p = 1; p <= 4; ++p) {
      SCOPED_TRACE("n=" + std::to_string(n) + " p=" + std::to_string(p));
      const auto q = semaphore_quorum(n, p);
      EXPECT_FALSE(holders_fit(n, q, p));
      if (q > 1) {
        EXPECT_TRUE(holders_fit(n, q - 1, p));
      }
    }
  }
}

// An example: three masters, two permits. A majority (2) lets three holders in, on
// {1,2}, {2,3} and {1,3}: each master admits only two of them, yet all three hold.
TEST(semaphore_quorum, a_majority_would_let_three_holders_share_two_permits_on_three_masters) {
  const std::vector<unsigned> placement{0b011, 0b110, 0b101};
  std::vector<std::size_t> load(3, 0);
  for (const auto s : placement) {
    for (std::size_t m = 0; m < 3; ++m) load[m] += ((s >> m) & 1u);
  }
  EXPECT_EQ(*std::max_element(load.begin(), load.end()), 2u);
  EXPECT_TRUE(holders_fit(3, majority(3), 2));
  EXPECT_EQ(semaphore_quorum(3, 2), 3u);
  EXPECT_FALSE(holders_fit(3, 3, 2));
}

// ---- quorum with a kind's `needed` ---------------------------------------------------------------

TEST(kind_quorum, needed_is_clamped_to_a_majority_and_to_n) {
  for (std::size_t n = 1; n <= 9; ++n) {
    for (std::size_t needed = 0; needed <= n + 2; ++needed) {
      const quorum q{n, needed};
      EXPECT_EQ(q.needed(), std::clamp(needed, majority(n), n)) << "n=" << n << " needed=" << needed;
      EXPECT_EQ(q.size(), n);
    }
  }
}

TEST(kind_quorum, reached_at_needed_yes_and_impossible_past_n_minus_needed_no) {
  for (std::size_t n = 1; n <= 7; ++n) {
    for (std::size_t needed = majority(n); needed <= n; ++needed) {
      SCOPED_TRACE("n=" + std::to_string(n) + " needed=" + std::to_string(needed));
      quorum yes{n, needed};
      quorum no{n, needed};
      for (std::size_t i = 1; i <= n; ++i) {
        yes.yes();
        no.no();
        EXPECT_EQ(yes.state(), i >= needed ? quorum_state::reached : quorum_state::pending) << i << " yes";
        EXPECT_EQ(no.state(), i > n - needed ? quorum_state::impossible : quorum_state::pending) << i << " no";
      }
      // needed - 1 yes and n - needed no: the last master decides either way.
      quorum last_yes{n, needed};
      for (std::size_t i = 0; i + 1 < needed; ++i) last_yes.yes();
      for (std::size_t i = 0; i < n - needed; ++i) last_yes.no();
      EXPECT_EQ(last_yes.state(), quorum_state::pending);
      quorum last_no = last_yes;
      last_yes.yes();
      last_no.no();
      EXPECT_EQ(last_yes.state(), quorum_state::reached);
      EXPECT_EQ(last_no.state(), quorum_state::impossible);
    }
  }
}

TEST(kind_quorum, two_permits_on_five_masters_need_four_and_fail_at_two_no) {
  quorum q{5, semaphore_quorum(5, 2)};
  q.yes();
  q.yes();
  q.yes();
  EXPECT_EQ(q.state(), quorum_state::pending) << "a majority is not enough";
  q.no();
  EXPECT_EQ(q.state(), quorum_state::pending);
  q.no();
  EXPECT_EQ(q.state(), quorum_state::impossible);
}

// ---- semaphore rounds in lock_fsm ----------------------------------------------------------------

TEST(semaphore_lock, three_grants_of_five_are_not_enough_for_two_permits) {
  machine m{semaphore_rules(5, 2)};
  EXPECT_EQ(m.start(0ms), acquire_until(timeout));
  EXPECT_EQ(m.f.table().cmd(), command::acquire_script);
  EXPECT_EQ(m.f.table().needed(), 4u);
  EXPECT_EQ(m.grant(0, 1, 10ms), waits);
  EXPECT_EQ(m.grant(1, 2, 11ms), waits);
  EXPECT_EQ(m.grant(2, 1, 12ms), waits) << "a majority of a semaphore's masters is not its quorum";
  EXPECT_EQ(m.refuse(3, 2, 13ms), waits) << "one refusal leaves four grants possible";
  EXPECT_EQ(m.grant(4, 2, 20ms), completes({}, false));
  EXPECT_EQ(m.f.validity_deadline(), at(usable));
  EXPECT_EQ(m.f.last_error(), error_code{});
  EXPECT_EQ(m.f.fence(), 0) << "holders' counts are no fence";
  EXPECT_EQ(m.to_confirm(), "");
  // Each master's count is kept with its answer.
  const auto& r = m.f.table().results();
  const std::vector<std::int64_t> values{1, 2, 1, 2, 2};
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(r[i].value, values[i]) << "master " << i;
  EXPECT_EQ(r[3].status, master_status::taken);
}

TEST(semaphore_lock, two_refusals_of_five_make_two_permits_impossible) {
  machine m{semaphore_rules(5, 2)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, 1, 5ms), waits);
  EXPECT_EQ(m.refuse(1, 2, 6ms), waits);
  // A majority (3 of 5) could still grant; the quorum of 4 cannot.
  EXPECT_EQ(m.refuse(2, 2, 7ms), sleep_until(7ms + delay));
  EXPECT_EQ(m.f.last_error(), redlock::error::not_acquired);
  EXPECT_EQ(m.timer(7ms + delay), acquire_until(7ms + delay + timeout));
  EXPECT_EQ(m.f.attempts(), 2u);
}

TEST(semaphore_lock, two_failures_of_five_are_quorum_unavailable_and_released) {
  machine m{semaphore_rules(5, 2, false)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, 1, 5ms), waits);
  EXPECT_EQ(m.fail(1, redlock::error::master_timeout, 250ms), waits);
  EXPECT_EQ(m.fail(2, redlock::error::connection_lost, 250ms), completes(redlock::error::quorum_unavailable, true));
}

TEST(semaphore_lock, one_permit_needs_only_a_majority) {
  machine m{semaphore_rules(5, 1)};
  m.start(0ms);
  EXPECT_EQ(m.f.table().needed(), 3u);
  m.grant(0, 1, 1ms);
  m.refuse(1, 1, 2ms);
  m.grant(2, 1, 3ms);
  EXPECT_EQ(m.grant(3, 1, 4ms), completes({}, false));
}

TEST(semaphore_lock, a_quorum_of_every_master_fails_at_the_first_no) {
  machine m{semaphore_rules(3, 2)};
  m.start(0ms);
  m.grant(0, 1, 1ms);
  EXPECT_EQ(m.fail(1, redlock::error::master_timeout, 250ms), sleep_until(250ms + delay));
  EXPECT_EQ(m.f.last_error(), redlock::error::quorum_unavailable);
}

// A kind's round is a script's: the answer of `SET NX` is not one of its answers.
TEST(kind_lock, a_scripted_round_takes_only_script_answers) {
  machine m{kind_rules(3, false)};
  m.start(0ms);
  EXPECT_EQ(m.reply(0, ok_reply(), 1ms), waits);
  EXPECT_EQ(m.f.table().results()[0].status, master_status::failed);
  EXPECT_EQ(m.f.table().results()[0].error, redlock::error::unexpected_reply);
  EXPECT_EQ(m.reply(1, int_reply("1"), 2ms), completes(redlock::error::quorum_unavailable, true));
}

// ---- fenced rounds ---------------------------------------------------------------------------------

TEST(fenced_lock, granting_masters_that_agree_give_the_fence_at_once) {
  machine m{fence_rules(3)};
  EXPECT_EQ(m.start(0ms), acquire_until(timeout));
  EXPECT_EQ(m.grant(0, 42, 10ms), waits);
  EXPECT_EQ(m.refuse(1, 0, 11ms), waits);
  EXPECT_EQ(m.grant(2, 42, 12ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 42);
  EXPECT_EQ(m.f.confirm_rounds(), 0u);
  EXPECT_EQ(m.to_confirm(), "");
  EXPECT_EQ(m.f.validity_deadline(), at(usable));
}

// The client's hint (its last fence on the resource) is where the first round's grants count on
// from, and stays the floor of later rounds unless a master answers more; out of a counter's range,
// or for a lock without fencing, it is not used.
TEST(fenced_lock, the_first_round_counts_on_from_the_floor_start_was_given) {
  lock_fsm f{fence_rules(3)};
  EXPECT_EQ(f.start(at(0ms), false, 41).fence, 41);
  EXPECT_EQ(f.fence_floor(), 41);
  (void)f.on_reply(f.round(), 0, {}, script(0, 12), at(1ms), 0.5);
  EXPECT_EQ(f.fence_floor(), 41) << "a smaller counter does not lower the floor";
  (void)f.on_reply(f.round(), 1, {}, script(0, 50), at(2ms), 0.5);
  (void)f.on_reply(f.round(), 2, {}, script(0, 50), at(3ms), 0.5);
  EXPECT_EQ(f.on_timer(at(1s)).fence, 50) << "the next round counts on from the largest answered";
  // The scripts refuse counters from 9007199254740000 on: a grant from the floor must stay below.
  lock_fsm top{fence_rules(3)};
  EXPECT_EQ(top.start(at(0ms), false, 9007199254739998).fence, 9007199254739998);
  lock_fsm huge{fence_rules(3)};
  EXPECT_EQ(huge.start(at(0ms), false, 9007199254739999).fence, 0);
  lock_fsm plain{kind_rules(3)};
  EXPECT_EQ(plain.start(at(0ms), false, 41).fence, 0);
}

TEST(fenced_lock, a_lock_without_fencing_has_no_fence) {
  machine m{kind_rules(3)};
  m.start(0ms);
  m.grant(0, 42, 10ms);
  EXPECT_EQ(m.grant(1, 43, 12ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 0);
  EXPECT_EQ(m.to_confirm(), "");
}

// Five masters: 10, (refused), 12, 11. The fence is 12, answered by one master only: masters 0
// and 3 are raised to it before success.
machine confirming(bool retry = true, clock::duration t = 10ms) {
  machine m{fence_rules(5, retry)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, 10, t - 3ms), waits);
  EXPECT_EQ(m.refuse(1, 99, t - 2ms), waits) << "a refusal's number is no fence";
  EXPECT_EQ(m.grant(2, 12, t - 1ms), waits);
  EXPECT_EQ(m.grant(3, 11, t), confirms(12, std::min<clock::duration>(t + timeout, usable)));
  EXPECT_TRUE(m.f.confirming());
  return m;
}

TEST(fenced_lock, a_fence_held_by_fewer_than_a_majority_is_confirmed_on_the_masters_behind) {
  auto m = confirming();
  EXPECT_EQ(m.to_confirm(), "0,3");
  EXPECT_EQ(m.f.confirm_rounds(), 1u);
  EXPECT_EQ(m.f.attempts(), 1u);
  // The confirmation is a round of its own: answers of the acquire round are no longer awaited.
  EXPECT_NE(m.f.round(), m.started_round);
  EXPECT_TRUE(m.f.awaiting(m.f.round()));
  EXPECT_FALSE(m.f.awaiting(m.started_round));
  EXPECT_EQ(m.reply(0, int_reply("1"), 20ms), waits);
  EXPECT_EQ(m.reply(3, int_reply("1"), 21ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 12);
  EXPECT_EQ(m.f.last_error(), error_code{});
  EXPECT_FALSE(m.f.confirming());
  // Validity counts from the acquire round's start, not from the confirmation.
  EXPECT_EQ(m.f.validity_deadline(), at(usable));
}

TEST(fenced_lock, only_the_masters_behind_are_sent_the_confirmation) {
  machine m{fence_rules(5)};
  m.start(0ms);
  m.grant(0, 12, 1ms);
  m.grant(1, 10, 2ms);
  EXPECT_EQ(m.grant(2, 12, 3ms), confirms(12, 3ms + timeout));
  EXPECT_EQ(m.to_confirm(), "1");
  EXPECT_EQ(m.reply(1, int_reply("1"), 4ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 12);
}

TEST(fenced_lock, answers_other_than_the_awaited_confirmations_are_ignored) {
  auto m = confirming();
  const auto acquire_round = m.started_round;
  // A straggler of the acquire round granting a larger number raises nothing.
  EXPECT_EQ(m.reply_of_round(acquire_round, 4, script(1, 50), 15ms), waits);
  EXPECT_EQ(m.reply_of_round(acquire_round, 0, script(1, 10), 15ms), waits) << "no confirmation";
  EXPECT_EQ(m.reply_of_round(acquire_round, 0, int_reply("1"), 15ms), waits);
  EXPECT_EQ(m.to_confirm(), "0,3");
  // Confirmations from masters that were not asked, or a second one, are no votes.
  EXPECT_EQ(m.reply(4, int_reply("1"), 16ms), waits);
  EXPECT_EQ(m.reply(2, int_reply("1"), 16ms), waits);
  EXPECT_EQ(m.reply(1, int_reply("1"), 16ms), waits);
  EXPECT_EQ(m.reply(7, int_reply("1"), 16ms), waits);
  EXPECT_EQ(m.reply(0, int_reply("1"), 17ms), waits);
  EXPECT_EQ(m.reply(0, int_reply("1"), 18ms), waits);
  EXPECT_EQ(m.reply(3, int_reply("1"), 19ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 12);
}

TEST(fenced_lock, a_confirmation_refused_where_the_key_is_gone_fails_the_round_and_retries) {
  auto m = confirming();
  const auto confirm_round = m.f.round();
  EXPECT_EQ(m.reply(0, int_reply("0"), 20ms), sleep_until(20ms + delay));
  EXPECT_EQ(m.f.last_error(), redlock::error::not_acquired);
  EXPECT_EQ(m.f.fence(), 0) << "a failed round leaves no fence";
  EXPECT_EQ(m.to_confirm(), "");
  EXPECT_EQ(m.reply_of_round(confirm_round, 3, int_reply("1"), 21ms), waits);
  // The next round starts without a fence and finds its own.
  EXPECT_EQ(m.timer(20ms + delay), acquire_until(20ms + delay + timeout));
  EXPECT_EQ(m.f.fence(), 0);
  EXPECT_EQ(m.to_confirm(), "");
  EXPECT_EQ(m.reply_of_round(confirm_round, 3, int_reply("1"), 125ms), waits);
  EXPECT_EQ(m.grant(0, 13, 130ms), waits);
  EXPECT_EQ(m.grant(1, 13, 131ms), waits);
  EXPECT_EQ(m.grant(2, 13, 132ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 13);
  EXPECT_EQ(m.f.confirm_rounds(), 1u);
  EXPECT_EQ(m.f.attempts(), 2u);
  EXPECT_EQ(m.f.validity_deadline(), at(20ms + delay + usable));
}

TEST(fenced_lock, confirmations_that_time_out_fail_the_round_without_retries) {
  auto m = confirming(false);
  EXPECT_EQ(m.reply(3, int_reply("1"), 20ms), waits);
  EXPECT_EQ(m.fail(0, redlock::error::master_timeout, 260ms), completes(redlock::error::quorum_unavailable, true));
  EXPECT_EQ(m.f.fence(), 0) << "a failed lock has no fence";
  EXPECT_TRUE(m.f.done());
  EXPECT_EQ(m.reply(0, int_reply("1"), 261ms), waits);
}

TEST(fenced_lock, a_refused_confirmation_without_retries_is_not_acquired) {
  auto m = confirming(false);
  EXPECT_EQ(m.reply(3, int_reply("0"), 20ms), completes(redlock::error::not_acquired, true));
  EXPECT_EQ(m.f.fence(), 0);
}

TEST(fenced_lock, a_confirmation_decided_at_or_after_the_validity_deadline_is_validity_expired) {
  // Decided at 900 ms: the confirmation's deadline is the validity's (988 ms), not 900 + 250 ms.
  {
    auto m = confirming(true, 900ms);
    EXPECT_EQ(m.reply(0, int_reply("1"), 950ms), waits);
    EXPECT_EQ(m.reply(3, int_reply("1"), usable), sleep_until(usable + delay));
    EXPECT_EQ(m.f.last_error(), redlock::error::validity_expired);
    EXPECT_EQ(m.f.fence(), 0);
  }
  {
    auto m = confirming(true, 900ms);
    EXPECT_EQ(m.reply(0, int_reply("1"), 950ms), waits);
    EXPECT_EQ(m.reply(3, int_reply("1"), usable - 1ms), completes({}, false));
    EXPECT_EQ(m.f.fence(), 12);
  }
}

TEST(fenced_lock, cancel_during_the_confirmation_releases) {
  auto m = confirming();
  EXPECT_EQ(m.reply(0, int_reply("1"), 20ms), waits);
  EXPECT_EQ(m.cancel(), completes(aborted, true));
  EXPECT_TRUE(m.f.done());
  EXPECT_EQ(m.f.fence(), 0) << "a cancelled lock has no fence";
  EXPECT_EQ(m.reply(3, int_reply("1"), 21ms), waits);
  EXPECT_EQ(m.timer(200ms), waits);
  EXPECT_EQ(m.cancel(), waits);
}

// A grant answers its bumped counter (> 0) or, without a counter, its clock negated (< 0): never 0.
TEST(fenced_lock, a_grant_of_zero_is_no_fence_scripts_answer) {
  {
    machine m{fence_rules(3, false)};
    m.start(0ms);
    EXPECT_EQ(m.grant(0, 0, 1ms), waits);
    EXPECT_EQ(m.grant(1, 0, 2ms), completes(redlock::error::unexpected_reply, true));
    EXPECT_EQ(m.f.fence(), 0);
  }
  {
    machine m{fence_rules(3)};
    m.start(0ms);
    EXPECT_EQ(m.grant(0, 0, 1ms), waits);
    EXPECT_EQ(m.grant(1, 7, 2ms), sleep_until(2ms + delay));
    EXPECT_EQ(m.f.last_error(), redlock::error::unexpected_reply);
    EXPECT_EQ(m.f.fence(), 0);
  }
}

// A granting master without a counter (it lost its data, or the resource is new) cannot vouch for
// the fences before it: the machine waits for the round's other answers until a majority of
// masters answered a counter (any earlier holder's confirming majority shares a master with it),
// then fixes the fence above every counter and clock it heard and confirms it on every granting
// master, creating the missing counter. Here master 2's counter comes from a faster clock than
// master 0's: the clock alone (5) would give a fence below it.
TEST(fenced_lock, a_grant_without_a_counter_waits_for_a_majority_of_counters) {
  machine m{fence_rules(5)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, -5, 1ms), waits);
  EXPECT_EQ(m.grant(1, 40, 2ms), waits);
  EXPECT_EQ(m.grant(2, 41, 3ms), waits) << "quorum reached, but only 2 of the 3 needed counters heard";
  EXPECT_EQ(m.refuse(3, 90, 4ms), confirms(91, 4ms + timeout, true)) << "master 4's answer is not needed";
  EXPECT_EQ(m.to_confirm(), "0,1,2");
  EXPECT_TRUE(m.f.fence_verified());
  EXPECT_EQ(m.refuse(4, 95, 5ms), waits) << "a straggler of the acquire round changes nothing";
  EXPECT_EQ(m.reply(0, int_reply("1"), 6ms), waits);
  EXPECT_EQ(m.reply(1, int_reply("1"), 7ms), waits);
  EXPECT_EQ(m.reply(2, int_reply("1"), 8ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 91);
  EXPECT_EQ(m.f.validity_deadline(), at(usable));
}

// A majority of granting counters needs no hearing even when one granter has none.
TEST(fenced_lock, a_majority_of_granting_counters_fixes_the_fence_at_once) {
  machine m{fence_rules(5)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, 20, 1ms), waits);
  EXPECT_EQ(m.grant(1, -3000, 2ms), waits);
  EXPECT_EQ(m.grant(2, 21, 3ms), waits);
  EXPECT_EQ(m.grant(3, 22, 4ms), confirms(3001, 4ms + timeout, true)) << "above the clock heard as well";
  EXPECT_EQ(m.to_confirm(), "0,1,2,3");
}

// Every master heard, none with a counter: the resource's first use (or every master lost its
// data). Each answers its clock (refusing masters too), and the fence is above every one of them,
// the fastest included: it counts as verified, since no counter holds an earlier fence, and a
// fence that came from these clocks before is below the fastest clock now.
TEST(fenced_lock, every_master_heard_without_counters_fences_above_their_clocks) {
  machine m{fence_rules(3)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, -100, 1ms), waits);
  EXPECT_EQ(m.grant(1, -300, 2ms), waits);
  EXPECT_EQ(m.refuse(2, -3600000, 3ms), confirms(3600001, 3ms + timeout, true)) << "the refusing master's clock";
  EXPECT_EQ(m.to_confirm(), "0,1");
  EXPECT_TRUE(m.f.fence_verified());
  EXPECT_EQ(m.reply(1, int_reply("1"), 4ms), waits);
  EXPECT_EQ(m.reply(0, int_reply("1"), 5ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 3600001);
  EXPECT_TRUE(m.f.fence_verified());
}

// Every master heard, but only one holds a counter: a minority. The masters without one may be an
// earlier holder's whole confirming majority, restarted without their data, and the one counter
// left (on a master that never confirmed that holder) says nothing about its fence. Hearing
// everyone is then not enough: the fence rests on the clocks heard, and says so.
TEST(fenced_lock, every_master_heard_with_a_minority_of_counters_is_unverified) {
  machine m{fence_rules(3)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, -100, 1ms), waits);
  EXPECT_EQ(m.grant(1, -300, 2ms), waits);
  EXPECT_EQ(m.refuse(2, 40, 3ms), confirms(301, 3ms + timeout));
  EXPECT_FALSE(m.f.fence_verified());
  EXPECT_EQ(m.reply(1, int_reply("1"), 4ms), waits);
  EXPECT_EQ(m.reply(0, int_reply("1"), 5ms), completes({}, false));
  EXPECT_FALSE(m.f.fence_verified());
}

// A master that does not answer leaves the fence resting on the clocks heard: still granted (a
// new resource with one master down must stay lockable), but reported as not verified.
TEST(fenced_lock, an_unheard_master_leaves_the_fence_unverified) {
  machine m{fence_rules(3)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, -100, 1ms), waits);
  EXPECT_EQ(m.grant(1, -300, 2ms), waits);
  EXPECT_EQ(m.fail(2, redlock::error::master_timeout, timeout), confirms(301, timeout + timeout));
  EXPECT_FALSE(m.f.fence_verified());
  EXPECT_EQ(m.reply(1, int_reply("1"), timeout + 1ms), waits);
  EXPECT_EQ(m.reply(0, int_reply("1"), timeout + 2ms), completes({}, false));
  EXPECT_EQ(m.f.fence(), 301);
  EXPECT_FALSE(m.f.fence_verified());
  // The next lock of the same machine type starts verified again.
  machine n{fence_rules(3)};
  n.start(0ms);
  EXPECT_EQ(n.grant(0, 5, 1ms), waits);
  EXPECT_EQ(n.grant(1, 5, 2ms), completes({}, false));
  EXPECT_TRUE(n.f.fence_verified());
}

// Numbers no counter or clock of ours can be (the scripts count in doubles, below 2^53) are not
// fence answers: the round fails as for any unexpected reply.
TEST(fenced_lock, numbers_out_of_a_counters_range_are_unexpected_replies) {
  for (const std::int64_t bad : {std::int64_t{1} << 53, -(std::int64_t{1} << 53),
                                 std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()}) {
    machine m{fence_rules(3, false)};
    m.start(0ms);
    EXPECT_EQ(m.grant(0, 5, 1ms), waits);
    EXPECT_EQ(m.grant(1, bad, 2ms), completes(redlock::error::unexpected_reply, true)) << bad;
    EXPECT_EQ(m.f.fence(), 0);
  }
}

// Cancelled while hearing: released everywhere, no fence.
TEST(fenced_lock, cancel_while_hearing_releases) {
  machine m{fence_rules(3)};
  m.start(0ms);
  EXPECT_EQ(m.grant(0, -100, 1ms), waits);
  EXPECT_EQ(m.grant(1, -300, 2ms), waits);
  EXPECT_EQ(m.cancel(), completes(aborted, true));
  EXPECT_EQ(m.f.fence(), 0);
  EXPECT_EQ(m.refuse(2, 7, 3ms), waits);
}

// ---- a kind's quorum in extend_fsm ---------------------------------------------------------------

std::string describe(const extend_action& a) {
  switch (a.what) {
    case extend_action::type::wait:
      return "wait";
    case extend_action::type::extend:
      return "extend until " + describe(a.at);
    case extend_action::type::complete:
      return "complete(" + describe(a.ec) + ")";
  }
  return "?";
}

// A semaphore of two permits on five masters, valid until 500 ms, extended at 100 ms.
extend_fsm semaphore_extension() {
  extend_fsm e{5, ttl, timeout, drift_policy{}, at(500ms), semaphore_quorum(5, 2)};
  EXPECT_EQ(describe(e.start(at(100ms))), "extend until " + describe(at(350ms)));
  return e;
}

TEST(semaphore_extend, three_of_five_do_not_extend_a_quorum_of_four) {
  auto e = semaphore_extension();
  EXPECT_EQ(e.table().needed(), 4u);
  EXPECT_EQ(describe(e.on_reply(0, {}, int_reply("1"), at(110ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(1, {}, int_reply("1"), at(111ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(2, {}, int_reply("1"), at(112ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(3, {}, int_reply("0"), at(113ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(4, {}, int_reply("1"), at(114ms))), "complete(ok)");
  EXPECT_EQ(e.validity_deadline(), at(100ms + usable));
}

TEST(semaphore_extend, two_not_ours_of_five_mean_not_owner) {
  auto e = semaphore_extension();
  EXPECT_EQ(describe(e.on_reply(0, {}, int_reply("1"), at(110ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(1, {}, int_reply("0"), at(111ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(2, {}, int_reply("0"), at(112ms))),
            "complete(" + describe(redlock::error::not_owner) + ")");
  EXPECT_EQ(e.validity_deadline(), at(500ms));
}

TEST(semaphore_extend, one_not_ours_and_one_failure_are_quorum_unavailable) {
  auto e = semaphore_extension();
  EXPECT_EQ(describe(e.on_reply(0, {}, int_reply("0"), at(110ms))), "wait");
  EXPECT_EQ(describe(e.on_reply(1, redlock::error::master_timeout, no_reply(), at(350ms))),
            "complete(" + describe(redlock::error::quorum_unavailable) + ")");
  EXPECT_EQ(e.validity_deadline(), at(500ms));
}

// ---- read/write: a writer that finds readers -------------------------------------------------------

TEST(write_lock, readers_make_the_writer_queue_and_retry_on_the_schedule) {
  machine m{kind_rules(3)};
  m.start(0ms);
  EXPECT_EQ(m.reply(0, script(-1, 0), 5ms), waits);
  EXPECT_EQ(m.reply(1, script(-1, 0), 6ms), sleep_until(6ms + delay));
  EXPECT_EQ(m.f.last_error(), redlock::error::not_acquired);
  EXPECT_EQ(m.f.table().count(master_status::queued), 2u);
  // The readers left: the next round takes it.
  EXPECT_EQ(m.timer(6ms + delay), acquire_until(6ms + delay + timeout));
  EXPECT_EQ(m.grant(0, 0, 110ms), waits);
  EXPECT_EQ(m.reply(1, script(-1, 0), 111ms), waits);
  EXPECT_EQ(m.grant(2, 0, 112ms), completes({}, false));
  EXPECT_EQ(m.f.attempts(), 2u);
}

TEST(write_lock, a_queued_writer_is_contention_even_beside_failures) {
  machine m{kind_rules(3, false)};
  m.start(0ms);
  EXPECT_EQ(m.fail(0, redlock::error::master_timeout, 250ms), waits);
  EXPECT_EQ(m.reply(1, script(-1, 0), 251ms), completes(redlock::error::not_acquired, true));
}

// ---- what the kinds' answers mean ----------------------------------------------------------------

TEST(kind_replies, an_acquire_scripts_number_is_the_value) {
  auto r = classify(command::acquire_script, {}, script(1, 1234567890123456));
  EXPECT_EQ(r.status, master_status::granted);
  EXPECT_EQ(r.value, 1234567890123456);
  r = classify(command::acquire_script, {}, script(0, 3));
  EXPECT_EQ(r.status, master_status::taken);
  EXPECT_EQ(r.value, 3);
  r = classify(command::acquire_script, {}, script(-1, 0));
  EXPECT_EQ(r.status, master_status::queued);
  EXPECT_EQ(r.value, 0);
  // No number without a valid answer.
  r = classify(command::acquire_script, {}, script(2, 5));
  EXPECT_EQ(r.status, master_status::failed);
  EXPECT_EQ(r.error, redlock::error::unexpected_reply);
  EXPECT_EQ(r.value, 0);
  r = classify(command::acquire_script, redlock::error::master_timeout, no_reply());
  EXPECT_EQ(r.status, master_status::timeout);
  EXPECT_EQ(r.value, 0);
  // `SET NX` has no number.
  EXPECT_EQ(classify(command::acquire, {}, ok_reply()).value, 0);
}

TEST(kind_replies, a_confirmation_is_one_for_ours_and_zero_for_not) {
  EXPECT_EQ(classify(command::confirm, {}, int_reply("1")).status, master_status::granted);
  EXPECT_EQ(classify(command::confirm, {}, int_reply("0")).status, master_status::taken);
  for (const auto& bad : {int_reply("2"), int_reply("-1"), ok_reply(), nil_reply(), script(1, 5)}) {
    const auto r = classify(command::confirm, {}, bad);
    EXPECT_EQ(r.status, master_status::failed);
    EXPECT_EQ(r.error, redlock::error::unexpected_reply);
  }
  EXPECT_EQ(classify(command::confirm, redlock::error::master_timeout, no_reply()).status, master_status::timeout);
  EXPECT_TRUE(redlock::core::counts_as_yes(command::confirm, master_status::granted));
  EXPECT_FALSE(redlock::core::counts_as_yes(command::confirm, master_status::taken));
}

}  // namespace

// ---- NOSCRIPT: what is sent again with EVAL (lock_fsm::on_noscript) ----------------------------------

namespace {

using redlock::core::step;

std::string noscript(const lock_fsm& f, std::uint64_t round, bool held) {
  const auto s = f.on_noscript(round, held);
  if (!s) return "none";
  switch (*s) {
    case step::acquire:
      return "acquire";
    case step::fair_acquire:
      return "fair acquire";
    case step::confirm:
      return "confirm";
    default:
      return "other";
  }
}

TEST(noscript, an_awaited_round_sends_its_own_request_again) {
  auto rules = fence_rules(3);
  rules.resend_after_grant = true;
  machine m{rules};
  m.start(0ms);
  const auto acquire_round = m.f.round();
  EXPECT_EQ(noscript(m.f, acquire_round, false), "acquire");
  EXPECT_EQ(noscript(m.f, acquire_round - 1, false), "none") << "a straggler of an earlier round";
  // Hearing the others after a grant without a counter: still the acquire round.
  EXPECT_EQ(m.grant(0, -5, 1ms), waits);
  EXPECT_EQ(m.grant(1, 7, 2ms), waits);
  EXPECT_EQ(noscript(m.f, acquire_round, false), "acquire");
  EXPECT_EQ(m.refuse(2, 9, 3ms), confirms(10, 3ms + timeout, true));
  const auto confirm_round = m.f.round();
  EXPECT_EQ(noscript(m.f, confirm_round, false), "confirm");
  EXPECT_EQ(noscript(m.f, acquire_round, false), "none") << "the acquire round is over";
}

TEST(noscript, after_the_grant_the_granting_requests_go_again_while_the_lock_is_held) {
  auto rules = fence_rules(3);
  rules.resend_after_grant = true;
  machine m{rules};
  m.start(0ms);
  const auto acquire_round = m.f.round();
  m.grant(0, 5, 1ms);
  EXPECT_EQ(m.grant(1, 4, 2ms), confirms(5, 2ms + timeout));
  const auto confirm_round = m.f.round();
  EXPECT_EQ(m.reply(1, int_reply("1"), 3ms), completes({}, false));
  EXPECT_EQ(noscript(m.f, acquire_round, true), "acquire");
  EXPECT_EQ(noscript(m.f, confirm_round, true), "confirm");
  EXPECT_EQ(noscript(m.f, acquire_round, false), "none") << "released: an acquire now would outlive it";
  EXPECT_EQ(noscript(m.f, acquire_round - 1, true), "none");
  // A kind that must not (a writer: a late acquire can leave a claim nothing drops).
  auto no_resend = kind_rules(3);
  machine w{no_resend};
  w.start(0ms);
  const auto round = w.f.round();
  w.grant(0, 0, 1ms);
  EXPECT_EQ(w.grant(1, 0, 2ms), completes({}, false));
  EXPECT_EQ(noscript(w.f, round, true), "none");
}

TEST(noscript, a_failed_lock_sends_nothing_again) {
  auto rules = kind_rules(3, false);
  rules.resend_after_grant = true;
  machine m{rules};
  m.start(0ms);
  const auto round = m.f.round();
  m.refuse(0, 0, 1ms);
  EXPECT_EQ(m.refuse(1, 0, 2ms), completes(redlock::error::not_acquired, true));
  EXPECT_EQ(noscript(m.f, round, true), "none");
}

TEST(noscript, a_set_meets_no_noscript_but_a_fair_round_does) {
  lock_rules plain = kind_rules(3);
  plain.scripted = false;
  plain.fair = true;
  plain.retry = retry_policy{0, 2000ms, 50ms, 100ms};
  machine m{plain};
  m.start(0ms);
  EXPECT_EQ(noscript(m.f, m.f.round(), false), "none") << "the first round is a plain SET";
  EXPECT_EQ(m.fail(0, redlock::error::master_timeout, 1ms), waits);
  EXPECT_EQ(m.reply(1, resp::response{{resp::type::null, 0, 0, ""}}, 2ms), sleep_until(2ms));  // taken: queue now
  EXPECT_EQ(m.timer(2ms), describe(lock_action{lock_action::type::acquire, false, at(2ms + timeout), {}, true, 0}));
  EXPECT_EQ(noscript(m.f, m.f.round(), false), "fair acquire");
}

}  // namespace

namespace {

// A writer's claim may come from an answer that arrives after its round failed: it still counts,
// so that the writer drops its claims when its acquisition ends.
TEST(writer_claims, a_late_queued_answer_of_a_failed_round_is_seen) {
  machine m{kind_rules(3)};
  m.start(0ms);
  const auto round = m.f.round();
  EXPECT_EQ(m.refuse(1, 0, 1ms), waits);
  EXPECT_EQ(m.refuse(2, 0, 2ms), sleep_until(2ms + delay));
  EXPECT_FALSE(m.f.queued_seen());
  EXPECT_EQ(m.reply_of_round(round, 0, script(-1, 0), 3ms), waits) << "too late to count for the round";
  EXPECT_TRUE(m.f.queued_seen());
  EXPECT_TRUE(m.f.stragglers_possible()) << "master 0 had not answered when the round failed";
}

TEST(writer_claims, a_first_round_every_master_answered_leaves_no_straggler) {
  machine m{kind_rules(3)};
  m.start(0ms);
  m.grant(0, 0, 1ms);
  m.refuse(1, 0, 2ms);
  EXPECT_EQ(m.grant(2, 0, 3ms), completes({}, false));
  EXPECT_FALSE(m.f.stragglers_possible());
  machine n{kind_rules(3)};
  n.start(0ms);
  n.grant(0, 0, 1ms);
  EXPECT_EQ(n.grant(1, 0, 2ms), completes({}, false));
  EXPECT_TRUE(n.f.stragglers_possible()) << "master 2's request may still run";
}

}  // namespace
