// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Output helpers of the `redlock` tool: a small JSON writer, text sanitising, and the words for
/// what masters answered (pure).

#include <redlock/master_result.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// ---- what masters answered, in words -------------------------------------------------------------

/// A master as the human output names it: "master 2 (10.0.0.2:7001)". Numbered from 1 in the
/// order of the list, as the library's logs and the master-list errors number them (the JSON
/// lists masters in that order; its indexes count from 0).
std::string master_label(std::size_t index, std::string_view address);

/// The step a master's answer belongs to: the same status means different things in each.
enum class step_kind { acquire, extend, release };

/// A master's status for `step` as the JSON writes it: the library's names (`to_string`), except
/// that an extension's grant is "extended", a release's is "released", and a "taken" answer to
/// either is "not_held".
std::string_view status_name(redlock::master_status s, step_kind step) noexcept;

/// The same in words for humans: "not held", "still pending", "server error", ...
std::string_view status_words(redlock::master_status s, step_kind step) noexcept;

/// Why a master did not answer cleanly, never empty for a failing status and never "Success":
/// its error reply, or why its connection failed; "still connecting" when its connection has not
/// failed yet (no error, or `not_connected` without a cause).
std::string master_reason(redlock::master_status s, const boost::system::error_code& error,
                          std::string_view server_text);
std::string master_reason(const redlock::master_result& r);

/// True for the statuses that are failures (not granted, taken, queued or pending).
bool is_failure(redlock::master_status s) noexcept;

/// The answers of one round, counted.
struct answer_counts {
  std::size_t granted = 0;
  std::size_t taken = 0;
  std::size_t queued = 0;
  std::size_t pending = 0;  ///< no answer yet when the outcome was decided
  std::size_t failed = 0;   ///< server error, timeout, unreachable, failed
  std::size_t answered() const noexcept { return granted + taken + queued; }
};
answer_counts count_answers(const std::vector<redlock::master_result>& results);

/// A refused acquisition's answers: "5 masters: 3 taken, 2 still pending"; each non-zero count,
/// queued ones as `queued_as` ("queued behind readers").
std::string answers_text(const answer_counts& c, std::size_t masters, std::string_view queued_as);

/// Why too few masters can grant, from the failed acquisition's report and answers:
/// "at most 2 of 5 masters usable, 3 needed (0 answered, 2 still pending, 3 failed: master 3
/// (10.0.0.3:7001) unreachable: Connection refused; ...)". "only" instead of "at most" when no
/// master is pending.
std::string unavailable_text(const redlock::quorum_report& rep, const answer_counts& c);

/// A readiness report (`client::async_wait_ready`) for humans: "2 of 5 masters connected, 3 needed
/// (3 failed: master 3 (...) unreachable: Connection refused; ...; 1 still connecting: master 2
/// (...))".
std::string readiness_text(const redlock::quorum_report& rep);

}  // namespace redlock::cli
