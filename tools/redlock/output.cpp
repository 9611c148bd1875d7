// SPDX-License-Identifier: BSL-1.0
#include "output.hpp"

#include <fmt/format.h>

#include <cmath>

namespace redlock::cli {

namespace {

/// Length of the valid UTF-8 sequence starting at `s[i]`, or 0 when it is not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const auto n = utf8_length(text, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += fmt::format("\\u{:04x}", u);
        } else {
          out += c;
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

void json_writer::separate() {
  if (need_comma_) out_ += ',';
  need_comma_ = true;
}

json_writer& json_writer::begin_object() {
  separate();
  out_ += '{';
  need_comma_ = false;
  return *this;
}

json_writer& json_writer::end_object() {
  out_ += '}';
  need_comma_ = true;
  return *this;
}

json_writer& json_writer::begin_array() {
  separate();
  out_ += '[';
  need_comma_ = false;
  return *this;
}

json_writer& json_writer::end_array() {
  out_ += ']';
  need_comma_ = true;
  return *this;
}

json_writer& json_writer::key(std::string_view k) {
  separate();
  out_ += json_quote(k);
  out_ += ':';
  need_comma_ = false;  // the value follows without a comma
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  separate();
  out_ += json_quote(s);
  return *this;
}

json_writer& json_writer::value(bool b) {
  separate();
  out_ += b ? "true" : "false";
  return *this;
}

json_writer& json_writer::value(std::int64_t n) {
  separate();
  out_ += fmt::format("{}", n);
  return *this;
}

json_writer& json_writer::value(double d) {
  separate();
  if (!std::isfinite(d)) {
    out_ += "null";
  } else {
    out_ += fmt::format("{:.3f}", d);
  }
  return *this;
}

json_writer& json_writer::null() {
  separate();
  out_ += "null";
  return *this;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\') {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

std::string short_token(std::string_view token) { return printable(token.substr(0, 8)); }

}  // namespace redlock::cli
