// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The `redlock` tool's command lines, durations, configuration file and the choice of masters.
/// Pure: no I/O besides what the caller passes in (the environment and file reading are
/// functions), so all of it is unit-tested.

#include <redlock/config.hpp>
#include <redlock/lock_options.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::cli {

/// The tool's exit statuses (sysexits(3) numbers where one fits). `run` otherwise exits with its
/// command's status.
enum exit_status : int {
  exit_ok = 0,
  exit_free = 1,              ///< `status`: the resource is free
  exit_partial = 2,           ///< `status`: keys present but no majority agrees (split, expiring, unknown)
  exit_usage = 64,            ///< EX_USAGE: bad command line
  exit_unavailable = 69,      ///< EX_UNAVAILABLE: `status`: too few masters answered; `nodes up`: cannot start
  exit_software = 70,         ///< EX_SOFTWARE: internal error
  exit_oserr = 71,            ///< EX_OSERR: fork, pipe, ... failed
  exit_cantcreat = 73,        ///< EX_CANTCREAT: `nodes up` while a set is running
  exit_tempfail = 75,         ///< EX_TEMPFAIL: `run`: the lock could not be had
  exit_lost = 76,             ///< `run`: the lock was lost while the command ran
  exit_config = 78,           ///< EX_CONFIG: bad configuration (masters, config file, password file)
  exit_cannot_execute = 126,  ///< `run`: the command was found but could not be executed
  exit_not_found = 127,       ///< `run`: the command was not found
};

/// A command-line mistake: exit 64 with the message.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
  /// True when the message already says which help to read: the generic `(see 'redlock --help')`
  /// is then not added (one hint, not two).
  bool has_hint = false;
};
/// A configuration mistake (masters, configuration file, password file): exit 78 with the message.
struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// @brief Parses a duration: a whole or decimal number with a unit `ms`, `s`, `m` or `h`; a bare
/// number means seconds (`500ms`, `30s`, `1.5s`, `2m`, `1h`, `10`).
/// Returns nothing, with `why` saying what is wrong, for anything else (signs, blanks, other
/// units, fractions of a millisecond, values beyond 366 days).
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text, std::string* why = nullptr);

/// Formats a duration for messages: `250ms`, `30s`, `1.5s`, `2m`, `90m`, `1h`.
std::string format_duration(std::chrono::milliseconds d);

/// Options shared by `run` and `status`.
struct common_options {
  std::optional<std::string> nodes;                          ///< --nodes LIST
  std::optional<std::string> config_file;                    ///< --config FILE
  std::optional<std::string> prefix;                         ///< --prefix PREFIX
  std::optional<std::chrono::milliseconds> request_timeout;  ///< --request-timeout DUR
  std::optional<std::string> restart_guard;                  ///< --restart-guard run_id|reconnect|off
  bool tls = false;                                          ///< --tls (every TCP master over TLS)
  std::optional<std::string> tls_ca_file;                    ///< --tls-ca-file FILE
  std::optional<std::string> tls_ca_dir;                     ///< --tls-ca-dir DIR
  std::optional<std::string> tls_cert_file;                  ///< --tls-cert FILE
  std::optional<std::string> tls_key_file;                   ///< --tls-key FILE
  std::optional<std::string> tls_server_name;                ///< --tls-server-name NAME
  bool json = false;                                         ///< --json
  bool verbose = false;                                      ///< --verbose, -v
  bool help = false;                                         ///< --help, -h
};

/// `redlock run [options] [--] CMD [ARGS...]`.
struct run_options {
  common_options common;
  std::string resource;                    ///< the first --resource NAME (required): what messages name
  std::vector<std::string> resources;      ///< every --resource NAME, in order (several: one lock on all)
  lock_kind kind = lock_kind::exclusive;   ///< --shared (read), --write, --permits P (semaphore)
  std::size_t permits = 1;                 ///< --permits P
  bool fence = false;                      ///< --fence
  std::optional<std::string> owner;        ///< --owner ID
  bool reentrant = false;                  ///< --reentrant (the owner from REDLOCK_OWNER, else a new one)
  std::chrono::milliseconds ttl{30000};    ///< --ttl DUR
  std::chrono::milliseconds wait{0};       ///< --wait DUR (0: one attempt)
  std::chrono::milliseconds max_hold{0};   ///< --max-hold DUR (0: no limit)
  std::chrono::milliseconds grace{10000};  ///< --grace DUR
  bool foreground = false;                 ///< --foreground
  int json_fd = -1;                        ///< --json-fd N (implies --json); -1: stderr
  std::vector<std::string> command;        ///< CMD ARGS... (non-empty unless help)
};

/// `redlock status [options] NAME`.
struct status_options {
  common_options common;
  std::string resource;
};

/// `redlock nodes [list|up N [--shards S] [--tls] [--port P]|down] [--json] [--verbose]`.
struct nodes_options {
  enum class action { list, up, down };
  action what = action::list;
  std::size_t count = 0;          ///< for `up`
  std::size_t shards = 0;         ///< for `up`: each master a Redis Cluster of this many shards (0: plain)
  bool tls = false;               ///< for `up`: --tls (TLS masters with a private CA)
  bool tls_auth_clients = false;  ///< for `up`: --tls-auth-clients (implies --tls)
  std::uint16_t first_port = 0;   ///< for `up`: --port BASE or FIRST-LAST (0: any free ports)
  std::uint16_t last_port = 0;    ///< the range's end: BASE + servers - 1 for --port BASE
  std::string port_text;          ///< --port's value as given, for messages
  bool json = false;
  bool verbose = false;
  bool help = false;
};

/// Most permits `--permits` accepts (the library's bound).
inline constexpr std::size_t max_permits = std::size_t{1} << 20;

/// True when `id` is a valid owner for reentrancy: 1 to 256 bytes, no blanks or control characters.
bool valid_owner(std::string_view id) noexcept;

/// The flag that chose `kind`: "--shared", "--write", "--permits"; empty for the plain lock.
std::string_view kind_flag(lock_kind kind) noexcept;

/// Each parser throws `usage_error` naming the offending argument. `args` excludes the program
/// and command names. With `--help` the other requirements are not checked.
run_options parse_run(std::span<const std::string> args);
status_options parse_status(std::span<const std::string> args);
nodes_options parse_nodes(std::span<const std::string> args);

/// Most local nodes `nodes up` starts.
inline constexpr std::size_t max_local_nodes = 15;
/// Most shards per cluster `nodes up --shards` starts.
inline constexpr std::size_t max_local_shards = 8;

/// The settings a configuration file may hold (`key = value` lines; `#` starts a comment line).
struct file_settings {
  std::optional<std::string> nodes;
  std::optional<std::string> username;
  std::optional<std::string> password_file;
  std::optional<std::string> key_prefix;
  std::optional<std::chrono::milliseconds> request_timeout;
  std::optional<std::chrono::milliseconds> release_timeout;
  std::optional<std::chrono::milliseconds> connect_timeout;
  std::optional<int> database;
  std::optional<bool> tls;  ///< tls = yes|no (every TCP master over TLS)
  std::optional<std::string> tls_ca_file;
  std::optional<std::string> tls_ca_dir;
  std::optional<std::string> tls_cert_file;
  std::optional<std::string> tls_key_file;
  std::optional<std::string> tls_server_name;
};

/// Parses a configuration file's text; throws `config_error` naming `origin` and the line.
/// A `password` key is refused (use `password_file` or `REDLOCK_PASSWORD`).
file_settings parse_config_text(std::string_view text, std::string_view origin);

/// Looks up an environment variable (an empty value counts as unset).
using env_lookup = std::function<std::optional<std::string>(std::string_view)>;
/// Reads a whole file; nothing (with `why`) when it cannot.
using file_reader = std::function<std::optional<std::string>(const std::string& path, std::string& why)>;
/// The masters recorded by `redlock nodes up`, as a list; nothing when none are recorded.
/// May throw `config_error` (for instance when the recorded set is not running).
using local_lookup = std::function<std::optional<std::string>()>;

/// The process environment as an `env_lookup`.
env_lookup process_environment();
/// Reads files from disk.
file_reader disk_reader();

/// Where the masters came from.
enum class masters_origin { flag, environment, file, local };

/// The client configuration the tool will use, and how it was chosen (for --verbose).
struct resolved_config {
  client_config client;
  masters_origin origin = masters_origin::flag;
  std::string origin_text;      ///< e.g. "--nodes", "REDLOCK_NODES", "config file /etc/redlock.conf"
  std::string masters_text;     ///< the list as given
  std::string config_path;      ///< the configuration file used, if any
  std::string username;         ///< ACL user, empty for default
  std::string password_origin;  ///< "REDLOCK_PASSWORD", "password_file /path", or empty (no password)
  /// Lines for --verbose explaining the choices (never containing the password).
  std::vector<std::string> notes;
};

/// @brief Chooses the masters and settings: masters from `--nodes`, else `REDLOCK_NODES`, else
/// the configuration file (`--config`, else `REDLOCK_CONFIG`), else the local nodes; other
/// settings from the flag, else the environment, else the file, else the library's defaults.
/// Credentials: `REDLOCK_USERNAME` / `REDLOCK_PASSWORD`, else the file's `username` /
/// `password_file`. TLS: masters listed as `rediss://`, or every TCP master with `--tls`
/// (`REDLOCK_TLS`, the file's `tls`); the CA, client certificate, key and server name from the
/// `--tls-*` flags, else `REDLOCK_TLS_*`, else the file's `tls_*` keys, applied to every TLS master.
/// Throws `config_error` for bad lists, unreadable files, TLS settings without a TLS master or no
/// masters at all.
resolved_config resolve(const common_options& opts, const env_lookup& env, const file_reader& read,
                        const local_lookup& local);

/// The key of `resource` (the prefix prepended).
inline std::string key_of(const resolved_config& cfg, std::string_view resource) {
  return cfg.client.key_prefix + std::string{resource};
}

/// Smallest majority of `n` masters.
constexpr std::size_t majority_of(std::size_t n) noexcept { return n / 2 + 1; }

}  // namespace redlock::cli
