// SPDX-License-Identifier: BSL-1.0
// Transcripts of the handshake machine: each test walks resume() step by step and asserts every
// action, the bytes written and the outcome (boostorg/redis test_exec_fsm.cpp style).

#include <redlock/core/handshake_fsm.hpp>
#include <redlock/error.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace {

using boost::system::error_code;
using redlock::error;
using redlock::core::handshake_action;
using redlock::core::handshake_fsm;
using redlock::core::handshake_params;
using redlock::resp::node;
using redlock::resp::response;
using redlock::resp::type;
using kind = handshake_action::kind;

template <class... Args>
std::string encode(std::string_view command, const Args&... args) {
  redlock::resp::request r;
  r.push(command, args...);
  return r.payload();
}

response ok() { return {node{type::simple_string, 0, 0, "OK"}}; }
response err(std::string text) { return {node{type::simple_error, 0, 0, std::move(text)}}; }
response hello_map() {
  return {node{type::map, 1, 0, ""}, node{type::blob_string, 0, 1, "proto"}, node{type::integer, 0, 1, "3"}};
}
response operator+(response a, const response& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A fluent transcript: expect_write / reply / expect_done, failing on the first mismatch.
class transcript {
 public:
  explicit transcript(handshake_params p) : fsm_(p) { last_ = fsm_.resume({}, {}); }

  transcript& expect_write(const std::string& bytes) {
    EXPECT_EQ(last_.type, kind::write);
    EXPECT_EQ(last_.bytes, bytes);
    last_ = fsm_.resume({}, {});  // the write succeeded
    return *this;
  }
  transcript& expect_read(std::size_t replies) {
    EXPECT_EQ(last_.type, kind::read);
    EXPECT_EQ(last_.replies, replies);
    return *this;
  }
  transcript& reply(const response& r) {
    last_ = fsm_.resume({}, r);
    return *this;
  }
  transcript& io_error(error_code ec) {
    last_ = fsm_.resume(ec, {});
    return *this;
  }
  void expect_done(error_code ec, int protocol, std::string_view text = {}) {
    ASSERT_EQ(last_.type, kind::done);
    EXPECT_EQ(last_.ec, ec);
    EXPECT_EQ(last_.protocol, protocol);
    EXPECT_EQ(last_.server_text, text);
    // Finished for good: resuming again repeats the outcome.
    EXPECT_EQ(fsm_.resume({}, {}).ec, ec);
  }
  const handshake_fsm& fsm() const { return fsm_; }

 private:
  handshake_fsm fsm_;
  handshake_action last_;
};

TEST(handshake_fsm, plain_hello_3) {
  transcript t{{}};
  t.expect_write(encode("HELLO", "3")).expect_read(1).reply(hello_map()).expect_done({}, 3);
  EXPECT_TRUE(t.fsm().fallback_reason().empty());
}

TEST(handshake_fsm, hello_carries_auth_with_default_user_and_setname) {
  transcript t{{.password = "pw", .client_name = "me"}};
  t.expect_write(encode("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"))
      .expect_read(1)
      .reply(hello_map())
      .expect_done({}, 3);
}

TEST(handshake_fsm, hello_with_acl_user_only_auth) {
  transcript t{{.username = "alice", .password = "pw"}};
  t.expect_write(encode("HELLO", "3", "AUTH", "alice", "pw")).expect_read(1).reply(hello_map()).expect_done({}, 3);
}

TEST(handshake_fsm, username_without_password_sends_no_auth) {
  transcript t{{.username = "alice", .client_name = "me"}};
  t.expect_write(encode("HELLO", "3", "SETNAME", "me")).expect_read(1).reply(hello_map()).expect_done({}, 3);
}

TEST(handshake_fsm, hello_then_select) {
  transcript t{{.database = 5}};
  t.expect_write(encode("HELLO", "3"))
      .expect_read(1)
      .reply(hello_map())
      .expect_write(encode("SELECT", 5))
      .expect_read(1)
      .reply(ok())
      .expect_done({}, 3);
}

TEST(handshake_fsm, select_refused_is_a_handshake_failure) {
  transcript t{{.database = 99}};
  t.expect_write(encode("HELLO", "3"))
      .expect_read(1)
      .reply(hello_map())
      .expect_write(encode("SELECT", 99))
      .expect_read(1)
      .reply(err("ERR DB index is out of range"))
      .expect_done(error::handshake_failed, 0, "ERR DB index is out of range");
}

TEST(handshake_fsm, hello_array_reply_is_accepted) {  // some proxies answer HELLO with a flat array
  transcript t{{}};
  t.expect_write(encode("HELLO", "3")).expect_read(1).reply({node{type::array, 0, 0, ""}}).expect_done({}, 3);
}

TEST(handshake_fsm, hello_answered_with_something_else_fails) {
  transcript t{{}};
  t.expect_write(encode("HELLO", "3")).expect_read(1).reply(ok()).expect_done(error::handshake_failed, 0);
}

// Every credential refusal of HELLO is auth_failed; other refusals are handshake_failed.
struct refusal_case {
  const char* text;
  error expected;
};
class hello_refusal : public testing::TestWithParam<refusal_case> {};

TEST_P(hello_refusal, is_sorted) {
  transcript t{{.password = "pw"}};
  t.expect_write(encode("HELLO", "3", "AUTH", "default", "pw"))
      .expect_read(1)
      .reply(err(GetParam().text))
      .expect_done(GetParam().expected, 0, GetParam().text);
}

INSTANTIATE_TEST_SUITE_P(
    all, hello_refusal,
    testing::Values(refusal_case{"WRONGPASS invalid username-password pair", error::auth_failed},
                    refusal_case{"NOAUTH HELLO must be called with the client already authenticated",
                                 error::auth_failed},
                    refusal_case{"NOPERM this user has no permissions", error::auth_failed},
                    refusal_case{"ERR invalid password", error::auth_failed},
                    refusal_case{"ERR something went wrong", error::handshake_failed},
                    refusal_case{"LOADING Redis is loading the dataset in memory", error::handshake_failed}));

TEST(handshake_fsm, noproto_falls_back_to_resp2_with_auth_and_setname_pipelined) {
  transcript t{{.password = "pw", .client_name = "me"}};
  redlock::resp::request legacy;
  legacy.push("AUTH", "pw");
  legacy.push("CLIENT", "SETNAME", "me");
  t.expect_write(encode("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"))
      .expect_read(1)
      .reply(err("NOPROTO unsupported protocol version"))
      .expect_write(legacy.payload())
      .expect_read(2)
      .reply(ok() + ok())
      .expect_done({}, 2);
  EXPECT_EQ(t.fsm().fallback_reason(), "NOPROTO unsupported protocol version");
}

TEST(handshake_fsm, unknown_hello_falls_back_and_acl_user_goes_into_auth) {
  transcript t{{.username = "alice", .password = "pw", .database = 2}};
  t.expect_write(encode("HELLO", "3", "AUTH", "alice", "pw"))
      .expect_read(1)
      .reply(err("ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'alice' 'pw' "))
      .expect_write(encode("AUTH", "alice", "pw"))
      .expect_read(1)
      .reply(ok())
      .expect_write(encode("SELECT", 2))
      .expect_read(1)
      .reply(ok())
      .expect_done({}, 2);
  // The server echoed the password: the text handed out is redacted.
  EXPECT_EQ(t.fsm().fallback_reason(),
            "ERR unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'alice' '***' ");
}

TEST(handshake_fsm, fallback_with_nothing_to_send_goes_straight_on) {
  transcript t{{}};
  t.expect_write(encode("HELLO", "3")).expect_read(1).reply(err("ERR unknown command 'HELLO'")).expect_done({}, 2);
}

TEST(handshake_fsm, fallback_then_select) {
  transcript t{{.database = 1}};
  t.expect_write(encode("HELLO", "3"))
      .expect_read(1)
      .reply(err("NOPROTO sorry"))
      .expect_write(encode("SELECT", 1))
      .expect_read(1)
      .reply(ok())
      .expect_done({}, 2);
}

TEST(handshake_fsm, resp2_auth_refusal_is_auth_failed_and_redacted) {
  transcript t{{.password = "sekrit"}};
  t.expect_write(encode("HELLO", "3", "AUTH", "default", "sekrit"))
      .expect_read(1)
      .reply(err("ERR unknown command 'HELLO'"))
      .expect_write(encode("AUTH", "sekrit"))
      .expect_read(1)
      .reply(err("ERR invalid password: 'sekrit'"))
      .expect_done(error::auth_failed, 0, "ERR invalid password: '***'");
}

TEST(handshake_fsm, resp2_wrongpass_noauth_noperm_are_auth_failed) {
  for (const char* text : {"WRONGPASS no", "NOAUTH Authentication required.", "NOPERM no"}) {
    SCOPED_TRACE(text);
    transcript t{{.password = "pw"}};
    t.expect_write(encode("HELLO", "3", "AUTH", "default", "pw"))
        .expect_read(1)
        .reply(err("NOPROTO x"))
        .expect_write(encode("AUTH", "pw"))
        .expect_read(1)
        .reply(err(text))
        .expect_done(error::auth_failed, 0, text);
  }
}

TEST(handshake_fsm, resp2_setname_refusal_after_good_auth_is_handshake_failed) {
  transcript t{{.password = "pw", .client_name = "bad name"}};
  redlock::resp::request legacy;
  legacy.push("AUTH", "pw");
  legacy.push("CLIENT", "SETNAME", "bad name");
  t.expect_write(encode("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "bad name"))
      .expect_read(1)
      .reply(err("NOPROTO x"))
      .expect_write(legacy.payload())
      .expect_read(2)
      .reply(ok() + err("ERR Client names cannot contain spaces"))
      .expect_done(error::handshake_failed, 0, "ERR Client names cannot contain spaces");
}

TEST(handshake_fsm, an_empty_error_reply_is_still_a_refusal) {
  transcript t{{}};
  t.expect_write(encode("HELLO", "3")).expect_read(1).reply(err("")).expect_done(error::handshake_failed, 0, "");
}

TEST(handshake_fsm, io_error_at_any_step_ends_with_that_error) {
  const error_code broken = boost::asio::error::connection_reset;
  // Step i: the i-th resume after the first gets the I/O error (write, read, write, read...).
  for (int fail_at = 0; fail_at < 6; ++fail_at) {
    SCOPED_TRACE(fail_at);
    handshake_fsm fsm{{.password = "pw", .database = 3}};
    auto a = fsm.resume({}, {});
    const response answers[] = {{}, err("NOPROTO x"), {}, ok(), {}, ok()};
    for (int step = 0; step < 6 && a.type != kind::done; ++step) {
      if (step == fail_at) {
        a = fsm.resume(broken, {});
        break;
      }
      a = fsm.resume({}, answers[step]);
    }
    ASSERT_EQ(a.type, kind::done);
    EXPECT_EQ(a.ec, broken);
    EXPECT_TRUE(a.server_text.empty());
  }
}

}  // namespace

namespace {

response info_text(std::string text) { return {node{type::verbatim_string, 0, 0, "txt:" + std::move(text)}}; }
response time_reply() {
  return {node{type::array, 2, 0, ""}, node{type::blob_string, 0, 1, "1700000000"},
          node{type::blob_string, 0, 1, "250"}};
}

TEST(handshake_fsm, a_lock_master_is_asked_info_and_time_with_select_in_one_write) {
  transcript t{{.database = 2, .info = true, .time = true}};
  std::string both = encode("SELECT", 2) + encode("INFO", "server") + encode("TIME");
  t.expect_write(encode("HELLO", "3"))
      .expect_read(1)
      .reply(hello_map())
      .expect_write(both)
      .expect_read(3)
      .reply(ok() + info_text("# Server\r\nrun_id:abc123\r\nuptime_in_seconds:77\r\n") + time_reply())
      .expect_done({}, 3);
  EXPECT_TRUE(t.fsm().identity().answered);
  EXPECT_EQ(t.fsm().identity().run_id, "abc123");
  EXPECT_EQ(t.fsm().identity().uptime, 77);
  EXPECT_EQ(t.fsm().time_us(), 1'700'000'000'000'250);
}

TEST(handshake_fsm, a_refused_info_or_time_does_not_fail_the_handshake) {
  transcript t{{.info = true, .time = true}};
  t.expect_write(encode("HELLO", "3"))
      .expect_read(1)
      .reply(hello_map())
      .expect_write(encode("INFO", "server") + encode("TIME"))
      .expect_read(2)
      .reply(err("NOPERM this user has no permissions to run the 'info' command") + err("ERR unknown command 'TIME'"))
      .expect_done({}, 3);
  EXPECT_TRUE(t.fsm().identity().asked);
  EXPECT_FALSE(t.fsm().identity().answered);
  EXPECT_EQ(t.fsm().identity().refusal.substr(0, 6), "NOPERM");
  EXPECT_FALSE(t.fsm().time_us());
}

TEST(handshake_fsm, time_alone_without_info) {
  transcript t{{.time = true}};
  t.expect_write(encode("HELLO", "3"))
      .expect_read(1)
      .reply(hello_map())
      .expect_write(encode("TIME"))
      .expect_read(1)
      .reply(time_reply())
      .expect_done({}, 3);
  EXPECT_FALSE(t.fsm().identity().asked);
  EXPECT_EQ(t.fsm().time_us(), 1'700'000'000'000'250);
}

}  // namespace
