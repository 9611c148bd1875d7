// SPDX-License-Identifier: BSL-1.0
#pragma once
// Formatting of log messages, for the library's sources only (fmt is a private dependency).

#include <redlock/detail/observe.hpp>

#include <fmt/format.h>

#include <iterator>
#include <string_view>
#include <utility>

namespace redlock::detail {

// Formats one message (after the logger's prefix) and hands it over. Only ever called through
// REDLOCK_LOG, which checks the level first, so that nothing (arguments included) is evaluated
// for a level that is off. Never throws: logging must not disturb a connection or a lock.
template <class... Args>
void log_now(const logger& lg, log_level level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    fmt::memory_buffer buf;
    if (!lg.prefix().empty()) fmt::format_to(std::back_inserter(buf), "{}: ", lg.prefix());
    fmt::format_to(std::back_inserter(buf), format, std::forward<Args>(args)...);
    lg.write(level, std::string_view{buf.data(), buf.size()});
  } catch (...) {
    // Out of memory while formatting: drop the message.
  }
}

}  // namespace redlock::detail

#define REDLOCK_LOG(lg, level, ...)                                                  \
  do {                                                                               \
    if ((lg).enabled(level)) ::redlock::detail::log_now((lg), (level), __VA_ARGS__); \
  } while (false)
