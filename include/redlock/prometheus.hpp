// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The counters of `client_stats` in the Prometheus text exposition format (version 0.0.4), for
/// a `/metrics` endpoint, a node_exporter textfile, or `redlock status --metrics`.

#include <redlock/observe.hpp>

#include <boost/system/error_code.hpp>

#include <string>
#include <utility>
#include <vector>

namespace redlock {

class client;

/// How `to_prometheus` names and labels the series.
struct prometheus_options {
  /// Put before every metric name with an underscore: "redlock" gives `redlock_locks_total`.
  /// Characters a metric name cannot hold are written as '_' (see `validate`).
  std::string prefix = "redlock";
  /// The `master` label value of each master, in the order of `client_config::masters` (e.g.
  /// `address_of(cfg.masters[i])`). A master without an entry is labelled by its index ("0", "1"...).
  std::vector<std::string> masters;
  /// Labels added to every sample, e.g. `{{"service", "billing"}}`: name, then value (any text;
  /// escaped as the format requires). Names must be valid label names (see `validate`).
  std::vector<std::pair<std::string, std::string>> labels;
  /// Also write each master's connection counters (about 25 series per master, with a `master`
  /// label). Off: the client's own counters only.
  bool per_master = true;
};

/// Checks `opts`: `error::invalid_argument` (with `what` saying which name and why) when the
/// prefix or a label name is not a valid Prometheus name, or a label name is reserved (starts with
/// "__", or is "master", "outcome" or "le", which the exposition uses itself).
boost::system::error_code validate(const prometheus_options& opts, std::string* what = nullptr);

/// @brief Appends `stats` to `out` in the Prometheus text format: one `# HELP` and `# TYPE` line
/// per metric family, then its samples.
///
/// Counters end in `_total`; the two latency histograms (`acquire_duration_seconds`,
/// `master_request_duration_seconds`) have a bucket at every power of two of microseconds from
/// 1 µs to 2^25 µs (~33.6 s), then `+Inf`, exact because the snapshot's buckets nest in them.
/// Every series is written even when zero, so that rates start from the first scrape. Invalid
/// names are repaired as described in `prometheus_options`, never rejected: check them once with
/// `validate`. Label values are escaped; HELP texts are fixed.
void append_prometheus(std::string& out, const client_stats& stats, const prometheus_options& opts = {});

/// As `append_prometheus`, into a new string.
std::string to_prometheus(const client_stats& stats, const prometheus_options& opts = {});

/// @brief The client's counters (`client::stats()`) as `to_prometheus` writes them, plus a gauge
/// `master_up` (1 while a master's connection is up, else 0) per master.
///
/// Masters without a label in `opts.masters` are labelled by their address (`address_of`). From
/// any thread, like `client::stats()`.
std::string to_prometheus(const client& c, prometheus_options opts = {});

}  // namespace redlock
