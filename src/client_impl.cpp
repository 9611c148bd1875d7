// SPDX-License-Identifier: BSL-1.0
// The lock client's shared machinery (see detail/client_state.hpp): configuration checks, sending
// to every master, background releases, the keep-alive timer queue, counters and log messages.

#include "detail/client_state.hpp"
#include "detail/completion.hpp"
#include "detail/log.hpp"
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
  if (what) what->clear();
  return {};
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
      *what = fmt::format("ttl {} ms is above max_ttl ({} ms)", ttl.count(), cfg.max_ttl.count());
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

namespace {

const resp::response no_reply;

// Background releases are tagged with this round, which no acquisition round reaches.
constexpr std::uint64_t release_round = 0x7fff'ffff'ffff;

std::string_view status_text(master_status s) noexcept {
  return s == master_status::server_error ? std::string_view{"server error"} : to_string(s);
}

}  // namespace

// ---- log text -----------------------------------------------------------------------------------

std::string lock_name(std::string_view resource, std::string_view token) {
  std::string out = fmt::format("lock \"{}\"", printable(resource, 128));
  if (!token.empty()) fmt::format_to(std::back_inserter(out), " [{}]", short_token(token));
  return out;
}

// Server texts are untrusted: made printable, and the lock's token is redacted should a server
// echo it.
std::string describe_masters(const std::vector<master_result>& results, std::string_view token) {
  std::string out;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& n = results[i];
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

// ---- lock state and watcher ---------------------------------------------------------------------

void lock_state::on_reply(std::uint64_t, error_code, const resp::response&) {}

const std::string& lock_state::background_release_payload() {
  if (background_release_.empty()) {
    resp::request req;
    (void)core::encode_step(req, spec->release, values(), false);
    background_release_ = std::move(req).take_payload();
  }
  return background_release_;
}

bool lock_state::new_token(error_code& ec) {
  auto t = make_token(ec);
  if (ec) return false;
  token = std::move(t);
  background_release_.clear();
  longest_ttl = ttl;
  return true;
}

namespace {

// One release sent in the background; an answer that leaves its outcome unknown defers it.
struct release_job final : reply_sink {
  release_job(std::weak_ptr<client_impl> c, std::string p, std::chrono::milliseconds t,
              clock_type::time_point u = clock_type::time_point::min())
      : owner(std::move(c)), payload(std::move(p)), ttl(t), until(u) {}
  std::weak_ptr<client_impl> owner;
  std::string payload;
  std::chrono::milliseconds ttl;
  clock_type::time_point until;  // min(): a first send; else the bound of a re-sent one
  std::vector<bool> settled;     // masters where no key of ours can be (the held lock's round said so)
  void on_reply(std::uint64_t tag, error_code ec, const resp::response&) override {
    const auto i = master_of(tag);
    if (!core::release_in_doubt(ec) || (i < settled.size() && settled[i])) return;
    if (auto c = owner.lock()) c->defer_release(i, payload, ttl, until);
  }
};

}  // namespace

void watch::keep(const keep_alive_options& opts) {
  auto st = state.lock();
  if (!st) return;
  fsm.keep(opts, clock_type::now());
  st->owner->schedule(*this);
}

// ---- the client ---------------------------------------------------------------------------------

client_impl::client_impl(asio::any_io_executor ex, client_config cfg)
    : ex_(std::move(ex)),
      strand_(asio::make_strand(ex_)),
      cfg_(std::move(cfg)),
      log_(cfg_.logging),
      rng_(std::random_device{}()),
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
    links_.push_back(std::make_unique<master_link>(strand_, std::move(m)));
  }
  health_ = core::readiness{links_.size()};
  REDLOCK_LOG(log_, log_level::info, "client started: {} masters, quorum {}", size(), size() / 2 + 1);
}

client_impl::~client_impl() = default;

void client_impl::start() {
  const std::weak_ptr<link_observer> self = std::static_pointer_cast<link_observer>(shared_from_this());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    links_[i]->observe(self, i);
    links_[i]->run();
  }
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
    self->wakes_.clear();
    self->timer_.cancel();
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
  s.locks_queued = read(c.queued);
  s.fence_confirmations = read(c.confirmations);
  s.fences_unverified = read(c.unverified_fences);
  s.acquire_latency = c.acquire_latency.snapshot();
  s.log_messages = log_.messages();
  s.log_sink_errors = log_.sink_errors();
  return s;
}

core::lock_rules client_impl::lock_rules(std::chrono::milliseconds ttl, bool retry) const noexcept {
  return {links_.size(), ttl, cfg_.request_timeout, cfg_.drift, cfg_.retry, retry, cfg_.fairness.enabled};
}

core::lock_rules client_impl::lock_rules(const lock_state& st, bool retry) const noexcept {
  auto r = lock_rules(st.ttl, retry);
  r.fair = r.fair && st.spec->fair;
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
    if (st.resources.empty()) return bad("no resources");
    if (st.resources.size() > cfg_.max_resources)
      return bad(fmt::format("{} resources, more than max_resources ({})", st.resources.size(), cfg_.max_resources));
    for (const auto& r : st.resources) {
      if (auto ec = check_resource(cfg_, r, &what)) return ec;
    }
    std::vector<std::string_view> sorted(st.resources.begin(), st.resources.end());
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
  if (s == step::acquire || s == step::fair_acquire || s == step::extend)
    st.longest_ttl = std::max(st.longest_ttl, std::chrono::milliseconds{v.ttl_ms});
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

void client_impl::release_everywhere(lock_state& st, const std::vector<master_result>* round) {
  // A failed round (`round`): only where its request may have set our key (core::may_have_set).
  const auto target = [round](std::size_t i) {
    return !round || i >= round->size() || core::may_have_set((*round)[i].status);
  };
  if (round && !core::any_may_have_set(*round, links_.size())) return;  // nothing to release, nothing to encode
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  const auto ttl = std::max(st.ttl, st.longest_ttl);
  auto job = std::make_shared<release_job>(weak_from_this(), st.background_release_payload(), ttl);
  // A held lock (no `round`): a master where its granting round's request did not set the key
  // holds no key of this token; the release still goes there, but is not worth keeping if lost.
  job->settled.resize(links_.size(), false);
  if (!round) {
    for (std::size_t i = 0; i < links_.size(); ++i) job->settled[i] = !st.holders.may_hold(i);
  }
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (!target(i)) continue;
    if (links_[i]->submit(job->payload, 1, deadline, job, make_tag(release_round, i))) {
      // Refused now; the SET may have reached it (it was sent, its answer is unknown or granted).
      if (!job->settled[i]) defer_release(i, job->payload, ttl);
    }
  }
}

bool client_impl::is_release(std::uint64_t tag) noexcept { return round_of(tag) == release_round; }

void client_impl::defer_release(std::size_t i, std::string_view payload, std::chrono::milliseconds ttl,
                                clock_type::time_point until) {
  if (i >= deferred_.size() || closed_) return;
  const auto lifetime = ttl + std::chrono::ceil<std::chrono::milliseconds>(core::drift(ttl, cfg_.drift));
  bump<true>(counters_.releases_expired, deferred_[i].defer(payload, lifetime, clock_type::now(), until));
}

void client_impl::on_link_down(std::size_t i) { deferred_[i].connection_lost(clock_type::now()); }

void client_impl::on_link_up(std::size_t i) {
  health_.up(i);
  if (!closed_) load_scripts(i);
  // A new connection has no subscriptions: waiters queued on this master are woken through it.
  if (inbox_wanted_ && !closed_) subscribe_inbox(i);
  // After the scripts were queued: whatever a waiter's handler sends comes behind them.
  readiness_changed();
  if (deferred_[i].empty() || closed_) return;
  std::size_t expired = 0;
  auto due = deferred_[i].take(clock_type::now(), expired);
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  std::size_t sent = 0;
  for (auto& d : due) {
    const auto ttl = std::chrono::duration_cast<std::chrono::milliseconds>(d.lifetime);
    auto job = std::make_shared<release_job>(weak_from_this(), std::move(d.payload), ttl, d.until);
    if (links_[i]->submit(job->payload, 1, deadline, job, make_tag(release_round, i))) {
      deferred_[i].defer(job->payload, d.lifetime, clock_type::now(), d.until);
    } else {
      ++sent;
    }
  }
  bump<true>(counters_.releases_resent, sent);
  bump<true>(counters_.releases_expired, expired);
  REDLOCK_LOG(log_, log_level::info,
              "{}: connected again: re-sending {} release(s) a broken connection left in doubt ({} expired meanwhile)",
              names_[i], sent, expired);
}

// ---- readiness and failure causes -----------------------------------------------------------------

void client_impl::on_link_failed(std::size_t i, error_code cause) {
  if (i >= health_.size() || refused_[i]) return;  // a refused master keeps its cause
  const auto before = health_.cause(i);
  health_.failed(i, cause);
  // The connection logs every failure; this says once what it means for the locks.
  if (core::is_hopeless(cause) && cause != before && !closed_) {
    REDLOCK_LOG(log_, log_level::error,
                "{}: unusable until the configuration or the server changes: {}; lock operations stop retrying "
                "when such masters leave too few for a quorum",
                names_[i], describe(cause));
  }
  readiness_changed();
}

// One async_wait_ready: completed by readiness_changed (a link came up or failed), its timer,
// cancellation or close().
struct ready_op final : op_base {
  ready_op(std::weak_ptr<client_impl> c, asio::any_io_executor e, const strand_type& s, ready_handler h)
      : owner(std::move(c)), ex(std::move(e)), handler(std::move(h)), timer(s) {}

  std::weak_ptr<client_impl> owner;  // weak: the client keeps its waiters
  asio::any_io_executor ex;
  std::optional<ready_handler> handler;
  asio::steady_timer timer;

  void on_reply(std::uint64_t, error_code, const resp::response&) override {}
  void cancel() override { finish(asio::error::operation_aborted); }

  void finish(error_code ec) {
    if (!handler) return;
    timer.cancel();
    auto self = shared_from_this();  // forget_ready drops the client's reference
    quorum_report rep;
    rep.error = ec;
    if (auto c = owner.lock()) {
      c->retire(*this);
      c->forget_ready(*this);
      if (ec != error::invalid_config) rep = c->report(ec, nullptr, c->health().needed());
    }
    auto h = std::move(*handler);
    handler.reset();
    complete_handler(std::move(h), ex, ec, std::move(rep));
  }
};

void client_impl::wait_ready(ready_handler h, std::optional<std::chrono::milliseconds> timeout) {
  auto op = std::make_shared<ready_op>(weak_from_this(), ex_, strand_, std::move(h));
  auto slot = asio::get_associated_cancellation_slot(*op->handler);
  if (slot.is_connected()) {
    slot.assign([w = std::weak_ptr<ready_op>(op), strand = strand_](asio::cancellation_type type) {
      if (!(type & (asio::cancellation_type::terminal | asio::cancellation_type::partial))) return;
      if (auto self = w.lock()) asio::post(strand, [self] { self->cancel(); });
    });
  }
  post([self = shared_from_this(), op, timeout] {
    if (self->config_error_) return op->finish(self->config_error_);
    if (self->closed_) return op->finish(asio::error::operation_aborted);
    if (timeout && *timeout <= std::chrono::milliseconds::zero()) {
      return op->finish(self->health_.ready() ? error_code{} : make_error_code(error::not_ready));
    }
    self->enroll(*op);
    self->ready_ops_.push_back(op);
    if (timeout) {
      op->timer.expires_after(*timeout);
      op->timer.async_wait([op](error_code ec) {
        if (!ec) op->finish(error::not_ready);
      });
    }
    self->readiness_changed();
  });
}

void client_impl::readiness_changed() {
  if (ready_ops_.empty()) return;
  error_code ec;
  if (!health_.ready()) {
    if (!health_.impossible()) return;
    ec = error::quorum_unavailable;
  }
  auto ops = std::move(ready_ops_);
  ready_ops_.clear();
  for (auto& op : ops) op->finish(ec);
}

void client_impl::forget_ready(const ready_op& op) {
  std::erase_if(ready_ops_, [&op](const std::shared_ptr<ready_op>& p) { return p.get() == &op; });
}

quorum_report client_impl::report(error_code ec, const std::vector<master_result>* results, std::size_t needed) const {
  quorum_report r;
  r.error = ec;
  r.masters = links_.size();
  r.needed = needed;
  for (std::size_t i = 0; i < links_.size(); ++i) {
    quorum_report::master m;
    if (results) {
      if (i >= results->size()) break;
      const auto& res = (*results)[i];
      const auto s = res.status;
      if (s == master_status::granted || s == master_status::taken || s == master_status::queued ||
          s == master_status::pending)
        continue;
      m.status = s;
      m.error = res.error;
      m.server_text = res.server_text;
    } else {
      if (health_.is_up(i)) continue;
      m.error = health_.cause(i);
      m.status = m.error ? master_status::unreachable : master_status::pending;
    }
    m.index = i;
    m.address = address_of(links_[i]->config());
    if (m.status == master_status::unreachable && m.server_text.empty()) {
      // The refusal behind the connection's failure (a WRONGPASS, say), if it is the same cause.
      const auto st = links_[i]->status();
      if (st.last_error == m.error) m.server_text = st.last_error_text;
    }
    r.failing.push_back(std::move(m));
  }
  return r;
}

quorum_report client_impl::lock_report(const lock& l) const {
  const auto& st = l.state_;
  const auto results = l.masters();
  const std::size_t needed = st && st->quorum ? st->quorum : core::majority(links_.size());
  auto r = report({}, &results, needed);
  if (!l.owns_lock() && !results.empty() && r.masters - r.failing.size() < needed) r.error = error::quorum_unavailable;
  return r;
}

bool client_impl::resend_eval(std::uint64_t tag, std::string_view payload, std::chrono::milliseconds timeout,
                              const std::shared_ptr<reply_sink>& sink) {
  const auto i = master_of(tag);
  if (i >= links_.size()) return false;
  REDLOCK_LOG(log_, log_level::debug, "{}: script not in the server's cache (NOSCRIPT): sending it with EVAL",
              names_[i]);
  return !links_[i]->submit(payload, 1, clock_type::now() + timeout, sink, tag | eval_flag);
}

bool client_impl::eval_instead(std::uint64_t tag, error_code ec, const resp::response& r, const lock_state& st, step s,
                               const core::step_values& v, const std::shared_ptr<reply_sink>& sink) {
  if (!sink || (tag & eval_flag) || !core::is_noscript(ec, r)) return false;
  const auto timeout = s == step::release ? cfg_.release_timeout : cfg_.request_timeout;
  return resend_eval(tag, scratch_step(s, st, v, false), timeout, sink);
}

// ---- fair hand-over -------------------------------------------------------------------------------

namespace {

// Answers to SUBSCRIBE of the wake channel: a master that refuses (an ACL without the channel, or
// RESP2) leaves its waiters to the retry schedule, which is logged once per connection.
struct inbox_sink final : reply_sink {
  explicit inbox_sink(std::weak_ptr<client_impl> c) : owner(std::move(c)) {}
  std::weak_ptr<client_impl> owner;
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (!ec || ec == asio::error::operation_aborted) return;
    auto c = owner.lock();
    if (!c) return;
    const auto* v = resp::reply_value(r);
    REDLOCK_LOG(c->log(), ec == error::not_supported ? log_level::info : log_level::warning,
                "master {}: no wake-ups for waiters ({}{}{}); they retry on their schedule", master_of(tag) + 1,
                describe(ec), v && ec == error::server_error ? ": " : "",
                v && ec == error::server_error ? printable(v->value, 160) : std::string{});
  }
};

// "<16 hex digits>:<hex number>" -> the number, if the inbox is `inbox`.
std::optional<std::uint64_t> waiter_number(std::string_view member, std::string_view inbox) noexcept {
  if (member.size() <= inbox.size() + 1 || member.substr(0, inbox.size()) != inbox || member[inbox.size()] != ':')
    return std::nullopt;
  const auto digits = member.substr(inbox.size() + 1);
  std::uint64_t n = 0;
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n, 16);
  if (ec != std::errc{} || p != digits.data() + digits.size()) return std::nullopt;
  return n;
}

}  // namespace

std::string client_impl::new_waiter(op_base& op) {
  const auto n = ++next_waiter_;
  waiters_[n] = &op;
  return fmt::format("{}:{:x}", inbox_, n);
}

void client_impl::forget_waiter(std::string_view member) noexcept {
  if (const auto n = waiter_number(member, inbox_)) waiters_.erase(*n);
}

namespace {

// Answers to SCRIPT LOAD: a master that refuses (an ACL without SCRIPT, say) still works through
// the EVAL fallback; logged once per connection.
// Each answer is the master's digest of one script (in all_scripts order): one that is not the
// script's own refuses the master (error::script_mismatch).
struct script_load_sink final : reply_sink {
  explicit script_load_sink(std::weak_ptr<client_impl> c) : owner(std::move(c)) {}
  std::weak_ptr<client_impl> owner;
  std::uint64_t last_logged = ~std::uint64_t{0};
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (ec == asio::error::operation_aborted) return;
    auto c = owner.lock();
    if (!c) return;
    std::size_t k = 0;
    for (const auto& n : r) {
      if (n.depth != 0 || n.data_type == resp::type::attribute) continue;
      const bool digest = n.data_type == resp::type::blob_string || n.data_type == resp::type::simple_string;
      if (digest && k < std::size(all_scripts) && n.value != all_scripts[k]->sha1) {
        return c->refuse_master(master_of(tag), error::script_mismatch,
                                fmt::format("SCRIPT LOAD answered \"{}\" for the script whose SHA-1 is {}",
                                            printable(n.value, 64), all_scripts[k]->sha1));
      }
      ++k;
    }
    if (!ec || tag == last_logged) return;
    last_logged = tag;
    const auto* v = resp::reply_value(r);
    REDLOCK_LOG(c->log(), log_level::info, "master {}: scripts not preloaded ({}{}{}); EVALSHA falls back to EVAL",
                master_of(tag) + 1, describe(ec), v && ec == error::server_error ? ": " : "",
                v && ec == error::server_error ? printable(v->value, 160) : std::string{});
  }
};

}  // namespace

void client_impl::refuse_master(std::size_t i, error_code cause, std::string_view why) {
  if (i >= links_.size() || closed_ || refused_[i]) return;
  refused_[i] = true;
  REDLOCK_LOG(log_, log_level::error, "{}: not used any more: {}: {}", names_[i], describe(cause), why);
  // Closed for good: its requests fail, and the next ones are refused as `not_connected` (the
  // lock operations keep `cause` as its result's error, see down_cause).
  links_[i]->close();
  health_.failed(i, cause);
  readiness_changed();
}

void client_impl::load_scripts(std::size_t i) {
  // Once per connection: a link that comes back without reconnecting (a stall that healed) still
  // has its scripts.
  if (scripts_loaded_.size() != links_.size()) scripts_loaded_.assign(links_.size(), 0);
  const auto connects = links_[i]->stats().connects;
  if (scripts_loaded_[i] == connects) return;
  scripts_loaded_[i] = connects;
  if (!scripts_sink_) scripts_sink_ = std::make_shared<script_load_sink>(weak_from_this());
  if (scripts_payload_.empty()) {
    resp::request req;
    for (const auto* s : all_scripts) req.push("SCRIPT", "LOAD", s->body);
    scripts_payload_ = std::move(req).take_payload();
  }
  // Queued before anything this connection carries for a lock: FIFO puts every EVALSHA after it.
  (void)links_[i]->submit(scripts_payload_, std::size(all_scripts), clock_type::now() + cfg_.release_timeout,
                          scripts_sink_, make_tag(++script_loads_, i));
}

void client_impl::subscribe_inbox(std::size_t i) {
  if (!inbox_sink_) inbox_sink_ = std::make_shared<inbox_sink>(weak_from_this());
  scratch_.clear();
  scratch_.push("SUBSCRIBE", wake_channel_);
  // Its deadline is the release timeout: a master that does not confirm is as slow as that.
  const auto ec = links_[i]->submit(scratch_.payload(), 1, clock_type::now() + cfg_.release_timeout, inbox_sink_,
                                    make_tag(release_round, i), true);
  if (ec && ec != error::not_connected) inbox_sink_->on_reply(make_tag(release_round, i), ec, no_reply);
}

void client_impl::ensure_inbox() {
  if (inbox_wanted_ || closed_) return;
  inbox_wanted_ = true;
  // A link without a connection yet subscribes from on_link_up, once its handshake is done.
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (links_[i]->protocol() != 0) subscribe_inbox(i);
  }
}

void client_impl::on_push(std::size_t i, const resp::response& push) {
  // >3 message <channel> <payload>
  if (push.size() != 4 || push[0].data_type != resp::type::push || push[1].value != "message" ||
      push[2].value != wake_channel_)
    return;
  const auto n = waiter_number(push[3].value, inbox_);
  if (!n) return;
  const auto it = waiters_.find(*n);
  if (it == waiters_.end()) return;  // that acquisition has ended
  it->second->on_wake(i);
}

bool client_impl::recently_contended(const std::string& key) {
  if (contended_.empty()) return false;
  const auto it = contended_.find(key);
  if (it == contended_.end()) return false;
  if (it->second > clock_type::now()) return true;
  contended_.erase(it);
  return false;
}

void client_impl::note_contended(const std::string& key) {
  const auto now = clock_type::now();
  // Bounded: expired hints go first, then (rarely) all of them; a lost hint costs fairness only.
  if (contended_.size() >= 1024) std::erase_if(contended_, [now](const auto& e) { return e.second <= now; });
  if (contended_.size() >= 1024) contended_.clear();
  contended_[key] = now + entry_timeout_;
}

void client_impl::leave_queues(const lock_state& st, std::string_view member, const std::vector<master_result>& round) {
  scratch_.clear();
  for (const auto suffix : {queue_suffix, expiry_suffix}) {
    scratch_.begin(3);
    scratch_.arg("ZREM");
    scratch_.arg(st.key, suffix);
    scratch_.arg(member);
  }
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  // Nobody waits for the answers (the lock state's sink ignores them); an entry left behind on a
  // master that is down expires with the entry timeout.
  const auto sink = std::const_pointer_cast<lock_state>(st.shared_from_this());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (i < round.size() && round[i].status == master_status::granted) continue;  // it left that queue
    (void)links_[i]->submit(scratch_.payload(), 2, deadline, sink, make_tag(release_round, i));
  }
}

// ---- watching -----------------------------------------------------------------------------------

watch* client_impl::watcher_of(const std::shared_ptr<lock_state>& st) {
  if (st->watcher) return st->watcher->fsm.finished() ? nullptr : st->watcher.get();
  if (!st->held || closed_) return nullptr;
  st->watcher = std::make_shared<watch>(st, cfg_.request_timeout, cfg_);
  enroll(*st->watcher);
  schedule(*st->watcher);
  return st->watcher.get();
}

void client_impl::stop_watching(lock_state& st, bool released) {
  if (!st.watcher) return;
  if (released) {
    st.watcher->released();
  } else {
    st.watcher->cancel();
  }
}

void client_impl::deadline_moved(lock_state& st, const std::vector<master_result>* round) {
  if (!st.watcher) return;
  auto& w = *st.watcher;
  const bool was_finished = w.fsm.finished();
  w.fsm.deadline_moved(st.get_deadline());
  if (!was_finished && w.events_wanted) {
    auto e = w.make_event(st, lock_event::type::extended);
    if (round) e.masters = *round;
    w.post_event(std::move(e));
  }
  schedule(w);
}

void client_impl::add_event_waiter(const std::shared_ptr<lock_state>& st, event_handler h) {
  // A watcher that has finished still holds the final event: it is handed out again.
  watch* w = st->watcher ? st->watcher.get() : watcher_of(st);
  if (!w) {
    const auto ec = closed_ ? make_error_code(asio::error::operation_aborted) : make_error_code(error::not_locked);
    return complete_handler(std::move(h), st->ex, ec, lock_event{});
  }
  w->events_wanted = true;
  if (w->event_waiters.empty() && !w->events.empty()) {
    auto e = w->events.next();
    return complete_handler(std::move(h), st->ex, error_code{}, std::move(*e));
  }
  if (w->fsm.finished() && w->events.empty()) {
    // Stopped without a final event (the handle was dropped, or the client closed).
    return complete_handler(std::move(h), st->ex, make_error_code(asio::error::operation_aborted), lock_event{});
  }
  const auto id = ++w->last_waiter;
  auto slot = asio::get_associated_cancellation_slot(h);
  if (slot.is_connected()) {
    slot.assign([weak = std::weak_ptr<watch>(st->watcher), id, strand = strand_](asio::cancellation_type) {
      asio::post(strand, [weak, id] {
        auto self = weak.lock();
        if (!self) return;
        auto& ws = self->event_waiters;
        auto it = std::find_if(ws.begin(), ws.end(), [id](const auto& x) { return x.id == id; });
        if (it == ws.end()) return;
        auto handler = std::move(it->handler);
        ws.erase(it);
        complete_handler(std::move(handler), self->owner->executor(), make_error_code(asio::error::operation_aborted),
                         lock_event{});
      });
    });
  }
  w->event_waiters.emplace_back(id, std::move(h));
}

void client_impl::add_waiter(const std::shared_ptr<lock_state>& st, lost_handler h) {
  if (st->lost) return complete_handler(std::move(h), st->ex, error_code{});
  watch* w = watcher_of(st);
  if (!w) return complete_handler(std::move(h), st->ex, make_error_code(asio::error::operation_aborted));
  const auto id = ++w->last_waiter;
  auto slot = asio::get_associated_cancellation_slot(h);
  if (slot.is_connected()) {
    slot.assign([weak = std::weak_ptr<watch>(st->watcher), id, strand = strand_](asio::cancellation_type) {
      asio::post(strand, [weak, id] {
        auto self = weak.lock();
        if (!self) return;
        auto it = std::find_if(self->waiters.begin(), self->waiters.end(), [id](const auto& x) { return x.id == id; });
        if (it == self->waiters.end()) return;
        auto handler = std::move(it->handler);
        self->waiters.erase(it);
        complete_handler(std::move(handler), self->owner->executor(), make_error_code(asio::error::operation_aborted));
      });
    });
  }
  w->waiters.emplace_back(id, std::move(h));
}

// The keep-alive timer queue: a min-heap of wake-ups, one live entry per watcher (its
// `scheduled` time); an entry whose time no longer matches is stale and skipped.
void client_impl::schedule(watch& w) {
  const auto never = clock_type::time_point::max();
  const auto at = closed_ ? never : w.fsm.next_wake();
  if (at == w.scheduled) return;
  if (w.scheduled == never) ++live_watches_;
  if (at == never) --live_watches_;
  w.scheduled = at;
  if (at == never) {
    // Nothing left to wake: no timer stays armed behind the last watched lock.
    if (live_watches_ == 0) {
      wakes_.clear();
      timer_.cancel();
      timer_at_ = never;
    }
    return;
  }
  wakes_.push_back({at, std::static_pointer_cast<watch>(w.shared_from_this())});
  std::push_heap(wakes_.begin(), wakes_.end(), [](const wake_entry& x, const wake_entry& y) { return x.at > y.at; });
  if (at < timer_at_) arm_timer();
}

void client_impl::arm_timer() {
  if (live_watches_ == 0) wakes_.clear();
  if (wakes_.empty()) {
    timer_at_ = clock_type::time_point::max();
    return;
  }
  timer_at_ = wakes_.front().at;
  timer_.expires_at(timer_at_);
  timer_.async_wait([weak = weak_from_this()](error_code ec) {
    if (auto self = weak.lock(); self && !ec) self->on_timer();
  });
}

void client_impl::on_timer() {
  const auto now = clock_type::now();
  const auto later = [](const wake_entry& a, const wake_entry& b) { return a.at > b.at; };
  while (!wakes_.empty() && wakes_.front().at <= now) {
    std::pop_heap(wakes_.begin(), wakes_.end(), later);
    auto e = std::move(wakes_.back());
    wakes_.pop_back();
    auto w = e.w.lock();
    if (!w || w->scheduled != e.at) continue;  // stale
    w->scheduled = clock_type::time_point::max();
    --live_watches_;
    w->wake(now);  // reschedules itself
  }
  arm_timer();
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
                describe_masters(t.results(), st.token));
  } else if (f.decided()) {
    REDLOCK_LOG(log_, log_level::warning, "{}: {} failed: {}; masters: {}", lock_name(st.resource, st.token), what,
                describe(ec), describe_masters(t.results(), st.token));
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
                describe_masters(t.results(), st.token));
  } else {
    REDLOCK_LOG(log_, log_level::warning,
                "{}: release answered by too few masters (the rest expire with the ttl); masters: {}",
                lock_name(st.resource, st.token), describe_masters(t.results(), st.token));
  }
}

void client_impl::note_unverified_fence(const lock_state& st, const std::vector<master_result>& round) {
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

std::string to_string(const quorum_report& r) {
  std::string out;
  if (r.error) out = r.error.message() + ": ";
  // A master still on its first attempt has not failed: named apart, after those that did.
  const auto connecting = static_cast<std::size_t>(std::count_if(
      r.failing.begin(), r.failing.end(), [](const auto& m) { return m.status == master_status::pending; }));
  const auto failed = r.failing.size() - connecting;
  if (r.failing.empty()) {
    fmt::format_to(std::back_inserter(out), "every master of {} usable", r.masters);
    return out;
  }
  if (failed) {
    fmt::format_to(std::back_inserter(out), "{} of {} masters could not be used ({} needed): ", failed, r.masters,
                   r.needed);
  } else {
    fmt::format_to(std::back_inserter(out), "{} of {} masters not connected yet ({} needed): ", connecting, r.masters,
                   r.needed);
  }
  bool first = true;
  for (const bool pending : {false, true}) {
    for (const auto& m : r.failing) {
      if ((m.status == master_status::pending) != pending) continue;
      if (!first) out += "; ";
      first = false;
      out += m.address;
      if (pending) {
        out += " still connecting";
        continue;
      }
      fmt::format_to(std::back_inserter(out), " {}", detail::status_text(m.status));
      if (m.error && m.error != error::server_error) fmt::format_to(std::back_inserter(out), ": {}", m.error.message());
      if (!m.server_text.empty())
        fmt::format_to(std::back_inserter(out), " ({})", detail::printable(m.server_text, 120));
    }
  }
  return out;
}

}  // namespace redlock

#undef REDLOCK_LOG
