// SPDX-License-Identifier: BSL-1.0
#pragma once
// Small measuring helpers shared by the benchmark programs.

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

namespace redlock::bench {

/// User + system CPU time of this process so far, in seconds (the masters are other processes).
inline double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// System (kernel) CPU time of this process so far, in seconds: the part of cpu_seconds() spent in
/// system calls and the interrupts they cause.
inline double system_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_stime.tv_sec) + static_cast<double>(ru.ru_stime.tv_usec) / 1e6;
}

/// Resident set size of this process, in KiB.
inline long rss_kib() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

/// Heap bytes in use right now (glibc): unlike RSS, not inflated by memory freed after a peak.
inline std::size_t heap_in_use() { return mallinfo2().uordblks; }

/// Latency percentiles of a sample (any unit).
struct stats {
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

inline stats summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double p) { return v[static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1))]; };
  return {at(50), at(90), at(99), at(99.9), v.back()};
}

}  // namespace redlock::bench
