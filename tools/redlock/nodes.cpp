// SPDX-License-Identifier: BSL-1.0
// `redlock nodes [list | up N | down]`: local redis-server masters for trying things out.

#include "commands.hpp"
#include "local_nodes.hpp"
#include "output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace redlock::cli {

namespace {

/// `text` as one shell word: as is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& text) {
  const bool safe = !text.empty() && text.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789/._-+:,=@%") == std::string::npos;
  if (safe) return text;
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

/// The `run`/`status` flags that reach a TLS set: the CA to trust, and the client certificate
/// when the servers require one.
std::string tls_flags(const local::recorded_set& set) {
  const auto f = set.tls_files();
  std::string out = "--tls-ca-file " + shell_word(f.ca_file.string());
  if (set.tls_auth_clients) {
    out += " --tls-cert " + shell_word(f.client_cert_file.string()) + " --tls-key " +
           shell_word(f.client_key_file.string());
  }
  return out;
}

void print_set(const local::recorded_set& set, bool json, bool verbose) {
  if (json) {
    json_writer j;
    j.begin_object().field("state_dir", set.dir.string()).field("masters", set.masters()).field("shards", set.shards);
    if (set.tls) {
      const auto f = set.tls_files();
      j.key("tls").begin_object().field("ca_file", f.ca_file.string()).field("auth_clients", set.tls_auth_clients);
      if (set.tls_auth_clients) {
        j.field("cert_file", f.client_cert_file.string()).field("key_file", f.client_key_file.string());
      }
      j.field("flags", tls_flags(set)).end_object();
    } else {
      j.null_field("tls");
    }
    j.key("nodes").begin_array();
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
  // Lines other than the exports are comments, so that `eval "$(redlock nodes up 3)"` works.
  if (set.shards) {
    const auto masters = set.nodes.size() / set.shards;
    fmt::print("# {} local Redis Cluster master{} of {} shard{} each (state in {}; stop with 'redlock nodes down'):\n",
               masters, masters == 1 ? "" : "s", set.shards, set.shards == 1 ? "" : "s", set.dir.string());
  } else {
    fmt::print("# {} local redis-server master{}{} (state in {}; stop with 'redlock nodes down'):\n", set.nodes.size(),
               set.nodes.size() == 1 ? "" : "s", set.tls ? " over TLS" : "", set.dir.string());
  }
  for (std::size_t i = 0; i < set.nodes.size(); ++i) {
    const auto& n = set.nodes[i];
    fmt::print("#   {:<22} pid {:<8} {}\n", n.address(), n.pid, local::is_running(n) ? "running" : "not running");
    if (verbose) fmt::print("#     log: {}\n", (set.dir / fmt::format("node-{}", i + 1) / "redis.log").string());
  }
  if (set.tls) {
    const auto f = set.tls_files();
    fmt::print("# Their certificates (for 127.0.0.1 and localhost) are signed by a private CA: {}\n",
               f.ca_file.string());
    if (set.tls_auth_clients) {
      fmt::print("# They require a client certificate signed by it: {} (key {})\n", f.client_cert_file.string(),
                 f.client_key_file.string());
    }
    fmt::print("# Use them with: redlock run {} --resource NAME -- COMMAND\n", tls_flags(set));
    fmt::print("#           and: redlock status {} NAME\n", tls_flags(set));
    fmt::print("# (or eval this output: it exports the same settings)\n");
  }
  fmt::print("export REDLOCK_NODES={}\n", shell_word(set.masters()));
  if (set.tls) {
    const auto f = set.tls_files();
    fmt::print("export REDLOCK_TLS_CA_FILE={}\n", shell_word(f.ca_file.string()));
    if (set.tls_auth_clients) {
      fmt::print("export REDLOCK_TLS_CERT_FILE={}\n", shell_word(f.client_cert_file.string()));
      fmt::print("export REDLOCK_TLS_KEY_FILE={}\n", shell_word(f.client_key_file.string()));
    }
  }
}

/// Why `--port` could not be honoured, in the command line's words.
std::string ports_message(const nodes_options& o, const local::ports_unavailable& e) {
  const bool range = o.port_text.find('-') != std::string::npos;
  if (!range && !e.taken.empty()) {
    return fmt::format(
        "{}: --port {} takes the ports {}-{} (choose another port, or a range such as --port {}-{} to skip ports in "
        "use)",
        e.taken.front().what(), o.port_text, e.first, e.last, e.first,
        std::min<unsigned>(65535u, static_cast<unsigned>(e.first) + 100u));
  }
  std::string reasons;
  for (const auto& t : e.taken) reasons += (reasons.empty() ? "" : "; ") + std::string{t.what()};
  const std::size_t size = std::size_t{e.last} - e.first + 1;
  return fmt::format("--port {}: {} of its {} ports can be used, {} needed ({})", o.port_text, size - e.taken.size(),
                     size, e.needed, reasons);
}

}  // namespace

int nodes_command(const nodes_options& o) {
  const auto dir = local::default_state_dir();
  switch (o.what) {
    case nodes_options::action::up: {
      try {
        local::detached_options d;
        d.count = o.count;
        d.shards = o.shards;
        d.tls = o.tls;
        d.tls_auth_clients = o.tls_auth_clients;
        d.first_port = o.first_port;
        d.last_port = o.last_port;
        const auto set = local::start_detached(dir, d);
        print_set(set, o.json, o.verbose);
        return exit_ok;
      } catch (const local::ports_unavailable& e) {
        complain(fmt::format("cannot start local nodes: {}", ports_message(o, e)));
        return exit_unavailable;
      } catch (const local::port_unavailable& e) {
        // Taken between the check and the server's start.
        complain(fmt::format("cannot start local nodes: {} (--port {})", e.what(), o.port_text));
        return exit_unavailable;
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
