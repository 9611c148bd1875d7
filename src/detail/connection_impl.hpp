// SPDX-License-Identifier: BSL-1.0
#pragma once
// The I/O shell of one node connection (private to src/). It decides nothing: the connection's life
// (connecting, TLS, handshake, up, stalls, closing, back-off) is core::link_fsm's, the handshake's
// exchange is core::handshake_fsm's, which request a reply belongs to and what times out is
// detail::multiplexer's, and plain TCP against TLS is detail::stream's. The shell runs the machine's
// steps, its timers, and counts and logs: src/connection.cpp takes requests and their deadlines,
// src/connection_serve.cpp carries out the life and moves the bytes.

#include "completion.hpp"
#include "connection_counters.hpp"
#include "log.hpp"
#include "master_link.hpp"
#include "stream.hpp"
#include "timer.hpp"
#include <redlock/connection.hpp>
#include <redlock/core/link_fsm.hpp>
#include <redlock/core/link_health.hpp>
#include <redlock/detail/multiplexer.hpp>
#include <redlock/detail/observe.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

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

namespace detail {

// The log prefix of a connection whose configuration names none: its address.
inline log_options with_default_prefix(log_options opts, const connection_config& cfg) {
  if (opts.prefix.empty()) opts.prefix = address_of(cfg);
  return opts;
}

}  // namespace detail

class connection::impl final : public std::enable_shared_from_this<impl>,
                               public detail::read_target,
                               public detail::read_poller::deferred {
 public:
  using handler_type = asio::any_completion_handler<void(error_code, resp::response)>;
  using strand_type = asio::strand<asio::any_io_executor>;

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
        log_(detail::with_default_prefix(cfg_.logging, cfg_)) {}

  asio::any_io_executor ex_;
  strand_type strand_;
  connection_config cfg_;

  // ---- called from any thread -------------------------------------------------------------

  void exec(handler_type h, resp::request req, clock::duration timeout);

  void run(run_handler h);

  void close();

  // master_link::close_after_writes: what was queued before this call (the releases of operations
  // that `client::close` cancelled) is still written, then the connection closes as by close();
  // at the latest after `limit`.
  void close_after_writes(clock::duration limit);

  // master_link::run: async_run without a caller to tell.
  void run_detached();

  // master_link::submit, on the strand: no erased handler, no post, no allocation in steady state.
  error_code submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                    std::shared_ptr<detail::reply_sink> sink, std::uint64_t tag, bool push_confirmed);

  // The RESP version of the current connection (0: none), from any thread.
  int protocol() const noexcept { return protocol_.load(std::memory_order_relaxed); }

  connection_status status() const { return status_.get(); }

  connection_stats stats() const { return stats_.snapshot(log_); }

  void observe(std::weak_ptr<detail::link_observer> o, std::size_t index, bool identify, bool ask_time);

 private:
  // ---- completion helpers -----------------------------------------------------------------

  // Never called inline from an initiating function (every path starts with a post to the strand).
  void complete(handler_type h, error_code ec, resp::response r);

  void complete_run(run_handler h, error_code ec) { detail::complete_handler(std::move(h), ex_, ec); }

  // `answered`: when the replies it completes were read (one clock reading per read, not per
  // reply); the other paths complete no reply.
  auto completer(clock::time_point answered = {}) {
    return [this, answered](pending&& p, error_code ec, resp::response& r) {
      stats_.count_outcome(p.start, ec, fsm_.closing(), answered);  // every request ends here, once
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

  void exec_on_strand(std::uint64_t id, handler_type h, resp::request req, clock::duration timeout);

  void cancel_request(std::uint64_t id, asio::cancellation_type type);

  // One timer for all deadlines of this connection, armed at the earliest one.
  void arm_deadline(clock::time_point tp);

  void on_deadline();

  // When a request queued at `now` with `deadline` marks the stream stalled (core::stall_point).
  clock::time_point stall_point(clock::time_point now, clock::time_point deadline) const noexcept {
    if (!cfg_.detect_stalls) return clock::time_point::max();
    return core::stall_point<clock>(now, deadline, cfg_.stall_grace);
  }

  void set_protocol(int p) noexcept { protocol_.store(p, std::memory_order_relaxed); }

  // A connection that came up as RESP2 cannot carry push-confirmed requests (a SUBSCRIBE would put
  // it in subscribe mode): those queued while connecting complete with not_supported, unsent.
  void refuse_on_resp2();

  // The oldest written request is overdue beyond its grace: replies behind it cannot come either.
  void declare_stalled();

  // ---- lifecycle: the machine's steps -----------------------------------------------------

  void run_on_strand(run_handler h);

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
  asio::awaitable<void> run_loop();

  // One timer bounds an attempt (connect, TLS, handshake): on expiry the machine ends the attempt
  // (the stream is aborted, and the step in progress fails) unless it has already ended.
  void arm_attempt_timer();

  void came_up(const core::link_step& s);

  // What a failure entails (see core::link_failure), in its order.
  void went_down(const core::link_failure& f, std::string& server_text);

  void finish_run();

  void close_on_strand() { carry_out(fsm_.on_close()); }

  // Carries out what an `on_*` call of the machine asked for at once.
  void carry_out(core::link_order order);

  // Closing once the queue is written (close_after_writes): closes if that is now; true if it did.
  bool flushed();

  void reset_stream();

  // ---- serving: one reader, one writer ----------------------------------------------------

  // Runs the reader and the writer until the stream fails; returns why.
  asio::awaitable<error_code> serve();

  // The writer: no coroutine and no wake-up timer. Queuing a request starts the write at once when
  // none is in progress (no scheduler pass is spent waking a writer); the write's completion takes
  // everything that queued meanwhile, in one write.
  void start_write(bool wake_end = false);

  void on_written(error_code ec, std::size_t n);
  void trim_if_idle();

  void write_failed(error_code ec);

  // A write that failed inside submit() or a reply's dispatch: nothing may complete from inside
  // those calls (master_link promises it), so only the stream is closed here (the reader notices);
  // a connection closing after its writes closes in a pass of its own.
  void write_failed_inline(error_code ec);

  // The reader: read, hand the bytes to the multiplexer, let it route what is complete. One reply
  // costs one scheduler pass: the read's completion, which runs the replies' sinks in place.
  void start_read();

  void on_stream_read(error_code ec, std::size_t n) override { on_read(ec, n); }

  void at_wake_end() override;

  void on_read(error_code ec, std::size_t n);

  // What dispatch tells about each message: counters and logs.
  auto note_read();

  error_code dispatch_replies();

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

}  // namespace redlock
