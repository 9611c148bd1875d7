// SPDX-License-Identifier: BSL-1.0
#include "transcript.hpp"
#include <redlock/core/unlock_fsm.hpp>
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
using redlock::core::majority;
using redlock::core::quorum_state;
using redlock::core::unlock_action;
using redlock::core::unlock_fsm;
using redlock::test::describe;
namespace resp = redlock::resp;
using boost::system::error_code;

const error_code aborted = boost::asio::error::operation_aborted;

std::string describe(const unlock_action& a) {
  switch (a.what) {
    case unlock_action::type::wait:
      return "wait";
    case unlock_action::type::release:
      return "release until " + redlock::test::describe(a.at);
    case unlock_action::type::complete:
      return "complete(" + redlock::test::describe(a.ec) + ")";
  }
  return "?";
}

// A transcript of one unlock_fsm (see lock_fsm_test.cpp for the pattern).
class unlock_script {
 public:
  explicit unlock_script(std::size_t masters, std::chrono::milliseconds timeout = 200ms, bool wait_for_all = false)
      : masters_(masters), timeout_(timeout), all_(wait_for_all) {}

  unlock_script& start(clock::duration t,
                       redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "start", [t](unlock_fsm& f) { return f.start(at(t)); }, loc);
  }
  unlock_script& reply(std::size_t master, resp::response r, clock::duration t,
                       redlock::test::source_location loc = redlock::test::source_location::current()) {
    push(
        "reply m" + std::to_string(master), [=](unlock_fsm& f) { return f.on_reply(master, {}, r, at(t)); }, loc);
    steps_.back().as_failure = [=](unlock_fsm& f) {
      return f.on_reply(master, redlock::error::connection_lost, no_reply(), at(t));
    };
    return *this;
  }
  unlock_script& fail(std::size_t master, redlock::error e, clock::duration t,
                      redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "fail m" + std::to_string(master), [=](unlock_fsm& f) { return f.on_reply(master, e, no_reply(), at(t)); },
        loc);
  }
  unlock_script& cancel(redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "cancel", [](unlock_fsm& f) { return f.cancel(); }, loc);
  }

  unlock_script& wait() { return expect({}); }
  unlock_script& release(clock::duration until) { return expect({unlock_action::type::release, at(until), {}}); }
  unlock_script& complete(error_code ec) { return expect({unlock_action::type::complete, {}, ec}); }
  unlock_script& then(std::function<void(const unlock_fsm&)> check) {
    steps_.back().check = std::move(check);
    return *this;
  }

  unlock_fsm run() const {
    unlock_fsm f{masters_, timeout_, all_};
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      ::testing::ScopedTrace trace{s.loc.file_name(), static_cast<int>(s.loc.line()), s.label};
      const auto a = s.event(f);
      EXPECT_EQ(describe(a), describe(s.expected)) << "step " << i << ": " << s.label;
      if (s.check) s.check(f);
    }
    return f;
  }

  /// Cancellation after every prefix: aborted and not decided until the masters decide; nothing
  /// once decided (the decision stands).
  void run_cancelling_at_each_step() const {
    for (std::size_t k = 0; k <= steps_.size(); ++k) {
      unlock_fsm f{masters_, timeout_, all_};
      bool done = false;
      for (std::size_t i = 0; i < k; ++i) {
        steps_[i].event(f);
        done = done || steps_[i].expected.what == unlock_action::type::complete;
      }
      const auto where = "after " + std::to_string(k) + " steps";
      const bool decided = f.decided();
      const auto held = f.held();
      const auto a = f.cancel();
      if (done) {
        EXPECT_EQ(describe(a), "wait") << where;
        EXPECT_EQ(f.decided(), decided) << where;
        EXPECT_EQ(f.held(), held) << where;
        continue;
      }
      EXPECT_EQ(describe(a), describe(unlock_action{unlock_action::type::complete, {}, aborted})) << where;
      EXPECT_TRUE(f.done()) << where;
      EXPECT_FALSE(f.decided()) << where;
      EXPECT_EQ(describe(f.cancel()), "wait") << where;
      EXPECT_EQ(describe(f.start(at(1s))), "wait") << where;
      for (std::size_t m = 0; m < masters_; ++m) {
        EXPECT_EQ(describe(f.on_reply(m, {}, int_reply("1"), at(1s))), "wait") << where;
      }
      EXPECT_FALSE(f.decided()) << where;
    }
  }

  /// Each reply replaced, in turn, by a lost connection: it can only make the quorum impossible,
  /// so the machine waits or completes with quorum_unavailable; held() does not grow.
  void run_failing_each_reply() const {
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const auto& s = steps_[k];
      if (!s.as_failure) continue;
      unlock_fsm f{masters_, timeout_, all_};
      for (std::size_t i = 0; i < k; ++i) steps_[i].event(f);
      const auto where = "step " + std::to_string(k) + ": " + s.label + " lost";
      const bool was_done = f.done();
      const auto a = s.as_failure(f);
      if (was_done) {
        EXPECT_EQ(describe(a), "wait") << where;
        continue;
      }
      if (a.what != unlock_action::type::wait) {
        EXPECT_EQ(describe(a),
                  describe(unlock_action{unlock_action::type::complete, {}, redlock::error::quorum_unavailable}))
            << where;
        EXPECT_LE(f.held(), masters_ - majority(masters_)) << where;
      }
    }
  }

 private:
  struct step {
    std::string label;
    std::function<unlock_action(unlock_fsm&)> event;
    redlock::test::source_location loc;
    unlock_action expected{};
    std::function<void(const unlock_fsm&)> check{};
    std::function<unlock_action(unlock_fsm&)> as_failure{};  // the same reply, lost with the connection
  };

  unlock_script& push(std::string label, std::function<unlock_action(unlock_fsm&)> event,
                      redlock::test::source_location loc) {
    steps_.push_back({std::move(label), std::move(event), loc});
    return *this;
  }
  unlock_script& expect(unlock_action a) {
    steps_.back().expected = a;
    return *this;
  }

  std::size_t masters_;
  std::chrono::milliseconds timeout_;
  bool all_ = false;
  std::vector<step> steps_;
};

unlock_script released_by_a_majority() {
  unlock_script s{3};
  s.start(10ms)
      .release(210ms)
      .then([](const unlock_fsm& f) {
        EXPECT_FALSE(f.done());
        EXPECT_FALSE(f.decided());
        EXPECT_EQ(f.table().start(), at(10ms));
      })
      .reply(2, int_reply("1"), 15ms)
      .wait()
      .reply(0, int_reply("0"), 20ms)  // not ours there: gone either way, a clean answer
      .complete({})
      .then([](const unlock_fsm& f) {
        EXPECT_TRUE(f.done());
        EXPECT_TRUE(f.decided());
        EXPECT_EQ(f.held(), 1u);  // only the master that still had our token
        EXPECT_EQ(f.table().results()[2].latency, 5000us);
      })
      .reply(1, int_reply("1"), 25ms)
      .wait()
      .then([](const unlock_fsm& f) { EXPECT_EQ(f.held(), 1u); });
  return s;
}

TEST(unlock_fsm, a_majority_of_clean_answers_is_success) { released_by_a_majority().run(); }

TEST(unlock_fsm, cancel_at_each_step) { released_by_a_majority().run_cancelling_at_each_step(); }

TEST(unlock_fsm, a_lost_connection_at_each_reply) {
  released_by_a_majority().run_failing_each_reply();
  unlock_script s{5};
  s.start(0ms)
      .release(200ms)
      .fail(0, redlock::error::master_timeout, 200ms)
      .reply(1, int_reply("1"), 1ms)
      .reply(2, int_reply("0"), 2ms)
      .fail(3, redlock::error::not_connected, 3ms)
      .wait()
      .reply(4, int_reply("1"), 4ms)
      .complete({})
      .then([](const unlock_fsm& f) { EXPECT_EQ(f.held(), 2u); });
  s.run();
  s.run_failing_each_reply();
  s.run_cancelling_at_each_step();
}

TEST(unlock_fsm, start_twice_sends_once) {
  unlock_script{3}.start(0ms).release(200ms).start(1ms).wait().run();
  unlock_script{5, 50ms}.start(7ms).release(57ms).run();
}

TEST(unlock_fsm, held_counts_the_granted_answers_by_the_decision) {
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .reply(0, int_reply("1"), 1ms)
      .reply(1, int_reply("1"), 2ms)
      .complete({})
      .then([](const unlock_fsm& f) { EXPECT_EQ(f.held(), 2u); })
      .run();
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .reply(0, int_reply("0"), 1ms)
      .reply(1, int_reply("0"), 2ms)
      .complete({})
      .then([](const unlock_fsm& f) { EXPECT_EQ(f.held(), 0u); })
      .run();
}

TEST(unlock_fsm, too_many_failures_is_quorum_unavailable) {
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .fail(0, redlock::error::connection_lost, 1ms)
      .fail(1, redlock::error::master_timeout, 200ms)
      .complete(redlock::error::quorum_unavailable)
      .then([](const unlock_fsm& f) {
        EXPECT_TRUE(f.decided());
        EXPECT_EQ(f.held(), 0u);
      })
      .run();
  // A granted answer among them still counts in held().
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .reply(2, int_reply("1"), 1ms)
      .fail(0, redlock::error::not_connected, 2ms)
      .wait()
      .fail(1, redlock::error::server_error, 3ms)
      .complete(redlock::error::quorum_unavailable)
      .then([](const unlock_fsm& f) { EXPECT_EQ(f.held(), 1u); })
      .run();
  // Garbage is not a clean answer.
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .reply(0, ok_reply(), 1ms)
      .reply(1, nil_reply(), 2ms)
      .complete(redlock::error::quorum_unavailable)
      .run();
}

TEST(unlock_fsm, a_second_answer_of_the_same_master_is_ignored) {
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .reply(1, int_reply("1"), 1ms)
      .reply(1, int_reply("1"), 2ms)
      .wait()
      .reply(0, int_reply("1"), 3ms)
      .complete({})
      .run();
}

TEST(unlock_fsm, cancel_before_any_answer) {
  unlock_script{3}
      .start(0ms)
      .release(200ms)
      .cancel()
      .complete(aborted)
      .then([](const unlock_fsm& f) {
        EXPECT_TRUE(f.done());
        EXPECT_FALSE(f.decided());
        EXPECT_EQ(f.held(), 0u);
      })
      .reply(0, int_reply("1"), 1ms)
      .reply(1, int_reply("1"), 2ms)
      .wait()
      .then([](const unlock_fsm& f) {
        EXPECT_FALSE(f.decided());
        EXPECT_EQ(f.held(), 0u);
      })
      .run();
}

class unlock_sizes : public ::testing::TestWithParam<std::size_t> {};

TEST_P(unlock_sizes, decided_at_the_majority_th_clean_answer) {
  const std::size_t n = GetParam();
  unlock_script s{n};
  s.start(0ms).release(200ms);
  for (std::size_t i = 0; i < majority(n); ++i) {
    s.reply(i, int_reply(i % 2 == 0 ? "1" : "0"), 1ms * static_cast<int>(i + 1));
    if (i + 1 == majority(n)) s.complete({});
  }
  const auto f = s.run();
  EXPECT_EQ(f.held(), (majority(n) + 1) / 2);
  EXPECT_EQ(f.table().state(), quorum_state::reached);
}

TEST_P(unlock_sizes, quorum_unavailable_once_a_majority_cannot_answer) {
  const std::size_t n = GetParam();
  const std::size_t noes = n - majority(n) + 1;
  unlock_script s{n};
  s.start(0ms).release(200ms);
  for (std::size_t i = 0; i < noes; ++i) {
    s.fail(i, redlock::error::master_timeout, 200ms);
    if (i + 1 == noes) s.complete(redlock::error::quorum_unavailable);
  }
  s.run();
}

INSTANTIATE_TEST_SUITE_P(unlock_fsm, unlock_sizes, ::testing::Values(1u, 3u, 5u));

// ---- wait for all (unlock_options::wait_for_all) ------------------------------------------------

// A majority answered cleanly, but the machine waits for the third master: here its deadline
// passed (master_timeout), and the counts account for every master.
unlock_script released_waiting_for_all() {
  unlock_script s{3, 200ms, true};
  s.start(10ms)
      .release(210ms)
      .reply(2, int_reply("1"), 15ms)
      .wait()
      .reply(0, int_reply("0"), 20ms)
      .wait()  // a majority, but not everybody: the quick form would complete here
      .then([](const unlock_fsm& f) { EXPECT_FALSE(f.done()); })
      .fail(1, redlock::error::master_timeout, 210ms)
      .complete({})
      .then([](const unlock_fsm& f) {
        EXPECT_TRUE(f.decided());
        EXPECT_EQ(f.released(), 1u);
        EXPECT_EQ(f.not_held(), 1u);
        EXPECT_EQ(f.no_answer(), 1u);
        EXPECT_EQ(f.held(), 1u);
        EXPECT_EQ(f.table().results()[1].status, master_status::timeout);
      })
      .reply(1, int_reply("1"), 230ms)  // too late: the outcome stands
      .wait()
      .then([](const unlock_fsm& f) { EXPECT_EQ(f.no_answer(), 1u); });
  return s;
}

TEST(unlock_fsm, wait_for_all_completes_when_every_master_answered) { released_waiting_for_all().run(); }
TEST(unlock_fsm, wait_for_all_cancel_at_each_step) { released_waiting_for_all().run_cancelling_at_each_step(); }
TEST(unlock_fsm, wait_for_all_failing_each_reply) { released_waiting_for_all().run_failing_each_reply(); }

TEST(unlock_fsm, wait_for_all_all_held_is_three_released) {
  unlock_script s{3, 200ms, true};
  s.start(0ms)
      .release(200ms)
      .reply(0, int_reply("1"), 1ms)
      .wait()
      .reply(1, int_reply("1"), 2ms)
      .wait()
      .reply(1, int_reply("1"), 3ms)  // a second answer of one master counts once
      .wait()
      .reply(2, int_reply("2"), 4ms)  // deleted, waiters queued: still ours
      .complete({})
      .then([](const unlock_fsm& f) {
        EXPECT_EQ(f.released(), 3u);
        EXPECT_EQ(f.not_held(), 0u);
        EXPECT_EQ(f.no_answer(), 0u);
        EXPECT_TRUE(f.waiters());
      });
  s.run();
}

// Without a majority of clean answers it is quorum_unavailable, decided only once all answered:
// the counts still say what each master did.
TEST(unlock_fsm, wait_for_all_without_a_majority_is_quorum_unavailable_with_counts) {
  unlock_script s{3, 200ms, true};
  s.start(0ms)
      .release(200ms)
      .fail(1, redlock::error::not_connected, 0ms)
      .wait()
      .fail(2, redlock::error::server_error, 1ms)
      .wait()  // the quick form would give up here
      .reply(0, int_reply("1"), 5ms)
      .complete(redlock::error::quorum_unavailable)
      .then([](const unlock_fsm& f) {
        EXPECT_EQ(f.released(), 1u);
        EXPECT_EQ(f.not_held(), 0u);
        EXPECT_EQ(f.no_answer(), 2u);
      });
  s.run();
}

// The quick form's counts: a master that had not answered at the majority counts as no answer.
TEST(unlock_fsm, quick_form_counts_the_unanswered_as_no_answer) {
  unlock_fsm m{3, 200ms};
  (void)m.start(at(0ms));
  (void)m.on_reply(0, {}, int_reply("1"), at(1ms));
  const auto a = m.on_reply(1, {}, int_reply("0"), at(2ms));
  EXPECT_EQ(a.what, unlock_action::type::complete);
  EXPECT_EQ(m.released(), 1u);
  EXPECT_EQ(m.not_held(), 1u);
  EXPECT_EQ(m.no_answer(), 1u);
}

}  // namespace
