// SPDX-License-Identifier: BSL-1.0
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

namespace {

using redlock::condition;
using redlock::error;

TEST(error, category_is_named_and_every_code_has_a_message) {
  boost::system::error_code ec = error::master_timeout;
  EXPECT_STREQ(ec.category().name(), "redlock");
  for (int v = static_cast<int>(error::protocol_error); v <= static_cast<int>(error::not_ready); ++v) {
    boost::system::error_code c{v, redlock::error_category()};
    EXPECT_EQ(c.message().find("unknown redlock error"), std::string::npos) << v;
  }
}

TEST(error, conditions_group_codes) {
  EXPECT_EQ(boost::system::error_code(error::master_timeout), condition::timeout);
  EXPECT_EQ(boost::system::error_code(error::connect_timeout), condition::timeout);
  EXPECT_NE(boost::system::error_code(error::master_timeout), condition::master_failure);
  EXPECT_EQ(boost::system::error_code(error::connection_lost), condition::master_failure);
  EXPECT_EQ(boost::system::error_code(error::invalid_config), condition::invalid_input);
  EXPECT_EQ(boost::system::error_code(boost::asio::error::connection_refused), condition::master_failure);
  EXPECT_NE(boost::system::error_code(boost::asio::error::operation_aborted), condition::master_failure);
  EXPECT_EQ(boost::system::error_code(error::not_acquired), condition::contention);
  EXPECT_EQ(boost::system::error_code(error::quorum_unavailable), condition::master_failure);
  EXPECT_EQ(boost::system::error_code(error::connection_stalled), condition::master_failure);
  // A node without RESP3 is not failing, the input is not wrong, and nothing timed out.
  const boost::system::error_code unsupported = error::not_supported;
  EXPECT_NE(unsupported, condition::master_failure);
  EXPECT_NE(unsupported, condition::invalid_input);
  EXPECT_NE(unsupported, condition::timeout);
  EXPECT_NE(unsupported, condition::contention);
}

}  // namespace

namespace {

// TLS: every TLS code has a message and a name of its own, and counts as a master
// failure (the master could not be used), not as invalid input or a timeout.
TEST(error, tls_codes_have_messages_names_and_a_condition) {
  for (int v = static_cast<int>(error::tls_not_offered); v <= static_cast<int>(error::tls_handshake_failed); ++v) {
    const boost::system::error_code c{v, redlock::error_category()};
    EXPECT_EQ(c.message().find("unknown redlock error"), std::string::npos) << v;
    EXPECT_NE(c.message().find("TLS"), std::string::npos) << c.message();
    EXPECT_NE(redlock::to_string(static_cast<error>(v)), "unknown") << v;
    EXPECT_EQ(c, condition::master_failure) << v;
  }
}

}  // namespace
