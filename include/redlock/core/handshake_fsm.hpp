// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The connection handshake as a sans-I/O state machine: which commands to send, how many replies
/// to read, and what the server's answers mean. The I/O layer carries out each action and resumes
/// the machine with the outcome; it decides nothing itself.
///
/// The exchange: `HELLO 3 [AUTH user pass] [SETNAME name]` (RESP3, one round trip). A server older
/// than Redis 6 refuses HELLO (`NOPROTO`, or "unknown command"): then plain RESP2 with
/// `AUTH [user] pass` and `CLIENT SETNAME name`, pipelined. Last, `SELECT db` when `db != 0`, and
/// for a lock client's master `INFO server` and `TIME` in the same write (the hazard guard's view
/// of the process and its clock; a refused `INFO` does not fail the handshake).
/// Refusals are sorted: credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`, "ERR invalid password")
/// give `error::auth_failed`, anything else `error::handshake_failed`. A server may echo the
/// command's arguments, the password among them, in its error: every server text this machine
/// hands out has the password replaced by "***".

#include <redlock/core/hazard_guard.hpp>
#include <redlock/error.hpp>
#include <redlock/resp/node.hpp>
#include <redlock/resp/request.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace redlock::core {

/// What the handshake needs to know. The views must stay valid while the machine is used.
struct handshake_params {
  std::string_view username{};     ///< ACL user; empty means `default` (sent only with a password)
  std::string_view password{};     ///< empty: no authentication
  std::string_view client_name{};  ///< empty: no SETNAME
  int database = 0;                ///< 0: no SELECT
  bool info = false;               ///< also `INFO server` (see `identity()`)
  bool time = false;               ///< also `TIME` (see `time_us()`)
};

/// What the I/O layer must do next.
struct handshake_action {
  /// The three things the machine can ask for.
  enum class kind {
    write,  ///< write `bytes` whole, then resume with the write's error
    read,   ///< read `replies` complete replies (push messages skipped), then resume with them
    done,   ///< finished: `ec` empty (connected with RESP `protocol`) or why it failed
  };
  kind type = kind::done;        ///< what to do; the members below say with what
  std::string_view bytes;        ///< write: valid until the next `resume`
  std::size_t replies = 0;       ///< read
  boost::system::error_code ec;  ///< done
  int protocol = 0;              ///< done without error: 3, or 2 after the fallback
  /// done with `auth_failed` or `handshake_failed`: the server's refusal (untrusted, password
  /// redacted; empty when the reply had an unexpected shape rather than an error text).
  std::string_view server_text;
};

/// One connection's handshake (see the file's description). Drive it with `resume` until it
/// returns a `done` action; not reusable.
class handshake_fsm {
 public:
  /// A machine for `params`, whose views must outlive it.
  explicit handshake_fsm(handshake_params params) : params_(params) {}

  /// Advances the machine. Call first with an empty `ec` and `replies`; after a `write` action
  /// with the write's error; after a `read` action with the read's error and the nodes of the
  /// replies read, in order. An I/O error ends the handshake with that error.
  handshake_action resume(boost::system::error_code ec, const resp::response& replies) {
    if (state_ == state::finished) return done(ec_);
    if (ec) return fail(ec, {});
    switch (state_) {
      case state::start: {
        request_.clear();
        // HELLO authenticates, names the client and selects RESP3 in one round trip.
        const std::string_view user = params_.username.empty() ? std::string_view{"default"} : params_.username;
        if (!params_.password.empty() && !params_.client_name.empty()) {
          request_.push("HELLO", "3", "AUTH", user, params_.password, "SETNAME", params_.client_name);
        } else if (!params_.password.empty()) {
          request_.push("HELLO", "3", "AUTH", user, params_.password);
        } else if (!params_.client_name.empty()) {
          request_.push("HELLO", "3", "SETNAME", params_.client_name);
        } else {
          request_.push("HELLO", "3");
        }
        return write(state::hello_written);
      }
      case state::hello_written:
        return read(state::hello_read);
      case state::hello_read: {
        if (const resp::node* e = first_error(replies)) {
          const std::string_view refusal = e->value;
          if (is_auth_refusal(refusal)) return fail(error::auth_failed, refusal);
          if (!starts_with(refusal, "NOPROTO") && refusal.find("unknown command") == std::string_view::npos)
            return fail(error::handshake_failed, refusal);
          set_text(refusal);
          fallback_reason_ = text_;
          return legacy();
        }
        const auto* v = resp::reply_value(replies);
        if (!v || (v->data_type != resp::type::map && v->data_type != resp::type::array))
          return fail(error::handshake_failed, {});
        protocol_ = 3;
        return select();
      }
      case state::legacy_written:
        return read(state::legacy_read);
      case state::legacy_read:
        if (const resp::node* e = first_error(replies))
          return fail(is_auth_refusal(e->value) ? error::auth_failed : error::handshake_failed, e->value);
        return select();
      case state::select_written:
        return read(state::select_read);
      case state::select_read:
        return finish_select(replies);
      case state::finished:
        break;
    }
    return done(ec_);
  }

  /// What `INFO server` said (`asked` false when not identifying), after `done`.
  const node_identity& identity() const noexcept { return identity_; }
  /// The node's wall clock from `TIME`, microseconds since the epoch, read in the last exchange
  /// (between its `write` and its `read`); nothing when not asked or unreadable.
  std::optional<std::int64_t> time_us() const noexcept { return time_us_; }

  /// RESP version chosen so far (3 until the server refuses HELLO).
  int protocol() const noexcept { return protocol_; }
  /// The server's refusal of HELLO that caused the RESP2 fallback (password redacted), or empty.
  std::string_view fallback_reason() const noexcept { return fallback_reason_; }

  /// True for the refusals that mean "these credentials are not accepted".
  static bool is_auth_refusal(std::string_view text) noexcept {
    return starts_with(text, "WRONGPASS") || starts_with(text, "NOAUTH") || starts_with(text, "NOPERM") ||
           starts_with(text, "ERR invalid password");
  }

 private:
  enum class state {
    start,
    hello_written,
    hello_read,
    legacy_written,
    legacy_read,
    select_written,
    select_read,
    finished,
  };

  static bool starts_with(std::string_view s, std::string_view prefix) noexcept {
    return s.substr(0, prefix.size()) == prefix;
  }

  // The first error reply among `replies` (one per depth-0 value), or null.
  static const resp::node* first_error(const resp::response& replies) noexcept {
    for (const auto& n : replies) {
      if (n.depth == 0 && resp::is_error(n.data_type)) return &n;
    }
    return nullptr;
  }

  // Copies `text` with every occurrence of the password replaced by "***".
  void set_text(std::string_view text) {
    text_.assign(text);
    const std::string_view secret = params_.password;
    if (secret.empty()) return;
    for (auto at = text_.find(secret); at != std::string::npos; at = text_.find(secret, at + 3)) {
      text_.replace(at, secret.size(), "***");
    }
  }

  handshake_action legacy() {
    protocol_ = 2;
    request_.clear();
    if (!params_.password.empty()) {
      if (params_.username.empty()) {
        request_.push("AUTH", params_.password);
      } else {
        request_.push("AUTH", params_.username, params_.password);
      }
    }
    if (!params_.client_name.empty()) request_.push("CLIENT", "SETNAME", params_.client_name);
    if (request_.empty()) return select();
    return write(state::legacy_written);
  }

  handshake_action select() {
    if (params_.database == 0 && !params_.info && !params_.time) return succeed();
    request_.clear();
    if (params_.database != 0) request_.push("SELECT", params_.database);
    if (params_.info) request_.push("INFO", "server");
    if (params_.time) request_.push("TIME");
    return write(state::select_written);
  }

  // The answers to `select()`'s commands, in order: SELECT's must not be an error; INFO's and
  // TIME's are read for the hazard guard, whatever they are.
  handshake_action finish_select(const resp::response& replies) {
    std::size_t k = 0;  // depth-0 values seen
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const auto& n = replies[i];
      if (n.depth != 0 || n.data_type == resp::type::attribute) continue;
      // Which command this answers: 0 SELECT, 1 INFO, 2 TIME (those not sent are skipped).
      std::size_t which = k++;
      if (params_.database == 0) ++which;
      if (which >= 1 && !params_.info) ++which;
      if (which == 0) {
        if (resp::is_error(n.data_type)) return fail(error::handshake_failed, n.value);
      } else if (which == 1) {
        if (resp::is_error(n.data_type)) {
          identity_.asked = true;
          identity_.refusal.assign(n.value.substr(0, 256));
        } else {
          std::string_view text = n.value;
          if (n.data_type == resp::type::verbatim_string && text.size() >= 4) text.remove_prefix(4);  // "txt:"
          identity_ = parse_info(text);
        }
      } else if (which == 2) {
        time_us_ = parse_time(replies, i);
      }
    }
    return succeed();
  }

  handshake_action write(state next) {
    state_ = next;
    handshake_action a;
    a.type = handshake_action::kind::write;
    a.bytes = request_.payload();
    return a;
  }

  handshake_action read(state next) {
    state_ = next;
    handshake_action a;
    a.type = handshake_action::kind::read;
    a.replies = request_.commands();
    return a;
  }

  handshake_action succeed() {
    state_ = state::finished;
    ec_ = {};
    text_.clear();
    return done({});
  }

  handshake_action fail(boost::system::error_code ec, std::string_view server_text) {
    state_ = state::finished;
    ec_ = ec;
    set_text(server_text);
    return done(ec);
  }

  handshake_action done(boost::system::error_code ec) const {
    handshake_action a;
    a.type = handshake_action::kind::done;
    a.ec = ec;
    if (!ec) a.protocol = protocol_;
    a.server_text = text_;
    return a;
  }

  handshake_params params_;
  state state_ = state::start;
  int protocol_ = 3;
  resp::request request_;
  std::string text_;             // the server text of the outcome (redacted)
  std::string fallback_reason_;  // HELLO's refusal, when it fell back (redacted)
  node_identity identity_;       // INFO's answer (identify)
  std::optional<std::int64_t> time_us_;
  boost::system::error_code ec_;
};

}  // namespace redlock::core
