// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Each master's answer to one round, kept compact (no I/O): a round in flight (`round_table`)
/// and the results a held lock keeps for `lock::masters()`. Most answers say only "granted (or
/// taken), in so many microseconds, with this number": 16 bytes a master here instead of a
/// `master_result`'s 80. An error or a server's text, rare, is kept aside for the masters that
/// have one. With 10,000 locks renewing at once, the extensions in flight are what the heap's
/// peak is made of (docs/benchmarks.md, (f)).

#include <redlock/master_result.hpp>

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace redlock::core {

/// Each master's answer (`master_result`), stored in 16 bytes a master.
class compact_results {
 public:
  /// No masters.
  compact_results() = default;
  /// The answers `r`, in master order.
  explicit compact_results(const std::vector<master_result>& r) {
    reset(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) set(i, master_result{r[i]});
  }
  /// A copy (the masters' errors and texts included).
  compact_results(const compact_results& o) : entries_(o.entries_) {
    if (o.extras_) extras_ = std::make_unique<std::vector<extra>>(*o.extras_);
  }
  /// Replaces these answers by a copy of `o`'s.
  /// Into the storage held when it is large enough and `o` has no errors or texts (a lock's
  /// results after each round: no allocation); otherwise through a copy (these stay as they were
  /// if it fails).
  compact_results& operator=(const compact_results& o) {
    if (this == &o) return *this;
    if ((!o.extras_ || o.extras_->empty()) && entries_.capacity() >= o.entries_.size()) {
      entries_.assign(o.entries_.begin(), o.entries_.end());
      if (extras_) extras_->clear();
      return *this;
    }
    return *this = compact_results{o};
  }
  /// Takes `o`'s answers (no allocation).
  compact_results(compact_results&&) noexcept = default;
  /// Takes `o`'s answers in place of these (no allocation).
  compact_results& operator=(compact_results&&) noexcept = default;
  ~compact_results() = default;

  /// `n` masters, none answered yet (`pending`); keeps the storage's capacity.
  void reset(std::size_t n) {
    entries_.assign(n, entry{});
    if (extras_) extras_->clear();
  }

  /// Master `i`'s answer (`i` below `size()`). Latencies past 71 minutes are not kept exactly: no
  /// request lives that long.
  /// Throws only when an error or text cannot be kept (allocation), and then changes nothing.
  void set(std::size_t i, master_result&& m) {
    // What may throw comes first: a failure leaves master `i` as it was.
    const auto x = m.error || !m.server_text.empty() ? add_extra({m.error, std::move(m.server_text)}) : no_extra;
    auto& e = entries_[i];
    e.value = m.value;
    e.status = m.status;
    const auto us = std::clamp<std::int64_t>(m.latency.count(), 0, std::numeric_limits<std::uint32_t>::max());
    e.latency_us = static_cast<std::uint32_t>(us);
    e.extra = x;
  }

  /// Master `i`'s answer in full.
  master_result result(std::size_t i) const {
    const auto& e = entries_[i];
    master_result m;
    m.status = e.status;
    m.value = e.value;
    m.latency = std::chrono::microseconds{e.latency_us};
    if (e.extra != no_extra) {
      m.error = (*extras_)[e.extra].error;
      m.server_text = (*extras_)[e.extra].text;
    }
    return m;
  }
  /// Every master's answer in full.
  std::vector<master_result> expand() const {
    std::vector<master_result> out;
    out.reserve(entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) out.push_back(result(i));
    return out;
  }

  /// Number of masters.
  std::size_t size() const noexcept { return entries_.size(); }
  /// Whether there are no masters.
  bool empty() const noexcept { return entries_.empty(); }
  /// Master `i`'s status.
  master_status status(std::size_t i) const noexcept { return entries_[i].status; }
  /// The number master `i` answered with its status (`master_result::value`).
  std::int64_t value(std::size_t i) const noexcept { return entries_[i].value; }
  /// The error behind master `i`'s status (`master_result::error`).
  boost::system::error_code error(std::size_t i) const noexcept {
    const auto x = entries_[i].extra;
    return x == no_extra ? boost::system::error_code{} : (*extras_)[x].error;
  }

  /// Says why master `i`'s vote no longer counts (its status stays).
  void annotate(std::size_t i, boost::system::error_code ec, std::string text) {
    auto& e = entries_[i];
    if (e.extra == no_extra) {
      e.extra = add_extra({ec, std::move(text)});
    } else {
      (*extras_)[e.extra] = {ec, std::move(text)};
    }
  }

 private:
  // At most 65535 masters (client_config's check): an index below 0xffff each.
  static constexpr std::uint16_t no_extra = 0xffff;
  struct entry {
    std::int64_t value = 0;
    std::uint32_t latency_us = 0;
    master_status status = master_status::pending;
    std::uint16_t extra = no_extra;  // index into extras_
  };
  static_assert(sizeof(entry) == 16);
  struct extra {
    boost::system::error_code error;
    std::string text;
  };
  std::uint16_t add_extra(extra x) {
    if (!extras_) extras_ = std::make_unique<std::vector<extra>>();
    extras_->push_back(std::move(x));
    return static_cast<std::uint16_t>(extras_->size() - 1);
  }
  std::vector<entry> entries_;
  std::unique_ptr<std::vector<extra>> extras_;  // null while no master has one
};

/// Master `i`'s status in either form of a round's answers (for the rules that read both).
inline master_status status_at(const std::vector<master_result>& r, std::size_t i) noexcept { return r[i].status; }
/// Master `i`'s status in either form of a round's answers (for the rules that read both).
inline master_status status_at(const compact_results& r, std::size_t i) noexcept { return r.status(i); }
/// The error behind master `i`'s status, in either form.
inline boost::system::error_code error_at(const std::vector<master_result>& r, std::size_t i) noexcept {
  return r[i].error;
}
/// The error behind master `i`'s status, in either form.
inline boost::system::error_code error_at(const compact_results& r, std::size_t i) noexcept { return r.error(i); }

}  // namespace redlock::core
