// SPDX-License-Identifier: BSL-1.0
#pragma once
// One node connection's byte stream (private to src/): TCP or a Unix socket, with or without TLS.
// It connects (by a race of probes to a suspect node), runs the TLS handshake (and finds out when
// the port speaks plain RESP), and moves bytes; nothing outside this class knows whether TLS is
// on. It decides nothing about the connection's life (core::link_fsm does) and knows nothing of
// requests (detail::multiplexer does). Used on one strand only.

#include "connection_counters.hpp"
#include "node_facts.hpp"
#include "read_poller.hpp"
#include "timer.hpp"
#include "tls_context.hpp"
#include "tls_engine.hpp"
#include <redlock/connection.hpp>
#include <redlock/detail/reply_reader.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace redlock::detail {

/// Who reads through the poller (`stream::read_polled`): told on the strand.
class read_target {
 public:
  virtual void on_stream_read(boost::system::error_code ec, std::size_t n) = 0;

 protected:
  ~read_target() = default;
};

class stream final : private read_poller::reader {
 public:
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;
  using socket_type = boost::asio::generic::stream_protocol::socket;
  using error_code = boost::system::error_code;

  /// A stream on `strand` for `cfg`, which must outlive it. `poller` (optional, on the same
  /// strand): plain connections wait for their replies through it (see `read_polled`).
  stream(const strand_type& strand, const connection_config& cfg, std::shared_ptr<read_poller> poller = nullptr);
  ~stream();
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// Loads the TLS context when the configuration asks for TLS (see `make_tls_context`).
  error_code load_tls(std::string* what);

  // ---- connecting: one attempt at a time ---------------------------------------------------

  /// Resolves the host and connects to its addresses in turn (a Unix socket: to its path). `race`:
  /// to a single address, a fresh connect every `connect_probe_interval` while the earlier ones go
  /// on; the first to complete wins, a refusal ends the race at once (see
  /// `connection_config::connect_probe_interval`). Ends early with `operation_aborted` after
  /// `abort()`.
  boost::asio::awaitable<error_code> connect(bool race);
  /// The TLS handshake on the connected socket (SNI, name or address check). A plain Redis port
  /// takes the ClientHello for the start of an inline command and waits for more, so half-way
  /// through the connect timeout a second connection asks `PING` in plain RESP; an answer ends the
  /// handshake with `tls_not_offered`. Other failures are classified (`tls_certificate_untrusted`,
  /// `tls_name_mismatch`...) with OpenSSL's words in `text`.
  /// `owner` keeps the stream alive while the plain probe runs.
  boost::asio::awaitable<error_code> handshake_tls(std::string& text, std::shared_ptr<void> owner);
  /// The Redis handshake's writes and reads. A plain connection whose first answer is a TLS record
  /// or a reset (a TLS port) fails with `tls_expected`.
  boost::asio::awaitable<std::tuple<error_code, std::size_t>> handshake_write(boost::asio::const_buffer b);
  boost::asio::awaitable<std::tuple<error_code, std::size_t>> handshake_read(boost::asio::mutable_buffer b);
  /// An error of the handshake step in the words TLS gives it (passes others through).
  error_code classify(error_code ec, std::string& text) const;
  /// Over TLS, whether `ec` means the node closed the session before it answered anything.
  bool hung_up_unanswered(const error_code& ec) const noexcept;
  /// Ends the attempt in progress: closes the socket (the step in progress completes with an
  /// error) and stops a race of probes.
  void abort();

  // ---- serving -----------------------------------------------------------------------------

  /// From here on, synchronous writes never block.
  void start_serving();
  /// Reads into `b`; `h(ec, n)` runs on the strand, unless the stream was reset since.
  ///
  /// The completion handlers have no associated executor: the socket lives on the strand's inner
  /// executor, so Asio calls them straight from the scheduler, and they enter the strand here
  /// (inline when it is free). Binding them to the strand instead costs a heap allocation per
  /// completion in Boost 1.81 (strand<any_io_executor>::execute queries its inner executor's
  /// blocking property, and any_executor returns the result through `new`). Over TLS the socket's
  /// bytes go into the session (`tls_engine`), on the strand, and `b` gets what they decrypt to.
  template <class Handler>
  void read_some(boost::asio::mutable_buffer b, Handler&& h) {
    if (tls_) return tls_read_some(b, std::forward<Handler>(h));
    socket_.async_read_some(
        b, [this, g = generation_, h = std::forward<Handler>(h)](error_code ec, std::size_t n) mutable {
          strand_.dispatch(
              [this, g, ec, n, h = std::move(h)]() mutable {
                if (g == generation_) h(ec, n);
              },
              std::allocator<void>{});
        });
  }
  /// Whether reads go through the poller (`read_polled`): a stream given one.
  bool polled() const noexcept { return poller_ != nullptr; }
  /// Reads into `b` once the socket is readable, told by the poller (no read is tried before:
  /// every read finds bytes); `t->on_stream_read(ec, n)` runs on the strand, unless the stream
  /// was reset since. `t` is held weakly: its owner keeps it alive.
  void read_polled(boost::asio::mutable_buffer b, std::shared_ptr<read_target> t);
  /// Puts a write off to the end of the poller's wake-up in progress (`read_poller::defer`, as a
  /// flush) and returns true, when this stream is polled and a wake-up is in progress; false
  /// otherwise. On the strand.
  bool defer_write(std::shared_ptr<read_poller::deferred> w) {
    if (!polled() || !poller_->waking()) return false;
    poller_->defer(std::move(w), true);
    return true;
  }
  /// Writes what it can of `bytes` at once, without blocking, and returns how much; `ec` tells a
  /// failed write. Over TLS all of `bytes` is encrypted, and the records go out as far as the
  /// socket takes them: when they all did, it returns `bytes.size()`; otherwise 0, and the
  /// `write_async` of the same bytes that must follow sends the rest of their records.
  std::size_t write_now(std::string_view bytes, error_code& ec) {
    ec.clear();
    if (tls_) return tls_write_now(bytes, ec);
    const std::size_t n = socket_.write_some(boost::asio::buffer(bytes), ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec.clear();
    return n;
  }
  /// Writes `bytes` whole, asynchronously; they stay valid until the write ends. `writing()` is
  /// true until `done(ec, n)` runs on the strand (not when the stream was reset since: then the
  /// write's end is no news).
  template <class Done>
  void write_async(std::string_view bytes, Done&& done) {
    writing_ = true;
    if (tls_) {
      // The records of `bytes` (those `write_now` made are there already) go out from a buffer of
      // their own, which later steps of the session (a read's alert) do not touch.
      const auto t = tls_;
      const std::size_t staged = std::exchange(tls_staged_, 0);
      error_code ec;
      if (bytes.size() > staged) ec = t->write(bytes.substr(staged));
      if (ec) {
        boost::asio::post(strand_, [this, g = generation_, ec, done = std::forward<Done>(done)]() mutable {
          if (g != generation_) return;
          writing_ = false;
          done(ec, 0);
        });
        return;
      }
      ++tls_writes_;
      boost::asio::async_write(socket_, boost::asio::buffer(t->take_output()),
                               [this, g = generation_, t, total = bytes.size(), done = std::forward<Done>(done)](
                                   error_code wec, std::size_t) mutable {
                                 strand_.dispatch(
                                     [this, g, t, total, wec, done = std::move(done)]() mutable {
                                       t->release_wire();
                                       if (--tls_writes_ == 0) drained_.cancel();
                                       if (g != generation_) return;
                                       writing_ = false;
                                       done(wec, wec ? 0 : total);
                                     },
                                     std::allocator<void>{});
                               });
      return;
    }
    boost::asio::async_write(
        socket_, boost::asio::buffer(bytes),
        [this, g = generation_, done = std::forward<Done>(done)](error_code ec, std::size_t n) mutable {
          strand_.dispatch(
              [this, g, ec, n, done = std::move(done)]() mutable {
                if (g != generation_) return;
                writing_ = false;
                done(ec, n);
              },
              std::allocator<void>{});
        });
  }
  /// An asynchronous write is in progress.
  bool writing() const noexcept { return writing_; }
  /// Closes the socket; whatever is reading or writing ends with an error.
  void close() noexcept;
  /// Closes abortively (RST: unsent bytes are dropped, so that a queue the node never saw cannot
  /// reach it late).
  void abort_close() noexcept;
  /// Closes, then waits until no TLS write refers to the socket any more (a step of its own would
  /// write the last session's records to the socket's next connection).
  boost::asio::awaitable<void> close_and_drain();
  /// Forgets the current connection: closed, TLS layer dropped, pending completions ignored.
  void reset() noexcept;

 private:
  struct probe_race;
  bool on_readable() override;
  // Takes the socket out of the poller's set (while it is still open: see ~stream()).
  void leave_set() noexcept;
  // Leaves the poller's set; a read waiting there completes with operation_aborted (by a post,
  // as Asio's own would), unless the stream is reset before it runs.
  void unpoll() noexcept;
  boost::asio::awaitable<error_code> probe_connect(const boost::asio::ip::tcp::endpoint& ep);
  boost::asio::awaitable<void> probe_plain(std::uint64_t attempt, std::shared_ptr<void> owner);
  boost::asio::awaitable<error_code> tls_handshake_steps(std::shared_ptr<tls_engine> t);

  // ---- TLS reads and writes (see read_some, write_now) ----
  template <class Handler>
  void tls_read_some(boost::asio::mutable_buffer b, Handler&& h) {
    const auto t = tls_;
    if (t->may_read()) {
      // The last socket read brought more than the last read took (or its end): no socket read.
      boost::asio::post(strand_, [this, g = generation_, t, b, h = std::forward<Handler>(h)]() mutable {
        if (g == generation_) tls_deliver(t, b, std::move(h));
      });
      return;
    }
    socket_.async_read_some(t->input_space(), [this, g = generation_, t, b, h = std::forward<Handler>(h)](
                                                  error_code ec, std::size_t n) mutable {
      strand_.dispatch(
          [this, g, t, b, ec, n, h = std::move(h)]() mutable {
            if (g != generation_) return;
            if (ec && ec != boost::asio::error::eof) return h(ec, 0);
            tls_input(*t, ec, n);
            tls_deliver(t, b, std::move(h));
          },
          std::allocator<void>{});
    });
  }
  template <class Handler>
  void tls_deliver(const std::shared_ptr<tls_engine>& t, boost::asio::mutable_buffer b, Handler&& h) {
    error_code ec;
    const std::size_t n = tls_decrypt(*t, b, ec);
    if (n > 0 || ec) return h(ec, n);
    tls_read_some(b, std::forward<Handler>(h));  // a record not whole yet
  }
  // Gives the session a socket read's result (bytes, or the end).
  static void tls_input(tls_engine& t, const error_code& ec, std::size_t n) noexcept;
  // Decrypts into `b`, and sends at once what the session answered (an alert), when no write is
  // in progress (otherwise it goes with the next write).
  std::size_t tls_decrypt(tls_engine& t, boost::asio::mutable_buffer b, error_code& ec);
  std::size_t tls_write_now(std::string_view bytes, error_code& ec);
  // read_polled's wait for the socket, and its delivery of what the session holds already.
  void wait_readable();
  void deliver_buffered();

  strand_type strand_;
  const connection_config& cfg_;
  socket_type socket_;
  std::shared_ptr<boost::asio::ssl::context> tls_ctx_;  // set when TLS is on
  // The current connection's TLS session; a pending socket operation of it keeps its own
  // reference (it reads into, or writes from, the session's buffers).
  std::shared_ptr<tls_engine> tls_;
  std::shared_ptr<probe_race> race_;     // the race of probes in progress, if any
  std::shared_ptr<read_poller> poller_;  // see read_polled()
  std::uint64_t poll_key_ = 0;           // the socket's key in the poller's set, 0 when not in it
  // The read waiting for the poller, if any. Held weakly, as the io_context holds a pending Asio
  // read: destroying a context that will not run again must still free the connection.
  std::weak_ptr<read_target> polled_;
  boost::asio::mutable_buffer polled_buf_;
  std::shared_ptr<socket_type> plain_probe_;  // see handshake_tls()
  redlock::detail::timer nudge_timer_;        // see handshake_tls()
  redlock::detail::timer drained_;            // wakes close_and_drain()
  std::uint64_t generation_ = 0;              // bumped when the stream resets
  std::uint64_t attempt_ = 0;                 // bumped at each connect
  std::size_t tls_writes_ = 0;                // TLS writes not completed yet
  std::size_t tls_staged_ = 0;                // see write_now()
  std::size_t handshake_bytes_read_ = 0;      // bytes of the current attempt's Redis handshake
  bool aborted_ = false;                      // abort() since the attempt began
  bool plain_port_ = false;                   // the TLS port answered PING in plain RESP
  bool writing_ = false;
};

/// Carries out the Redis handshake over `s`: core::handshake_fsm decides everything, this writes
/// and reads. Replies are read with `reader` (nothing else is in flight; push messages are
/// skipped). On success `protocol` is the RESP version; on a refusal `server_text` has the node's
/// words (the password redacted). `facts`: `identify` asks the node about itself.
boost::asio::awaitable<boost::system::error_code> redis_handshake(stream& s, reply_reader& reader,
                                                                  const connection_config& cfg, const logger& log,
                                                                  connection_counters& counters, int& protocol,
                                                                  std::string& server_text, node_facts& facts);

}  // namespace redlock::detail
