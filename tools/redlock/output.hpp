// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Output helpers of the `redlock` tool: a small JSON writer and text sanitising (pure).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace redlock::cli {

/// `text` as a JSON string literal (quotes included). Control characters are escaped; bytes that
/// are not valid UTF-8 become U+FFFD.
std::string json_quote(std::string_view text);

/// Builds one JSON value (objects and arrays nest) into a string, commas handled.
///
///     json_writer j;
///     j.begin_object().field("state", "held").field("holders", 3).key("masters").begin_array()...
class json_writer {
 public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  /// The key of the next value, inside an object.
  json_writer& key(std::string_view k);
  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view{s}); }
  json_writer& value(const std::string& s) { return value(std::string_view{s}); }
  json_writer& value(bool b);
  json_writer& value(std::int64_t n);
  json_writer& value(int n) { return value(static_cast<std::int64_t>(n)); }
  json_writer& value(std::size_t n) { return value(static_cast<std::int64_t>(n)); }
  json_writer& value(double d);
  json_writer& null();
  template <class T>
  json_writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }
  json_writer& null_field(std::string_view k) {
    key(k);
    return null();
  }
  const std::string& str() const noexcept { return out_; }

 private:
  void separate();
  std::string out_;
  bool need_comma_ = false;
};

/// Untrusted text (a server's message, a key's value) made safe for a terminal: control and
/// non-ASCII bytes appear as `\xNN`.
std::string printable(std::string_view text);

/// The short form of a holder's token shown by default: its first 8 characters, made printable.
std::string short_token(std::string_view token);

/// Milliseconds with a fraction, from microseconds (for latencies).
inline double to_ms(std::chrono::microseconds us) { return static_cast<double>(us.count()) / 1000.0; }

}  // namespace redlock::cli
