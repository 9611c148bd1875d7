// SPDX-License-Identifier: BSL-1.0
#include "transcript.hpp"
#include <redlock/core/keep_alive_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace redlock::test;
using boost::system::error_code;
using redlock::keep_alive_options;
using redlock::core::default_notify_margin;
using redlock::core::keep_alive_action;
using redlock::core::keep_alive_fsm;
using redlock::core::resolve;
using redlock::test::describe;
using std::chrono::milliseconds;

// A lock of ttl 1000 ms valid until t0 + 988 ms, extensions with a per-master deadline of 100 ms.
// The default margin is 1000 / 20 = 50 ms: the loss is due at t0 + 938 ms.
constexpr auto ttl = 1000ms;
constexpr auto deadline = 988ms;
constexpr auto loss_at = 938ms;

std::string describe(const keep_alive_action& a) {
  switch (a.what) {
    case keep_alive_action::type::none:
      return a.reason ? "none reason=" + redlock::test::describe(a.reason) : "none";
    case keep_alive_action::type::extend:
      return "extend ttl=" + std::to_string(a.ttl.count()) + "ms";
    case keep_alive_action::type::lost:
      return "lost(" + redlock::test::describe(a.reason) + ")";
  }
  return "?";
}

keep_alive_options opts(std::size_t max_extensions = 0, milliseconds max_hold = 0ms) {
  keep_alive_options o;
  o.max_extensions = max_extensions;
  o.max_hold = max_hold;
  return o;
}

// A transcript of one keep_alive_fsm: events (timers, ends of extensions, keep, manual extensions,
// stop), the action each returns (`none` unless said otherwise) and, where said, `next_wake()`
// after it. Every step also checks the invariant that the machine never sleeps past the loss point.
class keep_script {
 public:
  explicit keep_script(milliseconds lock_ttl = ttl, clock::duration lock_deadline = deadline)
      : ttl_(lock_ttl), deadline_(lock_deadline) {}

  keep_script& keep(keep_alive_options o, clock::duration t,
                    redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "keep",
        [=](keep_alive_fsm& f) {
          f.keep(o, at(t));
          return keep_alive_action{};
        },
        loc);
  }
  keep_script& timer(clock::duration t,
                     redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "timer " + describe(at(t)), [t](keep_alive_fsm& f) { return f.on_timer(at(t)); }, loc);
  }
  keep_script& extended(clock::duration new_deadline, clock::duration t,
                        redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "extended", [=](keep_alive_fsm& f) { return f.on_extended({}, at(new_deadline), at(t)); }, loc);
  }
  keep_script& extend_failed(error_code ec, clock::duration t,
                             redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "extend failed " + describe(ec), [=](keep_alive_fsm& f) { return f.on_extended(ec, {}, at(t)); }, loc);
  }
  keep_script& moved(clock::duration new_deadline,
                     redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "deadline moved",
        [=](keep_alive_fsm& f) {
          f.deadline_moved(at(new_deadline));
          return keep_alive_action{};
        },
        loc);
  }
  keep_script& stop(redlock::test::source_location loc = redlock::test::source_location::current()) {
    return push(
        "stop",
        [](keep_alive_fsm& f) {
          f.stop();
          return keep_alive_action{};
        },
        loc);
  }

  keep_script& none() { return expect({}); }
  keep_script& extend(milliseconds ext_ttl) { return expect({keep_alive_action::type::extend, ext_ttl, {}}); }
  keep_script& lost(error_code reason) { return expect({keep_alive_action::type::lost, {}, reason}); }
  /// `next_wake()` after the last event.
  keep_script& wakes(clock::duration t) {
    steps_.back().wake = at(t);
    return *this;
  }
  keep_script& never_wakes() {
    steps_.back().wake = clock::time_point::max();
    return *this;
  }
  keep_script& then(std::function<void(const keep_alive_fsm&)> check) {
    steps_.back().check = std::move(check);
    return *this;
  }

  keep_alive_fsm make() const { return keep_alive_fsm{ttl_, at(deadline_), 100ms}; }

  keep_alive_fsm run() const {
    auto f = make();
    bool lost_so_far = false;
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      ::testing::ScopedTrace trace{s.loc.file_name(), static_cast<int>(s.loc.line()), s.label};
      const auto a = s.event(f);
      EXPECT_EQ(describe(a), describe(s.expected)) << "step " << i << ": " << s.label;
      if (s.wake) {
        EXPECT_EQ(describe(f.next_wake()), describe(*s.wake)) << "step " << i << ": " << s.label;
      }
      if (!f.finished()) {
        EXPECT_LE(f.next_wake(), f.deadline() - f.margin()) << "step " << i << ": sleeps past the loss point";
      }
      lost_so_far = lost_so_far || a.what == keep_alive_action::type::lost;
      EXPECT_EQ(f.lost(), lost_so_far) << "step " << i;
      if (a.what == keep_alive_action::type::lost) {
        EXPECT_EQ(f.reason(), a.reason) << "step " << i;
        EXPECT_TRUE(f.finished());
      }
      if (s.check) s.check(f);
    }
    return f;
  }

  /// stop() injected after every prefix: from then on nothing happens, whatever the time says.
  void run_stopping_at_each_step() const {
    for (std::size_t k = 0; k <= steps_.size(); ++k) {
      auto f = make();
      for (std::size_t i = 0; i < k; ++i) steps_[i].event(f);
      const auto where = "after " + std::to_string(k) + " steps";
      const bool was_lost = f.lost();
      const auto d = f.deadline();
      const auto n = f.extensions();
      f.stop();
      EXPECT_TRUE(f.finished()) << where;
      EXPECT_EQ(f.lost(), was_lost) << where;
      EXPECT_EQ(describe(f.next_wake()), "max") << where;
      for (const auto t : {at(0ms), at(loss_at), at(deadline), at(1h)}) {
        EXPECT_EQ(describe(f.on_timer(t)), "none") << where;
      }
      EXPECT_EQ(describe(f.on_extended({}, at(5s), at(900ms))), "none") << where;
      EXPECT_EQ(describe(f.on_extended(redlock::error::not_owner, {}, at(900ms))), "none") << where;
      f.deadline_moved(at(7s));
      f.keep(keep_alive_options{}, at(900ms));
      EXPECT_EQ(describe(f.deadline()), describe(d)) << where;
      EXPECT_EQ(f.extensions(), n) << where;
      EXPECT_EQ(describe(f.next_wake()), "max") << where;
      EXPECT_EQ(f.lost(), was_lost) << where;
    }
  }

 private:
  struct step {
    std::string label;
    std::function<keep_alive_action(keep_alive_fsm&)> event;
    redlock::test::source_location loc;
    keep_alive_action expected{};
    std::optional<clock::time_point> wake{};
    std::function<void(const keep_alive_fsm&)> check{};
  };

  keep_script& push(std::string label, std::function<keep_alive_action(keep_alive_fsm&)> event,
                    redlock::test::source_location loc) {
    steps_.push_back({std::move(label), std::move(event), loc});
    return *this;
  }
  keep_script& expect(keep_alive_action a) {
    steps_.back().expected = a;
    return *this;
  }

  milliseconds ttl_;
  clock::duration deadline_;
  std::vector<step> steps_;
};

// ---------------------------------------------------------------------------------------------
// resolve

TEST(keep_alive_resolve, zero_means_derived_from_the_ttl) {
  const auto o = resolve(keep_alive_options{}, 1000ms);
  EXPECT_EQ(o.ttl, 1000ms);
  EXPECT_EQ(o.renew_below, 500ms);
  EXPECT_EQ(o.retry_interval, 100ms);
  EXPECT_EQ(o.notify_margin, 50ms);
  EXPECT_EQ(o.max_extensions, 0u);
  EXPECT_EQ(o.max_hold, std::chrono::hours{1});
}

TEST(keep_alive_resolve, derived_from_the_extension_ttl_when_given) {
  keep_alive_options in;
  in.ttl = 2000ms;
  const auto o = resolve(in, 1000ms);
  EXPECT_EQ(o.ttl, 2000ms);
  EXPECT_EQ(o.renew_below, 1000ms);
  EXPECT_EQ(o.retry_interval, 200ms);
  EXPECT_EQ(o.notify_margin, 100ms);
}

TEST(keep_alive_resolve, floors_for_short_ttls) {
  EXPECT_EQ(default_notify_margin(1000ms), 50ms);
  EXPECT_EQ(default_notify_margin(60ms), 3ms);
  EXPECT_EQ(default_notify_margin(40ms), 2ms);
  EXPECT_EQ(default_notify_margin(20ms), 2ms);
  EXPECT_EQ(default_notify_margin(1ms), 2ms);
  const auto o = resolve(keep_alive_options{}, 5ms);
  EXPECT_EQ(o.retry_interval, 1ms);  // 5 / 10 would be 0
  EXPECT_EQ(o.notify_margin, 2ms);
  EXPECT_EQ(o.renew_below, 2ms);
  EXPECT_EQ(resolve(keep_alive_options{}, 20ms).retry_interval, 2ms);
}

TEST(keep_alive_resolve, given_values_are_kept_and_negative_ones_derived) {
  keep_alive_options in;
  in.ttl = 3000ms;
  in.renew_below = 700ms;
  in.retry_interval = 30ms;
  in.notify_margin = 40ms;
  in.max_extensions = 9;
  in.max_hold = 5s;
  auto o = resolve(in, 1000ms);
  EXPECT_EQ(o.ttl, 3000ms);
  EXPECT_EQ(o.renew_below, 700ms);
  EXPECT_EQ(o.retry_interval, 30ms);
  EXPECT_EQ(o.notify_margin, 40ms);
  EXPECT_EQ(o.max_extensions, 9u);
  EXPECT_EQ(o.max_hold, 5s);
  in.ttl = -1ms;
  in.renew_below = -1ms;
  in.retry_interval = -1ms;
  in.notify_margin = -1ms;
  o = resolve(in, 1000ms);
  EXPECT_EQ(o.ttl, 1000ms);
  EXPECT_EQ(o.renew_below, 500ms);
  EXPECT_EQ(o.retry_interval, 100ms);
  EXPECT_EQ(o.notify_margin, 50ms);
}

// ---------------------------------------------------------------------------------------------
// Watching only

TEST(keep_alive_fsm, without_keep_only_the_loss_is_declared_a_margin_before_the_deadline) {
  const keep_alive_fsm fresh{ttl, at(deadline), 100ms};
  EXPECT_EQ(describe(fresh.next_wake()), describe(at(loss_at)));
  EXPECT_EQ(fresh.margin(), 50ms);
  EXPECT_FALSE(fresh.keeping());
  EXPECT_FALSE(fresh.finished());
  keep_script{}
      .timer(0ms)
      .none()
      .wakes(loss_at)
      .timer(loss_at - 1us)
      .none()
      .wakes(loss_at)
      .timer(loss_at)
      .lost(redlock::error::validity_expired)
      .never_wakes()
      .then([](const keep_alive_fsm& f) {
        EXPECT_TRUE(f.lost());
        EXPECT_TRUE(f.finished());
        EXPECT_EQ(f.reason(), redlock::error::validity_expired);
        EXPECT_EQ(f.extensions(), 0u);
      })
      .timer(deadline)
      .none()  // said once
      .run();
}

TEST(keep_alive_fsm, the_default_margin_has_a_floor_of_two_ms) {
  keep_script{20ms, 100ms}.timer(0ms).wakes(98ms).timer(98ms).lost(redlock::error::validity_expired).run();
}

TEST(keep_alive_fsm, a_late_timer_still_declares_the_loss) {
  keep_script{}.timer(5s).lost(redlock::error::validity_expired).run();
}

// ---------------------------------------------------------------------------------------------
// Renewal

keep_script renewed_twice() {
  keep_script s;
  s.keep(opts(), 0ms)
      .wakes(488ms)  // deadline - ttl / 2
      .then([](const keep_alive_fsm& f) {
        EXPECT_TRUE(f.keeping());
        EXPECT_EQ(f.options().renew_below, 500ms);
      })
      .timer(487ms)
      .none()
      .timer(488ms)
      .extend(1000ms)
      .wakes(loss_at)  // while extending: only the loss point
      .then([](const keep_alive_fsm& f) { EXPECT_TRUE(f.extending()); })
      .timer(600ms)
      .none()  // no second extension while one runs
      .extended(1488ms, 500ms)
      .none()
      .wakes(988ms)  // the new deadline - ttl / 2
      .then([](const keep_alive_fsm& f) {
        EXPECT_EQ(describe(f.deadline()), describe(at(1488ms)));
        EXPECT_EQ(f.extensions(), 1u);
        EXPECT_FALSE(f.extending());
      })
      .timer(loss_at)
      .none()  // the old loss point means nothing any more
      .timer(988ms)
      .extend(1000ms)
      .wakes(1438ms)
      .extended(1990ms, 1000ms)
      .wakes(1490ms)
      .then([](const keep_alive_fsm& f) { EXPECT_EQ(f.extensions(), 2u); });
  return s;
}

TEST(keep_alive_fsm, keep_renews_when_the_validity_falls_below_renew_below) { renewed_twice().run(); }

TEST(keep_alive_fsm, stop_at_each_step) { renewed_twice().run_stopping_at_each_step(); }

TEST(keep_alive_fsm, given_options_set_the_extension_ttl_and_the_schedule) {
  keep_alive_options o;
  o.ttl = 2000ms;
  o.renew_below = 300ms;
  o.notify_margin = 20ms;
  keep_script{}
      .keep(o, 0ms)
      .wakes(688ms)
      .then([](const keep_alive_fsm& f) { EXPECT_EQ(f.margin(), 20ms); })
      .timer(688ms)
      .extend(2000ms)
      .wakes(968ms)  // the loss point moved with the margin
      .timer(968ms)
      .lost(redlock::error::validity_expired)
      .run();
}

// Renewals fall on a grid (rounded down), so that locks coming due close together are extended in
// one batch: the step is the largest power of two of milliseconds at most renew_below / 128, at most
// 32 ms, none under 8 ms (a 1 s lock's 500 ms renew_below above keeps the exact point).
TEST(keep_alive_fsm, the_renewal_grid_grows_with_renew_below_up_to_32_ms) {
  using redlock::core::extension_step;
  EXPECT_EQ(extension_step(500ms), clock::duration::zero());
  EXPECT_EQ(extension_step(1023ms), clock::duration::zero());
  EXPECT_EQ(extension_step(1024ms), clock::duration{8ms});
  EXPECT_EQ(extension_step(2047ms), clock::duration{8ms});
  EXPECT_EQ(extension_step(2048ms), clock::duration{16ms});
  EXPECT_EQ(extension_step(4096ms), clock::duration{32ms});
  EXPECT_EQ(extension_step(5000ms), clock::duration{32ms});
  EXPECT_EQ(extension_step(std::chrono::hours{1}), clock::duration{32ms});
}

// A 10 s lock renews below 5 s on a 32 ms grid: at most 32 ms early, never late, and two locks whose
// exact renewal points lie in one step ask for the same wake-up (one timer pass extends both).
TEST(keep_alive_fsm, renewals_fall_on_the_grid_never_late_and_shared_by_nearby_locks) {
  keep_script{10s, 10000ms + 5ms}
      .keep(opts(), 0ms)
      .wakes(4992ms)  // exact 5005 ms, rounded down to 32 ms (156 steps)
      .timer(4991ms)
      .none()
      .timer(4992ms)
      .extend(10000ms)
      .extended(15000ms, 5000ms)
      .wakes(9984ms)  // exact 10000 ms: 312.5 steps, rounded down
      .run();
  keep_alive_fsm a{10s, at(10000ms + 1ms), 100ms}, b{10s, at(10000ms + 20ms), 100ms};
  a.keep(opts(), t0);
  b.keep(opts(), t0);
  EXPECT_EQ(describe(a.next_wake()), describe(b.next_wake()));
  EXPECT_EQ(describe(a.next_wake()), describe(at(4992ms)));
  // Each stays before its own exact point by less than one step.
  EXPECT_LE(a.next_wake(), at(5001ms));
  EXPECT_GT(a.next_wake() + 32ms, at(5001ms));
}

// An extension never shortens the lock, so a keep-alive whose ttl is shorter than `renew_below`
// (here 200 ms against 900 ms) leaves the deadline where it was: the next extension would be due
// at once, again and again. It waits its retry interval (a tenth of 200 ms) instead.
TEST(keep_alive_fsm, a_renewal_that_leaves_the_extension_due_waits_its_retry_interval) {
  keep_alive_options o;
  o.ttl = 200ms;
  o.renew_below = 900ms;
  keep_script{}
      .keep(o, 0ms)
      .wakes(88ms)
      .timer(88ms)
      .extend(200ms)
      .extended(deadline, 90ms)  // the masters kept the longer expiry: same deadline
      .wakes(110ms)
      .timer(100ms)
      .timer(110ms)
      .extend(200ms)
      .extended(deadline, 112ms)
      .wakes(132ms)
      .then([](const keep_alive_fsm& f) { EXPECT_EQ(f.extensions(), 2u); })
      .run();
}

TEST(keep_alive_fsm, not_owner_or_validity_expired_is_lost_at_once) {
  for (const error_code ec :
       {make_error_code(redlock::error::not_owner), make_error_code(redlock::error::validity_expired)}) {
    keep_script{}
        .keep(opts(), 0ms)
        .timer(488ms)
        .extend(1000ms)
        .extend_failed(ec, 500ms)
        .lost(ec)
        .never_wakes()
        .then([ec](const keep_alive_fsm& f) {
          EXPECT_EQ(f.reason(), ec);
          EXPECT_EQ(describe(f.deadline()), describe(at(deadline)));
        })
        .timer(loss_at)
        .none()
        .run();
  }
}

// No quorum this time: try again after retry_interval while an attempt can still end before the
// loss point; once it cannot, say so at once rather than at the loss point.
TEST(keep_alive_fsm, quorum_unavailable_is_retried_while_an_attempt_can_end_in_time) {
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extend_failed(redlock::error::quorum_unavailable, 500ms)
      .none()
      .wakes(600ms)
      .then([](const keep_alive_fsm& f) {
        EXPECT_FALSE(f.lost());
        EXPECT_FALSE(f.reason());  // not lost yet
      })
      .timer(599ms)
      .none()
      .timer(600ms)
      .extend(1000ms)
      .extend_failed(redlock::error::quorum_unavailable, 737ms)  // 837 + 100 < 938
      .none()
      .wakes(837ms)
      .timer(837ms)
      .extend(1000ms)
      .extend_failed(redlock::error::quorum_unavailable, 838ms)  // 938 + 100 >= 938
      .lost(redlock::error::quorum_unavailable)
      .run();
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extend_failed(redlock::error::quorum_unavailable, 738ms)  // 838 + 100 == 938: too late
      .lost(redlock::error::quorum_unavailable)
      .run();
  // Any other failure is treated alike (the extension's outcome was not a clean "no").
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extend_failed(redlock::error::connection_lost, 500ms)
      .none()
      .wakes(600ms)
      .run();
}

TEST(keep_alive_fsm, a_success_after_failures_clears_the_pending_reason) {
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extend_failed(redlock::error::quorum_unavailable, 500ms)
      .timer(600ms)
      .extend(1000ms)
      .extended(1588ms, 610ms)
      .wakes(1088ms)
      .timer(1088ms)
      .extend(1000ms)
      .timer(1538ms)
      .lost(redlock::error::validity_expired)  // the hang, not the old failure
      .run();
}

// The loss is declared at deadline - margin whatever an extension in progress is doing.
TEST(keep_alive_fsm, a_hanging_extension_does_not_delay_the_loss) {
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .wakes(loss_at)
      .timer(loss_at - 1us)
      .none()
      .timer(loss_at)
      .lost(redlock::error::validity_expired)
      .extended(1900ms, 950ms)
      .none()  // too late: the holder was told
      .then([](const keep_alive_fsm& f) {
        EXPECT_TRUE(f.lost());
        EXPECT_EQ(describe(f.deadline()), describe(at(deadline)));
        EXPECT_EQ(f.reason(), redlock::error::validity_expired);
      })
      .run();
  // After a failed attempt, the loss names that failure.
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extend_failed(redlock::error::quorum_unavailable, 500ms)
      .timer(600ms)
      .extend(1000ms)
      .wakes(loss_at)
      .timer(loss_at)
      .lost(redlock::error::quorum_unavailable)
      .run();
}

TEST(keep_alive_fsm, an_aborted_extension_is_not_a_loss) {
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extend_failed(boost::asio::error::operation_aborted, 500ms)
      .none()
      .then([](const keep_alive_fsm& f) {
        EXPECT_FALSE(f.lost());
        EXPECT_FALSE(f.extending());
        EXPECT_EQ(describe(f.deadline()), describe(at(deadline)));
        EXPECT_EQ(f.extensions(), 0u);
      })
      .timer(loss_at)
      .lost(redlock::error::validity_expired)
      .run();
}

TEST(keep_alive_fsm, the_end_of_an_extension_nobody_asked_for_is_ignored) {
  keep_script{}
      .keep(opts(), 0ms)
      .extended(5s, 10ms)
      .none()
      .wakes(488ms)
      .then([](const keep_alive_fsm& f) {
        EXPECT_EQ(describe(f.deadline()), describe(at(deadline)));
        EXPECT_EQ(f.extensions(), 0u);
      })
      .extend_failed(redlock::error::not_owner, 20ms)
      .none()
      .then([](const keep_alive_fsm& f) { EXPECT_FALSE(f.lost()); })
      .run();
}

// ---------------------------------------------------------------------------------------------
// Caps

TEST(keep_alive_fsm, max_extensions_stops_extending_and_the_loss_says_extension_limit) {
  keep_script{}
      .keep(opts(1), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extended(1488ms, 500ms)
      .wakes(988ms)
      .timer(988ms)
      .none()  // capped: no extension
      .wakes(1438ms)
      .then([](const keep_alive_fsm& f) {
        EXPECT_TRUE(f.capped());
        EXPECT_FALSE(f.keeping());
        EXPECT_FALSE(f.lost());
        EXPECT_FALSE(f.reason());
      })
      .timer(1200ms)
      .none()
      .timer(1438ms)
      .lost(redlock::error::extension_limit)
      .run();
}

// max_hold: no extension may reach past keep() + max_hold (the extension would last until about
// now + ttl).
TEST(keep_alive_fsm, max_hold_stops_extending_and_the_loss_says_extension_limit) {
  keep_script{}
      .keep(opts(0, 1500ms), 0ms)
      .timer(488ms)
      .extend(1000ms)  // 488 + 1000 <= 1500
      .extended(1476ms, 500ms)
      .wakes(976ms)
      .timer(976ms)
      .none()  // 976 + 1000 > 1500
      .wakes(1426ms)
      .then([](const keep_alive_fsm& f) { EXPECT_TRUE(f.capped()); })
      .timer(1426ms)
      .lost(redlock::error::extension_limit)
      .run();
  // The boundary: an extension ending exactly at keep() + max_hold is allowed.
  keep_script{}.keep(opts(0, 1488ms), 0ms).timer(488ms).extend(1000ms).run();
  keep_script{}.keep(opts(0, 1487ms), 0ms).timer(488ms).none().wakes(loss_at).run();
}

TEST(keep_alive_fsm, zero_caps_mean_no_limit) {
  keep_script s;
  s.keep(opts(0, 0ms), 0ms);
  clock::duration d = deadline;
  for (int i = 0; i < 20; ++i) {
    const clock::duration renew = d - 500ms;
    s.timer(renew).extend(1000ms).extended(renew + 988ms, renew);
    d = renew + 988ms;
  }
  const auto f = s.run();
  EXPECT_EQ(f.extensions(), 20u);
  EXPECT_FALSE(f.capped());
}

// keep() again replaces the options, but the hold counts from the first keep().
TEST(keep_alive_fsm, caps_count_from_the_first_keep) {
  keep_script{}
      .keep(opts(0, 1600ms), 0ms)
      .keep(opts(0, 1600ms), 400ms)
      .timer(488ms)
      .extend(1000ms)
      .extended(1476ms, 500ms)
      .timer(976ms)
      .none()  // 976 + 1000 > 0 + 1600 (from 400 it would still fit)
      .then([](const keep_alive_fsm& f) { EXPECT_TRUE(f.capped()); })
      .run();
}

// The caps count from the first keep(): once max_hold stopped the keep-alive, calling keep()
// again (say, to change the retry interval) does not restart max_hold or lift the cap, so a
// holder cannot outlast max_hold.
TEST(keep_alive_fsm, keep_after_a_cap_still_counts_the_hold_from_the_first_keep) {
  keep_script{}
      .keep(opts(0, 1500ms), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .extended(1476ms, 500ms)
      .timer(976ms)
      .none()
      .then([](const keep_alive_fsm& f) { EXPECT_TRUE(f.capped()); })
      .keep(opts(0, 1500ms), 1000ms)
      .timer(1000ms)
      .none()  // 1000 + 1000 > 0 + 1500: still capped
      .timer(1426ms)
      .lost(redlock::error::extension_limit)
      .run();
}

// ---------------------------------------------------------------------------------------------
// Manual extensions and stop

TEST(keep_alive_fsm, a_manual_extension_moves_the_renewal_and_counts) {
  keep_script{}
      .keep(opts(), 0ms)
      .wakes(488ms)
      .moved(1200ms)
      .wakes(700ms)
      .then([](const keep_alive_fsm& f) {
        EXPECT_EQ(f.extensions(), 1u);
        EXPECT_EQ(describe(f.deadline()), describe(at(1200ms)));
      })
      .timer(488ms)
      .none()
      .timer(700ms)
      .extend(1000ms)
      .run();
  keep_script{}
      .keep(opts(1), 0ms)
      .moved(1200ms)
      .timer(700ms)
      .none()  // the manual extension used up the cap
      .then([](const keep_alive_fsm& f) { EXPECT_TRUE(f.capped()); })
      .timer(1150ms)
      .lost(redlock::error::extension_limit)
      .run();
  // Watching only: the loss point moves.
  keep_script{}
      .moved(1200ms)
      .wakes(1150ms)
      .timer(loss_at)
      .none()
      .timer(1150ms)
      .lost(redlock::error::validity_expired)
      .run();
}

TEST(keep_alive_fsm, stop_ends_everything) {
  keep_script{}
      .keep(opts(), 0ms)
      .timer(488ms)
      .extend(1000ms)
      .stop()
      .never_wakes()
      .extended(1476ms, 500ms)
      .none()
      .timer(loss_at)
      .none()
      .timer(5s)
      .none()
      .then([](const keep_alive_fsm& f) {
        EXPECT_TRUE(f.finished());
        EXPECT_FALSE(f.lost());
        EXPECT_FALSE(f.reason());
        EXPECT_EQ(describe(f.deadline()), describe(at(deadline)));
      })
      .run();
}

TEST(keep_alive_fsm, keep_after_the_loss_does_nothing) {
  keep_script{}
      .timer(loss_at)
      .lost(redlock::error::validity_expired)
      .keep(opts(), 950ms)
      .never_wakes()
      .then([](const keep_alive_fsm& f) { EXPECT_FALSE(f.keeping()); })
      .timer(960ms)
      .none()
      .run();
}

// ---------------------------------------------------------------------------------------------
// What to tell the holder (lock events)

using notice = keep_alive_action::notice;

TEST(keep_alive_fsm, notices_say_extended_extend_failed_and_lost) {
  keep_alive_fsm f{ttl, at(deadline), 100ms};
  f.keep(opts(), at(0ms));
  EXPECT_EQ(f.on_timer(at(488ms)).what, keep_alive_action::type::extend);
  auto a = f.on_extended({}, at(1476ms), at(500ms));
  EXPECT_EQ(a.what, keep_alive_action::type::none);
  EXPECT_EQ(a.tell, notice::extended);
  EXPECT_FALSE(a.cause);

  EXPECT_EQ(f.on_timer(at(976ms)).what, keep_alive_action::type::extend);
  a = f.on_extended(redlock::error::quorum_unavailable, {}, at(1076ms));
  EXPECT_EQ(a.what, keep_alive_action::type::none);  // a retry follows: a warning, not the loss
  EXPECT_EQ(a.tell, notice::extend_failed);
  EXPECT_EQ(a.cause, redlock::error::quorum_unavailable);
  EXPECT_FALSE(f.lost());

  EXPECT_EQ(f.on_timer(at(1176ms)).what, keep_alive_action::type::extend);
  a = f.on_extended(redlock::error::not_owner, {}, at(1200ms));
  EXPECT_EQ(a.what, keep_alive_action::type::lost);
  EXPECT_EQ(a.tell, notice::lost);
  EXPECT_EQ(a.reason, redlock::error::not_owner);
}

// A cancelled extension tells nothing; the loss by the clock is told as lost.
TEST(keep_alive_fsm, an_aborted_extension_tells_nothing_and_the_clock_tells_lost) {
  keep_alive_fsm f{ttl, at(deadline), 100ms};
  f.keep(opts(), at(0ms));
  (void)f.on_timer(at(488ms));
  const auto a = f.on_extended(boost::asio::error::operation_aborted, {}, at(490ms));
  EXPECT_EQ(a.tell, notice::none);
  const auto b = f.on_timer(at(loss_at));
  EXPECT_EQ(b.what, keep_alive_action::type::lost);
  EXPECT_EQ(b.tell, notice::lost);
}

// The loss by a cap says which cap, for the loss description.
TEST(keep_alive_fsm, cap_says_which_cap) {
  keep_alive_fsm by_count{ttl, at(deadline), 100ms};
  by_count.keep(opts(1), at(0ms));
  (void)by_count.on_timer(at(488ms));
  (void)by_count.on_extended({}, at(1488ms), at(500ms));
  (void)by_count.on_timer(at(988ms));
  EXPECT_EQ(by_count.cap(), redlock::core::keep_alive_cap::max_extensions);

  keep_alive_fsm by_time{ttl, at(deadline), 100ms};
  EXPECT_EQ(by_time.cap(), redlock::core::keep_alive_cap::none);
  by_time.keep(opts(0, 1200ms), at(0ms));
  (void)by_time.on_timer(at(488ms));  // 488 + 1000 > 1200
  EXPECT_EQ(by_time.cap(), redlock::core::keep_alive_cap::max_hold);
  EXPECT_EQ(by_time.on_timer(at(loss_at)).reason, redlock::error::extension_limit);
}

}  // namespace
