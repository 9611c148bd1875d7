// SPDX-License-Identifier: BSL-1.0
#pragma once
// A client TLS session over buffers of our own (private to src/). OpenSSL makes and opens the
// records; the caller moves the ciphertext between the socket and the buffers. It does no I/O
// and decides nothing about the connection: `detail::stream` drives it on its strand.
//
// Why not `asio::ssl::stream`: Asio runs OpenSSL over a BIO pair and steps its engine through a
// composed operation per read and per write. Each step clears OpenSSL's error queue, copies the
// records through the pair, and costs a completion; a read and a write must not drive the engine
// at once. Here the session's BIO reads the socket's bytes where the socket put them and writes
// the records into a buffer that goes to the socket as it is, reads can go through the read
// poller like a plain socket's, and a write can go out at once (docs/benchmarks.md, "TLS").

#include <boost/asio/buffer.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;

namespace redlock::detail {

class tls_engine {
 public:
  using error_code = boost::system::error_code;

  /// A client session of `ctx`, in connect state. Throws `std::bad_alloc` when OpenSSL cannot
  /// make one.
  explicit tls_engine(SSL_CTX* ctx);
  ~tls_engine();
  tls_engine(const tls_engine&) = delete;
  tls_engine& operator=(const tls_engine&) = delete;

  SSL* native_handle() const noexcept { return ssl_; }

  // ---- ciphertext in ---------------------------------------------------------------------------

  /// Room for the socket's next read (at least a few KiB).
  boost::asio::mutable_buffer input_space();
  /// `n` bytes were read into `input_space()`.
  void commit_input(std::size_t n) noexcept;
  /// The peer closed: once what came is used up, steps fail with `asio::ssl::error::stream_truncated`
  /// (`asio::error::eof` after the peer's close_notify), as Asio's SSL stream reports them.
  void input_ended() noexcept {
    eof_ = true;
    starved_ = false;
  }
  /// Whether `read` may give bytes (or an error it kept) without more ciphertext: false once it
  /// asked for input, until input comes.
  bool may_read() const noexcept { return !starved_ || kept_; }

  // ---- steps -----------------------------------------------------------------------------------
  // Errors are OpenSSL's in Asio's SSL category (`asio::error::get_ssl_category()`), so that the
  // caller classifies them as it would Asio's.

  /// One handshake step: `done` once the handshake is over; neither `done` nor an error: it needs
  /// input (and may have output to send first).
  error_code handshake(bool& done);
  /// Decrypts into `b` what the input holds, up to `b.size()` bytes; 0 and no error: it needs
  /// input. An error after some bytes is kept for the next call.
  std::size_t read(boost::asio::mutable_buffer b, error_code& ec);
  /// Encrypts all of `plaintext` into the output.
  error_code write(std::string_view plaintext);

  // ---- ciphertext out --------------------------------------------------------------------------

  /// The records made and not sent yet, in order (valid until the next step).
  std::string_view output() const noexcept { return {out_.data() + out_begin_, out_.size() - out_begin_}; }
  /// The first `n` bytes of `output()` were sent.
  void consume_output(std::size_t n) noexcept;
  /// Moves `output()` to a buffer of its own for an asynchronous write and returns it: it stays
  /// valid, whatever the next steps add to the output, until `release_wire()` (one at a time).
  std::string_view take_output();
  void release_wire() noexcept { wire_.clear(); }

 private:
  struct bio_method;
  friend struct bio_method;
  error_code failure(int ret);
  error_code end_of_input() const;

  SSL* ssl_ = nullptr;
  std::vector<char> in_;  // [in_begin_, in_end_): ciphertext OpenSSL has not taken
  std::size_t in_begin_ = 0;
  std::size_t in_end_ = 0;
  std::string out_;  // [out_begin_, size): records not sent
  std::size_t out_begin_ = 0;
  std::string wire_;  // see take_output()
  error_code kept_;   // see read()
  bool eof_ = false;
  bool starved_ = true;
};

}  // namespace redlock::detail
