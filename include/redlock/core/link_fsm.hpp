// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The life of one node connection as a sans-I/O state machine: connecting (a race of fresh connects
/// to a node that is suspect), TLS, the Redis handshake (itself `core::handshake_fsm`), up, late
/// replies, stalls, closing (at once, or once the queued requests are written) and the reconnect
/// back-off. The I/O layer (`src/connection.cpp`) runs one loop that carries out the machine's
/// steps in order, each resumed with its outcome, and tells the machine what happens meanwhile (a
/// timer fires, the caller closes, a written request goes unanswered) through `on_*` calls, each of
/// which says what to do at once. It decides nothing itself: which error a failure reports, whether
/// the node is suspect, whether requests are accepted, how long to wait before the next attempt and
/// how loudly to log it are all decided here.

#include <redlock/connection.hpp>
#include <redlock/core/backoff.hpp>
#include <redlock/export.hpp>
#include <redlock/observe.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <string_view>

namespace redlock::core {

/// What the machine needs to know of the connection's configuration.
struct link_params {
  bool tls = false;                 ///< a TLS handshake follows the connect
  bool probe_when_suspect = false;  ///< connect to a suspect node by a race of probes
  backoff_policy reconnect{};       ///< delays between attempts
};

/// How a failure is worded in the log (the I/O layer formats it; the machine picks the words).
enum class failure_words : std::uint8_t {
  down,            ///< an established connection broke
  tls_failed,      ///< the TLS handshake failed, or TLS was spoken to a plain port or vice versa
  auth_refused,    ///< the node refused the credentials
  hello_refused,   ///< the node refused the handshake for another reason
  connect_failed,  ///< the connect failed (refused, unreachable, timed out, name not found)
};

/// What became of the connection or the attempt that just failed, and what the I/O layer does
/// about it, in this order: record `cause` (with `text` when it is set, else the node's own
/// words) as the last error and tell the observer; fail the written requests with `written_ec`
/// and the waiting ones with `not_connected`; reset the stream; tell the observer the connection
/// is down when `was_up`; log at `level` in `words`; wait `delay`.
struct link_failure {
  boost::system::error_code cause;       ///< why (connect_timeout, connection_stalled, tls_refused...)
  boost::system::error_code written_ec;  ///< what the requests that were written complete with
  std::string_view text;                 ///< replaces the node's words when not empty (static text)
  bool was_up = false;                   ///< the connection had come up (a disconnect, not a failed attempt)
  failure_words words = failure_words::connect_failed;  ///< how the log line words it
  log_level level = log_level::warning;                 ///< the log line's level
  std::chrono::milliseconds delay{0};                   ///< before the next attempt
  std::uint64_t failed_attempts = 0;                    ///< attempts failed since the connection was last up
};

/// The next thing the I/O layer's loop does.
struct link_step {
  /// What to do; resume the machine with the `link_fsm` call named for each.
  enum class kind : std::uint8_t {
    connect,    ///< resolve and connect the socket (`race`: by a race of probes): `on_connected`
    tls,        ///< the TLS handshake: `on_tls_done`
    handshake,  ///< the Redis handshake: `on_handshake_done`
    serve,      ///< up: read and write until the stream fails: `on_stream_ended`
    back_off,   ///< carry out `failure`, then wait `failure.delay`: `on_backoff_done`
    finish,     ///< closed: the loop ends
  };
  kind type = kind::finish;  ///< what to do
  bool race = false;         ///< connect: a race of probes (the node is suspect)
  bool first_up = true;      ///< serve: the first connection (else a reconnect, after `failure.failed_attempts`)
  link_failure failure;      ///< back_off (and serve: `failed_attempts` before this connection)
};

/// What an `on_*` call asks the I/O layer to do at once.
enum class link_order : std::uint8_t {
  none,           ///< nothing
  close_stream,   ///< close the stream (the step in progress ends with an error)
  abort_stream,   ///< close it abortively (RST: unsent bytes must not reach the node late)
  close_now,      ///< closed: close the stream, cancel the back-off, fail every request
  complete_idle,  ///< closed before it started: fail every request
  flush,          ///< start writing what is queued; close once written (see `flushed`)
};

/// One connection's life (see the file's description). The I/O layer calls `start` once, then
/// carries out each step and resumes the machine with its outcome until a `finish` step.
class REDLOCK_API link_fsm {
 public:
  /// A connection that has not started, with its settings.
  explicit link_fsm(link_params p) noexcept : params_(p) {}

  /// `async_run` was called. False when the connection was started or closed before (the I/O
  /// layer refuses the second run); else the first step is `next_attempt()`.
  bool start() noexcept;
  /// The step that begins an attempt (connect, as a race when the node is suspect). Counts the
  /// attempt: `attempt_id()` names it from here on.
  link_step next_attempt() noexcept;

  /// The outcome of a `connect` step. `unit_random` in [0, 1) jitters a back-off.
  link_step on_connected(boost::system::error_code ec, double unit_random) noexcept;
  /// The outcome of a `tls` step: `ec` as the stream classified it.
  link_step on_tls_done(boost::system::error_code ec, double unit_random) noexcept;
  /// The outcome of a `handshake` step. `tls_hung_up`: over TLS, the node closed the session
  /// before it answered anything (reset, end of stream, truncated record).
  link_step on_handshake_done(boost::system::error_code ec, bool tls_hung_up, double unit_random) noexcept;
  /// A `serve` step ended: the stream failed or was closed, with `ec`.
  link_step on_stream_ended(boost::system::error_code ec, double unit_random) noexcept;
  /// A `back_off` step's wait ended (or was cancelled by `close`).
  link_step on_backoff_done() noexcept;
  /// The I/O layer's loop ended, by a `finish` step or by an exception: closed from now on, so
  /// that nothing is accepted any more.
  void on_run_ended() noexcept { (void)finish(); }

  /// The connect timeout of attempt `attempt` fired. While that attempt is in progress it fails
  /// with `connect_timeout`: `close_stream`.
  link_order on_connect_timeout(std::uint64_t attempt) noexcept;
  /// Up, the oldest written request is unanswered past its stall point: the stream is stalled.
  /// Down from now on, suspect, and `abort_stream` (its `on_stream_ended` reports the stall).
  /// `none` when not up, or already stalled.
  link_order on_stall() noexcept;
  /// A written request timed out and its reply is still owed (`overdue`), or the replies owed
  /// came (`!overdue`). True when that changed whether a vote is accepted (for the log, and to
  /// tell the observer it may send again).
  bool on_overdue(bool overdue) noexcept;
  /// `close()`: closes at once.
  link_order on_close() noexcept;
  /// `close` once the requests queued so far are written: `flush` while up, else as `on_close`.
  link_order on_close_after_writes() noexcept;
  /// Whether a connection closing after its writes should close now (nothing being written,
  /// nothing waiting to be).
  bool flushed(bool writing, bool waiting) const noexcept { return draining_ && !closing_ && !writing && !waiting; }
  /// A write failed: `close_now` while closing after writes (there is nothing left to flush),
  /// else `close_stream` (the reader notices and the connection is replaced).
  link_order on_write_failed() noexcept;

  /// Whether a new request is queued (else refused at once with `not_connected`), for a caller
  /// that shares the connection: while up, and while connecting unless the node is suspect (after
  /// a stall or a failed attempt, until an attempt succeeds: a request would only wait out its
  /// deadline behind a connect that may never answer).
  bool accepting() const noexcept {
    if (phase_ == phase::up) return true;
    return phase_ == phase::connecting && !suspect_;
  }
  /// As `accepting`, for a quorum's vote: not while a written request is overdue either. A vote
  /// queued then could only wait behind it, and a quorum decides sooner without it. (A shared
  /// connection keeps queueing: one caller's short timeout must not fail the others' requests.)
  bool accepting_votes() const noexcept { return accepting() && !(phase_ == phase::up && overdue_); }
  /// Whether requests are written now (up, not stalled, not closing).
  bool writable() const noexcept { return phase_ == phase::up && !closing_; }
  /// Whether stalls are watched for: up and not yet declared stalled.
  bool watching_stalls() const noexcept { return phase_ == phase::up && !stalled_; }
  /// The state `connection::status()` shows.
  connection_state state() const noexcept;
  /// Whether `close` was called (at once, or its flush ended).
  bool closing() const noexcept { return closing_; }
  /// Whether the node is suspect: since a stall or a failed attempt, until an attempt succeeds.
  bool suspect() const noexcept { return suspect_; }
  /// Whether a written request timed out and its reply is still owed.
  bool overdue() const noexcept { return overdue_; }
  /// Whether the connection closes once its queued requests are written.
  bool closing_after_writes() const noexcept { return draining_; }
  /// The attempt in progress (or the last one): its number, from 1.
  std::uint64_t attempt_id() const noexcept { return attempt_id_; }
  /// Attempts failed since the connection was last up.
  std::uint64_t failed_attempts() const noexcept { return failed_attempts_; }

 private:
  enum class phase : std::uint8_t { idle, connecting, up, down, closed };
  enum class step : std::uint8_t { socket, tls, handshake };

  link_step attempt_failed(boost::system::error_code ec, std::string_view text, double unit_random) noexcept;
  link_step finish() noexcept;

  link_params params_;
  phase phase_ = phase::idle;
  step step_ = step::socket;
  bool closing_ = false;
  bool draining_ = false;   // closing once the queued requests are written
  bool suspect_ = false;    // since a stall or a failed attempt, until an attempt succeeds
  bool overdue_ = false;    // up, but a written request timed out and its reply is still owed
  bool stalled_ = false;    // the current stream was declared stalled
  bool timed_out_ = false;  // the current attempt's connect timeout fired
  bool was_up_ = false;     // the connection came up at least once
  bool went_down_ = false;  // the last failure was of a live connection (already logged)
  std::uint32_t backoff_attempt_ = 0;
  std::uint64_t attempt_id_ = 0;
  std::uint64_t failed_attempts_ = 0;
  boost::system::error_code last_failure_;  // logged above debug once; repeats go to debug
};

}  // namespace redlock::core
