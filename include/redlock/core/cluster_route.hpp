// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// How a request reaches the right shard of a cluster master, as pure functions: the slot of an
/// encoded request (with its helper keys renamed into the lock key's slot, `key_naming::slotted`),
/// and what a redirect reply (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) asks for. No I/O.

#include <redlock/core/key_slot.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/resp/node.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::core {

/// What `route_request` found in a payload.
struct request_route {
  /// The slot every key of the payload hashes to; nothing when no command names a key (`TIME`,
  /// `SCRIPT LOAD`, `SUBSCRIBE`...), which any shard may serve.
  std::optional<std::uint16_t> slot;
  /// Keys in more than one slot: no shard can serve the payload as it is.
  bool cross_slot = false;
  /// Not a sequence of RESP arrays of bulk strings (never the case for the library's own requests).
  bool malformed = false;
  /// Helper keys were renamed: send the rewritten payload, not the original.
  bool rewritten = false;
  /// The number of commands in the payload.
  std::size_t commands = 0;
};

namespace detail_route {

// A cursor over an encoded request: `*N\r\n` then N bulk strings `$len\r\n<bytes>\r\n`.
struct cursor {
  std::string_view in;
  std::size_t at = 0;
  bool number(char prefix, std::size_t& n) {
    // A length as the library writes it: decimal digits, then CRLF (a hand loop: this runs for
    // every argument of every request to a cluster master).
    if (at >= in.size() || in[at] != prefix) return false;
    std::size_t i = at + 1, v = 0;
    const std::size_t start = i;
    while (i < in.size() && in[i] >= '0' && in[i] <= '9' && i - start < 18)
      v = v * 10 + static_cast<std::size_t>(in[i++] - '0');
    if (i == start || i + 1 >= in.size() || in[i] != '\r' || in[i + 1] != '\n') return false;
    n = v;
    at = i + 2;
    return true;
  }
  bool bulk(std::string_view& out) {
    std::size_t len = 0;
    if (!number('$', len) || len > in.size() - at || in.size() - at - len < 2) return false;
    out = in.substr(at, len);
    at += len + 2;
    return in.substr(at - 2, 2) == "\r\n";
  }
};

inline bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (c != b[i]) return false;
  }
  return true;
}

// Where a command's keys are: none, the first argument only, every argument, or `numkeys` keys
// after a count in the second argument (scripts and functions).
enum class keys_at : std::uint8_t { none, first, all, counted };

inline constexpr std::string_view counted_commands[] = {"EVALSHA", "EVAL",  "EVALSHA_RO",
                                                        "EVAL_RO", "FCALL", "FCALL_RO"};
inline constexpr std::string_view all_key_commands[] = {"DEL", "UNLINK", "EXISTS", "TOUCH"};
inline constexpr std::string_view first_key_commands[] = {
    "SET",  "GET",  "PEXPIRE", "PTTL",  "TTL",  "TYPE",     "HGETALL", "HLEN",   "HDEL", "ZCARD",   "ZRANGE",
    "ZREM", "ZADD", "ZSCORE",  "SCARD", "SREM", "SMEMBERS", "INCR",    "GETDEL", "DUMP", "RESTORE", "OBJECT"};

inline keys_at key_positions(std::string_view cmd) noexcept {
  for (auto s : counted_commands)
    if (iequals(cmd, s)) return keys_at::counted;
  for (auto s : all_key_commands)
    if (iequals(cmd, s)) return keys_at::all;
  for (auto s : first_key_commands)
    if (iequals(cmd, s)) return keys_at::first;
  return keys_at::none;
}

// The helper suffix `key` ends with, if any.
inline std::string_view helper_suffix_at_end(std::string_view key) noexcept {
  if (key.size() < 14) return {};
  for (auto s : redlock::detail::helper_suffixes)
    if (key.size() > s.size() && key.substr(key.size() - s.size()) == s) return s;
  return {};
}

inline void put_bulk(std::string& out, std::string_view bytes) {
  out += '$';
  out += std::to_string(bytes.size());
  out += "\r\n";
  out += bytes;
  out += "\r\n";
}

}  // namespace detail_route

/// @brief Reads `payload` (one or more pipelined commands, as the library encodes them) for a
/// cluster master: the slot of its keys, and helper keys renamed for `key_naming::slotted`.
///
/// Every key that ends with a helper suffix is a helper key (no lock key may end so): when the rest
/// of it (its lock key) has no hash tag it becomes `{lock key}` plus the suffix (`append_helper_key`). The
/// rewritten payload goes to `out` (cleared first) only when something was renamed
/// (`request_route::rewritten`); otherwise `out` is left empty and the payload goes as it is.
inline request_route route_request(std::string_view payload, std::string& out) {
  using namespace detail_route;
  request_route r;
  out.clear();
  cursor c{payload};
  std::size_t copied = 0;  // bytes of `payload` already in `out`, when rewriting
  auto note_slot = [&](std::string_view key) {
    const auto s = key_slot(key);
    if (r.slot && *r.slot != s) r.cross_slot = true;
    if (!r.slot) r.slot = s;
  };
  while (c.at < payload.size()) {
    std::size_t argc = 0;
    std::string_view cmd;
    if (!c.number('*', argc) || argc == 0 || !c.bulk(cmd)) {
      r.malformed = true;
      return r;
    }
    ++r.commands;
    const auto where = key_positions(cmd);
    std::size_t numkeys = 0;
    for (std::size_t i = 1; i < argc; ++i) {
      const auto start = c.at;
      std::string_view a;
      if (!c.bulk(a)) {
        r.malformed = true;
        return r;
      }
      bool is_key = false;
      if (where == keys_at::first) is_key = i == 1;
      if (where == keys_at::all) is_key = true;
      if (where == keys_at::counted) {
        if (i == 2) {
          const auto [p, ec] = std::from_chars(a.data(), a.data() + a.size(), numkeys);
          if (ec != std::errc{} || p != a.data() + a.size() || numkeys > argc - 3) {
            r.malformed = true;
            return r;
          }
        }
        is_key = i >= 3 && i < 3 + numkeys;
      }
      if (!is_key) continue;
      // Every key that ends with a helper suffix is a helper key (a lock key may not end so:
      // check_resource refuses it), wherever it stands: the writer's leave and the fair queue's
      // ZREM name one alone.
      const auto suffix = helper_suffix_at_end(a);
      const auto base = a.substr(0, a.size() - suffix.size());
      if (!suffix.empty() && !hash_tag(base)) {
        if (!r.rewritten) {
          r.rewritten = true;
          out.reserve(payload.size() + 16);
        }
        out.append(payload.substr(copied, start - copied));
        // "$<len>\r\n{base}suffix\r\n", written in place (no temporary key).
        out += '$';
        out += std::to_string(a.size() + 2);
        out += "\r\n";
        const auto at = out.size();
        append_helper_key(out, base, suffix, key_naming::slotted);
        note_slot(std::string_view{out}.substr(at));
        out += "\r\n";
        copied = c.at;
      } else {
        note_slot(a);
      }
    }
  }
  if (r.rewritten) out.append(payload.substr(copied));
  return r;
}

/// How the answers of the slot groups of one request make the cluster's one answer.
enum class join_rule : std::uint8_t {
  all_set,    ///< `multi_acquire_script`: {1, n} when every group set its keys, else the first refusal {0, i}
  any_one,    ///< `multi_release_script`: 1 when any group deleted a key of ours
  every_one,  ///< `multi_extend_script`: 1 only when every group extended
};

/// A request over several slots cut into one request per slot (`split_by_slot`).
struct slot_split {
  /// One slot's part: the same script and ARGV over the keys of that slot.
  struct group {
    std::uint16_t slot = 0;         ///< the slot of its keys
    std::string payload;            ///< the script over its keys (the first group carries the other commands)
    std::size_t replies = 1;        ///< replies it gets
    std::vector<std::size_t> keys;  ///< the positions (from 1) of its keys in the whole request
  };
  join_rule rule = join_rule::all_set;  ///< how the groups' answers join
  std::vector<group> groups;            ///< in order of their first key
};

/// @brief Cuts a request whose keys span several slots into one per slot, when its script can
/// be (the multi-resource scripts, `async_lock_all`); nothing otherwise.
///
/// The script must be the first command; commands after it (the `TIME` behind a vote) go with
/// the first group. The cluster then votes yes only if every group's part did (`join_replies`);
/// each part is atomic on its node, the whole is not (docs/safety.md, "Cluster masters").
inline std::optional<slot_split> split_by_slot(std::string_view payload) {
  using namespace detail_route;
  cursor c{payload};
  std::size_t argc = 0;
  std::string_view cmd, script, count;
  if (!c.number('*', argc) || argc < 3 || !c.bulk(cmd) || !c.bulk(script) || !c.bulk(count)) return std::nullopt;
  const bool by_sha = iequals(cmd, "EVALSHA");
  if (!by_sha && !iequals(cmd, "EVAL")) return std::nullopt;
  slot_split out;
  auto is = [&](const redlock::detail::script& s) { return script == (by_sha ? s.sha1 : s.body); };
  if (is(redlock::detail::multi_acquire_script)) {
    out.rule = join_rule::all_set;
  } else if (is(redlock::detail::multi_release_script)) {
    out.rule = join_rule::any_one;
  } else if (is(redlock::detail::multi_extend_script)) {
    out.rule = join_rule::every_one;
  } else {
    return std::nullopt;
  }
  std::size_t numkeys = 0;
  if (auto [p, ec] = std::from_chars(count.data(), count.data() + count.size(), numkeys);
      ec != std::errc{} || p != count.data() + count.size() || numkeys > argc - 3)
    return std::nullopt;
  std::vector<std::string_view> keys(numkeys), args(argc - 3 - numkeys);
  for (auto& k : keys)
    if (!c.bulk(k)) return std::nullopt;
  for (auto& a : args)
    if (!c.bulk(a)) return std::nullopt;
  const auto rest = payload.substr(c.at);  // the commands after the script
  std::size_t rest_commands = 0;
  for (cursor r{rest}; r.at < rest.size(); ++rest_commands) {
    std::size_t n = 0;
    std::string_view skip;
    if (!r.number('*', n)) return std::nullopt;
    for (std::size_t i = 0; i < n; ++i)
      if (!r.bulk(skip)) return std::nullopt;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto slot = key_slot(keys[i]);
    auto g = std::find_if(out.groups.begin(), out.groups.end(), [&](const auto& x) { return x.slot == slot; });
    if (g == out.groups.end()) {
      out.groups.push_back({});
      g = out.groups.end() - 1;
      g->slot = slot;
    }
    g->keys.push_back(i + 1);
  }
  for (std::size_t gi = 0; gi < out.groups.size(); ++gi) {
    auto& g = out.groups[gi];
    auto& p = g.payload;
    p = "*" + std::to_string(3 + g.keys.size() + args.size()) + "\r\n";
    put_bulk(p, cmd);
    put_bulk(p, script);
    put_bulk(p, std::to_string(g.keys.size()));
    for (auto k : g.keys) put_bulk(p, keys[k - 1]);
    for (auto a : args) put_bulk(p, a);
    if (gi == 0) {
      p.append(rest);
      g.replies += rest_commands;
    }
  }
  return out;
}

/// @brief For a part of a cut `multi_acquire_script` that set its keys while another part was
/// refused: the `multi_release_script` over the same keys and token, which undoes it, so that a
/// refused vote leaves nothing of ours on the cluster (as the uncut script would not have).
/// Empty when `part` is not a multi acquire.
inline std::string undo_part(std::string_view part) {
  using namespace detail_route;
  cursor c{part};
  std::size_t argc = 0, numkeys = 0;
  std::string_view cmd, script, count;
  if (!c.number('*', argc) || argc < 4 || !c.bulk(cmd) || !c.bulk(script) || !c.bulk(count)) return {};
  const bool by_sha = iequals(cmd, "EVALSHA");
  if (script != (by_sha ? redlock::detail::multi_acquire_script.sha1 : redlock::detail::multi_acquire_script.body))
    return {};
  if (auto [p, ec] = std::from_chars(count.data(), count.data() + count.size(), numkeys);
      ec != std::errc{} || numkeys + 3 >= argc)
    return {};
  std::string out = "*" + std::to_string(3 + numkeys + 1) + "\r\n";
  put_bulk(out, "EVAL");  // nobody waits to fall back from NOSCRIPT
  put_bulk(out, redlock::detail::multi_release_script.body);
  put_bulk(out, count);
  for (std::size_t i = 0; i <= numkeys; ++i) {  // the keys, then ARGV[1]: the token
    std::string_view a;
    if (!c.bulk(a)) return {};
    put_bulk(out, a);
  }
  return out;
}

/// @brief The cluster's one answer from its groups' answers (`answers[g]`: group `g`'s reply
/// nodes, its script's reply first, then, for the first group, the replies of the commands that
/// went with it), as the unsplit script would have given it.
inline resp::response join_replies(const slot_split& split, const std::vector<resp::response>& answers) {
  using resp::node;
  using resp::type;
  auto first_reply_end = [](const resp::response& r) {
    std::size_t i = 1;
    while (i < r.size() && r[i].depth > 0) ++i;
    return std::min(i, r.size());
  };
  auto integer_at = [](const resp::response& r, std::size_t i) -> long long {
    long long v = 0;
    if (i < r.size()) std::from_chars(r[i].value.data(), r[i].value.data() + r[i].value.size(), v);
    return v;
  };
  resp::response out;
  if (split.rule == join_rule::all_set) {
    long long total = 0;
    std::optional<long long> refused;
    for (std::size_t g = 0; g < split.groups.size() && g < answers.size(); ++g) {
      const auto& r = answers[g];
      if (integer_at(r, 1) == 1) {
        total += static_cast<long long>(split.groups[g].keys.size());
        continue;
      }
      const auto i = integer_at(r, 2);  // 1-based within the group
      if (i >= 1 && static_cast<std::size_t>(i) <= split.groups[g].keys.size()) {
        const auto whole = static_cast<long long>(split.groups[g].keys[static_cast<std::size_t>(i - 1)]);
        refused = refused ? std::min(*refused, whole) : whole;
      } else {
        refused = refused.value_or(0);
      }
    }
    out.push_back(node{type::array, 2, 0, {}});
    out.push_back(node{type::integer, 0, 1, refused ? "0" : "1"});
    out.push_back(node{type::integer, 0, 1, std::to_string(refused ? *refused : total)});
  } else {
    bool any = false, every = true;
    for (const auto& r : answers) {
      const bool one = !r.empty() && r[0].value == "1";
      any = any || one;
      every = every && one;
    }
    out.push_back(node{type::integer, 0, 0, (split.rule == join_rule::any_one ? any : every) ? "1" : "0"});
  }
  if (!answers.empty()) {
    const auto& first = answers[0];
    out.insert(out.end(), first.begin() + static_cast<std::ptrdiff_t>(first_reply_end(first)), first.end());
  }
  return out;
}

/// What a cluster node's error reply asks the client to do.
struct redirect {
  /// The kinds of redirect.
  enum class kind : std::uint8_t {
    none,         ///< not a redirect: the answer itself
    moved,        ///< `MOVED slot host:port`: the slot lives elsewhere for good; refresh the map
    ask,          ///< `ASK slot host:port`: this once, send `ASKING` and the request there
    try_again,    ///< `TRYAGAIN`: a multi-key request during a slot's migration; retry shortly
    cluster_down  ///< `CLUSTERDOWN`: the cluster cannot serve the slot now; retry shortly
  };
  kind what = kind::none;  ///< which redirect
  std::uint16_t slot = 0;  ///< the slot (`MOVED`, `ASK`)
  std::string host;        ///< where to (`MOVED`, `ASK`); empty: the node that answered
  std::uint16_t port = 0;  ///< where to (`MOVED`, `ASK`)
};

/// Reads a cluster redirect from an error reply's text; `kind::none` for any other text.
inline redirect parse_redirect(std::string_view text) {
  redirect r;
  auto word = [&](std::string_view w) {
    return text.size() >= w.size() && text.substr(0, w.size()) == w &&
           (text.size() == w.size() || text[w.size()] == ' ');
  };
  if (word("TRYAGAIN")) {
    r.what = redirect::kind::try_again;
    return r;
  }
  if (word("CLUSTERDOWN")) {
    r.what = redirect::kind::cluster_down;
    return r;
  }
  const bool moved = word("MOVED");
  if (!moved && !word("ASK")) return r;
  auto rest = text.substr(moved ? 6 : 4);
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) return r;
  unsigned slot = 0;
  if (auto [p, ec] = std::from_chars(rest.data(), rest.data() + space, slot);
      ec != std::errc{} || p != rest.data() + space || slot >= slot_count)
    return r;
  auto address = rest.substr(space + 1);
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return r;
  unsigned port = 0;
  const auto port_text = address.substr(colon + 1);
  if (auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
      ec != std::errc{} || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return r;
  auto host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  r.what = moved ? redirect::kind::moved : redirect::kind::ask;
  r.slot = static_cast<std::uint16_t>(slot);
  r.host.assign(host);
  r.port = static_cast<std::uint16_t>(port);
  return r;
}

}  // namespace redlock::core
