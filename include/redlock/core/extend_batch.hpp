// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Many plain extensions in one request (no I/O): the keep-alive's batches on a master send one
/// `EVALSHA` of `detail::extend_many_script` for the plain extensions that came due together,
/// rather than one `extend_script` each, and split its answer back into one answer a lock. Each
/// extension keeps its own machine, start and validity (core::extend_fsm); only the bytes are
/// shared. docs/design.md, "Keep-alive"; docs/safety.md, "Extensions in one script".

#include <redlock/core/kind_spec.hpp>
#include <redlock/export.hpp>
#include <redlock/resp/node.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::core {

/// Whether an extension of step `s` may go in an `extend_many_script` call: exactly
/// `extend_script` on the lock key with the token and the ttl, which the batch script runs for
/// each of its keys alike.
REDLOCK_API bool joins_extend_many(const step_spec& s) noexcept;

/// The extensions of one batch, encoded as they come, sent as one command.
class REDLOCK_API extend_batch {
 public:
  /// Adds an extension of `key` held with `token` by `ttl_ms`.
  void add(std::string_view key, std::string_view token, std::int64_t ttl_ms);
  /// How many extensions were added since the last `clear`.
  std::size_t size() const noexcept { return count_; }
  /// Whether none was added since the last `clear`.
  bool empty() const noexcept { return count_ == 0; }
  /// The bytes the extensions take so far (without the command's head).
  std::size_t bytes() const noexcept { return keys_.size() + args_.size(); }
  /// Appends to `out` the command with every extension added: `EVALSHA` (`by_sha`) or `EVAL` of
  /// `extend_many_script`. Nothing when empty.
  void encode(std::string& out, bool by_sha = true) const;
  /// Forgets the extensions; keeps the storage.
  void clear() noexcept;

 private:
  std::string keys_;  // each key as a bulk string, in order
  std::string args_;  // each extension's token and ttl as bulk strings, in order
  std::size_t count_ = 0;
};

/// What the answer of an `extend_many_script` call of `count` keys was.
enum class extend_many_answer : std::uint8_t {
  elements,   ///< an array of `count` answers, each 1, 0 or an error: one per extension
  noscript,   ///< a top-level `NOSCRIPT` error: the script was not in the master's cache
  refused,    ///< another top-level error: the call as a whole was refused
  malformed,  ///< anything else: not an answer this script gives
};

/// Reads the answer whose top-level value is `r[at]` (its elements follow it), strictly: the
/// element answers are at `r[at + 1]` .. `r[at + count]` when it returns `elements`.
REDLOCK_API extend_many_answer read_extend_many(const resp::response& r, std::size_t at, std::size_t count) noexcept;

}  // namespace redlock::core
