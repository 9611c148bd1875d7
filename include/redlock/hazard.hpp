// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The hazard guards: what a client does about masters that restarted without their data or whose
/// wall clock jumped (docs/safety.md, "Restarts and clock jumps"), and how it reports them.

#include <redlock/clock.hpp>
#include <redlock/export.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace redlock {

/// How a client tells that a master restarted (and forgot its keys).
enum class restart_detection : std::uint8_t {
  /// `INFO server` at every connect: a new `run_id`, or an uptime shorter than the quarantine, is
  /// a restart. A master that refuses `INFO` (ACL `@dangerous`, a renamed command) gets no vote
  /// counted until it answers: choose `reconnect` or `off` for such masters.
  run_id,
  /// For masters that refuse `INFO`: every connect, the first included, is taken for a restart,
  /// so each master is quarantined after every (re)connect. Safe, at the cost of availability.
  reconnect,
  /// Not guarded: a restarted master's votes count at once. Logged at warning at every connect and
  /// counted (`client_stats::masters_unguarded`). Only for masters that cannot restart without
  /// their data, or fleets whose restarts are delayed by the operator.
  off,
};

/// The hazard guards of a client (`client_config::guard`).
struct hazard_guard_options {
  /// How a restart is detected.
  restart_detection restarts = restart_detection::run_id;
  /// `TIME` with every vote (pipelined behind `SET NX PX` and the extend script): a master whose
  /// wall clock jumped forward (its keys expire early) is quarantined.
  bool clock_jumps = true;
  /// How long a restarted (or jumped) master's grants and extensions do not count, from the
  /// restart (or the jump). Zero: `max_ttl` plus its drift allowance, plus 1 s. At least
  /// `max_ttl`: a lock granted before the restart must have expired on every master first.
  std::chrono::milliseconds quarantine{0};
  /// A master that no vote reached for this long gets a `TIME` probe, so that the check made at
  /// the next vote compares with a recent sample (the legitimate drift allowed between two
  /// samples grows with the time between them). Zero: no probes.
  std::chrono::milliseconds clock_probe_interval{1000};
};

/// Why a master's votes do not count at the moment.
enum class hazard_cause : std::uint8_t {
  none,          ///< its votes count
  restarted,     ///< it restarted (new `run_id`, short uptime, or a reconnect under `reconnect`)
  clock_jumped,  ///< its wall clock jumped forward at a vote or a probe
  info_refused,  ///< `INFO` was refused under `restart_detection::run_id`: no vote counts until it answers
};

/// One master as the hazard guards see it (`client::hazards()`).
struct master_hazard {
  std::size_t index = 0;                    ///< in `client_config::masters`
  hazard_cause cause = hazard_cause::none;  ///< why its votes do not count (`none`: they do)
  /// Until when its votes do not count (`clock::time_point::max()` for `info_refused`).
  clock::time_point quarantined_until{};
  std::string run_id;                ///< from `INFO server` (empty: not asked or refused)
  std::int64_t uptime_seconds = -1;  ///< as it said at the last connect (-1: unknown)
  /// The last forward jump of its wall clock that was detected (zero: none).
  std::chrono::microseconds last_jump{0};
  std::uint64_t restarts = 0;     ///< restarts detected since the client started
  std::uint64_t clock_jumps = 0;  ///< forward jumps detected since the client started
  bool unguarded = false;         ///< restarts not detected (`off`) or its clock not checked (`TIME` refused)
  bool durable = false;           ///< declared durable (`connection_config::durable`): no restart quarantine
  /// Member by member.
  friend bool operator==(const master_hazard&, const master_hazard&) = default;
};

/// A short phrase for `c` ("restarted", "clock jumped", ...).
REDLOCK_API const char* to_string(hazard_cause c) noexcept;

}  // namespace redlock
