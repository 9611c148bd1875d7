// SPDX-License-Identifier: BSL-1.0
// The lock client's shared machinery (see detail/client_state.hpp): construction and close, the
// rules of each lock, sending to every master, counters and log messages. Its other concerns have
// files of their own: client_masters.cpp (each master's health, readiness, the releases a broken
// connection left in doubt), client_fair.cpp (fair hand-over), client_watch.cpp (held locks: the
// keep-alive queue, loss and events).
#include "detail/client_state.hpp"
#include "detail/completion.hpp"
#include "detail/log.hpp"
#include "detail/read_poller.hpp"
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
namespace detail {

// ---- lock state and watcher ---------------------------------------------------------------------

void lock_state::on_reply(std::uint64_t, error_code, const resp::response&) {}

const lock_extras lock_state::no_extras{};

std::mutex& lock_state::mutex_for(const void* p) noexcept {
  // Padded to a cache line each, so that locks on different mutexes do not share a line.
  struct alignas(64) padded {
    std::mutex m;
  };
  static padded mutexes[64];
  // Lock states are heap blocks at least 64 bytes apart: the low bits say nothing.
  const auto n = reinterpret_cast<std::uintptr_t>(p) >> 6;
  return mutexes[(n ^ (n >> 6) ^ (n >> 12)) % std::size(mutexes)].m;
}

std::string lock_state::background_release_payload() const {
  resp::request req;
  (void)core::encode_step(req, spec->release, values(), false);
  return std::move(req).take_payload();
}

bool lock_state::new_token(error_code& ec) {
  auto t = make_token(ec);
  if (ec) return false;
  token = std::move(t);
  longest_ttl = ttl;
  return true;
}

// ---- the client ---------------------------------------------------------------------------------

client_impl::client_impl(asio::any_io_executor ex, client_config cfg)
    : ex_(std::move(ex)),
      shared_ex_(std::make_shared<const asio::any_io_executor>(ex_)),
      strand_(asio::make_strand(ex_)),
      cfg_(std::move(cfg)),
      log_(cfg_.logging),
      rng_(std::random_device{}()),
      probe_timer_(strand_),
      timer_(strand_) {
  config_error_ = validate(cfg_, &config_problem_);
  if (config_error_) {
    REDLOCK_LOG(log_, log_level::error, "invalid configuration: {}", config_problem_);
    return;
  }
  entry_timeout_ = queue_entry_timeout(cfg_);
  if (cfg_.fairness.enabled) {
    error_code ec;
    inbox_ = make_token(ec).substr(0, 16);
    if (ec || inbox_.size() != 16) inbox_ = fmt::format("{:016x}", std::random_device{}());
    wake_channel_ = std::string{wake_channel_prefix} + inbox_;
  }
  poller_ = std::make_shared<read_poller>(strand_);
  if (!poller_->usable()) poller_.reset();
  links_.reserve(cfg_.masters.size());
  deferred_.resize(cfg_.masters.size());
  refused_.resize(cfg_.masters.size(), false);
  names_.reserve(cfg_.masters.size());
  for (std::size_t i = 0; i < cfg_.masters.size(); ++i) {
    auto m = cfg_.masters[i];
    names_.push_back(fmt::format("master {} ({})", i + 1, address_of(m)));
    // A master without a sink of its own logs through the client's, named in every message.
    if (!m.logging.sink) {
      m.logging = cfg_.logging;
      m.logging.prefix = cfg_.logging.prefix.empty() ? names_.back() : cfg_.logging.prefix + ": " + names_.back();
    } else if (m.logging.prefix.empty()) {
      m.logging.prefix = names_.back();
    }
    links_.push_back(std::make_unique<master_link>(strand_, std::move(m), poller_));
  }
  health_ = core::readiness{links_.size()};
  init_guards();
  REDLOCK_LOG(log_, log_level::info, "client started: {} masters, quorum {}", size(), size() / 2 + 1);
}

client_impl::~client_impl() = default;

void client_impl::start() {
  const std::weak_ptr<link_observer> self = std::static_pointer_cast<link_observer>(shared_from_this());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    // INFO at every connect: the restart guard reads its run_id, and every client its redis_mode
    // (a cluster node given as a plain master is refused).
    links_[i]->observe(self, i, true, cfg_.guard.clock_jumps);
    links_[i]->set_restart_quarantine(restart_quarantine(cfg_));
    links_[i]->run();
  }
  post([self = shared_from_this()] { self->arm_probes(); });
}

void client_impl::close() {
  if (closed_.exchange(true)) return;
  REDLOCK_LOG(log_, log_level::info, "client closed");
  post([self = shared_from_this()] {
    // Cancelling retires: collect first.
    std::vector<std::shared_ptr<op_base>> ops;
    for (op_base* p = self->ops_; p; p = p->next_op) {
      if (auto op = p->weak_from_this().lock()) ops.push_back(std::move(op));
    }
    for (auto& op : ops) op->cancel();
    self->waiters_.clear();
    self->timer_.cancel();  // every watcher was cancelled: none is scheduled any more
    self->probe_timer_.cancel();
    // The cancelled operations queued releases (and queue exits): written before the sockets close.
    for (auto& l : self->links_) l->close_after_writes(self->cfg_.release_timeout);
  });
}

std::vector<connection_status> client_impl::statuses() const {
  std::vector<connection_status> out;
  out.reserve(links_.size());
  for (const auto& l : links_) out.push_back(l->status());
  return out;
}

client_stats client_impl::stats() const {
  const auto& c = counters_;
  client_stats s;
  s.masters.reserve(links_.size());
  for (const auto& l : links_) s.masters.push_back(l->stats());
  // Outcomes before operations: operations are counted first.
  s.locks_acquired = read(c.acquired);
  s.locks_not_acquired = read(c.not_acquired);
  s.locks_quorum_unavailable = read(c.quorum_unavailable);
  s.locks_validity_expired = read(c.validity_expired);
  s.locks_aborted = read(c.aborted);
  s.locks_rejected = read(c.rejected);
  s.lock_attempts = read(c.lock_attempts);
  s.lock_operations = read(c.lock_operations);
  s.extensions = read(c.extensions);
  s.extension_failures = read(c.extension_failures);
  s.locks_lost = read(c.lost);
  s.releases = read(c.releases);
  s.release_failures = read(c.release_failures);
  s.background_releases = read(c.background_releases);
  s.releases_resent = read(c.releases_resent);
  s.releases_expired = read(c.releases_expired);
  s.lock_wakeups = read(c.wakeups);
  s.lock_handovers = read(c.handovers);
  s.locks_queued = read(c.queued);
  s.fence_confirmations = read(c.confirmations);
  s.fences_unverified = read(c.unverified_fences);
  s.votes_quarantined = read(c.votes_quarantined);
  s.client_pauses = read(c.client_pauses);
  s.keep_alive_passes_split = read(c.keep_alive_passes_split);
  s.hazards = hazards();
  s.acquire_latency = c.acquire_latency.snapshot();
  s.log_messages = log_.messages();
  s.log_sink_errors = log_.sink_errors();
  return s;
}

core::lock_rules client_impl::lock_rules(std::chrono::milliseconds ttl, bool retry) const noexcept {
  return {links_.size(), ttl,   cfg_.request_timeout,  cfg_.drift,
          cfg_.retry,    retry, cfg_.fairness.enabled, cfg_.fairness.enabled && cfg_.fairness.hand_over};
}

core::lock_rules client_impl::lock_rules(const lock_state& st, bool retry) const noexcept {
  auto r = lock_rules(st.ttl, retry);
  r.fair = r.fair && st.spec->fair;
  r.hand_over = r.hand_over && r.fair;
  r.scripted = st.spec->scripted();
  r.fence = st.spec->fence;
  r.quorum = st.quorum;
  r.resend_after_grant = st.spec->resend_after_grant;
  return r;
}

error_code client_impl::check_kind_args(const lock_state& st, std::string& what) const {
  if (st.multi()) {
    const auto bad = [&what](std::string w) {
      what = std::move(w);
      return make_error_code(error::invalid_argument);
    };
    const auto& resources = st.extras().resources;
    if (resources.empty()) return bad("no resources");
    if (resources.size() > cfg_.max_resources)
      return bad(fmt::format("{} resources, more than max_resources ({})", resources.size(), cfg_.max_resources));
    for (const auto& r : resources) {
      if (auto ec = check_resource(cfg_, r, &what)) return ec;
    }
    std::vector<std::string_view> sorted(resources.begin(), resources.end());
    std::sort(sorted.begin(), sorted.end());
    if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
      return bad(fmt::format("resource \"{}\" is named twice", printable(*twice, 64)));
  }
  return {};
}

error_code client_impl::check_lock_args(const std::string& resource, std::chrono::milliseconds ttl,
                                        std::string* what) const {
  if (config_error_) {
    if (what) *what = config_problem_;
    return config_error_;
  }
  if (auto ec = check_resource(cfg_, resource, what)) return ec;
  return check_ttl_of(cfg_, ttl, what);
}

void client_impl::start_op(std::shared_ptr<started_op> op) {
  if (poller_ && strand_.running_in_this_thread() && poller_->takes_tasks() &&
      posted_.load(std::memory_order_relaxed) == 0) {
    return poller_->defer(std::move(op), false);
  }
  post([op = std::move(op)] { op->start(); });
}

void client_impl::enroll(op_base& op) noexcept {
  if (op.enrolled) return;
  op.enrolled = true;
  op.prev_op = nullptr;
  op.next_op = ops_;
  if (ops_) ops_->prev_op = &op;
  ops_ = &op;
}

void client_impl::retire(op_base& op) noexcept {
  if (!op.enrolled) return;
  op.enrolled = false;
  if (op.prev_op) {
    op.prev_op->next_op = op.next_op;
  } else {
    ops_ = op.next_op;
  }
  if (op.next_op) op.next_op->prev_op = op.prev_op;
  op.prev_op = op.next_op = nullptr;
}

std::string_view client_impl::scratch_step(step s, const lock_state& st, const core::step_values& v, bool by_sha) {
  scratch_.clear();  // keeps its capacity
  (void)core::encode_step(scratch_, st.spec->of(s), v, by_sha);
  if (is_vote(s)) st.longest_ttl = std::max(st.longest_ttl, std::chrono::milliseconds{v.ttl_ms});
  return scratch_.payload();
}

void client_impl::leave_claims(const lock_state& st) {
  scratch_.clear();
  if (!core::encode_step(scratch_, st.spec->leave, st.values(), false)) return;
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  const auto sink = std::const_pointer_cast<lock_state>(st.shared_from_this());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    (void)links_[i]->submit(scratch_.payload(), 1, deadline, sink, make_tag(release_round, i));
  }
}

// ---- sending ------------------------------------------------------------------------------------

void client_impl::send_all(std::string_view payload, clock_type::time_point deadline,
                           const std::shared_ptr<reply_sink>& sink, std::uint64_t round) {
  std::vector<std::pair<std::size_t, error_code>> refused;  // allocates only when a master is down
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (auto ec = links_[i]->submit(payload, 1, deadline, sink, make_tag(round, i))) refused.emplace_back(i, ec);
  }
  for (const auto& [i, ec] : refused) sink->on_reply(make_tag(round, i), ec, no_reply);
}

// ---- counting and logging -----------------------------------------------------------------------

void client_impl::note_lock_outcome(error_code ec, clock_type::time_point started) {
  auto& c = counters_;
  if (!ec) {
    bump<true>(c.acquired);
    c.acquire_latency.record(clock_type::now() - started);
  } else if (ec == error::not_acquired) {
    bump<true>(c.not_acquired);
  } else if (ec == error::quorum_unavailable) {
    bump<true>(c.quorum_unavailable);
  } else if (ec == error::validity_expired) {
    bump<true>(c.validity_expired);
  } else if (ec == error::invalid_argument || ec == error::invalid_config) {
    bump<true>(c.rejected);
  } else {
    bump<true>(c.aborted);
  }
}

void client_impl::note_extension(const lock_state& st, error_code ec, std::chrono::milliseconds ttl,
                                 const core::extend_fsm& f, bool keep_alive) {
  bump<true>(ec ? counters_.extension_failures : counters_.extensions);
  const char* what = keep_alive ? "keep-alive extension" : "extension";
  const auto& t = f.table();
  if (!ec) {
    REDLOCK_LOG(log_, log_level::debug, "{}: {} to {} ms done in {}; masters: {}", lock_name(st.resource, st.token),
                what, ttl.count(), format_duration(t.decided_at() - t.start()),
                describe_masters(t.answers(), st.token));
  } else if (f.decided()) {
    REDLOCK_LOG(log_, log_level::warning, "{}: {} failed: {}; masters: {}", lock_name(st.resource, st.token), what,
                describe(ec), describe_masters(t.answers(), st.token));
  } else {
    REDLOCK_LOG(log_, log_level::warning, "{}: {} failed: {} (the validity had already run out)",
                lock_name(st.resource, st.token), what, describe(ec));
  }
}

void client_impl::note_loss(const lock_state& st, error_code reason) {
  bump<true>(counters_.lost);
  REDLOCK_LOG(log_, log_level::warning, "{}: lost ({}); the holder must stop relying on it",
              lock_name(st.resource, st.token), describe(reason));
}

void client_impl::note_release(const lock_state& st, error_code ec, std::size_t held, const core::round_table& t) {
  bump<true>(ec ? counters_.release_failures : counters_.releases);
  if (!ec) {
    REDLOCK_LOG(log_, log_level::debug, "{}: released in {} ({} master(s) still held it); masters: {}",
                lock_name(st.resource, st.token), format_duration(t.decided_at() - t.start()), held,
                describe_masters(t.answers(), st.token));
  } else {
    REDLOCK_LOG(log_, log_level::warning,
                "{}: release answered by too few masters (the rest expire with the ttl); masters: {}",
                lock_name(st.resource, st.token), describe_masters(t.answers(), st.token));
  }
}

void client_impl::note_unverified_fence(const lock_state& st, const core::compact_results& round) {
  bump<true>(counters_.unverified_fences);
  REDLOCK_LOG(log_, log_level::warning,
              "{}: fence {} could not be checked against a majority of counters (a granting master had none): "
              "it is above every counter and clock heard, but rests on the masters' clocks; masters: {}",
              lock_name(st.resource, st.token), st.fence, describe_masters(round, st.token));
}

void client_impl::note_background_release(const lock_state& st) {
  bump<true>(counters_.background_releases);
  REDLOCK_LOG(log_, log_level::debug, "{}: handle dropped while held: releasing in the background",
              lock_name(st.resource, st.token));
}

}  // namespace detail
}  // namespace redlock

#undef REDLOCK_LOG
