// SPDX-License-Identifier: BSL-1.0
#pragma once
// Liveness figures of the partition suite, from the critical sections the workers recorded (see
// test/safety/checker.hpp): pure functions, so the arithmetic is tested on synthetic records.
//
// A resource is "holder-less" whenever no recorded section of it runs. The sections of one
// resource never overlap (the checker asserts that separately), but the functions here do not
// rely on it: they work on the union of the sections.

#include "../safety/checker.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace redlock::test::partition {

/// A half-open time interval [from, to), nanoseconds of CLOCK_MONOTONIC.
struct interval {
  std::int64_t from = 0;
  std::int64_t to = 0;
};

/// The times some section ran: the union of the sections' [enter, exit), sorted and merged.
/// Pass the sections of one resource.
inline std::vector<interval> busy_intervals(const std::vector<section>& sections) {
  std::vector<interval> v;
  v.reserve(sections.size());
  for (const auto& s : sections) v.push_back({s.enter, std::max(s.enter, s.exit)});
  std::sort(v.begin(), v.end(), [](const interval& a, const interval& b) { return a.from < b.from; });
  std::vector<interval> merged;
  for (const auto& i : v) {
    if (!merged.empty() && i.from <= merged.back().to) {
      merged.back().to = std::max(merged.back().to, i.to);
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

/// The longest holder-less stretch inside [from, to): the free time between `busy` intervals,
/// clipped to the window (a window without any section is one gap of its whole length).
inline std::int64_t longest_gap(const std::vector<interval>& busy, std::int64_t from, std::int64_t to) {
  if (to <= from) return 0;
  std::int64_t longest = 0;
  std::int64_t cursor = from;  // free from here on, as far as the intervals seen so far say
  for (const auto& b : busy) {
    if (b.to <= cursor) continue;
    if (b.from >= to) break;
    if (b.from > cursor) longest = std::max(longest, b.from - cursor);
    cursor = b.to;
  }
  if (cursor < to) longest = std::max(longest, to - cursor);
  return longest;
}

/// One heal of the fault schedule: at `at`, the masters of `healed` (bit i for master i) became
/// reachable again.
struct heal {
  std::int64_t at = 0;
  std::uint32_t healed = 0;
};

/// What followed one heal, up to the next heal (or the end of the run).
struct heal_result {
  std::int64_t at = 0;
  std::int64_t window_end = 0;
  std::uint32_t healed = 0;
  /// The longest holder-less stretch in [at, window_end).
  std::int64_t longest_gap_ns = 0;
  /// From the heal to the entry of the first section that a just-healed master helped grant (its
  /// bit in the section's grant mask); empty when none did inside the window.
  std::optional<std::int64_t> recovery_ns;
  /// From the heal to the entry of the first section after it, whoever granted it, even past the
  /// window (empty when there was none until the end of the records).
  std::optional<std::int64_t> next_section_ns;
  /// Sections entered inside the window.
  std::size_t sections = 0;
};

/// Per heal (in time order), the longest gap and the recovery time until the next heal or `end`.
/// `sections` are those of one resource.
inline std::vector<heal_result> analyse_heals(const std::vector<section>& sections, std::vector<heal> heals,
                                              std::int64_t end) {
  std::sort(heals.begin(), heals.end(), [](const heal& a, const heal& b) { return a.at < b.at; });
  std::vector<section> by_entry = sections;
  std::sort(by_entry.begin(), by_entry.end(), [](const section& a, const section& b) { return a.enter < b.enter; });
  const auto busy = busy_intervals(sections);
  std::vector<heal_result> out;
  for (std::size_t i = 0; i < heals.size(); ++i) {
    heal_result r;
    r.at = heals[i].at;
    r.healed = heals[i].healed;
    r.window_end = i + 1 < heals.size() ? heals[i + 1].at : end;
    r.longest_gap_ns = longest_gap(busy, r.at, r.window_end);
    for (const auto& s : by_entry) {
      if (s.enter < r.at) continue;
      if (!r.next_section_ns) r.next_section_ns = s.enter - r.at;
      if (s.enter >= r.window_end) break;
      ++r.sections;
      if (!r.recovery_ns && (s.granted & r.healed) != 0) r.recovery_ns = s.enter - r.at;
    }
    out.push_back(r);
  }
  return out;
}

/// Sections entered inside [from, to).
inline std::size_t sections_in(const std::vector<section>& sections, std::int64_t from, std::int64_t to) {
  return static_cast<std::size_t>(std::count_if(sections.begin(), sections.end(),
                                                [&](const section& s) { return s.enter >= from && s.enter < to; }));
}

}  // namespace redlock::test::partition
