// SPDX-License-Identifier: BSL-1.0
// `redlock status NAME`: asks every master what it keeps for the resource, whatever the kind of
// lock (one pipelined request of plain reads each, with a deadline), and says whether a majority
// agrees on a holder. What each kind keeps on a master is the library's table of kinds
// (redlock/core/kind_spec.hpp) and its scripts (redlock/detail/scripts.hpp): the lock key holds a
// token (plain, fenced, writer, several resources), an owner (reentrant, with its holds beside),
// the readers' marker (readers, with their set and a waiting writer's claim beside), or is a
// sorted set of holders (semaphore, with its permit count beside); the fair queue and the fencing
// counter sit beside any of them.

#include "commands.hpp"
#include "output.hpp"
#include "status_view.hpp"
#include <redlock/connection.hpp>
#include <redlock/core/cluster_route.hpp>
#include <redlock/core/key_slot.hpp>
#include <redlock/detail/scripts.hpp>

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace redlock::cli {

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = redlock::clock;

/// The commands of one master's request, in order. Each is a plain read; a command of the wrong
/// type for the key (GET on a semaphore's set, ZRANGE on a token) answers WRONGTYPE, expected.
enum command : std::size_t {
  c_time,         // TIME: the scores of the sets are this master's milliseconds
  c_type,         // TYPE key
  c_get,          // GET key: the token, the owner, or the readers' marker
  c_pttl,         // PTTL key
  c_members,      // ZRANGE key 0 -1 WITHSCORES: a semaphore's holders
  c_permits,      // GET key:redlock-permits
  c_readers,      // ZRANGE key:redlock-readers 0 -1 WITHSCORES
  c_writer,       // GET key:redlock-writer: a waiting writer's claim
  c_writer_pttl,  // PTTL key:redlock-writer
  c_fence,        // GET key:redlock-fence
  c_holds,        // HKEYS key:redlock-holds: a reentrant lock's holds
  c_queue,        // ZRANGE key:redlock-queue 0 -1 WITHSCORES: the fair queue (waiter -> ticket)
  c_expiry,       // ZRANGE key:redlock-expiry 0 -1 WITHSCORES: when each waiter's place lapses
  c_count
};

/// The request for `key` on a master whose helper keys are named by `naming`.
resp::request make_request(const std::string& key, core::key_naming naming) {
  const auto helper = [&](std::string_view suffix) {
    std::string out;
    core::append_helper_key(out, key, suffix, naming);
    return out;
  };
  resp::request req;
  req.push("TIME");
  req.push("TYPE", key);
  req.push("GET", key);
  req.push("PTTL", key);
  req.push("ZRANGE", key, "0", "-1", "WITHSCORES");
  req.push("GET", helper(detail::permits_suffix));
  req.push("ZRANGE", helper(detail::readers_suffix), "0", "-1", "WITHSCORES");
  req.push("GET", helper(detail::writer_suffix));
  req.push("PTTL", helper(detail::writer_suffix));
  req.push("GET", helper(detail::fence_suffix));
  req.push("HKEYS", helper(detail::holds_suffix));
  req.push("ZRANGE", helper(detail::queue_suffix), "0", "-1", "WITHSCORES");
  req.push("ZRANGE", helper(detail::expiry_suffix), "0", "-1", "WITHSCORES");
  return req;
}

/// One top-level reply: its first node and its scalar values in order (for an array of pairs,
/// RESP2's flat list and RESP3's nested pairs alike: member, score, member, score...).
struct reply {
  const resp::node* head = nullptr;
  std::vector<const resp::node*> scalars;
};

std::vector<reply> split_replies(const resp::response& r) {
  std::vector<reply> out;
  std::size_t skip_below = 0;  // inside a RESP3 attribute (metadata): its nodes are skipped
  bool skipping = false;
  for (const auto& n : r) {
    if (skipping && n.depth > skip_below) continue;
    skipping = false;
    if (n.data_type == resp::type::attribute) {
      skipping = true;
      skip_below = n.depth;
      continue;
    }
    if (n.depth == 0) {
      out.push_back({&n, {}});
    } else if (!out.empty() && !resp::is_aggregate(n.data_type)) {
      out.back().scalars.push_back(&n);
    }
  }
  return out;
}

std::optional<std::int64_t> integer_of(std::string_view text) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size()) return std::nullopt;
  return v;
}

/// A sorted set's score (RESP3 double or RESP2 text), as whole milliseconds.
std::int64_t score_of(const std::string& text) { return std::llround(std::strtod(text.c_str(), nullptr)); }

/// The (member, score) pairs of a WITHSCORES reply.
std::vector<std::pair<std::string, std::int64_t>> pairs_of(const reply& r) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (std::size_t i = 0; i + 1 < r.scalars.size(); i += 2) {
    out.emplace_back(r.scalars[i]->value, score_of(r.scalars[i + 1]->value));
  }
  return out;
}

/// Why a connection that never came up failed, with the node's or OpenSSL's own words (a
/// refusal of the credentials, the certificate check's reason), as `run` says it.
std::string connection_failure(error_code ec, const connection_status& conn) {
  if (ec != error::not_connected || !conn.last_error) return ec.message();
  auto out = conn.last_error.message();
  if (!conn.last_error_text.empty()) out += " (" + printable(conn.last_error_text) + ")";
  return out;
}

void interpret(master_view& v, error_code ec, const resp::response& r, const connection_status& conn) {
  if (ec && ec != error::server_error) {
    v.error = connection_failure(ec, conn);
    return;
  }
  v.reachable = true;
  const auto replies = split_replies(r);
  if (replies.size() != c_count) {
    v.error = "unexpected reply";
    return;
  }
  const auto value = [&](command c) -> const resp::node& { return *replies[c].head; };
  const auto is_error = [&](command c) { return resp::is_error(value(c).data_type); };
  const auto type = value(c_type).value;
  // Expected error replies: the wrong type of the two reads of the key that do not fit its kind,
  // and TIME refused to a user allowed only reads (the sets' entries then have no known ttl). Any
  // other is the master's failure (a missing permission, a redirect that was not followed).
  for (std::size_t c = 0; c < c_count; ++c) {
    const bool expected = c == c_time || ((c == c_get || c == c_members) &&
                                          std::string_view{replies[c].head->value}.starts_with("WRONGTYPE"));
    if (is_error(static_cast<command>(c)) && !expected) {
      v.error = "server error: " + printable(replies[c].head->value);
      return;
    }
  }
  std::optional<std::int64_t> now;
  if (replies[c_time].scalars.size() == 2) {
    now = integer_of(replies[c_time].scalars[0]->value).value_or(0) * 1000 +
          integer_of(replies[c_time].scalars[1]->value).value_or(0) / 1000;
  }
  if (type == "none") {
    v.shape = key_shape::none;
  } else if (type == "string" && value(c_get).data_type == resp::type::blob_string) {
    v.value = value(c_get).value;
    v.shape = v.value == detail::readers_marker ? key_shape::readers : key_shape::token;
  } else if (type == "zset") {
    v.shape = key_shape::semaphore;
  } else if (type == "string") {
    v.shape = key_shape::none;  // gone between TYPE and GET
  } else {
    v.error = fmt::format("the key is a {}, not a lock", printable(type));
    return;
  }
  v.answered = true;
  v.exists = v.shape != key_shape::none;
  if (v.exists) v.pttl = integer_of(value(c_pttl).value).value_or(-2);
  if (v.exists && v.pttl == -2) {  // expired meanwhile
    v.shape = key_shape::none;
    v.exists = false;
    v.value.clear();
  }
  // The sets' entries that have not lapsed, with the time each has left (-1: unknown).
  const auto live = [&](command c) {
    std::vector<member> out;
    for (auto& [id, until] : pairs_of(replies[c])) {
      if (!now || until > *now) out.push_back({std::move(id), now ? until - *now : -1});
    }
    return out;
  };
  if (v.shape == key_shape::semaphore) {
    v.members = live(c_members);
    v.permits = integer_of(value(c_permits).value);
  }
  if (v.shape == key_shape::readers) v.members = live(c_readers);
  if (value(c_writer).data_type != resp::type::null) {
    v.writer = value(c_writer).value;
    v.writer_pttl = integer_of(value(c_writer_pttl).value).value_or(-2);
  }
  if (value(c_fence).data_type != resp::type::null) v.fence = value(c_fence).value;
  for (const auto* n : replies[c_holds].scalars) v.holds.push_back(n->value);
  // A waiter's place counts while its expiry lies ahead (the next acquisition drops the others).
  const auto expiries = pairs_of(replies[c_expiry]);
  for (auto& [name, ticket] : pairs_of(replies[c_queue])) {
    std::optional<std::int64_t> left;
    for (const auto& [n, until] : expiries) {
      if (n == name && now) left = until - *now;
    }
    if (left && *left <= 0) continue;
    v.waiters.push_back({std::move(name), ticket, left.value_or(-1)});
  }
}

}  // namespace

int status_command(const status_options& o, const resolved_config& cfg) {
  if (o.common.verbose) {
    for (const auto& n : cfg.notes) complain(n);
  }
  const auto key = key_of(cfg, o.resource);
  const auto& masters = cfg.client.masters;
  const std::size_t n = masters.size();
  std::vector<master_view> views(n);

  asio::io_context ioc{1};
  std::vector<std::unique_ptr<connection>> conns;
  const auto start = clock_type::now();
  // Asks master `i` through `mc`; a cluster master's seed may answer MOVED: then the node that
  // owns the key's slot is asked (once), with what is left of the deadline.
  std::function<void(std::size_t, connection_config, int)> ask = [&](std::size_t i, connection_config mc, int hops) {
    conns.push_back(std::make_unique<connection>(ioc.get_executor(), mc));
    auto* c = conns.back().get();
    c->async_run(asio::detached);
    // The connect and the answer within one deadline: a master that accepts connections but never
    // answers (stopped, overloaded) costs at most this.
    const auto deadline = mc.connect_timeout + cfg.client.request_timeout;
    // On a cluster master the helper keys live in the lock key's slot (docs/safety.md).
    auto req = make_request(key, mc.cluster.enabled ? core::key_naming::slotted : core::key_naming::plain);
    c->async_exec(std::move(req), deadline, [&, i, c, mc, hops](error_code ec, resp::response r) {
      c->close();
      if (ec == error::server_error && hops > 0 && mc.cluster.enabled) {
        for (const auto& node : r) {
          if (node.depth != 0 || !resp::is_error(node.data_type)) continue;
          const auto rd = core::parse_redirect(node.value);
          if (rd.what != core::redirect::kind::moved) continue;
          auto next = mc;
          if (!rd.host.empty()) next.host = rd.host;
          next.port = rd.port;
          return ask(i, next, hops - 1);
        }
      }
      views[i].latency = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - start);
      interpret(views[i], ec, r, c->status());
    });
  };
  for (std::size_t i = 0; i < n; ++i) {
    views[i].address = redlock::address_of(masters[i]);
    ask(i, masters[i], 2);
  }
  ioc.run();

  const auto v = decide(views);
  if (o.common.json) {
    fmt::print("{}\n", status_json(o.resource, key, v, views, o.common.verbose));
  } else {
    fmt::print("{}", status_text(o.resource, key, v, views, o.common.verbose));
  }
  return v.exit;
}

}  // namespace redlock::cli
