// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The acquisition of a Redlock lock as a sans-I/O state machine: rounds of `SET NX PX` on every
/// master, the quorum decision, the validity check, release on every master after a failed round,
/// and the bounded, randomised retry schedule. The I/O shell sends, sleeps and completes as told;
/// every decision is here. The algorithm is Redlock as Redis describes it
/// (https://redis.io/docs/latest/develop/use/patterns/distributed-locks/); docs/safety.md states
/// what this implementation adds to it.
///
/// Fair hand-over (docs/design.md, "Fair hand-over"): the first round is plain `SET NX PX`; when it
/// fails, the waiter queues at once with the fair acquire script, which grants the key only to the
/// first of the queued waiters by ticket, and is woken by the masters' messages when a holder
/// releases, retrying as soon as a majority of masters have said so instead of at its next retry
/// tick. The retry schedule stays as the fallback for any message that never comes.
///
/// Lock kinds (docs/design.md, "Lock kinds"): every kind but the plain lock acquires with a script
/// that answers `{status, number}`; a semaphore needs more than a majority (`lock_rules::quorum`);
/// a fenced lock whose granting masters disagree on the fence confirms it on them before success,
/// and one granted by a master without a counter first hears the other masters' counters. A fenced
/// lock queues and is handed over as the plain lock is; each hand-over grants a fence.

#include <redlock/core/kind_spec.hpp>
#include <redlock/core/outcome.hpp>
#include <redlock/core/readiness.hpp>
#include <redlock/core/release_targets.hpp>
#include <redlock/core/retry.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace redlock::core {

/// The rules an acquisition follows (from `client_config`).
struct lock_rules {
  std::size_t masters = 0;                         ///< number of masters (N)
  std::chrono::milliseconds ttl{0};                ///< the keys' time to live, checked by `check_ttl`
  std::chrono::milliseconds request_timeout{250};  ///< deadline of each master's answer, from the send
  drift_policy drift{};                            ///< clock-drift allowance subtracted from the validity
  retry_policy retry{};                            ///< delay between attempts, and their limits
  bool retry_enabled = true;                       ///< false: one attempt (`async_try_lock`)
  /// Rounds after the first queue fairly and wait for wake-ups (`client_config::fairness`).
  bool fair = false;
  /// Fair rounds leave offers, and releases may hand the lock over (`fairness_options::hand_over`):
  /// a wake-up does not start the next round while the round's masters can still hand it over.
  bool hand_over = false;
  /// Masters that must grant (0: a majority; a semaphore's is larger, see `semaphore_quorum`).
  std::size_t quorum = 0;
  /// Acquire with a lock kind's script (answers `{status, number}`) instead of `SET NX PX`.
  bool scripted = false;
  /// The number each granting master answers is a fencing counter: the lock's fence is the largest,
  /// and it must be held by a majority of masters before the lock is granted (`confirm`).
  bool fence = false;
  /// A NOSCRIPT answer that comes after the grant is answered by sending the granting request
  /// again (`on_noscript`; `kind_spec::resend_after_grant`).
  bool resend_after_grant = false;
};

/// Checks a ttl against the rules shared by acquire and extend: positive, at most `max_ttl`, and
/// long enough that a quorum decided at the very end of the per-master deadline still leaves
/// validity. Returns `error::invalid_argument` or success.
inline boost::system::error_code check_ttl(std::chrono::milliseconds ttl, std::chrono::milliseconds max_ttl,
                                           std::chrono::milliseconds request_timeout, const drift_policy& drift) {
  // Bounded before any arithmetic: the validity is computed in steady_clock nanoseconds.
  if (ttl <= std::chrono::milliseconds::zero() || ttl > max_ttl) return error::invalid_argument;
  const auto usable = std::chrono::microseconds{ttl} - core::drift(ttl, drift);
  if (usable <= std::chrono::microseconds{request_timeout}) return error::invalid_argument;
  return {};
}

/// What the shell does next for a `lock_fsm`.
struct lock_action {
  /// What the shell is asked to do.
  enum class type : std::uint8_t {
    wait,      ///< nothing: wait for replies (or the sleep's end, or cancellation)
    acquire,   ///< send `SET key token NX PX ttl` to every master, per-request deadline `at`
    sleep,     ///< arm a timer for `at`, then call `on_timer`
    complete,  ///< complete the operation with `ec` (success: `validity_deadline()` holds)
    /// send the fence confirmation (with `fence`) to every master that granted the round with a
    /// smaller number (`needs_confirm`), per-request deadline `at`; answers come to `on_reply`
    confirm,
  };
  /// What to do; the members below say with what.
  type what = type::wait;
  /// Before anything else: run the release script on every master (nobody waits for it). Set
  /// after a failed or cancelled round, whose requests may still set the key.
  bool release = false;
  /// For `acquire` and `confirm`: each request's deadline. For `sleep`: when to call `on_timer`.
  clock::time_point at{};
  /// For `complete`: the operation's result (empty: acquired).
  boost::system::error_code ec;
  /// For `acquire`: send the fair acquire script with `ticket` (0: none yet; -1: move to the back
  /// of the queue) instead of `SET NX PX`.
  bool fair = false;
  /// For `acquire` with `fair`: the ticket to send (see `fair`).
  std::int64_t ticket = 0;
  /// For `confirm`: the fence to raise the counters to. For `acquire` of a fenced lock: the
  /// largest counter any master answered so far, from which the grant counts on (keeps the
  /// masters' counters equal, so that the fence rarely needs confirming).
  std::int64_t fence = 0;
  /// For `confirm`: whether a master without a counter gets one (only a fence checked against a
  /// majority of counters, `lock_fsm::fence_verified`, may create one).
  bool create = false;
};

/// One `async_lock` / `async_try_lock`. Drive it with `start`, then feed it every reply
/// (`on_reply`), the end of each sleep (`on_timer`) and cancellation (`cancel`), doing what each
/// returned action says. Replies of an earlier round (stragglers of a failed attempt) are ignored:
/// that round's release was already queued behind them on each master's connection.
class lock_fsm {
 public:
  /// A machine for one operation under `rules` (copied); nothing happens before `start`.
  explicit lock_fsm(const lock_rules& rules) noexcept : rules_(rules) {}

  /// Begins the first attempt at `now`. With `queue_first` (and fair rules), the first round
  /// queues too: waiters were seen on this lock lately, and a plain `SET NX` could jump their queue.
  /// `fence_floor` (fenced rules): a counter this client saw on the resource before (its last
  /// fence, say), from which the first round's grants count on, as later rounds' do from what
  /// their masters answered: masters a holder left behind are then raised to the same number as the
  /// others, and the fence needs no confirmation. Any number is safe here: a grant only ever counts
  /// on from the larger of its counter and the floor.
  lock_action start(clock::time_point now, bool queue_first = false, std::int64_t fence_floor = 0) {
    if (state_ != state::idle) return {};
    first_start_ = now;
    queue_first_ = queue_first;
    if (rules_.fence && fence_floor > 0 && fence_floor + 1 < script_counter_limit) fence_floor_ = fence_floor;
    return begin_round(now);
  }

  /// Master `master`'s answer to round `round` (the value of `round()` when it was sent), at `now`.
  /// `unit_random` in [0, 1) draws the retry delay should this answer fail the round.
  /// `down_cause`: for an answer `error::not_connected`, why the master's connection last failed
  /// (kept as its result's error; empty when unknown). A round that misses its quorum is not
  /// retried when masters unreachable for hopeless causes (`is_hopeless`: credentials, a host
  /// name that does not exist) leave too few others for any round to reach it: the operation
  /// completes at once with `quorum_unavailable` (even if some masters answered "taken").
  lock_action on_reply(std::uint64_t round, std::size_t master, boost::system::error_code ec,
                       const resp::response& reply, clock::time_point now, double unit_random,
                       boost::system::error_code down_cause = {}) {
    // Any round's `queued` answer, even a late one of a round that has failed: a writer's claim
    // may be on that master, and is dropped when the acquisition ends.
    if (!ec && !queued_seen_ && fair_reply_of(reply).status == master_status::queued) queued_seen_ = true;
    if (state_ == state::confirming && round == round_) return on_confirm(master, ec, reply, now, unit_random);
    if (state_ == state::hearing && round == round_) return on_heard(master, ec, reply, down_cause, now, unit_random);
    if (state_ != state::waiting || round != round_) return {};
    if ((rules_.fence || fair_round_) && !ec) {
      if (const auto f = fair_reply_of(reply); f.valid) {
        if (rules_.fence && f.number > fence_floor_) fence_floor_ = f.number;
        // The waiter's ticket is the highest any master gave it: the same on every master from the
        // next round on, so that all masters order the waiters alike. A fenced lock's fair answer
        // carries it after the fence.
        const auto t = rules_.fence ? f.ticket : f.number;
        if (fair_round_ && t > ticket_) ticket_ = t;
      }
    }
    auto result = classify(table_.cmd(), ec, reply);
    if (result.status == master_status::unreachable && down_cause) result.error = down_cause;
    const bool decided = table_.record(master, std::move(result), now);
    if (has(master, heard_early)) {
      clear(master, heard_early);
      const auto s = table_.status(master);
      if ((s == master_status::taken || s == master_status::queued) && !has(master, heard_handed)) {
        mark(master, heard_handed);
        ++handed_count_;
      }
    }
    if (handed_count_ != 0) {
      if (auto a = check_handed(now, unit_random); a.what != lock_action::type::wait) return a;
    }
    if (table_.state() == quorum_state::pending) return {};
    if (table_.state() == quorum_state::reached) {
      if (!decided) return {};
      if (validity<clock>(rules_.ttl, table_.start(), now, rules_.drift) > clock::duration::zero()) {
        deadline_ = core::validity_deadline<clock>(rules_.ttl, table_.start(), rules_.drift);
        if (rules_.fence) return begin_confirm(now, unit_random);
        last_error_.clear();
        return finish({}, false);
      }
      // A majority said yes, but too late to rely on it: as good as a failure.
      return fail_round(error::validity_expired, now, unit_random);
    }
    // A round that leaves offers fails only once every master answered (or timed out): its
    // failure then releases only masters whose answer may have set the key, and a round that
    // released nothing can still be handed the lock while it sleeps.
    if (rules_.hand_over && rules_.retry_enabled && fair_round_ && table_.any(master_status::pending)) return {};
    const bool contended = table_.any(master_status::taken) || table_.any(master_status::queued);
    return fail_round(contended ? error::not_acquired : error::quorum_unavailable, now, unit_random);
  }

  /// A master said a holder released the lock and named this waiter as the first in its queue
  /// (fair hand-over). Once a majority has said so since the last round was sent, the next round
  /// starts at once instead of at the end of the retry delay.
  lock_action on_wake(std::size_t master, clock::time_point now) {
    if (!rules_.fair || master >= rules_.masters) return {};
    if (state_ != state::waiting && state_ != state::sleeping) return {};
    // A release that hands nothing over only wakes: no hand-over comes from that master now.
    if (master < table_.size()) mark(master, heard_passed);
    return woken(master, now);
  }

  /// Whether a hand-over from `master` came before its answer, to be counted with it.
  bool has_early(std::size_t master) const noexcept { return has(master, heard_early); }
  /// A hand-over from `master` that came before its answer is not to be counted after all (the
  /// answer's clock sample made the guard stop trusting that master).
  void drop_early(std::size_t master) noexcept { clear(master, heard_early); }

  /// @brief A master handed the lock to this waiter: a holder's release set the key there with the
  /// token and ttl of the offer that round `round`'s fair request left (docs/design.md, "Fair
  /// hand-over").
  ///
  /// Counted only for the round in progress, and only where that round's request was answered
  /// "taken" or "queued" (the offer is that request's, so the key was set after the round
  /// began: its validity counts from the round's start like a grant's; a master whose request was
  /// not answered, or whose failed round was released there, is not counted). Once the hand-overs
  /// and the round's own grants still standing make a quorum within the validity, the acquisition
  /// succeeds. While the round is still being answered the grants count too; once it failed, only
  /// hand-overs do (its grants were released). Hand-overs of a round that did not succeed are
  /// given back by the next round's request (the fair acquire script) or by the `dequeue` when
  /// the acquisition ends. Every hand-over also says that the holder released: it counts as a
  /// wake-up (`on_wake`), so that hand-overs that cannot make a quorum start the next round; while
  /// the round's other masters can still hand it over (their messages are on the way), it waits.
  ///
  /// A fenced lock's hand-over is also a grant of a fence: `fence` is the master's counter, which
  /// the release moved up with the key. Once counted, the hand-overs and grants go through the
  /// fence's confirmation like a round's grants (`begin_confirm`; `unit_random` draws the retry
  /// delay should it fail). A hand-over to a fenced lock without a fence (a plain lock's release
  /// on the same name) is not counted: it only wakes.
  lock_action on_handover(std::uint64_t round, std::size_t master, clock::time_point now, std::int64_t fence = 0,
                          double unit_random = 0) {
    if (!rules_.fair || master >= rules_.masters) return {};
    if (state_ != state::waiting && state_ != state::sleeping) return {};
    bool kept = false;  // counted now, or once its master's answer comes
    const bool fenced_ok = !rules_.fence || (fence > 0 && fence < max_counter);
    if (fair_round_ && round == round_ && master < table_.size() && !(state_ == state::sleeping && released_) &&
        fenced_ok) {
      if (rules_.fence) {
        if (handed_fence_.size() != rules_.masters) handed_fence_.assign(rules_.masters, 0);
        handed_fence_[master] = fence;
      }
      const auto s = table_.status(master);
      if (s == master_status::pending && state_ == state::waiting) {
        // Before its answer (the answer and TIME behind it come together): counted once it comes.
        mark(master, heard_early);
        kept = true;
      }
      if ((s == master_status::taken || s == master_status::queued) && !has(master, heard_handed)) {
        mark(master, heard_handed);
        ++handed_count_;
        kept = true;
        if (auto a = check_handed(now, unit_random); a.what != lock_action::type::wait) return a;
      }
    }
    if (!kept && master < table_.size()) mark(master, heard_passed);  // it handed over what it had: nothing more comes
    return woken(master, now);
  }

  /// Master `master` cannot tell this waiter of a release (its connection could not subscribe:
  /// RESP2, or an ACL): no hand-over is waited for from it (`on_handover`).
  void set_deaf(std::size_t master, bool on) {
    if (on) {
      mark(master, heard_deaf);
    } else {
      clear(master, heard_deaf);
    }
  }

  /// The retry delay has passed: the next attempt.
  lock_action on_timer(clock::time_point now) {
    if (state_ != state::sleeping) return {};
    return begin_round(now);
  }

  /// The caller cancelled (or the client closed). A round in progress is released everywhere:
  /// whatever it acquired must not stay behind.
  lock_action cancel() {
    switch (state_) {
      case state::idle:
      case state::sleeping:
        return finish(boost::asio::error::operation_aborted, false);
      case state::waiting:
      case state::hearing:
      case state::confirming:
        return finish(boost::asio::error::operation_aborted, true);
      case state::done:
        break;
    }
    return {};
  }

  /// The round in progress (answers carry it back to `on_reply`).
  std::uint64_t round() const noexcept { return round_; }
  /// Whether fair rounds leave offers and releases may hand this lock over (the rules' `hand_over`).
  bool hands_over() const noexcept { return rules_.hand_over; }
  /// Attempts started so far.
  std::size_t attempts() const noexcept { return attempts_; }
  /// Whether the operation has completed (a `complete` action was returned).
  bool done() const noexcept { return state_ == state::done; }
  /// Whether answers of `round` are still awaited (its acquire requests, or its fence
  /// confirmations): a request of it that must be sent again (NOSCRIPT) is still wanted.
  bool awaiting(std::uint64_t round) const noexcept {
    return round == round_ && (state_ == state::waiting || state_ == state::hearing || state_ == state::confirming);
  }
  /// Whether the round in progress is confirming its fence (answers are to the confirmation).
  bool confirming() const noexcept { return state_ == state::confirming; }
  /// @brief What to send again with EVAL to a master that answered NOSCRIPT (its script cache was
  /// empty) to a request of `round` sent with EVALSHA; nothing when it should not be.
  ///
  /// While `round` is awaited: the same request (fair acquire, acquire or confirmation), whose
  /// answer still counts. After success, for the granting round or its confirmation, while the
  /// lock is still `held` and the kind allows it (`lock_rules::resend_after_grant`): the granting
  /// request, since that master holds nothing of ours and the lock would otherwise stand on a bare
  /// quorum. Sent on the same connection before any release of the lock can be (one is sent only
  /// once the lock is no longer held), it cannot run after the release and leave a key behind.
  std::optional<step> on_noscript(std::uint64_t round, bool held) const noexcept {
    if (!rules_.scripted && !fair_round_) return std::nullopt;  // a SET meets no NOSCRIPT
    if (awaiting(round)) {
      if (state_ == state::confirming) return step::confirm;
      return fair_round_ ? step::fair_acquire : step::acquire;
    }
    if (state_ != state::done || !succeeded_ || !held || !rules_.resend_after_grant) return std::nullopt;
    // A fair round's grant too is sent again as the kind's acquire: the lock is ours, and that
    // leaves no queue entry or offer behind.
    if (round == acquire_round_) return step::acquire;
    if (confirm_round_ != 0 && round == confirm_round_) return step::confirm;
    return std::nullopt;
  }
  /// Whether any master answered `queued` to a round of this operation, in time or late (a
  /// writer's claim may have been left there: `kind_spec::claims`).
  bool queued_seen() const noexcept { return queued_seen_; }
  /// Whether a request of this operation may still run on a master after it ended: it took
  /// more than one round, or a master of the last round did not answer it (a late acquire of a
  /// writer may then leave a claim, dropped by the `leave` its end sends on every connection,
  /// which runs after it).
  bool stragglers_possible() const noexcept {
    if (attempts_ > 1) return true;
    for (std::size_t i = 0; i < table_.size(); ++i) {
      const auto s = table_.status(i);
      if (s != master_status::granted && s != master_status::taken) return true;
    }
    return false;
  }
  /// The answers of the last round (the one that decided the outcome).
  const round_table& table() const noexcept { return table_; }
  /// The same, mutable: the shell moves the results out once the operation completes.
  round_table& table() noexcept { return table_; }
  /// Until when the holder may rely on the lock (after success).
  clock::time_point validity_deadline() const noexcept { return deadline_; }
  /// When the first attempt began.
  clock::time_point first_start() const noexcept { return first_start_; }
  /// The error that failed the last round (empty after success or before any failure).
  boost::system::error_code last_error() const noexcept { return last_error_; }
  /// Whether a fair round was sent: the waiter may be queued on masters that did not grant it
  /// the lock, and leaves their queues when the operation ends.
  bool queued() const noexcept { return sent_fair_; }
  /// The waiter's ticket (0 before any master gave one).
  std::int64_t ticket() const noexcept { return ticket_; }
  /// Rounds started early by wake-ups rather than by the retry delay.
  std::size_t wakeups() const noexcept { return wakeups_; }
  /// Whether the acquisition succeeded by masters handing it the lock (`on_handover`).
  bool handed() const noexcept { return succeeded_ && handed_count_ != 0; }
  /// The lock's fencing token after success with `lock_rules::fence` (0 otherwise).
  std::int64_t fence() const noexcept { return fence_; }
  /// The largest counter any master answered so far, or the floor `start` was given (fenced rules).
  std::int64_t fence_floor() const noexcept { return fence_floor_; }
  /// Fence confirmations sent (rounds whose granting masters disagreed on the fence).
  std::size_t confirm_rounds() const noexcept { return confirm_rounds_; }
  /// After a fenced success: false when the fence rests on the masters' clocks alone: a granting
  /// master had no counter, fewer than a majority of masters answered a counter, and it is not
  /// the resource's first use (every master answered, none with a counter). See docs/safety.md,
  /// "Fencing tokens". True otherwise.
  bool fence_verified() const noexcept { return fence_verified_; }
  /// Whether master `i` must be sent the fence confirmation (it granted with a smaller number).
  bool needs_confirm(std::size_t i) const noexcept {
    if (!rules_.fence || i >= table_.size()) return false;
    return table_.status(i) == master_status::granted && table_.value(i) < fence_;
  }

 private:
  // hearing: a fenced round reached its quorum, but a granting master had no counter; the other
  // masters' answers of the round are awaited (they come by the round's deadline) to fix the fence.
  enum class state : std::uint8_t { idle, waiting, hearing, sleeping, confirming, done };

  // Counters and clocks stay below 2^53 (the scripts count in doubles).
  static constexpr std::int64_t max_counter = std::int64_t{1} << 53;
  // The scripts refuse a counter from here on: a floor must leave its grant (floor + 1) below.
  static constexpr std::int64_t script_counter_limit = 9007199254740000;

  // Where a fenced round's answers stand (granting masters answer their bumped counter, or the
  // negated clock when they have none; refusing masters answer their counter, 0 for none).
  struct fence_view {
    std::int64_t granted_top = 0;  // the largest bumped counter of a granting master
    std::int64_t heard_top = 0;    // the largest counter or clock any master answered
    bool counterless = false;      // a granting master has no counter
    bool invalid = false;          // a granting master answered 0, or a number out of range
    std::size_t counters = 0;      // masters that answered a counter of theirs
    std::size_t heard = 0;         // masters that answered the script at all
  };
  fence_view view_fence() const noexcept {
    fence_view v;
    for (std::size_t i = 0; i < table_.size(); ++i) {
      const auto status = table_.status(i);
      const auto value = table_.value(i);
      if (status != master_status::granted && status != master_status::taken && status != master_status::queued)
        continue;
      if (value <= -max_counter || value >= max_counter) {  // not a counter (nor a clock) of ours
        v.invalid = true;
        continue;
      }
      ++v.heard;
      if (value > 0) ++v.counters;
      v.heard_top = std::max(v.heard_top, value < 0 ? -value : value);
      if (status != master_status::granted) continue;
      if (value > 0) v.granted_top = std::max(v.granted_top, value);
      v.counterless = v.counterless || value < 0;
      v.invalid = v.invalid || value == 0;
    }
    return v;
  }
  // Whether the fence can be fixed now: every granting master had a counter, or a majority of
  // masters answered a counter, or no answer of the round is still to come.
  bool fence_heard(const fence_view& v) const noexcept {
    return !v.counterless || v.counters >= majority(rules_.masters) || table_.count(master_status::pending) == 0;
  }

  lock_action on_heard(std::size_t master, boost::system::error_code ec, const resp::response& reply,
                       boost::system::error_code down_cause, clock::time_point now, double unit_random) {
    if (!ec) {
      if (const auto f = fair_reply_of(reply); f.valid && f.number > fence_floor_) fence_floor_ = f.number;
    }
    auto result = classify(table_.cmd(), ec, reply);
    if (result.status == master_status::unreachable && down_cause) result.error = down_cause;
    if (master >= table_.size() || table_.status(master) != master_status::pending) return {};
    (void)table_.record(master, std::move(result), now);  // decided already: only the answer is kept
    if (!fence_heard(view_fence())) return {};
    if (now >= deadline_) return fail_round(error::validity_expired, now, unit_random);
    return begin_confirm(now, unit_random);
  }

  // A fenced round reached its quorum. Each master's counter was bumped by its grant; the fence is
  // the largest. Any later holder's majority meets a majority that holds at least the fence, so
  // its own fence is larger (docs/safety.md, "Fencing tokens"): when fewer than a majority of the
  // granting masters answered the fence itself, the others are raised to it first.
  //
  // A granting master without a counter (first use, or restarted without its data) cannot vouch
  // for the fences before it. The fence is then fixed above every counter and clock the round
  // heard, once a majority of masters answered a counter (any earlier holder's confirming majority
  // meets it) or every master answered (as much as can be heard); the confirmation creates the
  // missing counters.
  lock_action begin_confirm(clock::time_point now, double unit_random) {
    const auto v = view_fence();
    if (v.invalid || (v.granted_top <= 0 && !v.counterless))
      return fail_round(error::unexpected_reply, now, unit_random);  // a counter is never 0
    if (!fence_heard(v)) {
      state_ = state::hearing;
      return {};
    }
    std::int64_t top = v.granted_top;
    fence_verified_ = true;
    if (v.counterless) {
      top = std::max(v.heard_top, fence_floor_) + 1;
      // A majority of counters meets any earlier holder's confirming majority. Short of that, only
      // a resource that no master has a counter of (first use: every master heard, none holds
      // one) has no earlier fence to be above; otherwise the fence rests on the clocks heard.
      fence_verified_ = v.counters >= majority(rules_.masters) || (v.counters == 0 && v.heard == rules_.masters);
    }
    fence_ = top;
    confirmed_ = 0;
    confirm_pending_ = 0;
    confirm_taken_ = 0;
    for (std::size_t i = 0; i < table_.size(); ++i) {
      if (table_.status(i) != master_status::granted) continue;
      if (table_.value(i) == top) {
        ++confirmed_;
      } else {
        ++confirm_pending_;
      }
    }
    if (confirmed_ >= majority(rules_.masters)) {
      last_error_.clear();
      return finish({}, false);
    }
    if (confirmed_ + confirm_pending_ < majority(rules_.masters)) {
      return fail_round(error::quorum_unavailable, now, unit_random);
    }
    ++round_;
    confirm_round_ = round_;
    state_ = state::confirming;
    confirm_seen_.assign(rules_.masters, false);
    ++confirm_rounds_;
    lock_action a{lock_action::type::confirm, false, std::min(now + rules_.request_timeout, deadline_), {}};
    a.fence = top;
    a.create = v.counterless && fence_verified_;
    return a;
  }

  lock_action on_confirm(std::size_t master, boost::system::error_code ec, const resp::response& reply,
                         clock::time_point now, double unit_random) {
    if (!needs_confirm(master) || confirm_seen_[master]) return {};
    confirm_seen_[master] = true;
    --confirm_pending_;
    const auto r = classify(command::confirm, ec, reply);
    if (r.status == master_status::granted) ++confirmed_;
    if (r.status == master_status::taken) ++confirm_taken_;
    if (confirmed_ >= majority(rules_.masters)) {
      if (now < deadline_) {
        last_error_.clear();
        return finish({}, false);
      }
      return fail_round(error::validity_expired, now, unit_random);
    }
    if (confirmed_ + confirm_pending_ < majority(rules_.masters)) {
      // The key left those masters (it expired, or a master restarted) or they did not answer.
      return fail_round(confirm_taken_ ? error::not_acquired : error::quorum_unavailable, now, unit_random);
    }
    return {};
  }

  // What the round in progress heard from each master, as `heard_bit`s in `heard_` (all but `heard_deaf` are
  // cleared when a round begins).
  enum heard_bit : std::uint8_t {
    heard_woke = 1,    // a wake-up came since the round was sent
    heard_handed = 2,  // it handed the lock to the round in progress
    heard_early = 4,   // it handed over before the round's answer came
    heard_passed = 8,  // its release woke without handing over
    heard_deaf = 16,   // it tells nothing (`set_deaf`)
  };
  bool has(std::size_t i, heard_bit h) const noexcept { return i < heard_.size() && (heard_[i] & h) != 0; }
  void mark(std::size_t i, heard_bit h) {
    if (i >= rules_.masters) return;
    if (heard_.size() != rules_.masters) heard_.assign(rules_.masters, 0);
    heard_[i] = static_cast<std::uint8_t>(heard_[i] | h);
  }
  void clear(std::size_t i, heard_bit h) noexcept {
    if (i < heard_.size()) heard_[i] = static_cast<std::uint8_t>(heard_[i] & ~h);
  }

  // A wake-up from `master` (`on_wake`, `on_handover`): the next round starts at once when a
  // majority has woken the sleeping waiter and no hand-over can still come.
  lock_action woken(std::size_t master, clock::time_point now) {
    if (has(master, heard_woke)) return {};
    mark(master, heard_woke);
    ++woken_count_;
    if (state_ == state::sleeping && woken_count_ >= majority(rules_.masters) && !handovers_possible()) {
      ++wakeups_;
      return begin_round(now);
    }
    return {};
  }

  // Whether the round in progress, not yet granted, can still be granted by hand-overs on their
  // way: then a majority of wake-ups waits for them (masters that woke the waiter with a plain
  // wake-up, or are deaf, hand nothing over this time).
  bool handovers_possible() const noexcept { return handovers_possible(state_ == state::waiting); }
  // The same, judged as while the round is answered (`answering`) or once it failed.
  bool handovers_possible(bool answering) const noexcept {
    if (!rules_.hand_over || !fair_round_ || (!answering && released_)) return false;
    const auto have = handed_count_ + (answering ? table_.count(master_status::granted) : 0);
    return have < table_.needed() && handed_count_ + still_possible(answering) >= table_.needed();
  }

  // Masters of the round in progress that may still count for it besides its hand-overs so far:
  // those that answered "taken" or "queued" and have not handed it the key yet, and, while the
  // round is being answered, its grants and the masters yet to answer.
  std::size_t still_possible(bool answering) const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < table_.size(); ++i) {
      const auto s = table_.status(i);
      const bool silent = has(i, heard_deaf) || has(i, heard_passed);
      const bool handable =
          (s == master_status::taken || s == master_status::queued) && !has(i, heard_handed) && !silent;
      const bool open = answering && (s == master_status::granted || (s == master_status::pending && !silent));
      n += handable || open ? 1 : 0;
    }
    return n;
  }

  // The round's hand-overs, with its grants while it is still being answered: success once they
  // make a quorum within the validity; a hand-over that comes too late is given back by the next
  // round or the dequeue. A fenced lock's then confirm their fence, as a round's grants do (a
  // round counted by hand-overs while it sleeps had no grant standing: it released none).
  lock_action check_handed(clock::time_point now, double unit_random) {
    const auto grants = state_ == state::waiting ? table_.count(master_status::granted) : 0;
    if (grants + handed_count_ < table_.needed()) return {};
    if (validity<clock>(rules_.ttl, table_.start(), now, rules_.drift) <= clock::duration::zero()) return {};
    for (std::size_t i = 0; i < heard_.size(); ++i) {
      if (!has(i, heard_handed)) continue;
      if (rules_.fence) {
        table_.hand_over(i, now, handed_fence_[i]);
      } else {
        table_.hand_over(i, now);
      }
    }
    deadline_ = core::validity_deadline<clock>(rules_.ttl, table_.start(), rules_.drift);
    if (rules_.fence) return begin_confirm(now, unit_random);
    last_error_.clear();
    return finish({}, false);
  }

  lock_action begin_round(clock::time_point now) {
    ++round_;
    acquire_round_ = round_;
    confirm_round_ = 0;
    ++attempts_;
    state_ = state::waiting;
    fence_ = 0;
    fence_verified_ = true;
    fair_round_ = rules_.fair && (attempts_ > 1 || queue_first_);
    sent_fair_ = sent_fair_ || fair_round_;
    for (auto& h : heard_) h = static_cast<std::uint8_t>(h & heard_deaf);
    woken_count_ = 0;
    handed_count_ = 0;
    released_ = false;
    const std::int64_t ticket = requeue_ ? -1 : ticket_;
    requeue_ = false;
    table_.begin(fair_round_ || rules_.scripted ? command::acquire_script : command::acquire, rules_.masters, now,
                 rules_.quorum);
    lock_action a{lock_action::type::acquire, false, now + rules_.request_timeout, {}, fair_round_, ticket};
    if (rules_.fence) a.fence = fence_floor_;
    return a;
  }

  // The round failed with `ec`: release it everywhere, then retry after a random delay while the
  // retry policy allows, else complete with `ec`. A fair waiter retries at once after its first,
  // plain round (to take its place in the queues), and when it was woken while the round ran.
  lock_action fail_round(boost::system::error_code ec, clock::time_point now, double unit_random) {
    last_error_ = ec;
    // Its release goes where its request may have set the key; a release sent now may be sent
    // again later, with this round's token, and delete a key handed over with it: the round is
    // not granted by hand-overs after that.
    released_ = any_may_have_set(table_.answers(), table_.size());
    fence_ = 0;  // the round's fence was never granted: nothing may use it
    bool now_again = false;
    if (rules_.fair) {
      // A waiter that cannot reach a majority would keep the first place in the queues it does
      // reach, holding up everyone behind it there: it moves to the back instead.
      const auto unanswered = table_.count(master_status::timeout) + table_.count(master_status::unreachable) +
                              table_.count(master_status::failed) + table_.count(master_status::server_error);
      if (unanswered > rules_.masters - majority(rules_.masters)) requeue_ = true;
      now_again = !fair_round_ || (woken_count_ >= majority(rules_.masters) && !handovers_possible(false));
    }
    const auto delay = now_again ? std::chrono::milliseconds{0} : retry_delay(rules_.retry, unit_random);
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(now - first_start_);
    // Wrong credentials or a host that does not exist stay so: retrying would only wait out the
    // whole retry budget before saying the same. Also when others hold the lock: the quorum is
    // out of reach whoever holds it.
    if (!quorum_possible(table_.answers(), table_.needed())) return finish(error::quorum_unavailable, true);
    if (!rules_.retry_enabled || !may_retry(rules_.retry, attempts_, elapsed, delay)) return finish(ec, true);
    // Even "at once" goes through a (zero) sleep: the shell releases the failed round first, from
    // its answers, which the next round would overwrite.
    state_ = state::sleeping;
    return {lock_action::type::sleep, true, now + delay, {}};
  }

  lock_action finish(boost::system::error_code ec, bool release) {
    state_ = state::done;
    succeeded_ = !ec;
    if (ec) fence_ = 0;  // failed or cancelled (even while confirming): no fence
    return {lock_action::type::complete, release, {}, ec};
  }

  lock_rules rules_;
  state state_ = state::idle;
  std::uint64_t round_ = 0;
  std::uint64_t acquire_round_ = 0;  // the last round of acquire requests
  std::uint64_t confirm_round_ = 0;  // its confirmation round (0: none)
  bool succeeded_ = false;
  bool queued_seen_ = false;
  std::size_t attempts_ = 0;
  clock::time_point first_start_{};
  clock::time_point deadline_{};
  boost::system::error_code last_error_;
  round_table table_;
  bool fair_round_ = false;  // the round in progress uses the fair acquire script
  bool sent_fair_ = false;
  bool requeue_ = false;  // the next fair round moves this waiter to the back
  bool queue_first_ = false;
  std::int64_t ticket_ = 0;
  std::vector<std::uint8_t> heard_;  // per master: `heard_bit`s
  std::size_t woken_count_ = 0;
  std::size_t wakeups_ = 0;
  bool released_ = false;  // the failed round in progress sent a release
  std::size_t handed_count_ = 0;
  std::vector<std::int64_t> handed_fence_;  // per master: the fence its hand-over granted (fenced rules)
  // Fencing (rules_.fence).
  std::int64_t fence_ = 0;
  std::int64_t fence_floor_ = 0;     // the largest counter any master answered
  std::size_t confirmed_ = 0;        // granting masters known to hold the fence
  std::size_t confirm_pending_ = 0;  // confirmations sent and not answered
  std::size_t confirm_taken_ = 0;    // answered "not ours": the key left that master
  std::size_t confirm_rounds_ = 0;
  std::vector<bool> confirm_seen_;
  bool fence_verified_ = true;
};

}  // namespace redlock::core
