// SPDX-License-Identifier: BSL-1.0
#include "local_nodes.hpp"

#include <fmt/format.h>

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <memory>
#include <signal.h>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

namespace redlock::local {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr const char* state_file = "nodes";
constexpr const char* lock_file = ".lock";

[[noreturn]] void throw_errno(const std::string& what) {
  const int err = errno;
  throw std::system_error(err, std::generic_category(), what);
}

/// Owns a file descriptor.
class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// /proc/PID/stat: the state letter and the start time; nothing when the process is gone.
struct proc_stat {
  char state = '?';
  unsigned long long start_time = 0;
};
std::optional<proc_stat> read_proc_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const auto text = read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = text.rfind(')');  // the command name may hold blanks and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  proc_stat st;
  in >> st.state;
  std::string skip;
  for (int field = 4; field < 22; ++field) in >> skip;  // ppid .. priority, nice, ...
  in >> st.start_time;
  if (!in) return std::nullopt;
  return st;
}

}  // namespace

// ---- detached sets ------------------------------------------------------------------------------

std::string recorded_node::address() const { return fmt::format("{}:{}", host, port); }

std::string recorded_set::masters() const {
  std::string out;
  if (shards == 0) {
    for (const auto& n : nodes) out += (out.empty() ? "" : ",") + (tls ? "rediss://" : std::string{}) + n.address();
    return out;
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (i % shards == 0) out += (out.empty() ? "redis-cluster://" : ",redis-cluster://");
    out += (i % shards == 0 ? "" : "+") + nodes[i].address();
  }
  return out;
}

fs::path state_dir_from(const std::optional<std::string>& state_dir, const std::optional<std::string>& runtime_dir,
                        unsigned uid) {
  if (state_dir && !state_dir->empty()) return *state_dir;
  if (runtime_dir && !runtime_dir->empty()) return fs::path(*runtime_dir) / "redlock";
  return fmt::format("/tmp/redlock-{}", uid);
}

fs::path default_state_dir() {
  const auto env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string{v};
  };
  return state_dir_from(env("REDLOCK_STATE_DIR"), env("XDG_RUNTIME_DIR"), ::getuid());
}

namespace {

/// Creates `dir` (mode 0700) when missing and checks that it is ours and not writable by others:
/// in a shared /tmp another user could otherwise plant a record of their own servers.
void ensure_private_dir(const fs::path& dir) {
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw_errno("cannot create the state directory " + dir.string());
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw_errno("cannot inspect the state directory " + dir.string());
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("the state directory {} is not a directory", dir.string()));
  if (st.st_uid != ::getuid()) {
    throw std::runtime_error(fmt::format("the state directory {} belongs to another user", dir.string()));
  }
  if ((st.st_mode & 022) != 0) {
    throw std::runtime_error(
        fmt::format("the state directory {} is writable by others; make it private (chmod 700)", dir.string()));
  }
}

/// An exclusive lock on the state directory for the life of the object, so that two `nodes up`
/// (or up and down) do not interleave.
class dir_lock {
 public:
  explicit dir_lock(const fs::path& dir) : fd_(::open((dir / lock_file).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_.get() < 0) throw_errno("cannot open " + (dir / lock_file).string());
    while (::flock(fd_.get(), LOCK_EX) != 0) {
      if (errno != EINTR) throw_errno("cannot lock " + (dir / lock_file).string());
    }
  }

 private:
  fd_guard fd_;
};

void write_state(const fs::path& dir, const recorded_set& set) {
  const auto tmp = dir / (std::string(state_file) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# redlock local nodes (redlock nodes up): host port pid start_time\n";
    if (set.shards) out << "shards " << set.shards << '\n';
    if (set.tls) out << (set.tls_auth_clients ? "tls auth-clients\n" : "tls\n");
    for (const auto& n : set.nodes) out << n.host << ' ' << n.port << ' ' << n.pid << ' ' << n.start_time << '\n';
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, dir / state_file);
}

void remove_state(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / state_file, ec);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.starts_with("node-") || name == "tls") {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
}

bool gone(const recorded_node& n) { return !is_running(n); }

}  // namespace

std::optional<recorded_set> read_state(const fs::path& dir) {
  const auto file = dir / state_file;
  std::ifstream in(file);
  if (!in) return std::nullopt;
  recorded_set set;
  set.dir = dir;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    if (line.rfind("shards ", 0) == 0) {
      std::string word;
      if (!(fields >> word >> set.shards) || set.shards == 0) {
        throw std::runtime_error(
            fmt::format("{}:{}: malformed record (remove the file to forget it)", file.string(), line_no));
      }
      continue;
    }
    if (line == "tls" || line == "tls auth-clients") {
      set.tls = true;
      set.tls_auth_clients = line != "tls";
      continue;
    }
    recorded_node n;
    unsigned port = 0;
    if (!(fields >> n.host >> port >> n.pid >> n.start_time) || port == 0 || port > 65535 || n.pid <= 0) {
      throw std::runtime_error(
          fmt::format("{}:{}: malformed record (remove the file to forget it)", file.string(), line_no));
    }
    n.port = static_cast<std::uint16_t>(port);
    set.nodes.push_back(std::move(n));
  }
  if (set.nodes.empty()) return std::nullopt;
  return set;
}

bool is_running(const recorded_node& n) {
  const auto st = read_proc_stat(n.pid);
  if (!st || st->state == 'Z' || st->state == 'X') return false;
  return n.start_time == 0 || st->start_time == n.start_time;
}

ports_unavailable::ports_unavailable(std::uint16_t first_port, std::uint16_t last_port, std::size_t needed_ports,
                                     std::vector<port_unavailable> taken_ports)
    : std::runtime_error([&] {
        std::string reasons;
        for (const auto& t : taken_ports) reasons += (reasons.empty() ? "" : "; ") + std::string{t.what()};
        return fmt::format("{} server{} need{} {} free port{} in {}-{}, but {}", needed_ports,
                           needed_ports == 1 ? "" : "s", needed_ports == 1 ? "s" : "", needed_ports,
                           needed_ports == 1 ? "" : "s", first_port, last_port, reasons);
      }()),
      first(first_port),
      last(last_port),
      needed(needed_ports),
      taken(std::move(taken_ports)) {}

recorded_set start_detached(const fs::path& dir, const detached_options& o) {
  if (o.tls && o.shards) throw std::invalid_argument("TLS local nodes cannot be clusters");
  ensure_private_dir(dir);
  dir_lock guard(dir);
  if (auto old = read_state(dir)) {
    const auto live = std::count_if(old->nodes.begin(), old->nodes.end(), is_running);
    if (live > 0) {
      throw already_running(
          fmt::format("{} local node{} already running ({}), recorded in {}; stop {} with "
                      "'redlock nodes down'",
                      live, live == 1 ? " is" : "s are", old->masters(), dir.string(), live == 1 ? "it" : "them"));
    }
  }
  remove_state(dir);  // a stale record, or leftovers of a failed start

  recorded_set set;
  set.dir = dir;
  set.shards = o.shards;
  set.tls = o.tls;
  set.tls_auth_clients = o.tls && o.tls_auth_clients;
  auto options = o.server;
  if (o.shards && !options.cluster_node_timeout) options.cluster_node_timeout = std::chrono::milliseconds{2000};
  const std::size_t count = o.shards ? o.count * o.shards : o.count;
  std::vector<std::unique_ptr<node>> nodes;
  const auto record = [&] {
    set.nodes.clear();
    for (const auto& n : nodes) {
      const auto st = read_proc_stat(n->pid());
      set.nodes.push_back({n->host(), o.tls ? n->tls_port() : n->port(), n->pid(), st ? st->start_time : 0});
    }
    write_state(dir, set);
  };
  try {
    if (o.tls) {
      const auto files = make_certificates(set.tls_dir());
      options.tls = tls_options{files.server_cert_file, files.server_key_file, files.ca_file, set.tls_auth_clients};
    }
    const auto shared = std::make_shared<const server_options>(std::move(options));
    // The ports asked for, lowest first: a taken one is skipped while the range has others.
    std::uint32_t next_port = o.first_port;
    std::vector<port_unavailable> taken;
    for (std::size_t i = 0; i < count; ++i) {
      for (;;) {
        port_request ports;
        if (o.first_port != 0) {
          if (next_port > o.last_port) throw ports_unavailable(o.first_port, o.last_port, count, std::move(taken));
          (o.tls ? ports.tls_port : ports.port) = static_cast<std::uint16_t>(next_port++);
        }
        try {
          nodes.push_back(
              std::make_unique<node>(shared, dir / fmt::format("node-{}", i + 1), lifetime::detached, ports));
          break;
        } catch (const port_unavailable& e) {
          if (o.first_port == 0) throw;
          taken.push_back(e);
        }
      }
    }
    for (auto& n : nodes) n->spawn();  // in parallel: fork all, then wait
    record();                          // before waiting: an interrupted start can still be stopped
    for (auto& n : nodes) n->wait_started();
    if (o.tls) {
      // TLS masters only: the plain port served the start's PING; closed, nothing reaches the
      // data without TLS. Redis before 7.0 cannot close it at run time: it then stays, unlisted.
      for (auto& n : nodes) (void)n->command({"CONFIG", "SET", "port", "0"});
    }
    record();  // a server whose port was taken moved to another port, with another pid
    if (o.shards) {
      std::vector<node*> all;
      for (auto& n : nodes) all.push_back(n.get());
      form_clusters(all, o.shards);
    }
  } catch (...) {
    nodes.clear();  // kills them
    remove_state(dir);
    throw;
  }
  for (auto& n : nodes) n->release();  // they run on
  return set;
}

stop_report stop_detached(const fs::path& dir, std::chrono::milliseconds grace) {
  stop_report report;
  std::error_code ec;
  if (!fs::exists(dir / state_file, ec)) return report;
  dir_lock guard(dir);
  const auto set = read_state(dir);
  if (!set) {
    remove_state(dir);
    return report;
  }
  report.recorded = set->nodes.size();
  std::vector<recorded_node> live;
  for (const auto& n : set->nodes) {
    if (!is_running(n)) continue;
    live.push_back(n);
    ::kill(n.pid, SIGCONT);  // a stopped process would not act on SIGTERM
    ::kill(n.pid, SIGTERM);
  }
  report.stopped = live.size();
  const auto wait_all = [&](clock_type::time_point deadline) {
    while (clock_type::now() < deadline) {
      if (std::all_of(live.begin(), live.end(), gone)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return std::all_of(live.begin(), live.end(), gone);
  };
  if (!wait_all(clock_type::now() + grace)) {
    for (const auto& n : live) {
      if (is_running(n)) {
        ::kill(n.pid, SIGKILL);
        ++report.killed;
      }
    }
    if (!wait_all(clock_type::now() + 5s)) {
      throw std::runtime_error(fmt::format("some local nodes of {} did not exit even after SIGKILL", dir.string()));
    }
  }
  remove_state(dir);
  return report;
}

}  // namespace redlock::local
