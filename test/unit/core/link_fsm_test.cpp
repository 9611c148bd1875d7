// SPDX-License-Identifier: BSL-1.0
// Transcripts of the connection's life (core::link_fsm): each test walks the machine through one
// story (connect, TLS, handshake, up, stall, late replies, close, back-off) and asserts every step,
// every order and what the I/O layer is told to report.

#include <redlock/core/link_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

namespace {

using boost::system::error_code;
using redlock::connection_state;
using redlock::error;
using redlock::log_level;
using redlock::core::failure_words;
using redlock::core::link_fsm;
using redlock::core::link_order;
using redlock::core::link_params;
using redlock::core::link_step;
using kind = link_step::kind;
using namespace std::chrono_literals;

const error_code refused = boost::asio::error::connection_refused;
const error_code aborted = boost::asio::error::operation_aborted;
const error_code reset = boost::asio::error::connection_reset;

// Back-off without jitter: delays are initial * 2^attempt, capped.
link_params plain(bool probe = true) {
  return {.tls = false, .probe_when_suspect = probe, .reconnect = {100ms, 800ms, 0.0}};
}
link_params tls() { return {.tls = true, .probe_when_suspect = true, .reconnect = {100ms, 800ms, 0.0}}; }

// Drives a fresh machine to `up`.
link_step bring_up(link_fsm& m) {
  EXPECT_TRUE(m.start());
  auto s = m.next_attempt();
  EXPECT_EQ(s.type, kind::connect);
  s = m.on_connected({}, 0.5);
  if (s.type == kind::tls) s = m.on_tls_done({}, 0.5);
  EXPECT_EQ(s.type, kind::handshake);
  s = m.on_handshake_done({}, false, 0.5);
  EXPECT_EQ(s.type, kind::serve);
  EXPECT_EQ(m.state(), connection_state::up);
  return s;
}

TEST(link_fsm, connects_serves_and_reconnects_after_the_node_closes) {
  link_fsm m{plain()};
  EXPECT_EQ(m.state(), connection_state::idle);
  EXPECT_FALSE(m.accepting());
  ASSERT_TRUE(m.start());
  EXPECT_FALSE(m.start()) << "a second run is refused";
  auto s = m.next_attempt();
  EXPECT_EQ(s.type, kind::connect);
  EXPECT_FALSE(s.race) << "a node that never failed is connected to plainly";
  EXPECT_EQ(m.attempt_id(), 1u);
  EXPECT_EQ(m.state(), connection_state::connecting);
  EXPECT_TRUE(m.accepting()) << "the first connect is not in doubt: requests queue";
  s = m.on_connected({}, 0.5);
  EXPECT_EQ(s.type, kind::handshake) << "no TLS step without TLS";
  s = m.on_handshake_done({}, false, 0.5);
  EXPECT_EQ(s.type, kind::serve);
  EXPECT_TRUE(s.first_up);
  EXPECT_TRUE(m.writable());
  EXPECT_TRUE(m.watching_stalls());

  s = m.on_stream_ended(boost::asio::error::eof, 0.5);
  ASSERT_EQ(s.type, kind::back_off);
  EXPECT_EQ(m.state(), connection_state::down);
  EXPECT_FALSE(m.writable());
  EXPECT_TRUE(s.failure.was_up);
  EXPECT_EQ(s.failure.cause, boost::asio::error::eof);
  EXPECT_EQ(s.failure.written_ec, error::connection_lost) << "written requests: outcome unknown";
  EXPECT_EQ(s.failure.words, failure_words::down);
  EXPECT_EQ(s.failure.level, log_level::warning);
  EXPECT_EQ(s.failure.delay, 100ms);
  EXPECT_FALSE(m.suspect()) << "a node that closed was reachable a moment ago";

  s = m.on_backoff_done();
  EXPECT_EQ(s.type, kind::connect);
  EXPECT_FALSE(s.race);
  EXPECT_TRUE(m.accepting()) << "requests queue during a reconnect whose outcome is not in doubt";
  EXPECT_EQ(m.attempt_id(), 2u);
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done({}, false, 0.5);
  EXPECT_EQ(s.type, kind::serve);
  EXPECT_FALSE(s.first_up);
  EXPECT_EQ(s.failure.failed_attempts, 0u);
}

TEST(link_fsm, failed_attempts_make_the_node_suspect_back_off_exponentially_and_log_once) {
  link_fsm m{plain()};
  ASSERT_TRUE(m.start());
  auto s = m.next_attempt();
  s = m.on_connected(refused, 0.5);
  ASSERT_EQ(s.type, kind::back_off);
  EXPECT_FALSE(s.failure.was_up);
  EXPECT_EQ(s.failure.cause, refused);
  EXPECT_EQ(s.failure.written_ec, error::not_connected);
  EXPECT_EQ(s.failure.words, failure_words::connect_failed);
  EXPECT_EQ(s.failure.level, log_level::warning);
  EXPECT_EQ(s.failure.delay, 100ms);
  EXPECT_EQ(s.failure.failed_attempts, 1u);
  EXPECT_TRUE(m.suspect());
  EXPECT_FALSE(m.accepting()) << "requests fail fast while the node is suspect";

  s = m.on_backoff_done();
  EXPECT_TRUE(s.race) << "a suspect node is connected to by a race of probes";
  EXPECT_FALSE(m.accepting()) << "still suspect while connecting again";
  s = m.on_connected(refused, 0.5);
  EXPECT_EQ(s.failure.level, log_level::debug) << "the same failure again is not news";
  EXPECT_EQ(s.failure.delay, 200ms);
  EXPECT_EQ(s.failure.failed_attempts, 2u);
  s = m.on_backoff_done();
  s = m.on_connected(refused, 0.5);
  EXPECT_EQ(s.failure.delay, 400ms);
  s = m.on_backoff_done();
  s = m.on_connected(refused, 0.5);
  EXPECT_EQ(s.failure.delay, 800ms);
  s = m.on_backoff_done();
  s = m.on_connected(refused, 0.5);
  EXPECT_EQ(s.failure.delay, 800ms) << "capped";
  s = m.on_backoff_done();
  s = m.on_connected(boost::asio::error::host_unreachable, 0.5);
  EXPECT_EQ(s.failure.level, log_level::warning) << "a different failure is news";

  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done({}, false, 0.5);
  EXPECT_EQ(s.type, kind::serve);
  EXPECT_TRUE(s.first_up) << "it never came up before";
  EXPECT_EQ(s.failure.failed_attempts, 6u);
  EXPECT_FALSE(m.suspect());
  EXPECT_TRUE(m.accepting());
  s = m.on_stream_ended(reset, 0.5);
  EXPECT_EQ(s.failure.delay, 100ms) << "the back-off starts again after a success";
  s = m.on_backoff_done();
  s = m.on_connected(refused, 0.5);
  EXPECT_EQ(s.failure.level, log_level::debug) << "after a disconnect (already logged) a failed attempt is quiet";
}

TEST(link_fsm, the_probe_race_is_off_when_not_configured) {
  link_fsm m{plain(false)};
  ASSERT_TRUE(m.start());
  auto s = m.next_attempt();
  s = m.on_connected(refused, 0.5);
  s = m.on_backoff_done();
  EXPECT_EQ(s.type, kind::connect);
  EXPECT_FALSE(s.race);
}

TEST(link_fsm, an_attempt_that_times_out_fails_with_connect_timeout_and_retries_soon) {
  link_fsm m{plain()};
  ASSERT_TRUE(m.start());
  auto s = m.next_attempt();
  const auto attempt = m.attempt_id();
  EXPECT_EQ(m.on_connect_timeout(attempt + 1), link_order::none) << "another attempt's timer";
  EXPECT_EQ(m.on_connect_timeout(attempt), link_order::close_stream);
  s = m.on_connected(aborted, 0.5);
  ASSERT_EQ(s.type, kind::back_off);
  EXPECT_EQ(s.failure.cause, error::connect_timeout);
  EXPECT_EQ(s.failure.delay, 100ms);
  s = m.on_backoff_done();
  EXPECT_EQ(m.on_connect_timeout(attempt), link_order::none) << "a timer of the last attempt fired late";
  s = m.on_connected({}, 0.5);
  EXPECT_EQ(m.on_connect_timeout(m.attempt_id()), link_order::close_stream) << "the handshake is bounded too";
  s = m.on_handshake_done(aborted, false, 0.5);
  EXPECT_EQ(s.failure.cause, error::connect_timeout);
  EXPECT_EQ(s.failure.delay, 100ms) << "nothing answered: the delay does not grow";
  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done({}, false, 0.5);
  ASSERT_EQ(s.type, kind::serve);
  EXPECT_EQ(m.on_connect_timeout(m.attempt_id()), link_order::none) << "up: the attempt is over";
}

// The timer closed the stream, but the step's success was already on its way (both were queued on
// the strand, the timer's first): the attempt timed out all the same, and the link does not come
// up on a closed socket.
TEST(link_fsm, a_success_that_lost_the_race_with_the_connect_timeout_is_a_timeout) {
  for (int at = 0; at < 3; ++at) {
    link_fsm m{tls()};
    ASSERT_TRUE(m.start());
    auto s = m.next_attempt();
    if (at > 0) s = m.on_connected({}, 0.5);
    if (at > 1) s = m.on_tls_done({}, 0.5);
    EXPECT_EQ(m.on_connect_timeout(m.attempt_id()), link_order::close_stream);
    s = at == 0 ? m.on_connected({}, 0.5) : at == 1 ? m.on_tls_done({}, 0.5) : m.on_handshake_done({}, false, 0.5);
    ASSERT_EQ(s.type, kind::back_off) << "step " << at;
    EXPECT_EQ(s.failure.cause, error::connect_timeout) << "step " << at;
    EXPECT_EQ(m.state(), connection_state::down);
    EXPECT_TRUE(m.suspect());
    EXPECT_FALSE(m.accepting_votes());
  }
}

// The loop can end without a finish step (an exception escaped it): the machine is closed all the
// same, and nothing is accepted any more.
TEST(link_fsm, the_end_of_the_loop_closes_the_machine) {
  link_fsm m{plain()};
  bring_up(m);
  ASSERT_TRUE(m.accepting_votes());
  m.on_run_ended();
  EXPECT_EQ(m.state(), connection_state::closed);
  EXPECT_TRUE(m.closing());
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.accepting_votes());
  EXPECT_FALSE(m.writable());
  EXPECT_EQ(m.on_close(), link_order::none);
}

TEST(link_fsm, tls_failures_are_errors_and_a_hang_up_after_the_handshake_is_a_refused_certificate) {
  link_fsm m{tls()};
  ASSERT_TRUE(m.start());
  auto s = m.next_attempt();
  s = m.on_connected({}, 0.5);
  ASSERT_EQ(s.type, kind::tls);
  s = m.on_tls_done(make_error_code(error::tls_certificate_untrusted), 0.5);
  ASSERT_EQ(s.type, kind::back_off);
  EXPECT_EQ(s.failure.words, failure_words::tls_failed);
  EXPECT_EQ(s.failure.level, log_level::error) << "no retry mends a certificate: say it loudly";

  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_tls_done({}, 0.5);
  ASSERT_EQ(s.type, kind::handshake);
  s = m.on_handshake_done(reset, true, 0.5);
  EXPECT_EQ(s.failure.cause, error::tls_refused);
  EXPECT_FALSE(s.failure.text.empty()) << "the text says a client certificate is wanted";
  EXPECT_EQ(s.failure.level, log_level::error);

  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_tls_done({}, 0.5);
  EXPECT_EQ(m.on_connect_timeout(m.attempt_id()), link_order::close_stream);
  s = m.on_handshake_done(reset, true, 0.5);
  EXPECT_EQ(s.failure.cause, error::connect_timeout) << "our own timeout closed it, not the node";
  EXPECT_TRUE(s.failure.text.empty());

  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  EXPECT_EQ(m.on_connect_timeout(m.attempt_id()), link_order::close_stream);
  s = m.on_tls_done(make_error_code(error::tls_not_offered), 0.5);
  EXPECT_EQ(s.failure.cause, error::tls_not_offered) << "the plain-port probe's finding outlives the timeout";
}

TEST(link_fsm, refused_credentials_and_handshakes_are_worded_apart) {
  link_fsm m{plain()};
  ASSERT_TRUE(m.start());
  auto s = m.next_attempt();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done(make_error_code(error::auth_failed), false, 0.5);
  EXPECT_EQ(s.failure.words, failure_words::auth_refused);
  EXPECT_EQ(s.failure.level, log_level::error);
  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done(make_error_code(error::auth_failed), false, 0.5);
  EXPECT_EQ(s.failure.level, log_level::debug);
  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done(make_error_code(error::handshake_failed), false, 0.5);
  EXPECT_EQ(s.failure.words, failure_words::hello_refused);
  EXPECT_EQ(s.failure.level, log_level::error);
  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done(reset, true, 0.5);
  EXPECT_EQ(s.failure.cause, reset) << "without TLS a hang-up is only a hang-up";
}

TEST(link_fsm, a_stall_takes_the_connection_down_at_once_and_makes_the_node_suspect) {
  link_fsm m{plain()};
  bring_up(m);
  EXPECT_EQ(m.on_stall(), link_order::abort_stream);
  EXPECT_EQ(m.state(), connection_state::down) << "down before the serve step has unwound";
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.writable());
  EXPECT_FALSE(m.watching_stalls());
  EXPECT_EQ(m.on_stall(), link_order::none) << "once";
  auto s = m.on_stream_ended(aborted, 0.5);
  ASSERT_EQ(s.type, kind::back_off);
  EXPECT_EQ(s.failure.cause, error::connection_stalled);
  EXPECT_EQ(s.failure.written_ec, error::connection_lost);
  EXPECT_EQ(s.failure.delay, 100ms) << "nothing answered: retry soon";
  EXPECT_TRUE(m.suspect());
  s = m.on_backoff_done();
  EXPECT_TRUE(s.race);
  EXPECT_FALSE(m.accepting());
}

TEST(link_fsm, bad_bytes_fail_the_written_requests_with_the_streams_error) {
  link_fsm m{plain()};
  bring_up(m);
  const auto s = m.on_stream_ended(make_error_code(error::protocol_error), 0.5);
  EXPECT_EQ(s.failure.written_ec, error::protocol_error);
  EXPECT_EQ(s.failure.level, log_level::error);
  EXPECT_FALSE(m.suspect());
}

TEST(link_fsm, an_overdue_reply_stops_votes_but_not_shared_requests) {
  link_fsm m{plain()};
  EXPECT_FALSE(m.on_overdue(true)) << "only an established connection can be late";
  bring_up(m);
  EXPECT_TRUE(m.on_overdue(true));
  EXPECT_FALSE(m.on_overdue(true));
  EXPECT_TRUE(m.accepting()) << "one caller's timeout does not fail the others' requests";
  EXPECT_FALSE(m.accepting_votes()) << "a vote would only wait behind the late reply";
  EXPECT_TRUE(m.writable());
  EXPECT_TRUE(m.on_overdue(false));
  EXPECT_TRUE(m.accepting_votes());
  EXPECT_TRUE(m.on_overdue(true));
  auto s = m.on_stream_ended(reset, 0.5);
  s = m.on_backoff_done();
  s = m.on_connected({}, 0.5);
  s = m.on_handshake_done({}, false, 0.5);
  EXPECT_FALSE(m.overdue()) << "a new connection owes nothing";
  EXPECT_TRUE(m.accepting_votes());
}

TEST(link_fsm, close_ends_every_step_and_the_loop) {
  {
    link_fsm m{plain()};
    EXPECT_EQ(m.on_close(), link_order::complete_idle);
    EXPECT_EQ(m.state(), connection_state::closed);
    EXPECT_FALSE(m.start()) << "closed before it ran";
    EXPECT_EQ(m.on_close(), link_order::none);
  }
  {
    link_fsm m{plain()};
    ASSERT_TRUE(m.start());
    (void)m.next_attempt();
    EXPECT_EQ(m.on_close(), link_order::close_now);
    EXPECT_EQ(m.on_connected(aborted, 0.5).type, kind::finish);
    EXPECT_EQ(m.state(), connection_state::closed);
    EXPECT_FALSE(m.accepting());
  }
  {
    link_fsm m{plain()};
    ASSERT_TRUE(m.start());
    (void)m.next_attempt();
    (void)m.on_connected(refused, 0.5);
    EXPECT_EQ(m.on_close(), link_order::close_now);
    EXPECT_EQ(m.on_backoff_done().type, kind::finish) << "the back-off is cut short";
  }
  {
    link_fsm m{plain()};
    bring_up(m);
    EXPECT_EQ(m.on_stall(), link_order::abort_stream);
    EXPECT_EQ(m.on_close(), link_order::close_now);
    EXPECT_EQ(m.on_stream_ended(aborted, 0.5).type, kind::finish) << "closing wins over the stall";
    EXPECT_EQ(m.on_connect_timeout(m.attempt_id()), link_order::none);
  }
}

TEST(link_fsm, close_after_writes_flushes_while_up_and_closes_otherwise) {
  {
    link_fsm m{plain()};
    bring_up(m);
    EXPECT_FALSE(m.flushed(false, false)) << "not closing";
    EXPECT_EQ(m.on_close_after_writes(), link_order::flush);
    EXPECT_TRUE(m.closing_after_writes());
    EXPECT_TRUE(m.writable()) << "the queue is still written";
    EXPECT_FALSE(m.flushed(true, false));
    EXPECT_FALSE(m.flushed(false, true));
    EXPECT_TRUE(m.flushed(false, false));
    EXPECT_EQ(m.on_write_failed(), link_order::close_now) << "nothing left to flush";
    EXPECT_EQ(m.on_close_after_writes(), link_order::none);
  }
  {
    link_fsm m{plain()};
    ASSERT_TRUE(m.start());
    (void)m.next_attempt();
    EXPECT_EQ(m.on_close_after_writes(), link_order::close_now) << "nothing is written while connecting";
  }
  {
    link_fsm m{plain()};
    bring_up(m);
    EXPECT_EQ(m.on_write_failed(), link_order::close_stream) << "up: the connection is replaced";
    EXPECT_FALSE(m.closing());
  }
}

}  // namespace
