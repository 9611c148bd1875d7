// SPDX-License-Identifier: BSL-1.0
// Which masters a lock's releases go to (redlock/core/release_targets.hpp): a failed round's
// release skips the masters its request cannot have written to; a held lock's lost release is
// sent again only where a key of it may be, and only when its outcome is unknown.

#include <redlock/core/release_targets.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <vector>

namespace {

using boost::system::error_code;
using redlock::error;
using redlock::master_result;
using redlock::master_status;
using redlock::core::any_may_have_set;
using redlock::core::key_holders;
using redlock::core::may_have_set;
using redlock::core::release_in_doubt;

master_result answered(master_status s) {
  master_result r;
  r.status = s;
  return r;
}

TEST(release_targets, a_failed_rounds_request_may_have_set_the_key_unless_the_answer_says_not) {
  // The answers that prove nothing was set: the key was held, the waiter was queued, the script
  // failed before writing (an error reply), or the request never left (refused as unreachable).
  EXPECT_FALSE(may_have_set(master_status::taken));
  EXPECT_FALSE(may_have_set(master_status::queued));
  EXPECT_FALSE(may_have_set(master_status::server_error));
  EXPECT_FALSE(may_have_set(master_status::unreachable));
  // Every other: a grant, or an outcome nobody knows.
  EXPECT_TRUE(may_have_set(master_status::granted));
  EXPECT_TRUE(may_have_set(master_status::pending));
  EXPECT_TRUE(may_have_set(master_status::timeout));
  EXPECT_TRUE(may_have_set(master_status::failed));
}

TEST(release_targets, a_round_where_no_master_may_hold_the_key_needs_no_release) {
  const std::vector<master_result> taken{answered(master_status::taken), answered(master_status::unreachable),
                                         answered(master_status::server_error)};
  EXPECT_FALSE(any_may_have_set(taken, 3));
  EXPECT_TRUE(any_may_have_set(taken, 4)) << "a master the round's answers do not cover";
  auto one_late = taken;
  one_late[1] = answered(master_status::timeout);
  EXPECT_TRUE(any_may_have_set(one_late, 3));
}

TEST(release_targets, a_release_is_in_doubt_unless_answered_refused_or_abandoned_by_the_client) {
  EXPECT_FALSE(release_in_doubt({}));
  EXPECT_FALSE(release_in_doubt(error::server_error));                    // the script did not run
  EXPECT_FALSE(release_in_doubt(boost::asio::error::operation_aborted));  // the client closed
  EXPECT_TRUE(release_in_doubt(error::master_timeout));
  EXPECT_TRUE(release_in_doubt(error::connection_lost));
  EXPECT_TRUE(release_in_doubt(error::not_connected));
  EXPECT_TRUE(release_in_doubt(error::connection_stalled));
  EXPECT_TRUE(release_in_doubt(error::protocol_error));
}

TEST(release_targets, a_held_locks_lost_release_is_resent_only_where_its_key_may_be) {
  key_holders h;
  EXPECT_TRUE(h.may_hold(0)) << "before any round, anywhere";
  h.granted({answered(master_status::granted), answered(master_status::taken), answered(master_status::timeout),
             answered(master_status::unreachable), answered(master_status::pending)});
  EXPECT_TRUE(h.may_hold(0));
  EXPECT_FALSE(h.may_hold(1));
  EXPECT_TRUE(h.may_hold(2));
  EXPECT_FALSE(h.may_hold(3));
  EXPECT_TRUE(h.may_hold(4));
  EXPECT_TRUE(h.may_hold(5)) << "a master the round does not cover";
  EXPECT_TRUE(h.resend(0, error::connection_lost));
  EXPECT_FALSE(h.resend(0, {}));
  EXPECT_FALSE(h.resend(0, error::server_error));
  EXPECT_FALSE(h.resend(1, error::connection_lost)) << "no key of ours can be there";
  EXPECT_TRUE(h.resend(4, error::master_timeout));
}

}  // namespace
