// SPDX-License-Identifier: BSL-1.0
// A cluster master (src/detail/cluster_link.hpp): its slot map (reads, failovers), the identity it
// gives the hazard guard, its one up/down story for the lock client, and the snapshots. The
// requests themselves are in src/cluster_link.cpp.

#include "detail/cluster_link.hpp"
#include "detail/timer.hpp"
#include <redlock/resp/request.hpp>

#include <algorithm>
#include <chrono>
#include <utility>

namespace redlock::detail {

using boost::system::error_code;

namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
}  // namespace

// The answers to CLUSTER SHARDS / CLUSTER SLOTS.
struct cluster_link::refresh_sink final : reply_sink {
  std::weak_ptr<cluster_link> owner;
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (auto o = owner.lock()) o->refresh_answered(static_cast<std::size_t>(tag >> 1), ec, r, tag & 1);
  }
};

// ---- the slot map ------------------------------------------------------------------------------

void cluster_link::want_refresh() {
  if (closed_) return;
  if (refresh_in_flight_) {
    refresh_again_ = true;
    return;
  }
  // Ask a node that is up: one owning slots first (its view is the freshest).
  const auto n = home();
  if (n == npos) return;  // asked again when a node comes up
  auto sink = std::make_shared<refresh_sink>();
  sink->owner = weak_from_this();
  resp::request req;
  req.push("CLUSTER", "SHARDS");
  const auto deadline = clock::now() + cfg_.connect_timeout;
  if (!nodes_[n].link->submit(req.payload(), 1, deadline, sink, std::uint64_t{n} << 1)) {
    refresh_in_flight_ = true;
    refreshes_.fetch_add(1, std::memory_order_relaxed);
  }
}

void cluster_link::refresh_answered(std::size_t node, error_code ec, const resp::response& r, bool slots) {
  if (closed_) return;
  const auto* v = resp::reply_value(r);
  if (!slots && ec == error::server_error && v && v->value.find("unknown") != std::string::npos) {
    // Redis < 7: no CLUSTER SHARDS.
    auto sink = std::make_shared<refresh_sink>();
    sink->owner = weak_from_this();
    resp::request req;
    req.push("CLUSTER", "SLOTS");
    if (node < nodes_.size() && !nodes_[node].link->submit(req.payload(), 1, clock::now() + cfg_.connect_timeout, sink,
                                                           std::uint64_t{node} << 1 | 1))
      return;
  }
  refresh_in_flight_ = false;
  // What the last full load said (MOVED corrections aside), to compare with this one.
  std::vector<node_was> before;
  for (std::uint16_t i = 0; i < map_.nodes().size(); ++i)
    before.push_back({map_.owned_at_load(i), map_.is_replica(i), map_.is_primary(i)});
  if (!ec && node < nodes_.size() && map_.load(r, map_.nodes()[node].host)) {
    const bool first = !map_loaded_;
    map_loaded_ = true;
    refresh_failures_ = 0;
    if (!first) detect_failover(before);
    for (std::size_t i = nodes_.size(); i < map_.nodes().size(); ++i) ensure_node(static_cast<std::uint16_t>(i));
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& req : waiting) route(req);
    if (!first) {
      if (auto o = observer()) o->on_link_moved(index_);
    }
  } else if (ec == error::server_error && v && v->value.find("cluster support disabled") != std::string::npos) {
    // A plain server given as a cluster master: nothing will change that.
    if (auto o = observer()) o->on_link_failed(index_, make_error_code(error::invalid_config));
    fail_waiting(make_error_code(error::not_connected));
  } else {
    // Unanswered or refused (LOADING, a timeout...): asked again shortly, while anything waits
    // for a map (requests keep their own deadlines).
    retry_refresh();
  }
  if (std::exchange(refresh_again_, false)) want_refresh();
  update_up();
}

void cluster_link::retry_refresh() {
  // Until one read succeeds: a read wanted after MOVED may be the one that finds a failover,
  // also once the request that asked for it has timed out (at most one try per 800 ms).
  if (closed_) return;
  if (!refresh_timer_) refresh_timer_ = std::make_unique<redlock::detail::timer>(strand_);
  const auto step = std::min(refresh_failures_++, 4u);
  const auto pause = std::chrono::milliseconds{50 << step};  // 50 ms to 800 ms
  refresh_timer_->expires_after(pause);
  refresh_timer_->async_wait([self = weak_from_this()](error_code e) {
    if (auto o = self.lock(); o && !e) o->want_refresh();
  });
}

// A failover shows in a full load: a replica of the last one now owns slots, or a node that owned
// slots is now a replica; or slots went to a node unknown before while their owner is no primary
// any more. The promoted node may lack acknowledged writes: the cluster is quarantined.
void cluster_link::detect_failover(const std::vector<node_was>& before) {
  bool failover = false;
  bool lost_owner = false;
  for (std::uint16_t i = 0; i < before.size(); ++i) {
    if (map_.slots_of(i) > 0 && before[i].replica) failover = true;
    if (before[i].owned && map_.is_replica(i)) failover = true;
    if (before[i].owned && !map_.is_primary(i)) lost_owner = true;
  }
  for (std::uint16_t i = static_cast<std::uint16_t>(before.size()); i < map_.nodes().size(); ++i)
    if (map_.slots_of(i) > 0 && lost_owner) failover = true;
  if (failover) note_failover(0);
}

// ---- one up/down story for the lock client -----------------------------------------------------

// Up: the map is known and covers every slot, and every node that owns slots is connected.
void cluster_link::update_up() {
  bool up = map_loaded_ && map_.complete() && !closed_;
  for (std::size_t i = 0; up && i < nodes_.size(); ++i)
    if (owns_slots(i) && !nodes_[i].up) up = false;
  if (up == up_reported_) return;
  up_reported_ = up;
  if (auto o = observer()) up ? o->on_link_up(index_) : o->on_link_down(index_);
}

void cluster_link::on_link_up(std::size_t node) {
  nodes_[node].up = true;
  if (!script_payload_.empty())
    (void)nodes_[node].link->submit(script_payload_, script_replies_, clock::now() + cfg_.connect_timeout, ignore_, 0);
  if (!map_loaded_) want_refresh();
  update_up();
}

void cluster_link::on_link_identified(std::size_t node, const node_facts& facts) {
  // The lock client's restart guard keeps one identity per master. A cluster's identity changes
  // (a new generation, which the guard sees as a restart) when a node that serves slots, or may:
  // - comes back as another process (a new run_id: a restart without the keys it had);
  // - is first seen with an uptime shorter than the quarantine (it may have restarted empty
  //   just before, or be a node that took over an address, unknown to this client);
  // - or when a replica is promoted (note_failover).
  // A replica's own restart loses nothing: it copies its primary again before it can serve.
  auto f = facts;
  f.node = node;
  auto& n = nodes_[node];
  const bool serving = !map_loaded_ || owns_slots(node);
  n.refused = facts.identify && !facts.identity.answered;
  if (facts.identity.answered) {
    const bool restarted = !n.run_id.empty() && n.run_id != facts.identity.run_id;
    const bool fresh = n.run_id.empty() && quarantine_ > std::chrono::milliseconds::zero() && first_identified_ &&
                       std::chrono::seconds{facts.identity.uptime} < quarantine_;
    if (serving && (restarted || fresh)) ++identity_generation_;
    n.run_id = facts.identity.run_id;
    f.identity.run_id = "cluster:" + std::to_string(identity_generation_);
    first_identified_ = true;
  }
  // A node that refuses INFO keeps the cluster unguarded-refused until it answers: one node's
  // answer must not clear another's refusal.
  if (std::any_of(nodes_.begin(), nodes_.end(), [](const node_state& x) { return x.refused; })) {
    f.identity.answered = false;
    if (f.identity.refusal.empty()) f.identity.refusal = "a node of the cluster refused INFO";
  }
  if (auto o = observer()) o->on_link_identified(index_, f);
}

void cluster_link::note_failover(std::size_t node) {
  // The promoted replica may lack the last writes of the primary it replaced (replication is
  // asynchronous): for the locks, a restart without those keys. Told as a new identity that has
  // been up for no time, so the full quarantine applies.
  ++identity_generation_;
  failovers_.fetch_add(1, std::memory_order_relaxed);
  node_facts f;
  f.identify = identify_;
  f.identity.asked = true;
  f.identity.answered = true;
  f.identity.run_id = "cluster:" + std::to_string(identity_generation_);
  f.identity.uptime = 0;
  (void)node;
  if (auto o = observer()) o->on_link_identified(index_, f);
}

void cluster_link::on_link_failed(std::size_t node, error_code cause) {
  if (owns_slots(node) || !map_loaded_) {
    if (auto o = observer()) o->on_link_failed(index_, cause);
  }
  if (!map_loaded_ && home() == npos) fail_waiting(make_error_code(error::not_connected));
  if (map_loaded_ && owns_slots(node)) want_refresh();  // a failover may have moved its slots
}

void cluster_link::on_link_down(std::size_t node) {
  nodes_[node].up = false;
  want_refresh();  // a failover may have moved its slots
  update_up();
}

void cluster_link::on_push(std::size_t, const resp::response& push) {
  if (auto o = observer()) o->on_push(index_, push);
}

// ---- snapshots (any thread) --------------------------------------------------------------------

int cluster_link::protocol() const noexcept {
  std::lock_guard guard{mutex_};
  for (const auto& n : nodes_)
    if (auto p = n.link->protocol()) return p;
  return 0;
}

connection_status cluster_link::status() const {
  std::lock_guard guard{mutex_};
  connection_status out;
  bool waiting = false;  // a node up or connecting: the cluster may come up without a new attempt
  for (const auto& n : nodes_) {
    auto s = n.link->status();
    out.connects += s.connects;
    out.dropped_replies += s.dropped_replies;
    out.pushes += s.pushes;
    if (s.state == connection_state::up || s.state == connection_state::connecting) waiting = true;
    if (s.state != connection_state::up) {
      if (s.last_error && !out.last_error) {
        out.last_error = s.last_error;
        out.last_error_text = address_of(n.link->config()) + ": " + s.last_error_text;
      }
    }
  }
  out.state = up_reported_.load() ? connection_state::up
              : !running_.load()  ? connection_state::idle
              : waiting           ? connection_state::connecting
                                  : connection_state::down;
  return out;
}

connection_stats cluster_link::stats() const {
  std::lock_guard guard{mutex_};
  connection_stats out;
  for (const auto& n : nodes_) out += n.link->stats();
  out.redirects = redirects();
  out.cluster_retries = retries();
  out.slot_map_reads = refreshes();
  out.failovers = failovers();
  return out;
}

}  // namespace redlock::detail
