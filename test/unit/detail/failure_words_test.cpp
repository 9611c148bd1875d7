// SPDX-License-Identifier: BSL-1.0
// The log line of each kind of connection failure: what it counts, the node's words, no secret.
#include "detail/failure_words.hpp"

#include <redlock/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace {

using redlock::core::failure_words;
using redlock::core::link_failure;
using redlock::detail::failure_line;
using namespace std::chrono_literals;

link_failure failure(failure_words w, redlock::error e, std::chrono::milliseconds delay, std::uint64_t attempts) {
  link_failure f;
  f.cause = make_error_code(e);
  f.words = w;
  f.delay = delay;
  f.failed_attempts = attempts;
  return f;
}

bool has(const std::string& line, const std::string& part) { return line.find(part) != std::string::npos; }

TEST(failure_words, a_lost_connection_counts_the_written_and_the_unsent_requests) {
  const auto line =
      failure_line(failure(failure_words::down, redlock::error::connection_stalled, 250ms, 0), "", {3, 2}, "");
  EXPECT_TRUE(has(line, "connection down: ")) << line;
  EXPECT_TRUE(has(line, "3 written request(s) failed (outcome unknown), 2 not sent")) << line;
  EXPECT_TRUE(has(line, "reconnecting in 250")) << line;
}

TEST(failure_words, a_failed_connect_names_its_attempt) {
  const auto line =
      failure_line(failure(failure_words::connect_failed, redlock::error::connect_timeout, 100ms, 4), "", {0, 7}, "");
  EXPECT_TRUE(has(line, "connect failed: ")) << line;
  EXPECT_TRUE(has(line, "7 request(s) not sent")) << line;
  EXPECT_TRUE(has(line, "(attempt 4)")) << line;
}

TEST(failure_words, a_refusal_quotes_the_node_without_the_password) {
  const auto line = failure_line(failure(failure_words::auth_refused, redlock::error::auth_failed, 1s, 1),
                                 "WRONGPASS hunter2 is not it\n", {0, 0}, "hunter2");
  EXPECT_TRUE(has(line, "authentication refused: WRONGPASS *** is not it\\x0a")) << line;
  EXPECT_FALSE(has(line, "hunter2")) << line;
  const auto hello =
      failure_line(failure(failure_words::hello_refused, redlock::error::handshake_failed, 1s, 2), "", {0, 0}, "");
  EXPECT_TRUE(has(hello, "handshake refused: ")) << hello;
  EXPECT_TRUE(has(hello, "[redlock:")) << "no words from the node: the error code instead: " << hello;
}

TEST(failure_words, a_tls_failure_keeps_the_library_detail) {
  const auto line = failure_line(failure(failure_words::tls_failed, redlock::error::tls_certificate_untrusted, 2s, 3),
                                 "certificate verify failed", {0, 1}, "");
  EXPECT_TRUE(has(line, "TLS connect failed: ")) << line;
  EXPECT_TRUE(has(line, "(certificate verify failed)")) << line;
  EXPECT_TRUE(has(line, "(attempt 3)")) << line;
}

}  // namespace
