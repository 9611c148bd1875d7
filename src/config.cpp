// SPDX-License-Identifier: BSL-1.0
// Parsing of master lists (no I/O). Validation of a client configuration lives with the client.

#include <redlock/config.hpp>

#include <charconv>
#include <utility>

namespace redlock {

using boost::system::error_code;

namespace {

std::string_view trim(std::string_view s) {
  constexpr std::string_view blanks = " \t\r\n";
  const auto b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

bool parse_port(std::string_view s, std::uint16_t& port) {
  unsigned value = 0;
  const auto* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc{} || p != end || value == 0 || value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

std::string parse_entry(std::string_view e, connection_config& m);

// A cluster master: "redis-cluster://seed+seed+..." (or "rediss-cluster://"); every seed is a
// host[:port] entry of its own. False when `e` is not one.
bool parse_cluster(std::string_view e, connection_config& m, std::string& problem) {
  constexpr std::string_view plain = "redis-cluster://";
  constexpr std::string_view tls = "rediss-cluster://";
  const bool secure = e.starts_with(tls);
  if (!secure && !e.starts_with(plain)) return false;
  e.remove_prefix(secure ? tls.size() : plain.size());
  std::size_t n = 0;
  for (;;) {
    const auto plus = e.find('+');
    const auto seed = trim(e.substr(0, plus));
    ++n;
    connection_config s;
    std::string p = seed.empty() ? std::string{"empty seed"}
                    : seed.starts_with("unix:") || seed.find("://") != std::string_view::npos
                        ? std::string{"a seed is host:port (no scheme, no unix socket)"}
                        : parse_entry(seed, s);
    if (!p.empty()) {
      problem = "seed " + std::to_string(n) + ": " + p;
      return true;
    }
    if (n == 1) {
      m.host = s.host;
      m.port = s.port;
    } else {
      m.cluster.seeds.push_back(node_address{s.host, s.port});
    }
    if (plus == std::string_view::npos) break;
    e.remove_prefix(plus + 1);
  }
  m.cluster.enabled = true;
  m.tls.enabled = secure;
  return true;
}

// One entry; returns a description of the problem, or an empty string.
std::string parse_entry(std::string_view e, connection_config& m) {
  if (std::string problem; parse_cluster(e, m, problem)) return problem;
  constexpr std::string_view unix_prefix = "unix:";
  constexpr std::string_view tls_scheme = "rediss://";
  constexpr std::string_view plain_scheme = "redis://";
  bool scheme = true;
  if (e.starts_with(tls_scheme)) {
    e.remove_prefix(tls_scheme.size());
    m.tls.enabled = true;
  } else if (e.starts_with(plain_scheme)) {
    e.remove_prefix(plain_scheme.size());
  } else if (e.find("://") != std::string_view::npos) {
    return "unknown scheme (expected redis:// or rediss://)";
  } else {
    scheme = false;
  }
  if (e.starts_with(unix_prefix)) {
    // Redis serves its Unix socket in plain text only, and "unix:" is a scheme of its own.
    if (scheme) return "a unix socket takes no redis:// or rediss:// scheme (and no TLS)";
    e.remove_prefix(unix_prefix.size());
    if (e.empty()) return "empty unix socket path";
    m.unix_socket = std::string{e};
    return {};
  }
  std::string_view host = e;
  std::string_view port;
  if (e.starts_with('[')) {  // [ipv6] or [ipv6]:port
    const auto close = e.find(']');
    if (close == std::string_view::npos) return "missing ']'";
    host = e.substr(1, close - 1);
    const auto rest = e.substr(close + 1);
    if (!rest.empty()) {
      if (!rest.starts_with(':')) return "expected ':port' after ']'";
      port = rest.substr(1);
      if (port.empty()) return "empty port";
    }
  } else if (const auto colon = e.rfind(':'); colon != std::string_view::npos) {
    if (e.find(':') != colon) return "IPv6 addresses need brackets: [addr]:port";
    host = e.substr(0, colon);
    port = e.substr(colon + 1);
    if (port.empty()) return "empty port";
  }
  if (host.empty()) return "empty host";
  m.host = std::string{host};
  m.port = 6379;
  if (!port.empty() && !parse_port(port, m.port)) return "port is not a number in 1..65535";
  return {};
}

}  // namespace

error_code parse_masters(std::string_view list, std::vector<connection_config>& out, std::string* what) {
  std::vector<connection_config> parsed;
  std::size_t index = 0;
  for (;;) {
    const auto comma = list.find(',');
    const auto entry = trim(list.substr(0, comma));
    ++index;
    connection_config m;
    std::string problem = entry.empty() ? std::string{"empty entry"} : parse_entry(entry, m);
    if (!problem.empty()) {
      if (what) *what = "master " + std::to_string(index) + " ('" + std::string{entry} + "'): " + problem;
      return make_error_code(error::invalid_config);
    }
    parsed.push_back(std::move(m));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  out.insert(out.end(), std::make_move_iterator(parsed.begin()), std::make_move_iterator(parsed.end()));
  if (what) what->clear();
  return {};
}

}  // namespace redlock
