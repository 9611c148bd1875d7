// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The read side of one node connection (sans-I/O): the read buffer, the incremental parser and the
/// reply being assembled. The I/O layer reads into `read_space()`, reports the byte count with
/// `commit_read()` and then takes complete replies with `next()` until it needs more bytes. It never
/// looks at the bytes itself, so this class decides alone what a complete reply, a push message
/// and a broken stream are (the connection's read path and its fuzz target share it).

#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace redlock::detail {

class reply_reader {
 public:
  /// What `next()` found.
  enum class status {
    reply,      ///< a complete reply is in `reply()` (valid until the next call to `next()` or `reset()`)
    push,       ///< a complete RESP3 push message (out of band) is in `reply()`: not a reply to a request
    need_more,  ///< every buffered byte was consumed; read more
    error,      ///< the bytes are not valid RESP or break the limits: the stream cannot be trusted
  };

  /// @param min_read_size the least free space `read_space()` offers, so that one read can take
  /// in many pipelined replies.
  explicit reply_reader(resp::parser_limits limits = {}, std::size_t min_read_size = 16 * 1024)
      : parser_(limits), min_read_(std::max<std::size_t>(min_read_size, 1)) {}

  /// Free space at the end of the buffer for the next read. Compacts first and grows only when
  /// unparsed bytes fill the buffer. The parser takes every byte it is given while a reply is
  /// incomplete, so between reads the buffer holds at most what one read brought in after the last
  /// complete reply: the buffer does not grow with the size of replies (the parser's limits bound
  /// what it keeps of a partial reply), and in steady state it never reallocates.
  std::span<char> read_space() {
    if (buf_.size() - end_ < min_read_) {
      if (pos_ > 0) {
        std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
        end_ -= pos_;
        pos_ = 0;
      }
      if (buf_.size() - end_ < min_read_) buf_.resize(std::max(buf_.size() * 2, end_ + min_read_));
    }
    return {buf_.data() + end_, buf_.size() - end_};
  }

  /// `n` bytes were read into the span the last `read_space()` returned (`n` at most its size).
  void commit_read(std::size_t n) noexcept {
    assert(n <= buf_.size() - end_);
    end_ += n;
  }

  /// Parses buffered bytes up to the end of the next complete message. The message found by the
  /// previous call is cleared first (the response keeps its capacity). Errors are sticky until
  /// `reset()`: `ec` is set again on every later call.
  status next(boost::system::error_code& ec) {
    if (ready_) {
      reply_.clear();
      ready_ = false;
    }
    if (error_) {
      ec = error_;
      return status::error;
    }
    if (pos_ < end_) {
      pos_ += parser_.consume(std::string_view{buf_.data() + pos_, end_ - pos_}, reply_, ec);
      if (ec) {
        error_ = ec;
        return status::error;
      }
      if (parser_.done()) {  // its next consume starts the next reply: no reset needed
        ready_ = true;
        if (pos_ == end_) pos_ = end_ = 0;
        const auto* v = resp::reply_value(reply_);
        return (v && v->data_type == resp::type::push) ? status::push : status::reply;
      }
    }
    pos_ = end_ = 0;  // the parser took every byte of the incomplete reply
    return status::need_more;
  }

  /// The message `next()` last found (partial nodes of an incomplete one in between). The caller
  /// may move or clear its nodes.
  resp::response& reply() noexcept { return reply_; }

  /// Forgets buffered bytes, the partial reply and any error (a new stream begins). Keeps the
  /// buffer's and the reply's capacity.
  void reset() noexcept {
    parser_.reset();
    reply_.clear();
    ready_ = false;
    error_ = {};
    pos_ = end_ = 0;
  }

  /// Bytes read but not parsed yet.
  std::size_t buffered() const noexcept { return end_ - pos_; }
  /// Size of the read buffer (for tests: it keeps its capacity).
  std::size_t buffer_capacity() const noexcept { return buf_.size(); }
  /// Capacity of the reply being assembled (for tests: it keeps its capacity).
  std::size_t reply_capacity() const noexcept { return reply_.capacity(); }

 private:
  resp::parser parser_;
  resp::response reply_;
  std::vector<char> buf_;
  std::size_t pos_ = 0;  // first unparsed byte
  std::size_t end_ = 0;  // end of received bytes
  std::size_t min_read_;
  bool ready_ = false;  // reply_ holds a complete message handed out by next()
  boost::system::error_code error_;
};

}  // namespace redlock::detail
