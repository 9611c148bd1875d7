// SPDX-License-Identifier: BSL-1.0
// client_stats in the Prometheus text exposition format (0.0.4).

#include <redlock/client.hpp>
#include <redlock/connection.hpp>
#include <redlock/error.hpp>
#include <redlock/prometheus.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

namespace redlock {

namespace {

bool name_char(char c, bool first, bool colon_ok) noexcept {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}

bool valid_name(std::string_view s, bool colon_ok) noexcept {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!name_char(s[i], i == 0, colon_ok)) return false;
  }
  return true;
}

// The name with every character a name cannot hold written as '_' (a leading digit too).
std::string repaired(std::string_view s, bool colon_ok) {
  std::string out{s};
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!name_char(out[i], i == 0, colon_ok)) out[i] = '_';
  }
  return out;
}

// The label names the exposition writes itself; a user label of one of these names, or of a name
// starting with "__" (Prometheus's own), is written with `renamed_prefix` before it.
constexpr std::array<std::string_view, 3> own_labels{"le", "master", "outcome"};
constexpr std::string_view renamed_prefix = "label_";

bool reserved_label(std::string_view name) noexcept {
  return name.starts_with("__") || std::find(own_labels.begin(), own_labels.end(), name) != own_labels.end();
}

// The name a user label is written as, before duplicates get their suffix (see
// `prometheus_options::labels`): repaired, "_" if empty, renamed if reserved.
std::string written_label(std::string_view name) {
  std::string out = name.empty() ? std::string{"_"} : repaired(name, false);
  if (reserved_label(out)) out.insert(0, renamed_prefix);
  return out;
}

void append_escaped(std::string& out, std::string_view value) {
  for (const char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

// Writes the families; `labels` is the rendered common label list ("service=\"x\"", no braces).
class writer {
 public:
  writer(std::string& out, const prometheus_options& opts) : out_(out) {
    prefix_ = opts.prefix.empty() ? std::string{} : repaired(opts.prefix, true) + "_";
    // Neither reserved (see `written_label`) nor, with the first free suffix "_2", "_3"..., taken by
    // an earlier label. A suffixed name ends in a digit and starts as its base: never reserved.
    std::vector<std::string> taken;
    taken.reserve(opts.labels.size());
    for (const auto& [name, value] : opts.labels) {
      const auto base = written_label(name);
      std::string unique = base;
      for (unsigned k = 2; std::find(taken.begin(), taken.end(), unique) != taken.end(); ++k) {
        unique = fmt::format("{}_{}", base, k);
      }
      if (!common_.empty()) common_ += ',';
      common_ += unique;
      taken.push_back(std::move(unique));
      common_ += "=\"";
      append_escaped(common_, value);
      common_ += '"';
    }
  }

  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {}{} {}\n# TYPE {}{} {}\n", prefix_, name, help, prefix_, name,
                   type);
  }

  // One sample; `extra` is a rendered label list (may be empty).
  void sample(std::string_view name, std::string_view extra, std::uint64_t value) {
    begin(name, extra);
    fmt::format_to(std::back_inserter(out_), " {}\n", value);
  }
  void sample(std::string_view name, std::string_view extra, double value) {
    begin(name, extra);
    if (value == std::numeric_limits<double>::infinity()) {
      out_ += " +Inf\n";  // the exposition format's spelling
      return;
    }
    fmt::format_to(std::back_inserter(out_), " {}\n", value);
  }

  void counter(std::string_view name, std::string_view help, std::uint64_t value) {
    family(name, "counter", help);
    sample(name, {}, value);
  }

  // Cumulative buckets at every power of two of microseconds (each nests whole snapshot buckets).
  void histogram_samples(std::string_view name, std::string_view extra, const latency_histogram& h) {
    const std::string bucket = fmt::format("{}_bucket", name);
    std::uint64_t below = 0;
    std::size_t b = 0;
    for (unsigned e = 0; e <= latency_histogram::max_exponent; ++e) {
      const std::uint64_t bound = std::uint64_t{1} << e;
      while (b < latency_histogram::bucket_count && latency_histogram::upper_bound_us(b) <= bound) {
        below += h.buckets[b++];
      }
      with_le(bucket, extra, fmt::format("{}", static_cast<double>(bound) / 1e6), below);
    }
    with_le(bucket, extra, "+Inf", h.count);
    sample(fmt::format("{}_sum", name), extra, static_cast<double>(h.sum.count()) / 1e6);
    sample(fmt::format("{}_count", name), extra, h.count);
  }

 private:
  void begin(std::string_view name, std::string_view extra) {
    out_ += prefix_;
    out_ += name;
    if (common_.empty() && extra.empty()) return;
    out_ += '{';
    out_ += common_;
    if (!common_.empty() && !extra.empty()) out_ += ',';
    out_ += extra;
    out_ += '}';
  }
  void with_le(std::string_view bucket, std::string_view extra, std::string_view le, std::uint64_t value) {
    std::string labels{extra};
    if (!labels.empty()) labels += ',';
    labels += fmt::format("le=\"{}\"", le);
    sample(bucket, labels, value);
  }

  std::string& out_;
  std::string prefix_;
  std::string common_;
};

std::string master_label(const prometheus_options& opts, std::size_t i) {
  std::string out = "master=\"";
  append_escaped(out, i < opts.masters.size() ? std::string_view{opts.masters[i]} : std::to_string(i));
  out += '"';
  return out;
}

void write_masters(writer& w, const client_stats& s, const prometheus_options& opts) {
  const auto n = s.masters.size();
  std::vector<std::string> label(n);
  for (std::size_t i = 0; i < n; ++i) label[i] = master_label(opts, i);

  // One family, one sample per master, read through `field`.
  const auto per_master = [&](std::string_view name, std::string_view type, std::string_view help, auto field) {
    w.family(name, type, help);
    for (std::size_t i = 0; i < n; ++i) w.sample(name, label[i], static_cast<std::uint64_t>(field(s.masters[i])));
  };
  per_master("master_requests_total", "counter", "Requests given to the master's connection.",
             [](const connection_stats& m) { return m.requests; });

  w.family("master_request_outcomes_total", "counter",
           "Requests by outcome: ok, server_error, timeout, not_connected, connection_lost, protocol_error, "
           "cancelled, aborted, invalid.");
  for (std::size_t i = 0; i < n; ++i) {
    const auto& m = s.masters[i];
    const std::array<std::pair<std::string_view, std::uint64_t>, 9> outcomes{{{"ok", m.ok},
                                                                              {"server_error", m.server_errors},
                                                                              {"timeout", m.timeouts},
                                                                              {"not_connected", m.not_connected},
                                                                              {"connection_lost", m.connection_lost},
                                                                              {"protocol_error", m.protocol_errors},
                                                                              {"cancelled", m.cancelled},
                                                                              {"aborted", m.aborted},
                                                                              {"invalid", m.invalid}}};
    for (const auto& [outcome, value] : outcomes) {
      w.sample("master_request_outcomes_total", fmt::format("{},outcome=\"{}\"", label[i], outcome), value);
    }
  }
  per_master("master_requests_in_progress", "gauge", "Requests without an outcome yet.",
             [](const connection_stats& m) { return m.in_progress(); });
  per_master("master_written_requests_total", "counter", "Requests written to the socket.",
             [](const connection_stats& m) { return m.written; });
  per_master("master_replies_total", "counter", "Top-level replies read, dropped ones included.",
             [](const connection_stats& m) { return m.replies; });
  per_master("master_dropped_replies_total", "counter",
             "Replies read and dropped because their request had timed out or been cancelled.",
             [](const connection_stats& m) { return m.dropped_replies; });
  per_master("master_pushes_total", "counter", "RESP3 push messages received.",
             [](const connection_stats& m) { return m.pushes; });
  per_master("master_written_bytes_total", "counter", "Bytes written to the socket, handshakes included.",
             [](const connection_stats& m) { return m.bytes_written; });
  per_master("master_read_bytes_total", "counter", "Bytes read from the socket, handshakes included.",
             [](const connection_stats& m) { return m.bytes_read; });
  per_master("master_connect_attempts_total", "counter", "Connection attempts (connect and handshake) started.",
             [](const connection_stats& m) { return m.connect_attempts; });
  per_master("master_connects_total", "counter", "Connection attempts that ended with the connection up.",
             [](const connection_stats& m) { return m.connects; });
  per_master("master_connect_failures_total", "counter", "Connection attempts that failed.",
             [](const connection_stats& m) { return m.connect_failures; });
  per_master("master_auth_failures_total", "counter", "Connection attempts refused on credentials.",
             [](const connection_stats& m) { return m.auth_failures; });
  per_master("master_disconnects_total", "counter", "Established connections that failed.",
             [](const connection_stats& m) { return m.disconnects; });
  per_master("master_stalls_total", "counter",
             "Connections closed by stall detection (a request unanswered well past its deadline).",
             [](const connection_stats& m) { return m.stalls; });
  per_master("master_redirects_total", "counter", "Cluster masters: requests sent again after MOVED or ASK.",
             [](const connection_stats& m) { return m.redirects; });
  per_master("master_cluster_retries_total", "counter",
             "Cluster masters: requests retried after TRYAGAIN or CLUSTERDOWN.",
             [](const connection_stats& m) { return m.cluster_retries; });
  per_master("master_slot_map_reads_total", "counter", "Cluster masters: reads of the slot map.",
             [](const connection_stats& m) { return m.slot_map_reads; });
  per_master("master_failovers_total", "counter", "Cluster masters: failovers seen (each quarantines the cluster).",
             [](const connection_stats& m) { return m.failovers; });
  per_master("master_log_messages_total", "counter", "Log messages formatted by the master's connection.",
             [](const connection_stats& m) { return m.log_messages; });

  // The hazard guards (docs/safety.md, "Restarts and clock jumps"), when the snapshot has them.
  if (s.hazards.size() == n) {
    const auto now = clock::now();
    const auto per_guard = [&](std::string_view name, std::string_view type, std::string_view help, auto field) {
      w.family(name, type, help);
      for (std::size_t i = 0; i < n; ++i) w.sample(name, label[i], field(s.hazards[i]));
    };
    per_guard("master_quarantine_seconds", "gauge",
              "Seconds until the master's votes count again (restarted or clock jumped; 0: they count; +Inf: "
              "INFO refused).",
              [&](const master_hazard& h) {
                if (h.cause == hazard_cause::info_refused) return std::numeric_limits<double>::infinity();
                return h.quarantined_until > now ? std::chrono::duration<double>(h.quarantined_until - now).count()
                                                 : 0.0;
              });
    per_guard("master_unguarded", "gauge",
              "1 when the master is not guarded against restarts (restart_detection::off) or clock jumps (TIME "
              "refused, or clock checks off).",
              [](const master_hazard& h) { return std::uint64_t{h.unguarded ? 1u : 0u}; });
    per_guard("master_restarts_total", "counter", "Restarts of the master the client detected.",
              [](const master_hazard& h) { return h.restarts; });
    per_guard("master_clock_jumps_total", "counter", "Forward jumps of the master's wall clock the client detected.",
              [](const master_hazard& h) { return h.clock_jumps; });
  }

  w.family("master_request_duration_seconds", "histogram",
           "From a request reaching the connection to its reply, for requests answered.");
  for (std::size_t i = 0; i < n; ++i)
    w.histogram_samples("master_request_duration_seconds", label[i], s.masters[i].latency);
}

}  // namespace

boost::system::error_code validate(const prometheus_options& opts, std::string* what) {
  std::vector<std::string> problems;
  if (!opts.prefix.empty() && !valid_name(opts.prefix, true)) {
    problems.push_back(fmt::format("prefix \"{}\" is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), written as \"{}\"",
                                   opts.prefix, repaired(opts.prefix, true)));
  }
  for (std::size_t i = 0; i < opts.labels.size(); ++i) {
    const std::string_view name = opts.labels[i].first;
    const auto same = [&](const auto& label) { return label.first == name; };
    if (std::any_of(opts.labels.begin(), opts.labels.begin() + static_cast<std::ptrdiff_t>(i), same)) {
      continue;  // reported at its first occurrence
    }
    if (!valid_name(name, false)) {
      problems.push_back(fmt::format("label \"{}\" is not a label name ([a-zA-Z_][a-zA-Z0-9_]*), written as \"{}\"",
                                     name, written_label(name)));
    }
    if (reserved_label(name)) {
      problems.push_back(fmt::format(
          "label \"{}\" is reserved ({}), written as \"{}\"", name,
          name.starts_with("__") ? "names starting with \"__\" are Prometheus's" : "the exposition writes it",
          written_label(name)));
    }
    if (const auto n = std::count_if(opts.labels.begin(), opts.labels.end(), same); n > 1) {
      problems.push_back(fmt::format("label \"{}\" is given {} times", name, n));
    }
  }
  if (problems.empty()) return {};
  if (what) {
    what->clear();
    for (const auto& p : problems) {
      if (!what->empty()) *what += "; ";
      *what += p;
    }
  }
  return make_error_code(error::invalid_argument);
}

void append_prometheus(std::string& out, const client_stats& s, const prometheus_options& opts) {
  writer w{out, opts};
  w.counter("lock_operations_total", "async_lock and async_try_lock operations started.", s.lock_operations);
  w.counter("lock_attempts_total", "Rounds of acquisition requests to every master, retries included.",
            s.lock_attempts);
  w.family("lock_outcomes_total", "counter",
           "Lock operations by outcome: acquired, not_acquired, quorum_unavailable, validity_expired, aborted, "
           "rejected.");
  const std::array<std::pair<std::string_view, std::uint64_t>, 6> outcomes{
      {{"acquired", s.locks_acquired},
       {"not_acquired", s.locks_not_acquired},
       {"quorum_unavailable", s.locks_quorum_unavailable},
       {"validity_expired", s.locks_validity_expired},
       {"aborted", s.locks_aborted},
       {"rejected", s.locks_rejected}}};
  for (const auto& [outcome, value] : outcomes) {
    w.sample("lock_outcomes_total", fmt::format("outcome=\"{}\"", outcome), value);
  }
  w.counter("extensions_total", "Successful extensions (async_extend and keep-alive).", s.extensions);
  w.counter("extension_failures_total", "Failed extensions (no quorum, not the owner, too late).",
            s.extension_failures);
  w.counter("locks_lost_total", "Held locks lost.", s.locks_lost);
  w.counter("releases_total", "async_unlock calls that reached a majority of masters.", s.releases);
  w.counter("release_failures_total", "async_unlock calls that did not reach a majority.", s.release_failures);
  w.counter("background_releases_total", "Held locks released in the background (handle destroyed).",
            s.background_releases);
  w.counter("releases_resent_total", "Releases sent again on a master's new connection.", s.releases_resent);
  w.counter("releases_expired_total", "Releases dropped unsent because every key they covered had expired.",
            s.releases_expired);
  w.counter("lock_wakeups_total", "Fair hand-over: attempts started early because the masters woke the waiter.",
            s.lock_wakeups);
  w.counter("lock_handovers_total", "Fair hand-over: lock operations that the releasing holder handed the lock to.",
            s.lock_handovers);
  w.counter("locks_queued_total", "Fair hand-over: lock operations that queued behind other waiters.", s.locks_queued);
  w.counter("fence_confirmations_total", "Fenced locks whose fence was confirmed in a second round trip.",
            s.fence_confirmations);
  w.counter("fences_unverified_total", "Fenced locks whose fence rests on the masters' clocks alone.",
            s.fences_unverified);
  w.counter("votes_quarantined_total",
            "Grants and extensions not counted: their master was quarantined or refused INFO.", s.votes_quarantined);
  w.counter("client_pauses_total", "Times the client's own clock was found to have stood still.", s.client_pauses);
  w.counter("keep_alive_passes_split_total",
            "Keep-alive timer passes that woke their most and left wake-ups due to the next pass.",
            s.keep_alive_passes_split);
  w.counter("log_messages_total", "Log messages formatted by the client itself.", s.log_messages);
  w.counter("log_sink_errors_total", "Exceptions thrown by the log sink (client and masters).",
            s.log_sink_errors + s.total().log_sink_errors);
  w.family("acquire_duration_seconds", "histogram", "Successful acquisitions: from the call to the lock.");
  w.histogram_samples("acquire_duration_seconds", {}, s.acquire_latency);
  if (opts.per_master) write_masters(w, s, opts);
}

std::string to_prometheus(const client_stats& stats, const prometheus_options& opts) {
  std::string out;
  append_prometheus(out, stats, opts);
  return out;
}

std::string to_prometheus(const client& c, prometheus_options opts) {
  const auto& masters = c.config().masters;
  for (std::size_t i = opts.masters.size(); i < masters.size(); ++i) opts.masters.push_back(address_of(masters[i]));
  std::string out;
  append_prometheus(out, c.stats(), opts);
  if (!opts.per_master) return out;
  const auto states = c.masters();
  writer w{out, opts};
  w.family("master_up", "gauge", "1 while the master's connection is up, else 0.");
  for (std::size_t i = 0; i < states.size(); ++i) {
    w.sample("master_up", master_label(opts, i), std::uint64_t{states[i].state == connection_state::up ? 1u : 0u});
  }
  return out;
}

}  // namespace redlock
