// SPDX-License-Identifier: BSL-1.0
// A node connection's configuration: its checks and its address in words (no I/O).

#include "detail/tls_context.hpp"
#include <redlock/connection.hpp>

#include <boost/asio/ssl/context.hpp>

#include <fmt/format.h>

#include <sys/un.h>

#include <memory>
#include <string>

namespace redlock {

using boost::system::error_code;

error_code validate(const connection_config& cfg, std::string* what) {
  auto bad = [&](const char* field) {
    if (what) *what = field;
    return make_error_code(error::invalid_config);
  };
  if (cfg.unix_socket.empty()) {
    if (cfg.host.empty()) return bad("host is empty");
    if (cfg.port == 0) return bad("port is 0");
  } else if (cfg.unix_socket.size() >= sizeof(sockaddr_un::sun_path)) {
    return bad("unix_socket path longer than the system allows");
  }
  if (cfg.cluster.enabled) {
    if (!cfg.unix_socket.empty()) return bad("cluster with unix_socket: a cluster's nodes are reached over TCP");
    for (const auto& seed : cfg.cluster.seeds) {
      if (seed.host.empty()) return bad("cluster.seeds: a seed's host is empty");
      if (seed.port == 0) return bad("cluster.seeds: a seed's port is 0");
    }
    if (cfg.database != 0) return bad("database with cluster: a cluster serves database 0 only");
  } else if (!cfg.cluster.seeds.empty()) {
    return bad("cluster.seeds without cluster.enabled");
  }
  if (cfg.database < 0) return bad("database is negative");
  if (cfg.connect_timeout <= std::chrono::milliseconds::zero()) return bad("connect_timeout is not positive");
  if (cfg.stall_grace < std::chrono::milliseconds::zero()) return bad("stall_grace is negative");
  if (cfg.connect_probe_interval < std::chrono::milliseconds::zero()) return bad("connect_probe_interval is negative");
  if (cfg.reconnect.initial < std::chrono::milliseconds::zero() || cfg.reconnect.max < cfg.reconnect.initial)
    return bad("reconnect backoff: need 0 <= initial <= max");
  if (!(cfg.reconnect.jitter >= 0.0 && cfg.reconnect.jitter <= 1.0)) return bad("reconnect jitter outside [0, 1]");
  if (cfg.limits.max_depth == 0 || cfg.limits.max_depth > resp::parser::hard_max_depth)
    return bad("limits.max_depth outside [1, parser::hard_max_depth]");
  if (cfg.limits.max_line_length < 16 || cfg.limits.max_bulk_length == 0 || cfg.limits.max_nodes == 0 ||
      cfg.limits.max_aggregate_size == 0)
    return bad("limits too small to read any reply");
  if (cfg.tls.enabled) {
    const auto& t = cfg.tls;
    if (!cfg.unix_socket.empty()) return bad("tls with unix_socket: Redis serves Unix sockets without TLS");
    if (!t.key_file.empty() && t.cert_file.empty()) return bad("tls.key_file without tls.cert_file");
    if (!t.cert_file.empty() && t.key_file.empty()) return bad("tls.cert_file without tls.key_file");
    if (t.insecure_skip_verify && (!t.ca_file.empty() || !t.ca_dir.empty() || !t.server_name.empty()))
      return bad("tls.insecure_skip_verify with tls.ca_file, tls.ca_dir or tls.server_name (nothing would be checked)");
    std::shared_ptr<boost::asio::ssl::context> ctx;
    if (auto ec = detail::make_tls_context(t, ctx, what)) return ec;
  }
  if (what) what->clear();
  return {};
}

namespace {
std::string host_port(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}
}  // namespace

std::string address_of(const connection_config& cfg) {
  if (!cfg.unix_socket.empty()) return "unix:" + cfg.unix_socket;
  if (cfg.cluster.enabled) {
    std::string out = cfg.tls.enabled ? "rediss-cluster://" : "redis-cluster://";
    out += host_port(cfg.host, cfg.port);
    for (const auto& s : cfg.cluster.seeds) out += "+" + host_port(s.host, s.port);
    return out;
  }
  return (cfg.tls.enabled ? "rediss://" : "") + host_port(cfg.host, cfg.port);
}

}  // namespace redlock
