// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Every kind of lock in one table. A kind is the script each step sends, the keys (KEYS) and
/// arguments (ARGV) of that script, its quorum, and the few rules that differ between kinds. The
/// shell encodes every request of a lock through `encode_step` from the lock's row; nothing else
/// in the library branches on the kind. Adding a kind means one row, its scripts and its tests.
/// Pure: no I/O, no clock.

#include <redlock/core/quorum.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/export.hpp>
#include <redlock/lock_options.hpp>
#include <redlock/resp/request.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace redlock::core {

/// The steps of a lock's life that send a request of its kind.
enum class step : std::uint8_t {
  acquire,       ///< a round of the acquisition
  fair_acquire,  ///< a round that queues fairly (after the first, `lock_action::fair`)
  release,       ///< the release (also of a failed round, and in the background)
  extend,        ///< an extension (`async_extend`, keep-alive)
  confirm,       ///< the fence confirmation (`lock_action::type::confirm`)
  leave,         ///< a writer's acquisition ended: drop its claim
  /// A fair waiter's acquisition ended: leave the queues, and give back a key handed to it that
  /// it does not keep (`kind_spec::dequeue`).
  dequeue,
  /// The release of a round that failed or was cancelled: `kind_spec::abandon` where the kind has
  /// one (a fenced round gives back its counter step), else the release.
  abandon,
};

/// A key a step names (KEYS), relative to the lock.
enum class key_ref : std::uint8_t {
  lock,     ///< the lock key: key prefix + resource
  all,      ///< every resource's lock key, in order (`async_lock_all`): expands to several KEYS
  queue,    ///< the fair queue: lock key + `detail::queue_suffix`
  expiry,   ///< the fair queue's expiries: lock key + `detail::expiry_suffix`
  offer,    ///< the fair waiters' offers: lock key + `detail::offer_suffix`
  fence,    ///< the fencing counter: lock key + `detail::fence_suffix`
  holds,    ///< a reentrant lock's holds: lock key + `detail::holds_suffix`
  readers,  ///< a read/write lock's readers: lock key + `detail::readers_suffix`
  writer,   ///< a waiting writer's claim: lock key + `detail::writer_suffix`
  permits,  ///< a semaphore's permit count: lock key + `detail::permits_suffix`
};

/// An argument a step sends (ARGV), taken from the lock or the round (`step_values`).
enum class arg_ref : std::uint8_t {
  token,          ///< the round's random token
  owner,          ///< the owner id (reentrant locks)
  ttl,            ///< the ttl of this request, ms
  waiter,         ///< the waiter's name (fair queue, writer's claim)
  ticket,         ///< the fair round's ticket
  entry_timeout,  ///< how long a queue entry or a writer's claim lives unless renewed, ms
  permits,        ///< the semaphore's permits
  fence_floor,    ///< the largest counter seen so far (fenced acquire, fair or not)
  fence,          ///< the fence to confirm
  create,         ///< "1" when the confirmation may create a missing counter, else "0"
  zero,           ///< "0": a place holder the script does not read (keeps later ARGV in place); "no"
  one,            ///< "1": "yes" (the release hands the key to the first fair waiter)
  round,          ///< the acquisition's round number (the fair waiter's offer)
  keep,           ///< the token a fair waiter keeps when it leaves the queues (empty: none)
};

/// One step of a kind: a script with its KEYS and ARGV, or `SET key token NX PX ttl`, or nothing.
struct step_spec {
  const detail::script* script = nullptr;  ///< null: `set_nx`, or the kind has no such step
  bool set_nx = false;                     ///< the plain acquire: `SET lock token NX PX ttl`
  std::array<key_ref, 5> keys{};           ///< the script's KEYS, in order (the first `key_count`)
  std::uint8_t key_count = 0;              ///< how many of `keys`
  std::array<arg_ref, 7> args{};           ///< the script's ARGV, in order (the first `arg_count`)
  std::uint8_t arg_count = 0;              ///< how many of `args`

  /// Whether the kind has this step.
  constexpr bool exists() const noexcept { return script != nullptr || set_nx; }
  /// The KEYS the step names.
  constexpr std::span<const key_ref> key_refs() const noexcept { return {keys.data(), key_count}; }
  /// The ARGV the step sends.
  constexpr std::span<const arg_ref> arg_refs() const noexcept { return {args.data(), arg_count}; }
};

/// One row of the table: everything that makes a kind of lock what it is.
struct kind_spec {
  /// For logs and tests: "plain", "fenced", "reentrant", "reader", "writer", "semaphore", "multi".
  std::string_view name;
  step_spec acquire;       ///< each round of the acquisition (the first, and all of them unless fair)
  step_spec fair_acquire;  ///< a round that queues fairly (only with `fair`)
  step_spec release;       ///< the release: also of failed rounds and dropped handles
  step_spec extend;        ///< an extension (`async_extend`, keep-alive)
  step_spec confirm;       ///< the fence confirmation (only with `fence`)
  step_spec leave;         ///< dropping a claim when the acquisition ends (only with `claims`)
  step_spec dequeue;       ///< leaving the fair queues when the acquisition ends (only with `fair`)
  /// The release of a failed or cancelled round, when it must differ from `release` (`step::abandon`).
  step_spec abandon;
  /// Whether grants need more than a majority: `semaphore_quorum(N, permits)` instead.
  bool semaphore_quorum = false;
  /// Rounds after the first queue with `fair_acquire` (when the client's fairness is on).
  bool fair = false;
  /// Grants answer fencing counters, confirmed on a majority before success (`lock_rules::fence`).
  bool fence = false;
  /// A `queued` answer leaves a claim (a writer's) that `leave` drops when the acquisition ends.
  bool claims = false;
  /// A NOSCRIPT that comes after the lock was granted is answered by sending the granting request
  /// again with EVAL (the master holds nothing of ours otherwise). Not for a kind whose late
  /// acquire can leave something that nothing removes (a writer's claim), nor for the plain lock,
  /// whose granting `SET` cannot meet NOSCRIPT.
  bool resend_after_grant = false;

  /// The step's row.
  constexpr const step_spec& of(step s) const noexcept {
    switch (s) {
      case step::acquire:
        return acquire;
      case step::fair_acquire:
        return fair_acquire;
      case step::release:
        return release;
      case step::extend:
        return extend;
      case step::confirm:
        return confirm;
      case step::leave:
        return leave;
      case step::dequeue:
        return dequeue;
      case step::abandon:
        return abandon.exists() ? abandon : release;
    }
    return acquire;
  }
  /// Masters that must grant: a majority, or the semaphore's quorum.
  std::size_t quorum(std::size_t masters, std::size_t permits) const noexcept {
    return semaphore_quorum ? core::semaphore_quorum(masters, permits) : majority(masters);
  }
  /// Whether it acquires with a script that answers `{status, number}` (`lock_rules::scripted`).
  constexpr bool scripted() const noexcept { return acquire.script != nullptr; }
};

/// The table's rows (one per kind), and what they are made of.
namespace kinds {

/// Short names for the rows below.
using K = key_ref;
/// Short names for the rows below.
using A = arg_ref;

/// A step that runs script `s` with these KEYS and ARGV.
constexpr step_spec script_step(const detail::script& s, std::initializer_list<key_ref> keys,
                                std::initializer_list<arg_ref> args) {
  step_spec out;
  out.script = &s;
  for (auto k : keys) out.keys[out.key_count++] = k;
  for (auto a : args) out.args[out.arg_count++] = a;
  return out;
}
/// The plain acquire: `SET key token NX PX ttl`.
constexpr step_spec set_nx_step() {
  step_spec out;
  out.set_nx = true;
  return out;
}

// The plain lock's release and extension: every kind whose held key is a plain token key (plain,
// fenced, writer) shares them, byte for byte (a fenced lock's release also names its counter).
/// The check-the-token release, which hands the key to the first fair waiter (or wakes it).
inline constexpr step_spec plain_release =
    script_step(detail::release_script, {K::lock, K::queue, K::expiry, K::offer}, {A::token, A::one});
/// The fenced lock's release: the same script, which also grants the fence with a hand-over.
inline constexpr step_spec fenced_release =
    script_step(detail::release_script, {K::lock, K::queue, K::expiry, K::offer, K::fence}, {A::token, A::one});
/// Leaving the fair queues when an acquisition ends (plain and fenced locks).
inline constexpr step_spec fair_dequeue =
    script_step(detail::dequeue_script, {K::lock, K::queue, K::expiry, K::offer}, {A::waiter, A::keep});
/// The check-the-token extension, never shortening.
inline constexpr step_spec plain_extend = script_step(detail::extend_script, {K::lock}, {A::token, A::ttl});

// The rows are exported (REDLOCK_API): `find_kind` returns their addresses, which a user of the
// shared library compares with its own `&kinds::plain`.
// Each row names only what it has: every other member keeps its default (no step, false). GCC 12
// warns about members left to their defaults in a designated initializer; nothing is missing.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/// Plain Redlock: `SET NX PX`, interoperable with other Redlock clients; fair hand-over. A failed
/// round's release wakes the first waiter but hands it nothing (docs/design.md, "Fair hand-over").
REDLOCK_API inline constexpr kind_spec plain{
    .name = "plain",
    .acquire = set_nx_step(),
    .fair_acquire = script_step(detail::fair_acquire_script, {K::lock, K::queue, K::expiry, K::offer},
                                {A::token, A::ttl, A::waiter, A::ticket, A::entry_timeout, A::round}),
    .release = plain_release,
    .extend = plain_extend,
    .dequeue = fair_dequeue,
    .abandon = script_step(detail::release_script, {K::lock, K::queue, K::expiry, K::offer}, {A::token, A::zero}),
    .fair = true,
};

/// `lock_options::fence`: the plain lock's fair hand-over, where each grant and each hand-over also
/// moves the fencing counter (docs/safety.md, "Fencing tokens").
REDLOCK_API inline constexpr kind_spec fenced{
    .name = "fenced",
    .acquire = script_step(detail::fence_acquire_script, {K::lock, K::fence}, {A::token, A::ttl, A::fence_floor}),
    .fair_acquire = script_step(detail::fair_acquire_script, {K::lock, K::queue, K::expiry, K::offer, K::fence},
                                {A::token, A::ttl, A::waiter, A::ticket, A::entry_timeout, A::round, A::fence_floor}),
    .release = fenced_release,
    .extend = plain_extend,
    .confirm = script_step(detail::fence_confirm_script, {K::lock, K::fence}, {A::token, A::fence, A::create}),
    .dequeue = fair_dequeue,
    .abandon =
        script_step(detail::fence_abandon_script, {K::lock, K::queue, K::expiry, K::offer, K::fence}, {A::token}),
    .fair = true,
    .fence = true,
    .resend_after_grant = true,
};

/// `lock_options::owner`: the key holds the owner; each hold is a field of `holds`.
REDLOCK_API inline constexpr kind_spec reentrant{
    .name = "reentrant",
    .acquire = script_step(detail::reentrant_acquire_script, {K::lock, K::holds}, {A::owner, A::ttl, A::token}),
    .release = script_step(detail::reentrant_release_script, {K::lock, K::holds}, {A::owner, A::zero, A::token}),
    .extend = script_step(detail::reentrant_extend_script, {K::lock, K::holds}, {A::owner, A::ttl, A::token}),
    .resend_after_grant = true,
};

/// `lock_kind::read`.
REDLOCK_API inline constexpr kind_spec reader{
    .name = "reader",
    .acquire = script_step(detail::read_acquire_script, {K::lock, K::readers, K::writer}, {A::token, A::ttl}),
    .release = script_step(detail::read_release_script, {K::lock, K::readers}, {A::token}),
    .extend = script_step(detail::read_extend_script, {K::lock, K::readers}, {A::token, A::ttl}),
    .resend_after_grant = true,
};

/// `lock_kind::write`: once held, a plain token key (released and extended as the plain lock).
REDLOCK_API inline constexpr kind_spec writer{
    .name = "writer",
    .acquire = script_step(detail::write_acquire_script, {K::lock, K::readers, K::writer},
                           {A::token, A::ttl, A::waiter, A::entry_timeout}),
    .release = plain_release,
    .extend = plain_extend,
    .leave = script_step(detail::write_leave_script, {K::writer}, {A::waiter}),
    .claims = true,
};

/// `lock_kind::semaphore`: the lock key is the holders' sorted set.
REDLOCK_API inline constexpr kind_spec semaphore{
    .name = "semaphore",
    .acquire = script_step(detail::semaphore_acquire_script, {K::lock, K::permits}, {A::token, A::ttl, A::permits}),
    .release = script_step(detail::semaphore_release_script, {K::lock, K::permits}, {A::token}),
    .extend = script_step(detail::semaphore_extend_script, {K::lock, K::permits}, {A::token, A::ttl}),
    .semaphore_quorum = true,
    .resend_after_grant = true,
};

/// `client::async_lock_all`: every resource's key, all or none.
REDLOCK_API inline constexpr kind_spec multi{
    .name = "multi",
    .acquire = script_step(detail::multi_acquire_script, {K::all}, {A::token, A::ttl}),
    .release = script_step(detail::multi_release_script, {K::all}, {A::token}),
    .extend = script_step(detail::multi_extend_script, {K::all}, {A::token, A::ttl}),
    .resend_after_grant = true,
};

#pragma GCC diagnostic pop

/// Every row, for tests that go over all of them.
inline constexpr const kind_spec* all[] = {&plain, &fenced, &reentrant, &reader, &writer, &semaphore, &multi};

}  // namespace kinds

/// The row of a lock asked for with `kind`, `fence`, an owner id (`owned`) and `async_lock_all`
/// (`multi`); null for a combination that is not offered, with `why` saying what is wrong.
REDLOCK_API const kind_spec* find_kind(lock_kind kind, bool fence, bool owned, bool multi,
                                       std::string_view* why) noexcept;

/// What a request of a lock is made of besides its row: its keys and the round's values.
struct step_values {
  std::string_view key;                   ///< the lock key
  std::span<const std::string> all_keys;  ///< every resource's key (multi)
  std::string_view token;                 ///< `arg_ref::token`
  std::string_view owner;                 ///< `arg_ref::owner`
  std::string_view waiter;                ///< `arg_ref::waiter`
  std::int64_t ttl_ms = 0;                ///< `arg_ref::ttl` (also the plain `SET`'s PX)
  std::int64_t ticket = 0;                ///< `arg_ref::ticket`
  std::int64_t entry_timeout_ms = 0;      ///< `arg_ref::entry_timeout`
  std::int64_t permits = 0;               ///< `arg_ref::permits`
  std::int64_t fence_floor = 0;           ///< `arg_ref::fence_floor`
  std::int64_t fence = 0;                 ///< `arg_ref::fence`
  bool create = false;                    ///< `arg_ref::create`
  std::uint64_t round = 0;                ///< `arg_ref::round`
  std::string_view keep;                  ///< `arg_ref::keep`
};

/// Appends `s` for `v` to `req`: `EVALSHA sha numkeys KEYS... ARGV...` when `by_sha`, else the
/// same with `EVAL body`; `SET key token NX PX ttl` for the plain acquire. Nothing for a step the
/// kind does not have (returns false).
REDLOCK_API bool encode_step(resp::request& req, const step_spec& s, const step_values& v, bool by_sha);

}  // namespace redlock::core
