// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Reading the raw RESP2 replies of `redis_node::command`, for tests that check what the masters
/// hold (header-only, tests only).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace redlock::test {

/// A nil bulk string.
inline const std::string nil = "$-1\r\n";

/// "abc" -> "$3\r\nabc\r\n": how a master answers GET of that value.
inline std::string bulk(const std::string& v) { return "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n"; }

/// "$3\r\nabc\r\n" -> "abc"; nil or anything else -> none.
inline std::optional<std::string> bulk_of(const std::string& raw) {
  if (raw.size() < 4 || raw[0] != '$' || raw[1] == '-') return std::nullopt;
  const auto eol = raw.find("\r\n");
  return raw.substr(eol + 2, std::stoul(raw.substr(1, eol - 1)));
}

/// ":42\r\n" -> 42; anything else -> none.
inline std::optional<std::int64_t> integer_of(const std::string& raw) {
  if (raw.size() < 4 || raw[0] != ':') return std::nullopt;
  return std::stoll(raw.substr(1, raw.find("\r\n") - 1));
}

/// "*2\r\n$3\r\nabc\r\n$1\r\nx\r\n" -> {"abc", "x"}; anything else (nil, error) -> {}.
inline std::vector<std::string> strings_of(const std::string& raw) {
  std::vector<std::string> out;
  if (raw.empty() || raw[0] != '*') return out;
  std::size_t pos = raw.find("\r\n");
  const long n = std::stol(raw.substr(1, pos - 1));
  pos += 2;
  for (long i = 0; i < n && pos < raw.size(); ++i) {
    if (raw[pos] != '$') break;
    const auto eol = raw.find("\r\n", pos);
    const long len = std::stol(raw.substr(pos + 1, eol - pos - 1));
    pos = eol + 2;
    if (len < 0) continue;
    out.push_back(raw.substr(pos, static_cast<std::size_t>(len)));
    pos += static_cast<std::size_t>(len) + 2;
  }
  return out;
}

}  // namespace redlock::test
