// SPDX-License-Identifier: BSL-1.0
#pragma once
// A Redlock master that is a whole Redis Cluster, as the lock client sees it (private to src/):
// one node link (`master_link` over one connection) per node of the slot map, on the client's
// strand. Each request goes to the primary that owns its slot (core::route_request renames its
// helper keys into that slot); MOVED, ASK, TRYAGAIN and CLUSTERDOWN are followed here, within the
// request's deadline, so the lock client sees one answer per request as from a plain master. The
// decisions are pure (core/cluster_route.hpp, core/slot_map.hpp); this file carries them out.

#include "master_link.hpp"
#include <redlock/core/slot_map.hpp>
#include <redlock/timer.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace redlock::detail {

class cluster_link final : public link_observer, public std::enable_shared_from_this<cluster_link> {
 public:
  using clock = redlock::boot_clock;
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;

  cluster_link(strand_type strand, connection_config cfg, std::shared_ptr<read_poller> poller = nullptr);
  ~cluster_link();
  cluster_link(const cluster_link&) = delete;
  cluster_link& operator=(const cluster_link&) = delete;

  // As master_link's members of the same names.
  void run();
  void observe(std::weak_ptr<link_observer> o, std::size_t index, bool identify, bool ask_time);
  void set_restart_quarantine(std::chrono::milliseconds q) { quarantine_ = q; }
  void close();
  void close_after_writes(clock::duration limit);
  boost::system::error_code submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                                   std::shared_ptr<reply_sink> sink, std::uint64_t tag, bool push_confirmed);
  int protocol() const noexcept;
  connection_status status() const;
  connection_stats stats() const;
  const connection_config& config() const noexcept { return cfg_; }
  // The node (its number in the slot map) whose answer is being delivered to a sink now.
  std::size_t answering_node() const noexcept { return answering_; }
  // Redirects followed (MOVED, ASK) and retries after TRYAGAIN / CLUSTERDOWN, for tests and stats.
  std::uint64_t redirects() const noexcept { return redirects_.load(std::memory_order_relaxed); }
  std::uint64_t retries() const noexcept { return retries_.load(std::memory_order_relaxed); }
  std::uint64_t refreshes() const noexcept { return refreshes_.load(std::memory_order_relaxed); }
  // Replicas seen promoted (each quarantines the cluster as a restart would).
  std::uint64_t failovers() const noexcept { return failovers_.load(std::memory_order_relaxed); }

  // ---- link_observer, for the node links (index: the node's number) -------------------------
  void on_link_up(std::size_t node) override;
  void on_link_identified(std::size_t node, const node_facts& facts) override;
  void on_link_failed(std::size_t node, boost::system::error_code cause) override;
  void on_link_down(std::size_t node) override;
  void on_push(std::size_t node, const resp::response& push) override;

 private:
  struct request;
  struct group_join;
  struct refresh_sink;
  struct ignore_sink;
  friend struct request;
  friend struct refresh_sink;

  struct node_state {
    std::unique_ptr<master_link> link;
    bool up = false;
    std::string run_id;    // the last INFO server said
    bool refused = false;  // its last handshake refused INFO
  };

  std::size_t ensure_node(std::uint16_t number);  // a link for map node `number` (strand)
  void start_node(std::size_t number);
  void on_answer(const std::shared_ptr<request>& req, boost::system::error_code ec, const resp::response& r);
  void deliver(request& req, boost::system::error_code ec, const resp::response& r);
  std::shared_ptr<request> new_request();
  void send(const std::shared_ptr<request>& req, std::size_t node);
  void retry_later(const std::shared_ptr<request>& req);
  std::size_t home() const;  // an up node for keyless requests (owning slots if any); npos if none
  void want_refresh();
  void refresh_answered(std::size_t node, boost::system::error_code ec, const resp::response& r, bool slots);
  void update_up();
  void note_failover(std::size_t node);
  struct node_was {
    bool owned, replica, primary;  // at the last full load
  };
  void detect_failover(const std::vector<node_was>& before);
  void retry_refresh();
  void abandon_held();
  boost::system::error_code first_send(const std::shared_ptr<request>& req, std::size_t target, bool refuse_now);
  void leave_order(request& req);
  void disturb(const request& req);
  void arm_hold_timer(clock::time_point deadline);
  void expire_held(clock::time_point now);
  void route(const std::shared_ptr<request>& req);  // to the node that owns its slot (map known)
  void fail_waiting(boost::system::error_code ec);
  // A request over several slots (async_lock_all): one part per slot, joined (core::split_by_slot).
  boost::system::error_code submit_split(std::string_view payload, clock::time_point deadline,
                                         std::shared_ptr<reply_sink> sink, std::uint64_t tag);
  bool owns_slots(std::size_t node) const;
  std::shared_ptr<link_observer> observer() const { return observer_.lock(); }

  strand_type strand_;
  std::shared_ptr<read_poller> poller_;  // shared by the node connections (see read_poller)
  connection_config cfg_;
  connection_config node_cfg_;  // cfg_ for one node: cluster off
  std::weak_ptr<link_observer> observer_;
  std::size_t index_ = 0;
  bool identify_ = false;
  bool ask_time_ = false;

  mutable std::mutex mutex_;       // guards the size of nodes_ (read by status() and stats())
  std::vector<node_state> nodes_;  // by map number
  core::slot_map map_;
  bool map_loaded_ = false;
  std::atomic<bool> running_{false};  // run() was called
  bool closed_ = false;
  std::atomic<bool> up_reported_{false};
  // Requests made before the first slot map: sent when it comes, failed when no node could be
  // reached.
  std::vector<std::shared_ptr<request>> waiting_;
  bool refresh_in_flight_ = false;
  bool refresh_again_ = false;
  std::uint64_t identity_generation_ = 0;
  std::chrono::milliseconds quarantine_{0};
  bool first_identified_ = false;  // the guard has this cluster's first identity (and its uptime)
  std::string script_payload_;     // the last SCRIPT LOAD batch: loaded on every node that comes up
  std::size_t script_replies_ = 0;
  std::size_t answering_ = 0;
  std::shared_ptr<reply_sink> ignore_;
  std::vector<std::shared_ptr<request>> spare_;  // delivered requests, for reuse
  // Per slot with requests in flight: their order (see first_send).
  struct slot_order {
    std::uint32_t outstanding = 0;               // sent, not answered yet
    std::size_t node = 0;                        // where they went
    bool disturbed = false;                      // one of them is being redirected or retried
    std::vector<std::shared_ptr<request>> held;  // (a vector: no allocation while empty)
  };
  std::unordered_map<std::uint16_t, slot_order> order_;
  std::unique_ptr<redlock::timer> hold_timer_;  // the earliest deadline of a held request
  bool hold_armed_ = false;
  clock::time_point hold_at_{};
  std::unique_ptr<redlock::timer> refresh_timer_;
  unsigned refresh_failures_ = 0;
  std::atomic<std::uint64_t> redirects_{0}, retries_{0}, refreshes_{0}, failovers_{0};
};

}  // namespace redlock::detail
