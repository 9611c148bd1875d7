// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// `redlock status`: what each master keeps for a resource, the verdict over all of them, and how
/// both are printed (pure: status.cpp asks the masters).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace redlock::cli {

/// What the lock key is on one master.
enum class key_shape {
  none,       ///< no key
  token,      ///< a holder's token (plain, fenced, writer, several resources) or an owner (reentrant)
  readers,    ///< the readers' marker: readers hold it (their tokens are in `master_view::members`)
  semaphore,  ///< a semaphore's holders (in `master_view::members`)
};

/// An entry of a sorted set that has not lapsed: a reader, a semaphore's holder.
struct member {
  std::string id;
  std::int64_t left_ms = 0;  ///< until it lapses, by the master's clock; -1: unknown (no TIME)
};

/// A waiter in the fair queue beside the key.
struct waiter {
  std::string name;
  std::int64_t ticket = 0;
  std::int64_t left_ms = -1;  ///< until its place lapses unless renewed; -1: unknown
};

/// What one master said.
struct master_view {
  std::string address;
  bool reachable = false;  ///< a reply came (possibly an error reply)
  bool answered = false;   ///< a usable reply came
  std::string error;       ///< why not (when not answered)
  std::chrono::microseconds latency{0};
  key_shape shape = key_shape::none;
  bool exists = false;
  std::string value;                    ///< the token or owner (`token`), the marker (`readers`)
  std::int64_t pttl = -2;               ///< the lock key's; -1: no expiry
  std::vector<member> members;          ///< live readers (`readers`) or holders (`semaphore`)
  std::optional<std::int64_t> permits;  ///< a semaphore's permit count
  std::optional<std::string> writer;    ///< a waiting writer's claim
  std::int64_t writer_pttl = -2;
  std::optional<std::string> fence;  ///< the fencing counter (decimal digits, as stored)
  std::vector<std::string> holds;    ///< a reentrant lock's holds
  std::vector<waiter> waiters;       ///< live places in the fair queue
};

/// The verdict over every master (docs/cli.md, "redlock status").
struct status_verdict {
  std::string state;  ///< "held", "free", "split", "unavailable"
  std::string kind;   ///< "exclusive", "read", "semaphore"; empty when no holder is on enough masters
  int exit = 0;
  std::size_t total = 0;
  std::size_t majority = 0;
  std::size_t answered = 0;
  std::size_t with_key = 0;                ///< masters that answered with a key
  std::string holder;                      ///< `exclusive`: the token or owner on a majority
  std::size_t holders = 0;                 ///< masters holding the lock as its kind holds it
  std::optional<std::int64_t> expires_in;  ///< ms; the max of int64 for no expiry
  bool owner = false;                      ///< `exclusive`: the holder is a reentrant owner with holds
  std::size_t holds = 0;                   ///< that owner's holds on a majority
  std::optional<std::int64_t> fence;       ///< the largest fencing counter (on the holder's masters when held)
  std::size_t readers = 0;                 ///< readers on a majority
  std::size_t writer_masters = 0;          ///< masters with a waiting writer's claim
  std::optional<std::int64_t> permits;     ///< a semaphore's permit count
  std::size_t semaphore_quorum = 0;        ///< masters each of its holders needs
  std::vector<std::string> in_use;         ///< a semaphore's holders on that many masters
  std::size_t waiters = 0;                 ///< distinct waiters with a live place in a fair queue
  /// Each token, the readers, each semaphore holder, and on how many masters: for a split.
  struct part {
    key_shape shape = key_shape::token;
    std::string id;  ///< the token or the holder (empty for the readers)
    std::size_t masters = 0;
  };
  std::vector<part> parts;
};

/// The verdict from what the masters said.
status_verdict decide(const std::vector<master_view>& views);

/// The verdict and one line per master, for humans; tokens shortened unless `verbose`.
std::string status_text(const std::string& resource, const std::string& key, const status_verdict& v,
                        const std::vector<master_view>& views, bool verbose);

/// The same as one JSON object (docs/cli.md, "JSON output").
std::string status_json(const std::string& resource, const std::string& key, const status_verdict& v,
                        const std::vector<master_view>& views, bool verbose);

}  // namespace redlock::cli
