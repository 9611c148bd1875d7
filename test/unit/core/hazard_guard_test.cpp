// SPDX-License-Identifier: BSL-1.0
// Transcripts of the hazard guard (core::hazard_guard): restarts seen at connect, clock jumps
// seen in TIME samples, and the client's own pause.

#include "transcript.hpp"
#include <redlock/core/handshake_fsm.hpp>
#include <redlock/core/hazard_guard.hpp>

#include <gtest/gtest.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

namespace {

using namespace std::chrono_literals;
using redlock::hazard_cause;
using redlock::restart_detection;
using redlock::core::guard_rules;
using redlock::core::hazard_guard;
using redlock::core::node_identity;
using redlock::core::time_sample;
using redlock::test::at;
using clock_type = redlock::core::clock;

constexpr auto quarantine = 11s;

guard_rules rules(restart_detection r = restart_detection::run_id) {
  guard_rules g;
  g.restarts = r;
  g.quarantine = quarantine;
  return g;  // drift: 1 % and 2 ms
}

node_identity info(std::string run_id, std::int64_t uptime) {
  node_identity id;
  id.asked = id.answered = true;
  id.run_id = std::move(run_id);
  id.uptime = uptime;
  return id;
}

// A TIME sample sent at `sent`, answered 1 ms later, reading our clock plus `offset` (the
// master's wall clock against ours), in microseconds since the epoch.
time_sample sample(clock_type::duration sent, std::chrono::microseconds offset) {
  const auto s = at(sent);
  const auto mid = std::chrono::duration_cast<std::chrono::microseconds>((s + 500us).time_since_epoch());
  return {s, s + 1ms, (mid + offset).count()};
}

constexpr auto wall = std::chrono::microseconds{1'700'000'000'000'000};  // the master's epoch offset

TEST(hazard_guard, a_master_up_longer_than_the_quarantine_counts_at_once) {
  hazard_guard g{rules()};
  const auto c = g.on_connect(info("aaa", 3600), std::nullopt, at(1s));
  EXPECT_EQ(c.cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(1s)));
  // A reconnect to the same process is not a restart, whatever its uptime says.
  EXPECT_EQ(g.on_connect(info("aaa", 0), std::nullopt, at(5s)).cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(5s)));
  EXPECT_EQ(g.restarts(), 0u);
}

TEST(hazard_guard, a_master_up_lately_is_quarantined_until_its_uptime_reaches_the_quarantine) {
  hazard_guard g{rules()};
  // Up 5 s (at least 3 s, with the 2 s allowed to whole seconds from a cached clock): 8 s more.
  const auto c = g.on_connect(info("aaa", 5), std::nullopt, at(100s));
  EXPECT_EQ(c.cause, hazard_cause::restarted);
  EXPECT_EQ(c.until, at(108s));
  EXPECT_FALSE(g.counts(at(107s)));
  EXPECT_EQ(g.cause(at(107s)), hazard_cause::restarted);
  EXPECT_TRUE(g.counts(at(108s)));
  EXPECT_EQ(g.cause(at(108s)), hazard_cause::none);
}

TEST(hazard_guard, a_new_run_id_is_a_restart) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), std::nullopt, at(0s));
  const auto c = g.on_connect(info("bbb", 1), std::nullopt, at(30s));
  EXPECT_EQ(c.cause, hazard_cause::restarted);
  EXPECT_EQ(c.until, at(30s) + quarantine);  // up at least 0 s
  EXPECT_EQ(g.restarts(), 1u);
  EXPECT_EQ(g.run_id(), "bbb");
}

TEST(hazard_guard, an_uptime_longer_than_the_silence_since_the_old_process_is_not_trusted) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), std::nullopt, at(0s));
  // Last heard of "aaa" at 0 s; at 4 s "bbb" claims 10 minutes of uptime: its clock jumped.
  const auto c = g.on_connect(info("bbb", 600), std::nullopt, at(4s));
  EXPECT_EQ(c.cause, hazard_cause::restarted);
  EXPECT_TRUE(c.uptime_inconsistent);
  EXPECT_EQ(c.until, at(4s) + quarantine);
  // An uptime that fits the silence is used.
  hazard_guard h{rules()};
  (void)h.on_connect(info("aaa", 3600), std::nullopt, at(0s));
  const auto d = h.on_connect(info("bbb", 7), std::nullopt, at(20s));
  EXPECT_FALSE(d.uptime_inconsistent);
  EXPECT_EQ(d.until, at(20s) + quarantine - 5s);
}

TEST(hazard_guard, a_refused_info_refuses_the_votes_until_it_answers) {
  hazard_guard g{rules()};
  node_identity refused;
  refused.asked = true;
  refused.refusal = "NOPERM this user has no permissions to run the 'info' command";
  const auto c = g.on_connect(refused, std::nullopt, at(0s));
  EXPECT_EQ(c.cause, hazard_cause::info_refused);
  EXPECT_FALSE(g.counts(at(1000s)));
  EXPECT_EQ(g.until(), clock_type::time_point::max());
  (void)g.on_connect(info("aaa", 3600), std::nullopt, at(2000s));
  EXPECT_TRUE(g.counts(at(2000s)));
}

TEST(hazard_guard, reconnect_mode_quarantines_every_connect_and_off_none) {
  hazard_guard g{rules(restart_detection::reconnect)};
  EXPECT_EQ(g.on_connect({}, std::nullopt, at(0s)).until, at(0s) + quarantine);
  EXPECT_FALSE(g.counts(at(10s)));
  EXPECT_TRUE(g.counts(at(11s)));
  EXPECT_EQ(g.on_connect({}, std::nullopt, at(20s)).cause, hazard_cause::restarted);
  EXPECT_FALSE(g.counts(at(30s)));

  hazard_guard off{rules(restart_detection::off)};
  EXPECT_EQ(off.on_connect({}, std::nullopt, at(0s)).cause, hazard_cause::none);
  EXPECT_TRUE(off.counts(at(0s)));
}

TEST(hazard_guard, a_durable_master_skips_the_restart_quarantine_but_not_the_clock_check) {
  auto r = rules();
  r.durable = true;
  hazard_guard g{r};
  EXPECT_EQ(g.on_connect(info("aaa", 0), std::nullopt, at(0s)).cause, hazard_cause::none);
  EXPECT_EQ(g.on_connect(info("bbb", 0), std::nullopt, at(5s)).cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(5s)));
  (void)g.on_time(sample(6s, wall));
  EXPECT_EQ(g.on_time(sample(7s, wall + 12s)).cause, hazard_cause::clock_jumped);
  EXPECT_FALSE(g.counts(at(8s)));
}

TEST(hazard_guard, steady_samples_within_the_round_trip_and_drift_are_no_jump) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  // 1 s later the master's clock reads 5 ms more than ours would: within 1 % of 1 s + 2 ms + rtt.
  EXPECT_EQ(g.on_time(sample(1s, wall + 5ms)).cause, hazard_cause::none);
  EXPECT_EQ(g.on_time(sample(2s, wall + 10ms)).cause, hazard_cause::none);
  // Slow drift over a long silence is allowed too: 1 % of 100 s.
  EXPECT_EQ(g.on_time(sample(102s, wall + 900ms)).cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(103s)));
  EXPECT_EQ(g.jumps(), 0u);
}

TEST(hazard_guard, a_forward_jump_beyond_the_allowance_is_quarantined_from_the_sample) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  (void)g.on_time(sample(1s, wall));
  // 1 s later its clock is 200 ms ahead: the allowance is 10 ms + 2 ms + the round trips.
  const auto c = g.on_time(sample(2s, wall + 200ms));
  EXPECT_EQ(c.cause, hazard_cause::clock_jumped);
  EXPECT_GE(c.jump, 185ms);
  EXPECT_LE(c.jump, 200ms);
  EXPECT_EQ(c.until, at(2s) + 1ms + quarantine);
  EXPECT_FALSE(g.counts(at(5s)));
  EXPECT_EQ(g.cause(at(5s)), hazard_cause::clock_jumped);
  // The new offset is the base from now on: no second jump for the same step.
  EXPECT_EQ(g.on_time(sample(3s, wall + 200ms)).cause, hazard_cause::none);
  EXPECT_EQ(g.jumps(), 1u);
}

TEST(hazard_guard, a_backward_move_is_safe_and_one_stale_reading_moves_nothing) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  // One reading 3 s behind (a cached clock after a pause, say), then normal again: no jump.
  EXPECT_EQ(g.on_time(sample(1s, wall - 3s)).cause, hazard_cause::none);
  EXPECT_EQ(g.on_time(sample(2s, wall)).cause, hazard_cause::none);
  // Two in a row: the clock was set back. Safe (keys live longer), and the new base.
  EXPECT_EQ(g.on_time(sample(3s, wall - 3s)).cause, hazard_cause::none);
  EXPECT_EQ(g.on_time(sample(4s, wall - 3s)).cause, hazard_cause::none);
  EXPECT_EQ(g.on_time(sample(5s, wall - 3s)).cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(6s)));
  // Set forward again by 3 s: that is a jump (keys set meanwhile expire early).
  EXPECT_EQ(g.on_time(sample(6s, wall)).cause, hazard_cause::clock_jumped);
}

TEST(hazard_guard, the_offset_carries_over_a_restart_so_a_jumped_restart_is_seen) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  // Restarted with its clock 20 s ahead, claiming an uptime of 30 s: a jump, from the sample.
  const auto c = g.on_connect(info("bbb", 30), sample(2s, wall + 20s), at(2s));
  EXPECT_EQ(c.cause, hazard_cause::clock_jumped);
  EXPECT_FALSE(g.counts(at(12s)));
}

TEST(hazard_guard, a_clock_that_gains_a_little_at_every_sample_is_caught) {
  // 1.9 ms gained per 10 ms (a 19 % fast clock): the fixed allowance is counted once, not at every
  // sample, so the gains add up to a jump within a few samples.
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  bool caught = false;
  for (int k = 1; k <= 20 && !caught; ++k) {
    caught = g.on_time(sample(k * 10ms, wall + k * 1900us)).cause == hazard_cause::clock_jumped;
  }
  EXPECT_TRUE(caught);
}

TEST(hazard_guard, a_lone_backward_reading_does_not_count_its_vote) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  (void)g.on_time(sample(1s, wall - 2s));
  EXPECT_TRUE(g.last_sample_suspect());  // a key set with a clock 2 s behind expires early later
  (void)g.on_time(sample(2s, wall));
  EXPECT_FALSE(g.last_sample_suspect());
  EXPECT_TRUE(g.counts(at(2s)));
}

TEST(hazard_guard, restart_and_jump_quarantines_are_kept_apart) {
  hazard_guard g{rules()};
  (void)g.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  // Restarted (up 5 s: quarantined until 9 s) with its clock 3 s ahead (a jump: until 21 s).
  (void)g.on_connect(info("bbb", 5), sample(10s, wall + 3s), at(10s));
  EXPECT_EQ(g.cause(at(12s)), hazard_cause::clock_jumped);
  EXPECT_FALSE(g.counts(at(20s)));
  EXPECT_TRUE(g.counts(at(10s) + 1ms + quarantine));
  // A restart quarantine that ends later than a jump's still holds after the jump's end.
  hazard_guard h{rules()};
  (void)h.on_connect(info("aaa", 3600), sample(0s, wall), at(0s));
  (void)h.on_time(sample(1s, wall + 1s));                    // jump: until 12 s
  (void)h.on_connect(info("bbb", 0), std::nullopt, at(5s));  // restart: until 16 s
  EXPECT_FALSE(h.counts(at(13s)));
  EXPECT_EQ(h.cause(at(13s)), hazard_cause::restarted);
  EXPECT_TRUE(h.counts(at(16s)));
}

TEST(hazard_guard, an_absurd_uptime_does_not_overflow) {
  hazard_guard g{rules()};
  EXPECT_EQ(g.on_connect(info("aaa", 9'000'000'000'000), std::nullopt, at(0s)).cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(0s)));
}

TEST(hazard_guard, clock_checks_off_takes_no_sample) {
  auto r = rules();
  r.clock_jumps = false;
  hazard_guard g{r};
  (void)g.on_time(sample(0s, wall));
  EXPECT_EQ(g.on_time(sample(1s, wall + 1h)).cause, hazard_cause::none);
  EXPECT_TRUE(g.counts(at(2s)));
}

TEST(client_pause, every_master_jumping_alike_in_one_round_is_the_clients_own_pause) {
  using jump = std::pair<clock_type::time_point, std::chrono::microseconds>;
  const std::array<jump, 3> all{jump{at(10s), 30s}, jump{at(10s), 30'010ms}, jump{at(10s) + 5ms, 29'990ms}};
  const auto p = redlock::core::client_pause(all, 3, at(10s) + 10ms, 250ms);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, 29'990ms);  // the smallest: never shorten a lock by more than was seen everywhere
  // A majority is not enough: a rolling jump of a minority at a time would pass for a pause.
  const std::array<jump, 3> two{jump{at(10s), 30s}, jump{at(10s), 30s}, jump{}};
  EXPECT_FALSE(redlock::core::client_pause(two, 3, at(10s), 250ms));
  // Sizes that differ, or jumps seen in different rounds: the masters' own.
  const std::array<jump, 3> unlike{jump{at(10s), 30s}, jump{at(10s), 10s}, jump{at(10s), 50s}};
  EXPECT_FALSE(redlock::core::client_pause(unlike, 3, at(10s), 250ms));
  const std::array<jump, 3> rolling{jump{at(10s), 700ms}, jump{at(10s) + 120ms, 700ms}, jump{at(10s) + 240ms, 700ms}};
  EXPECT_FALSE(redlock::core::client_pause(rolling, 3, at(10s) + 240ms, 50ms));
  EXPECT_FALSE(redlock::core::client_pause(all, 3, at(20s), 250ms));
}

TEST(parse_info, reads_the_run_id_and_the_uptime) {
  const auto id = redlock::core::parse_info(
      "# Server\r\nredis_version:7.0.15\r\nrun_id:3b1f0e2c9d\r\ntcp_port:6379\r\nuptime_in_seconds:42\r\n");
  EXPECT_TRUE(id.answered);
  EXPECT_EQ(id.run_id, "3b1f0e2c9d");
  EXPECT_EQ(id.uptime, 42);
  // A field whose name only starts alike is not it; missing or bad fields: not answered.
  EXPECT_FALSE(redlock::core::parse_info("run_id_x:1\r\nuptime_in_seconds:4\r\n").answered);
  EXPECT_FALSE(redlock::core::parse_info("run_id:abc\r\nuptime_in_seconds:-4\r\n").answered);
  EXPECT_FALSE(redlock::core::parse_info("run_id:abc\r\nuptime_in_seconds:4x\r\n").answered);
  EXPECT_FALSE(redlock::core::parse_info("").answered);
}

TEST(parse_time, reads_seconds_and_microseconds) {
  using redlock::resp::type;
  const redlock::resp::response r{{type::simple_string, 0, 0, "OK"},
                                  {type::array, 2, 0, ""},
                                  {type::blob_string, 0, 1, "1700000000"},
                                  {type::blob_string, 0, 1, "123456"}};
  EXPECT_EQ(redlock::core::parse_time(r, 1), 1'700'000'000'123'456);
  EXPECT_FALSE(redlock::core::parse_time(r, 0));
  const redlock::resp::response bad{
      {type::array, 2, 0, ""}, {type::blob_string, 0, 1, "17"}, {type::blob_string, 0, 1, "1000000"}};
  EXPECT_FALSE(redlock::core::parse_time(bad, 0));
  const redlock::resp::response short_one{{type::array, 2, 0, ""}, {type::blob_string, 0, 1, "17"}};
  EXPECT_FALSE(redlock::core::parse_time(short_one, 0));
}

// The digits of a TIME field: what from_chars reads as a non-negative number of at most 18
// digits, and nothing else (a sign, a space, junk, an empty or longer field).
TEST(parse_time, reads_a_count_as_from_chars_does_and_refuses_the_rest) {
  using redlock::core::parse_count;
  for (const std::string_view s : {"0", "7", "000123", "1700000000", "999999", "123456789012345678"}) {
    std::int64_t expected = -1;
    (void)std::from_chars(s.data(), s.data() + s.size(), expected);
    EXPECT_EQ(parse_count(s), expected) << s;
  }
  for (const std::string_view s :
       {"", "-1", "-0", "+1", " 1", "1 ", "1x", "x1", "1.5", "0x10", "1234567890123456789", "99999999999999999999"}) {
    EXPECT_FALSE(parse_count(s)) << "'" << s << "'";
  }
  using redlock::resp::type;
  const redlock::resp::response negative{
      {type::array, 2, 0, ""}, {type::blob_string, 0, 1, "-1700000000"}, {type::blob_string, 0, 1, "5"}};
  EXPECT_FALSE(redlock::core::parse_time(negative, 0));
  const redlock::resp::response as_integers{
      {type::array, 2, 0, ""}, {type::integer, 0, 1, "1700000000"}, {type::integer, 0, 1, "999999"}};
  EXPECT_EQ(redlock::core::parse_time(as_integers, 0), 1'700'000'000'999'999);
}

}  // namespace

// A cluster master: a jump one node's clock guard saw quarantines the master's guard.
TEST(hazard_guard, a_jump_seen_on_a_node_quarantines_the_master) {
  using namespace std::chrono_literals;
  redlock::core::guard_rules r;
  r.restarts = redlock::restart_detection::off;
  r.quarantine = 10s;
  redlock::core::hazard_guard master{r}, node{r};
  const auto t0 = redlock::core::clock::time_point{} + 100s;
  auto us = [](redlock::core::clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  };
  EXPECT_EQ(master.jumped_on_a_node(node.on_time({t0, t0 + 1ms, us(t0) + 1'700'000'000'000'000}), t0 + 1ms).cause,
            redlock::hazard_cause::none);
  EXPECT_TRUE(master.counts(t0 + 2ms));
  const auto t1 = t0 + 1s;
  const auto jump = node.on_time({t1, t1 + 1ms, us(t1) + 1'700'000'000'000'000 + 3'000'000});
  ASSERT_EQ(jump.cause, redlock::hazard_cause::clock_jumped);
  const auto c = master.jumped_on_a_node(jump, t1 + 1ms);
  EXPECT_EQ(c.cause, redlock::hazard_cause::clock_jumped);
  EXPECT_FALSE(master.counts(t1 + 2ms));
  EXPECT_EQ(master.last_sample(), t1 + 1ms);
}
