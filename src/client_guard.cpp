// SPDX-License-Identifier: BSL-1.0
// The hazard guards in the client: each master's core::hazard_guard fed with its handshake's
// INFO and TIME and with the TIME behind every vote; votes of a quarantined master turned into
// `master_quarantined` before a machine sees them; TIME probes for masters no vote reached lately;
// what holders, logs and metrics are told. docs/safety.md, "Restarts and clock jumps".

#include "detail/client_state.hpp"
#include "detail/log.hpp"
#include <redlock/core/hazard_guard.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>

namespace redlock {

const char* to_string(hazard_cause c) noexcept {
  switch (c) {
    case hazard_cause::none:
      return "none";
    case hazard_cause::restarted:
      return "restarted";
    case hazard_cause::clock_jumped:
      return "clock jumped";
    case hazard_cause::info_refused:
      return "INFO refused";
  }
  return "unknown";
}

namespace detail {

namespace {

// Whether a vote's answer is a yes: `+OK` (SET NX), 1 (extend), or a script's `{1, n}`.
bool is_yes(const resp::node* first, const resp::response& r) {
  if (first == nullptr) return false;
  if (first->data_type == resp::type::simple_string) return std::string_view{first->value} == "OK";
  if (first->data_type == resp::type::integer) return std::string_view{first->value} == "1";
  if (first->data_type != resp::type::array || first->aggregate_size == 0) return false;
  const auto at = static_cast<std::size_t>(first - r.data()) + 1;
  return at < r.size() && r[at].data_type == resp::type::integer && std::string_view{r[at].value} == "1";
}

// "in 12.3 s" / "for good" for a quarantine's end seen at `now`.
std::string remaining(clock_type::time_point until, clock_type::time_point now) {
  if (until == clock_type::time_point::max()) return "until it answers INFO";
  const auto left = std::chrono::duration<double>(until - now).count();
  return fmt::format("for {:.1f} s more", std::max(0.0, left));
}

}  // namespace

// The answers to the TIME probes: samples for the guard, nothing else.
struct probe_sink final : reply_sink {
  explicit probe_sink(std::weak_ptr<client_impl> c) : owner(std::move(c)) {}
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    auto c = owner.lock();
    if (!c) return;
    const auto i = master_of(tag);
    if (i >= c->guards_.size() || i >= c->probe_sent_.size()) return;
    const auto sent = c->probe_sent_[i];
    c->probe_sent_[i] = clock_type::time_point{};
    if (ec) return;
    (void)c->take_time(i, r, 0, sent, clock_type::now());
  }
  std::weak_ptr<client_impl> owner;
};

core::guard_rules client_impl::guard_rules_for(std::size_t i) const {
  core::guard_rules r;
  r.restarts = cfg_.guard.restarts;
  r.clock_jumps = cfg_.guard.clock_jumps;
  r.durable = cfg_.masters[i].durable;
  r.quarantine = restart_quarantine(cfg_);
  r.drift = cfg_.drift;
  return r;
}

core::hazard_guard& client_impl::node_clock(std::size_t i, std::size_t node) {
  auto& clocks = node_clocks_[i];
  if (clocks.size() <= node) {
    auto r = guard_rules_for(i);
    r.restarts = restart_detection::off;  // restarts are the master's guard's; clocks only here
    clocks.resize(node + 1, core::hazard_guard{r});
  }
  return clocks[node];
}

core::guard_change client_impl::sample_clock(std::size_t i, std::size_t node, const core::time_sample& t) {
  if (!cfg_.masters[i].cluster.enabled) return guards_[i].on_time(t);
  return guards_[i].jumped_on_a_node(node_clock(i, node).on_time(t), t.received);
}

void client_impl::init_guards() {
  guards_.clear();
  node_clocks_.assign(cfg_.masters.size(), {});
  for (std::size_t i = 0; i < cfg_.masters.size(); ++i) guards_.emplace_back(guard_rules_for(i));
  time_refused_.assign(cfg_.masters.size(), false);
  many_ok_.assign(cfg_.masters.size(), false);
  probe_sent_.assign(cfg_.masters.size(), clock_type::time_point{});
  jumps_seen_.assign(cfg_.masters.size(), {clock_type::time_point{}, std::chrono::microseconds{0}});
  publish_hazards();
  if (cfg_.guard.restarts == restart_detection::off) {
    REDLOCK_LOG(log_, log_level::warning,
                "restart guard off: a master that restarts without its data counts at once, and two clients can "
                "then hold one lock (docs/safety.md, \"Restarts and clock jumps\")");
  }
}

void client_impl::on_link_identified(std::size_t i, const node_facts& facts) {
  if (i >= guards_.size() || closed_) return;
  // A cluster node configured as a plain master: its scripts with helper keys would fail with
  // CROSSSLOT, and the helper keys' names on it are those of cluster masters.
  if (facts.identity.mode == "cluster" && !cfg_.masters[i].cluster.enabled) {
    return refuse_master(i, make_error_code(error::invalid_config),
                         "it is a Redis Cluster node (redis_mode:cluster): configure the cluster as one master, "
                         "redis-cluster://host:port (connection_config::cluster)");
  }
  // Each connection anew: what refused a batch's call may have been this connection's (an ACL).
  many_ok_[i] = facts.identity.mode == "standalone";
  const auto now = clock_type::now();
  auto& g = guards_[i];
  const auto before = g.run_id();
  // A cluster's nodes each have a clock of their own: the handshake's TIME goes to its node's.
  const bool cluster = cfg_.masters[i].cluster.enabled;
  auto change = g.on_connect(facts.identity, cluster ? std::nullopt : facts.time, now);
  if (cluster && facts.time) {
    if (const auto c = sample_clock(i, facts.node, *facts.time); c.cause != hazard_cause::none) change = c;
  }
  // Each connection asks again: a refusal or an unreadable answer lasts for that connection.
  if (facts.ask_time && facts.time) time_refused_[i] = false;
  if (facts.ask_time && !facts.time && !time_refused_[i]) {
    time_refused_[i] = true;
    REDLOCK_LOG(log_, log_level::warning,
                "{}: TIME was refused or unreadable: its clock is not checked at votes (unguarded against clock "
                "jumps)",
                names_[i]);
  }
  if (change.cause == hazard_cause::info_refused) {
    REDLOCK_LOG(log_, log_level::error, "{}: INFO was refused ({}): {}", names_[i],
                printable(facts.identity.refusal, 200), describe(error::restart_guard_refused));
  } else if (change.cause == hazard_cause::restarted) {
    const bool known = !before.empty() && before != g.run_id();
    REDLOCK_LOG(log_, log_level::warning, "{}: {} (uptime {} s{}): quarantined {}: its votes do not count", names_[i],
                known ? "restarted" : "up only lately", g.uptime(),
                change.uptime_inconsistent ? ", which its clock must have stretched" : "",
                remaining(change.until, now));
  } else if (cfg_.guard.restarts == restart_detection::off) {
    REDLOCK_LOG(log_, log_level::warning, "{}: connected unguarded against restarts (restart_detection::off)",
                names_[i]);
  }
  if (change.cause == hazard_cause::clock_jumped) note_jump(i, change, now);
  if (change.cause == hazard_cause::restarted || change.cause == hazard_cause::clock_jumped) {
    tell_holders(i, change.cause, now);
  }
  publish_hazards();
}

error_code client_impl::vote_reply(std::size_t i, error_code ec, const resp::response& r, clock_type::time_point sent) {
  if (i >= guards_.size()) return ec;
  // The vote's own answer is the first value; TIME's, when it was asked, the second.
  const resp::node* first = nullptr;
  std::size_t second = r.size();
  for (std::size_t k = 0, seen = 0; k < r.size(); ++k) {
    const auto& n = r[k];
    if (n.depth != 0 || n.data_type == resp::type::attribute) continue;
    if (seen++ == 0) {
      first = &n;
    } else {
      second = k;
      break;
    }
  }
  // Read once the reply was: TIME's `received` and the guard's verdict share it.
  const auto now = clock_type::now();
  if (second < r.size()) {
    if (resp::is_error(r[second].data_type)) {
      if (!time_refused_[i]) {
        time_refused_[i] = true;
        REDLOCK_LOG(log_, log_level::warning, "{}: TIME was refused ({}): its clock is not checked at votes", names_[i],
                    printable(r[second].value, 200));
        publish_hazards();
      }
      // The request's error was TIME's: the vote itself may have succeeded.
      if (ec == error::server_error && first && !resp::is_error(first->data_type)) ec = {};
    } else {
      (void)take_time(i, r, second, sent, now);
    }
  }
  if (ec) return ec;
  auto& g = guards_[i];
  g.heard(now);
  // Only a yes is withheld: a refusal ("taken", "queued", "not ours") says the same whoever asks.
  if (!is_yes(first, r)) return ec;
  // A lone backward reading does not count its vote.
  // Sampled: by the TIME behind it, or by its batch's (deliver_batch took that sample).
  const bool sampled = second < r.size() || shared_sample_;
  if (g.counts(now) && !(sampled && last_sample_suspect(i))) return ec;
  bump<true>(counters_.votes_quarantined);
  return g.cause(now) == hazard_cause::info_refused ? error::restart_guard_refused : error::master_quarantined;
}

bool client_impl::counts_handover(std::size_t i) {
  if (i >= guards_.size()) return true;
  // As a yes vote (vote_reply): a hand-over from a master that restarted without its data, or
  // whose clock jumped, may stand on a key that is not what it seems; it only wakes the waiter.
  return guards_[i].counts(clock_type::now()) && !last_sample_suspect(i);
}

bool client_impl::last_sample_suspect(std::size_t i) {
  // A cluster's clocks are its nodes': the one that answered last.
  return cfg_.masters[i].cluster.enabled ? node_clock(i, links_[i]->answering_node()).last_sample_suspect()
                                         : guards_[i].last_sample_suspect();
}

bool client_impl::take_time(std::size_t i, const resp::response& r, std::size_t at, clock_type::time_point sent,
                            clock_type::time_point now) {
  const auto t = core::parse_time(r, at);
  if (!t || sent == clock_type::time_point{}) return false;
  const auto change = sample_clock(i, links_[i]->answering_node(), {sent, now, *t});
  if (change.cause != hazard_cause::clock_jumped) return false;
  REDLOCK_LOG(log_, log_level::warning,
              "{}: its wall clock jumped forward by at least {:.3f} s (keys there expire that much early): "
              "quarantined {}: its votes do not count",
              names_[i], static_cast<double>(change.jump.count()) / 1e6, remaining(change.until, now));
  note_jump(i, change, now);
  tell_holders(i, hazard_cause::clock_jumped, now);
  publish_hazards();
  return true;
}

void client_impl::note_jump(std::size_t i, const core::guard_change& change, clock_type::time_point now) {
  jumps_seen_[i] = {now, change.jump};
  // Every master jumping alike within one round: most likely our own clock stood still (a frozen
  // machine), and the validity of locks held across it was overstated by the pause. Their
  // quarantines stay: if the masters did jump, they must stay out.
  const auto pause = core::client_pause(jumps_seen_, guards_.size(), now, cfg_.request_timeout);
  if (!pause) return;
  // The jumps are forgotten only once every held lock's deadline is shortened (which cannot
  // throw): should collecting the locks throw (an allocation failed), the pause is still seen at
  // the next jump, instead of being lost with the locks believing in validity it overstated.
  const auto watched = watched_locks();
  shorten_held_locks(watched, *pause);
  for (auto& j : jumps_seen_) j = {clock_type::time_point{}, std::chrono::microseconds{0}};
  bump<true>(counters_.client_pauses);
  REDLOCK_LOG(log_, log_level::error,
              "every master's clock moved {:.3f} s ahead of ours at once: this client's clock most likely stood "
              "still (a frozen machine); held locks lose that much validity",
              static_cast<double>(pause->count()) / 1e6);
  wake_shortened(watched, now);
}

// The held locks this client watches (keep-alive or events), collected first: what is done to
// one may complete handlers and retire watchers, which changes the list.
std::vector<std::shared_ptr<watch>> client_impl::watched_locks() {
  std::vector<std::shared_ptr<watch>> out;
  for (op_base* p = ops_; p; p = p->next_op) {
    if (dynamic_cast<watch*>(p) == nullptr) continue;
    if (auto op = p->weak_from_this().lock()) out.push_back(std::static_pointer_cast<watch>(op));
  }
  return out;
}

void client_impl::shorten_held_locks(const std::vector<std::shared_ptr<watch>>& watched,
                                     std::chrono::microseconds by) noexcept {
  for (const auto& w : watched) {
    auto st = w->state.lock();
    if (!st || !st->held.load()) continue;
    st->set_deadline(st->get_deadline() - by);
    w->fsm.deadline_shortened(st->get_deadline());
  }
}

// Each shortened lock's watcher is woken (its lock may be past its loss point already) or
// rescheduled for its earlier deadline; the others still when one of them throws.
void client_impl::wake_shortened(const std::vector<std::shared_ptr<watch>>& watched, clock_type::time_point now) {
  std::exception_ptr failure;
  for (const auto& w : watched) {
    auto st = w->state.lock();
    if (!st || !st->held.load()) continue;
    try {
      if (st->get_deadline() <= now)
        w->wake(now);  // which schedules it again
      else
        schedule(*w);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void client_impl::tell_holders(std::size_t i, hazard_cause cause, clock_type::time_point now) {
  const auto& g = guards_[i];
  const std::string words =
      cause == hazard_cause::restarted
          ? fmt::format("{} restarted (run_id {}): a key it granted may be gone; quarantined {}", names_[i],
                        g.run_id().substr(0, 12), remaining(g.until(), now))
          : fmt::format(
                "{}'s wall clock jumped forward by {:.3f} s: a key it granted may expire early; "
                "quarantined {}",
                names_[i], static_cast<double>(g.last_jump().count()) / 1e6, remaining(g.until(), now));
  for (auto& w : watched_locks()) {
    auto st = w->state.lock();
    if (!st || !st->held.load()) continue;
    std::size_t still = 0;  // granting masters whose votes still count
    {
      std::lock_guard guard{st->mutex()};
      if (i >= st->results.size() || st->results.status(i) != master_status::granted) continue;
      st->results.annotate(i, error::master_quarantined, words);
      for (std::size_t k = 0; k < st->results.size() && k < guards_.size(); ++k) {
        if (st->results.status(k) == master_status::granted && guards_[k].counts(now)) ++still;
      }
    }
    // A jumped master's key expires early by the jump: when the lock's quorum rested on it, so
    // does the lock.
    const std::size_t needed = st->quorum ? st->quorum : guards_.size() / 2 + 1;
    if (cause == hazard_cause::clock_jumped && still < needed) {
      const auto by = g.last_jump() + std::chrono::duration_cast<std::chrono::microseconds>(cfg_.drift.fixed);
      st->set_deadline(st->get_deadline() - by);
      w->fsm.deadline_shortened(st->get_deadline());
      schedule(*w);
    }
    auto e = w->make_event(*st, lock_event::type::master_hazard, error::master_quarantined);
    e.master = i;
    e.detail = words;
    w->post_event(std::move(e));
    if (st->get_deadline() <= now) w->wake(now);
  }
}

void client_impl::arm_probes() {
  if (config_error_ || links_.empty() || !cfg_.guard.clock_jumps ||
      cfg_.guard.clock_probe_interval <= std::chrono::milliseconds::zero() || closed_)
    return;
  probe_timer_.expires_after(cfg_.guard.clock_probe_interval);
  probe_timer_.async_wait([w = weak_from_this()](error_code ec) {
    auto c = w.lock();
    if (!c || ec || c->closed_) return;
    c->probe();
    c->arm_probes();
  });
}

void client_impl::probe() {
  const auto now = clock_type::now();
  if (!probe_sink_) probe_sink_ = std::make_shared<probe_sink>(weak_from_this());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (time_refused_[i] || probe_sent_[i] != clock_type::time_point{}) continue;
    if (now - guards_[i].last_sample() < cfg_.guard.clock_probe_interval) continue;  // a vote sampled it
    if (!links_[i]->submit(time_command, 1, now + cfg_.request_timeout, probe_sink_, make_tag(release_round, i)))
      probe_sent_[i] = now;
  }
}

void client_impl::publish_hazards() {
  std::vector<master_hazard> v;
  v.reserve(guards_.size());
  const auto now = clock_type::now();
  for (std::size_t i = 0; i < guards_.size(); ++i) {
    const auto& g = guards_[i];
    master_hazard h;
    h.index = i;
    h.cause = g.cause(now);
    h.quarantined_until = g.until();
    h.run_id = g.run_id();
    h.uptime_seconds = g.uptime();
    h.last_jump = g.last_jump();
    h.restarts = g.restarts();
    h.clock_jumps = g.jumps();
    h.unguarded = cfg_.guard.restarts == restart_detection::off || !cfg_.guard.clock_jumps || time_refused_[i];
    h.durable = cfg_.masters[i].durable;
    v.push_back(std::move(h));
  }
  std::lock_guard guard{hazards_mutex_};
  hazards_ = std::move(v);
}

std::vector<master_hazard> client_impl::hazards() const {
  std::vector<master_hazard> v;
  {
    std::lock_guard guard{hazards_mutex_};
    v = hazards_;
  }
  const auto now = clock_type::now();
  for (auto& h : v) {
    if (h.cause != hazard_cause::info_refused && now >= h.quarantined_until) h.cause = hazard_cause::none;
  }
  return v;
}

}  // namespace detail
}  // namespace redlock
