// SPDX-License-Identifier: BSL-1.0
// The `redlock` command-line tool: a Redlock distributed lock from the shell (like flock(1), but
// across machines). See docs/cli.md.

#include "commands.hpp"
#include "local_nodes.hpp"
#include "options.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

#ifndef REDLOCK_CLI_VERSION
#define REDLOCK_CLI_VERSION "unknown"
#endif

namespace redlock::cli {

void complain(std::string_view text) {
  const std::string line = fmt::format("redlock: {}\n", text);
  std::string_view rest = line;
  while (!rest.empty()) {
    const auto n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

namespace {

constexpr std::string_view main_usage = R"(usage: redlock COMMAND [OPTIONS] [ARGS...]

A Redlock distributed lock over N independent Redis masters, from the shell:
like flock(1), but across machines.

Commands:
  run      run a command while holding a lock, release it when the command exits
  status   show what each master holds for a resource
  nodes    start, list or stop local redis-server masters (plain or TLS) for trying
           things out
  help     show the help of a command ('redlock help run')

Options: -h, --help; --version.

Masters come from --nodes, else REDLOCK_NODES, else a configuration file (--config
or REDLOCK_CONFIG), else the local nodes started by 'redlock nodes up'.
Credentials come from REDLOCK_USERNAME and REDLOCK_PASSWORD (never a flag).
TLS: masters listed as rediss://host:port, or --tls; to try it, 'redlock nodes up 3
--tls' prints the flags to pass (docs/tls.md).
The reference: docs/cli.md.
)";

constexpr std::string_view common_usage = R"(Masters and settings (run, status):
  -n, --nodes LIST         masters: host:port,rediss://host:port (TLS),[v6addr]:port,unix:/path,...
                           (else REDLOCK_NODES, else the configuration file, else the local nodes
                           of 'redlock nodes up')
  -c, --config FILE        configuration file (else REDLOCK_CONFIG): key = value lines
      --prefix PREFIX      prepended to the resource name to make the key (else REDLOCK_PREFIX)
      --request-timeout DURATION
                           deadline of one master's answer (default 250ms)
      --restart-guard MODE run_id (default), reconnect or off: how a restarted master is told
                           (else REDLOCK_RESTART_GUARD; off for the local nodes)
      --tls                every TCP master over TLS (as if listed rediss://)
      --tls-ca-file FILE   CA certificates (PEM) to trust (default: the system's store)
      --tls-ca-dir DIR     directory of hashed CA certificates to trust
      --tls-cert FILE      client certificate chain (PEM) for mutual TLS (with --tls-key)
      --tls-key FILE       its private key (PEM, unencrypted)
      --tls-server-name NAME
                           name the masters' certificates must carry (default: each host)
  -v, --verbose            say where the masters come from, and each master's answer and time
      --json               machine-readable output
  -h, --help               this help
Durations: 500ms, 30s, 1.5s, 2m, 1h; a bare number means seconds.
Environment: REDLOCK_NODES, REDLOCK_CONFIG, REDLOCK_PREFIX, REDLOCK_USERNAME, REDLOCK_PASSWORD,
REDLOCK_TLS, REDLOCK_TLS_CA_FILE, REDLOCK_TLS_CA_DIR, REDLOCK_TLS_CERT_FILE,
REDLOCK_TLS_KEY_FILE, REDLOCK_TLS_SERVER_NAME, REDLOCK_STATE_DIR.
)";

constexpr std::string_view run_usage = R"(usage: redlock run --resource NAME [OPTIONS] [--] COMMAND [ARGS...]

Acquires the lock NAME, runs COMMAND while keeping the lock alive, forwards SIGINT,
SIGTERM, SIGHUP and SIGQUIT to it, releases the lock when it exits, and exits with
its status. If the lock is lost meanwhile, COMMAND gets SIGTERM (SIGKILL after --grace).

  -r, --resource NAME      the lock's name (required; repeat it for several resources)
  -t, --ttl DURATION       the lock's time to live, renewed while COMMAND runs (default 30s)
  -w, --wait DURATION      wait up to this long for the lock (default: one attempt)
      --max-hold DURATION  stop renewing after this long: COMMAND is then stopped (default: no limit)
      --grace DURATION     time between SIGTERM and SIGKILL when the lock is lost (default 10s)
      --foreground         keep COMMAND in redlock's process group, on the terminal (for
                           interactive commands); then only SIGTERM is forwarded
      --json               JSON events, one object per line, on stderr
      --json-fd N          JSON events on file descriptor N instead (implies --json)

Kinds of lock (the default is a plain exclusive lock, as other Redlock clients take it):
  -r A -r B ...            several resources: one lock on all of them, or none
      --shared             a reader: shares NAME with other readers, excludes writers and
                           plain locks
      --write              a writer: excludes readers and writers like a plain lock, and
                           while it waits (--wait) no new reader enters: readers cannot
                           starve it (a waiting plain lock can be starved)
      --permits P          a counting semaphore: at most P holders at once (P >= 1; all
                           holders must use the same P). Needs semaphore_quorum(N,P)
                           masters, the smallest q with q(P+1) > P*N (N when P >= N-1);
                           --verbose says how many
      --fence              a fencing token, strictly larger than any earlier holder's, in
                           REDLOCK_FENCE
      --owner ID           reentrant: runs with the same owner ID share the lock (a nested
                           'redlock run --owner ID' re-enters instead of waiting); the lock
                           is free once the last of them exits. ID is a secret: anyone who
                           knows it enters
      --reentrant          as --owner, with the owner from REDLOCK_OWNER (set by an
                           enclosing 'redlock run --reentrant'), else a new random one
--shared, --write and --permits exclude each other; --fence, --owner and --reentrant
need a plain lock of one resource, and --fence goes with neither --owner nor --reentrant.

COMMAND's environment gains REDLOCK_RESOURCE (the first resource), REDLOCK_RESOURCES
(all, one per line), REDLOCK_KEY, REDLOCK_KEYS, REDLOCK_TTL_MS, REDLOCK_VALIDITY_MS,
REDLOCK_FENCE (with --fence) and REDLOCK_OWNER (with --owner or --reentrant).

Exit status: COMMAND's own (128+N when killed by signal N); 75 the lock could not be
had; 76 the lock was lost while COMMAND ran; 126 COMMAND cannot be executed; 127
COMMAND not found; 64 usage error; 78 configuration error; 128+N interrupted by
signal N while waiting.

)";

constexpr std::string_view status_usage = R"(usage: redlock status [OPTIONS] NAME

Reads every master's keys for NAME, whatever the lock kind (one pipelined request
of plain reads per master, with a deadline), and tells whether enough masters agree
on a holder: the holder, the permits in use, the readers and a queued writer, the
fencing token, the waiters in the fair queue. Holders are shown by the first 8
characters of their token (all of it with --verbose).

Exit status: 0 held by a majority; 1 free; 2 keys present but no majority (split,
expiring, or masters missing); 69 fewer than a majority of masters answered;
64 usage error; 78 configuration error.

)";

constexpr std::string_view nodes_usage =
    R"(usage: redlock nodes [list | up N [--shards S] [--tls] [--port P] | down] [--json] [--verbose]

Local redis-server masters on loopback ports, for trying things out. They run
detached (they outlive 'nodes up'), without persistence, and are recorded in the
state directory: REDLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/redlock, else
/tmp/redlock-$UID. While they are recorded, 'run' and 'status' use them when no
masters are configured. The server binary: REDLOCK_REDIS_SERVER, else redis-server.

  list     show the recorded set (the default)
  up N     start N masters (1..15), wait until each answers, print them and an
           'export REDLOCK_NODES=...' line; refused while a recorded set runs
           --shards S: each master is a Redis Cluster of S primaries (1..8; at most
           15 servers in all), its slots spread evenly; the masters are then
           redis-cluster://A+B entries
           --tls: TLS-only masters (rediss://), their certificates signed by a new
           private CA in the state directory; prints the flags that trust it
           (--tls-ca-file FILE) and exports REDLOCK_TLS_CA_FILE
           --tls-auth-clients: as --tls, and the masters require a client
           certificate of that CA (printed as --tls-cert FILE --tls-key FILE)
           --port BASE: the masters listen on BASE, BASE+1, ... (all must be free)
           --port FIRST-LAST: on the lowest free ports of that range
  down     stop the recorded set (SIGTERM, then SIGKILL), forget it, and remove its
           logs and certificates

TLS in two commands (docs/tls.md; DIR is the state directory, and 'nodes up --tls'
prints the exact flags):
  redlock nodes up 3 --tls
  redlock run --tls-ca-file DIR/tls/ca.crt --resource NAME -- COMMAND

Exit status: 0 done; 1 ('list') nothing recorded; 73 ('up') a set already runs;
69 ('up') a server could not be started, or the ports asked for are in use;
64 usage error.
)";

void print(std::FILE* to, std::string_view text) { fmt::print(to, "{}", text); }

bool help_for(std::string_view command, std::FILE* to) {
  if (command == "run") {
    print(to, run_usage);
    print(to, common_usage);
  } else if (command == "status") {
    print(to, status_usage);
    print(to, common_usage);
  } else if (command == "nodes") {
    print(to, nodes_usage);
  } else {
    return false;
  }
  return true;
}

/// The masters recorded by `redlock nodes up`: the embedded default.
std::optional<std::string> local_masters() {
  const auto dir = local::default_state_dir();
  std::optional<local::recorded_set> set;
  try {
    set = local::read_state(dir);
  } catch (const std::exception& e) {
    throw config_error(e.what());
  }
  if (!set) return std::nullopt;
  if (std::none_of(set->nodes.begin(), set->nodes.end(), local::is_running)) {
    throw config_error(
        fmt::format("no masters configured, and the local nodes recorded in {} are not running (start them again with "
                    "'redlock nodes down' and 'redlock nodes up 3', or pass --nodes)",
                    dir.string()));
  }
  return set->masters();
}

resolved_config resolve_common(const common_options& o) {
  return resolve(o, process_environment(), disk_reader(), local_masters);
}

int dispatch(std::span<const std::string> args) {
  if (args.empty()) {
    print(stderr, main_usage);
    return exit_usage;
  }
  const std::string& command = args[0];
  const auto rest = args.subspan(1);
  if (command == "-h" || command == "--help") {
    print(stdout, main_usage);
    return exit_ok;
  }
  if (command == "help") {
    if (rest.empty()) {
      print(stdout, main_usage);
      return exit_ok;
    }
    if (!help_for(rest[0], stdout)) throw usage_error(fmt::format("no such command '{}'", rest[0]));
    return exit_ok;
  }
  if (command == "--version" || command == "-V") {
    fmt::print("redlock {} (redlock-asio)\n", REDLOCK_CLI_VERSION);
    return exit_ok;
  }
  if (command == "run") {
    const auto o = parse_run(rest);
    if (o.common.help) {
      help_for(command, stdout);
      return exit_ok;
    }
    return run_command(o, resolve_common(o.common));
  }
  if (command == "status") {
    const auto o = parse_status(rest);
    if (o.common.help) {
      help_for(command, stdout);
      return exit_ok;
    }
    return status_command(o, resolve_common(o.common));
  }
  if (command == "nodes") {
    const auto o = parse_nodes(rest);
    if (o.help) {
      help_for(command, stdout);
      return exit_ok;
    }
    return nodes_command(o);
  }
  if (command.starts_with("-")) {
    throw usage_error(
        fmt::format("unknown option '{}': options go after the command (redlock COMMAND [OPTIONS])", command));
  }
  throw usage_error(fmt::format("unknown command '{}' (commands: run, status, nodes, help)", command));
}

}  // namespace
}  // namespace redlock::cli

int main(int argc, char** argv) {
  using namespace redlock::cli;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    const int status = dispatch(args);
    std::fflush(stdout);
    return status;
  } catch (const usage_error& e) {
    complain(e.has_hint ? std::string{e.what()} : fmt::format("{} (see 'redlock --help')", e.what()));
    return exit_usage;
  } catch (const config_error& e) {
    complain(e.what());
    return exit_config;
  } catch (const std::exception& e) {
    complain(fmt::format("internal error: {}", e.what()));
    return exit_software;
  }
}
