// SPDX-License-Identifier: BSL-1.0
#include "transcript.hpp"
#include <redlock/core/lock_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace redlock::test;
using redlock::master_status;
using redlock::core::check_ttl;
using redlock::core::drift_policy;
using redlock::core::lock_action;
using redlock::core::lock_fsm;
using redlock::core::lock_rules;
using redlock::core::majority;
using redlock::core::quorum_state;
using redlock::core::retry_policy;
using redlock::test::describe;
namespace resp = redlock::resp;
using boost::system::error_code;

const error_code aborted = boost::asio::error::operation_aborted;

// ttl 1000 ms with the default drift (1 % + 2 ms = 12 ms): a round started at `s` may be relied on
// until s + 988 ms.
constexpr auto ttl = 1000ms;
constexpr auto usable = 988ms;

lock_rules rules(std::size_t masters = 3) {
  lock_rules r;
  r.masters = masters;
  r.ttl = ttl;
  r.request_timeout = 250ms;
  r.drift = drift_policy{};
  r.retry = retry_policy{0, 2000ms, 50ms, 100ms};
  r.retry_enabled = true;
  return r;
}

lock_rules no_retry(std::size_t masters = 3) {
  auto r = rules(masters);
  r.retry_enabled = false;
  return r;
}

std::string describe(const lock_action& a) {
  std::string s;
  switch (a.what) {
    case lock_action::type::wait:
      s = "wait";
      break;
    case lock_action::type::acquire:
      s = "acquire until " + redlock::test::describe(a.at);
      break;
    case lock_action::type::sleep:
      s = "sleep until " + redlock::test::describe(a.at);
      break;
    case lock_action::type::complete:
      s = "complete(" + redlock::test::describe(a.ec) + ")";
      break;
    case lock_action::type::confirm:
      s = "confirm " + std::to_string(a.fence) + " until " + redlock::test::describe(a.at);
      break;
  }
  if (a.release) s += " +release";
  if (a.what != lock_action::type::complete && a.ec) s += " ec=" + redlock::test::describe(a.ec);
  return s;
}

// A transcript of one lock_fsm: events (start, replies, timers, cancel), each followed by the
// action it must return (`wait` unless said otherwise), and checks of the machine in between.
// `run()` plays it on a fresh machine; `run_cancelling_at_each_step()` plays every prefix of it
// and then cancels, checking what cancellation must do in the state that prefix left.
class lock_script {
 public:
  explicit lock_script(lock_rules r) : rules_(r) {}

  lock_script& start(clock::duration t,
                     redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "start", [t](lock_fsm& f) { return f.start(at(t)); }, loc);
  }
  /// A reply of the round in progress.
  lock_script& reply(std::size_t master, resp::response r, clock::duration t, double rnd = 0.5,
                     redlock::test::source_location loc = redlock::test::source_location::current()) {
    push(
        "reply m" + std::to_string(master),
        [=](lock_fsm& f) { return f.on_reply(f.round(), master, {}, r, at(t), rnd); }, loc);
    steps_.back().master = master;
    steps_.back().as_failure = [=](lock_fsm& f) {
      return f.on_reply(f.round(), master, redlock::error::connection_lost, no_reply(), at(t), rnd);
    };
    return *this;
  }
  /// A failure (no reply) of the round in progress.
  lock_script& fail(std::size_t master, redlock::error e, clock::duration t, double rnd = 0.5,
                    redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "fail m" + std::to_string(master),
        [=](lock_fsm& f) { return f.on_reply(f.round(), master, e, no_reply(), at(t), rnd); }, loc);
  }
  /// A reply carrying an explicit round number (a straggler of an earlier round).
  lock_script& reply_of_round(std::uint64_t round, std::size_t master, resp::response r, clock::duration t,
                              redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "reply of round " + std::to_string(round) + " m" + std::to_string(master),
        [=](lock_fsm& f) { return f.on_reply(round, master, {}, r, at(t), 0.5); }, loc);
  }
  lock_script& timer(clock::duration t,
                     redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "timer", [t](lock_fsm& f) { return f.on_timer(at(t)); }, loc);
  }
  lock_script& cancel(redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "cancel", [](lock_fsm& f) { return f.cancel(); }, loc);
  }

  // What the last event must return.
  lock_script& wait() { return expect({}); }
  lock_script& acquire(clock::duration until) { return expect({lock_action::type::acquire, false, at(until), {}}); }
  lock_script& sleep(clock::duration until) { return expect({lock_action::type::sleep, true, at(until), {}}); }
  lock_script& complete(error_code ec, bool release) { return expect({lock_action::type::complete, release, {}, ec}); }
  /// Checks of the machine after the last event.
  lock_script& then(std::function<void(const lock_fsm&)> check) {
    steps_.back().check = std::move(check);
    return *this;
  }

  /// Plays the transcript, asserting every action; returns the machine at its end.
  lock_fsm run() const {
    lock_fsm f{rules_};
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      ::testing::ScopedTrace trace{s.loc.file_name(), static_cast<int>(s.loc.line()), s.label};
      const auto a = s.event(f);
      EXPECT_EQ(describe(a), describe(s.expected)) << "step " << i << ": " << s.label;
      if (s.check) s.check(f);
    }
    return f;
  }

  /// Cancellation injected after every prefix of the transcript.
  void run_cancelling_at_each_step() const {
    for (std::size_t k = 0; k <= steps_.size(); ++k) {
      lock_fsm f{rules_};
      enum { idle, waiting, sleeping, done } phase = idle;
      for (std::size_t i = 0; i < k; ++i) {
        steps_[i].event(f);
        switch (steps_[i].expected.what) {
          case lock_action::type::acquire:
          case lock_action::type::confirm:
            phase = waiting;
            break;
          case lock_action::type::sleep:
            phase = sleeping;
            break;
          case lock_action::type::complete:
            phase = done;
            break;
          case lock_action::type::wait:
            break;
        }
      }
      const auto where =
          k == 0 ? std::string{"before any step"} : "after step " + std::to_string(k - 1) + ": " + steps_[k - 1].label;
      const auto deadline = f.validity_deadline();
      const auto a = f.cancel();
      if (phase == done) {
        EXPECT_EQ(describe(a), "wait") << where;
        EXPECT_EQ(f.validity_deadline(), deadline) << where;
        continue;
      }
      // A round in flight may still set keys: release it. Asleep, the failed round was released.
      const lock_action expected{lock_action::type::complete, phase == waiting, {}, aborted};
      EXPECT_EQ(describe(a), describe(expected)) << where;
      EXPECT_TRUE(f.done()) << where;
      // Nothing moves a cancelled machine.
      EXPECT_EQ(describe(f.cancel()), "wait") << where;
      EXPECT_EQ(describe(f.start(at(5s))), "wait") << where;
      EXPECT_EQ(describe(f.on_timer(at(5s))), "wait") << where;
      for (std::size_t m = 0; m < rules_.masters; ++m) {
        EXPECT_EQ(describe(f.on_reply(f.round(), m, {}, ok_reply(), at(5s), 0.5)), "wait") << where;
      }
    }
  }

  /// Each reply of the transcript replaced, in turn, by a lost connection. Such an answer can only
  /// make a majority impossible: the machine waits, or fails the round (sleep or complete with an
  /// error, always releasing); it never succeeds, and where the reply decided the round, the
  /// failure decides it too.
  void run_failing_each_reply() const {
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const auto& s = steps_[k];
      if (!s.as_failure) continue;
      lock_fsm f{rules_};
      for (std::size_t i = 0; i < k; ++i) steps_[i].event(f);
      const bool waiting =
          !f.done() && f.table().results()[*s.master].status == master_status::pending && !f.table().decided();
      const auto where = "step " + std::to_string(k) + ": " + s.label + " lost";
      const auto a = s.as_failure(f);
      switch (a.what) {
        case lock_action::type::wait:
          break;
        case lock_action::type::acquire:
          ADD_FAILURE() << where << ": a new round";
          break;
        case lock_action::type::confirm:
          break;
        case lock_action::type::sleep:
          EXPECT_TRUE(a.release) << where;
          break;
        case lock_action::type::complete:
          EXPECT_TRUE(a.ec) << where << ": success";
          EXPECT_TRUE(a.release) << where;
          break;
      }
      const bool decisive_failure = s.expected.what == lock_action::type::sleep ||
                                    (s.expected.what == lock_action::type::complete && s.expected.ec);
      if (decisive_failure) {
        EXPECT_EQ(a.what, s.expected.what) << where;
      }
      if (waiting) {
        EXPECT_EQ(f.table().results()[*s.master].status, master_status::failed) << where;
        EXPECT_EQ(f.table().results()[*s.master].error, redlock::error::connection_lost) << where;
      }
    }
  }

 private:
  struct step {
    std::string label;
    std::function<lock_action(lock_fsm&)> event;
    redlock::test::source_location loc;
    lock_action expected{};
    std::function<void(const lock_fsm&)> check{};
    std::optional<std::size_t> master{};                 // for replies of the round in progress
    std::function<lock_action(lock_fsm&)> as_failure{};  // the same reply, lost with the connection
  };

  lock_script& push(std::string label, std::function<lock_action(lock_fsm&)> event,
                    redlock::test::source_location loc) {
    steps_.push_back({std::move(label), std::move(event), loc});
    return *this;
  }
  lock_script& expect(lock_action a) {
    steps_.back().expected = a;
    return *this;
  }

  lock_rules rules_;
  std::vector<step> steps_;
};

// ---------------------------------------------------------------------------------------------
// One round

TEST(lock_fsm, start_sends_acquire_with_the_request_deadline) {
  lock_script{rules()}
      .start(5ms)
      .acquire(255ms)
      .then([](const lock_fsm& f) {
        EXPECT_EQ(f.round(), 1u);
        EXPECT_EQ(f.attempts(), 1u);
        EXPECT_EQ(f.first_start(), at(5ms));
        EXPECT_FALSE(f.done());
        EXPECT_EQ(f.table().size(), 3u);
        EXPECT_EQ(f.table().start(), at(5ms));
      })
      .start(6ms)
      .wait()  // a second start is no new round
      .then([](const lock_fsm& f) { EXPECT_EQ(f.round(), 1u); })
      .run();
}

lock_script granted_by_a_majority() {
  lock_script s{rules()};
  s.start(5ms)
      .acquire(255ms)
      .reply(0, ok_reply(), 10ms)
      .wait()
      .reply(1, ok_reply(), 20ms)
      .complete({}, false)
      .then([](const lock_fsm& f) {
        EXPECT_TRUE(f.done());
        // From the round's start, not from the decision: start + ttl - drift.
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(5ms + usable)));
        EXPECT_FALSE(f.last_error());
        EXPECT_EQ(f.table().state(), quorum_state::reached);
      })
      .reply(2, ok_reply(), 30ms)
      .wait()  // late: after the decision
      .then([](const lock_fsm& f) {
        EXPECT_EQ(f.table().results()[2].status, master_status::pending);
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(5ms + usable)));
      });
  return s;
}

TEST(lock_fsm, majority_granted_completes_with_validity_from_the_round_start) { granted_by_a_majority().run(); }

TEST(lock_fsm, cancel_at_each_step_of_a_granted_round) { granted_by_a_majority().run_cancelling_at_each_step(); }

TEST(lock_fsm, a_lost_connection_at_each_reply_of_a_granted_round) { granted_by_a_majority().run_failing_each_reply(); }

TEST(lock_fsm, a_lost_connection_at_each_reply_of_five_masters) {
  lock_script s{rules(5)};
  s.start(0ms)
      .acquire(250ms)
      .reply(4, nil_reply(), 1ms)
      .reply(0, ok_reply(), 2ms)
      .reply(3, ok_reply(), 3ms)
      .reply(1, nil_reply(), 4ms)
      .wait()  // 2 yes, 2 no: the last master decides
      .reply(2, ok_reply(), 5ms)
      .complete({}, false);
  s.run();
  s.run_failing_each_reply();
  s.run_cancelling_at_each_step();
}

TEST(lock_fsm, a_timer_that_is_not_the_retry_delay_does_nothing) {
  lock_script{rules()}
      .timer(0ms)
      .wait()  // before start
      .start(0ms)
      .acquire(250ms)
      .timer(100ms)
      .wait()  // while waiting for replies: no new round
      .then([](const lock_fsm& f) {
        EXPECT_EQ(f.round(), 1u);
        EXPECT_EQ(f.attempts(), 1u);
      })
      .reply(0, ok_reply(), 110ms)
      .reply(1, ok_reply(), 120ms)
      .complete({}, false)
      .timer(200ms)
      .wait()  // after the end
      .run();
}

TEST(lock_fsm, a_second_reply_of_the_same_master_is_no_second_vote) {
  lock_script{rules()}
      .start(0ms)
      .acquire(250ms)
      .reply(0, ok_reply(), 10ms)
      .reply(0, ok_reply(), 11ms)
      .wait()
      .reply(7, ok_reply(), 12ms)
      .wait()  // no such master
      .reply(2, ok_reply(), 13ms)
      .complete({}, false)
      .run();
}

TEST(lock_fsm, taken_means_not_acquired_and_released) {
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms)
      .complete(redlock::error::not_acquired, true)
      .then([](const lock_fsm& f) { EXPECT_EQ(f.last_error(), redlock::error::not_acquired); })
      .run();
  // One "taken" among the failures is enough to name contention as the cause.
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .fail(2, redlock::error::master_timeout, 10ms)
      .reply(0, nil_reply(), 20ms)
      .complete(redlock::error::not_acquired, true)
      .run();
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .reply(0, ok_reply(), 5ms)
      .reply(1, nil_reply(), 10ms)
      .fail(2, redlock::error::connection_lost, 20ms)
      .complete(redlock::error::not_acquired, true)
      .run();
}

TEST(lock_fsm, failures_mean_quorum_unavailable_and_released) {
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .fail(0, redlock::error::connection_lost, 10ms)
      .fail(1, redlock::error::not_connected, 20ms)
      .complete(redlock::error::quorum_unavailable, true)
      .run();
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .fail(0, redlock::error::server_error, 10ms)
      .reply(1, ok_reply(), 15ms)
      .reply(2, int_reply("1"), 20ms)  // garbage: not a yes
      .complete(redlock::error::quorum_unavailable, true)
      .run();
}

// A timed-out SET may still be executed by its master: the round is released even when timeouts
// are the only failures.
TEST(lock_fsm, timeouts_alone_are_released_too) {
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .fail(1, redlock::error::master_timeout, 250ms)
      .fail(2, redlock::error::master_timeout, 250ms)
      .complete(redlock::error::quorum_unavailable, true)
      .run();
  lock_script{no_retry(5)}
      .start(0ms)
      .acquire(250ms)
      .reply(0, ok_reply(), 10ms)
      .reply(1, ok_reply(), 11ms)
      .fail(2, redlock::error::master_timeout, 250ms)
      .fail(3, redlock::error::master_timeout, 250ms)
      .fail(4, redlock::error::master_timeout, 250ms)
      .complete(redlock::error::quorum_unavailable, true)
      .run();
}

// ---------------------------------------------------------------------------------------------
// Quorum and validity over N = 1, 3, 5

class lock_sizes : public ::testing::TestWithParam<std::size_t> {};

TEST_P(lock_sizes, decided_at_the_majority_th_grant) {
  const std::size_t n = GetParam();
  lock_script s{rules(n)};
  s.start(0ms).acquire(250ms);
  for (std::size_t i = 0; i < majority(n); ++i) {
    s.reply(i, ok_reply(), 10ms * static_cast<int>(i + 1));
    if (i + 1 == majority(n)) s.complete({}, false);
  }
  const auto f = s.run();
  EXPECT_EQ(describe(f.validity_deadline()), describe(at(usable)));
  EXPECT_EQ(f.table().count(master_status::granted), majority(n));
}

TEST_P(lock_sizes, valid_only_if_decided_before_ttl_minus_drift) {
  const std::size_t n = GetParam();
  // The deciding grant one microsecond before start + ttl - drift: valid (for 1 us).
  {
    lock_script s{no_retry(n)};
    s.start(100ms).acquire(350ms);
    for (std::size_t i = 0; i + 1 < majority(n); ++i) s.reply(i, ok_reply(), 110ms);
    s.reply(majority(n) - 1, ok_reply(), 100ms + usable - 1us).complete({}, false);
    const auto f = s.run();
    EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable)));
  }
  // Exactly at it, or later: a majority, but no validity left. Released, like any failed round.
  for (const auto late : {clock::duration{usable}, clock::duration{ttl}, clock::duration{2 * ttl}}) {
    lock_script s{no_retry(n)};
    s.start(100ms).acquire(350ms);
    for (std::size_t i = 0; i + 1 < majority(n); ++i) s.reply(i, ok_reply(), 110ms);
    s.reply(majority(n) - 1, ok_reply(), 100ms + late).complete(redlock::error::validity_expired, true);
    s.run();
  }
  // With retries left, the expired round is retried like any failed one.
  {
    lock_script s{rules(n)};
    s.start(100ms).acquire(350ms);
    for (std::size_t i = 0; i + 1 < majority(n); ++i) s.reply(i, ok_reply(), 110ms);
    s.reply(majority(n) - 1, ok_reply(), 100ms + usable, 0.0).sleep(100ms + usable + 50ms);
    s.then([](const lock_fsm& f) { EXPECT_EQ(f.last_error(), redlock::error::validity_expired); });
    s.run();
  }
}

TEST_P(lock_sizes, not_acquired_once_a_majority_cannot_grant) {
  const std::size_t n = GetParam();
  const std::size_t noes = n - majority(n) + 1;
  lock_script s{no_retry(n)};
  s.start(0ms).acquire(250ms);
  for (std::size_t i = 0; i < noes; ++i) {
    s.reply(n - 1 - i, nil_reply(), 10ms * static_cast<int>(i + 1));
    if (i + 1 == noes) s.complete(redlock::error::not_acquired, true);
  }
  s.run();
}

TEST_P(lock_sizes, quorum_unavailable_once_too_many_fail) {
  const std::size_t n = GetParam();
  const std::size_t noes = n - majority(n) + 1;
  lock_script s{no_retry(n)};
  s.start(0ms).acquire(250ms);
  for (std::size_t i = 0; i < noes; ++i) {
    s.fail(i, redlock::error::master_timeout, 250ms);
    if (i + 1 == noes) s.complete(redlock::error::quorum_unavailable, true);
  }
  s.run();
}

INSTANTIATE_TEST_SUITE_P(lock_fsm, lock_sizes, ::testing::Values(1u, 3u, 5u));

// ---------------------------------------------------------------------------------------------
// Retries

// Round 1 fails (taken), is released and sleeps base + jitter * random; round 2 ignores round 1's
// stragglers and succeeds on its own majority.
lock_script retried_then_granted() {
  lock_script s{rules()};
  s.start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms, 0.9)
      .wait()
      .reply(1, nil_reply(), 20ms, 0.5)
      .sleep(20ms + 50ms + 50ms)  // 50 ms + 100 ms * 0.5
      .then([](const lock_fsm& f) {
        EXPECT_FALSE(f.done());
        EXPECT_EQ(f.last_error(), redlock::error::not_acquired);
        EXPECT_EQ(f.round(), 1u);
      })
      .reply(2, ok_reply(), 30ms)
      .wait()  // a straggler of round 1 while asleep
      .timer(120ms)
      .acquire(370ms)
      .then([](const lock_fsm& f) {
        EXPECT_EQ(f.round(), 2u);
        EXPECT_EQ(f.attempts(), 2u);
        EXPECT_EQ(f.table().start(), at(120ms));
        EXPECT_EQ(f.first_start(), at(0ms));
      })
      .reply_of_round(1, 0, ok_reply(), 125ms)
      .wait()
      .reply_of_round(1, 1, ok_reply(), 126ms)
      .wait()  // two stale yes votes would have made a majority
      .then([](const lock_fsm& f) {
        EXPECT_EQ(f.table().count(master_status::pending), 3u);
        EXPECT_EQ(f.table().state(), quorum_state::pending);
      })
      .reply(1, ok_reply(), 130ms)
      .reply(2, ok_reply(), 140ms)
      .complete({}, false)
      .then([](const lock_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(120ms + usable))); })
      .timer(200ms)
      .wait()
      .reply(0, ok_reply(), 150ms)
      .wait();
  return s;
}

TEST(lock_fsm, failed_round_is_released_then_retried_after_a_random_delay) { retried_then_granted().run(); }

TEST(lock_fsm, cancel_at_each_step_of_a_retried_lock) { retried_then_granted().run_cancelling_at_each_step(); }

TEST(lock_fsm, a_lost_connection_at_each_reply_of_a_retried_lock) { retried_then_granted().run_failing_each_reply(); }

// last_error() is empty after success, also when an earlier round failed.
TEST(lock_fsm, last_error_is_empty_after_a_success_that_followed_a_failure) {
  const auto f = retried_then_granted().run();
  EXPECT_FALSE(f.last_error()) << describe(f.last_error());
}

TEST(lock_fsm, the_retry_delay_is_drawn_from_the_deciding_replys_random) {
  for (const auto& [rnd, delay] : {std::pair{0.0, 50ms}, std::pair{0.25, 75ms}, std::pair{0.999, 149ms}}) {
    lock_script{rules()}
        .start(0ms)
        .acquire(250ms)
        .reply(0, nil_reply(), 10ms, 0.7)  // not deciding: its random is not used
        .reply(1, nil_reply(), 20ms, rnd)
        .sleep(20ms + delay)
        .run();
  }
}

TEST(lock_fsm, max_attempts_ends_with_the_last_rounds_error) {
  auto r = rules();
  r.retry.max_attempts = 2;
  lock_script{r}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms, 0.0)
      .sleep(70ms)
      .timer(70ms)
      .acquire(320ms)
      .fail(0, redlock::error::connection_lost, 80ms)
      .fail(1, redlock::error::master_timeout, 320ms)
      .complete(redlock::error::quorum_unavailable, true)
      .then([](const lock_fsm& f) {
        EXPECT_EQ(f.attempts(), 2u);
        EXPECT_EQ(f.last_error(), redlock::error::quorum_unavailable);
      })
      .timer(400ms)
      .wait()
      .run();
  r.retry.max_attempts = 1;
  lock_script{r}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms, 0.0)
      .complete(redlock::error::not_acquired, true)
      .run();
}

// No retry may start later than max_wait after the *first* attempt began (at 10 ms here).
TEST(lock_fsm, max_wait_bounds_the_retries_from_the_first_start) {
  auto r = rules();
  r.retry = retry_policy{0, 300ms, 50ms, 100ms};
  lock_script{r}
      .start(10ms)
      .acquire(260ms)
      .reply(0, nil_reply(), 20ms)
      .reply(1, nil_reply(), 30ms, 0.5)
      .sleep(130ms)  // elapsed 20 + delay 100 <= 300
      .timer(130ms)
      .acquire(380ms)
      .reply(0, nil_reply(), 200ms)
      .reply(1, nil_reply(), 210ms, 0.5)
      .sleep(310ms)  // elapsed 200 + delay 100 == 300: still allowed
      .timer(310ms)
      .acquire(560ms)
      .reply(0, nil_reply(), 311ms)
      .reply(1, nil_reply(), 311ms, 0.5)
      .complete(redlock::error::not_acquired, true)  // 301 + 100 > 300
      .then([](const lock_fsm& f) { EXPECT_EQ(f.attempts(), 3u); })
      .run();
  // A short random delay may still fit where a long one does not.
  lock_script{r}
      .start(10ms)
      .acquire(260ms)
      .reply(0, nil_reply(), 250ms)
      .reply(1, nil_reply(), 250ms, 0.9)  // 240 + 140 > 300
      .complete(redlock::error::not_acquired, true)
      .run();
  lock_script{r}
      .start(10ms)
      .acquire(260ms)
      .reply(0, nil_reply(), 250ms)
      .reply(1, nil_reply(), 250ms, 0.1)  // 240 + 60 == 300
      .sleep(310ms)
      .run();
}

TEST(lock_fsm, never_retries_without_any_bound) {
  auto r = rules();
  r.retry = retry_policy{0, 0ms, 50ms, 100ms};
  lock_script{r}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms)
      .complete(redlock::error::not_acquired, true)
      .run();
}

TEST(lock_fsm, retry_disabled_makes_one_attempt) {
  auto r = no_retry();
  r.retry.max_attempts = 100;
  lock_script{r}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms)
      .complete(redlock::error::not_acquired, true)
      .then([](const lock_fsm& f) { EXPECT_EQ(f.attempts(), 1u); })
      .run();
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(lock_fsm, cancel_before_start_completes_without_release) {
  lock_script{rules()}
      .cancel()
      .complete(aborted, false)
      .start(0ms)
      .wait()
      .timer(10ms)
      .wait()
      .then([](const lock_fsm& f) {
        EXPECT_TRUE(f.done());
        EXPECT_EQ(f.attempts(), 0u);
      })
      .run();
}

TEST(lock_fsm, cancel_while_waiting_releases_the_round) {
  lock_script{rules()}
      .start(0ms)
      .acquire(250ms)
      .reply(0, ok_reply(), 10ms)
      .cancel()
      .complete(aborted, true)
      .reply(1, ok_reply(), 20ms)
      .wait()  // the would-be majority comes too late
      .cancel()
      .wait()
      .run();
}

TEST(lock_fsm, cancel_while_sleeping_does_not_release_again) {
  lock_script{rules()}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms, 0.0)
      .sleep(70ms)
      .cancel()
      .complete(aborted, false)
      .timer(70ms)
      .wait()  // no new round
      .then([](const lock_fsm& f) { EXPECT_EQ(f.attempts(), 1u); })
      .run();
}

TEST(lock_fsm, cancel_after_done_does_nothing) {
  lock_script{no_retry()}
      .start(0ms)
      .acquire(250ms)
      .reply(0, nil_reply(), 10ms)
      .reply(1, nil_reply(), 20ms)
      .complete(redlock::error::not_acquired, true)
      .cancel()
      .wait()
      .then([](const lock_fsm& f) { EXPECT_EQ(f.last_error(), redlock::error::not_acquired); })
      .run();
}

// ---------------------------------------------------------------------------------------------
// check_ttl

TEST(check_ttl, positive_and_at_most_max_ttl) {
  const drift_policy d{};
  EXPECT_EQ(check_ttl(0ms, 60s, 250ms, d), redlock::error::invalid_argument);
  EXPECT_EQ(check_ttl(-1ms, 60s, 250ms, d), redlock::error::invalid_argument);
  EXPECT_EQ(check_ttl(std::chrono::milliseconds::min(), 60s, 250ms, d), redlock::error::invalid_argument);
  EXPECT_EQ(check_ttl(60'001ms, 60s, 250ms, d), redlock::error::invalid_argument);
  EXPECT_EQ(check_ttl(std::chrono::milliseconds::max(), 60s, 250ms, d), redlock::error::invalid_argument);
  EXPECT_FALSE(check_ttl(60s, 60s, 250ms, d));
  EXPECT_FALSE(check_ttl(10s, 60s, 250ms, d));
}

// ttl - drift must exceed the per-master deadline: a quorum decided at the very end of it must
// still leave validity.
TEST(check_ttl, ttl_minus_drift_must_exceed_the_request_timeout) {
  const drift_policy none{0.0, 0ms};
  EXPECT_EQ(check_ttl(250ms, 60s, 250ms, none), redlock::error::invalid_argument);
  EXPECT_FALSE(check_ttl(251ms, 60s, 250ms, none));
  // Default drift: 254 ms leaves 249.46 ms, 255 ms leaves 250.45 ms.
  EXPECT_EQ(check_ttl(254ms, 60s, 250ms, drift_policy{}), redlock::error::invalid_argument);
  EXPECT_FALSE(check_ttl(255ms, 60s, 250ms, drift_policy{}));
  // The fixed part counts too.
  EXPECT_EQ(check_ttl(260ms, 60s, 250ms, drift_policy{0.0, 10ms}), redlock::error::invalid_argument);
  EXPECT_FALSE(check_ttl(261ms, 60s, 250ms, drift_policy{0.0, 10ms}));
}

}  // namespace
