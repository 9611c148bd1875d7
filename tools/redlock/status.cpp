// SPDX-License-Identifier: BSL-1.0
// `redlock status NAME`: asks every master for the resource's key (GET and PTTL pipelined in one
// request, with a deadline) and says whether a majority agrees on a holder.

#include "commands.hpp"
#include "output.hpp"
#include <redlock/connection.hpp>
#include <redlock/core/cluster_route.hpp>

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace redlock::cli {

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = redlock::clock;
using std::chrono::milliseconds;

/// What one master said.
struct master_view {
  std::string address;
  bool reachable = false;  // a reply came (possibly an error reply)
  bool answered = false;   // a usable reply came
  bool exists = false;
  std::string value;
  std::int64_t pttl = -2;  // -1: no expiry
  std::string error;
  std::chrono::microseconds latency{0};
};

/// The top-level values of a response (RESP3 attributes skipped).
std::vector<const resp::node*> replies(const resp::response& r) {
  std::vector<const resp::node*> out;
  for (const auto& n : r) {
    if (n.depth == 0 && n.data_type != resp::type::attribute) out.push_back(&n);
  }
  return out;
}

void interpret(master_view& v, error_code ec, const resp::response& r, const connection_status& conn) {
  const auto values = replies(r);
  if (ec == error::server_error) {
    v.reachable = true;
    for (const auto* n : values) {
      if (resp::is_error(n->data_type)) {
        v.error = "server error: " + printable(n->value);
        break;
      }
    }
    return;
  }
  if (ec) {
    // A request refused for a down connection says little; the connection knows why it is down.
    v.error = (ec == error::not_connected && conn.last_error) ? conn.last_error.message() : ec.message();
    if (ec == error::not_connected && conn.last_error == error::auth_failed && !conn.last_error_text.empty()) {
      v.error += " (" + printable(conn.last_error_text) + ")";
    }
    return;
  }
  v.reachable = true;
  if (values.size() != 2) {
    v.error = "unexpected reply";
    return;
  }
  v.answered = true;
  if (values[0]->data_type != resp::type::null) {
    v.exists = true;
    v.value = values[0]->value;
  }
  if (values[1]->data_type == resp::type::integer) {
    try {
      v.pttl = std::stoll(values[1]->value);
    } catch (const std::exception&) {
      v.pttl = -2;
    }
  }
  if (v.pttl == -2) {  // expired between GET and PTTL
    v.exists = false;
    v.value.clear();
  }
}

std::string ttl_text(std::int64_t pttl) {
  if (pttl < 0) return "no expiry";
  return format_duration(milliseconds{pttl});
}

}  // namespace

int status_command(const status_options& o, const resolved_config& cfg) {
  const bool verbose = o.common.verbose;
  if (verbose) {
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
    resp::request req;
    req.push("GET", key);
    req.push("PTTL", key);
    c->async_exec(std::move(req), deadline, [&, i, c, mc, hops](error_code ec, resp::response r) {
      c->close();
      if (ec == error::server_error && hops > 0 && mc.cluster.enabled) {
        const auto* v = resp::reply_value(r);
        const auto rd = v ? core::parse_redirect(v->value) : core::redirect{};
        if (rd.what == core::redirect::kind::moved) {
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

  // The verdict.
  const std::size_t majority = majority_of(n);
  std::size_t answered = 0;
  std::size_t with_key = 0;
  std::map<std::string, std::size_t> tokens;
  for (const auto& v : views) {
    if (!v.answered) continue;
    ++answered;
    if (v.exists) {
      ++with_key;
      ++tokens[v.value];
    }
  }
  std::string holder;
  std::size_t holders = 0;
  for (const auto& [token, k] : tokens) {
    if (k > holders) {
      holder = token;
      holders = k;
    }
  }
  // The lock is held until the majority-th longest-lived of its keys expires.
  std::optional<std::int64_t> expires_in;
  std::string state;
  int status = exit_partial;
  if (holders >= majority) {
    state = "held";
    status = exit_ok;
    std::vector<std::int64_t> ttls;
    for (const auto& v : views) {
      if (v.answered && v.exists && v.value == holder) {
        ttls.push_back(v.pttl < 0 ? std::numeric_limits<std::int64_t>::max() : v.pttl);
      }
    }
    std::sort(ttls.rbegin(), ttls.rend());
    expires_in = ttls[majority - 1];
  } else if (answered < majority) {
    state = "unavailable";
    status = exit_unavailable;
  } else if (with_key == 0) {
    state = "free";
    status = exit_free;
  } else {
    state = "split";
    status = exit_partial;
  }
  const auto token_text = [&](const std::string& t) { return verbose ? printable(t) : short_token(t); };

  if (o.common.json) {
    json_writer j;
    j.begin_object().field("resource", o.resource).field("key", key).field("state", state);
    if (holders >= majority) {
      j.field("holder", verbose ? holder : holder.substr(0, 8));
    } else {
      j.null_field("holder");
    }
    j.field("holders", holders).field("answered", answered).field("total", n).field("majority", majority);
    if (expires_in && *expires_in != std::numeric_limits<std::int64_t>::max()) {
      j.field("expires_in_ms", *expires_in);
    } else {
      j.null_field("expires_in_ms");
    }
    j.key("masters").begin_array();
    for (const auto& v : views) {
      j.begin_object().field("address", v.address).field("reachable", v.reachable);
      if (v.answered) {
        j.field("exists", v.exists);
        if (v.exists) {
          j.field("holder", verbose ? v.value : v.value.substr(0, 8)).field("pttl_ms", v.pttl);
        } else {
          j.null_field("holder").null_field("pttl_ms");
        }
        j.null_field("error");
      } else {
        j.null_field("exists").null_field("holder").null_field("pttl_ms").field("error", v.error);
      }
      j.field("latency_ms", to_ms(v.latency)).end_object();
    }
    j.end_array().end_object();
    fmt::print("{}\n", j.str());
    return status;
  }

  const std::string name = key == o.resource ? fmt::format("'{}'", printable(o.resource))
                                             : fmt::format("'{}' (key '{}')", printable(o.resource), printable(key));
  if (state == "held") {
    fmt::print("{} is held by {} on {} of {} masters (majority {}), for {}\n", name, token_text(holder), holders, n,
               majority,
               *expires_in == std::numeric_limits<std::int64_t>::max() ? std::string{"ever (no expiry)"}
                                                                       : ttl_text(*expires_in) + " more");
  } else if (state == "free") {
    fmt::print("{} is free (no key on the {} of {} masters that answered)\n", name, answered, n);
  } else if (state == "unavailable") {
    fmt::print("{} is unavailable: only {} of {} masters answered, {} needed\n", name, answered, n, majority);
  } else {
    std::string parts;
    for (const auto& [token, k] : tokens)
      parts += fmt::format("{}{} on {}", parts.empty() ? "" : ", ", token_text(token), k);
    fmt::print("{} is not held by a majority: {}; {} free, {} without an answer (majority {})\n", name, parts,
               answered - with_key, n - answered, majority);
  }
  for (const auto& v : views) {
    std::string line = fmt::format("  {:<24} ", v.address);
    if (!v.answered) {
      line += (v.reachable ? "" : "unreachable: ") + v.error;
    } else if (!v.exists) {
      line += "free";
    } else {
      line += fmt::format("{:<10} ttl {}", token_text(v.value), ttl_text(v.pttl));
    }
    if (verbose) line += fmt::format("  ({:.3f} ms)", to_ms(v.latency));
    fmt::print("{}\n", line);
  }
  return status;
}

}  // namespace redlock::cli
