#pragma once
// The mutual-exclusion checker: critical sections recorded by independent worker processes on the
// system-wide monotonic clock (steady_clock is CLOCK_MONOTONIC on Linux, so processes on one
// machine share it), checked for overlaps per resource and for running past their validity.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace redlock::test {

/// One critical section as a worker saw it. Times in nanoseconds of CLOCK_MONOTONIC.
struct section {
  std::string resource;
  std::string token;
  std::int64_t enter = 0;
  std::int64_t exit = 0;
  std::int64_t deadline = 0;  // the lock's validity deadline when the section began
  int worker = 0;
  std::uint32_t granted = 0;  // the masters that granted it, bit i for master i; 0 when not recorded
};

struct check_result {
  std::size_t sections = 0;
  std::size_t overlaps = 0;           // pairs of sections on one resource that overlap in time
  std::size_t past_validity = 0;      // sections that ended after their validity deadline
  std::int64_t max_gap_ns = 0;        // longest time one resource went without a holder
  std::vector<std::string> examples;  // a few overlaps, for the failure message
};

/// Reads one line "resource token enter exit deadline [granted]" a worker wrote (the granting
/// masters' bitmask is optional: older workers did not write it). False for any other line.
inline bool parse_section(const std::string& line, int worker, section& s) {
  std::istringstream ls{line};
  s = section{};
  s.worker = worker;
  if (!(ls >> s.resource >> s.token >> s.enter >> s.exit >> s.deadline)) return false;
  std::uint32_t granted = 0;
  if (ls >> granted) s.granted = granted;
  return true;
}

/// Reads the section lines a worker wrote (see `parse_section`); other lines are skipped.
inline std::vector<section> read_sections(const std::string& path, int worker) {
  std::vector<section> out;
  std::ifstream in{path};
  std::string line;
  section s;
  while (std::getline(in, line)) {
    if (parse_section(line, worker, s)) out.push_back(std::move(s));
  }
  return out;
}

/// Adds up the `# kind=count ...` summary lines a worker wrote into `counts`.
inline void read_counts(const std::string& path, std::map<std::string, long>& counts) {
  std::ifstream in{path};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) != 0) continue;
    std::istringstream ls{line.substr(1)};
    std::string kv;
    while (ls >> kv) {
      const auto eq = kv.find('=');
      if (eq != std::string::npos) counts[kv.substr(0, eq)] += std::stol(kv.substr(eq + 1));
    }
  }
}

/// Checks that no two sections on one resource overlap and none outlived its validity. Gaps are
/// measured between consecutive sections of a resource from `from_ns` on (liveness after a fault).
inline check_result check(std::vector<section> all, std::int64_t from_ns = 0) {
  check_result r;
  r.sections = all.size();
  std::map<std::string, std::vector<section>> by_resource;
  for (auto& s : all) {
    if (s.exit > s.deadline) ++r.past_validity;
    by_resource[s.resource].push_back(std::move(s));
  }
  for (auto& [name, v] : by_resource) {
    std::sort(v.begin(), v.end(), [](const section& a, const section& b) { return a.enter < b.enter; });
    // Compare each section with every earlier one still open: a long section may overlap several.
    std::int64_t latest_exit = 0;
    const section* latest = nullptr;
    for (const auto& s : v) {
      if (latest && s.enter < latest_exit) {
        ++r.overlaps;
        if (r.examples.size() < 5) {
          std::ostringstream m;
          m << name << ": worker " << latest->worker << " [" << latest->enter << ", " << latest->exit << ") and worker "
            << s.worker << " [" << s.enter << ", " << s.exit << ")";
          r.examples.push_back(m.str());
        }
      }
      if (latest && s.enter >= from_ns) r.max_gap_ns = std::max(r.max_gap_ns, s.enter - latest_exit);
      if (s.exit > latest_exit) {
        latest_exit = s.exit;
        latest = &s;
      }
    }
  }
  return r;
}

}  // namespace redlock::test
