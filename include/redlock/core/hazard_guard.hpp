// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The hazard guards of one master as a sans-I/O machine: when its votes count. Two hazards of
/// Redlock make a master grant a lock that another client still holds (docs/safety.md, "Restarts
/// and clock jumps"):
///
/// - **a restart without the data**: the keys are forgotten. The remedy the algorithm's authors
///   give is to keep a restarted master out for longer than the longest ttl; this machine does it
///   for the client: a master that restarted less than `quarantine` ago has its grants and
///   extensions not counted. A restart is seen at connect (`INFO server`: a new `run_id`, or an
///   uptime shorter than the quarantine), or assumed at every connect where `INFO` is refused.
/// - **a forward jump of its wall clock**: Redis expires keys by its wall clock, so a jump of J
///   shortens every key by J. Each vote carries `TIME`; the master's offset (its wall clock
///   against our clock) may move between two samples only by the round trips and the drift rate
///   the validity already allows. A larger forward move is a jump: quarantined as a restart.
///
/// Times are passed in; the machine reads no clock. `client_impl` feeds it the handshake's
/// identity and every `TIME` answer, and asks `counts(now)` before counting a vote.

#include <redlock/core/outcome.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/hazard.hpp>
#include <redlock/resp/node.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace redlock::core {

/// What a master said about itself at connect (`INFO server`), as the handshake read it.
struct node_identity {
  bool asked = false;        ///< `INFO` was sent
  bool answered = false;     ///< it answered with a `run_id` (else refused, or unreadable)
  std::string run_id;        ///< the server process's id: changes at every restart
  std::int64_t uptime = -1;  ///< `uptime_in_seconds` (whole seconds, from its wall clock)
  std::string refusal;       ///< its error reply when it refused (untrusted)
  std::string mode;          ///< `redis_mode`: "standalone", "cluster" or "sentinel" (empty: not said)
};

/// Reads `run_id` and `uptime_in_seconds` from an `INFO server` reply's text.
inline node_identity parse_info(std::string_view text) {
  node_identity id;
  id.asked = true;
  auto field = [&](std::string_view name) -> std::optional<std::string_view> {
    for (std::size_t at = 0; at < text.size();) {
      auto end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(at, end - at);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.size() > name.size() && line.substr(0, name.size()) == name && line[name.size()] == ':')
        return line.substr(name.size() + 1);
      at = end + 1;
    }
    return std::nullopt;
  };
  if (const auto mode = field("redis_mode"); mode && mode->size() <= 16) id.mode.assign(*mode);
  const auto run = field("run_id");
  const auto up = field("uptime_in_seconds");
  std::int64_t uptime = -1;
  if (up) {
    const auto* end = up->data() + up->size();
    if (auto [p, ec] = std::from_chars(up->data(), end, uptime); ec != std::errc{} || p != end || uptime < 0)
      uptime = -1;
  }
  if (!run || run->empty() || run->size() > 64 || uptime < 0) return id;
  id.answered = true;
  id.run_id.assign(*run);
  id.uptime = uptime;
  return id;
}

/// A count written in decimal digits only (no sign, no space), at most 18 of them so that it
/// cannot overflow, or nothing. Read on every vote (a `TIME` behind it), hence the plain loop.
inline std::optional<std::int64_t> parse_count(std::string_view s) noexcept {
  if (s.empty() || s.size() > 18) return std::nullopt;
  std::int64_t v = 0;
  for (const char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + (ch - '0');
  }
  return v;
}

/// Reads a `TIME` reply (`[seconds, microseconds]`, as bulk strings) into microseconds since the
/// epoch, or nothing when `r` from node `first` on is not one.
inline std::optional<std::int64_t> parse_time(const resp::response& r, std::size_t first) noexcept {
  if (first + 2 >= r.size() || r[first].data_type != resp::type::array || r[first].aggregate_size != 2)
    return std::nullopt;
  std::int64_t v[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const auto& n = r[first + 1 + static_cast<std::size_t>(k)];
    if (n.data_type != resp::type::blob_string && n.data_type != resp::type::integer) return std::nullopt;
    const auto count = parse_count(n.value);
    if (!count) return std::nullopt;
    v[k] = *count;
  }
  if (v[1] >= 1'000'000 || v[0] > 1'000'000'000'000) return std::nullopt;
  return v[0] * 1'000'000 + v[1];
}

/// One `TIME` answer: sent at `sent` and answered at `received` (our clock), reading `master_us`
/// (its wall clock, microseconds since the epoch) somewhere in between.
struct time_sample {
  clock::time_point sent{};      ///< when the request was sent (our clock)
  clock::time_point received{};  ///< when its answer came (our clock)
  std::int64_t master_us = 0;    ///< the master's wall clock, microseconds since the epoch
};

/// The guard's rules for one master.
struct guard_rules {
  restart_detection restarts = restart_detection::run_id;  ///< how a restart is seen
  bool clock_jumps = true;                                 ///< whether `TIME` samples are checked
  bool durable = false;                                    ///< no restart quarantine (its keys survive a restart)
  clock::duration quarantine{};  ///< how long a restarted or jumped master's votes do not count
  drift_policy drift{};          ///< the rate allowance (`factor`) and fixed slack between samples
  /// The precision allowed to `uptime_in_seconds`: whole seconds, from a cached clock.
  clock::duration uptime_slack = std::chrono::seconds{2};
};

/// What changed with the last call, for the log, the metrics and the holders' events.
struct guard_change {
  hazard_cause cause = hazard_cause::none;  ///< `none`: nothing new; else the new quarantine's cause
  clock::time_point until{};                ///< the quarantine's end
  std::chrono::microseconds jump{0};        ///< `clock_jumped`: the forward move seen (at least)
  bool uptime_inconsistent = false;         ///< `restarted`: the uptime said was impossible (clock moved)
  bool newly_refused = false;               ///< `info_refused` began
};

/// One master's guard (see the file's description).
class hazard_guard {
 public:
  /// A master not heard of yet, under `r`.
  explicit hazard_guard(guard_rules r = {}) noexcept : rules_(r) {}

  /// A connection's handshake completed: what `INFO` said (`id.asked` false: not sent), and its
  /// `TIME` sample when it had one. `now` is when the handshake's answers came.
  guard_change on_connect(const node_identity& id, const std::optional<time_sample>& t, clock::time_point now) {
    guard_change out;
    info_refused_ = false;
    if (rules_.restarts == restart_detection::run_id) {
      if (!id.answered) {
        info_refused_ = true;
        out.cause = hazard_cause::info_refused;
        out.newly_refused = true;
        out.until = clock::time_point::max();
      } else {
        out = on_identity(id, now);
      }
    } else if (rules_.restarts == restart_detection::reconnect && !rules_.durable) {
      out = quarantine(hazard_cause::restarted, now + rules_.quarantine);
      ++restarts_;
    }
    if (id.answered) {
      run_id_ = id.run_id;
      uptime_ = id.uptime;
    }
    if (t) {
      const auto c = on_time(*t);
      if (c.cause != hazard_cause::none) out = c;
    }
    last_heard_ = now;
    return out;
  }

  /// A `TIME` answer (with a vote, or a probe). Returns `clock_jumped` when the master's wall clock
  /// moved forward by more than the round trips and the allowed drift since the last sample.
  guard_change on_time(const time_sample& t) {
    guard_change out;
    last_heard_ = std::max(last_heard_, t.received);
    last_sample_ = std::max(last_sample_, t.received);
    if (!rules_.clock_jumps || t.received < t.sent) return out;
    // Our clock at the master's reading is in [sent, received], so its offset is in [lo, hi].
    const std::int64_t lo = t.master_us - micros(t.received);
    const std::int64_t hi = t.master_us - micros(t.sent);
    if (!estimated_) {
      rebase(lo, hi, t.received);
      return out;
    }
    // The estimate widens by the drift rate over the time since it was taken; the fixed
    // allowance is added once, in the comparison (added at every sample, it would let a clock that
    // gains a little at each of many samples pass).
    const std::int64_t slack = rate_drift(t.received);
    const std::int64_t fixed = std::chrono::duration_cast<std::chrono::microseconds>(rules_.drift.fixed).count();
    last_suspect_ = false;
    if (lo > hi_ + slack + fixed) {
      // Forward: every key on it now expires (lo - hi_) early. Quarantined as a restart.
      const std::int64_t jump = lo - hi_;
      rebase(lo, hi, t.received);
      back_pending_ = false;
      ++jumps_;
      last_jump_ = std::chrono::microseconds{jump};
      out = quarantine(hazard_cause::clock_jumped, t.received + rules_.quarantine);
      out.jump = last_jump_;
      return out;
    }
    if (hi < lo_ - slack - fixed) {
      // Backward: keys live longer, which is safe. A reading from a stale cached clock looks the
      // same, and rebasing on it would make the next fresh reading look like a forward jump: only
      // a second backward reading in a row moves the estimate.
      // Meanwhile, a vote answered with such a reading does not count: a key it set expires
      // early if the clock goes forward again.
      if (back_pending_) {
        rebase(lo, hi, t.received);
        back_pending_ = false;
      } else {
        back_pending_ = true;
        last_suspect_ = true;
      }
      return out;
    }
    back_pending_ = false;
    // Consistent: narrow the estimate (widened by the drift allowed since it was taken).
    lo_ = std::max(lo_ - slack, lo);
    hi_ = std::min(hi_ + slack, hi);
    if (lo_ > hi_) lo_ = hi_ = (lo_ + hi_) / 2;
    estimate_at_ = t.received;
    return out;
  }

  /// An answer came from the current process at `now` (any reply): it had not restarted then.
  void heard(clock::time_point now) noexcept { last_heard_ = std::max(last_heard_, now); }
  /// A master made of several nodes (a cluster) keeps one clock guard per node; a jump one of
  /// them saw (`change`, from its `on_time`) quarantines the whole master here, as a jump of its
  /// own would. `received`: when that sample came (it counts as this master's last sample).
  guard_change jumped_on_a_node(const guard_change& change, clock::time_point received) noexcept {
    last_heard_ = std::max(last_heard_, received);
    last_sample_ = std::max(last_sample_, received);
    if (!rules_.clock_jumps || change.cause != hazard_cause::clock_jumped) return {};
    ++jumps_;
    last_jump_ = change.jump;
    auto out = quarantine(hazard_cause::clock_jumped, change.until);
    out.jump = change.jump;
    return out;
  }

  /// Whether a vote answered at `now` counts.
  bool counts(clock::time_point now) const noexcept {
    return !info_refused_ && now >= restart_until_ && now >= jump_until_;
  }
  /// Whether the last `TIME` reading was a lone backward one: the vote it came with does not count.
  bool last_sample_suspect() const noexcept { return last_suspect_; }
  /// Why the votes do not count at `now` (`none` when they do; the later quarantine's cause when
  /// both run).
  hazard_cause cause(clock::time_point now) const noexcept {
    if (info_refused_) return hazard_cause::info_refused;
    if (now < restart_until_ && restart_until_ >= jump_until_) return hazard_cause::restarted;
    if (now < jump_until_) return hazard_cause::clock_jumped;
    return now < restart_until_ ? hazard_cause::restarted : hazard_cause::none;
  }
  /// Until when the votes do not count (`max()` while `INFO` is refused).
  clock::time_point until() const noexcept {
    return info_refused_ ? clock::time_point::max() : std::max(restart_until_, jump_until_);
  }
  /// When the last `TIME` answer came (for probes).
  clock::time_point last_sample() const noexcept { return last_sample_; }
  /// The `run_id` of the process last connected to (empty: not known).
  const std::string& run_id() const noexcept { return run_id_; }
  /// Its `uptime_in_seconds` at that connect (-1: not known).
  std::int64_t uptime() const noexcept { return uptime_; }
  /// Restarts seen (a new `run_id`, or a connect under `reconnect`).
  std::uint64_t restarts() const noexcept { return restarts_; }
  /// Forward clock jumps seen.
  std::uint64_t jumps() const noexcept { return jumps_; }
  /// The last jump's size (at least).
  std::chrono::microseconds last_jump() const noexcept { return last_jump_; }
  /// The rules it follows.
  const guard_rules& rules() const noexcept { return rules_; }

 private:
  static std::int64_t micros(clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  }

  // The offset may drift by `factor` of the time since the estimate was taken.
  std::int64_t rate_drift(clock::time_point now) const noexcept {
    const auto since = std::max<std::int64_t>(0, micros(now) - micros(estimate_at_));
    return static_cast<std::int64_t>(static_cast<double>(since) * rules_.drift.factor) + 1;
  }

  void rebase(std::int64_t lo, std::int64_t hi, clock::time_point at) noexcept {
    lo_ = lo;
    hi_ = hi;
    estimate_at_ = at;
    estimated_ = true;
  }

  guard_change on_identity(const node_identity& id, clock::time_point now) {
    guard_change out;
    const bool known = !run_id_.empty();
    if (known && id.run_id == run_id_) return out;  // a reconnect to the same process
    if (rules_.durable) {
      if (known) ++restarts_;
      return out;
    }
    // A lower bound of its uptime: whole seconds from a cached wall clock, so less the slack
    // (bounded first: ten years is more than any quarantine, and nanoseconds must not overflow).
    const std::int64_t said = std::min<std::int64_t>(id.uptime, std::int64_t{10} * 366 * 24 * 3600);
    auto up = std::chrono::duration_cast<clock::duration>(std::chrono::seconds{said}) - rules_.uptime_slack;
    if (up < clock::duration::zero()) up = clock::duration::zero();
    bool inconsistent = false;
    if (known) {
      ++restarts_;
      // It restarted after we last heard the old process: an uptime longer than that is its wall
      // clock's doing (a jump at restart), and cannot be trusted.
      if (up > now - last_heard_) {
        up = clock::duration::zero();
        inconsistent = true;
      }
    }
    if (up >= rules_.quarantine) return out;
    out = quarantine(hazard_cause::restarted, now + (rules_.quarantine - up));
    out.uptime_inconsistent = inconsistent;
    return out;
  }

  // Restart and jump quarantines are kept apart: neither ends the other.
  guard_change quarantine(hazard_cause why, clock::time_point until) noexcept {
    guard_change out;
    auto& end = why == hazard_cause::clock_jumped ? jump_until_ : restart_until_;
    end = std::max(end, until);
    out.cause = why;
    out.until = end;
    return out;
  }

  guard_rules rules_;
  clock::time_point restart_until_{};  // votes answered before these do not count
  clock::time_point jump_until_{};
  bool info_refused_ = false;
  bool last_suspect_ = false;  // the last reading was a lone backward one
  std::string run_id_;
  std::int64_t uptime_ = -1;
  clock::time_point last_heard_{};  // the last answer of the current process
  clock::time_point last_sample_{};
  // The offset estimate: its wall clock minus our clock, in microseconds, within [lo_, hi_].
  bool estimated_ = false;
  bool back_pending_ = false;
  std::int64_t lo_ = 0;
  std::int64_t hi_ = 0;
  clock::time_point estimate_at_{};
  std::uint64_t restarts_ = 0;
  std::uint64_t jumps_ = 0;
  std::chrono::microseconds last_jump_{0};
};

/// The client's own pause: when *every* master (at least three) shows a forward jump of about the
/// same size within one round (`window`: a request's deadline), it is most likely our clock that
/// stood still (a frozen virtual machine): independent masters do not step their clocks together,
/// in the same round trip, by the same amount. The client then shortens its held locks by the
/// pause; it lifts no quarantine (if the masters did jump, they must stay out). A majority is not
/// enough: a rolling jump of a minority at a time would pass for a pause within a few rounds.
/// Returns the pause when `jumps` (one per master: the last jump's time and size, zero size for
/// none) says so.
template <class Jumps>
std::optional<std::chrono::microseconds> client_pause(const Jumps& jumps, std::size_t masters, clock::time_point now,
                                                      clock::duration window) {
  // With one or two masters, "all of them alike" is too little evidence against our own clock.
  if (masters < 3) return std::nullopt;
  std::optional<std::chrono::microseconds> smallest;
  std::chrono::microseconds largest{0};
  std::size_t seen = 0;
  for (const auto& [at, size] : jumps) {
    if (size <= std::chrono::microseconds::zero() || now - at > window) return std::nullopt;
    ++seen;
    smallest = smallest ? std::min(*smallest, size) : size;
    largest = std::max(largest, size);
  }
  if (seen != masters || !smallest) return std::nullopt;
  // Alike: within a tenth of the pause (or 50 ms): the samples differ by their round trips.
  if (largest - *smallest > std::max<std::chrono::microseconds>(*smallest / 10, std::chrono::milliseconds{50}))
    return std::nullopt;
  return *smallest;
}

}  // namespace redlock::core
