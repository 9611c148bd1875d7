// SPDX-License-Identifier: BSL-1.0
#pragma once
// The lock client's internals (private to src/): the shared state behind a lock handle, the
// client-wide machinery the operations use (sending to every master, the keep-alive timer,
// counters, logging), and the per-lock watcher. The operations themselves are in src/client.cpp;
// client_impl's members are defined by concern in src/client_*.cpp.

#include "master_link.hpp"
#include "read_poller.hpp"
#include "timer.hpp"
#include "waiter_list.hpp"
#include "wake_queue.hpp"
#include <redlock/client.hpp>
#include <redlock/core/compact_results.hpp>
#include <redlock/core/event_queue.hpp>
#include <redlock/core/extend_batch.hpp>
#include <redlock/core/extend_fsm.hpp>
#include <redlock/core/hazard_guard.hpp>
#include <redlock/core/keep_alive_fsm.hpp>
#include <redlock/core/kind_spec.hpp>
#include <redlock/core/lock_fsm.hpp>
#include <redlock/core/readiness.hpp>
#include <redlock/core/release_ledger.hpp>
#include <redlock/core/release_targets.hpp>
#include <redlock/detail/observe.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace redlock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = redlock::boot_clock;
using strand_type = asio::strand<asio::any_io_executor>;
using lock_handler = asio::any_completion_handler<void(error_code, lock)>;
using unlock_handler = asio::any_completion_handler<void(error_code, std::size_t)>;
using extend_handler = asio::any_completion_handler<void(error_code)>;
using lost_handler = asio::any_completion_handler<void(error_code)>;
using ready_handler = asio::any_completion_handler<void(error_code, quorum_report)>;
using event_handler = asio::any_completion_handler<void(error_code, lock_event)>;
using unlock_all_handler = asio::any_completion_handler<void(error_code, unlock_result)>;

// TIME, encoded: behind votes (the hazard guard's clock samples), and alone as a probe.
inline constexpr std::string_view time_command = "*1\r\n$4\r\nTIME\r\n";

// Whether step `s` asks the masters for a yes that makes or keeps a lock (acquisitions and
// extensions): its answer is a vote the hazard guard judges, and its ttl a lock's key may have.
constexpr bool is_vote(core::step s) noexcept {
  return s == core::step::acquire || s == core::step::fair_acquire || s == core::step::extend;
}

class client_impl;
struct watch;
struct ready_op;

using core::step;

// The tag of an internal request: the round it belongs to, whether it is the EVAL fallback of an
// EVALSHA (which gets no fallback of its own), and the master it went to.
constexpr std::uint64_t eval_flag = std::uint64_t{1} << 16;
constexpr std::uint64_t make_tag(std::uint64_t round, std::size_t master) noexcept { return round << 17 | master; }
constexpr std::size_t master_of(std::uint64_t tag) noexcept { return static_cast<std::size_t>(tag & 0xffff); }
constexpr std::uint64_t round_of(std::uint64_t tag) noexcept { return tag >> 17; }
// Background releases (and the client's own requests: scripts, subscriptions) are tagged with this
// round, which no acquisition round reaches.
inline constexpr std::uint64_t release_round = 0x7fff'ffff'ffff;
// The reply handed to a sink whose request a master refused at once.
inline const resp::response no_reply{};

// Something on the client's strand that `close()` must reach: an operation or a watcher. While it
// runs it is linked into the client's list (intrusive: enrolling and retiring cost nothing, and a
// finished operation leaves nothing behind).
struct op_base : reply_sink, std::enable_shared_from_this<op_base> {
  virtual void cancel() = 0;  // on the strand
  // A master named this operation as the first waiter after a release (fair hand-over).
  virtual void on_wake(std::size_t /*master*/) {}
  // A master handed this operation the lock with the offer of its round `round` (a fenced lock's
  // with the fence `fence`; 0: none came).
  virtual void on_handover(std::size_t /*master*/, std::uint64_t /*round*/, std::int64_t /*fence*/) {}
  virtual ~op_base() = default;
  op_base* prev_op = nullptr;
  op_base* next_op = nullptr;
  bool enrolled = false;
};

// An operation that client_impl::start_op starts (an acquisition, a release, an extension).
struct started_op : op_base, read_poller::deferred {
  virtual void start() = 0;  // on the strand
  void at_wake_end() final { start(); }
};

// "lock "orders:42" [1f2e3d4c]": the resource (made printable, cut) and the first 8 hex digits of
// the token, never the whole token (it would let anyone release the lock).
std::string lock_name(std::string_view resource, std::string_view token);
// A master's answer in log messages.
inline std::string_view status_text(master_status s) noexcept {
  return s == master_status::server_error ? std::string_view{"server error"} : to_string(s);
}
// What each master answered: "1 granted 412 us, 2 taken 380 us, 3 server error "WRONGTYPE..."".
std::string describe_masters(const core::compact_results& results, std::string_view token);
// The checks behind error::invalid_argument, each filling `what` with the reason when it fails
// (validate_lock and the operations share them).
error_code check_resource(const client_config& cfg, std::string_view resource, std::string* what);
error_code check_ttl_of(const client_config& cfg, std::chrono::milliseconds ttl, std::string* what);
// The row of the kinds' table for these options (core::find_kind), and their values checked:
// permits, the owner id. Null, with `what` saying why, for options that go together nowhere.
const core::kind_spec* check_kind(lock_kind kind, std::size_t permits, bool fence, std::string_view owner, bool multi,
                                  std::string* what);

// The parts of a lock's state that only some kinds use (lock_state::extras()).
struct lock_extras {
  std::string kind_problem;            // why no kind has these options (lock_state::spec is null)
  std::string owner_id;                // reentrant: the identity the key holds (token: this hold)
  std::vector<std::string> resources;  // async_lock_all: every resource
  std::vector<std::string> all_keys;   // async_lock_all: their keys
  std::string waiter;                  // write: the waiting writer's claim, stable across rounds
};

// The state behind a lock handle, shared by the handle and the operations on it. Fields set
// before the handle is returned are read-only afterwards; the rest are atomics or under `mutex`.
struct lock_state final : reply_sink, std::enable_shared_from_this<lock_state> {
  lock_state(std::shared_ptr<client_impl> c, std::shared_ptr<const asio::any_io_executor> e)
      : owner(std::move(c)), ex_(std::move(e)) {}

  std::shared_ptr<client_impl> owner;  // reset when the acquisition fails
  // The client's executor: completions without their own. Shared by the client's locks (16 bytes
  // a lock, not an executor's 56), and kept by the lock when its owner goes.
  const asio::any_io_executor& ex() const noexcept { return *ex_; }
  std::string resource;
  std::string key;
  std::string token;
  std::chrono::milliseconds ttl{0};
  // The kind (docs/design.md, "Lock kinds"): its row of the table, chosen once before the
  // acquisition starts; nothing else branches on it. `kind` is what the caller asked for.
  const core::kind_spec* spec = &core::kinds::plain;  // null: no kind has these options
  lock_kind kind = lock_kind::exclusive;
  // The one-byte fields side by side (no padding between them).
  bool fence_create = false;  // sent with a confirmation (lock_action::create)
  std::atomic<bool> held{false};
  std::atomic<bool> lost{false};
  std::size_t permits = 1;
  std::size_t quorum = 0;        // masters that must grant (0: a majority)
  std::int64_t fence = 0;        // after a fenced acquisition
  std::int64_t fence_floor = 0;  // sent with a fenced round (lock_action::fence)
  bool multi() const noexcept { return spec == &core::kinds::multi; }
  // The values every request of this lock carries; the caller adds the round's (ttl, ticket...).
  core::step_values values() const noexcept {
    core::step_values v;
    v.key = key;
    const auto& x = extras();
    v.all_keys = x.all_keys;
    v.token = token;
    v.owner = x.owner_id;
    v.waiter = x.waiter;
    v.ttl_ms = ttl.count();
    v.permits = static_cast<std::int64_t>(permits);
    v.fence_floor = fence_floor;
    v.fence = fence;
    v.create = fence_create;
    return v;
  }
  // What only some kinds use, made for them alone (a plain lock, the common case, pays 8 bytes).
  // Set before the handle is returned (start_lock, then the acquisition's start), read-only after.
  const lock_extras& extras() const noexcept { return extras_ ? *extras_ : no_extras; }
  lock_extras& set_extras() {
    if (!extras_) extras_ = std::make_unique<lock_extras>();
    return *extras_;
  }
  std::size_t attempts = 0;
  std::atomic<clock_type::rep> deadline{0};
  std::atomic<std::size_t> extensions{0};
  // Guards results, loss_reason and loss_detail: one of a fixed set of mutexes, chosen by the
  // lock's address, rather than 40 bytes of its own. Locks that share one only wait for each
  // other, rarely and briefly: nothing holds two, nor calls out while holding one.
  std::mutex& mutex() const noexcept { return mutex_for(this); }
  core::compact_results results;  // the last decided round's
  error_code loss_reason;
  std::string loss_detail;         // the reason in words (lock::loss_description)
  std::shared_ptr<watch> watcher;  // on the strand only; made on demand
  // The longest ttl any request for the current token set (strand): bounds how long a key of
  // ours can outlive a release that did not arrive.
  mutable std::chrono::milliseconds longest_ttl{0};
  // Where a key of the granting round's token can be (strand): a lost release elsewhere is not
  // worth sending again.
  core::key_holders holders;

 private:
  static std::mutex& mutex_for(const void* p) noexcept;
  std::shared_ptr<const asio::any_io_executor> ex_;

 public:
  void set_results(const core::compact_results& r) {
    std::lock_guard guard{mutex()};
    results = r;
  }
  // Takes `r` as the results and leaves the last ones in `r` (their storage to reuse).
  void swap_results(core::compact_results& r) noexcept {
    std::lock_guard guard{mutex()};
    std::swap(results, r);
  }
  std::vector<master_result> results_copy() const {
    std::lock_guard guard{mutex()};
    return results.expand();
  }
  void set_deadline(clock_type::time_point tp) noexcept {
    deadline.store(tp.time_since_epoch().count(), std::memory_order_release);
  }
  clock_type::time_point get_deadline() const noexcept {
    return clock_type::time_point{clock_type::duration{deadline.load(std::memory_order_acquire)}};
  }
  // The release script in full (EVAL), for releases nobody waits for. A failed round's release
  // must run before the retry's SET, which carries the same token; an EVALSHA whose fallback
  // went out only when NOSCRIPT came back could run after it and delete the new key.
  // Encoded when needed (rarely: a dropped handle, a lost release), not kept by the lock.
  std::string background_release_payload() const;
  // A new round's token (each round signs its SET with a token never used before, so that a
  // release re-sent late can only ever delete what its own round set). False if none was drawn.
  bool new_token(error_code& ec);
  // Background releases: nobody waits for their answers (this only keeps the state alive).
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override;

 private:
  static const lock_extras no_extras;
  std::unique_ptr<lock_extras> extras_;
};

// Whoever listens to a watched lock: made by the first listener (or for the final event), so that
// a lock kept alive with nobody waiting on it pays for none of this.
struct watch_listeners {
  waiter_list<void(error_code)> waiters;  // lock::async_wait_lost
  // Events (lock::async_wait_event): recorded once somebody asked for one; the final event always.
  core::event_queue<lock_event> events;
  waiter_list<void(error_code, lock_event)> event_waiters;
  bool events_wanted = false;
};

// Watches one held lock: its keep-alive machine, the extension it may be running, and whoever
// waits for the loss. Woken by the client's single keep-alive timer.
struct watch final : op_base {
  watch(const std::shared_ptr<lock_state>& st, std::chrono::milliseconds request_timeout)
      : owner(st->owner), state(st), fsm(st->ttl, st->get_deadline(), request_timeout) {}

  ~watch() override;

  std::shared_ptr<client_impl> owner;
  std::weak_ptr<lock_state> state;  // weak: the state owns the watcher
  core::keep_alive_fsm fsm;
  // The extension in progress: taken from the client's spares when one starts, given back when
  // it ends (held locks spend almost all their time between extensions).
  std::unique_ptr<core::extend_fsm> ext;
  std::uint64_t ext_round = 0;
  clock_type::time_point scheduled = clock_type::time_point::max();  // in the client's timer queue
  bool cap_logged = false;
  std::shared_ptr<watch_listeners> listeners;  // null until somebody listens

  watch_listeners& listen() {
    if (!listeners) listeners = std::make_shared<watch_listeners>();
    return *listeners;
  }
  bool events_wanted() const noexcept { return listeners && listeners->events_wanted; }

  void keep(const keep_alive_options& opts);
  void wake(clock_type::time_point now);
  void wake_step(lock_state& st, clock_type::time_point now);  // wake()'s work, which may throw
  // The values of the extension in progress.
  core::step_values values(const client_impl& c, const lock_state& st) const;
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override;
  void on_extension_done(lock_state& st, error_code ec, clock_type::time_point now);
  void declare_lost(lock_state& st, error_code reason);
  void finish_waiters(error_code ec);
  void cancel() override;
  // The lock was released by async_unlock: the final event `released`; no more actions.
  void released();
  // Queues an event (non-final ones only while wanted) and hands events to the waiting readers.
  void post_event(lock_event e);
  void deliver_events();
  lock_event make_event(const lock_state& st, lock_event::type t, error_code ec = {}) const;
  // The loss reason in words, with what the keep-alive machine knows (which cap, ...).
  std::string describe_loss(error_code reason) const;
};

// The client's counters: written on its strand only (one writer), read by stats() from anywhere.
struct client_counters {
  using counter = std::atomic<std::uint64_t>;
  counter lock_operations{0}, lock_attempts{0}, acquired{0}, not_acquired{0}, quorum_unavailable{0},
      validity_expired{0}, aborted{0}, rejected{0};
  counter extensions{0}, extension_failures{0}, lost{0}, releases{0}, release_failures{0}, background_releases{0},
      releases_resent{0}, releases_expired{0}, wakeups{0}, handovers{0}, queued{0}, confirmations{0},
      unverified_fences{0};
  counter votes_quarantined{0}, client_pauses{0}, keep_alive_passes_split{0};
  live_histogram<true> acquire_latency;
};

class client_impl final : public std::enable_shared_from_this<client_impl>, public link_observer {
 public:
  client_impl(asio::any_io_executor ex, client_config cfg);
  ~client_impl();

  void start();
  void close();

  const asio::any_io_executor& executor() const noexcept { return ex_; }
  // The same, shared with the locks (lock_state::ex).
  const std::shared_ptr<const asio::any_io_executor>& shared_executor() const noexcept { return shared_ex_; }
  const strand_type& strand() const noexcept { return strand_; }
  const client_config& config() const noexcept { return cfg_; }
  const logger& log() const noexcept { return log_; }
  std::size_t size() const noexcept { return links_.size(); }
  bool closed() const noexcept { return closed_; }
  master_link& link(std::size_t i) noexcept { return *links_[i]; }
  std::vector<connection_status> statuses() const;
  client_stats stats() const;

  // Runs `f` on the strand, later (never inline: initiating functions must not complete inline).
  template <class F>
  void post(F&& f) {
    posted_.fetch_add(1, std::memory_order_relaxed);
    try {
      asio::post(strand_, [self = shared_from_this(), f = std::forward<F>(f)]() mutable {
        self->posted_.fetch_sub(1, std::memory_order_relaxed);
        std::move(f)();
      });
    } catch (...) {
      posted_.fetch_sub(1, std::memory_order_relaxed);
      throw;
    }
  }
  // Starts `op` on the strand, never inline. Called from a completion that the poller's wake-up
  // ran inline (the next lock after an unlock, say), it starts at that wake-up's end: no
  // scheduler pass of its own, and its requests share the wake-up's writes. Not while something
  // posted before is still to run, which it would overtake.
  void start_op(std::shared_ptr<started_op> op);

  // ---- on the strand ------------------------------------------------------------------------
  core::lock_rules lock_rules(std::chrono::milliseconds ttl, bool retry) const noexcept;
  // The rules for `st`'s kind (its quorum, scripts, fencing; no fair hand-over but for plain locks).
  core::lock_rules lock_rules(const lock_state& st, bool retry) const noexcept;
  error_code check_lock_args(const std::string& resource, std::chrono::milliseconds ttl,
                             std::string* what = nullptr) const;
  // Also the kind's options and, for async_lock_all, every resource; `what` says what is wrong.
  error_code check_kind_args(const lock_state& st, std::string& what) const;
  void enroll(op_base& op) noexcept;
  void retire(op_base& op) noexcept;
  double unit_random() { return std::uniform_real_distribution<double>{0.0, 1.0}(rng_); }

  // Queues `payload` on every master; a master that is down answers at once (not_connected)
  // through `sink`, after the others were queued.
  void send_all(std::string_view payload, clock_type::time_point deadline, const std::shared_ptr<reply_sink>& sink,
                std::uint64_t round);
  // The release script on every master, nobody waiting (failed attempts, dropped handles); the
  // answers go to `sink`, tagged so that `is_release` recognises them.
  // With `round` (a failed round's per-master results): masters its SET never reached are left
  // out, and a lost release is kept for re-sending only where the SET may have set a key.
  void release_everywhere(lock_state& st, const core::compact_results* round = nullptr);
  static bool is_release(std::uint64_t tag) noexcept;
  // Queues `payload` (an EVAL that may delete a key of a token living at most `ttl`, and that is
  // harmless to run twice) on every master, nobody waiting; kept for re-sending as a release is
  // where it may not have run, on the masters that `worth` marks (`yields`: core::release_ledger's
  // entry::yields).
  void send_in_background(std::string payload, std::chrono::milliseconds ttl, const std::vector<bool>& worth,
                          bool yields);
  // Remembers a release (an EVAL payload) to re-send on master `i`'s next connection, while a key
  // of its token, set or extended with at most `ttl`, could still exist (core::release_ledger);
  // `until` bounds one that was re-sent already; `yields`: core::release_ledger's entry::yields.
  void defer_release(std::size_t i, std::string_view payload, std::chrono::milliseconds ttl,
                     clock_type::time_point until = clock_type::time_point::min(), bool yields = false);
  void on_link_up(std::size_t i) override;
  void on_link_moved(std::size_t i) override;
  // Re-sends master `i`'s releases in doubt that are still worth sending (`why` is logged).
  void resend_deferred(std::size_t i, std::string_view why);
  void on_link_identified(std::size_t i, const node_facts& facts) override;
  void on_link_down(std::size_t i) override;
  void on_link_failed(std::size_t i, error_code cause) override;

  // ---- hazard guards (client_guard.cpp) ------------------------------------------------------
  // Queues a vote (acquire, extend) on every master as send_all does, with TIME behind it where
  // clocks are checked.
  void send_votes(std::string_view payload, clock_type::time_point deadline, const std::shared_ptr<reply_sink>& sink,
                  std::uint64_t round);
  // `payload` with TIME behind it, in vote_buf_ (valid until the next call).
  std::string_view timed(std::string_view payload);
  // An extension of `st` (values `v`) as a vote: in a keep-alive batch one of its `extend_many`
  // call where every master takes that (joins_many), else encoded and sent as send_votes does.
  void send_extension(const lock_state& st, const core::step_values& v, clock_type::time_point deadline,
                      const std::shared_ptr<reply_sink>& sink, std::uint64_t round);
  // A keep-alive renewal's extension machine (see spare_extensions_), and its return, which
  // leaves `m` empty.
  std::unique_ptr<core::extend_fsm> extension_machine(std::chrono::milliseconds ttl,
                                                      clock_type::time_point old_deadline, std::size_t needed);
  void give_back(std::unique_ptr<core::extend_fsm>& m) noexcept;
  // Master `i`'s answer to a vote sent at `sent`, before a machine sees it: takes TIME's sample,
  // and returns the vote's own error, or `master_quarantined` / `restart_guard_refused` for a
  // clean answer that does not count.
  error_code vote_reply(std::size_t i, error_code ec, const resp::response& r, clock_type::time_point sent);
  // Whether a hand-over from master `i` may count now: its guard counts its votes (not
  // quarantined after a restart or a clock jump, and its last clock sample not suspect).
  bool counts_handover(std::size_t i);
  // Between these two, votes are gathered instead of sent, and go out in requests of up to
  // `max_batch` votes with one TIME behind each rather than one behind each vote (the keep-alive
  // timer's pass: docs/safety.md, "Restarts and clock jumps").
  void begin_vote_batch() noexcept { batching_ = true; }
  void flush_vote_batch();
  // What the guards say of every master (any thread).
  std::vector<master_hazard> hazards() const;

  // ---- readiness (client::async_wait_ready) and failure causes ------------------------------
  // For an answer `not_connected` from master `i`: why its connection last failed (empty if it
  // has not failed yet). Lock operations keep it as the master's result error.
  error_code down_cause(std::size_t i) const noexcept { return health_.cause(i); }
  void wait_ready(ready_handler h, std::optional<std::chrono::milliseconds> timeout);
  // Completes the readiness waiters whose outcome is now known.
  void readiness_changed();
  // The masters that could not be used in `results` (a lock's), or, without results, those not
  // up now (readiness); their addresses and the refusal texts of their connections.
  quorum_report report(error_code ec, const std::vector<master_result>* results, std::size_t needed) const;
  // client::report: `l`'s last round (from any thread).
  quorum_report lock_report(const lock& l) const;
  const core::readiness& health() const noexcept { return health_; }
  void forget_ready(const ready_op& op);
  void on_push(std::size_t i, const resp::response& push) override;

  // ---- fair hand-over (docs/design.md, "Fair hand-over") ------------------------------------
  bool fair() const noexcept { return cfg_.fairness.enabled; }
  // A new waiter name, "<inbox>:<n>", under which the masters queue `op` and wake it (through
  // `op.on_wake`) until `forget_waiter`.
  std::string new_waiter(op_base& op);
  void forget_waiter(std::string_view member) noexcept;
  // Subscribes every master's connection to this client's wake channel: once, and again on each
  // new connection. Before the first fair round, so that no wake-up can be missed.
  void ensure_inbox();
  void subscribe_inbox(std::size_t i);
  // Loads every script on master `i`'s new connection (see all_scripts); `again`: also on one that
  // loaded them, whose cache was flushed since (a NOSCRIPT).
  void load_scripts(std::size_t i, bool again = false);
  // Stops using master `i` for good (its connection closes), with `cause` as the reason every
  // lock operation reports for it from now on; `why` is logged.
  void refuse_master(std::size_t i, error_code cause, std::string_view why);
  // Whether a release of this client saw waiters queued for `key` lately: its next acquisition of
  // `key` queues from the first round, so that it cannot jump ahead of them.
  bool recently_contended(const std::string& key);
  void note_contended(const std::string& key);
  // Takes `member` out of the queues of the masters where it may still be (every master whose
  // answer to the last round was not a grant), after its acquisition ended.
  // The end of a fair acquisition: every master's queues, and a key handed to `member` whose token
  // is not `keep` (the granted lock's token, or empty) given back.
  // `reached`: the masters where its requests may have run (a lost dequeue is kept for re-sending
  // only for those).
  void leave_queues(const lock_state& st, std::string_view member, std::string_view keep,
                    const std::vector<bool>& reached);
  // Whether master `i`'s connection refused to subscribe to the inbox (RESP2, or an ACL): no
  // wake-up or hand-over comes from it.
  bool deaf(std::size_t i) const noexcept { return i < deaf_.size() && deaf_[i]; }
  void set_deaf(std::size_t i) {
    if (i < deaf_.size()) deaf_[i] = true;
  }
  void note_queued() noexcept { bump<true>(counters_.queued); }
  void note_wakeup() noexcept { bump<true>(counters_.wakeups); }
  void note_handover() noexcept { bump<true>(counters_.handovers); }
  void note_confirm() noexcept { bump<true>(counters_.confirmations); }
  // A fenced lock granted with a fence that rests on the masters' clocks alone (logged).
  void note_unverified_fence(const lock_state& st, const core::compact_results& round);
  // The largest fencing counter this client saw on `key` (0: none): the next fenced acquisition
  // of `key` counts on from it (core::lock_fsm::start). A lost hint costs a confirmation only.
  std::int64_t fence_hint(const std::string& key) const;
  void note_fence_hint(const std::string& key, std::int64_t counter);
  // Sends `payload` again on the master of `tag` (queued after whatever was sent before it), as
  // the EVAL of a request whose EVALSHA met NOSCRIPT; false when it was refused. A vote's EVAL
  // (step `s` an acquisition or an extension) has TIME behind it, as its first sending had.
  bool resend_eval(std::uint64_t tag, step s, std::string_view payload, std::chrono::milliseconds timeout,
                   const std::shared_ptr<reply_sink>& sink);
  // A NOSCRIPT answer to the EVALSHA of step `s` of `st` (`v` its values): sends it again with
  // EVAL and returns true; false for any other answer.
  bool eval_instead(std::uint64_t tag, error_code ec, const resp::response& r, const lock_state& st, step s,
                    const core::step_values& v, const std::shared_ptr<reply_sink>& sink);

  // Step `s` of `st`'s kind (core::kind_spec) with values `v`, as EVALSHA (`by_sha`) or EVAL, in a
  // buffer the client reuses: valid until the next call (the connections copy what they queue),
  // so a request costs no allocation. Acquisitions and extensions also raise `st.longest_ttl`.
  // An unlock's EVALSHA may fall back to EVAL late (on NOSCRIPT) without harm: no request with
  // its token follows it.
  std::string_view scratch_step(step s, const lock_state& st, const core::step_values& v, bool by_sha = true);
  // What every request of `st` carries, with the client's queue entry timeout.
  core::step_values values(const lock_state& st) const noexcept {
    auto v = st.values();
    v.entry_timeout_ms = entry_timeout_.count();
    return v;
  }
  // Queues `payload` on the masters for which `pick(i)` is true (as send_all otherwise).
  template <class Pick>
  void send_some(std::string_view payload, clock_type::time_point deadline, const std::shared_ptr<reply_sink>& sink,
                 std::uint64_t round, Pick pick) {
    std::vector<std::pair<std::size_t, error_code>> refused;
    for (std::size_t i = 0; i < links_.size(); ++i) {
      if (!pick(i)) continue;
      if (auto ec = links_[i]->submit(payload, 1, deadline, sink, make_tag(round, i))) refused.emplace_back(i, ec);
    }
    const resp::response none;
    for (const auto& [i, ec] : refused) sink->on_reply(make_tag(round, i), ec, none);
  }
  // A writer's acquisition ended: drops its claim (which holds new readers off) on every master.
  void leave_claims(const lock_state& st);

  watch* watcher_of(const std::shared_ptr<lock_state>& st);
  // `released`: by async_unlock (the final event `released`); else the handle was dropped.
  void stop_watching(lock_state& st, bool released = false);
  // An extension by async_extend succeeded (`round`: its masters' answers, for the event).
  void deadline_moved(lock_state& st, const core::compact_results* round = nullptr);
  void add_waiter(const std::shared_ptr<lock_state>& st, lost_handler h);
  void add_event_waiter(const std::shared_ptr<lock_state>& st, event_handler h);
  void schedule(watch& w);

  // ---- counting and logging (on the strand) -----------------------------------------------
  void note_operation() noexcept { bump<false>(counters_.lock_operations); }
  void note_attempt() noexcept { bump<true>(counters_.lock_attempts); }
  void note_lock_outcome(error_code ec, clock_type::time_point started);
  void note_extension(const lock_state& st, error_code ec, std::chrono::milliseconds ttl, const core::extend_fsm& f,
                      bool keep_alive);
  void note_loss(const lock_state& st, error_code reason);
  void note_release(const lock_state& st, error_code ec, std::size_t held, const core::round_table& t);
  void note_background_release(const lock_state& st);

 private:
  void on_timer();
  void wake_due(std::size_t limit, std::exception_ptr& failure);
  void arm_timer(clock_type::time_point at);

  asio::any_io_executor ex_;
  std::shared_ptr<const asio::any_io_executor> shared_ex_;
  strand_type strand_;
  client_config cfg_;
  error_code config_error_;
  std::string config_problem_;
  logger log_;
  // One readiness wait for all the masters' plain sockets (null when the system refuses an epoll
  // set: they read through Asio then). Before links_: they hold it too.
  std::shared_ptr<read_poller> poller_;
  std::atomic<std::size_t> posted_{0};  // post()ed, not run yet (see start_op)
  std::vector<std::unique_ptr<master_link>> links_;
  std::vector<core::release_ledger> deferred_;  // per master; on the strand
  std::vector<bool> refused_;                   // per master: not used any more (refuse_master)
  std::vector<std::string> names_;              // "master N (address)", for log messages
  std::atomic<bool> closed_{false};
  client_counters counters_;
  std::minstd_rand rng_;
  resp::request scratch_;

  // Operations and watchers in progress, so that close() reaches them.
  op_base* ops_ = nullptr;

  // Readiness: each master's connection as last heard of, and who waits for a quorum of them.
  core::readiness health_;
  std::vector<std::shared_ptr<ready_op>> ready_ops_;

  // Fair hand-over.
  std::string inbox_;         // 16 hex digits naming this client's waiters
  std::string wake_channel_;  // where the masters wake them
  bool inbox_wanted_ = false;
  std::shared_ptr<reply_sink> inbox_sink_;
  std::vector<bool> deaf_;  // per master: its connection could not subscribe to the inbox
  std::shared_ptr<reply_sink> scripts_sink_;
  std::string scripts_payload_;
  std::uint64_t script_loads_ = 0;
  std::vector<std::uint64_t> scripts_loaded_;  // per master: the connection (`connects`) loaded
  std::uint64_t next_waiter_ = 0;
  std::unordered_map<std::uint64_t, op_base*> waiters_;                // waiting lock operations by number
  std::unordered_map<std::string, clock_type::time_point> contended_;  // lock key -> hint's end
  std::unordered_map<std::string, std::int64_t> fence_hints_;          // lock key -> counter seen
  std::chrono::milliseconds entry_timeout_{0};

  // Hazard guards: one per master (strand), and a copy for hazards() (any thread).
  friend struct probe_sink;
  core::guard_rules guard_rules_for(std::size_t i) const;
  void init_guards();
  // `now`: read after the reply was (its `received`).
  bool take_time(std::size_t i, const resp::response& r, std::size_t at, clock_type::time_point sent,
                 clock_type::time_point now);
  // Whether master `i`'s last clock sample (its answering node's, for a cluster) read backwards.
  bool last_sample_suspect(std::size_t i);
  void note_jump(std::size_t i, const core::guard_change& change, clock_type::time_point now);
  std::vector<std::shared_ptr<watch>> watched_locks();
  void shorten_held_locks(const std::vector<std::shared_ptr<watch>>& watched, std::chrono::microseconds by) noexcept;
  void wake_shortened(const std::vector<std::shared_ptr<watch>>& watched, clock_type::time_point now);
  void tell_holders(std::size_t i, hazard_cause cause, clock_type::time_point now);
  void arm_probes();
  void probe();
  void publish_hazards();
  std::vector<core::hazard_guard> guards_;
  // A cluster master's clock guards, one per node (its map number): its nodes' clocks are not one
  // clock. Empty for a plain master.
  std::vector<std::vector<core::hazard_guard>> node_clocks_;
  core::hazard_guard& node_clock(std::size_t i, std::size_t node);
  // Master `i`'s TIME sample: into its guard, or for a cluster into the node's clock guard.
  core::guard_change sample_clock(std::size_t i, std::size_t node, const core::time_sample& t);
  std::vector<bool> time_refused_;                  // TIME refused: clock not checked
  std::vector<clock_type::time_point> probe_sent_;  // a probe in flight since (else zero)
  std::vector<std::pair<clock_type::time_point, std::chrono::microseconds>> jumps_seen_;  // last jump
  std::string vote_buf_;                                                                  // a vote with TIME behind it
  // Votes gathered by begin_vote_batch() and not sent yet: one request's worth, the same for
  // every master that takes batches (batchable()), so that their bytes are encoded and kept once.
  struct gathered_vote {
    std::shared_ptr<reply_sink> sink;
    std::uint64_t round = 0;  // the vote's tag on master i is make_tag(round, i)
    bool joined = false;      // one of the batch's `extend_many` call, not a command of its own
  };
  using vote_targets = std::vector<gathered_vote>;
  struct vote_batch {
    std::string payload;        // the votes' own commands; TIME goes behind them when sent
    core::extend_batch joined;  // the plain extensions, sent first as one call (joins_many)
    vote_targets votes;
    clock_type::time_point deadline = clock_type::time_point::max();  // the votes' earliest
  };
  // Whether master `i` takes plain extensions in one `extend_many` call: a standalone Redis (its
  // handshake's INFO said so) that has not refused such a call since it connected.
  std::vector<bool> many_ok_;
  bool joins_many(const lock_state& st) const noexcept;
  // The answer of master `i` to a batch's `extend_many` call of `count` keys at `r[at]`: each
  // joined vote its own.
  void deliver_joined(std::size_t i, const resp::response& r, std::size_t at, const vote_targets& votes,
                      std::size_t count, bool sampled);
  // A batch is sent once it holds `max_batch` votes or `kept_bytes`: what a pass gathers at once
  // stays one request's worth however many locks come due together, and so does the storage
  // kept between passes.
  static constexpr std::size_t kept_bytes = 64 * 1024;
  void send_vote_batch();
  bool batch_full() const noexcept {
    return batch_.votes.size() >= max_batch || batch_.payload.size() + batch_.joined.bytes() >= kept_bytes;
  }
  friend struct batch_sink;
  static constexpr std::size_t max_batch = 32;  // votes behind one TIME
  bool batching_ = false;
  vote_batch batch_;
  bool shared_sample_ = false;  // the vote being told was sampled by its batch's TIME (taken already)
  bool batchable(std::size_t i) const noexcept;
  void deliver_batch(std::size_t i, error_code ec, const resp::response& r, clock_type::time_point sent,
                     const vote_targets& votes);
  std::shared_ptr<reply_sink> probe_sink_;
  redlock::detail::timer probe_timer_;
  mutable std::mutex hazards_mutex_;
  std::vector<master_hazard> hazards_;

  // Extension machines between two extensions, with their tables' storage: a renewal takes one
  // (extension_machine) and gives it back when it ends (give_back), so that it allocates none.
  // At most one timer slice's worth is kept.
  std::vector<std::unique_ptr<core::extend_fsm>> spare_extensions_;
  // The keep-alive timer: one for every watched lock, armed at the earliest wake-up.
  wake_queue<watch> wakes_;
  redlock::detail::timer timer_;
  // The smallest notify margin of any lock scheduled so far (it never grows back): what bounds how
  // long a pass cut short may make a wake-up wait (on_timer).
  std::chrono::milliseconds least_margin_ = std::chrono::milliseconds::max();
};

}  // namespace redlock::detail
