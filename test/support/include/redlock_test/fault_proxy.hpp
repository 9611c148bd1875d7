// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// A TCP proxy in front of one upstream server that injects network faults: latency, a black
/// hole (half-open peer), refused connects and connection resets.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace redlock::test {

/// Listens on 127.0.0.1:`port()` and forwards each accepted client to its own new connection to
/// the upstream server. It runs its own `io_context` on its own thread.
///
/// Thread-safety: every member function may be called from any thread except the proxy's own.
/// The setters take effect on the proxy's thread before they return, so data the client sends
/// after a setter returns is handled in the new mode.
///
/// The proxy owns its port for its whole life (also while refusing), so `set_refuse(false)`
/// listens on the same port again and clients can keep their address.
class fault_proxy {
 public:
  /// Resolves the upstream address (throws `boost::system::system_error` when it cannot), binds a
  /// free loopback port and starts the proxy thread. Upstream connections are made per client;
  /// when one cannot be made the client's connection is closed.
  fault_proxy(std::string upstream_host, std::uint16_t upstream_port);
  /// Closes every connection and the listening socket, and joins the proxy thread. Never throws.
  ~fault_proxy();

  fault_proxy(const fault_proxy&) = delete;
  fault_proxy& operator=(const fault_proxy&) = delete;

  /// The address clients connect to: "127.0.0.1".
  const std::string& host() const noexcept;
  /// The port clients connect to; fixed for the proxy's life.
  std::uint16_t port() const noexcept;

  /// Delays every chunk read, in each direction, by `one_way` before forwarding it. Order is
  /// preserved and throughput is not limited (chunks wait concurrently). Zero: no delay. Applies
  /// to chunks read after the call.
  void set_latency(std::chrono::milliseconds one_way);
  /// On: keep accepting connections and reading both sides, but forward nothing in either
  /// direction (including data already waiting in the latency queue): a peer that went silent
  /// without closing. Applies to existing connections. Off: data read from then on is forwarded
  /// again; what was swallowed meanwhile is lost.
  void set_blackhole(bool on);
  /// On: stop listening, so new connects fail with ECONNREFUSED; established connections carry
  /// on. Off: listen again on the same port. Throws `boost::system::system_error` if it cannot.
  void set_refuse(bool on);
  /// Aborts every current connection: the client side gets a TCP RST (its next read fails with
  /// ECONNRESET), the upstream side is closed.
  void reset_all();

  /// Client connections currently open.
  std::size_t connections() const noexcept;
  /// Client connections accepted since construction.
  std::size_t accepted_total() const noexcept;

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace redlock::test
