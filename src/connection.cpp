// SPDX-License-Identifier: BSL-1.0
// The I/O shell of one node connection. It decides nothing: the connection's life (connecting,
// TLS, handshake, up, stalls, closing, back-off) is core::link_fsm's, the handshake's exchange is
// core::handshake_fsm's, which request a reply belongs to and what times out is
// detail::multiplexer's, and plain TCP against TLS is detail::stream's. This file runs the
// machine's steps, its timers, and counts and logs. It also implements detail::master_link, the
// lock client's path to a connection that runs on the client's own strand.

#include "detail/cluster_link.hpp"
#include "detail/completion.hpp"
#include "detail/connection_counters.hpp"
#include "detail/failure_words.hpp"
#include "detail/log.hpp"
#include "detail/master_link.hpp"
#include "detail/stream.hpp"
#include "detail/timer.hpp"
#include <redlock/connection.hpp>
#include <redlock/core/link_fsm.hpp>
#include <redlock/core/link_health.hpp>
#include <redlock/detail/multiplexer.hpp>
#include <redlock/detail/observe.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace redlock {

namespace asio = boost::asio;
using boost::system::error_code;
using detail::inc;

namespace {

log_options with_default_prefix(log_options opts, const connection_config& cfg) {
  if (opts.prefix.empty()) opts.prefix = address_of(cfg);
  return opts;
}

using handler_type = asio::any_completion_handler<void(error_code, resp::response)>;
using strand_type = asio::strand<asio::any_io_executor>;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// What the multiplexer completes: the public caller's type-erased handler, or (the lock client's
// internal path) a reply sink and its tag, which cost no allocation and are called in place on
// the strand. The queue move-assigns when it erases from the middle: see detail::handler_box.
struct pending {
  detail::handler_box<handler_type> box;     // empty for an internal request
  std::shared_ptr<detail::reply_sink> sink;  // set for an internal request
  std::uint64_t tag = 0;
  redlock::boot_clock::time_point start;  // reached the strand: its latency counts from here
  pending(handler_type h, redlock::boot_clock::time_point t) noexcept : box(std::move(h)), start(t) {}
  pending(std::shared_ptr<detail::reply_sink> s, std::uint64_t t, redlock::boot_clock::time_point at) noexcept
      : sink(std::move(s)), tag(t), start(at) {}
};

}  // namespace

class connection::impl final : public std::enable_shared_from_this<impl>,
                               public detail::read_target,
                               public detail::read_poller::deferred {
 public:
  // The public connection: a strand of its own on `ex`.
  impl(asio::any_io_executor ex, connection_config cfg) : impl(ex, asio::make_strand(ex), std::move(cfg)) {}
  // A master_link: on the strand it is given, shared with the lock client's operations (and its
  // read poller, when it has one).
  impl(strand_type strand, connection_config cfg, std::shared_ptr<detail::read_poller> poller)
      : impl(strand.get_inner_executor(), strand, std::move(cfg), std::move(poller)) {}
  impl(asio::any_io_executor ex, strand_type strand, connection_config cfg,
       std::shared_ptr<detail::read_poller> poller = nullptr)
      : ex_(std::move(ex)),
        strand_(std::move(strand)),
        cfg_(std::move(cfg)),
        stream_(strand_, cfg_, std::move(poller)),
        fsm_({.tls = cfg_.tls.enabled,
              .probe_when_suspect = cfg_.connect_probe_interval > std::chrono::milliseconds::zero(),
              .reconnect = cfg_.reconnect}),
        serve_done_(strand_),
        deadline_timer_(strand_),
        attempt_timer_(strand_),
        backoff_timer_(strand_),
        flush_timer_(strand_),
        mux_(cfg_.limits),
        rng_(std::random_device{}()),
        log_(with_default_prefix(cfg_.logging, cfg_)) {}

  asio::any_io_executor ex_;
  strand_type strand_;
  connection_config cfg_;

  // ---- called from any thread -------------------------------------------------------------

  void exec(handler_type h, resp::request req, clock::duration timeout) {
    const auto id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    // The slot handler is installed here, in the initiating thread, so that a cancellation emitted
    // right after initiation is not lost; it reaches the strand after the request does (FIFO).
    auto slot = asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
      slot.assign([w = weak_from_this(), id](asio::cancellation_type type) {
        if (auto self = w.lock()) {
          asio::post(self->strand_, [self, id, type] { self->cancel_request(id, type); });
        }
      });
    }
    asio::post(strand_, [self = shared_from_this(), id, h = std::move(h), req = std::move(req), timeout]() mutable {
      self->exec_on_strand(id, std::move(h), std::move(req), timeout);
    });
  }

  void run(run_handler h) {
    auto slot = asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
      slot.assign([w = weak_from_this()](asio::cancellation_type type) {
        if (!!(type & asio::cancellation_type::terminal)) {
          if (auto self = w.lock()) self->close();
        }
      });
    }
    asio::post(strand_, [self = shared_from_this(), h = std::move(h)]() mutable { self->run_on_strand(std::move(h)); });
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->close_on_strand(); });
  }

  // master_link::close_after_writes: what was queued before this call (the releases of operations
  // that `client::close` cancelled) is still written, then the connection closes as by close();
  // at the latest after `limit`.
  void close_after_writes(clock::duration limit) {
    asio::post(strand_, [self = shared_from_this(), limit] {
      const auto order = self->fsm_.on_close_after_writes();
      if (order != core::link_order::flush) return self->carry_out(order);
      self->start_write();
      if (self->flushed()) return;
      self->flush_timer_.expires_after(limit);
      self->flush_timer_.async_wait([self](error_code ec) {
        if (!ec) self->close_on_strand();
      });
    });
  }

  // master_link::run: async_run without a caller to tell.
  void run_detached() {
    run_requested_.store(true, std::memory_order_relaxed);
    run(run_handler{[](error_code) {}});
  }

  // master_link::submit, on the strand: no erased handler, no post, no allocation in steady state.
  error_code submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                    std::shared_ptr<detail::reply_sink> sink, std::uint64_t tag, bool push_confirmed) {
    inc(stats_.requests);
    if (payload.empty() || replies == 0 || !sink || (push_confirmed && replies != 1)) {
      inc(stats_.invalid);
      return make_error_code(error::invalid_argument);
    }
    // RESP2 has no pushes: a SUBSCRIBE there would switch the whole connection to subscribe mode,
    // where the lock client's commands are refused. Never write one (see also refuse_on_resp2()).
    if (push_confirmed && protocol() == 2) {
      inc(stats_.invalid);
      return make_error_code(error::not_supported);
    }
    // A vote is refused while a written request is overdue (core::link_fsm::accepting_votes).
    // Requests queue from run() on: its post may not have reached the strand yet, and a caller
    // that just started the link should not see it as down.
    const bool starting = fsm_.state() == connection_state::idle && run_requested_.load(std::memory_order_relaxed);
    if ((!fsm_.accepting_votes() && !starting) || fsm_.closing()) {
      inc(stats_.not_connected);
      return make_error_code(error::not_connected);
    }
    const auto id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    const auto now = clock::now();
    mux_.add(id, payload, replies, deadline, pending{std::move(sink), tag, now}, stall_point(now, deadline),
             push_confirmed ? detail::confirmed_by::push : detail::confirmed_by::reply);
    arm_deadline(deadline);
    start_write();
    return {};
  }

  // The RESP version of the current connection (0: none), from any thread.
  int protocol() const noexcept { return protocol_.load(std::memory_order_relaxed); }

  connection_status status() const { return status_.get(); }

  connection_stats stats() const { return stats_.snapshot(log_); }

  void observe(std::weak_ptr<detail::link_observer> o, std::size_t index, bool identify, bool ask_time) {
    observer_ = std::move(o);
    observer_index_ = index;
    facts_.identify = identify;
    facts_.ask_time = ask_time;
  }

 private:
  // ---- completion helpers -----------------------------------------------------------------

  // Never called inline from an initiating function (every path starts with a post to the strand).
  void complete(handler_type h, error_code ec, resp::response r) {
    detail::complete_handler(std::move(h), ex_, ec, std::move(r));
  }

  void complete_run(run_handler h, error_code ec) { detail::complete_handler(std::move(h), ex_, ec); }

  auto completer() {
    return [this](pending&& p, error_code ec, resp::response& r) {
      stats_.count_outcome(p.start, ec, fsm_.closing());  // every request ends here, once
      if (p.sink) {
        // In place: the sink reads the nodes where the read path left them.
        const auto sink = std::move(p.sink);
        sink->on_reply(p.tag, ec, r);
      } else {
        complete(std::move(p.box.handler), ec, std::move(r));
      }
    };
  }

  // ---- requests ---------------------------------------------------------------------------

  void exec_on_strand(std::uint64_t id, handler_type h, resp::request req, clock::duration timeout) {
    inc(stats_.requests);
    if (req.empty() || timeout <= clock::duration::zero()) {
      inc(stats_.invalid);
      complete(std::move(h), make_error_code(error::invalid_argument), {});
      return;
    }
    // Fail fast while the node is known to be unreachable instead of holding the caller until
    // its deadline (core::link_fsm::accepting).
    if (!fsm_.accepting()) {
      inc(stats_.not_connected);
      complete(std::move(h), make_error_code(error::not_connected), {});
      return;
    }
    const auto now = clock::now();
    const auto deadline = (timeout >= clock::time_point::max() - now) ? clock::time_point::max() : now + timeout;
    const std::size_t replies = req.commands();
    mux_.add(id, req.payload(), replies, deadline, pending{std::move(h), now}, stall_point(now, deadline));
    arm_deadline(deadline);
    start_write();
  }

  void cancel_request(std::uint64_t id, asio::cancellation_type type) {
    const bool after_write = !!(type & (asio::cancellation_type::terminal | asio::cancellation_type::partial));
    if (mux_.cancel(id, after_write, asio::error::operation_aborted, completer())) {
      REDLOCK_LOG(log_, log_level::trace, "request cancelled by its caller");
    }
  }

  // One timer for all deadlines of this connection, armed at the earliest one.
  void arm_deadline(clock::time_point tp) {
    if (tp >= armed_deadline_) return;
    armed_deadline_ = tp;
    const auto generation = ++deadline_generation_;
    deadline_timer_.expires_at(tp);
    deadline_timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (ec || generation != self->deadline_generation_) return;  // re-armed or cancelled
      self->on_deadline();
    });
  }

  void on_deadline() {
    armed_deadline_ = clock::time_point::max();
    const auto before = detail::read(stats_.timeouts);
    const auto now = clock::now();
    auto next = mux_.expire(now, make_error_code(error::master_timeout), completer());
    if (const auto expired = detail::read(stats_.timeouts) - before; expired > 0) {
      REDLOCK_LOG(log_, log_level::debug,
                  "{} request(s) timed out (those already written are abandoned: their late replies will be dropped)",
                  expired);
    }
    if (!fsm_.overdue() && mux_.overdue() && fsm_.on_overdue(true)) {
      REDLOCK_LOG(log_, log_level::debug,
                  "a written request timed out and its reply is still owed: the lock client's votes fail fast until "
                  "it comes or the connection is replaced");
    }
    if (fsm_.watching_stalls() && reading_) {
      const auto stall = mux_.stall_point();
      if (stall <= now) return declare_stalled();
      next = std::min(next, stall);
    }
    // Re-armed no sooner than 1 ms from now: under a backlog every request has a deadline a few
    // microseconds after the previous one, and one expiry pass per request (each a scan of the
    // queue) grows with the square of the requests in flight. A timeout may fire 1 ms late.
    if (next != clock::time_point::max()) arm_deadline(std::max(next, clock::now() + std::chrono::milliseconds{1}));
  }

  // When a request queued at `now` with `deadline` marks the stream stalled (core::stall_point).
  clock::time_point stall_point(clock::time_point now, clock::time_point deadline) const noexcept {
    if (!cfg_.detect_stalls) return clock::time_point::max();
    return core::stall_point<clock>(now, deadline, cfg_.stall_grace);
  }

  void set_protocol(int p) noexcept { protocol_.store(p, std::memory_order_relaxed); }

  // A connection that came up as RESP2 cannot carry push-confirmed requests (a SUBSCRIBE would put
  // it in subscribe mode): those queued while connecting complete with not_supported, unsent.
  void refuse_on_resp2() {
    if (protocol() != 2) return;
    if (const auto n =
            mux_.refuse_waiting(detail::confirmed_by::push, make_error_code(error::not_supported), completer());
        n > 0) {
      REDLOCK_LOG(log_, log_level::debug, "{} subscription request(s) refused: the connection is RESP2", n);
    }
  }

  // The oldest written request is overdue beyond its grace: replies behind it cannot come either.
  void declare_stalled() {
    if (fsm_.on_stall() != core::link_order::abort_stream) return;
    inc(stats_.stalls);
    REDLOCK_LOG(log_, log_level::warning,
                "{} written request(s) unanswered well past their deadline: the connection is stalled (packet loss, "
                "a partition or a stopped server); replacing it",
                mux_.in_flight());
    publish_state();
    record_error(make_error_code(error::connection_stalled), "");
    stream_.abort_close();  // the reader ends with operation_aborted; the serve step reports the stall
  }

  // ---- lifecycle: the machine's steps -----------------------------------------------------

  void run_on_strand(run_handler h) {
    if (fsm_.state() != connection_state::idle || fsm_.closing()) {
      complete_run(std::move(h), make_error_code(error::invalid_argument));
      return;
    }
    std::string what;
    error_code ec = validate(cfg_, &what);
    // validate() loaded the TLS files already; a file changed since is reported the same way.
    if (!ec) ec = stream_.load_tls(&what);
    if (ec) {
      REDLOCK_LOG(log_, log_level::error, "invalid configuration: {}", what);
      record_error(ec, what);
      (void)fsm_.on_close();
      publish_state();
      // Internal requests may have queued since master_link::run() (never public ones).
      mux_.fail_all(make_error_code(error::not_connected), make_error_code(error::not_connected), completer());
      complete_run(std::move(h), ec);
      return;
    }
    (void)fsm_.start();
    run_handler_.emplace(std::move(h));  // not assignment: see `pending`
    publish_state();
    asio::co_spawn(strand_, run_loop(), [self = shared_from_this()](std::exception_ptr e) {
      // Only allocation failure can escape the loop; say so instead of looking like close().
      if (e) self->record_error(make_error_code(boost::system::errc::not_enough_memory), "");
      self->finish_run();
    });
  }

  double unit_random() { return std::uniform_real_distribution<double>{0.0, 1.0}(rng_); }

  // The run loop destroyed before it finished, with no exception in flight: its io_context was
  // destroyed while the loop waited, and nothing on this strand will run again. The queued
  // requests are dropped without completing them, as Asio destroys every handler it will never
  // run: their sinks may own the lock client that owns this connection, a cycle that only the
  // strand (close()) breaks otherwise.
  struct abandon_guard {
    impl& self;
    bool finished = false;
    int exceptions = std::uncaught_exceptions();
    ~abandon_guard() {
      if (!finished && std::uncaught_exceptions() == exceptions) self.mux_.fail_all({}, {}, [](auto&&...) {});
    }
  };

  // Carries out core::link_fsm's steps, each resumed with its outcome, until it finishes.
  asio::awaitable<void> run_loop() {
    abandon_guard guard{*this};
    std::string server_text;  // the node's own words about the current attempt's failure
    core::link_step s = fsm_.next_attempt();
    for (;;) {
      publish_state();
      switch (s.type) {
        case core::link_step::kind::connect: {
          inc(stats_.connect_attempts);
          REDLOCK_LOG(log_, log_level::debug, "connecting (attempt {})", fsm_.failed_attempts() + 1);
          set_protocol(0);
          server_text.clear();
          arm_attempt_timer();
          const error_code ec = co_await stream_.connect(s.race);
          s = fsm_.on_connected(ec, unit_random());
          break;
        }
        case core::link_step::kind::tls: {
          const error_code ec = co_await stream_.handshake_tls(server_text, shared_from_this());
          s = fsm_.on_tls_done(ec, unit_random());
          break;
        }
        case core::link_step::kind::handshake: {
          int protocol = 0;
          error_code ec = co_await detail::redis_handshake(stream_, mux_.reader(), cfg_, log_, stats_, protocol,
                                                           server_text, facts_);
          if (!ec) set_protocol(protocol);
          const bool hung_up = ec && stream_.hung_up_unanswered(ec);
          if (ec) ec = stream_.classify(ec, server_text);
          s = fsm_.on_handshake_done(ec, hung_up, unit_random());
          break;
        }
        case core::link_step::kind::serve: {
          attempt_timer_.cancel();
          server_text.clear();
          came_up(s);
          const error_code ec = co_await serve();
          set_protocol(0);
          s = fsm_.on_stream_ended(ec, unit_random());
          break;
        }
        case core::link_step::kind::back_off:
          attempt_timer_.cancel();
          went_down(s.failure, server_text);
          backoff_timer_.expires_after(s.failure.delay);
          co_await backoff_timer_.async_wait(use_tuple);
          s = fsm_.on_backoff_done();
          break;
        case core::link_step::kind::finish:
          attempt_timer_.cancel();
          guard.finished = true;
          co_return;
      }
    }
  }

  // One timer bounds an attempt (connect, TLS, handshake): on expiry the machine ends the attempt
  // (the stream is aborted, and the step in progress fails) unless it has already ended.
  void arm_attempt_timer() {
    attempt_timer_.expires_after(cfg_.connect_timeout);
    attempt_timer_.async_wait([self = shared_from_this(), attempt = fsm_.attempt_id()](error_code ec) {
      if (!ec && self->fsm_.on_connect_timeout(attempt) == core::link_order::close_stream) self->stream_.abort();
    });
  }

  void came_up(const core::link_step& s) {
    inc(stats_.connects);
    status_.count_connect();
    if (s.first_up) {
      REDLOCK_LOG(log_, log_level::info, "connection up (RESP{})", protocol());
    } else {
      REDLOCK_LOG(log_, log_level::info, "connection up again (RESP{}) after {} failed attempt(s)", protocol(),
                  s.failure.failed_attempts);
    }
    refuse_on_resp2();  // before anything can be written
  }

  // What a failure entails (see core::link_failure), in its order.
  void went_down(const core::link_failure& f, std::string& server_text) {
    if (!f.text.empty()) server_text = f.text;
    detail::redact(server_text, {cfg_.password});
    record_error(f.cause, server_text);
    notify_failed(f.cause);  // before the waiting requests fail: the observer can say why
    // Counted before the requests complete, so that their handlers see counters that agree.
    if (f.was_up) {
      inc(stats_.disconnects);
    } else {
      inc(stats_.connect_failures);
      if (f.cause == error::auth_failed) inc(stats_.auth_failures);
    }
    const auto lost_before = stats_.lost();
    const auto unsent_before = stats_.unsent();
    mux_.fail_all(f.written_ec, make_error_code(error::not_connected), completer());
    const auto lost = stats_.lost() - lost_before;
    const auto unsent = stats_.unsent() - unsent_before;
    reset_stream();
    if (f.was_up) notify_down();
    REDLOCK_LOG(log_, f.level, "{}", detail::failure_line(f, server_text, {lost, unsent}, cfg_.password));
  }

  void finish_run() {
    fsm_.on_run_ended();  // also when an exception ended the loop before the machine finished
    REDLOCK_LOG(log_, log_level::info, "connection closed");
    set_protocol(0);
    reset_stream();
    mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
    publish_state();
    deadline_timer_.cancel();
    attempt_timer_.cancel();
    if (run_handler_) {
      run_handler h = std::move(*run_handler_);
      run_handler_.reset();
      complete_run(std::move(h), asio::error::operation_aborted);
    }
  }

  void close_on_strand() { carry_out(fsm_.on_close()); }

  // Carries out what an `on_*` call of the machine asked for at once.
  void carry_out(core::link_order order) {
    switch (order) {
      case core::link_order::none:
      case core::link_order::flush:
        return;
      case core::link_order::close_stream:
        return stream_.close();  // the reader notices and the connection is replaced
      case core::link_order::abort_stream:
        return stream_.abort_close();
      case core::link_order::complete_idle:
        flush_timer_.cancel();
        publish_state();
        mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
        return;
      case core::link_order::close_now:
        flush_timer_.cancel();
        stream_.abort();  // the step in progress (reader, writer, connect) ends with operation_aborted
        backoff_timer_.cancel();
        // Complete now rather than when the run loop unwinds: close() promises prompt completion.
        mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
        return;
    }
  }

  // Closing once the queue is written (close_after_writes): closes if that is now; true if it did.
  bool flushed() {
    if (!fsm_.flushed(stream_.writing(), mux_.has_waiting())) return false;
    close_on_strand();
    return true;
  }

  void reset_stream() {
    stream_.reset();
    mux_.reset_read();
    write_error_ = {};
    write_deferred_ = false;
  }

  // ---- serving: one reader, one writer ----------------------------------------------------

  // Runs the reader and the writer until the stream fails; returns why.
  asio::awaitable<error_code> serve() {
    reading_ = true;
    read_error_ = {};
    stream_.start_serving();
    if (auto o = observer_.lock()) o->on_link_identified(observer_index_, facts_);
    notify_up();                           // may queue requests (re-sent releases)
    start_write();                         // what was queued while connecting
    if (auto perr = dispatch_replies()) {  // bytes that came with the handshake
      read_error_ = perr;
      reading_ = false;
    } else {
      start_read();
    }
    while (reading_) {
      serve_done_.expires_at(clock::time_point::max());
      co_await serve_done_.async_wait(use_tuple);
    }
    error_code ec = read_error_;
    co_await stream_.close_and_drain();  // a write in progress ends too
    if (write_error_ && (!ec || ec == asio::error::operation_aborted)) ec = write_error_;
    write_error_ = {};
    co_return ec;
  }

  // The writer: no coroutine and no wake-up timer. Queuing a request starts the write at once when
  // none is in progress (no scheduler pass is spent waking a writer); the write's completion takes
  // everything that queued meanwhile, in one write.
  void start_write(bool wake_end = false) {
    if (stream_.writing() || !fsm_.writable() || !mux_.has_waiting()) return;
    // Inside the poller's wake-up, what the replies cause waits for its end (at_wake_end): all of
    // it in one write, with no completion pass (docs/benchmarks.md, "System calls").
    if (!wake_end && (write_deferred_ || (write_deferred_ = stream_.defer_write(shared_from_this())))) return;
    const auto in_flight_before = mux_.in_flight();
    std::string_view bytes = mux_.prepare_write();
    const auto batch = mux_.in_flight() - in_flight_before;
    inc(stats_.written, batch);
    REDLOCK_LOG(log_, log_level::trace, "writing {} request(s), {} bytes", batch, bytes.size());
    if (in_flight_before == 0 || wake_end) {
      // An idle connection (the latency-bound case), or the end of a wake-up (everything of the
      // pass is queued): write at once. The socket's buffer is (nearly) empty, so the bytes
      // almost always go out whole and the write costs no completion pass. Elsewhere a busy
      // connection keeps coalescing what queues behind a write in flight.
      error_code ec;
      const std::size_t n = stream_.write_now(bytes, ec);
      inc(stats_.bytes_written, n);
      if (ec) return write_failed_inline(ec);
      if (n == bytes.size()) return;
      bytes.remove_prefix(n);
    }
    stream_.write_async(bytes, [self = shared_from_this()](error_code ec, std::size_t n) { self->on_written(ec, n); });
  }

  void on_written(error_code ec, std::size_t n) {
    inc(stats_.bytes_written, n);
    if (ec) return write_failed(ec);
    start_write();
    flushed();
  }

  void write_failed(error_code ec) {
    write_error_ = ec;
    carry_out(fsm_.on_write_failed());
  }

  // A write that failed inside submit() or a reply's dispatch: nothing may complete from inside
  // those calls (master_link promises it), so only the stream is closed here (the reader notices);
  // a connection closing after its writes closes in a pass of its own.
  void write_failed_inline(error_code ec) {
    write_error_ = ec;
    stream_.close();
    if (fsm_.closing_after_writes()) asio::post(strand_, [self = shared_from_this()] { self->close_on_strand(); });
  }

  // The reader: read, hand the bytes to the multiplexer, let it route what is complete. One reply
  // costs one scheduler pass: the read's completion, which runs the replies' sinks in place.
  void start_read() {
    const auto space = mux_.read_space();
    if (stream_.polled()) return stream_.read_polled(asio::buffer(space.data(), space.size()), shared_from_this());
    stream_.read_some(asio::buffer(space.data(), space.size()),
                      [self = shared_from_this()](error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_stream_read(error_code ec, std::size_t n) override { on_read(ec, n); }

  void at_wake_end() override {
    write_deferred_ = false;
    start_write(true);
    flushed();  // a connection closing after its writes closes once they are out
  }

  void on_read(error_code ec, std::size_t n) {
    if (!ec && fsm_.closing()) ec = asio::error::operation_aborted;
    if (!ec) {
      inc(stats_.bytes_read, n);
      mux_.commit_read(n);
      try {
        ec = dispatch_replies();
      } catch (...) {
        // A completion run in place threw (one dispatched on a strand of the caller's, which
        // Asio does not catch there): the replies after it cannot be trusted to be where the
        // stream left them, so the connection is replaced, and the exception goes on to run().
        read_error_ = make_error_code(error::connection_lost);
        reading_ = false;
        serve_done_.cancel();
        throw;
      }
      if (!ec && fsm_.overdue() && !mux_.overdue() && fsm_.on_overdue(false)) {
        // The late replies came: the stream is in step again, on the same socket.
        REDLOCK_LOG(log_, log_level::debug, "the overdue replies came: accepting votes again");
        notify_up();
      }
      if (!ec && !fsm_.closing()) {
        start_read();
        return;
      }
      if (!ec) ec = asio::error::operation_aborted;
    }
    read_error_ = ec;
    reading_ = false;
    serve_done_.cancel();
  }

  // What dispatch tells about each message: counters and logs.
  auto note_read() {
    return [this](detail::read_event e) {
      status_.count(e);
      if (e == detail::read_event::push) {
        inc(stats_.pushes);
      } else if (e == detail::read_event::reply) {
        inc(stats_.replies);  // before its handler runs
      } else if (e == detail::read_event::dropped) {
        inc(stats_.dropped_replies);
        REDLOCK_LOG(log_, log_level::debug, "dropped a late reply (its request had timed out or been cancelled)");
      } else {
        // A reply nobody asked for: the stream cannot be trusted.
        REDLOCK_LOG(log_, log_level::error, "the node sent a reply nobody asked for: dropping the connection");
      }
    };
  }

  error_code dispatch_replies() {
    return mux_.dispatch(completer(), note_read(), [this](resp::response& push) {
      // Out of band (a pub/sub message): in place, as replies are.
      if (auto o = observer_.lock()) o->on_push(observer_index_, push);
    });
  }

  // ---- the lock client's observer (master_link) and the status ----------------------------

  void notify_up() {
    if (auto o = observer_.lock()) o->on_link_up(observer_index_);
  }
  void notify_failed(error_code ec) {
    if (auto o = observer_.lock()) o->on_link_failed(observer_index_, ec);
  }
  void notify_down() {
    if (auto o = observer_.lock()) o->on_link_down(observer_index_);
  }

  void publish_state() { status_.set_state(fsm_.state()); }
  void record_error(error_code ec, std::string_view text) { status_.record_error(ec, text); }

  detail::stream stream_;
  core::link_fsm fsm_;
  redlock::detail::timer serve_done_;      // wakes serve() when the reader stops
  redlock::detail::timer deadline_timer_;  // the earliest request deadline
  redlock::detail::timer attempt_timer_;   // bounds a connect attempt
  redlock::detail::timer backoff_timer_;   // the wait before the next attempt
  redlock::detail::timer flush_timer_;     // bounds close_after_writes
  detail::multiplexer<pending> mux_;
  std::minstd_rand rng_;
  std::optional<run_handler> run_handler_;
  error_code write_error_;
  error_code read_error_;        // why the reader stopped
  bool reading_ = false;         // the reader runs (serve() waits for it)
  bool write_deferred_ = false;  // the poller's wake-up will call at_wake_end() (start_write)
  clock::time_point armed_deadline_ = clock::time_point::max();
  std::uint64_t deadline_generation_ = 0;
  std::weak_ptr<detail::link_observer> observer_;
  std::size_t observer_index_ = 0;
  detail::node_facts facts_;  // what the last handshake learnt of the node (for the hazard guard)
  std::atomic<std::uint64_t> next_id_{0};
  std::atomic<bool> run_requested_{false};  // master_link::run() was called
  std::atomic<int> protocol_{0};            // RESP version of the current connection, 0 when none

  detail::shared_status status_;
  detail::connection_counters stats_;
  detail::logger log_;
};

connection::connection(executor_type ex, connection_config cfg)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(cfg))) {}

connection::~connection() {
  if (impl_) impl_->close();
}

connection::executor_type connection::get_executor() const noexcept { return impl_->ex_; }
const connection_config& connection::config() const noexcept { return impl_->cfg_; }

void connection::start_exec(exec_handler h, resp::request req, clock::duration timeout) {
  impl_->exec(std::move(h), std::move(req), timeout);
}

void connection::start_run(run_handler h) { impl_->run(std::move(h)); }

void connection::close() { impl_->close(); }

connection_status connection::status() const { return impl_->status(); }

connection_stats connection::stats() const { return impl_->stats(); }

// ---- detail::master_link ----------------------------------------------------------------------

namespace detail {

// A cluster master is a cluster_link (src/cluster_link.cpp) of node links; a plain master is one
// connection. Every member passes to the one that is there.
master_link::master_link(strand_type strand, connection_config cfg, std::shared_ptr<read_poller> poller) {
  if (cfg.cluster.enabled) {
    cluster_ = std::make_shared<cluster_link>(std::move(strand), std::move(cfg), std::move(poller));
  } else {
    impl_ = std::make_shared<connection::impl>(std::move(strand), std::move(cfg), std::move(poller));
  }
}

master_link::~master_link() { close(); }

void master_link::run() { cluster_ ? cluster_->run() : impl_->run_detached(); }

void master_link::observe(std::weak_ptr<link_observer> o, std::size_t index, bool identify, bool ask_time) {
  cluster_ ? cluster_->observe(std::move(o), index, identify, ask_time)
           : impl_->observe(std::move(o), index, identify, ask_time);
}

void master_link::set_restart_quarantine(std::chrono::milliseconds q) {
  if (cluster_) cluster_->set_restart_quarantine(q);
}

void master_link::close() { cluster_ ? cluster_->close() : impl_->close(); }

void master_link::close_after_writes(clock::duration limit) {
  cluster_ ? cluster_->close_after_writes(limit) : impl_->close_after_writes(limit);
}

error_code master_link::submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                               std::shared_ptr<reply_sink> sink, std::uint64_t tag, bool push_confirmed) {
  if (cluster_) return cluster_->submit(payload, replies, deadline, std::move(sink), tag, push_confirmed);
  return impl_->submit(payload, replies, deadline, std::move(sink), tag, push_confirmed);
}

int master_link::protocol() const noexcept { return cluster_ ? cluster_->protocol() : impl_->protocol(); }

connection_status master_link::status() const { return cluster_ ? cluster_->status() : impl_->status(); }

connection_stats master_link::stats() const { return cluster_ ? cluster_->stats() : impl_->stats(); }

const connection_config& master_link::config() const noexcept { return cluster_ ? cluster_->config() : impl_->cfg_; }

std::size_t master_link::answering_node() const noexcept { return cluster_ ? cluster_->answering_node() : 0; }

}  // namespace detail

#undef REDLOCK_LOG

}  // namespace redlock
