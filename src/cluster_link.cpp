// SPDX-License-Identifier: BSL-1.0
// A cluster master (src/detail/cluster_link.hpp): its requests: routing by slot, the order within
// a slot, redirects and retries, requests cut by slot. The slot map, the identity and the up/down
// story are in src/cluster_map.cpp. Everything runs on the client's strand except run/close
// (posted) and the snapshots (status, stats, protocol).

#include "detail/cluster_link.hpp"

#include "detail/timer.hpp"
#include <redlock/core/cluster_route.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <utility>

namespace redlock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {
// A request may be redirected (MOVED, ASK) this often; more is a loop (a cluster in flux or
// misconfigured): its last answer is handed over.
constexpr int max_redirects = 5;
// The pause before a retry after TRYAGAIN (a slot being migrated) or CLUSTERDOWN.
constexpr std::chrono::milliseconds retry_pause{10};
constexpr std::size_t npos = static_cast<std::size_t>(-1);
// Request records kept for reuse.
constexpr std::size_t max_spare = 64;

bool is_script_load(std::string_view payload) {
  // "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n..." (the client's own batch)
  return payload.find("$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n") == 4;
}

// The nodes of `r` without its first reply (the ASKING that went before the request).
resp::response without_first_reply(const resp::response& r) {
  std::size_t i = 1;
  while (i < r.size() && r[i].depth > 0) ++i;
  return resp::response(r.begin() + static_cast<std::ptrdiff_t>(std::min(i, r.size())), r.end());
}

const std::string asking_command = "*1\r\n$6\r\nASKING\r\n";
}  // namespace

// A request on its way through the cluster; the sink of every node request made for it.
struct cluster_link::request final : reply_sink, std::enable_shared_from_this<request> {
  std::weak_ptr<cluster_link> owner;
  std::string payload;  // as sent (helper keys renamed)
  std::size_t replies = 0;
  clock::time_point deadline;
  std::shared_ptr<reply_sink> sink;
  std::uint64_t tag = 0;
  bool push_confirmed = false;
  std::size_t node = 0;               // where it went last
  std::optional<std::uint16_t> slot;  // of its keys (none: keyless)
  bool counted = false;               // sent, and counted in its slot's order until delivered
  int redirects = 0;
  bool asking = false;  // the last send had ASKING in front
  std::unique_ptr<redlock::detail::timer> pause;

  void on_reply(std::uint64_t, error_code ec, const resp::response& r) override {
    if (auto o = owner.lock()) {
      o->on_answer(shared_from_this(), ec, r);
    } else if (sink) {
      std::exchange(sink, nullptr)->on_reply(tag, ec ? ec : make_error_code(asio::error::operation_aborted), r);
    }
  }
};

// The parts of a request cut by slot: their answers joined into the one the caller waits for.
struct cluster_link::group_join final : reply_sink {
  static constexpr std::uint64_t undo_tag = std::uint64_t{1} << 32;  // + part: an undo's answer
  std::weak_ptr<cluster_link> owner;
  core::slot_split split;
  std::vector<std::shared_ptr<request>> parts;
  std::vector<resp::response> answers;
  std::size_t left = 0;
  std::size_t undos_left = 0;
  bool undo_failed = false;
  error_code failure;          // a part whose outcome is unknown (timeout, connection lost...)
  resp::response error_reply;  // a part the node refused
  std::shared_ptr<reply_sink> sink;
  std::uint64_t tag = 0;

  void on_reply(std::uint64_t part, error_code ec, const resp::response& r) override {
    if (part >= undo_tag) {
      const auto* v = resp::reply_value(r);
      if (ec || !v || v->data_type != resp::type::integer) undo_failed = true;
      if (--undos_left == 0) finish();
      return;
    }
    if (ec == error::server_error) {
      if (error_reply.empty()) error_reply = r;
    } else if (ec) {
      // An unknown outcome (timeout, connection lost) outweighs a part that was never sent.
      if (!failure || failure == error::not_connected) failure = ec;
    } else if (part < answers.size()) {
      answers[part] = r;
    }
    if (--left > 0) return;
    const bool unknown = failure && failure != error::not_connected;
    if (split.rule == core::join_rule::all_set && !unknown && !granted() && some_set()) {
      // Some parts set their keys, others did not: undone before the answer, so that a refusal
      // still means that nothing of ours was left there (the caller plans its release on that).
      // An undo that fails turns the answer into an unknown outcome, which the caller releases.
      undo_granted_parts();
      if (undos_left > 0) return;
      undo_failed = true;
    }
    finish();
  }

  bool some_set() const {
    for (const auto& a : answers)
      if (a.size() > 1 && a[1].value == "1") return true;
    return false;
  }
  bool granted() const {
    if (failure || !error_reply.empty()) return false;
    const auto joined = core::join_replies(split, answers);
    return joined.size() > 1 && joined[1].value == "1";
  }

  void finish() {
    // The commands that went with the first part (a vote's TIME) were answered by its node.
    if (auto o = owner.lock(); o && !parts.empty()) o->answering_ = parts[0]->node;
    parts.clear();  // each part's request holds this join: the cycle ends here
    auto to = std::exchange(sink, nullptr);
    if (!to) return;
    if (failure && failure != error::not_connected) return to->on_reply(tag, failure, resp::response{});
    if (undo_failed) return to->on_reply(tag, make_error_code(error::partial_outcome), resp::response{});
    if (failure) return to->on_reply(tag, failure, resp::response{});
    if (!error_reply.empty()) return to->on_reply(tag, make_error_code(error::server_error), error_reply);
    to->on_reply(tag, {}, core::join_replies(split, answers));
  }

  void undo_granted_parts() {
    auto o = owner.lock();
    if (!o) return;
    auto self = std::static_pointer_cast<group_join>(shared_from_this_sink());
    for (std::size_t i = 0; i < parts.size() && i < answers.size(); ++i) {
      const auto& a = answers[i];
      if (a.size() < 2 || a[1].value != "1") continue;
      const auto undo = core::undo_part(parts[i]->payload);
      if (undo.empty()) continue;
      // Routed (and ordered behind the part) as any request, redirects included.
      if (!o->submit(undo, 1, clock::now() + o->cfg_.connect_timeout, self, undo_tag + i, false)) ++undos_left;
    }
  }

  std::weak_ptr<reply_sink> self_;
  std::shared_ptr<reply_sink> shared_from_this_sink() const { return self_.lock(); }
};

// Answers nobody waits for (scripts loaded on the other nodes).
struct cluster_link::ignore_sink final : reply_sink {
  void on_reply(std::uint64_t, error_code, const resp::response&) override {}
};

cluster_link::cluster_link(strand_type strand, connection_config cfg, std::shared_ptr<read_poller> poller)
    : strand_(std::move(strand)),
      poller_(std::move(poller)),
      cfg_(std::move(cfg)),
      node_cfg_(cfg_),
      ignore_(std::make_shared<ignore_sink>()) {
  node_cfg_.cluster = {};
  // The seeds are the first nodes; the map numbers nodes by address, in the order first seen.
  map_.add(core::shard_node{cfg_.host, cfg_.port, {}});
  for (const auto& s : cfg_.cluster.seeds) map_.add(core::shard_node{s.host, s.port, {}});
}

cluster_link::~cluster_link() = default;

void cluster_link::run() {
  if (running_.exchange(true)) return;
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (self->closed_) return;
    for (std::size_t i = 0; i < self->map_.nodes().size(); ++i) self->ensure_node(static_cast<std::uint16_t>(i));
  });
}

void cluster_link::observe(std::weak_ptr<link_observer> o, std::size_t index, bool identify, bool ask_time) {
  observer_ = std::move(o);
  index_ = index;
  identify_ = identify;
  ask_time_ = ask_time;
}

void cluster_link::close() {
  {
    std::lock_guard guard{mutex_};
    for (auto& n : nodes_) n.link->close();
  }
  asio::dispatch(strand_, [self = shared_from_this()] { self->abandon_held(); });
}

// Closing: what waits here (for a map, a refresh, or behind its slot's order) ends with
// operation_aborted, exactly once, as the node links end what they hold.
void cluster_link::abandon_held() {
  closed_ = true;
  fail_waiting(make_error_code(asio::error::operation_aborted));
  auto order = std::move(order_);
  order_.clear();
  for (auto& [slot, o] : order)
    for (auto& r : o.held) deliver(*r, make_error_code(asio::error::operation_aborted), {});
  if (hold_timer_) hold_timer_->cancel();
  if (refresh_timer_) refresh_timer_->cancel();
}

void cluster_link::close_after_writes(clock::duration limit) {
  {
    std::lock_guard guard{mutex_};
    for (auto& n : nodes_) n.link->close_after_writes(limit);
  }
  asio::dispatch(strand_, [self = shared_from_this()] { self->abandon_held(); });
}

std::size_t cluster_link::ensure_node(std::uint16_t number) {
  if (number < nodes_.size()) return number;
  while (nodes_.size() <= number) {
    const auto i = nodes_.size();
    auto c = node_cfg_;
    c.host = map_.nodes()[i].host;
    c.port = map_.nodes()[i].port;
    node_state n;
    n.link = std::make_unique<master_link>(strand_, std::move(c), poller_);
    {
      std::lock_guard guard{mutex_};
      nodes_.push_back(std::move(n));
    }
    start_node(i);
  }
  return number;
}

void cluster_link::start_node(std::size_t i) {
  nodes_[i].link->observe(weak_from_this(), i, identify_, ask_time_);
  if (running_.load() && !closed_) nodes_[i].link->run();
}

bool cluster_link::owns_slots(std::size_t node) const {
  return map_loaded_ && map_.slots_of(static_cast<std::uint16_t>(node)) > 0;
}

std::size_t cluster_link::home() const {
  std::size_t fallback = npos;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].up) continue;
    if (owns_slots(i)) return i;
    if (fallback == npos) fallback = i;
  }
  return fallback;
}

error_code cluster_link::submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                                std::shared_ptr<reply_sink> sink, std::uint64_t tag, bool push_confirmed) {
  if (payload.empty() || replies == 0 || !sink) return make_error_code(error::invalid_argument);
  if (closed_ || !running_) return make_error_code(error::not_connected);
  // The client queues one payload on every master in turn: routed once per distinct payload (a
  // byte compare is far cheaper than reading it again).
  thread_local std::string last_payload;
  thread_local std::string last_rewritten;
  thread_local core::request_route last_route;
  if (payload != last_payload) {
    last_route = core::route_request(payload, last_rewritten);
    last_payload.assign(payload);
  }
  const auto& route = last_route;
  const std::string& rewritten = last_rewritten;
  if (route.malformed) return make_error_code(error::invalid_argument);
  if (route.cross_slot)
    return submit_split(route.rewritten ? std::string_view{rewritten} : payload, deadline, std::move(sink), tag);
  if (!route.slot) {
    const auto target = home();
    if (target == npos) return make_error_code(error::not_connected);
    if (is_script_load(payload)) {
      // Every node loads the scripts (and every node that comes up later): EVALSHA then finds
      // them wherever a redirect sends it.
      script_payload_.assign(payload);
      script_replies_ = replies;
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (i != target && nodes_[i].up) (void)nodes_[i].link->submit(payload, replies, deadline, ignore_, 0);
      }
    }
    auto req = new_request();
    req->payload.assign(payload);
    req->replies = replies;
    req->deadline = deadline;
    req->sink = std::move(sink);
    req->tag = tag;
    req->push_confirmed = push_confirmed;
    req->node = target;
    req->slot.reset();
    return nodes_[target].link->submit(req->payload, replies, deadline, req, tag, push_confirmed);
  }
  auto req = new_request();
  req->payload.assign(route.rewritten ? std::string_view{rewritten} : payload);
  req->replies = replies;
  req->deadline = deadline;
  req->sink = std::move(sink);
  req->tag = tag;
  req->push_confirmed = push_confirmed;
  req->slot = route.slot;
  if (!map_loaded_) {
    // As a plain master queues requests until its first connect's outcome.
    waiting_.push_back(std::move(req));
    arm_hold_timer(deadline);
    return {};
  }
  const auto owner = map_.owner(*route.slot);
  if (owner == core::slot_map::unowned) {
    req->sink.reset();
    return make_error_code(error::not_connected);
  }
  return first_send(req, ensure_node(owner), true);
}

// A request's first send. Requests of one slot reach the cluster in the order they were made:
// one goes out at once only if every earlier one of its slot is on the same node and none of
// them is being redirected or retried; otherwise it is held until they are answered. Without
// this, a release could reach a slot's new owner before the SET it follows is redirected there.
error_code cluster_link::first_send(const std::shared_ptr<request>& req, std::size_t target, bool refuse_now) {
  auto& o = order_[*req->slot];
  if (!o.held.empty() || (o.outstanding > 0 && (o.disturbed || o.node != target))) {
    o.held.push_back(req);
    arm_hold_timer(req->deadline);
    return {};
  }
  req->node = target;
  const auto ec =
      nodes_[target].link->submit(req->payload, req->replies, req->deadline, req, req->tag, req->push_confirmed);
  if (ec) {
    if (refuse_now) {
      req->sink.reset();
      return ec;
    }
    deliver(*req, ec, resp::response{});
    return {};
  }
  ++o.outstanding;
  o.node = target;
  req->counted = true;
  return {};
}

// An answered request leaves its slot's order; when none is left, the held ones go out.
void cluster_link::leave_order(request& req) {
  if (!req.counted || !req.slot) return;
  req.counted = false;
  const auto it = order_.find(*req.slot);
  if (it == order_.end()) return;
  if (--it->second.outstanding > 0) return;
  it->second.disturbed = false;
  // Entries stay (a slot in use again soon costs no allocation); idle ones are swept when many.
  if (it->second.held.empty()) {
    if (order_.size() > 4096)
      std::erase_if(order_, [](const auto& e) { return e.second.outstanding == 0 && e.second.held.empty(); });
    return;
  }
  auto held = std::move(it->second.held);
  it->second.held.clear();
  for (auto& h : held) route(h);
}

void cluster_link::disturb(const request& req) {
  if (!req.slot) return;
  if (const auto it = order_.find(*req.slot); it != order_.end()) it->second.disturbed = true;
}

void cluster_link::arm_hold_timer(clock::time_point deadline) {
  if (!hold_timer_) hold_timer_ = std::make_unique<redlock::detail::timer>(strand_);
  if (hold_armed_ && hold_at_ <= deadline) return;
  hold_armed_ = true;
  hold_at_ = deadline;
  hold_timer_->expires_at(deadline);
  hold_timer_->async_wait([self = weak_from_this()](error_code ec) {
    auto o = self.lock();
    if (!o || ec == asio::error::operation_aborted) return;
    o->hold_armed_ = false;
    o->expire_held(clock::now());
  });
}

// Requests held past their deadline (waiting for the map, for a refresh, or behind their slot's
// order) end with a timeout, as a request on a node connection would.
void cluster_link::expire_held(clock::time_point now) {
  std::vector<std::shared_ptr<request>> due;
  auto next = clock::time_point::max();
  auto sift = [&](std::vector<std::shared_ptr<request>>& list) {
    std::erase_if(list, [&](const std::shared_ptr<request>& r) {
      if (r->deadline > now) {
        next = std::min(next, r->deadline);
        return false;
      }
      due.push_back(r);
      return true;
    });
  };
  sift(waiting_);
  for (auto& [slot, o] : order_) sift(o.held);
  for (auto& r : due) deliver(*r, make_error_code(error::master_timeout), {});
  if (next != clock::time_point::max()) arm_hold_timer(next);
}

error_code cluster_link::submit_split(std::string_view payload, clock::time_point deadline,
                                      std::shared_ptr<reply_sink> sink, std::uint64_t tag) {
  auto split = core::split_by_slot(payload);
  if (!split) return make_error_code(error::cross_slot);
  if (!map_loaded_) return make_error_code(error::not_connected);
  std::vector<std::size_t> targets;
  for (const auto& g : split->groups) {
    const auto owner = map_.owner(g.slot);
    if (owner == core::slot_map::unowned) return make_error_code(error::not_connected);
    targets.push_back(ensure_node(owner));
  }
  auto join = std::make_shared<group_join>();
  join->self_ = join;
  join->owner = weak_from_this();
  join->answers.resize(split->groups.size());
  join->left = split->groups.size();
  join->sink = std::move(sink);
  join->tag = tag;
  join->split = std::move(*split);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto req = new_request();
    req->payload = join->split.groups[i].payload;
    req->replies = join->split.groups[i].replies;
    req->deadline = deadline;
    req->sink = join;
    req->tag = i;
    req->slot = join->split.groups[i].slot;
    join->parts.push_back(req);
    if (auto ec = first_send(req, targets[i], true)) {
      if (i == 0) {
        join->parts.clear();
        return ec;  // nothing was sent: refused at once, as a plain master would
      }
      // Earlier parts are on their way: this one's failure joins their answers, later.
      if (!join->failure) join->failure = ec;
      --join->left;
    }
  }
  return {};
}

void cluster_link::send(const std::shared_ptr<request>& req, std::size_t node) {
  req->node = node;
  error_code ec;
  if (clock::now() >= req->deadline) {
    ec = make_error_code(error::master_timeout);
  } else if (req->asking) {
    std::string both = asking_command + req->payload;
    ec = nodes_[node].link->submit(both, req->replies + 1, req->deadline, req, req->tag, false);
  } else {
    ec = nodes_[node].link->submit(req->payload, req->replies, req->deadline, req, req->tag, req->push_confirmed);
  }
  if (ec) {
    req->asking = false;
    deliver(*req, ec, resp::response{});
  }
}

// Sends `req` to the node that owns its slot now: its first send (ordered), or again after a
// redirect, a retry or a refresh.
void cluster_link::route(const std::shared_ptr<request>& req) {
  const auto owner = req->slot && map_loaded_ ? map_.owner(*req->slot) : core::slot_map::unowned;
  if (owner == core::slot_map::unowned) return deliver(*req, make_error_code(error::not_connected), {});
  if (req->counted) return send(req, ensure_node(owner));
  (void)first_send(req, ensure_node(owner), false);
}

void cluster_link::fail_waiting(error_code ec) {
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& req : waiting) deliver(*req, ec, {});
}

void cluster_link::retry_later(const std::shared_ptr<request>& req) {
  if (clock::now() + retry_pause >= req->deadline) return deliver(*req, make_error_code(error::master_timeout), {});
  disturb(*req);
  if (!req->pause) req->pause = std::make_unique<redlock::detail::timer>(strand_);
  req->pause->expires_after(retry_pause);
  req->pause->async_wait([req](error_code ec) {
    auto o = req->owner.lock();
    if (!o) {
      if (req->sink)
        std::exchange(req->sink, nullptr)->on_reply(req->tag, make_error_code(asio::error::operation_aborted), {});
      return;
    }
    if (ec || o->closed_) return o->deliver(*req, make_error_code(boost::asio::error::operation_aborted), {});
    o->retries_.fetch_add(1, std::memory_order_relaxed);
    // Where the slot lives now (the map may have moved on).
    o->route(req);
  });
}

void cluster_link::on_answer(const std::shared_ptr<request>& req, error_code ec, const resp::response& r) {
  const bool asked = std::exchange(req->asking, false);
  const resp::response* answer = &r;
  resp::response stripped;
  if (asked) {
    stripped = without_first_reply(r);
    answer = &stripped;
  }
  if (ec == error::server_error && req->redirects < max_redirects) {
    const auto* v = resp::reply_value(*answer);
    if (v && resp::is_error(v->data_type)) {
      auto rd = core::parse_redirect(v->value);
      const auto& from = map_.nodes()[req->node];
      switch (rd.what) {
        case core::redirect::kind::moved:
        case core::redirect::kind::ask: {
          ++req->redirects;
          redirects_.fetch_add(1, std::memory_order_relaxed);
          disturb(*req);
          const std::string host = rd.host.empty() ? from.host : rd.host;
          const auto n = map_.add(core::shard_node{host, rd.port, {}});
          if (!map_.is_primary(n)) {
            // Sent to a node that was no primary at the last full load: a promoted replica, maybe
            // (a failover). Its answer must not count before the map says so: the request waits
            // for a refresh (which quarantines the cluster if it was one), then goes again.
            waiting_.push_back(req);
            arm_hold_timer(req->deadline);
            want_refresh();
            if (refresh_in_flight_) refresh_again_ = true;
            return;
          }
          if (rd.what == core::redirect::kind::moved) {
            map_.moved(rd.slot, host, rd.port);
            want_refresh();
          } else {
            req->asking = true;
          }
          return send(req, ensure_node(n));
        }
        case core::redirect::kind::try_again:
        case core::redirect::kind::cluster_down:
          return retry_later(req);
        case core::redirect::kind::none:
          break;
      }
    }
  }
  if (asked && ec == error::server_error) {
    // The ASKING's +OK is gone; whether the rest failed is for the caller to read.
    const bool failed = std::any_of(answer->begin(), answer->end(),
                                    [](const resp::node& n) { return n.depth == 0 && resp::is_error(n.data_type); });
    if (!failed) ec = {};
  }
  deliver(*req, ec, *answer);
}

void cluster_link::deliver(request& req, error_code ec, const resp::response& r) {
  if (!req.sink) return;  // delivered already (never twice)
  answering_ = req.node;
  auto sink = std::move(req.sink);
  leave_order(req);
  sink->on_reply(req.tag, ec, r);
  // Back to the pool: reused once the node link has dropped its reference too.
  if (spare_.size() < max_spare && !req.pause) spare_.push_back(req.shared_from_this());
}

std::shared_ptr<cluster_link::request> cluster_link::new_request() {
  // A request record and its payload's buffer are reused (no allocation per request in steady
  // state), once nothing else holds the record.
  for (auto it = spare_.rbegin(); it != spare_.rend(); ++it) {
    if (it->use_count() != 1) continue;
    auto req = std::move(*it);
    spare_.erase(std::next(it).base());
    req->redirects = 0;
    req->asking = false;
    req->push_confirmed = false;
    req->counted = false;
    req->slot.reset();
    return req;
  }
  auto req = std::make_shared<request>();
  req->owner = weak_from_this();
  return req;
}

}  // namespace redlock::detail
