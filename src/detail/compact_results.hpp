// SPDX-License-Identifier: BSL-1.0
#pragma once
// The per-master results a lock keeps between rounds (lock::masters()), private to src/, no I/O.
// A held lock keeps its last round's results for its whole life, and most of them say only
// "granted, in so many microseconds": 16 bytes a master here instead of a master_result's 80.
// An error or a server's text, rare, is kept aside for the masters that have one.

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

namespace redlock::detail {

class compact_results {
 public:
  compact_results() = default;
  explicit compact_results(const std::vector<master_result>& r) { assign(r); }

  void assign(const std::vector<master_result>& r) {
    entries_.clear();
    extras_.reset();
    entries_.reserve(r.size());
    for (const auto& m : r) {
      entry e;
      e.value = m.value;
      e.status = m.status;
      // Latencies past 71 minutes are not kept exactly: no request lives that long.
      const auto us = std::clamp<std::int64_t>(m.latency.count(), 0, std::numeric_limits<std::uint32_t>::max());
      e.latency_us = static_cast<std::uint32_t>(us);
      if (m.error || !m.server_text.empty()) e.extra = add_extra({m.error, m.server_text});
      entries_.push_back(e);
    }
  }

  std::vector<master_result> expand() const {
    std::vector<master_result> out(entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto& e = entries_[i];
      auto& m = out[i];
      m.status = e.status;
      m.value = e.value;
      m.latency = std::chrono::microseconds{e.latency_us};
      if (e.extra != no_extra) {
        m.error = (*extras_)[e.extra].error;
        m.server_text = (*extras_)[e.extra].text;
      }
    }
    return out;
  }

  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  master_status status(std::size_t i) const noexcept { return entries_[i].status; }

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

}  // namespace redlock::detail
