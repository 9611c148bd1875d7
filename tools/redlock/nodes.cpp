// SPDX-License-Identifier: BSL-1.0
// `redlock nodes [list | up N | down]`: local redis-server masters for trying things out.

#include "commands.hpp"
#include "local_nodes.hpp"
#include "output.hpp"

#include <fmt/format.h>

#include <string>

namespace redlock::cli {

namespace {

void print_set(const local::recorded_set& set, bool json, bool verbose) {
  if (json) {
    json_writer j;
    j.begin_object()
        .field("state_dir", set.dir.string())
        .field("masters", set.masters())
        .field("shards", set.shards)
        .key("nodes")
        .begin_array();
    for (const auto& n : set.nodes) {
      j.begin_object()
          .field("address", n.address())
          .field("host", n.host)
          .field("port", static_cast<int>(n.port))
          .field("pid", static_cast<std::int64_t>(n.pid))
          .field("running", local::is_running(n))
          .end_object();
    }
    j.end_array().end_object();
    fmt::print("{}\n", j.str());
    return;
  }
  // Lines other than the export are comments, so that `eval "$(redlock nodes up 3)"` works.
  if (set.shards) {
    const auto masters = set.nodes.size() / set.shards;
    fmt::print("# {} local Redis Cluster master{} of {} shard{} each (state in {}; stop with 'redlock nodes down'):\n",
               masters, masters == 1 ? "" : "s", set.shards, set.shards == 1 ? "" : "s", set.dir.string());
  } else {
    fmt::print("# {} local redis-server master{} (state in {}; stop with 'redlock nodes down'):\n", set.nodes.size(),
               set.nodes.size() == 1 ? "" : "s", set.dir.string());
  }
  for (std::size_t i = 0; i < set.nodes.size(); ++i) {
    const auto& n = set.nodes[i];
    fmt::print("#   {:<22} pid {:<8} {}\n", n.address(), n.pid, local::is_running(n) ? "running" : "not running");
    if (verbose) fmt::print("#     log: {}\n", (set.dir / fmt::format("node-{}", i + 1) / "redis.log").string());
  }
  fmt::print("export REDLOCK_NODES={}\n", set.masters());
}

}  // namespace

int nodes_command(const nodes_options& o) {
  const auto dir = local::default_state_dir();
  switch (o.what) {
    case nodes_options::action::up: {
      try {
        const auto set = local::start_detached(dir, o.count, {}, o.shards);
        print_set(set, o.json, o.verbose);
        return exit_ok;
      } catch (const local::already_running& e) {
        complain(e.what());
        return exit_cantcreat;
      } catch (const std::exception& e) {
        complain(fmt::format("cannot start local nodes: {}", e.what()));
        return exit_unavailable;
      }
    }
    case nodes_options::action::down: {
      local::stop_report r;
      try {
        r = local::stop_detached(dir);
      } catch (const std::exception& e) {
        complain(fmt::format("cannot stop the local nodes: {}", e.what()));
        return exit_software;
      }
      if (o.json) {
        json_writer j;
        j.begin_object()
            .field("state_dir", dir.string())
            .field("recorded", r.recorded)
            .field("stopped", r.stopped)
            .field("killed", r.killed)
            .end_object();
        fmt::print("{}\n", j.str());
      } else if (r.recorded == 0) {
        fmt::print("no local nodes recorded in {}\n", dir.string());
      } else {
        fmt::print("stopped {} local node{} ({} recorded{})\n", r.stopped, r.stopped == 1 ? "" : "s", r.recorded,
                   r.killed ? fmt::format(", {} needed SIGKILL", r.killed) : std::string{});
      }
      return exit_ok;
    }
    case nodes_options::action::list: {
      std::optional<local::recorded_set> set;
      try {
        set = local::read_state(dir);
      } catch (const std::exception& e) {
        complain(e.what());
        return exit_config;
      }
      if (!set) {
        if (o.json) {
          json_writer j;
          j.begin_object()
              .field("state_dir", dir.string())
              .null_field("masters")
              .key("nodes")
              .begin_array()
              .end_array()
              .end_object();
          fmt::print("{}\n", j.str());
        } else {
          fmt::print("no local nodes recorded in {} (start some with 'redlock nodes up 3')\n", dir.string());
        }
        return exit_free;
      }
      print_set(*set, o.json, o.verbose);
      return exit_ok;
    }
  }
  return exit_software;
}

}  // namespace redlock::cli
