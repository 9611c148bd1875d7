// SPDX-License-Identifier: BSL-1.0
// The Redlock client's I/O shell. Every decision (what a reply means, quorum, validity, release,
// retry, extension, keep-alive schedule, loss) is taken by the machines of redlock/core/; this
// file carries out their actions: it encodes each payload once, queues it on every master's
// connection (detail::master_link), arms timers, logs, counts and completes handlers.
//
// All of a client's operations and all of its masters' connections run on one strand, so a reply
// reaches its operation by a plain call from the connection's read path: one scheduler pass (the
// socket read's) per reply, no strand or coroutine per operation, one timer for every kept-alive
// lock.

#include "detail/client_state.hpp"
#include "detail/completion.hpp"
#include "detail/log.hpp"
#include "detail/timer.hpp"
#include <redlock/client.hpp>
#include <redlock/core/extend_fsm.hpp>
#include <redlock/core/keep_alive_fsm.hpp>
#include <redlock/core/lock_fsm.hpp>
#include <redlock/core/unlock_fsm.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/detail/token.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <utility>

namespace redlock {

namespace detail {

// ---- operations -------------------------------------------------------------------------------

// Installs a slot handler that cancels `op` on the client's strand (terminal and partial: a
// request already sent cannot be taken back, so total cancellation is not offered).
template <class Handler, class Op>
void bind_cancellation(Handler& h, const std::shared_ptr<Op>& op, const strand_type& strand) {
  auto slot = asio::get_associated_cancellation_slot(h);
  if (!slot.is_connected()) return;
  slot.assign([w = std::weak_ptr<Op>(op), strand](asio::cancellation_type type) {
    if (!(type & (asio::cancellation_type::terminal | asio::cancellation_type::partial))) return;
    if (auto self = w.lock()) asio::post(strand, [self] { self->cancel(); });
  });
}

// One async_lock / async_try_lock, driven by core::lock_fsm.
struct lock_op final : started_op {
  lock_op(std::shared_ptr<client_impl> c, std::shared_ptr<lock_state> s, lock_handler h, core::lock_rules rules)
      : owner(std::move(c)), st(std::move(s)), handler(std::move(h)), fsm(rules), timer(owner->strand()) {}
  ~lock_op() override {  // also when dropped unfinished (io_context torn down)
    owner->retire(*this);
    if (!member.empty()) owner->forget_waiter(member);
  }

  std::shared_ptr<client_impl> owner;
  std::shared_ptr<lock_state> st;
  std::optional<lock_handler> handler;
  core::lock_fsm fsm;
  redlock::detail::timer timer;  // the retry delay
  std::string member;            // the waiter's name in the masters' queues, once it queued
  std::int64_t ticket = 0;       // sent with the fair round in progress
  // Per master: a request of this waiter may have run there (answered, or not refused as
  // unsent), so that its entry, offer or a key handed to it may be there: a lost dequeue is
  // worth sending again only to those.
  std::vector<bool> reached;
  void note_reached(std::size_t i) {
    if (reached.size() != owner->config().masters.size()) reached.assign(owner->config().masters.size(), false);
    if (i < reached.size()) reached[i] = true;
  }

  void start() override {
    auto& c = *owner;
    std::string what;
    auto ec = c.check_lock_args(st->resource, st->ttl, &what);
    // Options that make no kind (no row of the table; `permits` without `semaphore`, say) are
    // refused, not ignored.
    if (!ec && !st->spec) {
      ec = error::invalid_argument;
      what = st->extras().kind_problem;
    }
    if (!ec) ec = c.check_kind_args(*st, what);
    if (ec) {
      REDLOCK_LOG(c.log(), log_level::debug, "{}: rejected ({} ms): {}{}{}", lock_name(st->resource, {}),
                  st->ttl.count(), describe(ec), what.empty() ? "" : ": ", what);
      return finish(ec);
    }
    if (c.closed()) return finish(asio::error::operation_aborted);
    if (!st->new_token(ec)) {
      REDLOCK_LOG(c.log(), log_level::error, "{}: cannot draw a token: {}", lock_name(st->resource, {}), describe(ec));
      return finish(ec);
    }
    const auto& prefix = c.config().key_prefix;
    if (st->multi()) {
      auto& x = st->set_extras();
      x.all_keys.reserve(x.resources.size());
      for (const auto& r : x.resources) x.all_keys.push_back(prefix + r);
      st->key = x.all_keys.front();
    } else {
      st->key = prefix + st->resource;
    }
    if (st->spec->claims) st->set_extras().waiter = st->token;  // names a writer's claim: stable across rounds
    c.enroll(*this);
    act(fsm.start(clock_type::now(), c.fair() && c.recently_contended(st->key),
                  st->spec->fence ? c.fence_hint(st->key) : 0));
  }

  void act(const core::lock_action& a) {
    auto& c = *owner;
    if (a.release) c.release_everywhere(*st, &fsm.table().answers());
    switch (a.what) {
      case core::lock_action::type::wait:
        return;
      case core::lock_action::type::acquire:
        // Every retry signs with a new token: a failed round's release, even one re-sent much
        // later on a new connection, can then never delete the key of a later round.
        if (fsm.attempts() > 1) {
          timer.cancel();  // a wake-up may start the round before the retry delay ended
          error_code ec;
          if (!st->new_token(ec)) {
            REDLOCK_LOG(c.log(), log_level::error, "{}: cannot draw a token: {}", lock_name(st->resource, {}),
                        describe(ec));
            (void)fsm.cancel();
            return finish(ec);
          }
        }
        c.note_attempt();
        st->fence_floor = a.fence;
        if (a.fair) {
          if (member.empty()) {
            member = c.new_waiter(*this);
            c.note_queued();
          }
          c.ensure_inbox();  // queued on each connection before the round: no wake-up is missed
          // A cluster's nodes count pub/sub receivers per node: its releases rarely hand over.
          for (std::size_t i = 0; i < c.config().masters.size(); ++i)
            fsm.set_deaf(i, c.deaf(i) || c.config().masters[i].cluster.enabled);
          ticket = a.ticket;
          note_sent();
          return c.send_votes(c.scratch_step(step::fair_acquire, *st, values()), a.at, shared_from_this(), fsm.round());
        }
        note_sent();
        return c.send_votes(c.scratch_step(step::acquire, *st, values()), a.at, shared_from_this(), fsm.round());
      case core::lock_action::type::confirm:
        // The granting masters disagree on the fence: those behind are raised to it while they
        // still hold our key (docs/safety.md, "Fencing tokens").
        c.note_confirm();
        st->fence_create = a.create;
        return c.send_some(c.scratch_step(step::confirm, *st, values()), a.at, shared_from_this(), fsm.round(),
                           [this](std::size_t i) { return fsm.needs_confirm(i); });
      case core::lock_action::type::sleep:
        REDLOCK_LOG(c.log(), log_level::debug, "{}: attempt {} failed: {}; masters: {}; retrying in {}",
                    lock_name(st->resource, st->token), fsm.attempts(), describe(fsm.last_error()),
                    describe_masters(fsm.table().answers(), st->token), format_duration(a.at - clock_type::now()));
        timer.expires_at(a.at);
        timer.async_wait([self = std::static_pointer_cast<lock_op>(shared_from_this())](error_code ec) {
          if (!ec) self->act(self->fsm.on_timer(clock_type::now()));
        });
        return;
      case core::lock_action::type::complete:
        if (a.ec == asio::error::operation_aborted) {
          REDLOCK_LOG(c.log(), log_level::debug, "{}: cancelled (attempt {})", lock_name(st->resource, st->token),
                      fsm.attempts());
        } else if (a.ec) {
          // Contention is business as usual; masters failing or answering too slowly are not.
          REDLOCK_LOG(c.log(), a.ec == error::not_acquired ? log_level::debug : log_level::warning,
                      "{}: not acquired after {} attempt(s) in {}: {}; masters: {}", lock_name(st->resource, st->token),
                      fsm.attempts(), format_duration(clock_type::now() - fsm.first_start()), describe(a.ec),
                      describe_masters(fsm.table().answers(), st->token));
        } else {
          REDLOCK_LOG(c.log(), log_level::debug, "{}: acquired for {} ms in {} (attempt {}), validity {}; masters: {}",
                      lock_name(st->resource, st->token), st->ttl.count(),
                      format_duration(clock_type::now() - fsm.first_start()), fsm.attempts(),
                      format_duration(fsm.validity_deadline() - clock_type::now()),
                      describe_masters(fsm.table().answers(), st->token));
        }
        if (st->spec->fence) c.note_fence_hint(st->key, std::max(fsm.fence(), fsm.fence_floor()));
        timer.cancel();  // a hand-over may end the acquisition during the retry delay
        if (!a.ec) {
          // Granted by hand-overs (with the round's own grants, or once a fenced lock's fence was
          // confirmed), whichever event completed it.
          if (fsm.handed()) c.note_handover();
          st->holders.granted(fsm.table().answers(), fsm.queued());
          st->fence = fsm.fence();
          if (st->spec->fence && !fsm.fence_verified()) c.note_unverified_fence(*st, fsm.table().answers());
        }
        // A claim that holds new readers off (a writer's) is dropped when the acquisition ends:
        // where a master said it queued, and, after a retry or a failure, wherever a late request
        // of it could still claim. (A writer granted at its first round sends none for a master
        // that had not answered: its late request claims only where a stale reader is left, and
        // that claim holds readers off one master, for one entry timeout, while the writer holds
        // the lock anyway. The uncontended writer then costs no extra request.)
        if (st->spec->claims && (fsm.queued_seen() || ((a.ec || fsm.attempts() > 1) && fsm.stragglers_possible())))
          c.leave_claims(*st);
        if (!member.empty()) {
          if (fsm.queued()) {
            // A request still unanswered may run yet, before the dequeue behind it.
            for (std::size_t i = 0; i < fsm.table().size(); ++i)
              if (fsm.table().status(i) == master_status::pending) note_reached(i);
            c.leave_queues(*st, member, a.ec ? std::string_view{} : std::string_view{st->token}, reached);
          }
          c.forget_waiter(member);
          member.clear();
        }
        st->set_results(fsm.table().answers());
        return finish(a.ec);
    }
  }

  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (client_impl::is_release(tag)) return;  // a failed round's release: nobody waits for it
    if (!member.empty() && ec != error::not_connected) note_reached(master_of(tag));
    // A TIME answer is a sample only with its own round's send time.
    ec = owner->vote_reply(master_of(tag), ec, r, round_of(tag) == sent_round ? sent_at : clock_type::time_point{});
    // A hand-over that came before this answer counts with it only if the answer's clock sample
    // leaves the master trusted.
    if (fsm.has_early(master_of(tag)) && !owner->counts_handover(master_of(tag))) fsm.drop_early(master_of(tag));
    if (!(tag & eval_flag) && core::is_noscript(ec, r)) {
      // The master's script cache was empty (the scripts are loaded first on every connection, but
      // requests queued while it was being made go before them): the request again with EVAL,
      // queued before anything that can follow it there (the round's release), when the machine
      // says so (core::lock_fsm::on_noscript: the round is awaited, or it granted the lock).
      if (const auto s = fsm.on_noscript(round_of(tag), st->held)) {
        if (owner->resend_eval(tag, *s, owner->scratch_step(*s, *st, values(), false), owner->config().request_timeout,
                               shared_from_this()))
          return;
      }
    }
    act(fsm.on_reply(round_of(tag), master_of(tag), ec, r, clock_type::now(), owner->unit_random(),
                     owner->down_cause(master_of(tag))));
  }

  // When the round in progress was sent (the hazard guard's TIME samples).
  void note_sent() {
    sent_at = clock_type::now();
    sent_round = fsm.round();
  }
  clock_type::time_point sent_at{};
  std::uint64_t sent_round = 0;

  // The values of this operation's requests: the lock's, and the round's waiter, ticket and fence.
  core::step_values values() const {
    auto v = owner->values(*st);
    if (!member.empty()) v.waiter = member;
    v.ticket = ticket;
    v.round = fsm.hands_over() ? fsm.round() : 0;  // 0: no offer
    v.fence = fsm.done() ? st->fence : fsm.fence();
    return v;
  }

  void on_wake(std::size_t master) override {
    const auto a = fsm.on_wake(master, clock_type::now());
    if (a.what == core::lock_action::type::acquire) owner->note_wakeup();
    act(a);
  }

  void on_handover(std::size_t master, std::uint64_t round, std::int64_t fence) override {
    // A master the guard does not trust now hands nothing over: the message only wakes.
    if (!owner->counts_handover(master)) return on_wake(master);
    const auto a = fsm.on_handover(round, master, clock_type::now(), fence, owner->unit_random());
    if (a.what == core::lock_action::type::acquire) owner->note_wakeup();  // hand-overs short of a quorum
    act(a);
  }

  void cancel() override {
    timer.cancel();
    act(fsm.cancel());
  }

  void finish(error_code ec) {
    owner->retire(*this);
    if (!handler) return;
    st->attempts = fsm.attempts();
    if (!ec) {
      st->set_deadline(fsm.validity_deadline());
      st->held = true;
    } else {
      st->owner.reset();  // a failed acquisition keeps no client internals alive
    }
    owner->note_lock_outcome(ec, fsm.first_start());
    auto h = std::move(*handler);
    handler.reset();
    complete_handler(std::move(h), st->ex(), ec, lock::make(st));
  }
};

// One async_unlock, driven by core::unlock_fsm: the quick form (`handler`, at a majority) or the
// one that accounts for every master (`all_handler`, unlock_options).
struct unlock_op final : started_op {
  unlock_op(std::shared_ptr<lock_state> s, unlock_handler h, std::size_t masters, std::chrono::milliseconds timeout)
      : st(std::move(s)), handler(std::move(h)), fsm(masters, timeout) {}
  unlock_op(std::shared_ptr<lock_state> s, unlock_all_handler h, std::size_t masters, std::chrono::milliseconds timeout,
            const unlock_options& opts)
      : st(std::move(s)), all_handler(std::move(h)), fsm(masters, timeout, opts.wait_for_all) {}
  ~unlock_op() override { st->owner->retire(*this); }

  std::shared_ptr<lock_state> st;
  std::optional<unlock_handler> handler;
  std::optional<unlock_all_handler> all_handler;
  core::unlock_fsm fsm;

  void start() override {
    auto& c = *st->owner;
    c.stop_watching(*st, true);
    c.enroll(*this);
    act(fsm.start(clock_type::now()));
  }

  void act(const core::unlock_action& a) {
    auto& c = *st->owner;
    switch (a.what) {
      case core::unlock_action::type::wait:
        return;
      case core::unlock_action::type::release:
        return c.send_all(c.scratch_step(step::release, *st, c.values(*st)), a.at, shared_from_this(), 0);
      case core::unlock_action::type::complete:
        c.retire(*this);
        if (fsm.decided()) {
          c.note_release(*st, a.ec, fsm.held(), fsm.table());
          st->set_results(fsm.table().answers());
        }
        if (fsm.waiters() && c.fair()) c.note_contended(st->key);
        if (handler) {
          auto h = std::move(*handler);
          handler.reset();
          complete_handler(std::move(h), st->ex(), a.ec, fsm.decided() ? fsm.held() : 0);
        } else if (all_handler) {
          auto h = std::move(*all_handler);
          all_handler.reset();
          unlock_result r;
          if (fsm.decided()) r = {fsm.released(), fsm.not_held(), fsm.no_answer()};
          complete_handler(std::move(h), st->ex(), a.ec, r);
        }
        return;
    }
  }

  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    auto& c = *st->owner;
    // NOSCRIPT is looked for first: the values for a resend are made only then.
    if (core::is_noscript(ec, r) && c.eval_instead(tag, ec, r, *st, step::release, c.values(*st), shared_from_this()))
      return;
    // No answer from this master (down, or its connection broke or timed out): our key may still
    // be there, so the release goes again on the master's next connection.
    if (st->holders.resend(master_of(tag), ec)) {
      c.defer_release(master_of(tag), st->background_release_payload(), std::max(st->ttl, st->longest_ttl));
    }
    act(fsm.on_reply(master_of(tag), ec, r, clock_type::now(), c.down_cause(master_of(tag))));
  }

  void cancel() override { act(fsm.cancel()); }
};

// One async_extend, driven by core::extend_fsm.
struct extend_op final : started_op {
  extend_op(std::shared_ptr<lock_state> s, extend_handler h, std::chrono::milliseconds t, const client_config& cfg)
      : st(std::move(s)),
        handler(std::move(h)),
        ttl(t),
        fsm(cfg.masters.size(), t, cfg.request_timeout, cfg.drift, st->get_deadline(), st->quorum) {}
  ~extend_op() override { st->owner->retire(*this); }

  std::shared_ptr<lock_state> st;
  std::optional<extend_handler> handler;
  std::chrono::milliseconds ttl;
  core::extend_fsm fsm;
  clock_type::time_point sent_at{};  // when the extension was sent (the hazard guard's TIME sample)

  core::step_values values() const {
    auto v = st->owner->values(*st);
    v.ttl_ms = ttl.count();
    return v;
  }

  void start() override {
    auto& c = *st->owner;
    if (!st->held) return finish(error::not_locked);
    if (auto ec = c.check_lock_args(st->resource, ttl)) return finish(ec);
    c.enroll(*this);
    act(fsm.start(clock_type::now()));
  }

  void act(const core::extend_action& a) {
    auto& c = *st->owner;
    switch (a.what) {
      case core::extend_action::type::wait:
        return;
      case core::extend_action::type::extend:
        sent_at = clock_type::now();
        return c.send_votes(c.scratch_step(step::extend, *st, values()), a.at, shared_from_this(), 0);
      case core::extend_action::type::complete:
        if (a.ec != asio::error::operation_aborted) {
          if (fsm.decided()) st->set_results(fsm.table().answers());
          if (!a.ec) {
            st->set_deadline(fsm.validity_deadline());
            ++st->extensions;
            c.deadline_moved(*st, fsm.decided() ? &fsm.table().answers() : nullptr);
          }
          c.note_extension(*st, a.ec, ttl, fsm, false);
        }
        return finish(a.ec);
    }
  }

  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    ec = st->owner->vote_reply(master_of(tag), ec, r, sent_at);
    if (core::is_noscript(ec, r) &&
        st->owner->eval_instead(tag, ec, r, *st, step::extend, values(), shared_from_this()))
      return;
    act(fsm.on_reply(master_of(tag), ec, r, clock_type::now(), st->owner->down_cause(master_of(tag))));
  }

  void cancel() override { act(fsm.cancel()); }

  void finish(error_code ec) {
    st->owner->retire(*this);
    if (!handler) return;
    auto h = std::move(*handler);
    handler.reset();
    complete_handler(std::move(h), st->ex(), ec);
  }
};

}  // namespace detail

// ---- lock -------------------------------------------------------------------------------------

lock lock::make(std::shared_ptr<detail::lock_state> state) noexcept { return lock{std::move(state)}; }

lock& lock::operator=(lock&& other) noexcept {
  if (this != &other) {
    release_in_background();
    state_ = std::move(other.state_);
  }
  return *this;
}

lock::~lock() { release_in_background(); }

void lock::release_in_background() noexcept {
  if (!state_ || !state_->held.exchange(false)) return;
  try {
    auto& owner = *state_->owner;
    owner.post([st = state_] {
      auto& c = *st->owner;
      c.note_background_release(*st);
      c.stop_watching(*st);
      c.release_everywhere(*st);
    });
  } catch (...) {
    // Out of memory while queuing the release: the keys expire with the ttl.
  }
}

bool lock::owns_lock() const noexcept { return state_ && state_->held; }

const std::string& lock::resource() const noexcept {
  static const std::string empty;
  return state_ ? state_->resource : empty;
}

const std::string& lock::token() const noexcept {
  static const std::string empty;
  return state_ ? state_->token : empty;
}

lock::clock::time_point lock::validity_deadline() const noexcept {
  return state_ ? state_->get_deadline() : clock::time_point{};
}

std::vector<master_result> lock::masters() const {
  if (!state_) return {};
  return state_->results_copy();
}

std::vector<std::string> lock::resources() const {
  if (!state_) return {};
  if (state_->multi()) return state_->extras().resources;
  return {state_->resource};
}

lock_kind lock::kind() const noexcept { return state_ ? state_->kind : lock_kind::exclusive; }
std::uint64_t lock::fence() const noexcept { return state_ ? static_cast<std::uint64_t>(state_->fence) : 0; }

std::size_t lock::attempts() const noexcept { return state_ ? state_->attempts : 0; }
std::size_t lock::extensions() const noexcept { return state_ ? state_->extensions.load() : 0; }
bool lock::lost() const noexcept { return state_ && state_->lost; }

boost::system::error_code lock::loss_reason() const {
  if (!state_) return {};
  std::lock_guard guard{state_->mutex()};
  return state_->loss_reason;
}

std::string lock::loss_description() const {
  if (!state_) return {};
  std::lock_guard guard{state_->mutex()};
  return state_->loss_detail;
}

lock::executor_type lock::get_executor() const noexcept {
  return state_ ? state_->ex() : executor_type{boost::asio::system_executor()};
}

void lock::keep_alive(keep_alive_options opts) {
  if (!state_ || !state_->held) return;
  state_->owner->post([st = state_, opts] {
    if (auto* w = st->owner->watcher_of(st)) w->keep(opts);
  });
}

void lock::start_wait_lost(lost_handler h) {
  if (!state_ || !state_->owner) {
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked));
    return;
  }
  state_->owner->post([st = state_, h = std::move(h)]() mutable { st->owner->add_waiter(st, std::move(h)); });
}

void lock::start_wait_event(event_handler h) {
  if (!state_ || !state_->owner) {
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked), lock_event{});
    return;
  }
  state_->owner->post([st = state_, h = std::move(h)]() mutable { st->owner->add_event_waiter(st, std::move(h)); });
}

void lock::start_unlock(unlock_all_handler h, unlock_options opts) {
  if (!state_ || !state_->held.exchange(false)) {
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked), unlock_result{});
    return;
  }
  auto& c = *state_->owner;
  auto op = std::make_shared<detail::unlock_op>(state_, std::move(h), c.size(), c.config().release_timeout, opts);
  detail::bind_cancellation(*op->all_handler, op, c.strand());
  c.start_op(op);
}

void lock::start_unlock(unlock_handler h) {
  if (!state_ || !state_->held.exchange(false)) {
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked), std::size_t{0});
    return;
  }
  auto& c = *state_->owner;
  auto op = std::make_shared<detail::unlock_op>(state_, std::move(h), c.size(), c.config().release_timeout);
  detail::bind_cancellation(*op->handler, op, c.strand());
  c.start_op(op);
}

void lock::start_extend(extend_handler h, std::chrono::milliseconds ttl) {
  if (!state_ || !state_->owner || !state_->held) {
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked));
    return;
  }
  auto& c = *state_->owner;
  auto op = std::make_shared<detail::extend_op>(state_, std::move(h), ttl, c.config());
  detail::bind_cancellation(*op->handler, op, c.strand());
  c.start_op(op);
}

// ---- client -----------------------------------------------------------------------------------

client::client(executor_type ex, client_config cfg)
    : impl_(std::make_shared<detail::client_impl>(std::move(ex), std::move(cfg))) {
  impl_->start();
}

client::~client() { impl_->close(); }

client::executor_type client::get_executor() const noexcept { return impl_->executor(); }
const client_config& client::config() const noexcept { return impl_->config(); }
std::vector<connection_status> client::masters() const { return impl_->statuses(); }
client_stats client::stats() const { return impl_->stats(); }
std::vector<master_hazard> client::hazards() const { return impl_->hazards(); }
void client::close() { impl_->close(); }

void client::start_wait_ready(ready_handler h, std::optional<std::chrono::milliseconds> timeout) {
  impl_->wait_ready(std::move(h), timeout);
}

quorum_report client::report(const lock& l) const { return impl_->lock_report(l); }

void client::start_lock(lock_handler h, std::vector<std::string> resources, std::chrono::milliseconds ttl,
                        lock_options opts, bool multi, bool retry) {
  auto& c = *impl_;
  c.note_operation();
  auto st = std::make_shared<detail::lock_state>(impl_, c.shared_executor());
  if (multi) {
    st->resource = resources.empty() ? std::string{} : resources.front();
    st->set_extras().resources = std::move(resources);
  } else if (!resources.empty()) {
    st->resource = std::move(resources.front());
  }
  st->ttl = ttl;
  st->kind = opts.kind;
  st->permits = opts.permits;
  // Its row of the kinds' table, chosen once here: nothing after branches on the kind.
  std::string problem;
  st->spec = detail::check_kind(opts.kind, opts.permits, opts.fence, opts.owner, multi, &problem);
  if (!problem.empty()) st->set_extras().kind_problem = std::move(problem);
  if (!opts.owner.empty()) st->set_extras().owner_id = std::move(opts.owner);
  if (st->spec && st->spec->semaphore_quorum) st->quorum = st->spec->quorum(c.size(), st->permits);
  // An empty list must not look like the plain lock of resource "": the kind's checks refuse it.
  if (multi && st->extras().resources.empty()) st->resource = "-";
  auto rules = st->spec ? c.lock_rules(*st, retry) : c.lock_rules(ttl, retry);
  auto op = std::make_shared<detail::lock_op>(impl_, std::move(st), std::move(h), rules);
  detail::bind_cancellation(*op->handler, op, c.strand());
  c.start_op(op);
}

void client::start_lock(lock_handler h, std::string resource, std::chrono::milliseconds ttl, bool retry) {
  auto& c = *impl_;
  c.note_operation();
  auto st = std::make_shared<detail::lock_state>(impl_, c.shared_executor());
  st->resource = std::move(resource);
  st->ttl = ttl;
  auto op = std::make_shared<detail::lock_op>(impl_, std::move(st), std::move(h), c.lock_rules(ttl, retry));
  detail::bind_cancellation(*op->handler, op, c.strand());
  c.start_op(op);
}

}  // namespace redlock

#undef REDLOCK_LOG
