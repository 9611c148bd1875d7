// SPDX-License-Identifier: BSL-1.0
#include <redlock/error.hpp>
#include <redlock/format.hpp>
#include <redlock/master_result.hpp>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <string>
#include <string_view>

namespace {

using namespace std::chrono_literals;
using redlock::error;
using redlock::master_result;
using redlock::master_status;

// The last enumerators the names below know of. A new enumerator after them makes the
// "after the last one is unknown" checks fail until these and the expectations are updated; one
// added without a name in to_string fails the build first (-Wswitch).
constexpr auto last_status = master_status::queued;
constexpr auto last_error = error::partial_outcome;

TEST(names, every_master_status_has_a_distinct_name) {
  std::set<std::string_view> seen;
  for (int v = 0; v <= static_cast<int>(last_status); ++v) {
    const auto name = redlock::to_string(static_cast<master_status>(v));
    EXPECT_FALSE(name.empty()) << v;
    EXPECT_NE(name, "unknown") << v;
    EXPECT_TRUE(seen.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(seen.size(), 8U);
  EXPECT_EQ(redlock::to_string(static_cast<master_status>(static_cast<int>(last_status) + 1)), "unknown");
}

TEST(names, master_status_names_match_the_cli_json) {
  EXPECT_EQ(redlock::to_string(master_status::pending), "pending");
  EXPECT_EQ(redlock::to_string(master_status::granted), "granted");
  EXPECT_EQ(redlock::to_string(master_status::taken), "taken");
  EXPECT_EQ(redlock::to_string(master_status::server_error), "server_error");
  EXPECT_EQ(redlock::to_string(master_status::timeout), "timeout");
  EXPECT_EQ(redlock::to_string(master_status::unreachable), "unreachable");
  EXPECT_EQ(redlock::to_string(master_status::failed), "failed");
  EXPECT_EQ(redlock::to_string(master_status::queued), "queued");
}

TEST(names, every_error_has_a_distinct_name) {
  std::set<std::string_view> seen;
  for (int v = static_cast<int>(error::protocol_error); v <= static_cast<int>(last_error); ++v) {
    const auto name = redlock::to_string(static_cast<error>(v));
    EXPECT_FALSE(name.empty()) << v;
    EXPECT_NE(name, "unknown") << v;
    EXPECT_TRUE(seen.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(last_error));  // values 1..last_error
  EXPECT_EQ(redlock::to_string(static_cast<error>(0)), "unknown");
  EXPECT_EQ(redlock::to_string(static_cast<error>(static_cast<int>(last_error) + 1)), "unknown");
}

TEST(names, error_names_are_the_identifiers) {
  EXPECT_EQ(redlock::to_string(error::protocol_error), "protocol_error");
  EXPECT_EQ(redlock::to_string(error::master_timeout), "master_timeout");
  EXPECT_EQ(redlock::to_string(error::not_owner), "not_owner");
  EXPECT_EQ(redlock::to_string(error::quorum_unavailable), "quorum_unavailable");
  EXPECT_EQ(redlock::to_string(error::validity_expired), "validity_expired");
  EXPECT_EQ(redlock::to_string(error::extension_limit), "extension_limit");
  EXPECT_EQ(redlock::to_string(error::connection_stalled), "connection_stalled");
  EXPECT_EQ(redlock::to_string(error::not_supported), "not_supported");
  EXPECT_EQ(redlock::to_string(error::script_mismatch), "script_mismatch");
}

TEST(format, master_status_is_its_name_and_takes_a_width) {
  for (int v = 0; v <= static_cast<int>(last_status); ++v) {
    const auto s = static_cast<master_status>(v);
    EXPECT_EQ(fmt::format("{}", s), redlock::to_string(s));
  }
  EXPECT_EQ(fmt::format("[{:<8}]", master_status::taken), "[taken   ]");
  EXPECT_EQ(fmt::format("[{:>8}]", master_status::taken), "[   taken]");
}

TEST(format, master_result_for_each_status) {
  EXPECT_EQ(fmt::format("{}", master_result{}), "pending");
  EXPECT_EQ(fmt::format("{}", master_result{master_status::granted, {}, {}, 412us}), "granted 412us");
  EXPECT_EQ(fmt::format("{}", master_result{master_status::taken, {}, {}, 90us}), "taken 90us");
  EXPECT_EQ(fmt::format("{}", master_result{master_status::server_error, error::server_error,
                                            "WRONGTYPE Operation against a key", 380us}),
            "server_error 380us \"WRONGTYPE Operation against a key\"");
  const auto timeout = redlock::make_error_code(error::master_timeout);
  EXPECT_EQ(fmt::format("{}", master_result{master_status::timeout, timeout, {}, 2000us}),
            "timeout 2000us (" + timeout.message() + ")");
  const auto down = redlock::make_error_code(error::not_connected);
  EXPECT_EQ(fmt::format("{}", master_result{master_status::unreachable, down, {}, 0us}),
            "unreachable 0us (" + down.message() + ")");
  const auto lost = redlock::make_error_code(error::connection_lost);
  EXPECT_EQ(fmt::format("{}", master_result{master_status::failed, lost, {}, 7us}),
            "failed 7us (" + lost.message() + ")");
  // A server error without text falls back to the error's message.
  EXPECT_EQ(fmt::format("{}", master_result{master_status::server_error, error::server_error, {}, 1us}),
            "server_error 1us (" + redlock::make_error_code(error::server_error).message() + ")");
  EXPECT_EQ(fmt::format("[{:>15}]", master_result{master_status::granted, {}, {}, 5us}), "[    granted 5us]");
}

TEST(format, server_text_is_made_printable_and_cut) {
  const std::string hostile = "ERR a\r\nb\x1b[31m\"q\"\\ \xff";
  EXPECT_EQ(fmt::format("{}", master_result{master_status::server_error, error::server_error, hostile, 1us}),
            "server_error 1us \"ERR a\\x0d\\x0ab\\x1b[31m\\x22q\\x22\\x5c \\xff\"");
  const std::string long_text(redlock::fmt_detail::max_server_text + 50, 'x');
  const auto out = fmt::format("{}", master_result{master_status::server_error, error::server_error, long_text, 1us});
  EXPECT_EQ(out, "server_error 1us \"" + std::string(redlock::fmt_detail::max_server_text, 'x') + "...\"");
  const std::string exact(redlock::fmt_detail::max_server_text, 'y');
  EXPECT_EQ(fmt::format("{}", master_result{master_status::server_error, error::server_error, exact, 1us}),
            "server_error 1us \"" + exact + "\"");
}

TEST(format, error_is_its_message) {
  for (int v = static_cast<int>(error::protocol_error); v <= static_cast<int>(last_error); ++v) {
    const auto e = static_cast<error>(v);
    EXPECT_EQ(fmt::format("{}", e), redlock::make_error_code(e).message()) << v;
  }
  EXPECT_EQ(fmt::format("{}", error::not_owner), "the lock is no longer ours on a majority of masters");
  EXPECT_EQ(fmt::format("{:.8}", error::not_owner), "the lock");
}

}  // namespace

namespace {

// The report names each unusable master with its address, status, cause and text (made
// printable), after the operation's error; a report with nothing failing says so. Catches a
// report that drops the cause or the address, or prints a hostile text raw.
TEST(format, quorum_report_names_each_master) {
  redlock::quorum_report r;
  r.error = error::quorum_unavailable;
  r.masters = 3;
  r.needed = 2;
  r.failing.push_back({0, "x.invalid:6379", master_status::pending, {}, {}});
  r.failing.push_back({1, "127.0.0.1:7001", master_status::unreachable, error::auth_failed, "WRONGPASS no\r\n"});
  const auto text = redlock::to_string(r);
  EXPECT_EQ(text,
            "too few masters answered for a quorum: 1 of 3 masters could not be used (2 needed): 127.0.0.1:7001 "
            "unreachable: the node rejected the credentials (WRONGPASS no\\x0d\\x0a); x.invalid:6379 still connecting");
  EXPECT_EQ(fmt::format("{}", r), text);
  redlock::quorum_report fine;
  fine.masters = 3;
  fine.needed = 2;
  EXPECT_EQ(redlock::to_string(fine), "every master of 3 usable");
  fine.failing.push_back({2, "127.0.0.1:7003", master_status::pending, {}, {}});
  EXPECT_EQ(redlock::to_string(fine), "1 of 3 masters not connected yet (2 needed): 127.0.0.1:7003 still connecting");
}

}  // namespace
