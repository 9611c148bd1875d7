// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// One multiplexed, pipelined connection to one Redis node.

#include <redlock/clock.hpp>
#include <redlock/core/backoff.hpp>
#include <redlock/error.hpp>
#include <redlock/export.hpp>
#include <redlock/observe.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace redlock {

/// @brief TLS to one node (Redis `--tls-port`), over OpenSSL.
///
/// Off by default. When on, the connection makes a TLS handshake (TLS 1.2 or later, with SNI)
/// after the TCP connect and before the Redis handshake, and every byte goes through it. The
/// node's certificate is verified by default: it must chain to a CA from `ca_file` / `ca_dir`
/// (or, when both are empty, the system's default store) and be valid for `server_name` (or the
/// host). A wrong or missing CA fails closed: the connection is refused with
/// `error::tls_certificate_untrusted`, never used unverified. Not available over a Unix socket
/// (Redis serves those in plain text): `validate` refuses the combination. Each cause of a failed
/// TLS connect has its own code in `connection_status::last_error` (`error::tls_not_offered`,
/// `tls_expected`, `tls_certificate_untrusted`, `tls_certificate_expired`, `tls_name_mismatch`,
/// `tls_refused`, `tls_handshake_failed`), with OpenSSL's words in `last_error_text`.
struct tls_options {
  /// Use TLS (`rediss://host:port` in a master list sets it).
  bool enabled = false;
  /// PEM file of CA certificates to trust. Empty (and `ca_dir` empty): the system's default store.
  std::string ca_file;
  /// Directory of hashed CA certificates (`openssl rehash`) to trust, with or instead of `ca_file`.
  std::string ca_dir;
  /// The name the certificate must be valid for, also sent as SNI. Empty: `connection_config::host`.
  /// An IP address is checked against the certificate's IP addresses (and sent without SNI).
  std::string server_name;
  /// Client certificate chain (PEM) for mutual TLS; the leaf first. Needs `key_file`.
  std::string cert_file;
  /// Private key (PEM, not encrypted) of `cert_file`. Needs `cert_file`.
  std::string key_file;
  /// Turns certificate and name verification off: anyone on the path can then read and change
  /// the traffic (lock tokens, passwords). For tests against throw-away servers only; `validate`
  /// refuses it together with `ca_file`, `ca_dir` or `server_name`, which it would ignore.
  bool insecure_skip_verify = false;
};

/// A node's address (a cluster's further seeds).
struct node_address {
  /// Host name or IP address.
  std::string host;
  /// TCP port.
  std::uint16_t port = 6379;
  /// Equal when host and port are.
  friend bool operator==(const node_address&, const node_address&) = default;
};

/// @brief A Redlock master that is a whole Redis Cluster (`redis-cluster://` in a master list).
///
/// The lock client learns the cluster's slot map from its seeds (`CLUSTER SHARDS`, else
/// `CLUSTER SLOTS`), keeps one multiplexed connection per primary, and sends each request to the
/// primary that owns its key's slot, following `MOVED`, `ASK` and `TRYAGAIN` within the request's
/// deadline. The cluster is one Redlock master: one vote per round (docs/safety.md, "Cluster
/// masters"). The other fields of `connection_config` (credentials, TLS, timeouts) apply to every
/// node of the cluster. A plain `connection` ignores this.
struct cluster_options {
  /// The master is a cluster: `connection_config::host`:`port` is its first seed.
  bool enabled = false;
  /// More seeds, tried when the first cannot be reached.
  std::vector<node_address> seeds;
};

/// Where and how to reach one Redis node.
struct connection_config {
  /// Host name or IP address. Ignored when `unix_socket` is set.
  std::string host = "127.0.0.1";
  /// TCP port. Ignored when `unix_socket` is set.
  std::uint16_t port = 6379;
  /// Path of a Unix domain socket; when non-empty it is used instead of `host`:`port`.
  std::string unix_socket;
  /// ACL user name; empty means the `default` user. Only sent when `password` is non-empty.
  std::string username;
  /// Password (`requirepass` or the ACL user's). Empty: no authentication.
  std::string password;
  /// Logical database (`SELECT`); 0 sends nothing.
  int database = 0;
  /// `CLIENT SETNAME` value; empty sends nothing.
  std::string client_name;
  /// TLS to the node (off by default).
  tls_options tls{};
  /// Bound on TCP connect plus handshake. A node that accepts but never answers (stopped process,
  /// half-open path) costs at most this much per attempt.
  std::chrono::milliseconds connect_timeout{1000};
  /// Delays between reconnect attempts after the node refused or closed the connection. An
  /// attempt that timed out (nothing answered: a partition, a lost path) is retried after only
  /// `reconnect.initial` (jittered), without growing: the attempt itself already waited
  /// `connect_timeout`, and a healed path should be used within about one attempt.
  core::backoff_policy reconnect{};
  /// @brief Stall detection: a written request still unanswered this long past its own deadline
  /// (or past twice its deadline's length, whichever is later) marks the connection *stalled*.
  ///
  /// Replies come in request order, so one unanswered request holds back every reply behind it.
  /// After packet loss or a partition, TCP retransmits with exponential backoff (Linux: 200 ms,
  /// 0.4 s, 0.8 s, 1.6 s, 3.2 s...): a connection can stay silent for seconds after the path
  /// healed while it still looks up. A stalled connection is closed at once (abortive close:
  /// unsent bytes are dropped), its written requests complete with `error::connection_lost` and
  /// it reconnects immediately; until it is up again, requests fail at once with
  /// `error::not_connected`. Requests answered late but within the grace are simply dropped and
  /// the connection is kept. The default tolerates three lost transmissions of a segment (0.2 +
  /// 0.4 + 0.8 s of retransmission delay) beyond the deadline of a 250 ms lock request.
  std::chrono::milliseconds stall_grace{1000};
  /// Turns stall detection off: a silent connection is then only replaced when TCP gives up on it.
  bool detect_stalls = true;
  /// @brief While the node is suspect (after a stall or a failed attempt), a TCP connect attempt
  /// sends a fresh SYN this often, the earlier ones going on (the first to complete wins, all
  /// within `connect_timeout`). Linux retransmits a lost SYN only after 1 s, then 3 s: without
  /// probes, a path that heals just after a SYN was lost waits that long. Zero turns probing off.
  /// Not used for Unix sockets or for a host name that resolves to several addresses.
  std::chrono::milliseconds connect_probe_interval{200};
  /// Limits on what the node may send; a reply over them fails the connection, never the process.
  resp::parser_limits limits{};
  /// For a Redlock master: the node keeps its keys across restarts (AOF with `appendfsync
  /// always`), so the restart quarantine (`hazard_guard_options`) is skipped for it. Clock jumps
  /// are still guarded. Ignored by a plain connection.
  bool durable = false;
  /// For a Redlock master: the master is a Redis Cluster, reached through `host`:`port` and
  /// `cluster.seeds` (off by default).
  cluster_options cluster{};
  /// Log sink and level for this connection's messages (off by default). A `client` gives each
  /// master without a sink of its own the client's `logging`, prefixed "master N (address)".
  log_options logging{};
};

/// Checks `cfg`; returns `error::invalid_config` (with `what` naming the field) when it is unusable.
/// With TLS on, this also loads the CA, certificate and key files once, so that a file that is
/// missing, unreadable or not valid PEM (or a key that does not match its certificate) is reported
/// here with its path, not at every connect attempt.
REDLOCK_API boost::system::error_code validate(const connection_config& cfg, std::string* what = nullptr);

/// The node's address as `parse_masters` reads it: "host:port", "[ipv6]:port" or "unix:/path",
/// prefixed "rediss://" when TLS is on; a cluster master's seeds as
/// "redis-cluster://host:port+host:port" ("rediss-cluster://" with TLS).
REDLOCK_API std::string address_of(const connection_config& cfg);

/// Where a connection is in its life.
enum class connection_state {
  idle,        ///< constructed; `async_run` not called yet
  connecting,  ///< TCP connect and handshake in progress; new requests queue
  up,          ///< ready; requests are written as they come
  down,        ///< between attempts after a failure; new requests fail at once with `not_connected`
  closed,      ///< `close()` was called or `async_run` ended; requests fail with `not_connected`
};

/// A snapshot of a connection's health, for logs and diagnostics.
struct connection_status {
  /// Where the connection is in its life when the snapshot was taken.
  connection_state state = connection_state::idle;
  /// Why the connection last failed or was refused (empty when it never failed).
  boost::system::error_code last_error;
  /// The node's own words for `last_error` when it came from an error reply (untrusted text).
  std::string last_error_text;
  /// Handshakes completed so far; more than one means the connection reconnected.
  std::uint64_t connects = 0;
  /// Replies read and dropped because their request had timed out or been cancelled.
  std::uint64_t dropped_replies = 0;
  /// Out-of-band RESP3 push messages received (not matched to requests).
  std::uint64_t pushes = 0;
};

/// One socket to one Redis node, shared by any number of concurrent callers.
///
/// Requests from all callers are queued, coalesced into as few writes as possible and answered in
/// order (Redis answers a connection's commands first-in first-out). Each request has its own
/// deadline; a request that times out or is cancelled after it was written is *abandoned*: its
/// reply is still read and dropped, so the stream stays in step and the socket stays open.
///
/// `async_run` keeps the connection alive: it connects, performs the handshake (`HELLO 3` with
/// `AUTH` and `SETNAME`, then `SELECT`), and after any failure reconnects with capped, jittered
/// exponential backoff. While the node is down or suspect (see `async_exec`), requests fail at once
/// with `error::not_connected` rather than waiting for their deadline. A connection whose written
/// request stays unanswered well past its deadline is replaced (`connection_config::stall_grace`).
///
/// @par Thread safety
/// Distinct objects: safe. Shared objects: safe. Every member function may be called from any
/// thread; the connection's state lives on an internal strand of the executor.
class connection {
  // Exported member by member (REDLOCK_API): with the class, its nested `impl` would be too.
 public:
  /// The type of the executor given to the constructor (`get_executor()`).
  using executor_type = boost::asio::any_io_executor;
  /// The clock of request deadlines (monotonic).
  using clock = redlock::boot_clock;

  /// @param ex executor the connection's I/O runs on (through its own strand); also the default
  /// executor of completion handlers that have no associated executor.
  /// @param cfg the node and how to reach it; copied.
  REDLOCK_API connection(executor_type ex, connection_config cfg);
  /// Closes the connection (see `close`). Outstanding operations complete with `operation_aborted`.
  REDLOCK_API ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// The executor given to the constructor.
  REDLOCK_API executor_type get_executor() const noexcept;
  /// The configuration given to the constructor.
  REDLOCK_API const connection_config& config() const noexcept;

  /// @brief Runs the connection until `close()` or cancellation: connect, handshake, serve,
  /// and reconnect after failures.
  ///
  /// The handler signature is `void(boost::system::error_code)`: `operation_aborted` after `close()`
  /// or cancellation, `error::invalid_config` for an unusable configuration, `invalid_argument` when
  /// the connection already runs or ran.
  ///
  /// @par Per-operation cancellation
  /// `terminal`: closes the connection, as `close()` does.
  template <boost::asio::completion_token_for<void(boost::system::error_code)> Token = boost::asio::deferred_t>
  auto async_run(Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(run_initiation{this}, token);
  }

  /// @brief Sends the commands of `req` and completes with their replies.
  ///
  /// The handler signature is `void(boost::system::error_code, resp::response)`. The response holds
  /// the replies of all commands of `req`, in order (each starts at depth 0). Errors:
  /// - `error::server_error`: at least one reply is an error reply; the response still holds all
  ///   replies, the node's text included;
  /// - `error::master_timeout`: no complete reply within `timeout`;
  /// - `error::not_connected`: the request was not sent: the node is down, or suspect
  ///   (reconnecting after a stall or a failed attempt);
  /// - `error::connection_lost`, `error::protocol_error` and other reply errors: the connection
  ///   failed after the request was written; whether the node executed it is unknown;
  /// - `error::invalid_argument`: `req` is empty or `timeout` is not positive;
  /// - `operation_aborted`: cancelled, or the connection was closed.
  ///
  /// @par Per-operation cancellation
  /// `total`: only while the request has not been written. `partial` and `terminal`: always; a
  /// written request is abandoned (the node may still execute it; its reply is dropped).
  ///
  /// @par Object lifetimes
  /// `req` is moved in; the connection must outlive the operation's initiation only: if it is
  /// destroyed first, the operation completes with `operation_aborted`.
  template <boost::asio::completion_token_for<void(boost::system::error_code, resp::response)> Token =
                boost::asio::deferred_t>
  auto async_exec(resp::request req, clock::duration timeout, Token&& token = {}) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, resp::response)>(
        exec_initiation{this}, token, std::move(req), timeout);
  }

  /// Closes the socket, stops reconnecting, completes every pending request and `async_run` with
  /// `operation_aborted`. Idempotent; may be called from any thread.
  REDLOCK_API void close();

  /// A thread-safe snapshot of the connection's state.
  REDLOCK_API connection_status status() const;

  /// A snapshot of the connection's counters (requests by outcome, latency histogram, connects,
  /// bytes), cheap enough to call periodically from any thread (relaxed atomic loads, no lock).
  REDLOCK_API connection_stats stats() const;

  class impl;  // in src/connection.cpp

 private:
  using exec_handler = boost::asio::any_completion_handler<void(boost::system::error_code, resp::response)>;
  using run_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

  // Associated executor: lets asio::bind_cancellation_slot/cancel_after-style adapters and
  // completion-executor lookups see the connection's executor before the operation starts.
  struct exec_initiation {
    connection* self;
    using executor_type = connection::executor_type;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    void operator()(exec_handler h, resp::request req, clock::duration timeout) const {
      self->start_exec(std::move(h), std::move(req), timeout);
    }
  };
  struct run_initiation {
    connection* self;
    using executor_type = connection::executor_type;
    executor_type get_executor() const noexcept { return self->get_executor(); }
    void operator()(run_handler h) const { self->start_run(std::move(h)); }
  };

  REDLOCK_API void start_exec(exec_handler h, resp::request req, clock::duration timeout);
  REDLOCK_API void start_run(run_handler h);

  std::shared_ptr<impl> impl_;
};

}  // namespace redlock
