// SPDX-License-Identifier: BSL-1.0
#include "options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

namespace redlock::cli {

using std::chrono::milliseconds;

namespace {

constexpr std::int64_t max_duration_ms = 366LL * 24 * 3600 * 1000;

std::string_view trim(std::string_view s) {
  constexpr std::string_view blanks = " \t\r\n";
  const auto b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

// yes/no, true/false, on/off, 1/0.
std::optional<bool> parse_bool(std::string_view v) {
  if (v == "yes" || v == "true" || v == "on" || v == "1") return true;
  if (v == "no" || v == "false" || v == "off" || v == "0") return false;
  return std::nullopt;
}

std::optional<milliseconds> bad(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return std::nullopt;
}

// ---- command lines ------------------------------------------------------------------------------

/// Walks the arguments of one command: options (`--name value`, `--name=value`, `-x value`),
/// positional arguments, and `--`.
class arg_walker {
 public:
  arg_walker(std::span<const std::string> args, std::string_view command) : args_(args), command_(command) {}

  bool done() const noexcept { return i_ >= args_.size(); }
  std::string_view current() const { return args_[i_]; }
  std::size_t index() const noexcept { return i_; }
  void advance() noexcept { ++i_; }

  /// True when the current argument is an option (not `-`, not `--`, starts with `-`).
  bool at_option() const {
    const auto a = current();
    return a.size() > 1 && a[0] == '-' && a != "--";
  }

  /// Splits the current option into its name and an inline `=value`.
  void take_option() {
    const auto a = current();
    inline_value_.reset();
    const auto eq = a.find('=');
    if (a.starts_with("--") && eq != std::string_view::npos) {
      name_ = std::string{a.substr(0, eq)};
      inline_value_ = std::string{a.substr(eq + 1)};
    } else {
      name_ = std::string{a};
    }
    ++i_;
  }
  const std::string& name() const noexcept { return name_; }

  std::string value() {
    if (inline_value_) return *std::exchange(inline_value_, std::nullopt);
    if (done()) throw usage_error(fmt::format("option {} needs a value", name_));
    return args_[i_++];
  }
  void flag() const {
    if (inline_value_) throw usage_error(fmt::format("option {} takes no value", name_));
  }
  milliseconds duration() {
    const auto text = value();
    std::string why;
    const auto d = parse_duration(text, &why);
    if (!d) throw usage_error(fmt::format("option {}: '{}' is not a duration: {}", name_, text, why));
    return *d;
  }
  [[noreturn]] void unknown() const {
    usage_error e{
        fmt::format("unknown option '{}' for 'redlock {}' (see 'redlock {} --help')", name_, command_, command_)};
    e.has_hint = true;
    throw e;
  }

 private:
  std::span<const std::string> args_;
  std::string_view command_;
  std::size_t i_ = 0;
  std::string name_;
  std::optional<std::string> inline_value_;
};

/// Handles an option shared by `run` and `status`; false when `w.name()` is not one.
bool common_option(arg_walker& w, common_options& o) {
  const auto& n = w.name();
  if (n == "--nodes" || n == "-n") {
    o.nodes = w.value();
  } else if (n == "--config" || n == "-c") {
    o.config_file = w.value();
    if (o.config_file->empty()) throw usage_error("option --config: empty file name");
  } else if (n == "--prefix") {
    o.prefix = w.value();
  } else if (n == "--request-timeout") {
    o.request_timeout = w.duration();
    if (o.request_timeout->count() <= 0) throw usage_error("option --request-timeout must be positive");
  } else if (n == "--restart-guard") {
    o.restart_guard = w.value();
    restart_detection mode{};
    if (!parse_restart_detection(*o.restart_guard, mode))
      throw usage_error("option --restart-guard: expected run_id, reconnect or off");
  } else if (n == "--tls") {
    w.flag();
    o.tls = true;
  } else if (n == "--tls-ca-file" || n == "--tls-ca-dir" || n == "--tls-cert" || n == "--tls-key" ||
             n == "--tls-server-name") {
    auto v = w.value();
    if (v.empty()) throw usage_error(fmt::format("option {}: empty value", n));
    auto& field = n == "--tls-ca-file"  ? o.tls_ca_file
                  : n == "--tls-ca-dir" ? o.tls_ca_dir
                  : n == "--tls-cert"   ? o.tls_cert_file
                  : n == "--tls-key"    ? o.tls_key_file
                                        : o.tls_server_name;
    field = std::move(v);
  } else if (n == "--json") {
    w.flag();
    o.json = true;
  } else if (n == "--verbose" || n == "-v") {
    w.flag();
    o.verbose = true;
  } else if (n == "--help" || n == "-h") {
    w.flag();
    o.help = true;
  } else {
    return false;
  }
  return true;
}

void check_resource(const std::string& r) {
  if (r.empty()) throw usage_error("the resource name is empty");
}

/// --shared, --write and --permits each choose the kind: two different ones conflict (said after
/// the whole line is read, so that --help still wins).
void set_kind(run_options& o, lock_kind k, std::string& conflict) {
  if (o.kind != lock_kind::exclusive && o.kind != k && conflict.empty()) {
    conflict = fmt::format(
        "{} and {} cannot be combined: a lock is shared (--shared), a writer (--write) or a "
        "semaphore (--permits P), one at a time",
        kind_flag(o.kind), kind_flag(k));
  }
  o.kind = k;
}

/// The options that go only with a plain exclusive lock of one resource.
void check_kind(const run_options& o) {
  const bool plain = o.kind == lock_kind::exclusive;
  const auto owner_flag = o.owner ? "--owner" : "--reentrant";
  if (o.owner && o.reentrant) {
    throw usage_error(
        "--owner and --reentrant cannot be combined: --reentrant takes the owner from REDLOCK_OWNER "
        "(or makes a new one), --owner names it");
  }
  if (o.fence && !plain) {
    throw usage_error(fmt::format("--fence cannot be combined with {}: fencing tokens are for a plain exclusive lock",
                                  kind_flag(o.kind)));
  }
  if ((o.owner || o.reentrant) && !plain) {
    throw usage_error(fmt::format("{} cannot be combined with {}: reentrancy is for a plain exclusive lock", owner_flag,
                                  kind_flag(o.kind)));
  }
  if (o.fence && (o.owner || o.reentrant)) {
    throw usage_error(fmt::format(
        "--fence cannot be combined with {}: a re-entered lock gets no fencing token of its own", owner_flag));
  }
  if (o.resources.size() > 1) {
    std::string_view other;
    if (!plain) {
      other = kind_flag(o.kind);
    } else if (o.fence) {
      other = "--fence";
    } else if (o.owner || o.reentrant) {
      other = owner_flag;
    }
    if (!other.empty()) {
      throw usage_error(fmt::format(
          "several --resource cannot be combined with {}: only a plain exclusive lock covers several resources",
          other));
    }
  }
}

}  // namespace

bool valid_owner(std::string_view id) noexcept {
  if (id.empty() || id.size() > 256) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f;
  });
}

std::string_view kind_flag(lock_kind kind) noexcept {
  switch (kind) {
    case lock_kind::read:
      return "--shared";
    case lock_kind::write:
      return "--write";
    case lock_kind::semaphore:
      return "--permits";
    case lock_kind::exclusive:
      break;
  }
  return {};
}

// ---- durations ----------------------------------------------------------------------------------

std::optional<milliseconds> parse_duration(std::string_view text, std::string* why) {
  if (text.empty()) return bad(why, "empty");
  std::size_t i = 0;
  std::int64_t whole = 0;
  std::size_t whole_digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (whole > max_duration_ms) return bad(why, "too long (at most 366 days)");
    whole = whole * 10 + (text[i] - '0');
    ++i;
    ++whole_digits;
  }
  std::int64_t fraction = 0;
  std::int64_t scale = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    std::size_t digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (digits == 9) return bad(why, "too many decimals");
      fraction = fraction * 10 + (text[i] - '0');
      scale *= 10;
      ++i;
      ++digits;
    }
    if (digits == 0) return bad(why, "expected digits after '.'");
  }
  if (whole_digits == 0) {
    return bad(why, "expected a number followed by ms, s, m or h (for example 500ms, 30s, 2m)");
  }
  const auto unit = text.substr(i);
  std::int64_t factor = 0;
  if (unit.empty() || unit == "s") {
    factor = 1000;
  } else if (unit == "ms") {
    factor = 1;
  } else if (unit == "m") {
    factor = 60 * 1000;
  } else if (unit == "h") {
    factor = 3600 * 1000;
  } else {
    return bad(why, fmt::format("unknown unit '{}' (use ms, s, m or h)", unit));
  }
  if (whole > max_duration_ms / factor) return bad(why, "too long (at most 366 days)");
  if ((fraction * factor) % scale != 0) return bad(why, "not a whole number of milliseconds");
  const std::int64_t total = whole * factor + fraction * factor / scale;
  if (total > max_duration_ms) return bad(why, "too long (at most 366 days)");
  return milliseconds{total};
}

std::string format_duration(milliseconds d) {
  const auto ms = d.count();
  if (ms == 0) return "0s";
  if (ms % 3'600'000 == 0) return fmt::format("{}h", ms / 3'600'000);
  if (ms % 60'000 == 0) return fmt::format("{}m", ms / 60'000);
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  if (ms < 1000) return fmt::format("{}ms", ms);
  std::string frac = fmt::format("{:03}", ms % 1000);
  while (frac.back() == '0') frac.pop_back();
  return fmt::format("{}.{}s", ms / 1000, frac);
}

// ---- command lines ------------------------------------------------------------------------------

run_options parse_run(std::span<const std::string> args) {
  run_options o;
  arg_walker w{args, "run"};
  bool dashdash = false;
  std::string kind_conflict;
  while (!w.done()) {
    if (w.current() == "--") {
      w.advance();
      dashdash = true;
      break;
    }
    if (!w.at_option()) break;  // the command starts here
    w.take_option();
    if (common_option(w, o.common)) continue;
    const auto& n = w.name();
    if (n == "--resource" || n == "-r") {
      auto r = w.value();
      check_resource(r);
      if (std::find(o.resources.begin(), o.resources.end(), r) != o.resources.end()) {
        throw usage_error(fmt::format("--resource '{}' is given twice", r));
      }
      o.resources.push_back(std::move(r));
    } else if (n == "--shared" || n == "--write") {
      w.flag();
      set_kind(o, n == "--shared" ? lock_kind::read : lock_kind::write, kind_conflict);
    } else if (n == "--permits") {
      const auto text = w.value();
      std::size_t p = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), p);
      if (ec != std::errc{} || end != text.data() + text.size() || p < 1 || p > max_permits) {
        throw usage_error(fmt::format("option --permits: '{}' is not a number of permits in 1..{}", text, max_permits));
      }
      set_kind(o, lock_kind::semaphore, kind_conflict);
      o.permits = p;
    } else if (n == "--fence") {
      w.flag();
      o.fence = true;
    } else if (n == "--owner") {
      auto id = w.value();
      if (!valid_owner(id)) {
        // Not repeated: it may be a secret with a typo.
        throw usage_error(fmt::format(
            "option --owner: not an owner id ({} bytes; 1 to 256 bytes without blanks or control characters)",
            id.size()));
      }
      o.owner = std::move(id);
    } else if (n == "--reentrant") {
      w.flag();
      o.reentrant = true;
    } else if (n == "--ttl" || n == "-t") {
      o.ttl = w.duration();
      if (o.ttl.count() <= 0) throw usage_error("option --ttl must be positive");
    } else if (n == "--wait" || n == "-w") {
      o.wait = w.duration();
    } else if (n == "--max-hold") {
      o.max_hold = w.duration();
    } else if (n == "--grace") {
      o.grace = w.duration();
    } else if (n == "--foreground") {
      w.flag();
      o.foreground = true;
    } else if (n == "--json-fd") {
      const auto text = w.value();
      int fd = -1;
      const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), fd);
      if (ec != std::errc{} || p != text.data() + text.size() || fd < 1) {
        throw usage_error(fmt::format("option --json-fd: '{}' is not a file descriptor number", text));
      }
      o.json_fd = fd;
      o.common.json = true;
    } else {
      w.unknown();
    }
  }
  for (; !w.done(); w.advance()) o.command.emplace_back(w.current());
  if (!o.resources.empty()) o.resource = o.resources.front();
  if (o.common.help) return o;
  if (o.resource.empty()) throw usage_error("missing --resource NAME");
  if (!kind_conflict.empty()) throw usage_error(kind_conflict);
  check_kind(o);
  if (o.command.empty()) {
    throw usage_error(dashdash ? "missing the command after '--'"
                               : "missing the command to run (redlock run --resource NAME [options] -- CMD [ARGS...])");
  }
  return o;
}

status_options parse_status(std::span<const std::string> args) {
  status_options o;
  arg_walker w{args, "status"};
  std::vector<std::string> positional;
  bool only_positional = false;
  while (!w.done()) {
    if (!only_positional && w.current() == "--") {
      w.advance();
      only_positional = true;
      continue;
    }
    if (only_positional || !w.at_option()) {
      positional.emplace_back(w.current());
      w.advance();
      continue;
    }
    w.take_option();
    if (common_option(w, o.common)) continue;
    if (w.name() == "--resource" || w.name() == "-r") {
      positional.push_back(w.value());
    } else {
      w.unknown();
    }
  }
  if (o.common.help) return o;
  if (positional.empty()) throw usage_error("missing the resource name (redlock status [options] NAME)");
  if (positional.size() > 1) {
    throw usage_error(fmt::format("one resource at a time: unexpected argument '{}'", positional[1]));
  }
  o.resource = positional.front();
  check_resource(o.resource);
  return o;
}

namespace {

/// A port number 1..65535.
std::optional<std::uint16_t> parse_port(std::string_view t) {
  unsigned v = 0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc{} || p != t.data() + t.size() || v < 1 || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

/// `--port BASE` (the servers take BASE, BASE+1, ...) or `--port FIRST-LAST` (the lowest free
/// ports of the range) for `servers` servers.
void parse_port_option(nodes_options& o, std::size_t servers) {
  const auto& t = o.port_text;
  const auto plural = [](std::size_t n) { return n == 1 ? "" : "s"; };
  const auto dash = t.find('-');
  const auto first = parse_port(std::string_view{t}.substr(0, dash));
  const auto last = dash == std::string::npos ? first : parse_port(std::string_view{t}.substr(dash + 1));
  if (!first || !last) {
    throw usage_error(
        fmt::format("option --port: '{}' is neither a port (1..65535) nor a range of ports FIRST-LAST", t));
  }
  if (dash == std::string::npos) {
    const std::size_t end = std::size_t{*first} + servers - 1;
    if (end > 65535) {
      throw usage_error(fmt::format("option --port {}: {} server{} need the ports {}-{}, beyond 65535", t, servers,
                                    plural(servers), *first, end));
    }
    o.first_port = *first;
    o.last_port = static_cast<std::uint16_t>(end);
    return;
  }
  if (*first > *last) {
    throw usage_error(fmt::format("option --port {}: the range's first port is above its last", t));
  }
  const std::size_t size = std::size_t{*last} - *first + 1;
  if (size < servers) {
    throw usage_error(fmt::format("option --port {}: the range holds {} port{}, {} server{} need {}", t, size,
                                  plural(size), servers, plural(servers), servers));
  }
  o.first_port = *first;
  o.last_port = *last;
}

}  // namespace

nodes_options parse_nodes(std::span<const std::string> args) {
  nodes_options o;
  arg_walker w{args, "nodes"};
  std::vector<std::string> positional;
  std::vector<std::string> up_only;  // the options that only 'nodes up' takes, as given
  while (!w.done()) {
    if (!w.at_option()) {
      positional.emplace_back(w.current());
      w.advance();
      continue;
    }
    w.take_option();
    const auto& n = w.name();
    if (n == "--json") {
      w.flag();
      o.json = true;
    } else if (n == "--verbose" || n == "-v") {
      w.flag();
      o.verbose = true;
    } else if (n == "--shards") {
      const auto t = w.value();
      std::size_t v = 0;
      const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc{} || p != t.data() + t.size() || v < 1 || v > max_local_shards)
        throw usage_error(fmt::format("--shards: '{}' is not a number of shards in 1..{}", t, max_local_shards));
      o.shards = v;
      up_only.push_back(n);
    } else if (n == "--tls" || n == "--tls-auth-clients") {
      w.flag();
      o.tls = true;
      o.tls_auth_clients = o.tls_auth_clients || n == "--tls-auth-clients";
      up_only.push_back(n);
    } else if (n == "--port") {
      o.port_text = w.value();
      up_only.push_back(n);
    } else if (n == "--help" || n == "-h") {
      w.flag();
      o.help = true;
    } else {
      w.unknown();
    }
  }
  if (o.help) return o;
  const bool up = !positional.empty() && positional[0] == "up";
  if (!up && o.shards) throw usage_error("--shards is for 'nodes up' (each master a cluster of that many shards)");
  if (!up && !up_only.empty()) throw usage_error(fmt::format("{} is for 'nodes up'", up_only.front()));
  if (o.tls && o.shards) {
    throw usage_error(fmt::format("{} cannot be combined with --shards: the local TLS masters are single servers",
                                  o.tls_auth_clients ? "--tls-auth-clients" : "--tls"));
  }
  if (positional.empty() || positional[0] == "list") {
    o.what = nodes_options::action::list;
    if (positional.size() > 1)
      throw usage_error(fmt::format("'nodes list' takes no argument, got '{}'", positional[1]));
  } else if (up) {
    o.what = nodes_options::action::up;
    if (positional.size() != 2) throw usage_error("'nodes up' needs the number of masters, e.g. 'redlock nodes up 3'");
    const auto& t = positional[1];
    std::size_t n = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    if (ec != std::errc{} || p != t.data() + t.size() || n < 1 || n > max_local_nodes) {
      throw usage_error(fmt::format("'nodes up': '{}' is not a number of masters in 1..{}", t, max_local_nodes));
    }
    o.count = n;
    if (o.shards && n * o.shards > max_local_nodes)
      throw usage_error(fmt::format("'nodes up {} --shards {}' would start {} servers; at most {}", n, o.shards,
                                    n * o.shards, max_local_nodes));
    if (!o.port_text.empty()) parse_port_option(o, o.shards ? n * o.shards : n);
  } else if (positional[0] == "down") {
    o.what = nodes_options::action::down;
    if (positional.size() > 1)
      throw usage_error(fmt::format("'nodes down' takes no argument, got '{}'", positional[1]));
  } else {
    throw usage_error(fmt::format("unknown 'nodes' action '{}' (use up N, down or list)", positional[0]));
  }
  return o;
}

// ---- configuration file -------------------------------------------------------------------------

file_settings parse_config_text(std::string_view text, std::string_view origin) {
  file_settings s;
  std::size_t line_no = 0;
  std::vector<std::string> seen;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    const auto line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto where = fmt::format("{}:{}", origin, line_no);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) throw config_error(fmt::format("{}: expected 'key = value'", where));
    const std::string key{trim(line.substr(0, eq))};
    auto value = trim(line.substr(eq + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (key.empty()) throw config_error(fmt::format("{}: missing key before '='", where));
    if (key == "password") {
      // Said without repeating the line: it holds the password.
      throw config_error(
          fmt::format("{}: passwords are not accepted in the configuration file; use 'password_file = PATH' or the "
                      "environment variable REDLOCK_PASSWORD",
                      where));
    }
    for (const auto& k : seen) {
      if (k == key) throw config_error(fmt::format("{}: '{}' is set twice", where, key));
    }
    seen.push_back(key);
    const auto text_value = [&]() {
      if (value.empty()) throw config_error(fmt::format("{}: empty value for '{}'", where, key));
      return std::string{value};
    };
    const auto duration_value = [&]() {
      std::string why;
      const auto d = parse_duration(value, &why);
      if (!d) throw config_error(fmt::format("{}: {}: '{}' is not a duration: {}", where, key, value, why));
      if (d->count() <= 0) throw config_error(fmt::format("{}: {} must be positive", where, key));
      return *d;
    };
    if (key == "nodes") {
      s.nodes = text_value();
    } else if (key == "username") {
      s.username = text_value();
    } else if (key == "password_file") {
      s.password_file = text_value();
    } else if (key == "key_prefix") {
      s.key_prefix = std::string{value};  // may be empty on purpose
    } else if (key == "request_timeout") {
      s.request_timeout = duration_value();
    } else if (key == "release_timeout") {
      s.release_timeout = duration_value();
    } else if (key == "connect_timeout") {
      s.connect_timeout = duration_value();
    } else if (key == "database") {
      int db = -1;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), db);
      if (ec != std::errc{} || p != value.data() + value.size() || db < 0) {
        throw config_error(fmt::format("{}: database: '{}' is not a database number", where, value));
      }
      s.database = db;
    } else if (key == "tls") {
      const auto b = parse_bool(value);
      if (!b) throw config_error(fmt::format("{}: tls: '{}' is not yes or no", where, value));
      s.tls = *b;
    } else if (key == "tls_ca_file") {
      s.tls_ca_file = text_value();
    } else if (key == "tls_ca_dir") {
      s.tls_ca_dir = text_value();
    } else if (key == "tls_cert_file") {
      s.tls_cert_file = text_value();
    } else if (key == "tls_key_file") {
      s.tls_key_file = text_value();
    } else if (key == "tls_server_name") {
      s.tls_server_name = text_value();
    } else {
      throw config_error(
          fmt::format("{}: unknown key '{}' (known: nodes, username, password_file, key_prefix, request_timeout, "
                      "release_timeout, connect_timeout, database, tls, tls_ca_file, tls_ca_dir, tls_cert_file, "
                      "tls_key_file, tls_server_name)",
                      where, key));
    }
  }
  return s;
}

// ---- the environment and files ------------------------------------------------------------------

env_lookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string{name}.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string{v};
  };
}

file_reader disk_reader() {
  return [](const std::string& path, std::string& why) -> std::optional<std::string> {
    std::ifstream in{path, std::ios::binary};
    if (!in) {
      why = std::strerror(errno);
      return std::nullopt;
    }
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) {
      why = "read error";
      return std::nullopt;
    }
    return text;
  };
}

// ---- resolution ---------------------------------------------------------------------------------

resolved_config resolve(const common_options& opts, const env_lookup& env, const file_reader& read,
                        const local_lookup& local) {
  resolved_config r;

  // The configuration file, when one is named.
  file_settings file;
  std::optional<std::string> config_path = opts.config_file;
  std::string config_origin = "--config";
  if (!config_path) {
    config_path = env("REDLOCK_CONFIG");
    config_origin = "REDLOCK_CONFIG";
  }
  if (config_path) {
    std::string why;
    const auto text = read(*config_path, why);
    if (!text)
      throw config_error(
          fmt::format("cannot read the configuration file '{}' (from {}): {}", *config_path, config_origin, why));
    file = parse_config_text(*text, *config_path);
    r.config_path = *config_path;
    r.notes.push_back(fmt::format("configuration file {} (from {})", *config_path, config_origin));
  }

  // The masters: flag > environment > file > local nodes.
  std::string list;
  if (opts.nodes) {
    list = *opts.nodes;
    r.origin = masters_origin::flag;
    r.origin_text = "--nodes";
  } else if (auto e = env("REDLOCK_NODES")) {
    list = *e;
    r.origin = masters_origin::environment;
    r.origin_text = "REDLOCK_NODES";
  } else if (file.nodes) {
    list = *file.nodes;
    r.origin = masters_origin::file;
    r.origin_text = fmt::format("the configuration file {}", r.config_path);
  } else if (auto l = local ? local() : std::nullopt) {
    list = *l;
    r.origin = masters_origin::local;
    r.origin_text = "the local nodes of 'redlock nodes up'";
  } else {
    throw config_error(
        "no masters configured: pass --nodes host:port,..., set REDLOCK_NODES, name them in a configuration file "
        "(--config FILE or REDLOCK_CONFIG), or start local ones with 'redlock nodes up 3'");
  }
  std::string what;
  if (parse_masters(list, r.client.masters, &what)) {
    throw config_error(fmt::format("bad list of masters from {}: {}", r.origin_text, what));
  }
  r.masters_text = list;
  r.notes.push_back(fmt::format("{} master{} from {}: {} (majority {})", r.client.masters.size(),
                                r.client.masters.size() == 1 ? "" : "s", r.origin_text, list,
                                majority_of(r.client.masters.size())));

  // Key prefix and timeouts.
  if (opts.prefix) {
    r.client.key_prefix = *opts.prefix;
  } else if (auto e = env("REDLOCK_PREFIX")) {
    r.client.key_prefix = *e;
  } else if (file.key_prefix) {
    r.client.key_prefix = *file.key_prefix;
  }
  if (!r.client.key_prefix.empty()) r.notes.push_back(fmt::format("key prefix '{}'", r.client.key_prefix));
  if (opts.request_timeout) {
    r.client.request_timeout = *opts.request_timeout;
  } else if (file.request_timeout) {
    r.client.request_timeout = *file.request_timeout;
  }
  if (file.release_timeout) r.client.release_timeout = *file.release_timeout;

  // The restart guard: flag > environment > the local nodes' default (off: 'redlock nodes up'
  // started them for experiments, and the guard would hold every first lock for a minute).
  if (opts.restart_guard) {
    (void)parse_restart_detection(*opts.restart_guard, r.client.guard.restarts);
  } else if (auto e = env("REDLOCK_RESTART_GUARD")) {
    if (!parse_restart_detection(*e, r.client.guard.restarts))
      throw config_error(fmt::format("REDLOCK_RESTART_GUARD '{}': expected run_id, reconnect or off", *e));
  } else if (r.origin == masters_origin::local) {
    r.client.guard.restarts = restart_detection::off;
    r.notes.push_back("restart guard off for the local nodes (--restart-guard run_id to turn it on)");
  }

  // Credentials: environment > file. The password itself never enters a message.
  std::string password;
  if (auto e = env("REDLOCK_PASSWORD")) {
    password = *e;
    r.password_origin = "REDLOCK_PASSWORD";
  } else if (file.password_file) {
    std::string why;
    auto text = read(*file.password_file, why);
    if (!text) throw config_error(fmt::format("cannot read the password file '{}': {}", *file.password_file, why));
    // One line: a trailing newline (as editors write it) is not part of the password.
    if (!text->empty() && text->back() == '\n') text->pop_back();
    if (!text->empty() && text->back() == '\r') text->pop_back();
    if (text->empty()) throw config_error(fmt::format("the password file '{}' is empty", *file.password_file));
    if (text->find('\n') != std::string::npos) {
      throw config_error(fmt::format("the password file '{}' holds more than one line", *file.password_file));
    }
    password = std::move(*text);
    r.password_origin = fmt::format("password_file {}", *file.password_file);
  }
  if (auto e = env("REDLOCK_USERNAME")) {
    r.username = *e;
  } else if (file.username) {
    r.username = *file.username;
  }
  if (!r.username.empty() && password.empty()) {
    throw config_error(
        fmt::format("an ACL user ('{}') is set but no password: set REDLOCK_PASSWORD or password_file", r.username));
  }
  if (!password.empty()) {
    r.notes.push_back(fmt::format("authenticating as {} with the password from {}",
                                  r.username.empty() ? std::string{"the default user"} : "user '" + r.username + "'",
                                  r.password_origin));
  }
  for (auto& m : r.client.masters) {
    m.username = r.username;
    m.password = password;
    if (file.connect_timeout) m.connect_timeout = *file.connect_timeout;
    if (file.database) m.database = *file.database;
  }
  r.notes.push_back(fmt::format("request timeout {}", format_duration(r.client.request_timeout)));

  // TLS: flag > environment > file, for the switch and for each setting. Each setting keeps
  // the name it was given by, so that a mistake is told in the user's words.
  struct tls_setting {
    std::optional<std::string> value;
    std::string origin;  // "--tls-cert", "REDLOCK_TLS_CERT_FILE", "tls_cert_file in FILE"
    explicit operator bool() const { return value.has_value(); }
    const std::string& operator*() const { return *value; }
  };
  const auto pick = [&](const std::optional<std::string>& flag, std::string_view flag_name, std::string_view env_name,
                        const std::optional<std::string>& from_file, std::string_view file_key) -> tls_setting {
    if (flag) return {flag, std::string{flag_name}};
    if (auto e = env(env_name)) return {e, std::string{env_name}};
    if (from_file) return {from_file, fmt::format("{} in {}", file_key, r.config_path)};
    return {std::nullopt, std::string{flag_name}};
  };
  bool tls_all = opts.tls;
  if (!tls_all) {
    if (auto e = env("REDLOCK_TLS")) {
      const auto b = parse_bool(*e);
      if (!b) throw config_error(fmt::format("REDLOCK_TLS: '{}' is not yes or no", *e));
      tls_all = *b;
    } else if (file.tls) {
      tls_all = *file.tls;
    }
  }
  const auto ca_file = pick(opts.tls_ca_file, "--tls-ca-file", "REDLOCK_TLS_CA_FILE", file.tls_ca_file, "tls_ca_file");
  const auto ca_dir = pick(opts.tls_ca_dir, "--tls-ca-dir", "REDLOCK_TLS_CA_DIR", file.tls_ca_dir, "tls_ca_dir");
  const auto cert_file =
      pick(opts.tls_cert_file, "--tls-cert", "REDLOCK_TLS_CERT_FILE", file.tls_cert_file, "tls_cert_file");
  const auto key_file = pick(opts.tls_key_file, "--tls-key", "REDLOCK_TLS_KEY_FILE", file.tls_key_file, "tls_key_file");
  const auto server_name = pick(opts.tls_server_name, "--tls-server-name", "REDLOCK_TLS_SERVER_NAME",
                                file.tls_server_name, "tls_server_name");
  std::size_t tls_masters = 0;
  for (auto& m : r.client.masters) {
    if (tls_all && m.unix_socket.empty()) m.tls.enabled = true;
    if (!m.tls.enabled) continue;
    ++tls_masters;
    if (ca_file) m.tls.ca_file = *ca_file;
    if (ca_dir) m.tls.ca_dir = *ca_dir;
    if (cert_file) m.tls.cert_file = *cert_file;
    if (key_file) m.tls.key_file = *key_file;
    if (server_name) m.tls.server_name = *server_name;
  }
  if (tls_masters == 0 && (ca_file || ca_dir || cert_file || key_file || server_name)) {
    // Settings that would be silently ignored are a mistake: the user expects TLS.
    throw config_error(
        "TLS settings are given but no master uses TLS: list the masters as rediss://host:port or add --tls "
        "(REDLOCK_TLS=yes, 'tls = yes')");
  }
  // Checked here rather than by the library, whose message names its own fields.
  if (tls_masters > 0 && cert_file && !key_file) {
    throw config_error(
        fmt::format("{} without --tls-key: a client certificate needs its private key (--tls-key FILE, "
                    "REDLOCK_TLS_KEY_FILE or tls_key_file)",
                    cert_file.origin));
  }
  if (tls_masters > 0 && key_file && !cert_file) {
    throw config_error(
        fmt::format("{} without --tls-cert: a private key needs its client certificate (--tls-cert FILE, "
                    "REDLOCK_TLS_CERT_FILE or tls_cert_file)",
                    key_file.origin));
  }
  if (tls_masters > 0) {
    r.notes.push_back(fmt::format(
        "TLS to {} master{}, trusting {}{}{}", tls_masters, tls_masters == 1 ? "" : "s",
        ca_file || ca_dir
            ? fmt::format("{}{}{}", ca_file ? *ca_file : "", ca_file && ca_dir ? " and " : "", ca_dir ? *ca_dir : "")
            : std::string{"the system's CA store"},
        server_name ? fmt::format(", server name {}", *server_name) : std::string{},
        cert_file ? fmt::format(", client certificate {}", *cert_file) : std::string{}));
  }

  if (validate(r.client, &what)) {
    // The library names its configuration fields (tls.ca_file, ...): said with the names the
    // settings were given by.
    for (const auto* s : {&ca_file, &ca_dir, &cert_file, &key_file, &server_name}) {
      const std::string field = s == &ca_file     ? "tls.ca_file"
                                : s == &ca_dir    ? "tls.ca_dir"
                                : s == &cert_file ? "tls.cert_file"
                                : s == &key_file  ? "tls.key_file"
                                                  : "tls.server_name";
      for (auto at = what.find(field); at != std::string::npos; at = what.find(field, at + s->origin.size())) {
        what.replace(at, field.size(), s->origin);
      }
    }
    throw config_error(fmt::format("invalid configuration: {}", what));
  }
  return r;
}

}  // namespace redlock::cli
