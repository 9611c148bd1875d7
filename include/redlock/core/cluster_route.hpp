// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// How a request reaches the right shard of a cluster master, as pure functions: the slot of an
/// encoded request (with its helper keys renamed into the lock key's slot, `key_naming::slotted`),
/// and what a redirect reply (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) asks for. No I/O.

#include <redlock/core/key_slot.hpp>
#include <redlock/detail/scripts.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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
    if (at >= in.size() || in[at] != prefix) return false;
    const auto end = in.find("\r\n", at + 1);
    if (end == std::string_view::npos) return false;
    const auto [p, ec] = std::from_chars(in.data() + at + 1, in.data() + end, n);
    if (ec != std::errc{} || p != in.data() + end) return false;
    at = end + 2;
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

inline keys_at key_positions(std::string_view cmd) noexcept {
  for (std::string_view s : {"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"})
    if (iequals(cmd, s)) return keys_at::counted;
  for (std::string_view s : {"DEL", "UNLINK", "EXISTS", "TOUCH"})
    if (iequals(cmd, s)) return keys_at::all;
  for (std::string_view s : {"SET", "GET", "PEXPIRE", "PTTL", "TTL", "TYPE", "HGETALL", "HLEN", "ZCARD", "ZRANGE",
                             "SCARD", "SMEMBERS", "INCR", "GETDEL", "DUMP", "RESTORE", "OBJECT"})
    if (iequals(cmd, s)) return keys_at::first;
  return keys_at::none;
}

// The helper suffix `key` is `lock` plus, if any.
inline std::string_view helper_suffix_of(std::string_view key, std::string_view lock) noexcept {
  if (key.size() <= lock.size() || key.substr(0, lock.size()) != lock) return {};
  const auto rest = key.substr(lock.size());
  for (auto s : redlock::detail::helper_suffixes)
    if (rest == s) return s;
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
/// In a script's KEYS, a key that is the first key plus a helper suffix is a helper key: when the
/// first key has no hash tag it becomes `{first}` plus the suffix (`append_helper_key`). The
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
    std::string_view first;
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
      if (first.empty() && i == (where == keys_at::counted ? 3u : 1u)) {
        first = a;
        note_slot(a);
        continue;
      }
      const auto suffix = where == keys_at::counted ? helper_suffix_of(a, first) : std::string_view{};
      if (!suffix.empty() && !hash_tag(first)) {
        if (!r.rewritten) {
          r.rewritten = true;
          out.reserve(payload.size() + 16);
        }
        out.append(payload.substr(copied, start - copied));
        std::string renamed;
        append_helper_key(renamed, first, suffix, key_naming::slotted);
        put_bulk(out, renamed);
        copied = c.at;
        note_slot(renamed);
      } else {
        note_slot(a);
      }
    }
  }
  if (r.rewritten) out.append(payload.substr(copied));
  return r;
}

/// What a cluster node's error reply asks the client to do.
struct redirect {
  enum class kind : std::uint8_t {
    none,         ///< not a redirect: the answer itself
    moved,        ///< `MOVED slot host:port`: the slot lives elsewhere for good; refresh the map
    ask,          ///< `ASK slot host:port`: this once, send `ASKING` and the request there
    try_again,    ///< `TRYAGAIN`: a multi-key request during a slot's migration; retry shortly
    cluster_down  ///< `CLUSTERDOWN`: the cluster cannot serve the slot now; retry shortly
  };
  kind what = kind::none;
  std::uint16_t slot = 0;
  std::string host;  ///< empty: the node that answered
  std::uint16_t port = 0;
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
