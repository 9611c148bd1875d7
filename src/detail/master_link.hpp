// SPDX-License-Identifier: BSL-1.0
#pragma once
// The lock client's private, non-type-erased path to one master's connection (private to src/).
//
// The public `connection::async_exec` erases every handler (one allocation) and hops to the
// connection's strand (one post) and back to the handler's executor (one dispatch). The lock client
// needs none of that: its operations and all of its masters' connections share one strand, so a
// request is queued by a plain call and its reply is handed to the operation by a plain call from
// the connection's read path, in the same scheduler pass as the socket read that produced it.

#include "node_facts.hpp"
#include <redlock/clock.hpp>
#include <redlock/connection.hpp>
#include <redlock/resp/node.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

namespace redlock::detail {

/// Receives the outcome of internal requests. Called on the link's strand, exactly once per
/// accepted request, never from inside `master_link::submit`.
class reply_sink {
 public:
  /// `tag` is the value given to `submit`. `ec` is empty, `error::server_error` (an error reply:
  /// its text is in `r`), `error::master_timeout`, `error::connection_lost`, a protocol error, or
  /// `operation_aborted` (link closed). `r` holds the reply's nodes and is valid during the call only.
  virtual void on_reply(std::uint64_t tag, boost::system::error_code ec, const resp::response& r) = 0;

 protected:
  ~reply_sink() = default;
};

/// Told when a link's connection comes up or goes down, on the link's strand. The lock client
/// uses it to re-send releases whose outcome a broken connection left unknown.
class link_observer {
 public:
  /// The handshake of a new connection completed, or the replies an established one owed
  /// after a timeout came after all; `submit` is accepted from here on (also inside this call:
  /// what it queues is written right after).
  virtual void on_link_up(std::size_t index) = 0;
  /// A cluster master's slot map changed (a migration ended, a failover) while it stays up:
  /// requests that could not reach their keys before (releases in doubt) may now.
  virtual void on_link_moved(std::size_t /*index*/) {}
  /// Just before `on_link_up` of a new connection: what its handshake's `INFO server` and `TIME`
  /// said, when `observe` asked for them.
  virtual void on_link_identified(std::size_t /*index*/, const node_facts& /*facts*/) {}
  /// A connection attempt failed (refused, timed out, the host name did not resolve, the
  /// handshake was refused: `cause`), or an established connection broke (then `on_link_down`
  /// follows). Called before the requests that waited for the connection complete with
  /// `not_connected`, so that whoever reads them knows why.
  virtual void on_link_failed(std::size_t /*index*/, boost::system::error_code /*cause*/) {}
  /// An established connection broke (stalled, closed by the node, reset). Its written requests
  /// have completed with `connection_lost` before this call. Its subscriptions are gone with it:
  /// re-subscribe from `on_link_up`.
  virtual void on_link_down(std::size_t index) = 0;
  /// The node sent a RESP3 push that is no request's reply (a pub/sub `message`, or a
  /// subscription change nobody asked for at that point of the stream). `push` holds its nodes
  /// (the push node first, at depth 0, possibly after an attribute) and is valid during the call
  /// only. Called in place from the read path: `submit` may be called from here.
  virtual void on_push(std::size_t /*index*/, const resp::response& /*push*/) {}

 protected:
  ~link_observer() = default;
};

class cluster_link;
class read_poller;

/// One master's connection as the lock client sees it. Owns a `connection::impl` that runs on the
/// strand it was given (shared with the client's operations), or, for a cluster master
/// (`connection_config::cluster`), a `cluster_link` of such connections, one per node.
class master_link {
 public:
  using clock = redlock::boot_clock;
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;

  /// Builds the connection on `strand` (which must be a strand: every call below runs on it).
  /// `poller` (optional, on the same strand): a plain connection waits for replies through it.
  master_link(strand_type strand, connection_config cfg, std::shared_ptr<read_poller> poller = nullptr);
  ~master_link();  // closes
  master_link(const master_link&) = delete;
  master_link& operator=(const master_link&) = delete;

  /// Starts connecting (and reconnecting) in the background; from any thread.
  void run();
  /// Sets who hears of connects and disconnects (weakly held), and the index it is told. Before
  /// `run()`. `identify`, `ask_time`: every handshake also asks `INFO server`, `TIME`
  /// (`link_observer::on_link_identified`).
  void observe(std::weak_ptr<link_observer> o, std::size_t index, bool identify = false, bool ask_time = false);
  /// For a cluster master: the restart quarantine, so that a node first seen with a shorter
  /// uptime quarantines the cluster (see cluster_link). Ignored by a plain master.
  void set_restart_quarantine(std::chrono::milliseconds q);
  /// Closes the socket; every accepted request completes with `operation_aborted`. From any thread.
  void close();
  /// As `close`, once every request accepted before this call has been written (or after `limit`,
  /// or at once when the connection is not up): `client::close` uses it so that the releases its
  /// cancelled operations queued still reach the master. From any thread.
  void close_after_writes(clock::duration limit);

  /// Queues `payload` (`replies` pipelined commands, copied: the caller's buffer may be reused at
  /// once) with its deadline. On the strand only. Returns `error::not_connected` when the master is
  /// known to be down (or `run()` was not called, or it is closed; from `run()` until the first
  /// connect attempt's outcome, requests queue), or `error::invalid_argument` for an empty
  /// payload, `replies == 0` or a null `sink`: then nothing was queued and `sink` will not be
  /// called. Otherwise `sink->on_reply(tag, ...)` comes later, once, never from inside this call,
  /// and `sink` is kept alive until then. Counted in `stats()` like a public request. No
  /// allocation in steady state.
  ///
  /// `push_confirmed`: the payload is one RESP3 pub/sub command of one channel (`SUBSCRIBE ch`,
  /// `UNSUBSCRIBE ch`, `PSUBSCRIBE`, `SSUBSCRIBE`...), answered by a subscription push instead of
  /// a reply (see `detail::confirmed_by`): the sink gets that push's nodes (`>3 subscribe ch n`)
  /// with no error, or the refusal with `error::server_error`. It needs `replies == 1`
  /// (`invalid_argument` otherwise) and a RESP3 connection: on one that fell back to RESP2 it
  /// returns `error::not_supported` (counted as `invalid`), and one queued while connecting
  /// completes with `not_supported` when the connection comes up as RESP2; it is never written
  /// there. It has a deadline and a stall point like any request. Subscriptions end with the
  /// connection: the link does not restore them (see `link_observer`).
  boost::system::error_code submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                                   std::shared_ptr<reply_sink> sink, std::uint64_t tag, bool push_confirmed = false);

  /// The RESP version of the current connection: 3, 2 after the fallback for a node that refused
  /// `HELLO 3`, or 0 while there is none (not connected yet, down, or reconnecting). From any
  /// thread (a snapshot).
  int protocol() const noexcept;

  connection_status status() const;
  connection_stats stats() const;
  const connection_config& config() const noexcept;
  /// For a cluster master: the node (its number in the slot map) whose answer is being handed to
  /// a sink now (valid during `reply_sink::on_reply` only). 0 for a plain master.
  std::size_t answering_node() const noexcept;
  /// The cluster behind a cluster master (`connection_config::cluster`), else null.
  const std::shared_ptr<cluster_link>& cluster() const noexcept { return cluster_; }

 private:
  std::shared_ptr<connection::impl> impl_;  // a plain master
  std::shared_ptr<cluster_link> cluster_;   // a cluster master
};

}  // namespace redlock::detail
