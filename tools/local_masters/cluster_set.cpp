// SPDX-License-Identifier: BSL-1.0
// Redis Clusters on loopback (local_masters.hpp, `cluster_set`): started as a node_set, joined
// with CLUSTER ADDSLOTSRANGE / MEET / REPLICATE, and a slot moved the way `redis-cli --cluster
// reshard` moves it.

#include "local_masters.hpp"
#include <redlock/core/slot_map.hpp>
#include <redlock/resp/parser.hpp>

#include <fmt/format.h>

#include <stdexcept>
#include <thread>

namespace redlock::local {

namespace {

using namespace std::chrono_literals;

resp::response parse(const std::string& raw) {
  resp::parser p;
  resp::response out;
  boost::system::error_code ec;
  p.consume(raw, out, ec);
  if (ec || !p.done()) throw std::runtime_error("cluster_set: unreadable reply: " + raw.substr(0, 200));
  return out;
}

std::string text_of(const std::string& raw) {
  auto r = parse(raw);
  const auto* v = resp::reply_value(r);
  if (!v || resp::is_error(v->data_type)) throw std::runtime_error("cluster_set: refused: " + raw.substr(0, 200));
  return v->value;
}

std::string field(const std::string& info, std::string_view name) {
  const auto at = info.find(std::string{name} + ":");
  if (at == std::string::npos) return {};
  const auto end = info.find_first_of("\r\n", at);
  return info.substr(at + name.size() + 1, end - at - name.size() - 1);
}

void expect_ok(local::node& n, const std::vector<std::string>& args) {
  const auto raw = n.command(args);
  if (raw.rfind("+OK", 0) != 0)
    throw std::runtime_error(fmt::format("cluster_set: {} on {}: {}", fmt::join(args, " "), n.address(), raw));
}

server_options with_cluster(server_options o) {
  if (!o.cluster_node_timeout) o.cluster_node_timeout = 2000ms;
  return o;
}

}  // namespace

std::string cluster_set::id_of(local::node& n) { return text_of(n.command({"CLUSTER", "MYID"})); }

void form_clusters(std::span<node* const> nodes, std::size_t shards, std::size_t replicas) {
  if (shards == 0) throw std::invalid_argument("form_clusters: a cluster needs at least one shard");
  const auto members = shards * (1 + replicas);
  if (nodes.size() % members != 0) throw std::invalid_argument("form_clusters: nodes do not make whole clusters");
  for (std::size_t base = 0; base < nodes.size(); base += members) {
    auto member = [&](std::size_t s, std::size_t r) -> local::node& { return *nodes[base + s * (1 + replicas) + r]; };
    auto& first = member(0, 0);
    for (std::size_t s = 0; s < shards; ++s) {
      const auto lo = s * core::slot_count / shards;
      const auto hi = (s + 1) * core::slot_count / shards - 1;
      expect_ok(member(s, 0), {"CLUSTER", "ADDSLOTSRANGE", std::to_string(lo), std::to_string(hi)});
      for (std::size_t r = 0; r <= replicas; ++r) {
        auto& n = member(s, r);
        if (&n == &first) continue;
        expect_ok(first, {"CLUSTER", "MEET", n.host(), std::to_string(n.port()), std::to_string(n.bus_port())});
      }
    }
    // A replica can follow its primary once it knows it (gossip after MEET).
    for (std::size_t s = 0; s < shards && replicas > 0; ++s) {
      const auto id = cluster_set::id_of(member(s, 0));
      for (std::size_t r = 1; r <= replicas; ++r) {
        auto& n = member(s, r);
        const auto until = std::chrono::steady_clock::now() + 20s;
        for (;;) {
          const auto raw = n.command({"CLUSTER", "REPLICATE", id});
          if (raw.rfind("+OK", 0) == 0) break;
          if (std::chrono::steady_clock::now() > until)
            throw std::runtime_error(fmt::format("cluster_set: CLUSTER REPLICATE on {}: {}", n.address(), raw));
          std::this_thread::sleep_for(50ms);
        }
      }
    }
  }
  for (std::size_t base = 0; base < nodes.size(); base += members)
    wait_cluster_stable(nodes.subspan(base, members), 20s);
}

void wait_cluster_stable(std::span<node* const> members, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::string last;
  for (;;) {
    bool ok = true;
    std::vector<std::uint16_t> owners;
    for (auto* np : members) {
      auto& n = *np;
      if (!n.running() || n.paused()) continue;
      const auto info = text_of(n.command({"CLUSTER", "INFO"}));
      if (field(info, "cluster_state") != "ok" || field(info, "cluster_slots_ok") != "16384" ||
          field(info, "cluster_known_nodes") != std::to_string(members.size())) {
        ok = false;
        last = n.address() + ": " + info.substr(0, 300);
        break;
      }
      core::slot_map m;
      if (!m.load(parse(n.command({"CLUSTER", "SLOTS"})), n.host()) || !m.complete()) {
        ok = false;
        last = n.address() + ": incomplete CLUSTER SLOTS";
        break;
      }
      // Every node must say the same about a sample of slots.
      std::vector<std::uint16_t> mine;
      for (std::uint32_t s = 0; s < core::slot_count; s += 97)
        mine.push_back(m.nodes()[m.owner(static_cast<std::uint16_t>(s))].port);
      if (owners.empty()) owners = mine;
      if (owners != mine) {
        ok = false;
        last = n.address() + ": its slot map differs from another node's";
        break;
      }
      const auto replication = text_of(n.command({"INFO", "replication"}));
      if (field(replication, "role") == "slave" && field(replication, "master_link_status") != "up") {
        ok = false;
        last = n.address() + ": replica not in sync";
        break;
      }
    }
    if (ok) return;
    if (std::chrono::steady_clock::now() > until)
      throw std::runtime_error(fmt::format("cluster did not become stable: {}", last));
    std::this_thread::sleep_for(50ms);
  }
}

cluster_set::cluster_set(std::size_t clusters, std::size_t shards, server_options options, std::size_t replicas)
    : clusters_(clusters),
      shards_(shards),
      replicas_(replicas),
      nodes_(clusters * shards * (1 + replicas), with_cluster(std::move(options))) {
  std::vector<node*> all;
  for (std::size_t i = 0; i < nodes_.size(); ++i) all.push_back(&nodes_[i]);
  form_clusters(all, shards_, replicas_);
}

void cluster_set::wait_stable(std::size_t c, std::chrono::milliseconds timeout) {
  const auto members = shards_ * (1 + replicas_);
  std::vector<node*> of;
  for (std::size_t i = c * members; i < (c + 1) * members; ++i) of.push_back(&nodes_[i]);
  wait_cluster_stable(of, timeout);
}

std::string cluster_set::master(std::size_t c) const {
  std::string out = "redis-cluster://";
  for (std::size_t s = 0; s < shards_; ++s) {
    const auto& n = nodes_[index(c, s, 0)];
    out += (s ? "+" : "") + n.address();
  }
  return out;
}

std::string cluster_set::masters() const {
  std::string out;
  for (std::size_t c = 0; c < clusters_; ++c) out += (c ? "," : "") + master(c);
  return out;
}

void cluster_set::move_slot(std::size_t c, std::uint16_t slot, local::node& to) {
  // The owner is the primary that claims the slot itself (another node's view may lag behind).
  local::node* from = nullptr;
  const auto members = shards_ * (1 + replicas_);
  for (std::size_t i = c * members; i < (c + 1) * members && !from; ++i) {
    auto& n = nodes_[i];
    if (!n.running() || n.paused()) continue;
    core::slot_map m;
    if (m.load(parse(n.command({"CLUSTER", "SLOTS"})), n.host()) && m.owner(slot) != core::slot_map::unowned &&
        m.nodes()[m.owner(slot)].port == n.port())
      from = &n;
  }
  if (!from) {
    std::string views;
    for (std::size_t i = c * members; i < (c + 1) * members; ++i) {
      auto& n = nodes_[i];
      core::slot_map m;
      if (n.running() && m.load(parse(n.command({"CLUSTER", "SLOTS"})), n.host()))
        views += fmt::format(" {} says {}", n.port(),
                             m.owner(slot) == core::slot_map::unowned ? 0 : m.nodes()[m.owner(slot)].port);
    }
    throw std::runtime_error(
        fmt::format("cluster_set::move_slot: no node of cluster {} claims slot {}:{}", c, slot, views));
  }
  if (from == &to) return;
  const auto from_id = id_of(*from);
  const auto to_id = id_of(to);
  const auto s = std::to_string(slot);
  expect_ok(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
  expect_ok(*from, {"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
  for (;;) {
    auto keys = parse(from->command({"CLUSTER", "GETKEYSINSLOT", s, "100"}));
    if (keys.size() <= 1) break;
    std::vector<std::string> args = {"MIGRATE", to.host(), std::to_string(to.port()), "", "0", "5000", "KEYS"};
    for (std::size_t i = 1; i < keys.size(); ++i) args.push_back(keys[i].value);
    const auto raw = from->command(args);
    if (raw.rfind("+OK", 0) != 0 && raw.rfind("+NOKEY", 0) != 0)
      throw std::runtime_error("cluster_set::move_slot: MIGRATE: " + raw);
  }
  expect_ok(to, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
  // The new owner's claim must carry the greatest epoch, or gossip of an older claim can undo it
  // when slots move back and forth quickly (redis-cli's reshard has the same need).
  (void)to.command({"CLUSTER", "BUMPEPOCH"});
  expect_ok(*from, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
  for (std::size_t i = c * shards_ * (1 + replicas_); i < (c + 1) * shards_ * (1 + replicas_); ++i) {
    auto& n = nodes_[i];
    if (&n != from && &n != &to && n.running() && !n.paused())
      (void)n.command({"CLUSTER", "SETSLOT", s, "NODE", to_id});
  }
  // Returns once the old and the new owner agree.
  const auto until = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    bool agreed = true;
    for (auto* n : {from, &to}) {
      core::slot_map m;
      if (!m.load(parse(n->command({"CLUSTER", "SLOTS"})), n->host()) || m.owner(slot) == core::slot_map::unowned ||
          m.nodes()[m.owner(slot)].port != to.port())
        agreed = false;
    }
    if (agreed) return;
    if (std::chrono::steady_clock::now() > until)
      throw std::runtime_error(fmt::format("cluster_set::move_slot: slot {} did not settle on {}", slot, to.address()));
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace redlock::local
