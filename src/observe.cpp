// SPDX-License-Identifier: BSL-1.0
// Observability value types (histogram arithmetic, snapshots) and the logger's delivery.

#include <redlock/detail/observe.hpp>
#include <redlock/observe.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace redlock {

std::string_view to_string(log_level level) noexcept {
  switch (level) {
    case log_level::trace:
      return "trace";
    case log_level::debug:
      return "debug";
    case log_level::info:
      return "info";
    case log_level::warning:
      return "warning";
    case log_level::error:
      return "error";
    case log_level::off:
      return "off";
  }
  return "unknown";
}

namespace {

std::uint64_t minus(std::uint64_t a, std::uint64_t b) noexcept { return a > b ? a - b : 0; }

}  // namespace

// ---- latency_histogram --------------------------------------------------------------------------

void latency_histogram::record(std::chrono::microseconds latency) noexcept {
  const auto us = latency.count() <= 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(latency.count());
  ++buckets[bucket_of(us)];
  ++count;
  sum += std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(us)};
  max = std::max(max, std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(us)});
}

std::chrono::microseconds latency_histogram::percentile(double p) const noexcept {
  if (count == 0) return std::chrono::microseconds{0};
  if (!(p >= 0.0)) p = 0.0;  // NaN too
  p = std::min(p, 100.0);
  // The rank-th smallest sample (1-based).
  const auto rank =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count))));
  std::uint64_t below = 0;
  for (std::size_t b = 0; b < bucket_count; ++b) {
    const auto n = buckets[b];
    if (n == 0 || below + n < rank) {
      below += n;
      continue;
    }
    // Samples are whole microseconds: the bucket's values run from lo to hi, both included.
    const auto lo = static_cast<double>(lower_bound_us(b));
    const auto hi = b + 1 == bucket_count ? std::max(lo, static_cast<double>(max.count()))
                                          : static_cast<double>(upper_bound_us(b) - 1);
    const double fraction = static_cast<double>(rank - below) / static_cast<double>(n);
    double estimate = lo + fraction * (hi - lo);
    if (max.count() > 0) estimate = std::min(estimate, static_cast<double>(max.count()));
    return std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(std::llround(estimate))};
  }
  return max;  // the buckets hold fewer than `count` samples (a torn snapshot)
}

std::chrono::microseconds latency_histogram::mean() const noexcept {
  if (count == 0) return std::chrono::microseconds{0};
  return std::chrono::microseconds{sum.count() / static_cast<std::chrono::microseconds::rep>(count)};
}

latency_histogram& latency_histogram::operator+=(const latency_histogram& other) noexcept {
  for (std::size_t b = 0; b < bucket_count; ++b) buckets[b] += other.buckets[b];
  count += other.count;
  sum += other.sum;
  max = std::max(max, other.max);
  return *this;
}

latency_histogram& latency_histogram::operator-=(const latency_histogram& earlier) noexcept {
  for (std::size_t b = 0; b < bucket_count; ++b) buckets[b] = minus(buckets[b], earlier.buckets[b]);
  count = minus(count, earlier.count);
  sum = std::max(sum - earlier.sum, std::chrono::microseconds{0});
  return *this;
}

// ---- connection_stats ---------------------------------------------------------------------------

namespace {

// Applies `op` to every counter of a pair of connection_stats (the histogram separately).
template <class Stats, class Op>
void each_counter(Stats& a, const connection_stats& b, Op op) {
  op(a.requests, b.requests);
  op(a.ok, b.ok);
  op(a.server_errors, b.server_errors);
  op(a.timeouts, b.timeouts);
  op(a.not_connected, b.not_connected);
  op(a.connection_lost, b.connection_lost);
  op(a.protocol_errors, b.protocol_errors);
  op(a.cancelled, b.cancelled);
  op(a.aborted, b.aborted);
  op(a.invalid, b.invalid);
  op(a.written, b.written);
  op(a.replies, b.replies);
  op(a.dropped_replies, b.dropped_replies);
  op(a.pushes, b.pushes);
  op(a.bytes_written, b.bytes_written);
  op(a.bytes_read, b.bytes_read);
  op(a.connect_attempts, b.connect_attempts);
  op(a.connects, b.connects);
  op(a.connect_failures, b.connect_failures);
  op(a.auth_failures, b.auth_failures);
  op(a.disconnects, b.disconnects);
  op(a.stalls, b.stalls);
  op(a.redirects, b.redirects);
  op(a.cluster_retries, b.cluster_retries);
  op(a.slot_map_reads, b.slot_map_reads);
  op(a.failovers, b.failovers);
  op(a.log_messages, b.log_messages);
  op(a.log_sink_errors, b.log_sink_errors);
}

template <class Op>
void each_counter(client_stats& a, const client_stats& b, Op op) {
  op(a.lock_operations, b.lock_operations);
  op(a.lock_attempts, b.lock_attempts);
  op(a.locks_acquired, b.locks_acquired);
  op(a.locks_not_acquired, b.locks_not_acquired);
  op(a.locks_quorum_unavailable, b.locks_quorum_unavailable);
  op(a.locks_validity_expired, b.locks_validity_expired);
  op(a.locks_aborted, b.locks_aborted);
  op(a.locks_rejected, b.locks_rejected);
  op(a.extensions, b.extensions);
  op(a.extension_failures, b.extension_failures);
  op(a.locks_lost, b.locks_lost);
  op(a.releases, b.releases);
  op(a.release_failures, b.release_failures);
  op(a.background_releases, b.background_releases);
  op(a.releases_resent, b.releases_resent);
  op(a.releases_expired, b.releases_expired);
  op(a.lock_wakeups, b.lock_wakeups);
  op(a.lock_handovers, b.lock_handovers);
  op(a.locks_queued, b.locks_queued);
  op(a.fence_confirmations, b.fence_confirmations);
  op(a.fences_unverified, b.fences_unverified);
  op(a.votes_quarantined, b.votes_quarantined);
  op(a.client_pauses, b.client_pauses);
  op(a.keep_alive_passes_split, b.keep_alive_passes_split);
  op(a.log_messages, b.log_messages);
  op(a.log_sink_errors, b.log_sink_errors);
}

constexpr auto add = [](std::uint64_t& a, std::uint64_t b) { a += b; };
constexpr auto sub = [](std::uint64_t& a, std::uint64_t b) { a = minus(a, b); };

}  // namespace

connection_stats& connection_stats::operator+=(const connection_stats& other) noexcept {
  each_counter(*this, other, add);
  latency += other.latency;
  return *this;
}

connection_stats& connection_stats::operator-=(const connection_stats& earlier) noexcept {
  each_counter(*this, earlier, sub);
  latency -= earlier.latency;
  return *this;
}

// ---- client_stats -------------------------------------------------------------------------------

connection_stats client_stats::total() const noexcept {
  connection_stats t;
  for (const auto& m : masters) t += m;
  return t;
}

client_stats& client_stats::operator+=(const client_stats& other) {
  each_counter(*this, other, add);
  acquire_latency += other.acquire_latency;
  if (masters.size() < other.masters.size()) masters.resize(other.masters.size());
  for (std::size_t i = 0; i < other.masters.size(); ++i) masters[i] += other.masters[i];
  return *this;
}

client_stats& client_stats::operator-=(const client_stats& earlier) {
  each_counter(*this, earlier, sub);
  acquire_latency -= earlier.acquire_latency;
  for (std::size_t i = 0; i < std::min(masters.size(), earlier.masters.size()); ++i) masters[i] -= earlier.masters[i];
  return *this;
}

// ---- logging ------------------------------------------------------------------------------------

namespace detail {

logger::logger(log_options opts) : sink_(std::move(opts.sink)), prefix_(std::move(opts.prefix)) {
  if (sink_ && opts.level != log_level::off) threshold_ = static_cast<std::uint8_t>(opts.level);
}

void logger::write(log_level level, std::string_view message) const noexcept {
  messages_.fetch_add(1, std::memory_order_relaxed);
  if (!enabled(level)) return;
  try {
    sink_(level, message);
  } catch (...) {
    sink_errors_.fetch_add(1, std::memory_order_relaxed);
  }
}

void redact(std::string& text, std::initializer_list<std::string_view> secrets) {
  for (const auto secret : secrets) {
    if (secret.empty()) continue;
    for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
      text.replace(at, secret.size(), "***");
    }
  }
}

std::string printable(std::string_view text, std::size_t max_length, std::initializer_list<std::string_view> secrets) {
  // Redact first, on the raw text, so that escaping cannot split a secret. Only the part that can
  // be shown is copied (a secret starting in it is copied whole).
  std::size_t longest = 0;
  for (const auto secret : secrets) longest = std::max(longest, secret.size());
  const bool cut = text.size() - std::min(text.size(), max_length) > longest;
  std::string raw{text.substr(0, max_length + longest)};
  redact(raw, secrets);
  std::string out;
  out.reserve(std::min(raw.size(), max_length) + 3);
  constexpr char hex[] = "0123456789abcdef";
  for (const char ch : raw) {
    if (out.size() >= max_length) {
      out += "...";
      return out;
    }
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += ch;
    } else if (u == '\\') {
      out += "\\\\";
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    }
  }
  if (cut) out += "...";
  return out;
}

std::string_view short_token(std::string_view token) noexcept { return token.substr(0, 8); }

std::string describe(const boost::system::error_code& ec) {
  return fmt::format("{} [{}:{}]", ec.message(), ec.category().name(), ec.value());
}

std::string format_duration(std::chrono::nanoseconds d) {
  const auto ns = std::max<std::chrono::nanoseconds::rep>(d.count(), 0);
  if (ns < 1'000'000) return fmt::format("{} us", ns / 1000);
  if (ns < 1'000'000'000) return fmt::format("{:.2f} ms", static_cast<double>(ns) / 1e6);
  return fmt::format("{:.3f} s", static_cast<double>(ns) / 1e9);
}

}  // namespace detail

}  // namespace redlock
