// SPDX-License-Identifier: BSL-1.0
#include "transcript.hpp"
#include <redlock/core/extend_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace redlock::test;
using redlock::master_status;
using redlock::core::drift_policy;
using redlock::core::extend_action;
using redlock::core::extend_fsm;
using redlock::core::majority;
using redlock::core::quorum_state;
using redlock::test::describe;
namespace resp = redlock::resp;
using boost::system::error_code;

const error_code aborted = boost::asio::error::operation_aborted;

// Extensions of ttl 1000 ms (drift 12 ms: valid until start + 988 ms), per-master deadline
// 250 ms, of a lock whose current validity ends at t0 + 500 ms.
constexpr auto ttl = 1000ms;
constexpr auto usable = 988ms;
constexpr auto old_deadline = 500ms;

std::string describe(const extend_action& a) {
  switch (a.what) {
    case extend_action::type::wait:
      return "wait";
    case extend_action::type::extend:
      return "extend until " + redlock::test::describe(a.at);
    case extend_action::type::complete:
      return "complete(" + redlock::test::describe(a.ec) + ")";
  }
  return "?";
}

// A transcript of one extend_fsm (see lock_fsm_test.cpp for the pattern).
class extend_script {
 public:
  explicit extend_script(std::size_t masters = 3, std::chrono::milliseconds ext_ttl = ttl,
                         clock::duration old = old_deadline)
      : masters_(masters), ttl_(ext_ttl), old_(old) {}

  extend_script& start(clock::duration t,
                       redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "start", [t](extend_fsm& f) { return f.start(at(t)); }, loc);
  }
  extend_script& reply(std::size_t master, resp::response r, clock::duration t,
                       redlock::test::source_location loc = redlock::test::source_location::current()) {
    push(
        "reply m" + std::to_string(master), [=](extend_fsm& f) { return f.on_reply(master, {}, r, at(t)); }, loc);
    steps_.back().as_failure = [=](extend_fsm& f) {
      return f.on_reply(master, redlock::error::connection_lost, no_reply(), at(t));
    };
    return *this;
  }
  extend_script& fail(std::size_t master, redlock::error e, clock::duration t,
                      redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "fail m" + std::to_string(master), [=](extend_fsm& f) { return f.on_reply(master, e, no_reply(), at(t)); },
        loc);
  }
  extend_script& cancel(redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "cancel", [](extend_fsm& f) { return f.cancel(); }, loc);
  }
  /// Reuses the machine for the next extension (no action of its own).
  extend_script& reset(std::chrono::milliseconds next_ttl, clock::duration next_old,
                       redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "reset",
        [=](extend_fsm& f) {
          f.reset(next_ttl, at(next_old));
          return extend_action{};
        },
        loc);
  }

  extend_script& wait() { return expect({}); }
  extend_script& extend(clock::duration until) { return expect({extend_action::type::extend, at(until), {}}); }
  extend_script& complete(error_code ec) { return expect({extend_action::type::complete, {}, ec}); }
  extend_script& then(std::function<void(const extend_fsm&)> check) {
    steps_.back().check = std::move(check);
    return *this;
  }

  extend_fsm make() const { return extend_fsm{masters_, ttl_, 250ms, drift_policy{}, at(old_)}; }

  extend_fsm run() const {
    auto f = make();
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      ::testing::ScopedTrace trace{s.loc.file_name(), static_cast<int>(s.loc.line()), s.label};
      const auto a = s.event(f);
      EXPECT_EQ(describe(a), describe(s.expected)) << "step " << i << ": " << s.label;
      if (s.check) s.check(f);
    }
    return f;
  }

  /// Cancellation after every prefix: while not done it completes with `operation_aborted` and the
  /// deadline stays the old one (even if the masters' majority comes later); once done, nothing.
  void run_cancelling_at_each_step() const {
    for (std::size_t k = 0; k <= steps_.size(); ++k) {
      auto f = make();
      bool done = false;
      for (std::size_t i = 0; i < k; ++i) {
        steps_[i].event(f);
        if (steps_[i].label == "reset") done = false;
        if (steps_[i].expected.what == extend_action::type::complete) done = true;
      }
      const auto where = "after " + std::to_string(k) + " steps";
      const auto deadline = f.validity_deadline();
      const auto a = f.cancel();
      if (done) {
        EXPECT_EQ(describe(a), "wait") << where;
        EXPECT_EQ(describe(f.validity_deadline()), describe(deadline)) << where;
        continue;
      }
      EXPECT_EQ(describe(a), describe(extend_action{extend_action::type::complete, {}, aborted})) << where;
      EXPECT_TRUE(f.done()) << where;
      EXPECT_FALSE(f.decided()) << where;  // also after reset() of a machine that decided before
      EXPECT_EQ(describe(f.validity_deadline()), describe(deadline)) << where;
      EXPECT_EQ(describe(f.cancel()), "wait") << where;
      for (std::size_t m = 0; m < masters_; ++m) {
        EXPECT_EQ(describe(f.on_reply(m, {}, int_reply("1"), at(1ms))), "wait") << where;
      }
      EXPECT_EQ(describe(f.validity_deadline()), describe(deadline)) << where;
      EXPECT_FALSE(f.decided()) << where;
    }
  }

  /// Each reply replaced, in turn, by a lost connection: never a success, the deadline stays the
  /// old one, and where the reply decided a failure, the failure decides too.
  void run_failing_each_reply() const {
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const auto& s = steps_[k];
      if (!s.as_failure) continue;
      auto f = make();
      for (std::size_t i = 0; i < k; ++i) steps_[i].event(f);
      const auto where = "step " + std::to_string(k) + ": " + s.label + " lost";
      const auto deadline = f.validity_deadline();
      const auto a = s.as_failure(f);
      EXPECT_NE(a.what, extend_action::type::extend) << where;
      if (a.what == extend_action::type::complete) {
        EXPECT_TRUE(a.ec) << where << ": success";
      }
      if (s.expected.what == extend_action::type::complete && s.expected.ec) {
        EXPECT_EQ(a.what, extend_action::type::complete) << where;
      }
      EXPECT_EQ(describe(f.validity_deadline()), describe(deadline)) << where;
    }
  }

 private:
  struct step {
    std::string label;
    std::function<extend_action(extend_fsm&)> event;
    redlock::test::source_location loc;
    extend_action expected{};
    std::function<void(const extend_fsm&)> check{};
    std::function<extend_action(extend_fsm&)> as_failure{};  // the same reply, lost with the connection
  };

  extend_script& push(std::string label, std::function<extend_action(extend_fsm&)> event,
                      redlock::test::source_location loc) {
    steps_.push_back({std::move(label), std::move(event), loc});
    return *this;
  }
  extend_script& expect(extend_action a) {
    steps_.back().expected = a;
    return *this;
  }

  std::size_t masters_;
  std::chrono::milliseconds ttl_;
  clock::duration old_;
  std::vector<step> steps_;
};

extend_script extended_by_a_majority() {
  extend_script s;
  s.start(100ms)
      .extend(350ms)
      .then([](const extend_fsm& f) {
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline)));
        EXPECT_FALSE(f.done());
      })
      .reply(1, int_reply("1"), 110ms)
      .wait()
      .reply(0, int_reply("1"), 120ms)
      .complete({})
      .then([](const extend_fsm& f) {
        // From the round's start: start + ttl - drift.
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable)));
        EXPECT_TRUE(f.decided());
        EXPECT_TRUE(f.done());
      })
      .reply(2, int_reply("0"), 130ms)
      .wait()
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable))); });
  return s;
}

TEST(extend_fsm, a_majority_within_the_old_validity_extends_from_the_round_start) { extended_by_a_majority().run(); }

TEST(extend_fsm, cancel_at_each_step) { extended_by_a_majority().run_cancelling_at_each_step(); }

TEST(extend_fsm, a_lost_connection_at_each_reply) {
  extended_by_a_majority().run_failing_each_reply();
  extend_script s{5};
  s.start(100ms)
      .extend(350ms)
      .reply(0, int_reply("1"), 101ms)
      .reply(1, int_reply("0"), 102ms)
      .reply(2, int_reply("1"), 103ms)
      .fail(3, redlock::error::master_timeout, 350ms)
      .wait()
      .reply(4, int_reply("0"), 350ms)
      .complete(redlock::error::quorum_unavailable);  // 2 of 5 "not ours": a majority still could be
  s.run();
  s.run_failing_each_reply();
  s.run_cancelling_at_each_step();
}

TEST(extend_fsm, the_per_master_deadline_is_cut_to_the_remaining_validity) {
  extend_script{}.start(249ms).extend(499ms).run();  // 250 ms fit
  extend_script{}.start(250ms).extend(500ms).run();  // exactly
  extend_script{}.start(400ms).extend(500ms).run();  // only 100 ms left
  extend_script{}.start(old_deadline - 1us).extend(old_deadline).run();
}

TEST(extend_fsm, starting_at_or_after_the_old_deadline_sends_nothing) {
  for (const auto t : {clock::duration{old_deadline}, clock::duration{old_deadline + 1ms}, clock::duration{5s}}) {
    extend_script{}
        .start(t)
        .complete(redlock::error::validity_expired)
        .then([](const extend_fsm& f) {
          EXPECT_TRUE(f.done());
          EXPECT_FALSE(f.decided());
          EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline)));
        })
        .reply(0, int_reply("1"), t)
        .wait()
        .cancel()
        .wait()
        .run();
  }
}

// After the old deadline someone else may hold the lock: a quorum decided then is worthless.
TEST(extend_fsm, a_quorum_decided_at_or_after_the_old_deadline_is_validity_expired) {
  extend_script{}
      .start(400ms)
      .extend(500ms)
      .reply(0, int_reply("1"), 450ms)
      .reply(1, int_reply("1"), old_deadline - 1us)
      .complete({})
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(400ms + usable))); })
      .run();
  for (const auto t : {clock::duration{old_deadline}, clock::duration{old_deadline + 1ms}}) {
    extend_script{}
        .start(400ms)
        .extend(500ms)
        .reply(0, int_reply("1"), 450ms)
        .reply(1, int_reply("1"), t)
        .complete(redlock::error::validity_expired)
        .then([](const extend_fsm& f) {
          EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline)));
          EXPECT_TRUE(f.decided());
        })
        .run();
  }
}

// An extension never shortens the lock: with a ttl shorter than the time left, success keeps the
// old deadline, even when the new ttl would leave no validity at all (the masters kept the longer
// expiry: every extend script only moves an expiry later).
TEST(extend_fsm, a_shorter_ttl_never_moves_the_deadline_earlier) {
  // ttl 100 ms: drift 1 ms + 2 ms, start + 97 ms; the old deadline is 10 s.
  extend_script{3, 100ms, 10s}
      .start(100ms)
      .extend(350ms)
      .reply(0, int_reply("1"), 110ms)
      .reply(1, int_reply("1"), 197ms - 1us)
      .complete({})
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(10s))); })
      .run();
  extend_script{3, 100ms, 10s}
      .start(100ms)
      .extend(350ms)
      .reply(0, int_reply("1"), 110ms)
      .reply(1, int_reply("1"), 300ms)
      .complete({})
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(10s))); })
      .run();
}

// Past the old deadline nothing counts, however long the new ttl: someone else may hold it.
TEST(extend_fsm, a_quorum_after_the_old_deadline_is_validity_expired) {
  extend_script{3, 10s, 300ms}
      .start(100ms)
      .extend(300ms)
      .reply(0, int_reply("1"), 110ms)
      .reply(1, int_reply("1"), 300ms)
      .complete(redlock::error::validity_expired)
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(300ms))); })
      .run();
}

TEST(extend_fsm, taken_means_not_owner) {
  extend_script{}
      .start(100ms)
      .extend(350ms)
      .reply(0, int_reply("0"), 110ms)
      .reply(1, int_reply("0"), 120ms)
      .complete(redlock::error::not_owner)
      .then([](const extend_fsm& f) {
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline)));
        EXPECT_TRUE(f.decided());
      })
      .run();
  // One "not ours" among the failures proves the lock is gone on that master only (it may have
  // missed an earlier extension and let its copy expire): the quorum failed, the lock may live.
  extend_script{}
      .start(100ms)
      .extend(350ms)
      .fail(2, redlock::error::master_timeout, 350ms)
      .reply(0, int_reply("0"), 350ms)
      .complete(redlock::error::quorum_unavailable)
      .run();
  // On 5 masters, gone once 3 say so (the outcome is decided at the first answer that makes a
  // quorum impossible: with a failure among the first three "no", it is quorum_unavailable).
  extend_script{5}
      .start(100ms)
      .extend(350ms)
      .reply(0, int_reply("0"), 110ms)
      .reply(2, int_reply("0"), 120ms)
      .wait()
      .reply(3, int_reply("0"), 130ms)
      .complete(redlock::error::not_owner)
      .run();
}

TEST(extend_fsm, failures_mean_quorum_unavailable) {
  extend_script{}
      .start(100ms)
      .extend(350ms)
      .reply(0, int_reply("1"), 105ms)
      .fail(1, redlock::error::connection_lost, 110ms)
      .wait()
      .fail(2, redlock::error::master_timeout, 350ms)
      .complete(redlock::error::quorum_unavailable)
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline))); })
      .run();
  // "OK" is not what the script answers: garbage, not a yes.
  extend_script{}
      .start(100ms)
      .extend(350ms)
      .reply(0, ok_reply(), 105ms)
      .reply(1, nil_reply(), 110ms)
      .complete(redlock::error::quorum_unavailable)
      .run();
}

TEST(extend_fsm, cancel_keeps_the_old_deadline_even_if_a_majority_follows) {
  extend_script{}
      .start(100ms)
      .extend(350ms)
      .reply(0, int_reply("1"), 110ms)
      .cancel()
      .complete(aborted)
      .then([](const extend_fsm& f) {
        EXPECT_FALSE(f.decided());
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline)));
      })
      .reply(1, int_reply("1"), 120ms)
      .wait()
      .then([](const extend_fsm& f) {
        EXPECT_FALSE(f.decided());
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(old_deadline)));
      })
      .run();
}

TEST(extend_fsm, cancel_after_success_keeps_the_new_deadline) {
  extended_by_a_majority()
      .cancel()
      .wait()
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable))); })
      .run();
}

// A machine kept between two locks' extensions (the client's spares) takes the next lock's
// quorum: two yes of three extend a plain lock, not a lock that needs all three, and back.
TEST(extend_fsm, reset_for_another_lock_takes_its_quorum) {
  extend_fsm f{3, ttl, 250ms, drift_policy{}, at(old_deadline)};
  (void)f.start(at(0ms));
  (void)f.on_reply(0, {}, int_reply("1"), at(10ms));
  EXPECT_EQ(describe(f.on_reply(1, {}, int_reply("1"), at(20ms))), "complete(ok)");
  f.reset(ttl, at(old_deadline), 3);
  (void)f.start(at(100ms));
  (void)f.on_reply(0, {}, int_reply("1"), at(110ms));
  EXPECT_EQ(describe(f.on_reply(1, {}, int_reply("1"), at(120ms))), "wait") << "three are needed";
  EXPECT_EQ(describe(f.on_reply(2, {}, int_reply("1"), at(130ms))), "complete(ok)");
  EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable)));
  f.reset(ttl, at(old_deadline), 0);
  (void)f.start(at(200ms));
  (void)f.on_reply(2, {}, int_reply("0"), at(210ms));
  EXPECT_EQ(describe(f.on_reply(0, {}, int_reply("1"), at(220ms))), "wait");
  EXPECT_EQ(describe(f.on_reply(1, {}, int_reply("1"), at(230ms))), "complete(ok)") << "a majority again";
  EXPECT_EQ(describe(f.validity_deadline()), describe(at(200ms + usable)));
}

TEST(extend_fsm, reset_makes_it_ready_for_the_next_extension) {
  // 2000 ms: drift 20 ms + 2 ms.
  extended_by_a_majority()
      .reset(2000ms, 100ms + usable)
      .then([](const extend_fsm& f) {
        EXPECT_FALSE(f.done());
        EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable)));  // the new old one
      })
      .start(600ms)
      .extend(850ms)
      .reply(0, int_reply("1"), 610ms)
      .wait()  // the last round's votes do not count
      .reply(2, int_reply("1"), 620ms)
      .complete({})
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(600ms + 1978ms))); })
      .run();
  // A failed extension after a successful one reports the (new) old deadline.
  extended_by_a_majority()
      .reset(1000ms, 100ms + usable)
      .start(600ms)
      .extend(850ms)
      .reply(0, int_reply("0"), 610ms)
      .reply(2, int_reply("0"), 620ms)
      .complete(redlock::error::not_owner)
      .then([](const extend_fsm& f) { EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable))); })
      .run();
}

TEST(extend_fsm, cancel_at_each_step_of_a_reused_machine) {
  extended_by_a_majority()
      .reset(2000ms, 100ms + usable)
      .start(600ms)
      .extend(850ms)
      .reply(0, int_reply("1"), 610ms)
      .reply(2, int_reply("1"), 620ms)
      .complete({})
      .run_cancelling_at_each_step();
}

// decided() says whether *this* extension was decided by the masters: a reset() forgets the
// previous one, so a start refused up front (or a cancel before any answer) is not "decided".
TEST(extend_fsm, decided_is_false_after_reset_and_a_refused_start) {
  extended_by_a_majority()
      .reset(1000ms, 100ms + usable)
      .then([](const extend_fsm& f) { EXPECT_FALSE(f.decided()); })
      .start(100ms + usable)
      .complete(redlock::error::validity_expired)
      .then([](const extend_fsm& f) { EXPECT_FALSE(f.decided()); })
      .run();
  extended_by_a_majority()
      .reset(1000ms, 100ms + usable)
      .start(600ms)
      .extend(850ms)
      .cancel()
      .complete(aborted)
      .then([](const extend_fsm& f) { EXPECT_FALSE(f.decided()); })
      .run();
}

class extend_sizes : public ::testing::TestWithParam<std::size_t> {};

TEST_P(extend_sizes, decided_at_the_majority_th_grant) {
  const std::size_t n = GetParam();
  extend_script s{n};
  s.start(100ms).extend(350ms);
  for (std::size_t i = 0; i < majority(n); ++i) {
    s.reply(n - 1 - i, int_reply("1"), 100ms + 1ms * static_cast<int>(i + 1));
    if (i + 1 == majority(n)) s.complete({});
  }
  const auto f = s.run();
  EXPECT_EQ(describe(f.validity_deadline()), describe(at(100ms + usable)));
  EXPECT_EQ(f.table().count(master_status::granted), majority(n));
}

TEST_P(extend_sizes, not_owner_once_a_majority_cannot_extend) {
  const std::size_t n = GetParam();
  const std::size_t noes = n - majority(n) + 1;
  extend_script s{n};
  s.start(100ms).extend(350ms);
  for (std::size_t i = 0; i < noes; ++i) {
    s.reply(i, int_reply("0"), 100ms + 1ms * static_cast<int>(i + 1));
    if (i + 1 == noes) s.complete(redlock::error::not_owner);
  }
  s.run();
}

TEST_P(extend_sizes, quorum_unavailable_once_too_many_fail) {
  const std::size_t n = GetParam();
  const std::size_t noes = n - majority(n) + 1;
  extend_script s{n};
  s.start(100ms).extend(350ms);
  for (std::size_t i = 0; i < noes; ++i) {
    s.fail(i, redlock::error::master_timeout, 350ms);
    if (i + 1 == noes) s.complete(redlock::error::quorum_unavailable);
  }
  const auto f = s.run();
  EXPECT_EQ(f.table().state(), quorum_state::impossible);
}

INSTANTIATE_TEST_SUITE_P(extend_fsm, extend_sizes, ::testing::Values(1u, 3u, 5u));

}  // namespace
