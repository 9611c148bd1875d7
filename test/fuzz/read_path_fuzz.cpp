// SPDX-License-Identifier: BSL-1.0
// libFuzzer target for a connection's read path, without a socket: the bytes a node sends go
// through the real read path of detail::multiplexer (read_space/commit_read/dispatch, with its
// reply_reader: complete top-level replies only, RESP3 pushes out of band unless one confirms the
// oldest request's subscription, an unsolicited reply or a parser error fails the stream) exactly
// as src/connection.cpp drives it, while the same input scripts what callers do in between: add
// requests (push-confirmed ones too), write them, cancel them, let deadlines pass, refuse the
// waiting subscriptions as on a RESP2 connection, break the socket, re-enter from a completion.
//
// A small model of the queue's documented semantics predicts every outcome, so the fuzzer checks
// more than "no crash": each request completes exactly once, with exactly its replies, in the
// order the requests were written, and abandoned requests swallow their late replies silently.
//
// Input layout (missing bytes read as 0):
//   byte 0        bits 0-2: initial requests - 1 (1..8), written at once;
//                 bits 3-7: soft cap of one write batch (1 + 16 * value bytes)
//   n bytes       one per initial request: replies 1 + b % 3, deadline (see deadline_after)
//   1 byte        L, the length of the script
//   L bytes       the script: one op per byte, some followed by an argument byte (see run_op)
//   the rest      the bytes the node sends, delivered in chunks the script chooses; what is
//                 left when the script ends arrives in one last read, then the connection closes.

#include <redlock/detail/multiplexer.hpp>
#include <redlock/error.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using boost::system::error_code;
using redlock::detail::confirmed_by;
using redlock::detail::read_event;
using redlock::detail::reply_outcome;
using redlock::resp::node;
using redlock::resp::parser_limits;
using redlock::resp::response;
using redlock::resp::type;
using clock_type = redlock::clock;
using id_type = std::uint64_t;

// Small limits so that short inputs reach them.
constexpr parser_limits limits{
    .max_bulk_length = 256,
    .max_line_length = 64,
    .max_depth = 4,
    .max_aggregate_size = 16,
    .max_nodes = 64,
};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// What the multiplexer completes: just the request's id, so that every completion can be traced.
struct completion {
  id_type id;
};

// Reads the input front to back; past the end every byte is 0, so any input is a valid program.
struct reader {
  std::string_view data;
  std::size_t pos = 0;

  std::uint8_t byte() { return pos < data.size() ? static_cast<std::uint8_t>(data[pos++]) : 0; }
  std::string_view take(std::size_t n) {
    n = std::min(n, data.size() - std::min(pos, data.size()));
    const auto out = data.substr(std::min(pos, data.size()), n);
    pos += n;
    return out;
  }
  bool at_end() const { return pos >= data.size(); }
};

// The top-level value of one reply: its first depth-0 node that is not an attribute (attributes
// at depth 0 only describe the value that follows them).
const node* value_of(const response& reply) {
  for (const node& n : reply) {
    if (n.depth == 0 && n.data_type != type::attribute) return &n;
  }
  return nullptr;
}

// Replies a response holds: one per top-level value.
std::size_t replies_in(const response& r) {
  return static_cast<std::size_t>(
      std::count_if(r.begin(), r.end(), [](const node& n) { return n.depth == 0 && n.data_type != type::attribute; }));
}

bool is_push(const response& reply) {
  const node* v = value_of(reply);
  return v != nullptr && v->data_type == type::push;
}

// The model's own reading of "a push that confirms a subscription change": its first element (the
// first node one level down that is not an attribute) is one of these strings.
bool is_confirmation(const response& reply) {
  std::size_t i = 0;
  while (i < reply.size() && (reply[i].depth != 0 || reply[i].data_type == type::attribute)) ++i;
  if (i == reply.size() || reply[i].data_type != type::push) return false;
  for (std::size_t j = i + 1; j < reply.size() && reply[j].depth > 0; ++j) {
    if (reply[j].depth != 1 || reply[j].data_type == type::attribute) continue;
    if (reply[j].data_type != type::blob_string && reply[j].data_type != type::simple_string) return false;
    const std::string& v = reply[j].value;
    return v == "subscribe" || v == "unsubscribe" || v == "psubscribe" || v == "punsubscribe" || v == "ssubscribe" ||
           v == "sunsubscribe";
  }
  return false;
}

bool is_parser_error(error_code ec) {
  return ec == redlock::error::protocol_error || ec == redlock::error::nesting_too_deep ||
         ec == redlock::error::reply_too_large;
}

// One request as the model sees it.
struct request_model {
  enum class where : std::uint8_t { waiting, in_flight, gone };
  std::size_t replies = 0;       // replies it asked for
  std::size_t replies_left = 0;  // replies still due while in flight (abandoned or not)
  clock_type::time_point deadline{};
  std::string payload;
  where at = where::waiting;
  bool live = true;  // not yet completed (an in-flight request that is not live is abandoned)
  bool push_confirmed = false;
  bool error_reply = false;
  response got;  // the nodes of the replies routed to it so far
  std::size_t completions = 0;
};

struct finished {
  id_type id;
  error_code ec;
  response nodes;
};

class harness {
 public:
  explicit harness(std::size_t max_write_batch) : mux_(limits, max_write_batch), max_write_batch_(max_write_batch) {}

  // ---- what callers do ----------------------------------------------------------------------

  void add(std::size_t replies, clock_type::time_point deadline) {
    const id_type id = requests_.size() + 1;
    redlock::resp::request req;  // as async_exec gets it: one ECHO of the id per expected reply
    for (std::size_t i = 0; i < replies; ++i) req.push("ECHO", id);
    request_model m;
    m.replies = m.replies_left = req.commands();
    m.deadline = deadline;
    m.payload = req.payload();
    requests_.push_back(m);
    waiting_.push_back(id);
    check(!mux_.add(id, req.payload(), req.commands(), deadline, completion{id}));
  }

  // A subscription as the lock client queues it: one command, confirmed by a push. With
  // `replies != 1` the queue must refuse it and keep nothing.
  void add_push_confirmed(std::size_t replies, clock_type::time_point deadline) {
    const id_type id = requests_.size() + 1;
    redlock::resp::request req;
    for (std::size_t i = 0; i < replies; ++i) req.push("SUBSCRIBE", id);
    if (replies != 1) {
      const bool was_empty = mux_.empty();
      const std::size_t waiting = mux_.waiting();
      check(mux_.add(id, req.payload(), replies, deadline, completion{id}, clock_type::time_point::max(),
                     confirmed_by::push) == redlock::error::invalid_argument);
      check(mux_.empty() == was_empty && mux_.waiting() == waiting);
      return;
    }
    request_model m;
    m.replies = m.replies_left = 1;
    m.deadline = deadline;
    m.payload = req.payload();
    m.push_confirmed = true;
    requests_.push_back(m);
    waiting_.push_back(id);
    check(!mux_.add(id, req.payload(), 1, deadline, completion{id}, clock_type::time_point::max(), confirmed_by::push));
  }

  // The connection came up as RESP2: the waiting subscriptions are refused, unsent.
  void refuse_subscriptions() {
    const error_code ec = redlock::error::not_supported;
    std::size_t want = 0;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      request_model& m = model(*it);
      if (m.push_confirmed) {
        m.at = request_model::where::gone;
        finish(*it, ec);
        it = waiting_.erase(it);
        ++want;
      } else {
        ++it;
      }
    }
    check(mux_.refuse_waiting(confirmed_by::push, ec, completer()) == want);
  }

  // The writer: everything the multiplexer hands over is written, in the model's order.
  void write() {
    std::string want;
    while (!waiting_.empty() && (want.empty() || want.size() < max_write_batch_)) {
      request_model& m = model(waiting_.front());
      want += m.payload;
      m.at = request_model::where::in_flight;
      in_flight_.push_back(waiting_.front());
      waiting_.pop_front();
    }
    check(mux_.prepare_write() == want);
  }

  void cancel(id_type id, bool allow_after_write) {
    const error_code ec = boost::asio::error::operation_aborted;
    bool want = false;
    if (id >= 1 && id <= requests_.size()) {
      request_model& m = model(id);
      if (m.live &&
          (m.at == request_model::where::waiting || (allow_after_write && m.at == request_model::where::in_flight))) {
        if (m.at == request_model::where::waiting) {
          std::erase(waiting_, id);
          m.at = request_model::where::gone;
        }
        finish(id, ec);
        want = true;
      }
    }
    check(mux_.cancel(id, allow_after_write, ec, completer()) == want);
  }

  void expire(clock_type::time_point at) {
    const error_code ec = redlock::error::master_timeout;
    auto next = clock_type::time_point::max();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      request_model& m = model(*it);
      if (m.deadline <= at) {
        m.at = request_model::where::gone;
        finish(*it, ec);
        it = waiting_.erase(it);
      } else {
        next = std::min(next, m.deadline);
        ++it;
      }
    }
    for (const id_type id : in_flight_) {
      request_model& m = model(id);
      if (!m.live) continue;
      if (m.deadline <= at) {
        finish(id, ec);
      } else {
        next = std::min(next, m.deadline);
      }
    }
    check(mux_.expire(at, ec, completer()) == next);
  }

  // The socket broke (or the stream failed): written requests fail with `written`, waiting ones
  // with not_connected, and the next bytes belong to a new connection.
  void reset_connection(error_code written, error_code waiting) {
    for (const id_type id : in_flight_) {
      if (model(id).live) finish(id, written);
      model(id).at = request_model::where::gone;
    }
    for (const id_type id : waiting_) {
      model(id).at = request_model::where::gone;
      finish(id, waiting);
    }
    in_flight_.clear();
    waiting_.clear();
    mux_.fail_all(written, waiting, completer());
    mux_.reset_read();
  }

  // ---- what the node sends: src/connection.cpp's read_loop, sans I/O ------------------------

  // One read of `bytes` (split further only if the free space is smaller), then dispatch.
  void deliver(std::string_view bytes) {
    while (!bytes.empty()) {
      const auto space = mux_.read_space();
      check(!space.empty());
      const std::size_t n = std::min(space.size(), bytes.size());
      std::memcpy(space.data(), bytes.data(), n);
      bytes.remove_prefix(n);
      mux_.commit_read(n);
      wants_.clear();
      events_.clear();
      pushes_ = handed_ = 0;
      const error_code ec = mux_.dispatch(
          completer(), [this](read_event e) { on_event(e); },
          [this](response& push) {
            // The push the observer was just told about, where it lies.
            check(&push == &mux_.reader().reply());
            check(is_push(push) && !confirms_front(push));
            check(++handed_ == pushes_);
          });
      check(handed_ == pushes_);
      // The observer heard, for each reply, "reply" then what became of it, as the model predicted
      // (pushes in between were checked as they came).
      std::erase(events_, read_event::push);
      std::size_t at = 0;
      for (const reply_outcome want : wants_) {
        check(at < events_.size() && events_[at++] == read_event::reply);
        if (want == reply_outcome::dropped) check(at < events_.size() && events_[at++] == read_event::dropped);
        if (want == reply_outcome::unsolicited) check(at < events_.size() && events_[at++] == read_event::unsolicited);
      }
      check(at == events_.size());
      const bool unsolicited = !wants_.empty() && wants_.back() == reply_outcome::unsolicited;
      if (unsolicited) {  // a reply nobody asked for: the stream is not ours
        check(ec == redlock::error::protocol_error);
        reset_connection(redlock::error::protocol_error, redlock::error::not_connected);
        return;
      }
      if (ec) {
        check(is_parser_error(ec));
        reset_connection(ec, redlock::error::not_connected);
        return;
      }
      check(mux_.reader().buffered() == 0);  // "need more" took every byte: nothing to keep
    }
  }

  // What dispatch tells its observer; a reply is still in the reader when it is told.
  void on_event(read_event e) {
    const response& current = mux_.reader().reply();
    switch (e) {
      case read_event::push:
        check(is_push(current) && !confirms_front(current));
        ++pushes_;
        break;
      case read_event::reply:
        check(!is_push(current) || confirms_front(current));
        check(!current.empty());
        wants_.push_back(route(current));
        break;
      case read_event::dropped:
      case read_event::unsolicited:
        break;
    }
    events_.push_back(e);
  }

  // ---- checks -------------------------------------------------------------------------------

  // After each step: what completed is exactly what the model expected, and the queues agree.
  void settle() {
    const auto by_id = [](const finished& a, const finished& b) { return a.id < b.id; };
    std::sort(expected_.begin(), expected_.end(), by_id);
    std::sort(actual_.begin(), actual_.end(), by_id);
    check(expected_.size() == actual_.size());
    for (std::size_t i = 0; i < expected_.size(); ++i) {
      check(expected_[i].id == actual_[i].id);
      check(expected_[i].ec == actual_[i].ec);
      check(expected_[i].nodes == actual_[i].nodes);
    }
    expected_.clear();
    actual_.clear();
    check(mux_.waiting() == waiting_.size());
    check(mux_.in_flight() == in_flight_.size());
    check(mux_.has_waiting() == !waiting_.empty());
    check(mux_.empty() == (waiting_.empty() && in_flight_.empty()));
  }

  // The connection closes: nothing may be left, and everything completed exactly once.
  void close() {
    nested_.reset();
    reset_connection(boost::asio::error::operation_aborted, boost::asio::error::operation_aborted);
    settle();
    check(mux_.empty());
    for (const request_model& m : requests_) check(m.completions == 1 && !m.live);
  }

  // The next completion (from whatever finishes it) runs `op` from inside the callback, as a
  // completion handler that re-enters the connection would.
  void arm_nested(std::uint8_t op) { nested_ = op; }
  void nested_op(std::uint8_t op) {
    if (op & 1) {
      add(1 + (op >> 1) % 3, deadline_after(op >> 3));
    } else {
      cancel(pick(op >> 2), (op & 2) != 0);
    }
  }

  // A request id chosen by `x` among those added so far (0 when none: unknown to the queue).
  id_type pick(std::uint8_t x) const { return requests_.empty() ? 0 : 1 + x % requests_.size(); }

  // Deadlines from 1 to 30 ticks ahead, or none (time_point::max(), as for a huge timeout).
  clock_type::time_point deadline_after(std::uint8_t x) const {
    const int ticks = 1 + x % 31;
    return ticks == 31 ? clock_type::time_point::max() : now_ + std::chrono::milliseconds{ticks};
  }

  void advance(std::uint8_t x) { now_ += std::chrono::milliseconds{x % 16}; }
  clock_type::time_point now() const { return now_; }

 private:
  request_model& model(id_type id) { return requests_[id - 1]; }

  // Whether the model takes the push `reply` for the reply of the oldest request in flight.
  bool confirms_front(const response& reply) {
    return !in_flight_.empty() && model(in_flight_.front()).push_confirmed && is_confirmation(reply);
  }

  // The model's side of one reply: which request it belongs to, and what that means.
  reply_outcome route(const response& reply) {
    if (in_flight_.empty()) return reply_outcome::unsolicited;
    const id_type id = in_flight_.front();
    request_model& m = model(id);
    check(m.replies_left > 0);
    if (--m.replies_left == 0) {
      in_flight_.pop_front();
      m.at = request_model::where::gone;
    }
    if (!m.live) return reply_outcome::dropped;
    // async_exec promises server_error when a reply is an error reply; a leading attribute only
    // describes the value, so the value decides (seed attribute_error checks exactly this).
    const node* v = value_of(reply);
    if (v != nullptr && redlock::resp::is_error(v->data_type)) m.error_reply = true;
    m.got.insert(m.got.end(), reply.begin(), reply.end());
    if (m.replies_left != 0) return reply_outcome::partial;
    finish(id, m.error_reply ? error_code{redlock::error::server_error} : error_code{}, std::move(m.got));
    return reply_outcome::completed;
  }

  void finish(id_type id, error_code ec, response nodes = {}) {
    request_model& m = model(id);
    check(m.live);
    m.live = false;
    m.got.clear();
    expected_.push_back({id, ec, std::move(nodes)});
  }

  // What the multiplexer is given to finish requests with.
  struct completer_fn {
    harness* self;
    void operator()(completion&& c, error_code ec, response& r) const { self->on_complete(c, ec, r); }
  };
  completer_fn completer() { return completer_fn{this}; }

  void on_complete(const completion& c, error_code ec, response& r) {
    check(c.id >= 1 && c.id <= requests_.size());
    request_model& m = model(c.id);
    check(++m.completions == 1);  // exactly once: never twice, whatever path finishes it
    // Only a request that got all of its replies completes with a reply; no more, no fewer.
    if (!ec || ec == redlock::error::server_error) {
      check(replies_in(r) == m.replies);
    } else {
      check(r.empty());
    }
    actual_.push_back({c.id, ec, std::move(r)});
    if (nested_) {
      const std::uint8_t op = *nested_;
      nested_.reset();  // one level deep: the nested op's own completions do not nest again
      nested_op(op);
    }
  }

  redlock::detail::multiplexer<completion> mux_;
  std::size_t max_write_batch_ = 0;
  std::vector<reply_outcome> wants_;  // the model's outcome of each reply of one dispatch
  std::vector<read_event> events_;    // what that dispatch told its observer
  std::size_t pushes_ = 0;            // out-of-band pushes the observer was told of in one dispatch
  std::size_t handed_ = 0;            // and that reached the push handler
  clock_type::time_point now_ = clock_type::time_point{} + std::chrono::seconds{1};

  std::vector<request_model> requests_;  // by id - 1
  std::deque<id_type> waiting_;
  std::deque<id_type> in_flight_;  // in write order, abandoned ones included
  std::vector<finished> expected_;
  std::vector<finished> actual_;
  std::optional<std::uint8_t> nested_;
};

// One script op; `in` supplies argument bytes, `stream` the node's bytes.
void run_op(harness& h, std::uint8_t op, reader& in, reader& stream) {
  switch (op) {
    case 'a': {  // a caller adds a request
      const std::uint8_t x = in.byte();
      h.add(1 + x % 3, h.deadline_after(x / 3));
      break;
    }
    case 'w':
      h.write();
      break;     // the writer takes what waits
    case 'c': {  // a caller cancels: bit 7 says partial/terminal (may abandon)
      const std::uint8_t x = in.byte();
      h.cancel(h.pick(x & 0x7f), (x & 0x80) != 0);
      break;
    }
    case 't': {  // time passes; the deadline timer fires
      h.advance(in.byte());
      h.expire(h.now());
      break;
    }
    case 'p': {  // the lock client subscribes (push-confirmed); now and then with a bad reply count
      const std::uint8_t x = in.byte();
      h.add_push_confirmed(x % 8 == 7 ? 2 : 1, h.deadline_after(x / 8));
      break;
    }
    case 'x':  // the connection came up as RESP2
      h.refuse_subscriptions();
      break;
    case 'r':  // the socket breaks
      h.reset_connection(redlock::error::connection_lost, redlock::error::not_connected);
      break;
    case 'e':
      h.arm_nested(in.byte());
      break;     // the next completion re-enters the queue
    case 'd': {  // one read of 1..255 bytes, or all that is left
      const std::uint8_t x = in.byte();
      h.deliver(stream.take(x == 0 ? stream.data.size() : x));
      break;
    }
    default:
      h.deliver(stream.take(1 + op % 16));
      break;  // any other byte: a short read
  }
  h.settle();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{std::string_view{reinterpret_cast<const char*>(data), size}};

  const std::uint8_t head = in.byte();
  const std::size_t batch = 1 + 16 * std::size_t{static_cast<std::uint8_t>(head >> 3)};
  harness h{batch};
  const std::size_t initial = 1 + (head & 7);
  for (std::size_t i = 0; i < initial; ++i) {
    const std::uint8_t x = in.byte();
    h.add(1 + x % 3, h.deadline_after(x / 3));
  }
  h.write();
  h.settle();

  const std::size_t script_length = in.byte();
  reader script{in.take(script_length)};
  reader stream{in.data.substr(std::min(in.pos, in.data.size()))};
  while (!script.at_end()) run_op(h, script.byte(), script, stream);
  h.deliver(stream.take(stream.data.size()));
  h.settle();
  h.close();
  return 0;
}
