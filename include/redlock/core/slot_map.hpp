// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// A cluster master's slot map: which shard (primary node) owns each of the 16384 hash slots,
/// read from `CLUSTER SHARDS` (Redis 7) or `CLUSTER SLOTS`, and corrected by `MOVED`. A value
/// type; no I/O.

#include <redlock/core/key_slot.hpp>
#include <redlock/resp/node.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::core {

/// A primary node of a cluster as the map names it.
struct shard_node {
  std::string host;        ///< its address as the cluster announces it
  std::uint16_t port = 0;  ///< its client port
  std::string id;          ///< the node id (40 hex digits); empty when the reply did not say
  /// Equal when address and id are.
  friend bool operator==(const shard_node&, const shard_node&) = default;
};

/// Which primary owns each slot. Nodes are numbered in the order they were first seen and keep
/// their number for the map's life (the shell keeps one connection per number).
class slot_map {
 public:
  /// Sentinel: a slot no node owns.
  static constexpr std::uint16_t unowned = 0xffff;

  slot_map() { owner_.assign(slot_count, unowned); }

  /// The nodes by number.
  const std::vector<shard_node>& nodes() const noexcept { return nodes_; }
  /// The node that owns `slot`, or `unowned`.
  std::uint16_t owner(std::uint16_t slot) const noexcept { return owner_[slot]; }
  /// True once every slot has an owner.
  bool complete() const noexcept { return std::find(owner_.begin(), owner_.end(), unowned) == owner_.end(); }
  /// True when the last `load` listed `node` as a primary (with or without slots).
  bool is_primary(std::uint16_t node) const noexcept { return node < primary_.size() && primary_[node]; }
  /// True when the last `load` listed `node` as a replica (of some primary).
  bool is_replica(std::uint16_t node) const noexcept { return node < replica_.size() && replica_[node]; }
  /// The slots `node` owns.
  std::size_t slots_of(std::uint16_t node) const noexcept {
    return static_cast<std::size_t>(std::count(owner_.begin(), owner_.end(), node));
  }

  /// The number of `n` (added when new; a known address with a new id keeps its number and takes
  /// the new id: the shell sees the change in `nodes()`).
  std::uint16_t add(const shard_node& n) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].host == n.host && nodes_[i].port == n.port) {
        if (!n.id.empty()) nodes_[i].id = n.id;
        return static_cast<std::uint16_t>(i);
      }
    }
    nodes_.push_back(n);
    return static_cast<std::uint16_t>(nodes_.size() - 1);
  }
  /// Gives slots `first`..`last` to `node` (a number from `add`).
  void assign(std::uint16_t first, std::uint16_t last, std::uint16_t node) {
    for (std::uint32_t s = first; s <= last && s < slot_count; ++s) owner_[s] = node;
  }
  /// `MOVED slot host:port`: that slot is served there from now on.
  void moved(std::uint16_t slot, std::string_view host, std::uint16_t port) {
    owner_[slot] = add(shard_node{std::string{host}, port, {}});
  }
  /// True when `node` owned slots at the last `load` (whatever `moved` changed since): one full
  /// load is compared with the next.
  bool owned_at_load(std::uint16_t node) const noexcept { return node < loaded_owners_.size() && loaded_owners_[node]; }

  /// Replaces the ownership with what a `CLUSTER SHARDS` or `CLUSTER SLOTS` reply says (nodes
  /// keep their numbers). `default_host`: for a node announced without an address (an empty
  /// `ip`/endpoint, or "?"), the host the reply came from. False, and nothing changed, when the
  /// reply is neither.
  bool load(const resp::response& r, std::string_view default_host) {
    ranges_t ranges;
    std::vector<shard_node> replicas, primaries;
    if (!read_shards(r, default_host, ranges, replicas, primaries)) {
      ranges.clear();
      replicas.clear();
      primaries.clear();
      if (!read_slots(r, default_host, ranges, replicas)) return false;
    }
    owner_.assign(slot_count, unowned);
    for (auto& [range, node] : ranges) assign(range.first, range.second, add(node));
    for (const auto& n : primaries) add(n);
    primary_.assign(nodes_.size(), false);
    for (const auto& [range, node] : ranges) primary_[add(node)] = true;
    for (const auto& n : primaries) primary_[add(n)] = true;
    loaded_owners_.assign(nodes_.size(), false);
    for (auto o : owner_)
      if (o != unowned) loaded_owners_[o] = true;
    replica_.assign(nodes_.size(), false);
    for (const auto& n : replicas) {
      const auto i = add(n);
      replica_.resize(nodes_.size(), false);
      primary_.resize(nodes_.size(), false);
      replica_[i] = true;
    }
    return true;
  }

 private:
  using ranges_t = std::vector<std::pair<std::pair<std::uint16_t, std::uint16_t>, shard_node>>;

  static std::optional<long long> integer(const resp::node& n) {
    if (n.data_type != resp::type::integer && n.data_type != resp::type::blob_string &&
        n.data_type != resp::type::simple_string)
      return std::nullopt;
    long long v = 0;
    const auto* end = n.value.data() + n.value.size();
    if (auto [p, ec] = std::from_chars(n.value.data(), end, v); ec != std::errc{} || p != end) return std::nullopt;
    return v;
  }
  // The end (exclusive) of the value starting at `i`: its subtree.
  static std::size_t skip(const resp::response& r, std::size_t i) {
    const auto depth = r[i].depth;
    std::size_t j = i + 1;
    while (j < r.size() && r[j].depth > depth) ++j;
    return j;
  }
  static bool slot_range(long long a, long long b) { return a >= 0 && b >= a && b < slot_count; }
  static std::string host_of(std::string_view ip, std::string_view default_host) {
    if (ip.empty() || ip == "?") return std::string{default_host};
    return std::string{ip};
  }

  // CLUSTER SHARDS: [ {slots: [a, b, ...], nodes: [ {id, port, ip, endpoint, role, ...}, ...]}, ...]
  // (maps in RESP3, flat key/value arrays in RESP2).
  static bool read_shards(const resp::response& r, std::string_view default_host, ranges_t& out,
                          std::vector<shard_node>& replicas, std::vector<shard_node>& primaries) {
    if (r.empty() || r[0].data_type != resp::type::array) return false;
    const auto top = r[0].depth;
    for (std::size_t i = 1; i < r.size();) {
      if (r[i].depth != top + 1) return false;
      const auto shard_end = skip(r, i);
      if (r[i].data_type != resp::type::map && r[i].data_type != resp::type::array) return false;
      std::vector<std::uint16_t> slots;
      std::optional<shard_node> primary;
      bool saw_slots = false;
      for (std::size_t k = i + 1; k < shard_end;) {
        if (r[k].depth != top + 2) return false;
        const std::string_view name = r[k].value;
        const auto v = k + 1;
        if (v >= shard_end) return false;
        const auto v_end = skip(r, v);
        if (name == "slots") {
          saw_slots = true;
          for (std::size_t s = v + 1; s < v_end; ++s) {
            auto n = integer(r[s]);
            if (!n) return false;
            slots.push_back(static_cast<std::uint16_t>(*n));
          }
          if (slots.size() % 2 != 0) return false;
        } else if (name == "nodes") {
          for (std::size_t n = v + 1; n < v_end;) {
            const auto n_end = skip(r, n);
            shard_node node;
            std::string_view role, ip, endpoint;
            for (std::size_t f = n + 1; f + 1 < n_end; f = skip(r, f + 1)) {
              const std::string_view field = r[f].value;
              const auto& value = r[f + 1];
              if (field == "id") node.id = value.value;
              if (field == "ip") ip = value.value;
              if (field == "endpoint") endpoint = value.value;
              if (field == "role") role = value.value;
              if (field == "port") {
                auto p = integer(value);
                if (p && *p > 0 && *p <= 65535) node.port = static_cast<std::uint16_t>(*p);
              }
            }
            if (node.port != 0) {
              node.host = host_of(!endpoint.empty() && endpoint != "?" ? endpoint : ip, default_host);
              if (role == "master") {
                primary = std::move(node);
              } else if (role == "replica" || role == "slave") {
                replicas.push_back(std::move(node));
              }
            }
            n = n_end;
          }
        }
        k = v_end;
      }
      if (!saw_slots) return false;
      if (primary) {
        primaries.push_back(*primary);
        for (std::size_t s = 0; s + 1 < slots.size(); s += 2) {
          if (!slot_range(slots[s], slots[s + 1])) return false;
          out.push_back({{slots[s], slots[s + 1]}, *primary});
        }
      }
      i = shard_end;
    }
    return true;
  }

  // CLUSTER SLOTS: [ [start, end, [ip, port, id, ...], replicas...], ... ]
  static bool read_slots(const resp::response& r, std::string_view default_host, ranges_t& out,
                         std::vector<shard_node>& replicas) {
    if (r.empty() || r[0].data_type != resp::type::array) return false;
    const auto top = r[0].depth;
    for (std::size_t i = 1; i < r.size();) {
      if (r[i].depth != top + 1 || r[i].data_type != resp::type::array || r[i].aggregate_size < 3) return false;
      const auto end = skip(r, i);
      auto a = integer(r[i + 1]);
      auto b = integer(r[i + 2]);
      if (!a || !b || !slot_range(*a, *b)) return false;
      const auto p = i + 3;
      if (p >= end || r[p].data_type != resp::type::array || r[p].aggregate_size < 2) return false;
      // The primary, then its replicas: [ip, port, id, ...] each.
      bool first = true;
      for (std::size_t q = p; q < end; q = skip(r, q)) {
        if (r[q].data_type != resp::type::array || r[q].aggregate_size < 2 || q + 2 >= end) return false;
        shard_node node;
        node.host = host_of(r[q + 1].value, default_host);
        auto port = integer(r[q + 2]);
        if (!port || *port <= 0 || *port > 65535) return false;
        node.port = static_cast<std::uint16_t>(*port);
        if (r[q].aggregate_size >= 3 && q + 3 < end && r[q + 3].depth == r[q].depth + 1) node.id = r[q + 3].value;
        if (first) {
          out.push_back({{static_cast<std::uint16_t>(*a), static_cast<std::uint16_t>(*b)}, std::move(node)});
        } else {
          replicas.push_back(std::move(node));
        }
        first = false;
      }
      i = end;
    }
    return true;
  }

  std::vector<shard_node> nodes_;
  std::vector<std::uint16_t> owner_;
  std::vector<bool> replica_;
  std::vector<bool> primary_;
  std::vector<bool> loaded_owners_;  // nodes that owned slots at the last load
};

}  // namespace redlock::core
