// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Opt-in `fmt` formatters for `redlock::master_status`, `redlock::master_result`,
/// `redlock::quorum_report` and `redlock::error`.
///
/// The library uses fmt only privately, and this is the one public header that includes it: a
/// program that includes this header needs fmt (9 or later) on its own include path and link line,
/// for example `find_package(fmt)` and `target_link_libraries(app PRIVATE redlock::redlock
/// fmt::fmt)`. The header is header-only; nothing in it is compiled into the library.
///
/// All the formatters accept the string format specification (width, fill, alignment, precision):
/// @code
/// fmt::print("{:<12} {}\n", r.status, r);   // "granted      granted 412us"
/// fmt::print("{}\n", redlock::error::not_owner);  // its message
/// @endcode

#include <redlock/error.hpp>
#include <redlock/master_result.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

namespace redlock::fmt_detail {

/// At most this many bytes of a master's own text are shown; a longer one is cut and ends "...".
inline constexpr std::size_t max_server_text = 120;

/// The start of a master's untrusted text, made printable: control bytes, bytes above 0x7e, the
/// backslash and the double quote become `\xNN`.
inline std::string printable_server_text(std::string_view text) {
  constexpr std::string_view hex = "0123456789abcdef";
  const bool cut = text.size() > max_server_text;
  if (cut) text = text.substr(0, max_server_text);
  std::string out;
  out.reserve(text.size() + 3);
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\' || c == '"') {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

}  // namespace redlock::fmt_detail

// Specialised inside the namespace, not as `fmt::formatter<...>` from outside: Doxygen cannot
// place the latter.
/// The fmt library, to which this header adds formatters for redlock's types.
namespace fmt {

/// The status's name (`redlock::to_string`): "granted", "server_error", ...
template <>
struct formatter<redlock::master_status> : formatter<string_view> {
  /// Writes the name of `s` to `ctx.out()`, padded, aligned and cut as the format specification says.
  template <typename FormatContext>
  auto format(redlock::master_status s, FormatContext& ctx) const -> decltype(ctx.out()) {
    const auto name = redlock::to_string(s);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(name.data(), name.size()), ctx);
  }
};

/// The status, then its latency and detail: "pending", "granted 412us",
/// `server_error 380us "WRONGTYPE Operation against a key..."` (the master's text made printable
/// and cut), "timeout 2000us (the node did not reply before the request's deadline)".
template <>
struct formatter<redlock::master_result> : formatter<string_view> {
  /// Writes `r` as described above to `ctx.out()`, padded, aligned and cut as the format specification says.
  template <typename FormatContext>
  auto format(const redlock::master_result& r, FormatContext& ctx) const -> decltype(ctx.out()) {
    fmt::memory_buffer buf;
    const auto name = redlock::to_string(r.status);
    buf.append(name.data(), name.data() + name.size());
    if (r.status != redlock::master_status::pending) {
      fmt::format_to(std::back_inserter(buf), " {}us", r.latency.count());
    }
    if (r.status == redlock::master_status::server_error && !r.server_text.empty()) {
      fmt::format_to(std::back_inserter(buf), " \"{}\"", redlock::fmt_detail::printable_server_text(r.server_text));
    } else if (r.error) {
      fmt::format_to(std::back_inserter(buf), " ({})", r.error.message());
    }
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(buf.data(), buf.size()), ctx);
  }
};

/// The report on one line, as `redlock::to_string(const quorum_report&)` gives it: "too few masters
/// answered for a quorum: 2 of 3 masters could not be used (2 needed): 127.0.0.1:7001 unreachable:
/// the node rejected the credentials (WRONGPASS ...); ...".
template <>
struct formatter<redlock::quorum_report> : formatter<string_view> {
  /// Writes `to_string(r)` to `ctx.out()`, padded, aligned and cut as the format specification says.
  template <typename FormatContext>
  auto format(const redlock::quorum_report& r, FormatContext& ctx) const -> decltype(ctx.out()) {
    const auto text = redlock::to_string(r);
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};

/// The error's message, as `make_error_code(e).message()` gives it (`redlock::to_string` gives its
/// identifier).
template <>
struct formatter<redlock::error> : formatter<string_view> {
  /// Writes the message of `e` to `ctx.out()`, padded, aligned and cut as the format specification says.
  template <typename FormatContext>
  auto format(redlock::error e, FormatContext& ctx) const -> decltype(ctx.out()) {
    const auto message = redlock::make_error_code(e).message();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(message), ctx);
  }
};

}  // namespace fmt
