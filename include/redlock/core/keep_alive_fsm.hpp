// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The keep-alive schedule of a held lock as a sans-I/O state machine: when to renew, when to
/// retry a failed renewal, the caps, and when (and why) to declare the lock lost. The loss is
/// always declared at the latest `notify_margin` before the validity deadline, whatever an
/// extension in progress is doing: the shell only has to wake the machine at `next_wake()`.

#include <redlock/clock.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace redlock {

/// How a held lock is kept alive by `lock::keep_alive`. Zero durations mean "derive from the ttl".
struct keep_alive_options {
  /// The ttl each extension sets. 0: the ttl the lock was acquired with.
  std::chrono::milliseconds ttl{0};
  /// Extend when the remaining validity falls below this (up to 32 ms sooner, so that renewals
  /// coming due together go out as one batch: `core::extension_step`). 0: half the ttl.
  std::chrono::milliseconds renew_below{0};
  /// Pause between retries of a failed extension (while validity remains). 0: a tenth of the ttl.
  std::chrono::milliseconds retry_interval{0};
  /// The loss is signalled this long before the validity deadline, so the guarded work has time to
  /// stop while the lock still holds. 0: a twentieth of the ttl (at least 2 ms).
  std::chrono::milliseconds notify_margin{0};
  /// At most this many extensions (0: no count limit).
  std::size_t max_extensions = 0;
  /// The lock is not extended past this long after `keep_alive` started (0: no limit). The default,
  /// one hour, keeps a stuck but live holder from keeping a lock forever, yet outlasts most jobs;
  /// a leader that should hold for its whole life sets 0 knowingly.
  std::chrono::milliseconds max_hold = std::chrono::hours{1};
};

namespace core {

using clock = redlock::boot_clock;

/// The loss is signalled this long before the deadline when nothing else was said: a twentieth of
/// the ttl, at least 2 ms.
constexpr std::chrono::milliseconds default_notify_margin(std::chrono::milliseconds ttl) noexcept {
  return std::max(std::chrono::milliseconds{2}, ttl / 20);
}

/// `opts` with every zero duration replaced by its default for a lock of `ttl`.
constexpr keep_alive_options resolve(keep_alive_options opts, std::chrono::milliseconds ttl) noexcept {
  using std::chrono::milliseconds;
  if (opts.ttl <= milliseconds::zero()) opts.ttl = ttl;
  if (opts.renew_below <= milliseconds::zero()) opts.renew_below = opts.ttl / 2;
  if (opts.retry_interval <= milliseconds::zero()) opts.retry_interval = std::max(milliseconds{1}, opts.ttl / 10);
  if (opts.notify_margin <= milliseconds::zero()) opts.notify_margin = default_notify_margin(opts.ttl);
  return opts;
}

/// The grid that renewals fall on, rounded down: the largest power of two of milliseconds at most
/// `renew_below / 128`, at most 32 ms, and none (zero) when that is under 8 ms. Locks of one
/// client that come due within one step are then woken by the same timer pass and extended as a
/// batch (one write per master, their replies read together), instead of one wake-up, one write
/// per master and one read per master each. A renewal comes at most one step early, never late: an
/// extension sent early only renews sooner (at most 1/128 of `renew_below` more extensions).
constexpr clock::duration extension_step(std::chrono::milliseconds renew_below) noexcept {
  std::chrono::milliseconds step{32};
  while (step >= std::chrono::milliseconds{8}) {
    if (step * 128 <= renew_below) return step;
    step /= 2;
  }
  return clock::duration::zero();
}

/// What the shell does next for a `keep_alive_fsm`.
struct keep_alive_action {
  /// What the shell is asked to do.
  enum class type : std::uint8_t {
    none,    ///< nothing now: wake the machine again at `next_wake()`
    extend,  ///< run one extension of `ttl` (an `extend_fsm`), then call `on_extended`
    lost,    ///< the lock is lost, for `reason`: tell the holder (the machine is finished)
  };
  /// What to tell the holder about what just happened (`lock_event`), besides the action.
  enum class notice : std::uint8_t {
    none,           ///< nothing to tell
    extended,       ///< the extension succeeded: the lock runs until the new deadline
    extend_failed,  ///< the extension failed (`cause`) but the lock is still valid: a retry follows
    lost,           ///< the lock is lost (`reason`; comes with `type::lost`)
  };
  /// An action `w` with its `ttl` `t`, loss `reason` `r`, `notice` `n` and `extend_failed` cause `c`.
  /// A constructor rather than an aggregate, so that `{what, ttl, reason}` stays complete.
  constexpr keep_alive_action(type w = type::none, std::chrono::milliseconds t = std::chrono::milliseconds{0},
                              boost::system::error_code r = {}, notice n = notice::none,
                              boost::system::error_code c = {}) noexcept
      : what(w), ttl(t), reason(r), tell(n), cause(c) {}

  /// What to do; the members below say with what.
  type what = type::none;
  /// For `extend`: the ttl the extension sets.
  std::chrono::milliseconds ttl{0};
  /// For `lost`: why (`error::validity_expired`, `not_owner`, `extension_limit`, or the error of
  /// the last failed extension).
  boost::system::error_code reason;
  /// What to tell the holder (an event), besides the action.
  notice tell = notice::none;
  /// For `notice::extend_failed`: why the extension failed.
  boost::system::error_code cause;
};

/// Which cap stopped a keep-alive (`keep_alive_fsm::cap()`).
enum class keep_alive_cap : std::uint8_t { none, max_extensions, max_hold };

/// Watches one held lock. Without `keep`, it only declares the loss (`validity_expired`) a margin
/// before the deadline; with `keep`, it also extends the lock before it runs out.
class keep_alive_fsm {
 public:
  /// @param ttl the ttl the lock was acquired with; @param deadline its validity deadline;
  /// @param request_timeout the per-master deadline of one extension.
  keep_alive_fsm(std::chrono::milliseconds ttl, clock::time_point deadline,
                 std::chrono::milliseconds request_timeout) noexcept
      : ttl_(ttl), deadline_(deadline), margin_(default_notify_margin(ttl)), request_timeout_(request_timeout) {}

  /// Starts keeping the lock alive, or replaces the options of a running keep-alive (the caps
  /// count from the first call).
  void keep(const keep_alive_options& opts, clock::time_point now) noexcept {
    if (finished()) return;
    opts_ = resolve(opts, ttl_);
    margin_ = opts_.notify_margin;
    if (capped_) return;  // the caps count from the first call: a capped lock is not revived
    if (!started_) hold_start_ = now;
    started_ = true;
    keeping_ = true;
    next_try_ = renewal_point();
  }

  /// When the shell must call `on_timer` next; `time_point::max()` once finished. Never later
  /// than the loss point (`deadline - margin`).
  clock::time_point next_wake() const noexcept {
    if (finished()) return clock::time_point::max();
    const auto loss_at = deadline_ - margin_;
    return (keeping_ && !extending_) ? std::min(loss_at, next_try_) : loss_at;
  }

  /// The time `next_wake()` named has come (`now`): declares the loss at the loss point, asks for
  /// an extension when one is due, or stops extending when a cap is reached.
  keep_alive_action on_timer(clock::time_point now) {
    if (finished()) return {};
    if (now >= deadline_ - margin_) return lose(pending_ ? pending_ : make_error_code(error::validity_expired));
    if (!keeping_ || extending_ || now < next_try_) return {};
    const bool by_count = opts_.max_extensions != 0 && extensions_ >= opts_.max_extensions;
    const bool by_time = opts_.max_hold.count() > 0 && now + opts_.ttl > hold_start_ + opts_.max_hold;
    if (by_count || by_time) {
      // Not extended any more: the loss comes at the deadline, and says why.
      keeping_ = false;
      capped_ = true;
      cap_ = by_count ? keep_alive_cap::max_extensions : keep_alive_cap::max_hold;
      pending_ = error::extension_limit;
      return {};
    }
    extending_ = true;
    return {keep_alive_action::type::extend, opts_.ttl, {}};
  }

  /// The extension asked for by `on_timer` ended with `ec` (success: the lock now runs until
  /// `new_deadline`).
  keep_alive_action on_extended(boost::system::error_code ec, clock::time_point new_deadline, clock::time_point now) {
    if (!extending_ || finished()) return {};
    extending_ = false;
    if (ec == boost::asio::error::operation_aborted) return {};
    if (!ec) {
      deadline_moved(new_deadline);
      // An extension that left less than `renew_below` (a ttl no longer than it: an extension
      // never shortens, and never lengthens past its own ttl) would be due again at once: paced
      // by the retry interval instead of extending in a loop.
      if (keeping_ && next_try_ <= now) next_try_ = now + opts_.retry_interval;
      pending_.clear();
      return told(keep_alive_action::notice::extended, {});
    }
    // The key is gone or taken, or the quorum came too late: nothing to wait for.
    if (ec == error::not_owner || ec == error::validity_expired) return lose(ec);
    // No quorum this time (masters down or slow): retry while an attempt can still end in time.
    pending_ = ec;
    const auto next = now + opts_.retry_interval;
    if (next + request_timeout_ >= deadline_ - margin_) return lose(ec);
    next_try_ = next;
    return told(keep_alive_action::notice::extend_failed, ec);
  }

  /// The lock was extended (by this machine's extension or by the holder's `async_extend`).
  void deadline_moved(clock::time_point new_deadline) noexcept {
    if (finished()) return;
    deadline_ = new_deadline;
    ++extensions_;
    if (keeping_) next_try_ = renewal_point();
  }

  /// The validity was found shorter than believed (the client's clock stood still): not an
  /// extension. The next `on_timer` tells the holder, or extends at once.
  void deadline_shortened(clock::time_point new_deadline) noexcept {
    if (finished() || new_deadline >= deadline_) return;
    deadline_ = new_deadline;
    if (keeping_) next_try_ = std::min(next_try_, renewal_point());
  }

  /// The lock was released (or its handle dropped, or the client closed): no more actions.
  void stop() noexcept { stopped_ = true; }

  /// Whether the machine has ended (lost or stopped): it asks for nothing more.
  bool finished() const noexcept { return stopped_ || lost_; }
  /// Whether the loss was declared.
  bool lost() const noexcept { return lost_; }
  /// Whether it extends the lock (from `keep` until a cap stops it).
  bool keeping() const noexcept { return keeping_; }
  /// Whether an extension it asked for is in progress.
  bool extending() const noexcept { return extending_; }
  /// True once a cap stopped the keep-alive (the loss will follow at the deadline).
  bool capped() const noexcept { return capped_; }
  /// Which cap stopped it (`none` while not capped).
  keep_alive_cap cap() const noexcept { return cap_; }
  /// Why the lock was lost (empty while not lost).
  boost::system::error_code reason() const noexcept { return lost_ ? pending_ : boost::system::error_code{}; }
  /// The lock's current validity deadline.
  clock::time_point deadline() const noexcept { return deadline_; }
  /// How long before `deadline()` the loss is declared (`keep_alive_options::notify_margin`).
  std::chrono::milliseconds margin() const noexcept { return margin_; }
  /// Extensions so far (this machine's and the holder's own).
  std::size_t extensions() const noexcept { return extensions_; }
  /// The options in force, zero durations resolved (before `keep`: the defaults, unresolved).
  const keep_alive_options& options() const noexcept { return opts_; }

 private:
  keep_alive_action lose(boost::system::error_code reason) {
    lost_ = true;
    pending_ = reason;
    return {keep_alive_action::type::lost, {}, reason, keep_alive_action::notice::lost, {}};
  }
  // When the next extension is due: `renew_below` before the deadline, rounded down to the grid.
  clock::time_point renewal_point() const noexcept {
    const auto at = deadline_ - opts_.renew_below;
    const auto step = extension_step(opts_.renew_below);
    if (step == clock::duration::zero()) return at;
    const auto since = at.time_since_epoch();
    auto rest = since % step;
    if (rest < clock::duration::zero()) rest += step;
    return at - rest;
  }
  static keep_alive_action told(keep_alive_action::notice n, boost::system::error_code cause) {
    return {keep_alive_action::type::none, {}, {}, n, cause};
  }

  std::chrono::milliseconds ttl_;
  clock::time_point deadline_;
  std::chrono::milliseconds margin_;
  std::chrono::milliseconds request_timeout_;
  keep_alive_options opts_{};
  clock::time_point hold_start_{};
  clock::time_point next_try_ = clock::time_point::max();
  boost::system::error_code pending_;  // why the coming loss will be declared, when known before it
  std::size_t extensions_ = 0;
  bool started_ = false;
  bool keeping_ = false;
  bool extending_ = false;
  bool capped_ = false;
  keep_alive_cap cap_ = keep_alive_cap::none;
  bool lost_ = false;
  bool stopped_ = false;
};

}  // namespace core
}  // namespace redlock
