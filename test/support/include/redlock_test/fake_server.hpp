// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// A scripted RESP server on loopback: it behaves like a tiny Redis (enough to be one master of a
/// Redlock client) until a test tells it to answer some commands with bytes of its choosing —
/// garbage, truncated or oversized replies, replies of the wrong type, error replies, silence or
/// a closed connection — so that a misbehaving node can be shown on the wire, for real.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::test {

/// What the fake server does with one command: write `bytes` (after `delay`), then optionally
/// close the connection. Commands of one connection are answered in order, so a delayed answer
/// also holds back the answers to the commands after it, as a slow Redis would.
struct reply_action {
  /// Raw bytes to write, sent as they are (need not be valid RESP). Empty: write nothing.
  std::string bytes;
  /// Wait this long before writing.
  std::chrono::milliseconds delay{0};
  /// After writing, close the connection (FIN), ignoring what the client sent after this command.
  bool close = false;

  /// Writes `bytes` (after `delay`).
  static reply_action send(std::string bytes, std::chrono::milliseconds delay = std::chrono::milliseconds{0});
  /// Writes nothing and keeps the connection open: the command is never answered.
  static reply_action silence();
  /// Writes `bytes` (possibly none), then closes the connection.
  static reply_action send_and_close(std::string bytes = {});
};

/// A RESP server on 127.0.0.1:`port()` running its own `io_context` on its own thread (like
/// `fault_proxy`). It reads each client's commands with `resp::parser` (RESP arrays of bulk
/// strings) and answers every one in order, through the responder when one is set.
///
/// Its built-in behaviour is a tiny in-memory Redis that speaks RESP3 after `HELLO`: `HELLO`
/// (a map), `AUTH`, `CLIENT`, `SELECT`, `PING`, `ECHO`, `GET`, `SET key value [NX|XX] [PX ms|EX s]`,
/// `DEL`, `PEXPIRE`, `PTTL`, `FLUSHALL`/`FLUSHDB`, `SCRIPT LOAD`, and `EVALSHA`/`EVAL` of the lock
/// client's release and extend scripts (`detail/scripts.hpp`), executed against the map; any
/// other script SHA gets `NOSCRIPT`, any other command `ERR unknown command`. Keys expire.
///
/// Thread-safety: every member function may be called from any thread, from a responder (which
/// runs on the server's thread) included; only the destructor must not run on the server's thread.
class fake_server {
 public:
  /// One command as the client sent it: the command name, then its arguments.
  using command = std::vector<std::string>;
  /// Decides the answer to each command (the `HELLO` and `SELECT` of the handshake included). It
  /// runs on the server's thread. `std::nullopt` means "answer as the built-in Redis would", so a
  /// responder names only the commands it wants to break.
  using responder = std::function<std::optional<reply_action>(const command&)>;

  /// Binds a free loopback port, starts the server thread and listens. Throws
  /// `boost::system::system_error` when it cannot.
  fake_server();
  /// Closes every connection and the listening socket and joins the server thread. Never throws.
  ~fake_server();

  fake_server(const fake_server&) = delete;
  fake_server& operator=(const fake_server&) = delete;

  /// The address clients connect to: "127.0.0.1".
  const std::string& host() const noexcept;
  /// The listening port, fixed for the server's life.
  std::uint16_t port() const noexcept;

  /// Replaces the responder; an empty one restores the built-in behaviour. Commands read after
  /// this returns see the new responder (one already being answered keeps the old one).
  void set_responder(responder r);

  /// Closes every open client connection from the server side (FIN); keeps listening.
  void close_connections();

  /// The built-in Redis's answer to `cmd`, as raw RESP3 bytes (applied to its data set, as if
  /// the client had sent it). For responders that break a command only sometimes.
  std::string redis_reply(const command& cmd);

  /// The value the built-in Redis holds for `key` (none when absent or expired).
  std::optional<std::string> value(std::string_view key) const;
  /// The remaining time to live of `key` (none when the key is absent or has no expiry).
  std::optional<std::chrono::milliseconds> ttl(std::string_view key) const;

  /// Client connections accepted since construction.
  std::size_t connections_accepted() const noexcept;
  /// Client connections currently open.
  std::size_t connections_open() const noexcept;
  /// Commands read since construction (all connections, the handshake's included).
  std::size_t commands_seen() const noexcept;
  /// Commands named `name` read since construction (case-insensitive).
  std::size_t commands_seen(std::string_view name) const;

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace redlock::test
