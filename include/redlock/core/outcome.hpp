// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// What one master's reply means for each command of the Redlock protocol, and the table of one
/// round's answers (one per master) with the quorum over them. Pure: times are passed in.

#include <redlock/clock.hpp>
#include <redlock/core/compact_results.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/error.hpp>
#include <redlock/master_result.hpp>
#include <redlock/resp/node.hpp>

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

/// The sans-I/O cores: the protocol's decisions as pure state machines and arithmetic, with time
/// and randomness passed in. The library's Asio shell drives them; they are public so that their
/// rules can be read and tested, not as a stable interface.
namespace redlock::core {

/// The clock of every deadline and validity in the cores (monotonic: wall-clock jumps do not
/// shorten or stretch a lock).
using clock = redlock::boot_clock;

/// The commands of the protocol: each has its own "yes" and "no".
enum class command : std::uint8_t {
  acquire,  ///< `SET key token NX PX ttl`: `+OK` granted, nil taken
  extend,   ///< the extend script: 1 granted (ours, extended), 0 taken (not ours any more)
  release,  ///< the release script: 1 or 2 granted (ours, deleted; 2: waiters queued), 0 taken
  /// An acquire script (fair hand-over and every lock kind but the plain one): `{1, n}` granted,
  /// `{0, n}` taken, `{-1, n}` queued (free for us later: another waiter comes first, or readers
  /// still hold it while this writer waits); `n` is the script's number (ticket, fence, count).
  acquire_script,
  acquire_fair = acquire_script,  ///< the fair acquire script's answers are of this shape
  /// The fence confirmation script: 1 the master holds our key and now has our fence, 0 not ours.
  confirm,
};

/// An acquire script's answer: its status and its number (ticket, fence, count) on that master,
/// and the fenced fair acquisition's ticket.
struct fair_reply {
  bool valid = false;                             ///< false: not `{1|0|-1, integer[, integer]}`, the rest unset
  master_status status = master_status::pending;  ///< 1 `granted`, 0 `taken`, -1 `queued`
  std::int64_t number = 0;                        ///< the script's number (ticket, fence or count)
  /// The third integer, which only the fair acquisition of a fenced lock answers: its ticket (its
  /// number is the fence). 0 when there is none.
  std::int64_t ticket = 0;
};

/// Reads `{status, number}` or `{status, number, ticket}` (integers) from a reply of an acquire script.
inline fair_reply fair_reply_of(const resp::response& r) noexcept {
  fair_reply out;
  const resp::node* v = resp::reply_value(r);
  if (!v || v->data_type != resp::type::array || (v->aggregate_size != 2 && v->aggregate_size != 3)) return out;
  const auto first = static_cast<std::size_t>(v - r.data());
  const std::size_t count = v->aggregate_size;
  if (first + count >= r.size()) return out;
  std::int64_t numbers[3] = {0, 0, 0};
  for (std::size_t i = 1; i <= count; ++i) {
    const auto& n = r[first + i];
    if (n.data_type != resp::type::integer) return out;
    const auto* end = n.value.data() + n.value.size();
    if (auto [p, ec] = std::from_chars(n.value.data(), end, numbers[i - 1]); ec != std::errc{} || p != end) return out;
  }
  if (numbers[0] == 1) {
    out.status = master_status::granted;
  } else if (numbers[0] == 0) {
    out.status = master_status::taken;
  } else if (numbers[0] == -1) {
    out.status = master_status::queued;
  } else {
    return out;
  }
  out.valid = true;
  out.number = numbers[1];
  out.ticket = numbers[2];
  return out;
}

/// What one master's reply (or the failure to get one, `ec`) means for `cmd`.
///
/// - `error::server_error`: `server_error`, with the server's text (the command did not run);
/// - `error::master_timeout`: `timeout` (it may still run);
/// - `error::not_connected`: `unreachable` (nothing was sent);
/// - any other error (connection lost, protocol error, aborted): `failed` (outcome unknown);
/// - a reply of the wrong shape: `failed` with `error::unexpected_reply`.
inline master_result classify(command cmd, boost::system::error_code ec, const resp::response& r) {
  master_result out;
  const resp::node* v = resp::reply_value(r);
  if (ec && ec == error::server_error) {  // (an answer without error, the usual case, compares nothing)
    out.status = master_status::server_error;
    out.error = ec;
    if (v) out.server_text = v->value;
    return out;
  }
  if (ec) {
    out.error = ec;
    out.status = ec == error::master_timeout  ? master_status::timeout
                 : ec == error::not_connected ? master_status::unreachable
                                              : master_status::failed;
    return out;
  }
  if (v) {
    if (cmd == command::acquire) {
      if (v->data_type == resp::type::simple_string && std::string_view{v->value} == "OK")
        out.status = master_status::granted;
      if (v->data_type == resp::type::null) out.status = master_status::taken;
    } else if (cmd == command::acquire_script) {
      const auto f = fair_reply_of(r);
      if (f.valid) {
        out.status = f.status;
        out.value = f.number;
      }
    } else if (v->data_type == resp::type::integer && v->value.size() == 1) {
      // One digit, read as a character: every script's answer, and judged on every reply.
      const char n = v->value[0];
      if (n == '1' || (cmd == command::release && n == '2')) out.status = master_status::granted;
      if (n == '0') out.status = master_status::taken;
    }
    if (out.status != master_status::pending) return out;
  }
  out.status = master_status::failed;
  out.error = error::unexpected_reply;
  return out;
}

/// True when `r` is the `NOSCRIPT` error of an `EVALSHA` whose script the master has not cached
/// (restarted, or `SCRIPT FLUSH`): the script is then sent again with `EVAL`, not counted.
inline bool is_noscript(boost::system::error_code ec, const resp::response& r) noexcept {
  if (!ec || ec != error::server_error) return false;
  const resp::node* v = resp::reply_value(r);
  return v && std::string_view{v->value}.substr(0, 8) == "NOSCRIPT";
}

/// Whether an answer counts towards the quorum of `cmd`. For acquire and extend only `granted`
/// does. For release any clean answer does: the key is gone from that master either way.
constexpr bool counts_as_yes(command cmd, master_status s) noexcept {
  return s == master_status::granted || (cmd == command::release && s == master_status::taken);
}

/// One round of a command sent to every master at once: each master's first answer, and the
/// quorum over them, decided at the first answer that makes the outcome certain.
class round_table {
 public:
  /// Starts a round of `cmd` on `n` masters sent at `start`, of which `needed` must say yes (0: a
  /// majority). Keeps the storage's capacity.
  void begin(command cmd, std::size_t n, clock::time_point start, std::size_t needed = 0) {
    cmd_ = cmd;
    start_ = start;
    decided_at_ = {};
    decided_ = false;
    votes_ = needed ? quorum{n, needed} : quorum{n};
    results_.reset(n);
  }

  /// Records master `i`'s answer at `now` (its latency counts from the round's start). A second
  /// answer of the same master, or an index out of range, is ignored. Returns true when this
  /// answer decided the round (reached or impossible). Taken by reference, as `compact_results::set`
  /// takes it: an answer moved along twice per reply was a measurable part of an extension's cost.
  bool record(std::size_t i, master_result&& r, clock::time_point now) {
    if (i >= results_.size() || results_.status(i) != master_status::pending) return false;
    if (r.status == master_status::pending) r.status = master_status::failed;  // an answer is never "pending"
    r.latency = std::chrono::duration_cast<std::chrono::microseconds>(now - start_);
    const bool yes = counts_as_yes(cmd_, r.status);
    // Kept before it is counted: a failure to keep it (allocation) leaves the round unchanged.
    results_.set(i, std::move(r));
    if (yes) {
      votes_.yes();
    } else {
      votes_.no();
    }
    if (decided_ || votes_.state() == quorum_state::pending) return false;
    decided_ = true;
    decided_at_ = now;
    return true;
  }

  /// Master `i`, which answered "taken" or "queued", was then handed the key by a holder's
  /// release (fair hand-over): its answer becomes a grant, with its latency up to `now`. The
  /// quorum is the caller's to judge (`lock_fsm::on_handover`); the votes stay as answered.
  void hand_over(std::size_t i, clock::time_point now) { hand_over(i, now, results_.value(i)); }
  /// The same for a fenced lock, whose hand-over granted the fence `fence` (its value from now on).
  void hand_over(std::size_t i, clock::time_point now, std::int64_t fence) {
    if (i >= results_.size()) return;
    const auto s = results_.status(i);
    if (s != master_status::taken && s != master_status::queued) return;
    master_result r;
    r.status = master_status::granted;
    r.value = fence;
    r.latency = std::chrono::duration_cast<std::chrono::microseconds>(now - start_);
    results_.set(i, std::move(r));
  }

  /// The command of the round (`begin`'s `cmd`).
  command cmd() const noexcept { return cmd_; }
  /// Where the round's quorum stands.
  quorum_state state() const noexcept { return votes_.state(); }
  /// Whether an answer has made the outcome certain (reached or impossible).
  bool decided() const noexcept { return decided_; }
  /// When the round's requests were sent; each answer's latency counts from here.
  clock::time_point start() const noexcept { return start_; }
  /// When the deciding answer was recorded (meaningful once `decided()`).
  clock::time_point decided_at() const noexcept { return decided_at_; }
  /// Number of masters in the round.
  std::size_t size() const noexcept { return results_.size(); }
  /// Yes votes the round needs.
  std::size_t needed() const noexcept { return votes_.needed(); }
  /// Each master's answer, in master order (`pending` for a master that has not answered yet),
  /// kept compact: a round in flight costs 16 bytes a master.
  const compact_results& answers() const noexcept { return results_; }
  /// The same, mutable (the shell moves them out once the round is done).
  compact_results& answers() noexcept { return results_; }
  /// Each master's answer in full (a copy), in master order.
  std::vector<master_result> results() const { return results_.expand(); }
  /// Master `i`'s status (`i` below `size()`).
  master_status status(std::size_t i) const noexcept { return results_.status(i); }
  /// The number master `i` answered with its status (`master_result::value`).
  std::int64_t value(std::size_t i) const noexcept { return results_.value(i); }

  /// Number of masters whose answer has status `s`.
  std::size_t count(master_status s) const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < results_.size(); ++i) n += results_.status(i) == s ? 1 : 0;
    return n;
  }
  /// Whether at least one master's answer has status `s`.
  bool any(master_status s) const noexcept { return count(s) != 0; }

 private:
  command cmd_ = command::acquire;
  clock::time_point start_{};
  clock::time_point decided_at_{};
  bool decided_ = false;
  quorum votes_{0};
  compact_results results_;
};

}  // namespace redlock::core
