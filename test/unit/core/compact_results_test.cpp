// SPDX-License-Identifier: BSL-1.0
// The results a lock keeps (include/redlock/core/compact_results.hpp): what goes in comes out, errors and
// server texts included, and a later annotation lands on its own master only.

#include <redlock/core/compact_results.hpp>
#include <redlock/error.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace {

using redlock::master_result;
using redlock::master_status;
using redlock::core::compact_results;
using namespace std::chrono_literals;

master_result result(master_status s, std::chrono::microseconds latency, std::int64_t value = 0) {
  master_result r;
  r.status = s;
  r.latency = latency;
  r.value = value;
  return r;
}

void expect_same(const std::vector<master_result>& a, const std::vector<master_result>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].status, b[i].status) << i;
    EXPECT_EQ(a[i].latency, b[i].latency) << i;
    EXPECT_EQ(a[i].value, b[i].value) << i;
    EXPECT_EQ(a[i].error, b[i].error) << i;
    EXPECT_EQ(a[i].server_text, b[i].server_text) << i;
  }
}

TEST(compact_results, keeps_every_field_of_every_master) {
  std::vector<master_result> in{result(master_status::granted, 120us, 42), result(master_status::taken, 7us, -1),
                                result(master_status::server_error, 300us), result(master_status::timeout, 50000us),
                                result(master_status::pending, 0us)};
  in[2].server_text = "ERR something";
  in[3].error = redlock::error::master_timeout;
  in[4].error = boost::asio::error::connection_reset;
  in[4].server_text = "reset";
  const compact_results c{in};
  EXPECT_EQ(c.size(), 5u);
  EXPECT_EQ(c.status(1), master_status::taken);
  expect_same(c.expand(), in);
}

TEST(compact_results, a_new_round_replaces_the_old_one_errors_included) {
  std::vector<master_result> first{result(master_status::failed, 1us), result(master_status::granted, 2us)};
  first[0].error = boost::asio::error::eof;
  compact_results c{first};
  const std::vector<master_result> second{result(master_status::granted, 3us), result(master_status::granted, 4us),
                                          result(master_status::granted, 5us)};
  c = compact_results{second};
  expect_same(c.expand(), second);
  c = compact_results{std::vector<master_result>{}};
  EXPECT_TRUE(c.empty());
  EXPECT_TRUE(c.expand().empty());
}

// A lock's results are copied in after each round, into the storage it holds when it can. Catches
// a copy that keeps the old round's errors (an index into extras that no longer belong to it),
// loses the new one's, or reuses storage too small for it.
TEST(compact_results, a_copy_replaces_the_old_answers_errors_included_whatever_the_storage) {
  std::vector<master_result> with_error{result(master_status::failed, 1us), result(master_status::granted, 2us)};
  with_error[0].error = boost::asio::error::eof;
  with_error[0].server_text = "gone";
  const std::vector<master_result> plain{result(master_status::granted, 3us, 7), result(master_status::taken, 4us)};
  const std::vector<master_result> larger{result(master_status::granted, 5us), result(master_status::granted, 6us),
                                          result(master_status::granted, 7us)};
  compact_results c{with_error};
  const compact_results p{plain}, w{with_error}, l{larger};
  c = p;  // into the storage held, whose extras go
  expect_same(c.expand(), plain);
  EXPECT_FALSE(c.error(0));
  c = w;  // with an error: through a copy
  expect_same(c.expand(), with_error);
  c = l;  // more masters than the storage held
  expect_same(c.expand(), larger);
  c = p;
  expect_same(c.expand(), plain);
  expect_same(w.expand(), with_error);  // the source is untouched
}

TEST(compact_results, latencies_beyond_its_range_are_clamped_not_wrapped) {
  const compact_results c{{result(master_status::granted, std::chrono::microseconds{std::int64_t{1} << 40}),
                           result(master_status::granted, -5us)}};
  const auto out = c.expand();
  EXPECT_EQ(out[0].latency.count(), 0xffff'ffffLL);
  EXPECT_EQ(out[1].latency.count(), 0);
}

TEST(compact_results, an_annotation_changes_its_master_only) {
  std::vector<master_result> in{result(master_status::granted, 1us), result(master_status::taken, 2us),
                                result(master_status::granted, 3us)};
  in[1].server_text = "held by another";
  compact_results c{in};
  c.annotate(2, redlock::error::master_quarantined, "clock jumped");
  c.annotate(1, redlock::error::not_owner, "other words");
  auto want = in;
  want[2].error = redlock::error::master_quarantined;
  want[2].server_text = "clock jumped";
  want[1].error = redlock::error::not_owner;
  want[1].server_text = "other words";
  expect_same(c.expand(), want);
  EXPECT_EQ(c.status(2), master_status::granted);  // the status stays
}

}  // namespace
