// SPDX-License-Identifier: BSL-1.0
#pragma once
// The safety checker: critical sections recorded by independent worker processes on the
// library's clock (redlock::clock: CLOCK_BOOTTIME on Linux, system-wide, so processes on one
// machine share it), checked per resource for what the lock's kind promises:
//
// - exclusive (plain Redlock, and every resource of a multi-resource lock): no two sections
//   overlap;
// - read/write: a write section overlaps no other section; reads may overlap reads;
// - semaphore: at no instant are more than `permits` sections open;
// - fencing: ordered by start, the fences of a resource's sections strictly increase, and a
//   store that remembers the largest fence it was written with, replaying the sections' writes
//   in real-time order, rejects none of them;
//
// and, for every kind, that no section ran past its validity.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace redlock::test {

/// What a section's lock promised (the worker's `kind=` field; `exclusive` when absent).
enum class section_kind : std::uint8_t { exclusive, read, write, semaphore };

/// One critical section as a worker saw it. Times in nanoseconds of redlock::clock (CLOCK_BOOTTIME).
struct section {
  std::string resource;  // one name, or the names of a multi-resource lock joined by commas
  std::string token;
  std::int64_t enter = 0;
  std::int64_t exit = 0;
  std::int64_t deadline = 0;  // the lock's validity deadline when the section began
  int worker = 0;
  std::uint32_t granted = 0;  // the masters that granted it, bit i for master i; 0 when not recorded
  section_kind kind = section_kind::exclusive;
  std::size_t permits = 1;  // `semaphore`: how many holders the worker said it may share it with
  std::uint64_t fence = 0;  // the lock's fencing token; 0 when not fenced
  std::int64_t write = 0;   // when the section wrote to the fenced store; 0 when it did not
  std::string owner{};      // a reentrant lock's owner: holds of one owner share the resource
};

struct check_result {
  std::size_t sections = 0;
  std::size_t overlaps = 0;            // sections that entered while an exclusive holder of a resource was in
  std::size_t rw_conflicts = 0;        // read/write sections that entered against the read/write rule
  std::size_t over_permits = 0;        // semaphore sections that entered while `permits` others were in
  std::size_t fence_regressions = 0;   // fenced sections whose fence is not above every earlier one's
  std::size_t stale_writes = 0;        // writes a fence-checking store would have rejected
  std::size_t past_validity = 0;       // sections that ended after their validity deadline
  std::size_t shared_reads = 0;        // read sections that entered while another read was in (sharing happened)
  std::size_t max_holders = 0;         // most semaphore sections of one resource open at once
  std::size_t fenced_writes = 0;       // writes replayed against the fenced store
  std::size_t write_sections = 0;      // sections of read/write writers
  std::size_t multi_sections = 0;      // sections that held more than one resource
  std::size_t shared_holds = 0;        // reentrant sections that entered while another of their owner was in
  std::size_t exclusive_sections = 0;  // sections of plain (exclusive) locks, without owner
  std::int64_t max_gap_ns = 0;         // longest time one resource went without a holder
  std::vector<std::string> examples;   // a few violations, for the failure message

  /// Every violation of every kind.
  std::size_t violations() const noexcept {
    return overlaps + rw_conflicts + over_permits + fence_regressions + stale_writes + past_validity;
  }
};

inline const char* to_string(section_kind k) noexcept {
  switch (k) {
    case section_kind::read:
      return "read";
    case section_kind::write:
      return "write";
    case section_kind::semaphore:
      return "semaphore";
    case section_kind::exclusive:
      break;
  }
  return "exclusive";
}

/// Splits "a,b,c" at the commas.
inline std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = std::min(s.find(',', start), s.size());
    out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

/// Reads one line "resource token enter exit deadline [granted [key=value...]]" a worker wrote:
/// the granting masters' bitmask is optional (older workers did not write it), and so are the
/// kinds' fields `kind=read|write|semaphore`, `permits=P`, `fence=F` and `write=NS`. False for any
/// other line.
inline bool parse_section(const std::string& line, int worker, section& s) {
  std::istringstream ls{line};
  s = section{};
  s.worker = worker;
  if (!(ls >> s.resource >> s.token >> s.enter >> s.exit >> s.deadline)) return false;
  std::uint32_t granted = 0;
  if (!(ls >> granted)) return true;
  s.granted = granted;
  std::string kv;
  while (ls >> kv) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) return false;
    const auto key = kv.substr(0, eq);
    const auto value = kv.substr(eq + 1);
    if (key == "kind") {
      if (value == "read") {
        s.kind = section_kind::read;
      } else if (value == "write") {
        s.kind = section_kind::write;
      } else if (value == "semaphore") {
        s.kind = section_kind::semaphore;
      } else if (value != "exclusive") {
        return false;
      }
    } else if (key == "permits") {
      s.permits = std::stoul(value);
    } else if (key == "fence") {
      s.fence = std::stoull(value);
    } else if (key == "write") {
      s.write = std::stoll(value);
    } else if (key == "owner") {
      s.owner = value;
    } else {
      return false;
    }
  }
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

namespace detail {

// Whether `later` may enter while `open` is in: reads share with reads, semaphore holders with
// each other (their number is counted apart), reentrant holds with holds of their owner; nothing
// else shares.
inline bool compatible(const section& open, const section& later) {
  return (open.kind == section_kind::read && later.kind == section_kind::read) ||
         (open.kind == section_kind::semaphore && later.kind == section_kind::semaphore) ||
         (open.kind == section_kind::exclusive && later.kind == section_kind::exclusive && !open.owner.empty() &&
          open.owner == later.owner);
}

inline std::string describe(const std::string& resource, const section& a, const section& b) {
  std::ostringstream m;
  m << resource << ": " << to_string(a.kind) << " of worker " << a.worker << " [" << a.enter << ", " << a.exit
    << ") and " << to_string(b.kind) << " of worker " << b.worker << " [" << b.enter << ", " << b.exit << ")";
  return m.str();
}

}  // namespace detail

/// Checks every section against its kind's invariant (see the top of this file) and its validity.
/// A multi-resource section counts on each of its resources. Gaps are measured between consecutive
/// holders of a resource from `from_ns` on (liveness after a fault).
inline check_result check(std::vector<section> all, std::int64_t from_ns = 0) {
  check_result r;
  r.sections = all.size();
  std::map<std::string, std::vector<section>> by_resource;
  for (auto& s : all) {
    if (s.exit > s.deadline) ++r.past_validity;
    const auto names = split_names(s.resource);
    if (names.size() > 1) ++r.multi_sections;
    if (s.kind == section_kind::write) ++r.write_sections;
    if (s.kind == section_kind::exclusive && s.owner.empty() && s.fence == 0) ++r.exclusive_sections;
    for (const auto& name : names) by_resource[name].push_back(s);
  }
  const auto example = [&](std::string m) {
    if (r.examples.size() < 5) r.examples.push_back(std::move(m));
  };
  for (auto& [name, v] : by_resource) {
    std::sort(v.begin(), v.end(), [](const section& a, const section& b) { return a.enter < b.enter; });
    // Sweep by entry, keeping the sections still open: a long section may overlap several.
    std::vector<const section*> open;
    std::int64_t latest_exit = 0;
    bool any = false;
    std::uint64_t top_fence = 0;
    for (const auto& s : v) {
      std::erase_if(open, [&](const section* o) { return o->exit <= s.enter; });  // touching ends are fine
      const section* conflict = nullptr;
      std::size_t semaphore_holders = 0;
      bool read_open = false;
      bool same_owner_open = false;
      for (const section* o : open) {
        if (!detail::compatible(*o, s)) conflict = conflict ? conflict : o;
        if (!s.owner.empty() && o->owner == s.owner) same_owner_open = true;
        if (o->kind == section_kind::semaphore) ++semaphore_holders;
        if (o->kind == section_kind::read) read_open = true;
      }
      if (conflict) {
        const bool rw = s.kind == section_kind::read || s.kind == section_kind::write ||
                        conflict->kind == section_kind::read || conflict->kind == section_kind::write;
        const bool sem = s.kind == section_kind::semaphore || conflict->kind == section_kind::semaphore;
        ++(sem ? r.over_permits : rw ? r.rw_conflicts : r.overlaps);
        example(detail::describe(name, *conflict, s));
      }
      if (s.kind == section_kind::semaphore) {
        r.max_holders = std::max(r.max_holders, semaphore_holders + 1);
        if (!conflict && semaphore_holders + 1 > s.permits) {
          ++r.over_permits;
          example(name + ": " + std::to_string(semaphore_holders + 1) + " semaphore holders, permits " +
                  std::to_string(s.permits) + ", the last of worker " + std::to_string(s.worker) + " at " +
                  std::to_string(s.enter));
        }
      }
      if (s.kind == section_kind::read && read_open) ++r.shared_reads;
      if (same_owner_open) ++r.shared_holds;
      if (s.fence != 0) {
        if (s.fence <= top_fence) {
          ++r.fence_regressions;
          example(name + ": fence " + std::to_string(s.fence) + " of worker " + std::to_string(s.worker) + " at " +
                  std::to_string(s.enter) + " after fence " + std::to_string(top_fence));
        }
        top_fence = std::max(top_fence, s.fence);
      }
      if (any && s.enter >= from_ns) r.max_gap_ns = std::max(r.max_gap_ns, s.enter - latest_exit);
      latest_exit = std::max(latest_exit, s.exit);
      any = true;
      open.push_back(&s);
    }

    // The fenced store: writes in real-time order; it keeps the largest fence it has accepted and
    // rejects a smaller one, or the same one from another holder.
    std::vector<const section*> writes;
    for (const auto& s : v) {
      if (s.fence != 0 && s.write != 0) writes.push_back(&s);
    }
    std::sort(writes.begin(), writes.end(), [](const section* a, const section* b) { return a->write < b->write; });
    std::uint64_t stored = 0;
    const std::string* stored_by = nullptr;
    for (const section* w : writes) {
      ++r.fenced_writes;
      if (w->fence < stored || (w->fence == stored && stored_by && *stored_by != w->token)) {
        ++r.stale_writes;
        example(name + ": the store rejects fence " + std::to_string(w->fence) + " of worker " +
                std::to_string(w->worker) + " at " + std::to_string(w->write) + ", it holds " + std::to_string(stored));
        continue;
      }
      stored = w->fence;
      stored_by = &w->token;
    }
  }
  return r;
}

/// The longest time one resource went without a holder within [`from_ns`, `until_ns`): the gaps
/// between its holders clipped to that window, the time before its first holder in it and after
/// its last one included. For faults whose effect outlasts them (a quarantine that keeps the lock
/// unavailable on purpose): how soon the lock came back once it may, which `check`'s `max_gap_ns`
/// (whole gaps of the holders that entered after `from_ns`) cannot tell from the outage before.
/// Only resources with a section somewhere count.
inline std::int64_t longest_wait(const std::vector<section>& all, std::int64_t from_ns, std::int64_t until_ns) {
  std::map<std::string, std::vector<const section*>> by_resource;
  for (const auto& s : all) {
    for (const auto& name : split_names(s.resource)) by_resource[name].push_back(&s);
  }
  std::int64_t longest = 0;
  for (auto& [name, v] : by_resource) {
    std::sort(v.begin(), v.end(), [](const section* a, const section* b) { return a->enter < b->enter; });
    std::int64_t free_since = from_ns;  // the resource counts as free from the window's start
    for (const section* s : v) {
      if (s->enter >= until_ns) break;
      if (s->enter > free_since) longest = std::max(longest, s->enter - free_since);
      free_since = std::max(free_since, s->exit);
    }
    if (until_ns > free_since) longest = std::max(longest, until_ns - free_since);
  }
  return longest;
}

}  // namespace redlock::test
