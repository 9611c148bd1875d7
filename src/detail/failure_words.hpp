// SPDX-License-Identifier: BSL-1.0
#pragma once
// The log line of a failed connect attempt or a lost connection: the machine decides the words
// (`core::link_failure::words`) and the level; this says them. Pure, unit-tested
// (test/unit/detail/failure_words_test.cpp).

#include <redlock/core/link_fsm.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace redlock::detail {

// What a failure cost the requests: written ones whose outcome is unknown, and ones never sent.
struct failure_counts {
  std::size_t lost = 0;
  std::size_t unsent = 0;
};

// `server_text` is the node's own words (already redacted); `password` is replaced by "***"
// wherever it still appears, as in every log line.
std::string failure_line(const core::link_failure& f, std::string_view server_text, failure_counts n,
                         std::string_view password);

}  // namespace redlock::detail
