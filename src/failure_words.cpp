// SPDX-License-Identifier: BSL-1.0
#include "detail/failure_words.hpp"

#include <redlock/detail/observe.hpp>

#include <fmt/format.h>

namespace redlock::detail {

std::string failure_line(const core::link_failure& f, std::string_view server_text, failure_counts n,
                         std::string_view password) {
  const auto delay = format_duration(f.delay);
  switch (f.words) {
    case core::failure_words::down:
      return fmt::format(
          "connection down: {}; {} written request(s) failed (outcome unknown), {} not sent; reconnecting in {}",
          describe(f.cause), n.lost, n.unsent, delay);
    case core::failure_words::tls_failed:
      return fmt::format("TLS connect failed: {} ({}); {} request(s) not sent; retrying in {} (attempt {})",
                         describe(f.cause), printable(server_text, 256, {password}), n.unsent, delay,
                         f.failed_attempts);
    case core::failure_words::auth_refused:
    case core::failure_words::hello_refused:
      return fmt::format("{}: {}; {} request(s) not sent; retrying in {} (attempt {})",
                         f.words == core::failure_words::auth_refused ? "authentication refused" : "handshake refused",
                         server_text.empty() ? describe(f.cause) : printable(server_text, 256, {password}), n.unsent,
                         delay, f.failed_attempts);
    case core::failure_words::connect_failed:
      break;
  }
  return fmt::format("connect failed: {}; {} request(s) not sent; retrying in {} (attempt {})", describe(f.cause),
                     n.unsent, delay, f.failed_attempts);
}

}  // namespace redlock::detail
