// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Observability: a user-supplied log sink with levels, and counters (requests, errors by kind,
/// a latency histogram) per master connection and per client, readable at run time.
///
/// Everything here is cheap when unused: logging is off unless a sink is set, and the level is
/// checked before any message is formatted (formatting happens inside the library's sources).
/// Counters are relaxed atomics updated on the connection's own strand; reading them takes a
/// snapshot, a plain value type (`connection_stats`, `client_stats`). See docs/observability.md.

#include <redlock/export.hpp>
#include <redlock/hazard.hpp>

#include <boost/system/error_code.hpp>

#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock {

// ---- logging ------------------------------------------------------------------------------------

/// Severity of a log message; `off` disables logging when used as the minimum level.
enum class log_level : std::uint8_t { trace, debug, info, warning, error, off };

/// "trace", "debug", "info", "warning", "error" or "off".
REDLOCK_API std::string_view to_string(log_level level) noexcept;

/// Receives each log message at or above the minimum level, fully formatted (the source, for example
/// "master 2 (127.0.0.1:7002): ", first). The view is valid during the call only.
///
/// It is called from the library's internal strands, on any thread running the executor, possibly
/// from several threads at once: it must be thread-safe, and it must not block (it delays the
/// connection or lock operation that logs). Exceptions it throws are caught and dropped (counted
/// in `log_sink_errors`). It is copied into the client and each connection and may be called until
/// their internal handlers have run down (after `close()` or destruction, "connection closed" still
/// comes), so what it refers to must outlive the executor's run, or be owned by the sink. Messages
/// never contain a password or a full lock token.
using log_sink = std::function<void(log_level level, std::string_view message)>;

/// Where log messages go and which ones are wanted. Off by default (no sink).
struct log_options {
  /// Empty: logging is off, and costs one comparison per loggable event.
  log_sink sink;
  /// Messages below this level are neither formatted nor delivered. `off`: none at all.
  log_level level = log_level::info;
  /// Put before every message as "prefix: ". Empty: a connection uses its address
  /// ("127.0.0.1:7002", "unix:/path"); a client's connections use "master N (address)",
  /// after the client's own prefix when it has one.
  std::string prefix;

  /// True when a message of `l` would be delivered.
  bool enabled(log_level l) const noexcept {
    return static_cast<bool>(sink) && level != log_level::off && l != log_level::off && l >= level;
  }
};

// ---- latency histogram --------------------------------------------------------------------------

/// A latency histogram snapshot: counts in fixed log-scale buckets of microseconds, four buckets
/// per power of two (relative width at most 25%), from below 1 µs to 2^25 µs (~33.6 s), plus one
/// overflow bucket. A plain value: add snapshots of several masters, or subtract an earlier
/// snapshot from a later one for the interval between them.
struct REDLOCK_API latency_histogram {
  /// Buckets per power of two.
  static constexpr std::size_t sub_buckets = 4;
  /// Values at or above 2^max_exponent µs go to the overflow bucket.
  static constexpr unsigned max_exponent = 25;
  /// Buckets 0-3 hold 0, 1, 2 and 3 µs; then [4,5), [5,6), [6,7), [7,8), [8,10), [10,12), ...
  /// [7·2^22, 2^25); the last one holds everything from 2^25 µs up.
  static constexpr std::size_t bucket_count = sub_buckets * (max_exponent - 1) + 1;

  /// The bucket of a latency of `us` whole microseconds.
  static constexpr std::size_t bucket_of(std::uint64_t us) noexcept {
    if (us < sub_buckets) return static_cast<std::size_t>(us);
    const auto e = static_cast<unsigned>(std::bit_width(us)) - 1;  // 2^e <= us < 2^(e+1), e >= 2
    if (e >= max_exponent) return bucket_count - 1;
    return sub_buckets * (e - 1) + static_cast<std::size_t>((us >> (e - 2)) & (sub_buckets - 1));
  }
  /// Smallest value (µs) of bucket `b`.
  static constexpr std::uint64_t lower_bound_us(std::size_t b) noexcept {
    if (b < sub_buckets) return b;
    if (b >= bucket_count - 1) return std::uint64_t{1} << max_exponent;
    const auto e = static_cast<unsigned>(b / sub_buckets) + 1;
    return (sub_buckets + b % sub_buckets) << (e - 2);
  }
  /// One past the largest value (µs) of bucket `b`; UINT64_MAX for the overflow bucket.
  static constexpr std::uint64_t upper_bound_us(std::size_t b) noexcept {
    if (b >= bucket_count - 1) return UINT64_MAX;
    return b + 1 < bucket_count - 1 ? lower_bound_us(b + 1) : std::uint64_t{1} << max_exponent;
  }

  /// Samples per bucket.
  std::array<std::uint64_t, bucket_count> buckets{};
  /// Number of samples (the sum of `buckets`).
  std::uint64_t count = 0;
  /// Sum of the samples (whole microseconds each).
  std::chrono::microseconds sum{0};
  /// Largest sample since the counters were created (also in a difference of snapshots, where it
  /// is then an upper bound for the interval).
  std::chrono::microseconds max{0};

  /// Adds one sample (negative durations count as 0).
  void record(std::chrono::microseconds latency) noexcept;
  /// Estimate of the `p`-th percentile (`p` in [0, 100]): the bucket holding that rank,
  /// interpolated linearly between its smallest and largest whole-microsecond values, never above
  /// `max`. Zero when empty.
  std::chrono::microseconds percentile(double p) const noexcept;
  /// `sum / count` (zero when empty).
  std::chrono::microseconds mean() const noexcept;

  /// Adds another snapshot's samples bucket by bucket (to total several masters); `max`
  /// becomes the larger of the two.
  latency_histogram& operator+=(const latency_histogram& other) noexcept;
  /// Subtracts an earlier snapshot of the same counters (saturating at 0); keeps this `max`.
  latency_histogram& operator-=(const latency_histogram& earlier) noexcept;
  /// `a += b` on a copy.
  friend latency_histogram operator+(latency_histogram a, const latency_histogram& b) noexcept { return a += b; }
  /// `a -= b` on a copy: the samples recorded between snapshot `b` and the later snapshot `a`.
  friend latency_histogram operator-(latency_histogram a, const latency_histogram& b) noexcept { return a -= b; }
  /// Equal when every bucket, `count`, `sum` and `max` are.
  friend bool operator==(const latency_histogram&, const latency_histogram&) = default;
};

// ---- counters -----------------------------------------------------------------------------------

/// A snapshot of one connection's counters (`connection::stats()`), all counted since the
/// connection was created. Each counter is exact; under traffic they are read one after the other,
/// not as one atomic cut, so relations between them may be off by the requests in progress.
///
/// Every request given to `async_exec` ends in exactly one of the outcomes `ok` ... `invalid`:
/// `requests == completed() + in_progress()`.
struct REDLOCK_API connection_stats {
  /// Requests given to `async_exec` (counted when they reach the connection).
  std::uint64_t requests = 0;
  /// Outcome: completed with their replies, none of them an error reply.
  std::uint64_t ok = 0;
  /// Outcome: completed with an error reply (`error::server_error`: WRONGTYPE, NOSCRIPT, OOM...).
  std::uint64_t server_errors = 0;
  /// Outcome: no reply before the request's deadline (`error::master_timeout`).
  std::uint64_t timeouts = 0;
  /// Outcome: not sent, the node being down (`error::not_connected`): failed at once while down,
  /// or still waiting to be written when the connection failed.
  std::uint64_t not_connected = 0;
  /// Outcome: written, then the connection broke (`error::connection_lost`): result unknown.
  std::uint64_t connection_lost = 0;
  /// Outcome: written, then the node sent bad or over-limit bytes and the connection was dropped
  /// (`error::protocol_error`, `reply_too_large`, `nesting_too_deep`).
  std::uint64_t protocol_errors = 0;
  /// Outcome: cancelled by the caller (per-operation cancellation).
  std::uint64_t cancelled = 0;
  /// Outcome: completed with `operation_aborted` by `close()` (or the end of `async_run`).
  std::uint64_t aborted = 0;
  /// Outcome: rejected without effect (`error::invalid_argument`: empty request, bad timeout;
  /// `error::not_supported`: the lock client's subscription on a RESP2 connection).
  std::uint64_t invalid = 0;

  /// Requests written to the socket.
  std::uint64_t written = 0;
  /// Top-level replies read (one per command; RESP3 pushes excluded, except the one that answers
  /// the lock client's own `SUBSCRIBE`; dropped ones included).
  std::uint64_t replies = 0;
  /// Replies read and dropped: their request had timed out or been cancelled after it was written.
  std::uint64_t dropped_replies = 0;
  /// RESP3 push messages received (not matched to requests).
  std::uint64_t pushes = 0;
  /// Bytes written to the socket (handshakes included).
  std::uint64_t bytes_written = 0;
  /// Bytes read from the socket (handshakes included).
  std::uint64_t bytes_read = 0;

  /// Connection attempts (TCP connect + handshake) started.
  std::uint64_t connect_attempts = 0;
  /// Attempts that ended with the connection up.
  std::uint64_t connects = 0;
  /// Attempts that failed (refused, timed out, handshake or authentication refused).
  std::uint64_t connect_failures = 0;
  /// Of those, refused credentials (`error::auth_failed`).
  std::uint64_t auth_failures = 0;
  /// Times an established connection failed (then reconnecting); `close()` is not counted.
  std::uint64_t disconnects = 0;
  /// Of those, connections closed by stall detection (a written request unanswered well past its
  /// deadline: see `connection_config::stall_grace`).
  std::uint64_t stalls = 0;

  /// Cluster masters (`connection_config::cluster`; 0 otherwise): requests sent again after
  /// `MOVED` or `ASK`.
  std::uint64_t redirects = 0;
  /// Cluster masters: requests retried after `TRYAGAIN` or `CLUSTERDOWN` (a slot migrating).
  std::uint64_t cluster_retries = 0;
  /// Cluster masters: reads of the slot map (`CLUSTER SHARDS` or `CLUSTER SLOTS`).
  std::uint64_t slot_map_reads = 0;
  /// Cluster masters: failovers seen (a replica promoted); each quarantines the cluster.
  std::uint64_t failovers = 0;

  /// From `async_exec` reaching the connection to the read that brought its reply (one clock
  /// reading per read, shared by the replies it brought), for requests that got their replies
  /// (`ok` and `server_errors`): `latency.count == ok + server_errors`.
  latency_histogram latency;

  /// Log messages formatted by this connection (each handed to the sink once).
  std::uint64_t log_messages = 0;
  /// Exceptions thrown by the sink (and dropped).
  std::uint64_t log_sink_errors = 0;

  /// Requests that reached an outcome.
  std::uint64_t completed() const noexcept {
    return ok + server_errors + timeouts + not_connected + connection_lost + protocol_errors + cancelled + aborted +
           invalid;
  }
  /// Requests that reached an outcome other than `ok`.
  std::uint64_t errors() const noexcept { return completed() - ok; }
  /// Requests without an outcome yet (0 if the snapshot caught the counters mid-update).
  std::uint64_t in_progress() const noexcept { return requests > completed() ? requests - completed() : 0; }

  /// Adds every counter (to total several masters).
  connection_stats& operator+=(const connection_stats& other) noexcept;
  /// Subtracts an earlier snapshot of the same connection (each counter saturating at 0): the
  /// activity between the two snapshots.
  connection_stats& operator-=(const connection_stats& earlier) noexcept;
  /// `a += b` on a copy.
  friend connection_stats operator+(connection_stats a, const connection_stats& b) noexcept { return a += b; }
  /// `a -= b` on a copy: the activity between snapshot `b` and the later snapshot `a`.
  friend connection_stats operator-(connection_stats a, const connection_stats& b) noexcept { return a -= b; }
  /// Equal when every counter and the histogram are.
  friend bool operator==(const connection_stats&, const connection_stats&) = default;
};

/// A snapshot of a client's counters (`client::stats()`), counted since the client was created.
///
/// Every `async_lock`/`async_try_lock` ends in exactly one of the outcomes `locks_acquired` ...
/// `locks_rejected`.
struct REDLOCK_API client_stats {
  /// Each master's connection counters, in the order of `client_config::masters` (empty when the
  /// configuration is invalid).
  std::vector<connection_stats> masters;

  /// `async_lock` and `async_try_lock` operations started.
  std::uint64_t lock_operations = 0;
  /// Attempts (rounds of `SET NX` to every master) made by them; more than the operations when
  /// retrying.
  std::uint64_t lock_attempts = 0;
  /// Outcome: acquired.
  std::uint64_t locks_acquired = 0;
  /// Outcome: `error::not_acquired` (held by someone else).
  std::uint64_t locks_not_acquired = 0;
  /// Outcome: `error::quorum_unavailable` (too many masters down or failing).
  std::uint64_t locks_quorum_unavailable = 0;
  /// Outcome: `error::validity_expired` (the quorum came too late).
  std::uint64_t locks_validity_expired = 0;
  /// Outcome: cancelled, client closed, or another failure (`operation_aborted`, out of memory).
  std::uint64_t locks_aborted = 0;
  /// Outcome: `error::invalid_argument` or `error::invalid_config`, nothing sent.
  std::uint64_t locks_rejected = 0;

  /// Successful extensions (`lock::async_extend` and keep-alive).
  std::uint64_t extensions = 0;
  /// Failed extensions (no quorum, not the owner, too late); cancelled ones are not counted.
  std::uint64_t extension_failures = 0;
  /// Held locks lost (the loss signalled by `async_wait_lost`).
  std::uint64_t locks_lost = 0;
  /// `lock::async_unlock` calls that reached a majority of masters.
  std::uint64_t releases = 0;
  /// `lock::async_unlock` calls that did not (`error::quorum_unavailable`).
  std::uint64_t release_failures = 0;
  /// Held locks released in the background because their handle was destroyed.
  std::uint64_t background_releases = 0;
  /// Releases (and fair waiters' dequeues) sent again on a master's new connection because the
  /// master was down, or the connection broke or timed out, before the first one was answered (a
  /// key of ours could otherwise stay there until its ttl).
  std::uint64_t releases_resent = 0;
  /// Such releases dropped unsent: every key they could have removed had expired by the time the
  /// master was back (or, rarely, more than 4096 were waiting for one master: dequeues go first).
  std::uint64_t releases_expired = 0;
  /// Fair hand-over: attempts started early because the masters said the lock was released to
  /// this waiter (rather than at the end of a retry delay).
  std::uint64_t lock_wakeups = 0;
  /// Fair hand-over: `async_lock` calls that completed because a majority of masters handed them
  /// the lock as its holder released it (no round of their own after the release).
  std::uint64_t lock_handovers = 0;
  /// Fair hand-over: `async_lock` calls that queued behind other waiters on the masters.
  std::uint64_t locks_queued = 0;
  /// Fenced locks whose granting masters disagreed on the fence, so that it was confirmed on them
  /// in a second round trip (after a master was down, or after failed attempts).
  std::uint64_t fence_confirmations = 0;
  /// Fenced locks whose fence rests on the masters' clocks alone: a granting master had no
  /// counter and fewer than a majority of masters answered a counter, short of a first use (every
  /// master answered, none with a counter); docs/safety.md, "Fencing tokens". Each is logged as
  /// a warning.
  std::uint64_t fences_unverified = 0;
  /// Grants and extensions not counted because their master was quarantined (restarted, or its
  /// clock jumped) or refused `INFO` (docs/safety.md, "Restarts and clock jumps").
  std::uint64_t votes_quarantined = 0;
  /// Times the masters' clocks all moved ahead of the client's at once: the client's own clock
  /// stood still (a frozen machine), and the validity of its held locks was shortened by that much.
  std::uint64_t client_pauses = 0;
  /// Passes of the keep-alive timer that woke their most (256 kept locks) and left the wake-ups
  /// still due to the next pass, so that other work on the executor could run in between: many
  /// kept locks came due at once (docs/design.md, "Keeping a lock alive").
  std::uint64_t keep_alive_passes_split = 0;
  /// What the hazard guards say of each master, in the order of `client_config::masters`: the
  /// cause and end of its quarantine, whether it is unguarded, restarts and clock jumps seen.
  std::vector<master_hazard> hazards;

  /// Successful `async_lock`/`async_try_lock`: from the call to the lock, retries included.
  latency_histogram acquire_latency;

  /// Log messages formatted by the client itself (its connections count their own).
  std::uint64_t log_messages = 0;
  /// Exceptions thrown by the sink for those (and dropped).
  std::uint64_t log_sink_errors = 0;

  /// Lock operations that reached an outcome.
  std::uint64_t locks_completed() const noexcept {
    return locks_acquired + locks_not_acquired + locks_quorum_unavailable + locks_validity_expired + locks_aborted +
           locks_rejected;
  }
  /// The sum of every master's counters.
  connection_stats total() const noexcept;

  /// Adds every counter; `masters` element by element (the longer list's extra entries are kept).
  client_stats& operator+=(const client_stats& other);
  /// Subtracts an earlier snapshot of the same client (each counter saturating at 0).
  client_stats& operator-=(const client_stats& earlier);
  /// `a += b` on a copy.
  friend client_stats operator+(client_stats a, const client_stats& b) { return a += b; }
  /// `a -= b` on a copy: the activity between snapshot `b` and the later snapshot `a`.
  friend client_stats operator-(client_stats a, const client_stats& b) { return a -= b; }
  /// Equal when every counter, histogram and master's counters are.
  friend bool operator==(const client_stats&, const client_stats&) = default;
};

}  // namespace redlock
