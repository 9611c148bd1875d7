// SPDX-License-Identifier: BSL-1.0
// The lock client and its masters' connections: what a connection that comes up or goes down
// means for the locks. Releases a broken connection left in doubt are kept (core::release_ledger)
// and re-sent on the next connection; readiness (client::async_wait_ready) and each master's
// failure cause (core::readiness); the per-master report of an operation.
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
namespace detail {

namespace {

// One release sent in the background; an answer that leaves its outcome unknown defers it.
struct release_job final : reply_sink {
  release_job(std::weak_ptr<client_impl> c, std::string p, std::chrono::milliseconds t,
              clock_type::time_point u = clock_type::time_point::min(), bool y = false)
      : owner(std::move(c)), payload(std::move(p)), ttl(t), until(u), yields(y) {}
  std::weak_ptr<client_impl> owner;
  std::string payload;
  std::chrono::milliseconds ttl;
  clock_type::time_point until;  // min(): a first send; else the bound of a re-sent one
  bool yields;                   // kept as core::release_ledger's entry::yields
  std::vector<bool> settled;     // masters where no key of ours can be (the held lock's round said so)
  void on_reply(std::uint64_t tag, error_code ec, const resp::response&) override {
    const auto i = master_of(tag);
    if (!core::release_in_doubt(ec) || (i < settled.size() && settled[i])) return;
    if (auto c = owner.lock()) c->defer_release(i, payload, ttl, until, yields);
  }
};

}  // namespace

void client_impl::release_everywhere(lock_state& st, const core::compact_results* round) {
  // A failed round (`round`): only where its request may have set our key (core::may_have_set).
  const auto target = [round](std::size_t i) {
    return !round || i >= round->size() || core::may_have_set(round->status(i));
  };
  if (round && !core::any_may_have_set(*round, links_.size())) return;  // nothing to release, nothing to encode
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  const auto ttl = std::max(st.ttl, st.longest_ttl);
  // A failed or cancelled round is released with the kind's abandon step where it has one (a
  // fenced round gives its counter step back); it is rare enough to be encoded each time.
  std::string payload;
  if (round && st.spec->abandon.exists()) {
    resp::request req;
    (void)core::encode_step(req, st.spec->abandon, st.values(), false);
    payload = std::move(req).take_payload();
  } else {
    payload = st.background_release_payload();
  }
  auto job = std::make_shared<release_job>(weak_from_this(), std::move(payload), ttl);
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

void client_impl::send_in_background(std::string payload, std::chrono::milliseconds ttl, const std::vector<bool>& worth,
                                     bool yields) {
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  auto job =
      std::make_shared<release_job>(weak_from_this(), std::move(payload), ttl, clock_type::time_point::min(), yields);
  job->settled.assign(links_.size(), true);
  for (std::size_t i = 0; i < links_.size() && i < worth.size(); ++i) job->settled[i] = !worth[i];
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (links_[i]->submit(job->payload, 1, deadline, job, make_tag(release_round, i)) && !job->settled[i])
      defer_release(i, job->payload, ttl, clock_type::time_point::min(), yields);
  }
}

std::int64_t client_impl::fence_hint(const std::string& key) const {
  const auto it = fence_hints_.find(key);
  return it == fence_hints_.end() ? 0 : it->second;
}

void client_impl::note_fence_hint(const std::string& key, std::int64_t counter) {
  if (counter <= 0) return;
  // Bounded like the contention hints: all of them go (rarely) when full.
  if (fence_hints_.size() >= 1024 && !fence_hints_.contains(key)) fence_hints_.clear();
  auto& h = fence_hints_[key];
  h = std::max(h, counter);
}

bool client_impl::is_release(std::uint64_t tag) noexcept { return round_of(tag) == release_round; }

void client_impl::defer_release(std::size_t i, std::string_view payload, std::chrono::milliseconds ttl,
                                clock_type::time_point until, bool yields) {
  if (i >= deferred_.size() || closed_) return;
  const auto lifetime = ttl + std::chrono::ceil<std::chrono::milliseconds>(core::drift(ttl, cfg_.drift));
  bump<true>(counters_.releases_expired, deferred_[i].defer(payload, lifetime, clock_type::now(), until, yields));
}

void client_impl::on_link_down(std::size_t i) { deferred_[i].connection_lost(clock_type::now()); }

void client_impl::on_link_up(std::size_t i) {
  health_.up(i);
  if (!closed_) load_scripts(i);
  // A new connection has no subscriptions: waiters queued on this master are woken through it.
  if (inbox_wanted_ && !closed_) subscribe_inbox(i);
  // After the scripts were queued: whatever a waiter's handler sends comes behind them.
  readiness_changed();
  resend_deferred(i, "connected again");
}

void client_impl::on_link_moved(std::size_t i) {
  // A cluster master's slots moved (a migration ended, a failover): releases that timed out
  // during it (TRYAGAIN until their deadline) can reach their keys now.
  if (i < health_.size() && health_.is_up(i)) resend_deferred(i, "slot map changed");
}

void client_impl::resend_deferred(std::size_t i, std::string_view why) {
  if (deferred_[i].empty() || closed_) return;
  std::size_t expired = 0;
  auto due = deferred_[i].take(clock_type::now(), expired);
  const auto deadline = clock_type::now() + cfg_.release_timeout;
  std::size_t sent = 0;
  for (auto& d : due) {
    const auto ttl = std::chrono::duration_cast<std::chrono::milliseconds>(d.lifetime);
    auto job = std::make_shared<release_job>(weak_from_this(), std::move(d.payload), ttl, d.until, d.yields);
    if (links_[i]->submit(job->payload, 1, deadline, job, make_tag(release_round, i))) {
      deferred_[i].defer(job->payload, d.lifetime, clock_type::now(), d.until, d.yields);
    } else {
      ++sent;
    }
  }
  bump<true>(counters_.releases_resent, sent);
  bump<true>(counters_.releases_expired, expired);
  REDLOCK_LOG(log_, log_level::info, "{}: {}: re-sending {} release(s) left in doubt ({} expired meanwhile)", names_[i],
              why, sent, expired);
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
  redlock::detail::timer timer;

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

bool client_impl::resend_eval(std::uint64_t tag, step s, std::string_view payload, std::chrono::milliseconds timeout,
                              const std::shared_ptr<reply_sink>& sink) {
  const auto i = master_of(tag);
  if (i >= links_.size()) return false;
  REDLOCK_LOG(log_, log_level::debug, "{}: script not in the server's cache (NOSCRIPT): sending it with EVAL",
              names_[i]);
  // A yes by EVAL is judged by a clock sample read after it ran, as the first sending's would
  // have been (vote_reply): not by the older one that came with NOSCRIPT.
  const bool with_time = is_vote(s) && cfg_.guard.clock_jumps && !time_refused_[i];
  if (with_time) payload = timed(payload);
  return !links_[i]->submit(payload, with_time ? 2 : 1, clock_type::now() + timeout, sink, tag | eval_flag);
}

bool client_impl::eval_instead(std::uint64_t tag, error_code ec, const resp::response& r, const lock_state& st, step s,
                               const core::step_values& v, const std::shared_ptr<reply_sink>& sink) {
  if (!sink || (tag & eval_flag) || !core::is_noscript(ec, r)) return false;
  const auto timeout = s == step::release ? cfg_.release_timeout : cfg_.request_timeout;
  return resend_eval(tag, s, scratch_step(s, st, v, false), timeout, sink);
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
