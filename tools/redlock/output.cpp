// SPDX-License-Identifier: BSL-1.0
#include "output.hpp"

#include <redlock/error.hpp>

#include <fmt/format.h>

#include <algorithm>
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

// ---- what masters answered, in words -------------------------------------------------------------

using redlock::master_status;

std::string master_label(std::size_t index, std::string_view address) {
  return fmt::format("master {} ({})", index + 1, address);
}

std::string_view status_name(master_status s, step_kind step) noexcept {
  if (step != step_kind::acquire) {
    if (s == master_status::granted) return step == step_kind::release ? "released" : "extended";
    if (s == master_status::taken) return "not_held";
  }
  return to_string(s);
}

std::string_view status_words(master_status s, step_kind step) noexcept {
  switch (s) {
    case master_status::pending:
      return "still pending";
    case master_status::server_error:
      return "server error";
    case master_status::taken:
      return step == step_kind::acquire ? "taken" : "not held";
    default:
      return status_name(s, step);
  }
}

bool is_failure(master_status s) noexcept {
  return s != master_status::granted && s != master_status::taken && s != master_status::queued &&
         s != master_status::pending;
}

std::string master_reason(master_status s, const boost::system::error_code& error, std::string_view server_text) {
  if (s == master_status::server_error) return server_text.empty() ? "an error reply" : printable(server_text);
  // A connection on its first attempt has no cause of failure yet: an empty error would print as
  // "Success".
  const bool no_cause = !error || error == redlock::error::not_connected;
  if ((s == master_status::unreachable || s == master_status::pending) && no_cause) return "still connecting";
  if (!error) {
    switch (s) {
      case master_status::timeout:
        return "no answer within the request timeout";
      case master_status::failed:
        return "the outcome is unknown";
      default:
        return {};
    }
  }
  auto out = error.message();
  if (!server_text.empty()) out += " (" + printable(server_text) + ")";
  return out;
}

std::string master_reason(const redlock::master_result& r) {
  if (!is_failure(r.status)) return {};
  return master_reason(r.status, r.error, r.server_text);
}

answer_counts count_answers(const std::vector<redlock::master_result>& results) {
  answer_counts c;
  for (const auto& r : results) {
    switch (r.status) {
      case master_status::granted:
        ++c.granted;
        break;
      case master_status::taken:
        ++c.taken;
        break;
      case master_status::queued:
        ++c.queued;
        break;
      case master_status::pending:
        ++c.pending;
        break;
      default:
        ++c.failed;
    }
  }
  return c;
}

std::string answers_text(const answer_counts& c, std::size_t masters, std::string_view queued_as) {
  std::string out = fmt::format("{} master{}:", masters, masters == 1 ? "" : "s");
  bool first = true;
  const auto part = [&](std::size_t n, std::string_view what) {
    if (n == 0) return;
    out += fmt::format("{} {} {}", first ? "" : ",", n, what);
    first = false;
  };
  part(c.granted, "granted");
  part(c.queued, queued_as);
  part(c.taken, "taken");
  part(c.pending, "still pending");
  part(c.failed, "failed");
  return out;
}

namespace {

/// "master 3 (10.0.0.3:7001) unreachable: Connection refused; ..." for the failed masters of `rep`
/// (those still connecting left out).
std::string failed_masters(const redlock::quorum_report& rep) {
  std::string out;
  for (const auto& m : rep.failing) {
    if (m.status == master_status::pending) continue;
    out += fmt::format("{}{} {}: {}", out.empty() ? "" : "; ", master_label(m.index, m.address),
                       status_words(m.status, step_kind::acquire), master_reason(m.status, m.error, m.server_text));
  }
  return out;
}

}  // namespace

std::string unavailable_text(const redlock::quorum_report& rep, const answer_counts& c) {
  const auto usable = rep.masters - std::min(c.failed, rep.masters);
  const auto details = failed_masters(rep);
  return fmt::format("{} {} of {} masters usable, {} needed ({} answered, {} still pending, {} failed{}{})",
                     c.pending > 0 ? "at most" : "only", usable, rep.masters, rep.needed, c.answered(), c.pending,
                     c.failed, details.empty() ? "" : ": ", details);
}

std::string readiness_text(const redlock::quorum_report& rep) {
  std::string connecting;
  std::size_t still = 0;
  for (const auto& m : rep.failing) {
    if (m.status != master_status::pending) continue;
    ++still;
    connecting += fmt::format("{}{}", connecting.empty() ? "" : ", ", master_label(m.index, m.address));
  }
  const auto failed = rep.failing.size() - still;
  std::string parts;
  if (failed > 0) parts = fmt::format("{} failed: {}", failed, failed_masters(rep));
  if (still > 0) parts += fmt::format("{}{} still connecting: {}", parts.empty() ? "" : "; ", still, connecting);
  return fmt::format("{} of {} masters connected, {} needed{}{}{}", rep.masters - rep.failing.size(), rep.masters,
                     rep.needed, parts.empty() ? "" : " (", parts, parts.empty() ? "" : ")");
}

}  // namespace redlock::cli
