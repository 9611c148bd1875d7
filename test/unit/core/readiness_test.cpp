// SPDX-License-Identifier: BSL-1.0
// Which failures no retry can mend (core::is_hopeless), the readiness of a quorum of masters
// (core::readiness), and an acquisition that stops retrying when no retry can help
// (lock_fsm with the connections' causes).

#include "transcript.hpp"
#include <redlock/core/extend_fsm.hpp>
#include <redlock/core/lock_fsm.hpp>
#include <redlock/core/readiness.hpp>
#include <redlock/core/unlock_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace {

using namespace redlock::test;
using boost::system::error_code;
using redlock::error;
using redlock::master_result;
using redlock::master_status;
using redlock::core::is_hopeless;
using redlock::core::lock_action;
using redlock::core::lock_fsm;
using redlock::core::lock_rules;
using redlock::core::quorum_possible;
using redlock::core::readiness;
namespace asio_error = boost::asio::error;

const error_code auth = error::auth_failed;
const error_code no_host = asio_error::host_not_found;
const error_code refused = asio_error::connection_refused;

// Credentials, configuration and names that do not exist are hopeless; everything a network, a
// restarting server or a resolver having a bad moment does is not. Catches a rule that gives up on
// a refused connection (a master restarting) or on a temporary DNS failure.
TEST(is_hopeless, only_credentials_configuration_and_unknown_names) {
  EXPECT_TRUE(is_hopeless(auth));
  EXPECT_TRUE(is_hopeless(error::invalid_config));
  EXPECT_TRUE(is_hopeless(no_host));
  EXPECT_FALSE(is_hopeless(asio_error::host_not_found_try_again));
  EXPECT_FALSE(is_hopeless(refused));
  EXPECT_FALSE(is_hopeless(error::connect_timeout));
  EXPECT_FALSE(is_hopeless(error::handshake_failed));  // e.g. LOADING: the server will be ready
  EXPECT_FALSE(is_hopeless(error::connection_lost));
  EXPECT_FALSE(is_hopeless(error::not_connected));
  EXPECT_FALSE(is_hopeless(error_code{}));
  // TLS: a certificate or a port that speaks the other protocol needs a change; a refusal that may
  // be a reset, or a handshake that failed otherwise, may pass.
  EXPECT_TRUE(is_hopeless(error::tls_certificate_untrusted));
  EXPECT_TRUE(is_hopeless(error::tls_certificate_expired));
  EXPECT_TRUE(is_hopeless(error::tls_name_mismatch));
  EXPECT_TRUE(is_hopeless(error::tls_not_offered));
  EXPECT_TRUE(is_hopeless(error::tls_expected));
  EXPECT_FALSE(is_hopeless(error::tls_refused));
  EXPECT_FALSE(is_hopeless(error::tls_handshake_failed));
  // A master whose script digests are not ours is not used again.
  EXPECT_TRUE(is_hopeless(error::script_mismatch));
}

master_result unreachable(error_code cause) {
  master_result r;
  r.status = master_status::unreachable;
  r.error = cause;
  return r;
}
master_result with(master_status s) {
  master_result r;
  r.status = s;
  return r;
}

// The quorum is out of reach only when the hopeless masters alone leave too few others. Catches a
// count that includes masters that are merely down (they may come back) or taken.
TEST(quorum_possible, counts_only_hopeless_unreachable_masters) {
  EXPECT_FALSE(quorum_possible({unreachable(auth), unreachable(no_host), with(master_status::granted)}, 2));
  EXPECT_TRUE(quorum_possible({unreachable(auth), unreachable(refused), with(master_status::granted)}, 2));
  EXPECT_TRUE(quorum_possible({unreachable(auth), with(master_status::taken), with(master_status::taken)}, 2));
  EXPECT_TRUE(
      quorum_possible({unreachable(error::not_connected), unreachable(refused), with(master_status::timeout)}, 2));
  // A semaphore needing every master: one hopeless master is enough.
  EXPECT_FALSE(quorum_possible({unreachable(auth), with(master_status::granted), with(master_status::granted)}, 3));
  // A server error with an auth-like text is an answer, not an unreachable master.
  master_result answered = with(master_status::server_error);
  answered.error = error::server_error;
  EXPECT_TRUE(quorum_possible({answered, answered, answered}, 2));
}

// Ready at a majority up; impossible only once the hopeless ones leave too few; a master that
// comes up again forgets its cause. Catches "ready" at any connection, "impossible" on network
// failures, and a cause that outlives the master's recovery.
TEST(readiness, majority_up_or_hopeless_majority) {
  readiness r{3};
  EXPECT_EQ(r.needed(), 2u);
  EXPECT_FALSE(r.ready());
  EXPECT_FALSE(r.impossible());
  r.up(0);
  EXPECT_FALSE(r.ready());
  r.failed(1, refused);
  EXPECT_FALSE(r.impossible());  // it may come up
  r.up(2);
  EXPECT_TRUE(r.ready());
  EXPECT_FALSE(r.impossible());

  readiness bad{3};
  bad.failed(0, auth);
  EXPECT_FALSE(bad.impossible());
  bad.up(2);
  bad.failed(1, no_host);
  EXPECT_TRUE(bad.impossible());
  EXPECT_EQ(bad.hopeless_count(), 2u);
  EXPECT_EQ(bad.cause(0), auth);
  bad.up(0);  // the password was fixed on the server
  EXPECT_TRUE(bad.ready());
  EXPECT_FALSE(bad.impossible());
  EXPECT_FALSE(bad.cause(0));

  readiness all{3, 3};  // a quorum of every master
  all.up(0);
  all.up(1);
  EXPECT_FALSE(all.ready());
  all.failed(2, auth);
  EXPECT_TRUE(all.impossible());
}

lock_rules rules() {
  lock_rules r;
  r.masters = 3;
  r.ttl = 10s;
  r.request_timeout = 250ms;
  r.retry = {0, 2000ms, 50ms, 100ms};
  return r;
}

const error_code not_connected = error::not_connected;

// Two masters refuse the password: the first round completes at once with quorum_unavailable
// (no sleep), and their results hold the real cause. Catches the old behaviour (retrying for the
// whole 2 s budget, every unreachable master saying not_connected).
TEST(lock_fsm_hopeless, wrong_password_on_a_majority_completes_at_once) {
  lock_fsm f{rules()};
  EXPECT_EQ(f.start(at(0ms)).what, lock_action::type::acquire);
  EXPECT_EQ(f.on_reply(f.round(), 0, not_connected, no_reply(), at(1ms), 0.5, auth).what, lock_action::type::wait);
  const auto a = f.on_reply(f.round(), 1, not_connected, no_reply(), at(1ms), 0.5, no_host);
  EXPECT_EQ(a.what, lock_action::type::complete);
  EXPECT_EQ(a.ec, error::quorum_unavailable);
  EXPECT_EQ(f.attempts(), 1u);
  const auto& res = f.table().results();
  EXPECT_EQ(res[0].status, master_status::unreachable);
  EXPECT_EQ(res[0].error, auth);
  EXPECT_EQ(res[1].error, no_host);
}

// The same with masters merely down (refused): it retries as before. Catches a rule that stops
// on any unreachable master.
TEST(lock_fsm_hopeless, masters_down_for_network_reasons_are_retried) {
  lock_fsm f{rules()};
  (void)f.start(at(0ms));
  (void)f.on_reply(f.round(), 0, not_connected, no_reply(), at(1ms), 0.5, refused);
  const auto a = f.on_reply(f.round(), 1, not_connected, no_reply(), at(1ms), 0.5, auth);
  EXPECT_EQ(a.what, lock_action::type::sleep);
  EXPECT_EQ(f.table().results()[0].error, refused);
}

// Without a known cause the result keeps not_connected; a cause never replaces a real answer's
// error. Catches a cause written over a timeout or a lost connection.
TEST(lock_fsm_hopeless, cause_only_for_unreachable_masters) {
  lock_fsm f{rules()};
  (void)f.start(at(0ms));
  (void)f.on_reply(f.round(), 0, not_connected, no_reply(), at(1ms), 0.5, {});
  (void)f.on_reply(f.round(), 1, error::master_timeout, no_reply(), at(1ms), 0.5, auth);
  EXPECT_EQ(f.table().results()[0].error, error::not_connected);
  EXPECT_EQ(f.table().results()[1].status, master_status::timeout);
  EXPECT_EQ(f.table().results()[1].error, error::master_timeout);
}

// A release or an extension names the cause of an unreachable master too (and only of one that
// was unreachable). Catches the cause given to acquisitions only, as `not_connected` elsewhere.
TEST(unlock_and_extend, keep_the_cause_of_unreachable_masters) {
  redlock::core::unlock_fsm u{3, std::chrono::milliseconds{250}, true};
  (void)u.start(at(0ms));
  (void)u.on_reply(0, not_connected, no_reply(), at(1ms), auth);
  (void)u.on_reply(1, error::master_timeout, no_reply(), at(1ms), auth);
  (void)u.on_reply(2, not_connected, no_reply(), at(1ms));
  EXPECT_EQ(u.table().results()[0].status, master_status::unreachable);
  EXPECT_EQ(u.table().results()[0].error, error::auth_failed);
  EXPECT_EQ(u.table().results()[1].error, error::master_timeout);
  EXPECT_EQ(u.table().results()[2].error, error::not_connected);

  redlock::core::extend_fsm e{3, std::chrono::milliseconds{10000}, std::chrono::milliseconds{250},
                              redlock::core::drift_policy{}, at(10000ms)};
  (void)e.start(at(0ms));
  (void)e.on_reply(0, not_connected, no_reply(), at(1ms), no_host);
  (void)e.on_reply(1, error::master_timeout, no_reply(), at(1ms), no_host);
  EXPECT_EQ(e.table().results()[0].status, master_status::unreachable);
  EXPECT_EQ(e.table().results()[0].error, asio_error::host_not_found);
  EXPECT_EQ(e.table().results()[1].error, error::master_timeout);
}

// Others hold the lock and the rest refuse the password: no round can ever win, so it stops with
// quorum_unavailable rather than waiting for the holder. The first round is decided (not
// acquired) before the second refusal is known; the next one sees both. Catches a rule tied to
// the round's error being quorum_unavailable.
TEST(lock_fsm_hopeless, taken_and_hopeless_stops_too) {
  lock_fsm f{rules()};
  (void)f.start(at(0ms));
  (void)f.on_reply(f.round(), 0, {}, nil_reply(), at(1ms), 0.5);
  EXPECT_EQ(f.on_reply(f.round(), 1, not_connected, no_reply(), at(1ms), 0.5, auth).what, lock_action::type::sleep);
  EXPECT_EQ(f.on_timer(at(100ms)).what, lock_action::type::acquire);
  (void)f.on_reply(f.round(), 1, not_connected, no_reply(), at(101ms), 0.5, auth);
  const auto a = f.on_reply(f.round(), 2, not_connected, no_reply(), at(101ms), 0.5, auth);
  EXPECT_EQ(a.what, lock_action::type::complete);
  EXPECT_EQ(a.ec, error::quorum_unavailable);
  EXPECT_EQ(f.attempts(), 2u);
}

// One hopeless master of three: the other two can still make it; a lock granted by them succeeds.
TEST(lock_fsm_hopeless, one_hopeless_of_three_still_locks) {
  lock_fsm f{rules()};
  (void)f.start(at(0ms));
  (void)f.on_reply(f.round(), 0, not_connected, no_reply(), at(1ms), 0.5, auth);
  (void)f.on_reply(f.round(), 1, {}, ok_reply(), at(2ms), 0.5);
  const auto a = f.on_reply(f.round(), 2, {}, ok_reply(), at(2ms), 0.5);
  EXPECT_EQ(a.what, lock_action::type::complete);
  EXPECT_FALSE(a.ec);
  EXPECT_EQ(f.table().results()[0].error, auth);
}

}  // namespace
