// SPDX-License-Identifier: BSL-1.0
#include "tls_engine.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <utility>

namespace redlock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// The room a socket read gets: a whole record of the largest size fits (16 KiB of data plus its
// header and tag), so a large reply needs no more reads than its records.
constexpr std::size_t read_room = 17 * 1024;

// OpenSSL reports into a thread's error queue, and a step's result is read from that queue: it
// must be empty before the step. Asio clears it before every step, which costs more than the
// step's record work on small records; a look is cheap, and it is only cleared when something
// (another library on this thread, say) left an error there.
void clear_errors() noexcept {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

}  // namespace

// The session's BIO: reads take the socket's bytes from `in_`, writes append records to `out_`.
// No exception leaves it (OpenSSL is C): a failed allocation fails the write.
struct tls_engine::bio_method {
  static tls_engine& of(BIO* b) noexcept { return *static_cast<tls_engine*>(BIO_get_data(b)); }

  static int read(BIO* b, char* to, int len) noexcept {
    BIO_clear_retry_flags(b);
    tls_engine& e = of(b);
    const std::size_t have = e.in_end_ - e.in_begin_;
    if (have == 0 || len <= 0) {
      // Nothing yet: OpenSSL asks again once the socket brings more (end of input is reported by
      // the engine itself, as Asio's stream does: see end_of_input()).
      BIO_set_retry_read(b);
      return -1;
    }
    const std::size_t n = std::min(have, static_cast<std::size_t>(len));
    std::memcpy(to, e.in_.data() + e.in_begin_, n);
    e.in_begin_ += n;
    return static_cast<int>(n);
  }

  static int write(BIO* b, const char* from, int len) noexcept {
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    try {
      of(b).out_.append(from, static_cast<std::size_t>(len));
    } catch (...) {
      return -1;
    }
    return len;
  }

  static long ctrl(BIO* b, int cmd, long, void*) noexcept {
    switch (cmd) {
      case BIO_CTRL_FLUSH:
        return 1;  // the caller sends the output
      case BIO_CTRL_PENDING: {
        const tls_engine& e = of(b);
        return static_cast<long>(e.in_end_ - e.in_begin_);
      }
      default:
        return 0;
    }
  }

  static int create(BIO* b) noexcept {
    BIO_set_init(b, 1);
    return 1;
  }

  // Made once, never freed (OpenSSL keeps it for the process's life, as its own methods).
  static const BIO_METHOD* get() {
    static const BIO_METHOD* const m = [] {
      BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "redlock-asio");
      if (made == nullptr) return static_cast<BIO_METHOD*>(nullptr);
      BIO_meth_set_read(made, &read);
      BIO_meth_set_write(made, &write);
      BIO_meth_set_ctrl(made, &ctrl);
      BIO_meth_set_create(made, &create);
      return made;
    }();
    return m;
  }
};

tls_engine::tls_engine(SSL_CTX* ctx) {
  const BIO_METHOD* method = bio_method::get();
  ssl_ = method ? SSL_new(ctx) : nullptr;
  BIO* bio = ssl_ ? BIO_new(method) : nullptr;
  if (bio == nullptr) {
    if (ssl_) SSL_free(ssl_);
    ERR_clear_error();
    throw std::bad_alloc{};
  }
  BIO_set_data(bio, this);
  SSL_set_bio(ssl_, bio, bio);  // one reference, taken by the session
  SSL_set_connect_state(ssl_);
  // A node connection lives long: OpenSSL keeps its record buffers (about 34 KB) rather than
  // freeing them whenever they are empty, and reads ahead whatever whole records have come.
  SSL_clear_mode(ssl_, SSL_MODE_RELEASE_BUFFERS);
  SSL_set_read_ahead(ssl_, 1);
  in_.resize(read_room);
}

tls_engine::~tls_engine() { SSL_free(ssl_); }

asio::mutable_buffer tls_engine::input_space() {
  if (in_begin_ == in_end_) {
    in_begin_ = in_end_ = 0;
  } else if (in_.size() - in_end_ < read_room / 4) {
    // Little room left: what OpenSSL has not taken moves to the front, or the buffer grows.
    std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
    if (in_.size() - in_end_ < read_room / 4) in_.resize(in_.size() + read_room);
  }
  return asio::buffer(in_.data() + in_end_, in_.size() - in_end_);
}

void tls_engine::commit_input(std::size_t n) noexcept {
  in_end_ += std::min(n, in_.size() - in_end_);
  if (n > 0) starved_ = false;
}

void tls_engine::consume_output(std::size_t n) noexcept {
  out_begin_ += std::min(n, out_.size() - out_begin_);
  if (out_begin_ == out_.size()) {
    out_.clear();  // keeps its capacity
    out_begin_ = 0;
  }
}

std::string_view tls_engine::take_output() {
  if (out_begin_ == 0) {
    wire_.swap(out_);  // both keep their capacity: the next records go where the last ones went
  } else {
    wire_.assign(out_, out_begin_);
  }
  out_.clear();
  out_begin_ = 0;
  return wire_;
}

error_code tls_engine::end_of_input() const {
  if ((SSL_get_shutdown(ssl_) & SSL_RECEIVED_SHUTDOWN) != 0) return asio::error::eof;
  return asio::ssl::error::stream_truncated;
}

// What a step that returned `ret` (not a success) means: no error when it needs input.
error_code tls_engine::failure(int ret) {
  const int what = SSL_get_error(ssl_, ret);
  switch (what) {
    case SSL_ERROR_WANT_READ:
      starved_ = true;
      if (eof_ && in_begin_ == in_end_) return end_of_input();
      return {};
    case SSL_ERROR_ZERO_RETURN:
      return asio::error::eof;  // the peer's close_notify
    case SSL_ERROR_SSL:
    case SSL_ERROR_SYSCALL: {
      const auto code = ERR_get_error();  // the first error of the step, as Asio reports it
      ERR_clear_error();
      if (code == 0) return asio::ssl::error::unspecified_system_error;
      return {static_cast<int>(code), asio::error::get_ssl_category()};
    }
    default:
      // WANT_WRITE cannot happen (the BIO takes every write); others belong to features the
      // session does not use.
      return asio::ssl::error::unspecified_system_error;
  }
}

error_code tls_engine::handshake(bool& done) {
  clear_errors();
  const int r = SSL_do_handshake(ssl_);
  done = r == 1;
  return done ? error_code{} : failure(r);
}

std::size_t tls_engine::read(asio::mutable_buffer b, error_code& ec) {
  ec.clear();
  if (kept_) {
    ec = std::exchange(kept_, {});
    return 0;
  }
  auto* to = static_cast<char*>(b.data());
  std::size_t got = 0;
  while (got < b.size()) {
    clear_errors();
    std::size_t n = 0;
    if (SSL_read_ex(ssl_, to + got, b.size() - got, &n) == 1) {
      got += n;
      if (in_begin_ == in_end_ && !eof_ && SSL_has_pending(ssl_) == 0) {
        // All that came is read: the next call would only fail for want of input.
        starved_ = true;
        break;
      }
      continue;
    }
    ec = failure(0);
    break;
  }
  if (got > 0 && ec) kept_ = std::exchange(ec, {});
  return got;
}

error_code tls_engine::write(std::string_view plaintext) {
  while (!plaintext.empty()) {
    clear_errors();
    std::size_t n = 0;
    const std::size_t chunk = std::min(plaintext.size(), static_cast<std::size_t>(INT_MAX));
    if (SSL_write_ex(ssl_, plaintext.data(), chunk, &n) != 1) {
      const error_code ec = failure(0);
      return ec ? ec : asio::ssl::error::unspecified_system_error;
    }
    plaintext.remove_prefix(n);
  }
  return {};
}

}  // namespace redlock::detail
