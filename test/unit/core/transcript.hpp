// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Shared pieces of the state machines' transcript tests: a fixed time origin, replies built as
/// RESP nodes, and readable descriptions of time points and error codes for assertion messages.

#include <redlock/core/outcome.hpp>
#include <redlock/error.hpp>
#include <redlock/resp/node.hpp>

#include <boost/system/error_code.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <source_location>
#include <string>
#include <utility>

namespace redlock::test {

using namespace std::chrono_literals;
using core::clock;

/// The origin of every transcript: times are `t0 + duration`.
inline constexpr clock::time_point t0{};

/// `t0 + d`.
constexpr clock::time_point at(clock::duration d) noexcept { return t0 + d; }

// Replies as the connection layer hands them over.
inline resp::response ok_reply() { return {{resp::type::simple_string, 0, 0, "OK"}}; }
inline resp::response nil_reply() { return {{resp::type::null, 0, 0, ""}}; }
inline resp::response int_reply(std::string v) { return {{resp::type::integer, 0, 0, std::move(v)}}; }
inline resp::response error_reply(std::string text) { return {{resp::type::simple_error, 0, 0, std::move(text)}}; }
inline resp::response no_reply() { return {}; }

/// A time point as an offset from `t0` in microseconds ("+250000us"), or "max".
inline std::string describe(clock::time_point t) {
  if (t == clock::time_point::max()) return "max";
  return "+" + std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(t - t0).count()) + "us";
}

/// An error code as "ok" or its category and message.
inline std::string describe(boost::system::error_code ec) {
  if (!ec) return "ok";
  return std::string{ec.category().name()} + ":" + ec.message();
}

#if defined(__cpp_lib_source_location)
using source_location = std::source_location;
#else
/// Clang 14 with libstdc++ 12 has no `std::source_location` (the library needs a builtin that
/// compiler lacks): the part the transcripts use, from the builtins both compilers have.
class source_location {
 public:
  constexpr source_location() noexcept = default;
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           unsigned line = __builtin_LINE()) noexcept {
    source_location l;
    l.file_ = file;
    l.line_ = line;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  unsigned line_ = 0;
};
#endif

/// Adds the caller's line to assertion failures inside a transcript helper.
inline ::testing::ScopedTrace trace_at(source_location loc) {
  return ::testing::ScopedTrace{loc.file_name(), static_cast<int>(loc.line()), "transcript step"};
}

}  // namespace redlock::test
