// SPDX-License-Identifier: BSL-1.0
#include <redlock/core/link_fsm.hpp>
#include <redlock/core/link_health.hpp>
#include <redlock/error.hpp>

#include <utility>

namespace redlock::core {

using boost::system::error_code;

namespace {

bool is_tls_error(const error_code& ec) noexcept {
  return ec.category() == error_category() && ec.value() >= static_cast<int>(error::tls_not_offered) &&
         ec.value() <= static_cast<int>(error::tls_handshake_failed);
}

}  // namespace

bool link_fsm::start() noexcept {
  if (phase_ != phase::idle || closing_) return false;
  phase_ = phase::connecting;
  return true;
}

link_step link_fsm::next_attempt() noexcept {
  if (closing_) return finish();
  phase_ = phase::connecting;
  step_ = step::socket;
  timed_out_ = false;
  ++attempt_id_;
  link_step s;
  s.type = link_step::kind::connect;
  s.race = suspect_ && params_.probe_when_suspect;
  return s;
}

link_step link_fsm::on_connected(error_code ec, double unit_random) noexcept {
  if (closing_) return finish();
  // A success that lost the race with the connect timeout is a timeout: the stream was closed.
  if (ec || timed_out_) return attempt_failed(ec, {}, unit_random);
  link_step s;
  if (params_.tls) {
    step_ = step::tls;
    s.type = link_step::kind::tls;
  } else {
    step_ = step::handshake;
    s.type = link_step::kind::handshake;
  }
  return s;
}

link_step link_fsm::on_tls_done(error_code ec, double unit_random) noexcept {
  if (closing_) return finish();
  if (ec || timed_out_) return attempt_failed(ec, {}, unit_random);
  step_ = step::handshake;
  link_step s;
  s.type = link_step::kind::handshake;
  return s;
}

link_step link_fsm::on_handshake_done(error_code ec, bool tls_hung_up, double unit_random) noexcept {
  if (closing_) return finish();
  if (ec) {
    // TLS 1.3 ends the client's handshake before the server has checked the client certificate;
    // a server that refuses it sends an alert and closes, and the alert is often lost to the
    // reset that the first request provokes. Nothing else closes a fresh TLS session unanswered.
    if (params_.tls && tls_hung_up && !timed_out_) {
      return attempt_failed(make_error_code(error::tls_refused),
                            "the master closed the connection right after the TLS handshake: it requires a client "
                            "certificate, or does not trust the one sent",
                            unit_random);
    }
    return attempt_failed(ec, {}, unit_random);
  }
  if (timed_out_) return attempt_failed(ec, {}, unit_random);  // closed by the timeout meanwhile
  link_step s;
  s.type = link_step::kind::serve;
  s.first_up = !was_up_;
  s.failure.failed_attempts = failed_attempts_;
  phase_ = phase::up;
  was_up_ = true;
  went_down_ = false;
  failed_attempts_ = 0;
  backoff_attempt_ = 0;
  last_failure_.clear();
  suspect_ = false;
  overdue_ = false;
  stalled_ = false;
  return s;
}

link_step link_fsm::attempt_failed(error_code ec, std::string_view text, double unit_random) noexcept {
  // The connect timeout closed the stream, so the step reports an abort (or whatever the close
  // made of it); the attempt failed by timing out. A TLS port found to speak plain RESP ends the
  // attempt by closing it too, with its own error.
  if ((timed_out_ && ec != error::tls_not_offered) || !ec) {
    ec = make_error_code(error::connect_timeout);
    text = {};
  }
  suspect_ = true;
  ++failed_attempts_;
  link_step s;
  s.type = link_step::kind::back_off;
  link_failure& f = s.failure;
  f.cause = ec;
  f.text = text;
  f.was_up = false;
  // Nothing was written on a connection that never came up; the waiting requests were never sent.
  f.written_ec = make_error_code(error::not_connected);
  const bool tls = is_tls_error(ec);
  f.words = tls                             ? failure_words::tls_failed
            : ec == error::auth_failed      ? failure_words::auth_refused
            : ec == error::handshake_failed ? failure_words::hello_refused
                                            : failure_words::connect_failed;
  const bool refused = ec == error::auth_failed || ec == error::handshake_failed || tls;
  // Say it once: a node that stays down would otherwise fill the log at every attempt.
  f.level = ec == last_failure_ ? log_level::debug
            : refused           ? log_level::error
            : went_down_        ? log_level::debug
                                : log_level::warning;
  last_failure_ = ec;
  // Nothing answered (an attempt that timed out): retry soon (core::next_reconnect).
  const auto next = next_reconnect(params_.reconnect, backoff_attempt_, ec == error::connect_timeout, unit_random);
  f.delay = next.delay;
  f.failed_attempts = failed_attempts_;
  backoff_attempt_ = next.next_attempt;
  phase_ = phase::down;
  return s;
}

link_step link_fsm::on_stream_ended(error_code ec, double unit_random) noexcept {
  const bool stalled = std::exchange(stalled_, false);
  overdue_ = false;
  if (closing_) return finish();
  if (stalled) {
    suspect_ = true;
    ec = make_error_code(error::connection_stalled);
  }
  link_step s;
  s.type = link_step::kind::back_off;
  link_failure& f = s.failure;
  f.cause = ec;
  f.was_up = true;
  // Whatever was written may or may not have run on the node: the requests learn the stream's
  // own error when it is ours (bad bytes), else that the connection was lost.
  f.written_ec = (ec.category() == error_category() && ec != error::connection_stalled)
                     ? ec
                     : make_error_code(error::connection_lost);
  f.words = failure_words::down;
  // A node sending bad bytes (or a stall: nothing answered at all) is worse news than a
  // connection closing.
  const bool bad_bytes = ec.category() == error_category() && ec != error::connection_lost;
  f.level = bad_bytes ? log_level::error : log_level::warning;
  // Nothing answered (a stall): retry soon (core::next_reconnect).
  const auto next = next_reconnect(params_.reconnect, backoff_attempt_, stalled, unit_random);
  f.delay = next.delay;
  backoff_attempt_ = next.next_attempt;
  went_down_ = true;
  phase_ = phase::down;
  return s;
}

link_step link_fsm::on_backoff_done() noexcept { return next_attempt(); }

link_step link_fsm::finish() noexcept {
  phase_ = phase::closed;
  closing_ = true;
  return {};
}

link_order link_fsm::on_connect_timeout(std::uint64_t attempt) noexcept {
  if (attempt != attempt_id_ || phase_ != phase::connecting || closing_) return link_order::none;
  timed_out_ = true;
  return link_order::close_stream;
}

link_order link_fsm::on_stall() noexcept {
  if (phase_ != phase::up || stalled_ || closing_) return link_order::none;
  stalled_ = true;
  // Down from now on, not when the serve step has unwound: a request made meanwhile fails fast
  // with not_connected instead of being queued on a dead stream and failed as connection_lost.
  suspect_ = true;
  phase_ = phase::down;
  return link_order::abort_stream;
}

bool link_fsm::on_overdue(bool overdue) noexcept {
  if (phase_ != phase::up || overdue == overdue_) return false;
  overdue_ = overdue;
  return true;
}

link_order link_fsm::on_close() noexcept {
  if (closing_) return link_order::none;
  closing_ = true;
  if (phase_ == phase::idle) {
    phase_ = phase::closed;
    return link_order::complete_idle;
  }
  return link_order::close_now;
}

link_order link_fsm::on_close_after_writes() noexcept {
  if (closing_) return link_order::none;
  if (phase_ != phase::up) return on_close();
  draining_ = true;
  return link_order::flush;
}

link_order link_fsm::on_write_failed() noexcept {
  if (draining_) return on_close();
  return link_order::close_stream;
}

connection_state link_fsm::state() const noexcept {
  switch (phase_) {
    case phase::idle:
      return connection_state::idle;
    case phase::connecting:
      return connection_state::connecting;
    case phase::up:
      return connection_state::up;
    case phase::down:
      return connection_state::down;
    case phase::closed:
      return connection_state::closed;
  }
  return connection_state::closed;
}

}  // namespace redlock::core
