// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The reply queue of one node connection (sans-I/O): requests wait, are written in order, and
/// replies are matched to them first-in first-out. A request that is cancelled or times out after
/// it was written stays in the queue as *abandoned* so that its late reply is read and dropped and
/// the stream never falls out of step. The queue also owns the connection's read side (a
/// `reply_reader`), so that the I/O layer only moves bytes: read into `read_space()`,
/// `commit_read(n)`, `dispatch()`.
///
/// Pub/sub on the same connection (RESP3): `SUBSCRIBE ch` is answered by no normal reply but by a
/// push message, `>3 subscribe ch n`, which Redis emits in order among the replies; a refusal
/// (ACL `-NOPERM`) is a normal error reply. A request queued as `confirmed_by::push` takes such a
/// confirmation as its reply, so the stream stays in step across a SUBSCRIBE; every other push
/// (`message`, client tracking...) is out of band and goes to the I/O layer with its content.

#include <redlock/clock.hpp>
#include <redlock/detail/reply_reader.hpp>
#include <redlock/error.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redlock::detail {

/// What became of one message handed to `multiplexer::on_reply`.
enum class reply_outcome {
  completed,    ///< it was the last reply of a live request, which was completed
  partial,      ///< it belongs to a pipelined request that awaits more replies
  dropped,      ///< it belongs to an abandoned (timed-out or cancelled) request
  unsolicited,  ///< no request was in flight: the stream cannot be trusted any more
  out_of_band,  ///< a push that is no request's reply (see `confirmed_by`); left untouched
};

/// What `multiplexer::dispatch` tells its observer, for counters and logs.
enum class read_event {
  push,         ///< an out-of-band RESP3 push was read; told before it reaches the push handler
  reply,        ///< a reply (or a subscription confirmation that is one) was read; told before it
                ///< reaches its request's completion
  dropped,      ///< the reply belonged to an abandoned request and was dropped
  unsolicited,  ///< a reply came while no request was in flight (dispatch then fails)
};

/// How the reply stream answers a request.
enum class confirmed_by : std::uint8_t {
  reply,  ///< by one reply per command (every command but RESP3 pub/sub's)
  /// by one subscription push (`subscribe`, `unsubscribe`, `psubscribe`, `punsubscribe`,
  /// `ssubscribe`, `sunsubscribe`) or one error reply: a RESP3 `SUBSCRIBE` of one channel and its
  /// kin. Only for a request of exactly one command (a `SUBSCRIBE` of n channels gets n pushes).
  push,
};

/// Whether `msg` is a push whose first element names a subscription change (`subscribe`,
/// `unsubscribe`, `psubscribe`, `punsubscribe`, `ssubscribe`, `sunsubscribe`, as Redis spells
/// them): the push RESP3 emits, in order, as the reply to such a command.
inline bool is_subscription_push(const resp::response& msg) noexcept {
  std::size_t i = 0;
  while (i < msg.size() && (msg[i].depth != 0 || msg[i].data_type == resp::type::attribute)) ++i;
  if (i == msg.size() || msg[i].data_type != resp::type::push || msg[i].aggregate_size == 0) return false;
  // The first element: the next node one level down that is not an attribute describing it (an
  // attribute's own children are deeper still).
  const resp::node* first = nullptr;
  for (std::size_t j = i + 1; j < msg.size() && msg[j].depth > msg[i].depth; ++j) {
    if (msg[j].depth == msg[i].depth + 1 && msg[j].data_type != resp::type::attribute) {
      first = &msg[j];
      break;
    }
  }
  if (first == nullptr ||
      (first->data_type != resp::type::blob_string && first->data_type != resp::type::simple_string))
    return false;
  constexpr std::string_view kinds[] = {"subscribe",    "unsubscribe", "psubscribe",
                                        "punsubscribe", "ssubscribe",  "sunsubscribe"};
  return std::find(std::begin(kinds), std::end(kinds), first->value) != std::end(kinds);
}

/// @tparam Completion what the I/O layer completes a request with (movable). The multiplexer never
/// invokes it: every function that finishes requests hands each one to the functor `complete`
/// as `complete(Completion&&, error_code, resp::response&)`, after the queue is consistent again,
/// so `complete` may re-enter the multiplexer (add requests, cancel others; not read). The
/// response is the request's replies; `complete` may move them out. For a request of one reply it
/// is the read side's own reply storage, passed without a copy: it is cleared after `complete`
/// returns and keeps its capacity unless `complete` moved it away. A request confirmed by a push
/// completes with that push's nodes and no error, or with its error reply and `server_error`.
template <class Completion>
class multiplexer {
 public:
  using clock = redlock::boot_clock;
  using id_type = std::uint64_t;

  /// @param limits bounds on each reply (see `resp::parser_limits`).
  /// @param max_write_batch soft cap on the bytes coalesced into one write (a single larger
  /// request is still written whole).
  explicit multiplexer(resp::parser_limits limits = {}, std::size_t max_write_batch = 256 * 1024)
      : reader_(limits), max_write_batch_(max_write_batch) {}

  // ---- write side ---------------------------------------------------------------------------

  /// Queues a request of `replies` pipelined commands (encoded in `payload`, copied into the
  /// queue's own byte buffer, which keeps its capacity: no allocation per request in steady state)
  /// under `id`, which the caller chose (the I/O layer picks ids before it reaches the queue's
  /// thread, so that a cancellation can name the request right away).
  ///
  /// `stall_at`: once written, the request still unanswered at this time means the stream is
  /// stalled (see `stall_point`); it stays with the request after it is abandoned.
  ///
  /// `by`: how its reply is recognised. `confirmed_by::push` with `replies != 1` is refused with
  /// `error::invalid_argument`: nothing is queued and `c` is dropped without being completed.
  /// The I/O layer must not write a push-confirmed request to a RESP2 connection (it has no
  /// pushes: `SUBSCRIBE` would put it in subscribe mode); see `refuse_waiting`.
  boost::system::error_code add(id_type id, std::string_view payload, std::size_t replies, clock::time_point deadline,
                                Completion c, clock::time_point stall_at = clock::time_point::max(),
                                confirmed_by by = confirmed_by::reply) {
    if (by == confirmed_by::push && replies != 1) return error::invalid_argument;
    // Bytes and entry go in together or not at all: bytes left without their entry would be
    // written ahead of the next request, and their replies handed to the requests behind them.
    const std::size_t before = waiting_bytes_.size();
    waiting_bytes_.append(payload);
    try {
      // Filled in place, every field: a reused slot keeps the last request's (pop_front resets
      // only its completion), and a stale `error_reply` or `push_confirmed` would mislabel this one.
      entry& e = queue_.next_slot();
      e.id = id;
      e.size = payload.size();
      e.replies_left = replies;
      e.deadline = deadline;
      e.stall_at = stall_at;
      e.partial = false;
      e.push_confirmed = by == confirmed_by::push;
      e.error_reply = false;
      e.timed_out = false;
      e.completion.emplace(std::move(c));
      queue_.commit_slot();
    } catch (...) {
      waiting_bytes_.resize(before);
      throw;
    }
    return {};
  }

  /// Whether a written request timed out and its reply is still owed: the stream is late, and
  /// anything queued now would wait behind it.
  bool overdue() const noexcept {
    for (std::size_t i = 0; i < written_; ++i) {
      if (queue_[i].timed_out) return true;
    }
    return false;
  }

  /// The earliest `stall_at` of the written requests whose replies are still due (abandoned ones
  /// included: an abandoned request's reply is as overdue as a live one's), or
  /// `clock::time_point::max()`. Replies come in order, so when it has passed, nothing written
  /// since can have been answered either: the I/O layer replaces the connection.
  clock::time_point stall_point() const noexcept {
    auto t = clock::time_point::max();
    for (std::size_t i = 0; i < written_; ++i) t = std::min(t, queue_[i].stall_at);
    return t;
  }

  bool has_waiting() const noexcept { return queue_.size() > written_; }
  std::size_t waiting() const noexcept { return queue_.size() - written_; }
  /// Written requests whose replies are still due, abandoned ones included.
  std::size_t in_flight() const noexcept { return written_; }
  bool empty() const noexcept { return queue_.empty(); }

  /// Moves waiting requests into flight, in order, and returns their bytes to write in one go
  /// (valid until the next call: do not call again before that write finished). They count as
  /// written from now on: a reply can be read before the write's completion is seen, and after a
  /// failed write the connection is reset anyway.
  std::string_view prepare_write() {
    write_buffer_.clear();
    std::size_t bytes = 0;
    std::size_t end = written_;
    while (end < queue_.size() && (bytes == 0 || bytes < max_write_batch_)) bytes += queue_[end++].size;
    if (bytes == waiting_bytes_.size()) {
      write_buffer_.swap(waiting_bytes_);  // the usual case: everything waiting, no copy
    } else {
      write_buffer_.assign(waiting_bytes_, 0, bytes);
      waiting_bytes_.erase(0, bytes);
    }
    written_ = end;
    return write_buffer_;
  }

  // ---- read side ----------------------------------------------------------------------------

  /// Free space for the next read (see `reply_reader::read_space`).
  std::span<char> read_space() { return reader_.read_space(); }
  /// `n` bytes were read into the last `read_space()`.
  void commit_read(std::size_t n) noexcept { reader_.commit_read(n); }

  /// Routes every complete message buffered: replies, and pushes that confirm the oldest request
  /// in flight (see `confirmed_by`), to their requests (`on_reply`); every other push to
  /// `push(resp::response&)`, which may read or move its nodes (the read side's own storage,
  /// cleared after) and, like `complete`, re-enter the queue but not read. `note(read_event)` is
  /// told about each message (before its completion or `push` runs). Returns the parser's error
  /// for bytes that are not valid RESP, `error::protocol_error` for a reply nobody asked for (both
  /// mean: drop the connection), or nothing once it needs more bytes.
  template <class F, class N, class P>
  boost::system::error_code dispatch(F&& complete, N&& note, P&& push) {
    for (;;) {
      boost::system::error_code ec;
      switch (reader_.next(ec)) {
        case reply_reader::status::need_more:
          return {};
        case reply_reader::status::error:
          return ec;
        case reply_reader::status::push:
          if (!confirms_front(reader_.reply())) {
            note(read_event::push);
            push(reader_.reply());
            break;
          }
          [[fallthrough]];  // the oldest request's reply
        case reply_reader::status::reply:
          note(read_event::reply);
          switch (route(reader_.reply(), complete)) {
            case reply_outcome::unsolicited:
              note(read_event::unsolicited);
              return error::protocol_error;
            case reply_outcome::dropped:
              note(read_event::dropped);
              break;
            case reply_outcome::completed:
            case reply_outcome::partial:
            case reply_outcome::out_of_band:  // not for a message confirms_front() accepted
              break;
          }
          break;
      }
    }
  }

  /// Forgets buffered bytes and any partial reply (the stream was reset).
  void reset_read() noexcept { reader_.reset(); }

  // ---- memory -------------------------------------------------------------------------------

  /// Entries the queue keeps room for, and the byte buffers' sizes, that `trim` leaves alone.
  static constexpr std::size_t kept_entries = 64;
  static constexpr std::size_t kept_buffer_bytes = 64 * 1024;
  /// Gives back what a burst left: with no request queued, the queue's room beyond `kept_entries`
  /// and byte buffers beyond `kept_buffer_bytes` are freed (the next burst grows them again; steady
  /// traffic below those sizes never reaches this, so it still allocates nothing per request).
  /// Only between writes: the bytes of the last `prepare_write` must no longer be in use.
  void trim() {
    if (!queue_.empty()) return;
    queue_.release_above(kept_entries);
    if (waiting_bytes_.capacity() > kept_buffer_bytes) std::string{}.swap(waiting_bytes_);
    if (write_buffer_.capacity() > kept_buffer_bytes) std::string{}.swap(write_buffer_);
  }
  /// The queue's room, in entries, and the byte buffers' capacity (for tests).
  std::size_t queue_capacity() const noexcept { return queue_.capacity(); }
  std::size_t bytes_capacity() const noexcept { return waiting_bytes_.capacity() + write_buffer_.capacity(); }

  /// The read side itself, for a handshake that reads replies before any request is queued.
  reply_reader& reader() noexcept { return reader_; }

  /// Routes one complete top-level message to the oldest request in flight: a reply always, a
  /// push only when it confirms that request (`confirmed_by::push` and `is_subscription_push`).
  /// Any other push is `out_of_band` and left untouched; otherwise `reply` is consumed: it is
  /// empty when this returns (with its capacity, unless `complete` moved it). A push-confirmed
  /// request takes an error reply (a refusal) as its reply as well, and any other normal reply too,
  /// so that the stream stays in step whatever the node answers.
  template <class F>
  reply_outcome on_reply(resp::response& reply, F&& complete) {
    if (const auto* v = resp::reply_value(reply); v && v->data_type == resp::type::push && !confirms_front(reply))
      return reply_outcome::out_of_band;
    return route(reply, complete);
  }

 private:
  // on_reply for a message already known to be the oldest request's: dispatch() has told replies
  // from pushes (the reader did), so the per-reply path does not look at the message again.
  template <class F>
  reply_outcome route(resp::response& reply, F&& complete) {
    if (written_ == 0) return reply_outcome::unsolicited;
    entry& e = queue_.front();
    if (!e.completion) {  // abandoned: read and drop
      if (--e.replies_left == 0) pop_front();
      reply.clear();
      return reply_outcome::dropped;
    }
    if (const auto* v = resp::reply_value(reply); v && resp::is_error(v->data_type)) e.error_reply = true;
    if (e.replies_left == 1 && !e.partial) {
      // The whole response is `reply`: hand it over where it lies.
      Completion c = std::move(*e.completion);
      const bool failed = e.error_reply;
      pop_front();
      complete(std::move(c), failed ? make_error_code(error::server_error) : boost::system::error_code{}, reply);
      reply.clear();
      return reply_outcome::completed;
    }
    // Only the oldest request can be partly answered: its replies so far gather in `merged_`,
    // whose buffer is kept from one pipelined request to the next (a vote with TIME behind it is
    // one such request per master and round).
    if (!e.partial) {
      merged_.clear();
      e.partial = true;
    }
    merged_.insert(merged_.end(), std::make_move_iterator(reply.begin()), std::make_move_iterator(reply.end()));
    reply.clear();
    if (--e.replies_left != 0) return reply_outcome::partial;
    Completion c = std::move(*e.completion);
    const bool failed = e.error_reply;
    pop_front();
    complete(std::move(c), failed ? make_error_code(error::server_error) : boost::system::error_code{}, merged_);
    merged_.clear();
    return reply_outcome::completed;
  }

 public:
  // ---- finishing early ----------------------------------------------------------------------

  /// Cancels request `id` with `ec`. A waiting request is removed. A written one is abandoned
  /// (its reply will be dropped) only if `allow_after_write`: once written, the node may execute
  /// it, so a cancellation that promises "no effect" (Asio's total) cannot be honoured.
  /// Returns true if the request was found and finished.
  template <class F>
  bool cancel(id_type id, bool allow_after_write, boost::system::error_code ec, F&& complete) {
    std::size_t offset = 0;  // of the request's bytes in waiting_bytes_
    for (std::size_t i = written_; i < queue_.size(); offset += queue_[i].size, ++i) {
      if (queue_[i].id == id) {
        Completion c = remove_waiting(i, offset);
        resp::response none;
        complete(std::move(c), ec, none);
        return true;
      }
    }
    if (!allow_after_write) return false;
    for (std::size_t i = 0; i < written_; ++i) {
      entry& e = queue_[i];
      if (e.id == id && e.completion) {
        Completion c = abandon(e);
        resp::response none;
        complete(std::move(c), ec, none);
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
    std::vector<Completion> expired;  // no allocation when nothing expires
    auto next = clock::time_point::max();
    take_waiting_if(
        [&](const entry& e) {
          if (e.deadline <= now) return true;
          next = std::min(next, e.deadline);
          return false;
        },
        expired);
    for (std::size_t i = 0; i < written_; ++i) {
      entry& e = queue_[i];
      if (!e.completion) continue;
      if (e.deadline <= now) {
        e.timed_out = true;
        expired.push_back(abandon(e));
      } else {
        next = std::min(next, e.deadline);
      }
    }
    for (Completion& c : expired) {
      resp::response none;
      complete(std::move(c), ec, none);
    }
    return next;
  }

  /// Finishes with `ec` every waiting request confirmed by `by`: they leave the queue and never
  /// reach the wire (the I/O layer found a RESP2 connection, which cannot carry a push-confirmed
  /// request). Written requests are not touched. Returns how many were finished.
  template <class F>
  std::size_t refuse_waiting(confirmed_by by, boost::system::error_code ec, F&& complete) {
    std::vector<Completion> refused;  // no allocation when there is none
    take_waiting_if([&](const entry& e) { return e.push_confirmed == (by == confirmed_by::push); }, refused);
    for (Completion& c : refused) {
      resp::response none;
      complete(std::move(c), ec, none);
    }
    return refused.size();
  }

  /// Finishes every request (the connection is gone): written ones with `written_ec` (their
  /// outcome is unknown), waiting ones with `waiting_ec` (never sent). The queue is empty after.
  /// The read side is not touched (see `reset_read`).
  template <class F>
  void fail_all(boost::system::error_code written_ec, boost::system::error_code waiting_ec, F&& complete) {
    ring all;  // takes the storage: `complete` may add requests to the emptied queue
    all.swap(queue_);
    const std::size_t written = written_;
    written_ = 0;
    waiting_bytes_.clear();
    for (std::size_t i = 0; i < all.size(); ++i) {
      entry& e = all[i];
      if (!e.completion) continue;
      resp::response none;
      complete(std::move(*e.completion), i < written ? written_ec : waiting_ec, none);
    }
  }

 private:
  struct entry {
    id_type id = 0;
    std::size_t size = 0;  // bytes of its payload (in waiting_bytes_ while it waits)
    std::size_t replies_left = 0;
    clock::time_point deadline{};
    clock::time_point stall_at = clock::time_point::max();
    bool partial = false;         // some of its replies are in merged_ (the oldest request only)
    bool push_confirmed = false;  // confirmed_by::push
    bool error_reply = false;
    bool timed_out = false;                // abandoned because its deadline passed (not cancelled)
    std::optional<Completion> completion;  // empty once abandoned
  };

  // The queue's storage: a ring of entries that grows by doubling, so that a connection's steady
  // state allocates nothing (a deque allocates a block every few requests); it shrinks only when
  // emptied after a burst (`trim`).
  class ring {
   public:
    std::size_t size() const noexcept { return count_; }
    bool empty() const noexcept { return count_ == 0; }
    entry& operator[](std::size_t i) noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    const entry& operator[](std::size_t i) const noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    entry& front() noexcept { return (*this)[0]; }
    const entry& front() const noexcept { return (*this)[0]; }

    // The slot after the last entry, to be filled and then taken by `commit_slot` (a throw in
    // between leaves the ring as it was: a free slot's completion is always empty).
    entry& next_slot() {
      if (count_ == slots_.size()) grow();
      return (*this)[count_];
    }
    void commit_slot() noexcept { ++count_; }
    // Frees the oldest entry's completion; its other fields stay until the slot is filled again.
    void pop_front() noexcept {
      front().completion.reset();
      head_ = (head_ + 1) & (slots_.size() - 1);
      --count_;
    }
    // Keeps the first `n` entries.
    void truncate(std::size_t n) {
      while (count_ > n) {
        (*this)[count_ - 1] = entry{};
        --count_;
      }
    }
    // Removes entry `i`, keeping the order of the others.
    void erase(std::size_t i) {
      for (; i + 1 < count_; ++i) (*this)[i] = std::move((*this)[i + 1]);
      (*this)[count_ - 1] = entry{};
      --count_;
    }
    std::size_t capacity() const noexcept { return slots_.size(); }
    // Frees the storage of an empty ring larger than `n` entries.
    void release_above(std::size_t n) noexcept {
      if (count_ == 0 && slots_.size() > n) {
        std::vector<entry>{}.swap(slots_);
        head_ = 0;
      }
    }
    void swap(ring& other) noexcept {
      slots_.swap(other.slots_);
      std::swap(head_, other.head_);
      std::swap(count_, other.count_);
    }

   private:
    void grow() {
      std::vector<entry> bigger(slots_.empty() ? 8 : slots_.size() * 2);  // a power of two
      for (std::size_t i = 0; i < count_; ++i) bigger[i] = std::move((*this)[i]);
      slots_.swap(bigger);
      head_ = 0;
    }

    std::vector<entry> slots_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
  };

  void pop_front() {
    queue_.pop_front();
    --written_;
  }

  // Whether the push `msg` is the reply of the oldest request in flight.
  bool confirms_front(const resp::response& msg) const noexcept {
    return written_ != 0 && queue_.front().push_confirmed && is_subscription_push(msg);
  }

  // Moves the completions of the waiting requests that `pred` picks to `out`, in order; they leave
  // the queue and their bytes leave waiting_bytes_, in one pass that keeps the others in order
  // (removing them one by one would be quadratic). `pred` sees every waiting request once, in order.
  template <class Pred>
  void take_waiting_if(Pred&& pred, std::vector<Completion>& out) {
    std::size_t keep = written_;
    std::size_t offset = 0;
    std::string kept_bytes;
    bool removed = false;
    for (std::size_t i = written_; i < queue_.size(); ++i) {
      entry& e = queue_[i];
      const std::size_t size = e.size;
      if (pred(static_cast<const entry&>(e))) {
        if (!removed) kept_bytes.assign(waiting_bytes_, 0, offset);
        removed = true;
        out.push_back(std::move(*e.completion));
      } else {
        if (removed) kept_bytes.append(waiting_bytes_, offset, size);
        if (keep != i) queue_[keep] = std::move(e);
        ++keep;
      }
      offset += size;
    }
    if (removed) {
      queue_.truncate(keep);
      waiting_bytes_.swap(kept_bytes);
    }
  }

  // Removes the waiting request at `i`, whose bytes start at `offset` in waiting_bytes_.
  Completion remove_waiting(std::size_t i, std::size_t offset) {
    waiting_bytes_.erase(offset, queue_[i].size);
    Completion c = std::move(*queue_[i].completion);
    queue_.erase(i);
    return c;
  }

  static Completion abandon(entry& e) {
    Completion c = std::move(*e.completion);
    e.completion.reset();
    return c;
  }

  reply_reader reader_;
  // One queue in request order: [0, written_) are in flight (written, replies due), the rest wait.
  // One queue rather than two, so that writing moves nothing.
  ring queue_;
  std::size_t written_ = 0;
  std::string waiting_bytes_;  // the payloads of the waiting requests, in order
  std::string write_buffer_;
  std::size_t max_write_batch_;
  resp::response merged_;  // the replies so far of the oldest request, when it awaits more
};

}  // namespace redlock::detail
