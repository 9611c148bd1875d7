// SPDX-License-Identifier: BSL-1.0
// Held locks that somebody watches: the keep-alive (one machine per lock, core::keep_alive_fsm;
// one timer for all of them, detail::wake_queue), the loss and its waiters (detail::waiter_list),
// and the events (lock::async_wait_event).
#include "detail/client_state.hpp"
#include "detail/completion.hpp"
#include "detail/log.hpp"
#include <redlock/core/extend_fsm.hpp>
#include <redlock/core/keep_alive_fsm.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/detail/token.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/container/small_vector.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <iterator>
#include <new>
#include <set>

namespace redlock {
namespace detail {

void watch::keep(const keep_alive_options& opts) {
  auto st = state.lock();
  if (!st) return;
  // Every request's ttl is bounded by max_ttl, the keep-alive's too: the restart quarantine
  // (docs/safety.md) rests on it. A longer one is cut to max_ttl and said.
  auto bounded = opts;
  const auto max_ttl = st->owner->config().max_ttl;
  if (bounded.ttl > max_ttl) {
    REDLOCK_LOG(st->owner->log(), log_level::warning,
                "{}: keep-alive ttl {} ms is above max_ttl: extending by {} ms instead",
                lock_name(st->resource, st->token), bounded.ttl.count(), max_ttl.count());
    bounded.ttl = max_ttl;
  }
  fsm.keep(bounded, clock_type::now());
  st->owner->schedule(*this);
}

// ---- watching -----------------------------------------------------------------------------------

watch* client_impl::watcher_of(const std::shared_ptr<lock_state>& st) {
  if (st->watcher) return st->watcher->fsm.finished() ? nullptr : st->watcher.get();
  if (!st->held || closed_) return nullptr;
  st->watcher = std::make_shared<watch>(st, cfg_.request_timeout);
  enroll(*st->watcher);
  // Not scheduled yet: the caller does (keep() with its first wake-up), so that a kept-alive lock
  // never has a second entry in the timer queue for the loss point.
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

void client_impl::deadline_moved(lock_state& st, const core::compact_results* round) {
  if (!st.watcher) return;
  auto& w = *st.watcher;
  const bool was_finished = w.fsm.finished();
  w.fsm.deadline_moved(st.get_deadline());
  if (!was_finished && w.events_wanted()) {
    auto e = w.make_event(st, lock_event::type::extended);
    if (round) e.masters = round->expand();
    w.post_event(std::move(e));
  }
  schedule(w);
}

void client_impl::add_event_waiter(const std::shared_ptr<lock_state>& st, event_handler h) {
  // A watcher that has finished still holds the final event: it is handed out again.
  watch* w = st->watcher ? st->watcher.get() : watcher_of(st);
  if (!w) {
    const auto ec = closed_ ? make_error_code(asio::error::operation_aborted) : make_error_code(error::not_locked);
    return complete_handler(std::move(h), st->ex(), ec, lock_event{});
  }
  schedule(*w);
  auto& l = w->listen();
  l.events_wanted = true;
  if (l.event_waiters.empty() && !l.events.empty()) {
    auto e = l.events.next();
    return complete_handler(std::move(h), st->ex(), error_code{}, std::move(*e));
  }
  if (w->fsm.finished() && l.events.empty()) {
    // Stopped without a final event (the handle was dropped, or the client closed).
    return complete_handler(std::move(h), st->ex(), make_error_code(asio::error::operation_aborted), lock_event{});
  }
  l.event_waiters.add(std::move(h), strand_, std::weak_ptr<watch_listeners>(w->listeners),
                      &watch_listeners::event_waiters, ex_);
}

void client_impl::add_waiter(const std::shared_ptr<lock_state>& st, lost_handler h) {
  if (st->lost) return complete_handler(std::move(h), st->ex(), error_code{});
  watch* w = watcher_of(st);
  if (!w) return complete_handler(std::move(h), st->ex(), make_error_code(asio::error::operation_aborted));
  schedule(*w);
  w->listen();
  w->listeners->waiters.add(std::move(h), strand_, std::weak_ptr<watch_listeners>(w->listeners),
                            &watch_listeners::waiters, ex_);
}

// The keep-alive queue (detail::wake_queue) decides when the one timer fires.
void client_impl::schedule(watch& w) {
  least_margin_ = std::min(least_margin_, w.fsm.margin());
  const auto at = closed_ ? clock_type::time_point::max() : w.fsm.next_wake();
  if (const auto when = wakes_.schedule(w, at)) arm_timer(*when);
}

void client_impl::arm_timer(clock_type::time_point at) {
  if (at == clock_type::time_point::max()) {
    timer_.cancel();
    return;
  }
  // expires_at cancels the wait in place before the new one is made: when making it throws (an
  // allocation failed), no wait stands, and the queue must not believe in one, or no later
  // schedule would arm the timer again and every watched lock would go unwatched.
  try {
    timer_.expires_at(at);
    timer_.async_wait([weak = weak_from_this()](error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->on_timer();
    });
  } catch (...) {
    wakes_.disarm();
    throw;
  }
}

// A pass of the timer wakes at most this many watchers, earliest first, and when more are due the
// timer fires again at once, behind the handlers queued meanwhile. Without the bound, 10,000
// renewals due together held the strand for about 40 ms while their votes piled up unwritten in
// every connection's queue and no reply was read: the peak of the heap. With it the writes and
// replies of one slice run before the next slice starts. 256 keeps the batches full (eight of 32
// votes) and one slice around a millisecond.
constexpr std::size_t wakes_per_pass = 256;

std::unique_ptr<core::extend_fsm> client_impl::extension_machine(std::chrono::milliseconds ttl,
                                                                 clock_type::time_point old_deadline,
                                                                 std::size_t needed) {
  if (spare_extensions_.empty())
    return std::make_unique<core::extend_fsm>(size(), ttl, cfg_.request_timeout, cfg_.drift, old_deadline, needed);
  auto m = std::move(spare_extensions_.back());
  spare_extensions_.pop_back();
  m->reset(ttl, old_deadline, needed);  // the client's masters, timeout and drift: the same
  return m;
}

void client_impl::give_back(std::unique_ptr<core::extend_fsm>& m) noexcept {
  // Kept only in room reserved beforehand: giving back must not throw (it runs on every path out
  // of an extension's end); without room the machine is freed.
  if (spare_extensions_.capacity() == 0) {
    try {
      spare_extensions_.reserve(wakes_per_pass);
    } catch (const std::bad_alloc&) {
    }
  }
  if (m && spare_extensions_.size() < spare_extensions_.capacity()) spare_extensions_.push_back(std::move(m));
  m.reset();
}

// But a wake-up may be a loss to tell, and between slices any handler that is ready runs, the
// application's included: so a pass is cut only while the earliest wake-up left has waited less
// than an eighth of the smallest notify margin of any lock watched so far (none is cut when that
// margin is under 8 ms); past that the pass goes on in the same handler. Cutting a pass makes no
// wake-up later than that bound and one round of the loop.
void client_impl::on_timer() {
  // The renewals that came due together go to the masters in batches (send_votes, then
  // flush_vote_batch for the last). A master that refuses a batch tells the watchers then, and
  // they reschedule (a retry sooner than any wake-up `fired` knew of): the timer is armed from the
  // queue as it stands after that, also when something threw, so that no wake-up is left without it.
  std::exception_ptr failure;
  wake_due(wakes_per_pass, failure);
  try {
    arm_timer(wakes_.rearm());  // not armed(): an arm that failed in this pass left it `never`
  } catch (...) {
    if (!failure) failure = std::current_exception();
    // No wait stands (an allocation failed): what is due now is woken here rather than left until
    // the next wake-up somebody asks for, and the timer is tried once more. When that fails too,
    // arm_timer leaves the queue believing it unarmed, so that the next schedule() arms it.
    if (wakes_.rearm() <= clock_type::now()) wake_due(static_cast<std::size_t>(-1), failure);
    try {
      arm_timer(wakes_.rearm());
    } catch (...) {
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// Wakes, `limit` at a time, what was due when it was called, until none of that is left or what
// is left may wait for the next pass (see on_timer). What came due meanwhile is the next pass's,
// which the timer armed at it starts at once: a backlog that keeps coming does not hold the strand.
void client_impl::wake_due(std::size_t limit, std::exception_ptr& failure) {
  // (No lock watched yet: nothing is due; `max() / 8` would overflow in the comparison below.)
  const auto budget =
      least_margin_ == std::chrono::milliseconds::max() ? std::chrono::milliseconds::zero() : least_margin_ / 8;
  const auto start = clock_type::now();
  bool split = false;
  try {
    begin_vote_batch();
    for (;;) {
      const auto now = clock_type::now();
      const auto next = wakes_.fired(
          start, [now](watch& w) { w.wake(now); }, limit);
      if (next > start) break;
      // Read after the slice: what ran inline in it (a waiter's handler) counts as waiting.
      if (clock_type::now() - next < budget) {
        split = true;
        break;
      }
    }
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  try {
    flush_vote_batch();
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  if (split) bump<true>(counters_.keep_alive_passes_split);
}

// ---- watching and keep-alive: one machine per watched lock, one timer for all of them ----------

core::step_values watch::values(const client_impl& c, const lock_state& st) const {
  auto v = c.values(st);
  v.ttl_ms = ext ? ext->ttl().count() : 0;
  return v;
}

void watch::wake(clock_type::time_point now) {
  auto st = state.lock();
  if (!st) return;
  auto& c = *st->owner;
  // The next wake-up is asked for also when this one throws (an allocation failed): a watcher
  // with none would neither renew its lock nor tell the holder it was lost. The machine then wakes
  // at the loss point at the latest, and tells the holder there.
  try {
    wake_step(*st, now);
  } catch (...) {
    c.schedule(*this);
    throw;
  }
  c.schedule(*this);
}

void watch::wake_step(lock_state& st, clock_type::time_point now) {
  auto& c = *st.owner;
  const auto a = fsm.on_timer(now);
  if (a.what == core::keep_alive_action::type::extend) {
    ext = c.extension_machine(a.ttl, fsm.deadline(), st.quorum);
    ++ext_round;
    const auto e = ext->start(now);
    if (e.what == core::extend_action::type::extend) {
      // Joined to the pass's batch, or encoded into the client's scratch buffer (the connections
      // copy it): nothing per lock.
      c.send_extension(st, values(c, st), e.at, shared_from_this(), ext_round);
    } else {
      on_extension_done(st, e.ec, now);
    }
  } else if (a.what == core::keep_alive_action::type::lost) {
    declare_lost(st, a.reason);
  } else if (fsm.capped() && !cap_logged) {
    cap_logged = true;
    REDLOCK_LOG(c.log(), log_level::info,
                "{}: keep-alive stopped at its cap ({} extension(s)); the lock will be lost at its deadline",
                lock_name(st.resource, st.token), fsm.extensions());
  }
}

void watch::on_reply(std::uint64_t tag, error_code ec, const resp::response& r) {
  auto st = state.lock();
  if (!st || round_of(tag) != ext_round || !ext || ext->done()) return;
  auto& c = *st->owner;
  ec = c.vote_reply(master_of(tag), ec, r, ext->sent());
  // NOSCRIPT is looked for first: the values and the reference for a resend are made only then.
  if (core::is_noscript(ec, r) && c.eval_instead(tag, ec, r, *st, step::extend, values(c, *st), shared_from_this()))
    return;
  const auto now = clock_type::now();
  const auto e = ext->on_reply(master_of(tag), ec, r, now, c.down_cause(master_of(tag)));
  if (e.what == core::extend_action::type::complete) {
    try {
      on_extension_done(*st, e.ec, now);
    } catch (...) {
      c.schedule(*this);  // as in wake()
      throw;
    }
    c.schedule(*this);
  }
}

void watch::on_extension_done(lock_state& st, error_code ec, clock_type::time_point now) {
  auto& c = *st.owner;
  // The machine leaves here, whichever way this ends: between extensions the watcher keeps none
  // of it, and the next renewal (of any lock) takes it up again.
  struct handed_back {
    client_impl& c;
    std::unique_ptr<core::extend_fsm> m;
    ~handed_back() { c.give_back(m); }
  } held{c, std::move(ext)};
  const auto& done = held.m;
  if (!ec && !fsm.finished()) {
    st.set_deadline(done->validity_deadline());
    ++st.extensions;
  }
  if (!fsm.finished()) c.note_extension(st, ec, done->ttl(), *done, true);
  std::vector<master_result> round;  // for the event, copied only when somebody reads events
  if (done->decided()) {
    if (events_wanted()) round = done->table().results();
    // The round's compact answers become the lock's, and the lock's last ones the machine's
    // storage for its next round: nothing is copied or allocated.
    st.swap_results(done->table().answers());
  }
  const auto a = fsm.on_extended(ec, done->validity_deadline(), now);
  if (a.what == core::keep_alive_action::type::lost) {
    declare_lost(st, a.reason);
    return;
  }
  using notice = core::keep_alive_action::notice;
  if (a.tell == notice::extended || a.tell == notice::extend_failed) {
    auto e = make_event(st, a.tell == notice::extended ? lock_event::type::extended : lock_event::type::extend_failed,
                        a.cause);
    e.masters = std::move(round);
    post_event(std::move(e));
  }
  if (ec && !fsm.finished()) {
    REDLOCK_LOG(c.log(), log_level::debug, "{}: keep-alive retrying in {}", lock_name(st.resource, st.token),
                format_duration(fsm.options().retry_interval));
  }
}

void watch::declare_lost(lock_state& st, error_code reason) {
  // The machine has finished and wakes no more: nothing that may throw (the words, the log line,
  // the event) comes between it and the waiters, or a failed allocation would leave the holder
  // working on, untold.
  std::string detail;
  {
    std::lock_guard guard{st.mutex()};
    st.loss_reason = reason;
    try {
      detail = describe_loss(reason);
      st.loss_detail = detail;
    } catch (...) {
      // Without words: the reason is set.
    }
  }
  st.lost = true;
  owner->retire(*this);
  try {
    st.owner->note_loss(st, reason);  // counted and logged before the waiters resume
  } catch (...) {
    // The count and the log line only.
  }
  // The awaited event happened: success, as a timer's. A waiter's handler that throws (run inline)
  // must not keep the final event from the event readers.
  std::exception_ptr failure;
  try {
    finish_waiters({});
  } catch (...) {
    failure = std::current_exception();
  }
  auto e = make_event(st, lock_event::type::lost, reason);
  e.detail = std::move(detail);
  e.masters = st.results_copy();
  post_event(std::move(e));
  if (failure) std::rethrow_exception(failure);
}

std::string watch::describe_loss(error_code reason) const {
  if (reason == error::extension_limit) {
    if (fsm.cap() == core::keep_alive_cap::max_hold)
      return fmt::format("keep-alive cap reached: max_hold {}; the validity then ran out",
                         format_duration(fsm.options().max_hold));
    return fmt::format("keep-alive cap reached: max_extensions {}; the validity then ran out",
                       fsm.options().max_extensions);
  }
  if (reason == error::not_owner)
    return "taken: too many masters no longer hold our token for a majority to (it expired there, or the key was "
           "deleted or overwritten)";
  if (reason == error::quorum_unavailable)
    return "no extension reached a majority (masters down or slow) before too little validity was left to try again";
  if (reason == error::validity_expired) {
    return fsm.keeping() ? "the validity ran out before an extension reached a majority"
                         : "the validity ran out (the lock was not kept alive)";
  }
  return reason.message();
}

lock_event watch::make_event(const lock_state& st, lock_event::type t, error_code ec) const {
  lock_event e;
  e.what = t;
  e.at = clock_type::now();
  e.validity_deadline = st.get_deadline();
  e.extensions = st.extensions.load();
  e.error = ec;
  return e;
}

void watch::post_event(lock_event e) {
  // Until somebody reads events, only the final one is kept: a lock nobody observes pays nothing.
  if (!events_wanted() && !e.is_final()) return;
  listen().events.push(std::move(e));
  deliver_events();
}

void watch::deliver_events() {
  if (!listeners) return;
  auto& l = *listeners;
  while (!l.event_waiters.empty() && !l.events.empty()) {
    auto e = l.events.next();
    // The final event goes to every reader.
    if (e->is_final()) return l.event_waiters.complete_all(owner->executor(), error_code{}, *e);
    l.event_waiters.complete_front(owner->executor(), error_code{}, std::move(*e));
  }
}

void watch::finish_waiters(error_code ec) {
  if (listeners) listeners->waiters.complete_all(owner->executor(), ec);
}

watch::~watch() { owner->retire(*this); }

void watch::cancel() {
  fsm.stop();
  finish_waiters(asio::error::operation_aborted);
  if (listeners) {
    listeners->event_waiters.complete_all(owner->executor(), make_error_code(asio::error::operation_aborted),
                                          lock_event{});
  }
  owner->retire(*this);
  owner->schedule(*this);
}

void watch::released() {
  const bool was_lost = fsm.lost();
  fsm.stop();
  finish_waiters(asio::error::operation_aborted);  // async_wait_lost: released first
  if (auto st = state.lock(); st && !was_lost) post_event(make_event(*st, lock_event::type::released));
  owner->retire(*this);
  owner->schedule(*this);
}
}  // namespace detail
}  // namespace redlock

#undef REDLOCK_LOG
