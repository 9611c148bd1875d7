// SPDX-License-Identifier: BSL-1.0
// The lock client's checks of its configuration and of each operation's arguments, and the words
// its log messages use for locks and masters (no I/O).

#include "detail/client_state.hpp"
#include "detail/completion.hpp"
#include "detail/log.hpp"
#include <redlock/core/key_slot.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/detail/token.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/container/small_vector.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <set>

namespace redlock {

boost::system::error_code validate(const client_config& cfg, std::string* what) {
  auto bad = [&](std::string field) {
    if (what) *what = std::move(field);
    return make_error_code(error::invalid_config);
  };
  if (cfg.masters.empty()) return bad("no masters");
  if (cfg.masters.size() > 0xffff) return bad("more than 65535 masters");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < cfg.masters.size(); ++i) {
    const auto& m = cfg.masters[i];
    std::string inner;
    if (validate(m, &inner)) return bad("master " + std::to_string(i + 1) + ": " + inner);
    const auto id = m.unix_socket.empty() ? m.host + ":" + std::to_string(m.port) : "unix:" + m.unix_socket;
    // Two entries for one server would let one master cast two votes; another database of the same
    // server is the same master. (Aliases of one host under different names cannot be seen here.)
    if (!seen.insert(id).second) return bad("master listed twice: " + id);
  }
  if (cfg.request_timeout <= std::chrono::milliseconds::zero()) return bad("request_timeout is not positive");
  if (cfg.release_timeout <= std::chrono::milliseconds::zero()) return bad("release_timeout is not positive");
  if (!(cfg.drift.factor >= 0.0 && cfg.drift.factor < 1.0)) return bad("drift.factor outside [0, 1)");
  if (cfg.drift.fixed < std::chrono::milliseconds::zero()) return bad("drift.fixed is negative");
  if (cfg.retry.base_delay < std::chrono::milliseconds::zero() ||
      cfg.retry.jitter < std::chrono::milliseconds::zero() || cfg.retry.max_wait < std::chrono::milliseconds::zero())
    return bad("retry delays must not be negative");
  if (cfg.fairness.entry_timeout < std::chrono::milliseconds::zero()) return bad("fairness.entry_timeout is negative");
  if (cfg.fairness.entry_timeout > std::chrono::milliseconds::zero() &&
      cfg.fairness.entry_timeout <= cfg.retry.base_delay + cfg.retry.jitter + cfg.request_timeout)
    return bad("fairness.entry_timeout must exceed retry.base_delay + retry.jitter + request_timeout");
  if (cfg.max_resource_length == 0) return bad("max_resource_length is 0");
  if (cfg.max_ttl <= std::chrono::milliseconds::zero() || cfg.max_ttl > std::chrono::hours{24 * 366})
    return bad("max_ttl outside (0, 366 days]");
  if (cfg.guard.restarts != restart_detection::run_id && cfg.guard.restarts != restart_detection::reconnect &&
      cfg.guard.restarts != restart_detection::off)
    return bad("guard.restarts is not a restart_detection value");
  if (cfg.guard.quarantine < std::chrono::milliseconds::zero()) return bad("guard.quarantine is negative");
  if (cfg.guard.quarantine > std::chrono::milliseconds::zero() && cfg.guard.quarantine < cfg.max_ttl)
    return bad("guard.quarantine is shorter than max_ttl: a lock granted before a restart could outlive it");
  if (cfg.guard.clock_probe_interval < std::chrono::milliseconds::zero())
    return bad("guard.clock_probe_interval is negative");
  if (what) what->clear();
  return {};
}

bool parse_restart_detection(std::string_view text, restart_detection& out) noexcept {
  if (text == "run_id") {
    out = restart_detection::run_id;
  } else if (text == "reconnect") {
    out = restart_detection::reconnect;
  } else if (text == "off") {
    out = restart_detection::off;
  } else {
    return false;
  }
  return true;
}

std::chrono::milliseconds restart_quarantine(const client_config& cfg) noexcept {
  if (cfg.guard.quarantine > std::chrono::milliseconds::zero()) return cfg.guard.quarantine;
  // A key set just before the restart lives max_ttl on a master whose clock may run a little
  // fast against ours; then a second for uptime's whole-second precision.
  return cfg.max_ttl + std::chrono::ceil<std::chrono::milliseconds>(core::drift(cfg.max_ttl, cfg.drift)) +
         std::chrono::seconds{1};
}

std::chrono::milliseconds queue_entry_timeout(const client_config& cfg) noexcept {
  if (cfg.fairness.entry_timeout > std::chrono::milliseconds::zero()) return cfg.fairness.entry_timeout;
  const auto derived = 2 * (cfg.retry.base_delay + cfg.retry.jitter) + cfg.request_timeout;
  return std::max(derived, std::chrono::milliseconds{500});
}

boost::system::error_code validate_lock(const client_config& cfg, std::string_view resource,
                                        std::chrono::milliseconds ttl, const lock_options& opts, std::string* what) {
  if (auto ec = validate(cfg, what)) return ec;
  if (auto ec = detail::check_resource(cfg, resource, what)) return ec;
  if (auto ec = detail::check_ttl_of(cfg, ttl, what)) return ec;
  if (!detail::check_kind(opts.kind, opts.permits, opts.fence, opts.owner, false, what))
    return make_error_code(error::invalid_argument);
  if (what) what->clear();
  return {};
}

namespace detail {

// The reasons behind error::invalid_argument: each check fills `what` only when it fails.
namespace {
// With a cluster master in the fleet, the lock key must have a slotted form (core::key_slot.hpp).
error_code check_slotted(const client_config& cfg, std::string_view resource, std::string* what) {
  if (std::none_of(cfg.masters.begin(), cfg.masters.end(), [](const auto& m) { return m.cluster.enabled; })) return {};
  std::string key;
  std::string_view lock_key = resource;
  if (!cfg.key_prefix.empty()) {
    key = cfg.key_prefix;
    key += resource;
    lock_key = key;
  }
  const auto problem = core::slotted_key_problem(lock_key);
  if (problem.empty()) return {};
  if (what) *what = fmt::format("the lock key \"{}\" {}", printable(lock_key, 64), problem);
  return error::invalid_argument;
}
}  // namespace

error_code check_resource(const client_config& cfg, std::string_view resource, std::string* what) {
  if (resource.empty()) {
    if (what) *what = "resource is empty";
    return error::invalid_argument;
  }
  if (resource.size() > cfg.max_resource_length) {
    if (what)
      *what = fmt::format("resource is {} bytes, longer than max_resource_length ({})", resource.size(),
                          cfg.max_resource_length);
    return error::invalid_argument;
  }
  // The lock key is the prefix and the resource: checked whole, so that no prefix can help a name
  // end like a helper key either. Every suffix is ":redlock-" and a word, 14 to 16 bytes: only the
  // key's last 16 bytes matter, and a name without ':' 14 to 16 bytes from its end (nearly all)
  // costs three comparisons.
  constexpr std::size_t longest = 16;
  static_assert(std::ranges::all_of(helper_suffixes, [](std::string_view x) {
    return x.starts_with(":redlock-") && x.size() >= 14 && x.size() <= longest;
  }));
  char buf[longest];
  const std::size_t from_resource = std::min(resource.size(), longest);
  const std::size_t from_prefix = std::min(cfg.key_prefix.size(), longest - from_resource);
  std::copy_n(cfg.key_prefix.end() - static_cast<std::ptrdiff_t>(from_prefix), from_prefix, buf);
  std::copy_n(resource.end() - static_cast<std::ptrdiff_t>(from_resource), from_resource, buf + from_prefix);
  const std::string_view tail{buf, from_prefix + from_resource};
  if (auto ec = check_slotted(cfg, resource, what)) return ec;
  const auto colon_at = [&tail](std::size_t back) { return tail.size() >= back && tail[tail.size() - back] == ':'; };
  if (!colon_at(14) && !colon_at(15) && !colon_at(16)) return {};
  for (const auto suffix : helper_suffixes) {
    if (!tail.ends_with(suffix)) continue;
    if (what)
      *what =
          fmt::format("the lock key ends with \"{}\"{}: reserved for the keys the lock kinds keep beside a lock key",
                      suffix, resource.ends_with(suffix) ? "" : " (key prefix and resource together)");
    return error::invalid_argument;
  }
  return {};
}

error_code check_ttl_of(const client_config& cfg, std::chrono::milliseconds ttl, std::string* what) {
  const auto ec = core::check_ttl(ttl, cfg.max_ttl, cfg.request_timeout, cfg.drift);
  if (ec && what) {
    if (ttl <= std::chrono::milliseconds::zero()) {
      *what = fmt::format("ttl {} ms is not positive", ttl.count());
    } else if (ttl > cfg.max_ttl) {
      *what = fmt::format("ttl {} ms is above max_ttl ({} ms): keep a lock longer with keep_alive", ttl.count(),
                          cfg.max_ttl.count());
    } else {
      *what = fmt::format("ttl {} ms leaves no validity: drift {} + request_timeout {} ms", ttl.count(),
                          format_duration(core::drift(ttl, cfg.drift)), cfg.request_timeout.count());
    }
  }
  return ec;
}

namespace {

// An owner id is sent as a script argument and stored as the key's value: printable, no blanks,
// and not one of the library's own marker values (see reserved_value_prefix).
bool valid_owner(std::string_view o) noexcept {
  if (o.empty() || o.size() > 256 || o.starts_with(reserved_value_prefix)) return false;
  return std::all_of(o.begin(), o.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f;
  });
}

}  // namespace

const core::kind_spec* check_kind(lock_kind kind, std::size_t permits, bool fence, std::string_view owner, bool multi,
                                  std::string* what) {
  const auto bad = [what](std::string_view w) -> const core::kind_spec* {
    if (what) *what = w;
    return nullptr;
  };
  std::string_view why;
  const auto* spec = core::find_kind(kind, fence, !owner.empty(), multi, &why);
  if (!spec) return bad(why);
  if (!spec->semaphore_quorum && permits != 1) return bad("permits other than 1 without the semaphore kind");
  if (spec->semaphore_quorum && (permits == 0 || permits > (std::size_t{1} << 20)))
    return bad("permits outside [1, 2^20]");
  if (!owner.empty() && !valid_owner(owner))
    return bad("owner: 1 to 256 bytes, no blanks or control characters, not beginning with \"redlock:\"");
  return spec;
}

// ---- log text -----------------------------------------------------------------------------------

std::string lock_name(std::string_view resource, std::string_view token) {
  std::string out = fmt::format("lock \"{}\"", printable(resource, 128));
  if (!token.empty()) fmt::format_to(std::back_inserter(out), " [{}]", short_token(token));
  return out;
}

// Server texts are untrusted: made printable, and the lock's token is redacted should a server
// echo it.
std::string describe_masters(const core::compact_results& results, std::string_view token) {
  std::string out;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto n = results.result(i);
    if (i) out += ", ";
    fmt::format_to(std::back_inserter(out), "{} {}", i + 1, status_text(n.status));
    if (n.status == master_status::server_error) {
      fmt::format_to(std::back_inserter(out), " \"{}\"", printable(n.server_text, 160, {token}));
    } else if ((n.status == master_status::failed || n.status == master_status::unreachable) && n.error &&
               n.error != error::not_connected) {
      fmt::format_to(std::back_inserter(out), " ({})", describe(n.error));
    }
    if (n.status != master_status::pending && n.status != master_status::unreachable) {
      fmt::format_to(std::back_inserter(out), " {}", format_duration(n.latency));
    }
  }
  return out;
}

}  // namespace detail
}  // namespace redlock
