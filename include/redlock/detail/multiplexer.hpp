#pragma once
/// @file
/// The reply queue of one node connection (sans-I/O): requests wait, are written in order, and
/// replies are matched to them first-in first-out. A request that is cancelled or times out after
/// it was written stays in the queue as *abandoned* so that its late reply is read and dropped and
/// the stream never falls out of step.

#include <redlock/error.hpp>
#include <redlock/resp/node.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace redlock::detail {

/// @tparam Completion what the I/O layer completes a request with (movable). The multiplexer never
/// invokes it: every function that finishes requests hands each one to the functor `complete`
/// as `complete(Completion&&, error_code, resp::response&&)`, after the queue is consistent again,
/// so `complete` may re-enter the multiplexer.
/// What became of one reply handed to `multiplexer::on_reply`.
enum class reply_outcome {
  completed,    ///< it was the last reply of a live request, which was completed
  partial,      ///< it belongs to a pipelined request that awaits more replies
  dropped,      ///< it belongs to an abandoned (timed-out or cancelled) request
  unsolicited,  ///< no request was in flight: the stream cannot be trusted any more
};

template <class Completion>
class multiplexer {
 public:
  using clock = std::chrono::steady_clock;
  using id_type = std::uint64_t;

  /// @param max_write_batch soft cap on the bytes coalesced into one write (a single larger
  /// request is still written whole).
  explicit multiplexer(std::size_t max_write_batch = 256 * 1024) noexcept : max_write_batch_(max_write_batch) {}

  /// Queues a request of `replies` pipelined commands (encoded in `payload`) under `id`, which
  /// the caller chose (the I/O layer picks ids before it reaches the queue's thread, so that a
  /// cancellation can name the request right away).
  void add(id_type id, std::string payload, std::size_t replies, clock::time_point deadline, Completion c) {
    waiting_.push_back(entry{id, std::move(payload), replies, deadline, {}, false, std::move(c)});
  }

  bool has_waiting() const noexcept { return !waiting_.empty(); }
  std::size_t waiting() const noexcept { return waiting_.size(); }
  /// Written requests whose replies are still due, abandoned ones included.
  std::size_t in_flight() const noexcept { return in_flight_.size(); }
  bool empty() const noexcept { return waiting_.empty() && in_flight_.empty(); }

  /// Moves waiting requests into flight, in order, and returns their bytes to write in one go
  /// (valid until the next call). They count as written from now on: a reply can be read before
  /// the write's completion is seen, and after a failed write the connection is reset anyway.
  std::string_view prepare_write() {
    write_buffer_.clear();
    while (!waiting_.empty() && (write_buffer_.empty() || write_buffer_.size() < max_write_batch_)) {
      entry& e = waiting_.front();
      write_buffer_ += e.payload;
      std::string{}.swap(e.payload);  // the bytes live in the write buffer now
      in_flight_.push_back(std::move(e));
      waiting_.pop_front();
    }
    return write_buffer_;
  }

  /// Routes one complete top-level reply to the oldest request in flight (consuming `reply`).
  template <class F>
  reply_outcome on_reply(resp::response& reply, F&& complete) {
    if (in_flight_.empty()) return reply_outcome::unsolicited;
    entry& e = in_flight_.front();
    if (!e.completion) {  // abandoned: read and drop
      if (--e.replies_left == 0) in_flight_.pop_front();
      reply.clear();
      return reply_outcome::dropped;
    }
    if (const auto* v = resp::reply_value(reply); v && resp::is_error(v->data_type)) e.error_reply = true;
    if (e.response.empty()) {
      e.response.swap(reply);
    } else {
      e.response.insert(e.response.end(), std::make_move_iterator(reply.begin()),
                        std::make_move_iterator(reply.end()));
    }
    reply.clear();
    if (--e.replies_left != 0) return reply_outcome::partial;
    Completion c = std::move(*e.completion);
    resp::response r = std::move(e.response);
    const bool failed = e.error_reply;
    in_flight_.pop_front();
    complete(std::move(c), failed ? make_error_code(error::server_error) : boost::system::error_code{},
             std::move(r));
    return reply_outcome::completed;
  }

  /// Cancels request `id` with `ec`. A waiting request is removed. A written one is abandoned
  /// (its reply will be dropped) only if `allow_after_write`: once written, the node may execute
  /// it, so a cancellation that promises "no effect" (Asio's total) cannot be honoured.
  /// Returns true if the request was found and finished.
  template <class F>
  bool cancel(id_type id, bool allow_after_write, boost::system::error_code ec, F&& complete) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (it->id == id) {
        Completion c = std::move(*it->completion);
        waiting_.erase(it);
        complete(std::move(c), ec, resp::response{});
        return true;
      }
    }
    if (!allow_after_write) return false;
    for (entry& e : in_flight_) {
      if (e.id == id && e.completion) {
        Completion c = abandon(e);
        complete(std::move(c), ec, resp::response{});
        return true;
      }
    }
    return false;
  }

  /// Finishes with `ec` every request whose deadline is at or before `now` (waiting ones are
  /// removed, written ones abandoned). Returns the earliest deadline still pending, or
  /// `clock::time_point::max()`.
  template <class F>
  clock::time_point expire(clock::time_point now, boost::system::error_code ec, F&& complete) {
    // Collect first, complete after: `complete` may add requests.
    std::deque<Completion> expired;
    auto next = clock::time_point::max();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->deadline <= now) {
        expired.push_back(std::move(*it->completion));
        it = waiting_.erase(it);
      } else {
        next = std::min(next, it->deadline);
        ++it;
      }
    }
    for (entry& e : in_flight_) {
      if (!e.completion) continue;
      if (e.deadline <= now) {
        expired.push_back(abandon(e));
      } else {
        next = std::min(next, e.deadline);
      }
    }
    for (Completion& c : expired) complete(std::move(c), ec, resp::response{});
    return next;
  }

  /// Finishes every request (the connection is gone): written ones with `written_ec` (their
  /// outcome is unknown), waiting ones with `waiting_ec` (never sent). The queue is empty after.
  template <class F>
  void fail_all(boost::system::error_code written_ec, boost::system::error_code waiting_ec, F&& complete) {
    auto in_flight = std::move(in_flight_);
    auto waiting = std::move(waiting_);
    in_flight_.clear();
    waiting_.clear();
    for (entry& e : in_flight) {
      if (e.completion) complete(std::move(*e.completion), written_ec, resp::response{});
    }
    for (entry& e : waiting) complete(std::move(*e.completion), waiting_ec, resp::response{});
  }

 private:
  struct entry {
    id_type id;
    std::string payload;
    std::size_t replies_left;
    clock::time_point deadline;
    resp::response response;
    bool error_reply;
    std::optional<Completion> completion;  // empty once abandoned
  };

  static Completion abandon(entry& e) {
    Completion c = std::move(*e.completion);
    e.completion.reset();
    resp::response{}.swap(e.response);
    return c;
  }

  std::deque<entry> waiting_;
  std::deque<entry> in_flight_;
  std::string write_buffer_;
  std::size_t max_write_batch_;
};

}  // namespace redlock::detail
