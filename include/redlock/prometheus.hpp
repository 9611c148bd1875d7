// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The counters of `client_stats` in the Prometheus text exposition format (version 0.0.4), for
/// a `/metrics` endpoint (`examples/metrics_endpoint.cpp` serves one) or a node_exporter textfile.

#include <redlock/export.hpp>
#include <redlock/observe.hpp>

#include <boost/system/error_code.hpp>

#include <string>
#include <utility>
#include <vector>

namespace redlock {

class client;

/// How `to_prometheus` names and labels the series.
struct prometheus_options {
  /// Put before every metric name with an underscore: "redlock" gives
  /// `redlock_lock_operations_total`; empty: no prefix. Characters a metric name cannot hold are
  /// written as '_', a leading digit too (see `validate`).
  std::string prefix = "redlock";
  /// The `master` label value of each master, in the order of `client_config::masters` (e.g.
  /// `address_of(cfg.masters[i])`). A master without an entry is labelled by its index ("0", "1"...).
  std::vector<std::string> masters;
  /// Labels added to every sample, before the library's own, e.g. `{{"service", "billing"}}`:
  /// name, then value (any text; escaped as the format requires).
  ///
  /// When `validate(opts)` succeeds, every name is written as given. Otherwise the names are
  /// repaired, never rejected, in three steps, so that no sample holds a label name twice and the
  /// library's own labels always mean what they say:
  /// 1. every character a label name cannot hold is written as '_', a leading digit too, and an
  ///    empty name as "_": "1zone" gives `_zone`, "a-b" `a_b`;
  /// 2. a reserved name gets `label_` before it: `le`, `master` and `outcome` (the labels the
  ///    exposition writes itself) and any name starting with "__" (Prometheus's own): "le" gives
  ///    `label_le`, "__x" `label___x`;
  /// 3. a name an earlier label of the list already got gets the first of the suffixes `_2`, `_3`...
  ///    that no earlier label got: `{{"zone", "a"}, {"zone", "b"}}` gives `zone="a",zone_2="b"`,
  ///    and `{{"label_le", "a"}, {"le", "b"}}` gives `label_le="a",label_le_2="b"` (the earlier
  ///    label keeps the name, whichever was renamed).
  std::vector<std::pair<std::string, std::string>> labels;
  /// Also write each master's connection counters (about 25 series per master, with a `master`
  /// label). Off: the client's own counters only.
  bool per_master = true;
};

/// @brief Checks `opts` for names that would not be written as given.
///
/// `error::invalid_argument` when the prefix is not a valid metric name, or a label name is not a
/// valid label name, is reserved (starts with "__", or is "le", "master" or "outcome", which the
/// exposition writes itself) or is given more than once. `what`, when not null, then lists every
/// problem found, separated by "; " (e.g. `label "le" is reserved (the exposition writes it),
/// written as "label_le"; label "zone" is given 2 times`); it is left alone when there is none.
REDLOCK_API boost::system::error_code validate(const prometheus_options& opts, std::string* what = nullptr);

/// @brief Appends `stats` to `out` in the Prometheus text format: one `# HELP` and `# TYPE` line
/// per metric family, then its samples.
///
/// Counters end in `_total`; the two latency histograms (`acquire_duration_seconds`,
/// `master_request_duration_seconds`) have a bucket at every power of two of microseconds from
/// 1 µs to 2^25 µs (~33.6 s), then `+Inf`, exact because the snapshot's buckets nest in them.
/// Every series is written even when zero, so that rates start from the first scrape. Invalid,
/// reserved and repeated names are repaired or renamed as described in `prometheus_options`,
/// never rejected, so that the output is always a valid exposition: check them once with
/// `validate`. Label values are escaped; HELP texts are fixed.
REDLOCK_API void append_prometheus(std::string& out, const client_stats& stats, const prometheus_options& opts = {});

/// As `append_prometheus`, into a new string.
REDLOCK_API std::string to_prometheus(const client_stats& stats, const prometheus_options& opts = {});

/// @brief The client's counters (`client::stats()`) as `to_prometheus` writes them, plus a gauge
/// `master_up` (1 while a master's connection is up, else 0) per master.
///
/// Masters without a label in `opts.masters` are labelled by their address (`address_of`). From
/// any thread, like `client::stats()`.
REDLOCK_API std::string to_prometheus(const client& c, prometheus_options opts = {});

}  // namespace redlock
