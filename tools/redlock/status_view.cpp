// SPDX-License-Identifier: BSL-1.0
// `redlock status`: the verdict over what the masters said, and its text and JSON (pure).

#include "status_view.hpp"

#include "options.hpp"
#include "output.hpp"
#include <redlock/core/quorum.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>

namespace redlock::cli {

namespace {

constexpr auto no_expiry = std::numeric_limits<std::int64_t>::max();

std::optional<std::int64_t> integer_of(std::string_view text) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size()) return std::nullopt;
  return v;
}

/// The time a lock held on these masters lasts: until the `needed`-th longest-lived of its keys
/// expires (a key without expiry counts as `no_expiry`).
std::int64_t lasting(std::vector<std::int64_t> ttls, std::size_t needed) {
  std::sort(ttls.rbegin(), ttls.rend());
  return needed >= 1 && needed <= ttls.size() ? ttls[needed - 1] : 0;
}

std::int64_t ttl_or_none(std::int64_t pttl) { return pttl < 0 ? no_expiry : pttl; }

/// The largest fencing counter of the masters `which` picks.
template <class Pred>
std::optional<std::int64_t> largest_fence(const std::vector<master_view>& views, Pred which) {
  std::optional<std::int64_t> out;
  for (const auto& m : views) {
    if (!m.answered || !m.fence || !which(m)) continue;
    if (const auto f = integer_of(*m.fence); f && (!out || *f > *out)) out = f;
  }
  return out;
}

std::string_view shape_name(key_shape s) {
  switch (s) {
    case key_shape::none:
      return "none";
    case key_shape::token:
      return "token";
    case key_shape::readers:
      return "readers";
    case key_shape::semaphore:
      return "semaphore";
  }
  return "none";
}

std::string plural(std::size_t n, std::string_view word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

std::string ttl_text(std::int64_t ms) {
  if (ms < 0 || ms == no_expiry) return "no expiry";
  return format_duration(std::chrono::milliseconds{ms});
}

}  // namespace

status_verdict decide(const std::vector<master_view>& views) {
  status_verdict v;
  v.total = views.size();
  v.majority = majority_of(v.total);
  std::map<std::string, std::size_t> tokens, readers, holders, waiters;
  std::map<std::int64_t, std::size_t> permit_counts;
  std::size_t token_masters = 0, reader_masters = 0, semaphore_masters = 0;
  for (const auto& m : views) {
    if (!m.answered) continue;
    ++v.answered;
    if (m.exists) ++v.with_key;
    switch (m.shape) {
      case key_shape::token:
        ++token_masters;
        ++tokens[m.value];
        break;
      case key_shape::readers:
        ++reader_masters;
        for (const auto& r : m.members) ++readers[r.id];
        break;
      case key_shape::semaphore:
        ++semaphore_masters;
        for (const auto& h : m.members) ++holders[h.id];
        if (m.permits) ++permit_counts[*m.permits];
        break;
      case key_shape::none:
        break;
    }
    if (m.writer) ++v.writer_masters;
    for (const auto& w : m.waiters) ++waiters[w.name];
  }
  v.waiters = waiters.size();
  const auto most = std::max({token_masters, reader_masters, semaphore_masters});
  if (most > 0) {
    v.kind = most == token_masters ? "exclusive" : most == reader_masters ? "read" : "semaphore";
  }
  for (const auto& [p, k] : permit_counts) {
    if (!v.permits || k > permit_counts[*v.permits]) v.permits = p;
  }
  v.semaphore_quorum =
      v.permits && *v.permits > 0 ? core::semaphore_quorum(v.total, static_cast<std::size_t>(*v.permits)) : v.majority;

  // Held: a token on a majority; readers (each on a majority) behind the marker on a majority;
  // semaphore holders each on the semaphore's quorum. Majorities intersect, and a master keeps
  // one key: at most one of these holds.
  std::string top;
  std::size_t top_count = 0;
  for (const auto& [t, k] : tokens) {
    if (k > top_count) {
      top = t;
      top_count = k;
    }
  }
  for (const auto& [r, k] : readers) v.readers += k >= v.majority;
  for (const auto& [h, k] : holders) {
    if (k >= v.semaphore_quorum) v.in_use.push_back(h);
  }
  if (top_count >= v.majority) {
    v.state = "held";
    v.kind = "exclusive";
    v.holder = top;
    v.holders = top_count;
    const auto is_holder = [&](const master_view& m) { return m.shape == key_shape::token && m.value == top; };
    std::vector<std::int64_t> ttls;
    std::map<std::string, std::size_t> holds;
    for (const auto& m : views) {
      if (!m.answered || !is_holder(m)) continue;
      ttls.push_back(ttl_or_none(m.pttl));
      v.owner = v.owner || !m.holds.empty();
      for (const auto& h : m.holds) ++holds[h];
    }
    for (const auto& [h, k] : holds) v.holds += k >= v.majority;
    v.expires_in = lasting(ttls, v.majority);
    v.fence = largest_fence(views, is_holder);
  } else if (v.readers > 0 && reader_masters >= v.majority) {
    v.state = "held";
    v.kind = "read";
    v.holders = reader_masters;
    std::vector<std::int64_t> ttls;
    for (const auto& m : views) {
      if (m.answered && m.shape == key_shape::readers) ttls.push_back(ttl_or_none(m.pttl));
    }
    v.expires_in = lasting(ttls, v.majority);
  } else if (!v.in_use.empty()) {
    v.state = "held";
    v.kind = "semaphore";
    v.holders = semaphore_masters;
  }
  if (v.state == "held") {
    v.exit = exit_ok;
  } else if (v.answered < v.majority) {
    v.state = "unavailable";
    v.exit = exit_unavailable;
  } else if (v.with_key == 0) {
    v.state = "free";
    v.exit = exit_free;
  } else {
    v.state = "split";
    v.exit = exit_partial;
  }
  if (v.state != "held") {
    v.in_use.clear();
    v.fence = largest_fence(views, [](const master_view&) { return true; });
    for (const auto& [t, k] : tokens) v.parts.push_back({key_shape::token, t, k});
    if (reader_masters > 0) v.parts.push_back({key_shape::readers, {}, reader_masters});
    for (const auto& [h, k] : holders) v.parts.push_back({key_shape::semaphore, h, k});
  }
  return v;
}

std::string status_text(const std::string& resource, const std::string& key, const status_verdict& v,
                        const std::vector<master_view>& views, bool verbose) {
  const auto tok = [&](const std::string& t) { return verbose ? printable(t) : short_token(t); };
  const std::string name = key == resource ? fmt::format("'{}'", printable(resource))
                                           : fmt::format("'{}' (key '{}')", printable(resource), printable(key));
  const auto lasts = [&] {
    return *v.expires_in == no_expiry ? std::string{"for ever (no expiry)"}
                                      : "for " + ttl_text(*v.expires_in) + " more";
  };
  const auto on = [&](std::size_t k) {
    return fmt::format("on {} of {} masters (majority {})", k, v.total, v.majority);
  };
  std::string out;
  if (v.state == "held" && v.kind == "exclusive") {
    out = v.owner ? fmt::format("{} is held by owner {} ({}) {}, {}", name, tok(v.holder), plural(v.holds, "hold"),
                                on(v.holders), lasts())
                  : fmt::format("{} is held by {} {}, {}", name, tok(v.holder), on(v.holders), lasts());
    if (v.fence) out += fmt::format("; fencing token {}", *v.fence);
  } else if (v.state == "held" && v.kind == "read") {
    out = fmt::format("{} is held by {} {}, {}", name, plural(v.readers, "reader"), on(v.holders), lasts());
  } else if (v.state == "held") {
    std::string who;
    for (const auto& h : v.in_use) who += (who.empty() ? "" : ", ") + tok(h);
    out = v.permits ? fmt::format("{} is held: {} of {} permits in use ({}; semaphore quorum {} of {} masters)", name,
                                  v.in_use.size(), *v.permits, who, v.semaphore_quorum, v.total)
                    : fmt::format("{} is held: {} in use ({}; semaphore quorum {} of {} masters)", name,
                                  plural(v.in_use.size(), "permit"), who, v.semaphore_quorum, v.total);
  } else if (v.state == "free") {
    out = fmt::format("{} is free (no key on the {} of {} masters that answered)", name, v.answered, v.total);
  } else if (v.state == "unavailable") {
    out = fmt::format("{} is unavailable: only {} of {} masters answered, {} needed", name, v.answered, v.total,
                      v.majority);
  } else {
    std::string parts;
    for (const auto& p : v.parts) {
      const auto what = p.shape == key_shape::token     ? tok(p.id)
                        : p.shape == key_shape::readers ? std::string{"readers"}
                                                        : "permit holder " + tok(p.id);
      parts += fmt::format("{}{} on {}", parts.empty() ? "" : ", ", what, p.masters);
    }
    out = fmt::format("{} is not held by a majority: {}; {} free, {} without an answer (majority {}{})", name, parts,
                      v.answered - v.with_key, v.total - v.answered, v.majority,
                      v.kind == "semaphore" ? fmt::format(", semaphore quorum {}", v.semaphore_quorum) : "");
  }
  if (v.state != "held" && v.fence) out += fmt::format("; fencing counter at {}", *v.fence);
  if (v.writer_masters > 0) out += fmt::format("; a writer is queued (on {} of {} masters)", v.writer_masters, v.total);
  if (v.waiters > 0) out += fmt::format("; {} in the fair queue", plural(v.waiters, "waiter"));
  out += '\n';

  for (std::size_t i = 0; i < views.size(); ++i) {
    const auto& m = views[i];
    std::string line = fmt::format("  {:<32} ", master_label(i, m.address));
    if (!m.answered) {
      line += (m.reachable ? "" : "unreachable: ") + m.error;
    } else {
      switch (m.shape) {
        case key_shape::none:
          line += "free";
          break;
        case key_shape::token:
          line += fmt::format("{:<10} ttl {}", tok(m.value), ttl_text(m.pttl));
          if (!m.holds.empty()) line += ", " + plural(m.holds.size(), "hold");
          break;
        case key_shape::readers:
          line += fmt::format("{}, ttl {}", plural(m.members.size(), "reader"), ttl_text(m.pttl));
          break;
        case key_shape::semaphore: {
          line += m.permits ? fmt::format("{} of {} permits in use", m.members.size(), *m.permits)
                            : fmt::format("{} in use", plural(m.members.size(), "permit"));
          std::string who;
          for (const auto& h : m.members)
            who += fmt::format("{}{} ttl {}", who.empty() ? "" : ", ", tok(h.id),
                               h.left_ms < 0 ? std::string{"unknown"} : ttl_text(h.left_ms));
          if (!who.empty()) line += ": " + who;
          break;
        }
      }
      if (m.fence) line += ", fence " + printable(*m.fence);
      if (m.writer) line += fmt::format(", writer {} queued (ttl {})", tok(*m.writer), ttl_text(m.writer_pttl));
      if (!m.waiters.empty()) line += fmt::format(", {} waiting", m.waiters.size());
    }
    if (verbose) line += fmt::format("  ({:.3f} ms)", to_ms(m.latency));
    out += line + '\n';
  }
  return out;
}

std::string status_json(const std::string& resource, const std::string& key, const status_verdict& v,
                        const std::vector<master_view>& views, bool verbose) {
  const auto tok = [&](const std::string& t) { return verbose ? t : t.substr(0, 8); };
  const auto optional_int = [](json_writer& j, std::string_view k, std::optional<std::int64_t> x) -> json_writer& {
    return x ? j.field(k, *x) : j.null_field(k);
  };
  json_writer j;
  j.begin_object().field("resource", resource).field("key", key).field("state", v.state);
  if (v.state == "held" && v.kind == "exclusive") {
    j.field("holder", tok(v.holder));
  } else {
    j.null_field("holder");
  }
  j.field("holders", v.holders).field("answered", v.answered).field("total", v.total).field("majority", v.majority);
  optional_int(j, "expires_in_ms", v.expires_in && *v.expires_in != no_expiry ? v.expires_in : std::nullopt);
  if (v.kind.empty()) {
    j.null_field("kind");
  } else {
    j.field("kind", v.kind);
  }
  optional_int(j, "fence", v.fence);
  const bool held = v.state == "held";
  optional_int(j, "holds",
               held && v.owner ? std::optional<std::int64_t>(static_cast<std::int64_t>(v.holds)) : std::nullopt);
  optional_int(
      j, "readers",
      held && v.kind == "read" ? std::optional<std::int64_t>(static_cast<std::int64_t>(v.readers)) : std::nullopt);
  j.field("writer_queued", v.writer_masters > 0);
  optional_int(j, "permits", v.kind == "semaphore" ? v.permits : std::nullopt);
  if (held && v.kind == "semaphore") {
    j.field("permits_in_use", v.in_use.size()).field("semaphore_quorum", v.semaphore_quorum);
  } else {
    j.null_field("permits_in_use").null_field("semaphore_quorum");
  }
  j.field("waiters", v.waiters);
  const auto members = [&](std::string_view k, const std::vector<member>& list) {
    j.key(k).begin_array();
    for (const auto& x : list) {
      j.begin_object().field("token", tok(x.id));
      optional_int(j, "ttl_ms", x.left_ms >= 0 ? std::optional<std::int64_t>(x.left_ms) : std::nullopt);
      j.end_object();
    }
    j.end_array();
  };
  j.key("masters").begin_array();
  for (const auto& m : views) {
    j.begin_object().field("address", m.address).field("reachable", m.reachable);
    if (!m.answered) {
      j.null_field("exists").null_field("holder").null_field("pttl_ms").field("error", m.error).null_field("type");
      j.field("latency_ms", to_ms(m.latency)).end_object();
      continue;
    }
    j.field("exists", m.exists);
    if (m.shape == key_shape::token) {
      j.field("holder", tok(m.value));
    } else {
      j.null_field("holder");
    }
    optional_int(j, "pttl_ms", m.exists ? std::optional<std::int64_t>(m.pttl) : std::nullopt);
    j.null_field("error").field("type", shape_name(m.shape));
    if (m.fence) {
      if (const auto f = integer_of(*m.fence)) {
        j.field("fence", *f);
      } else {
        j.field("fence", *m.fence);
      }
    } else {
      j.null_field("fence");
    }
    j.field("holds", m.holds.size());
    if (m.shape == key_shape::readers) {
      members("readers", m.members);
    } else {
      j.null_field("readers");
    }
    if (m.writer) {
      j.key("writer").begin_object().field("waiter", tok(*m.writer)).field("ttl_ms", m.writer_pttl).end_object();
    } else {
      j.null_field("writer");
    }
    if (m.shape == key_shape::semaphore) {
      optional_int(j, "permits", m.permits);
      members("permit_holders", m.members);
    } else {
      j.null_field("permits").null_field("permit_holders");
    }
    j.key("waiters").begin_array();
    for (const auto& w : m.waiters) {
      j.begin_object().field("waiter", tok(w.name)).field("ticket", w.ticket);
      optional_int(j, "ttl_ms", w.left_ms >= 0 ? std::optional<std::int64_t>(w.left_ms) : std::nullopt);
      j.end_object();
    }
    j.end_array();
    j.field("latency_ms", to_ms(m.latency)).end_object();
  }
  j.end_array().end_object();
  return j.str();
}

}  // namespace redlock::cli
