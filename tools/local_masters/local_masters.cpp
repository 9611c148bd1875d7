// SPDX-License-Identifier: BSL-1.0
#include "local_masters.hpp"

#include <redlock/resp/node.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>

#include <fmt/format.h>

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <span>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

namespace redlock::local {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How many times a start is retried when the port turns out to be taken.
constexpr int max_start_attempts = 5;
// How much of the server's output goes into an exception message.
constexpr std::size_t output_tail_chars = 4000;

template <class... Args>
[[noreturn]] void throw_system_error(int err, fmt::format_string<Args...> what, Args&&... args) {
  throw std::system_error(err, std::generic_category(), fmt::format(what, std::forward<Args>(args)...));
}

/// Throws for the current errno, read before anything else can change it.
template <class... Args>
[[noreturn]] void throw_errno(fmt::format_string<Args...> what, Args&&... args) {
  const int err = errno;
  throw_system_error(err, what, std::forward<Args>(args)...);
}

/// Owns a file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

sockaddr_in loopback_address(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

int remaining_ms(clock_type::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now());
  return static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, 1'000'000));
}

/// A socket bound to a loopback port and never listening. A socket bound to port 0 gets a port
/// no other socket is bound to; keeping it bound (with SO_REUSEADDR) means nobody else's bind(0)
/// or connect() picks the port, while redis-server, which also sets SO_REUSEADDR, can still bind
/// and listen on it. `port` 0: any free port; else that port, and `port_unavailable` when a
/// process listens on it (a listener excludes even SO_REUSEADDR binds). Returns the descriptor;
/// sets `port`.
int hold_port(std::uint16_t& port) {
  unique_fd holder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (holder.get() < 0) throw_errno("socket");
  const int one = 1;
  if (::setsockopt(holder.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    throw_errno("setsockopt(SO_REUSEADDR)");
  }
  auto addr = loopback_address(port);
  if (::bind(holder.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (port != 0) throw port_unavailable(port, errno);
    throw_errno("bind 127.0.0.1:0");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(holder.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw_errno("getsockname");
  port = ntohs(addr.sin_port);
  return holder.release();
}

// ---- a blocking client over the project's RESP codec ------------------------------------------

/// One reply: its bytes as received and its parsed nodes.
struct reply {
  std::string raw;
  resp::response nodes;

  bool is(resp::type t, std::string_view value) const {
    const auto* v = resp::reply_value(nodes);
    return v != nullptr && v->data_type == t && v->value == value;
  }
};

/// A loopback TCP connection with deadlines, for the readiness probe and `command()`.
/// Non-blocking underneath so that every wait is bounded by poll().
class blocking_connection {
 public:
  blocking_connection(std::uint16_t port, clock_type::time_point deadline)
      : port_(port), parser_(resp::parser_limits{.max_depth = resp::parser::hard_max_depth}) {
    fd_ = unique_fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd_.get() < 0) throw_errno("socket");
    const auto addr = loopback_address(port);
    if (::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno != EINPROGRESS) throw_errno("connect to 127.0.0.1:{}", port);
      wait_for(POLLOUT, deadline, "connect");
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) throw_system_error(err, "connect to 127.0.0.1:{}", port);
    }
    const int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  /// Sends one command and reads its reply.
  template <class Range>
  reply call(std::string_view command, const Range& args, clock_type::time_point deadline) {
    resp::request req;
    req.push_range(command, args);
    return call_raw(req.payload(), deadline);
  }
  /// Sends one command already encoded and reads its reply.
  reply call_raw(std::string_view payload, clock_type::time_point deadline) {
    send_all(payload, deadline);
    return read_reply(deadline);
  }

 private:
  void send_all(std::string_view data, clock_type::time_point deadline) {
    while (!data.empty()) {
      // MSG_NOSIGNAL: a closed peer must not raise SIGPIPE in the program.
      const auto n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n >= 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_for(POLLOUT, deadline, "send");
      } else if (errno != EINTR) {
        throw_errno("send to 127.0.0.1:{}", port_);
      }
    }
  }

  reply read_reply(clock_type::time_point deadline) {
    reply out;
    for (;;) {
      if (!buffer_.empty()) {
        boost::system::error_code ec;
        const auto used = parser_.consume(buffer_, out.nodes, ec);
        if (ec) throw std::runtime_error(fmt::format("malformed reply from 127.0.0.1:{}: {}", port_, ec.message()));
        out.raw.append(buffer_, 0, used);
        buffer_.erase(0, used);
        if (parser_.done()) return out;
      }
      char chunk[16384];
      const auto n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
      if (n > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(n));
      } else if (n == 0) {
        throw std::runtime_error(fmt::format("127.0.0.1:{} closed the connection before replying", port_));
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_for(POLLIN, deadline, "reply");
      } else if (errno != EINTR) {
        throw_errno("recv from 127.0.0.1:{}", port_);
      }
    }
  }

  void wait_for(short events, clock_type::time_point deadline, const char* what) {
    for (;;) {
      pollfd p{fd_.get(), events, 0};
      const int r = ::poll(&p, 1, remaining_ms(deadline));
      if (r > 0) return;
      if (r == 0) throw std::runtime_error(fmt::format("timeout waiting for {} from 127.0.0.1:{}", what, port_));
      if (errno != EINTR) throw_errno("poll");
    }
  }

  std::uint16_t port_;
  unique_fd fd_;
  std::string buffer_;  // received, not yet parsed
  resp::parser parser_;
};

/// Authenticates `conn`: as the default user when a password is set, else as the ACL user (which
/// keeps working when extra arguments switch the default user off). Returns the rejecting reply,
/// or "" when done or not needed.
std::string authenticate(blocking_connection& conn, const server_options& options, clock_type::time_point deadline) {
  std::vector<std::string_view> args;
  if (!options.password.empty()) {
    args = {options.password};
  } else if (options.user) {
    args = {options.user->name, options.user->password};
  } else {
    return {};
  }
  auto r = conn.call("AUTH", args, deadline);
  return r.is(resp::type::simple_string, "OK") ? std::string() : std::move(r.raw);
}

/// True when the server on `port` answers PING (after AUTH) and is the process `pid`: the pid
/// check rules out answering for a foreign server that got hold of the same port.
bool answers_ping(std::uint16_t port, const server_options& options, pid_t pid, clock_type::time_point deadline) {
  try {
    blocking_connection conn(port, deadline);
    if (!authenticate(conn, options, deadline).empty()) return false;
    const std::vector<std::string_view> none;
    if (!conn.call("PING", none, deadline).is(resp::type::simple_string, "PONG")) return false;
    const std::vector<std::string_view> section{"server"};
    const auto info = conn.call("INFO", section, deadline);
    const auto* text = resp::reply_value(info.nodes);
    return text != nullptr && text->value.find(fmt::format("\nprocess_id:{}\r\n", pid)) != std::string::npos;
  } catch (const std::exception&) {
    return false;  // not ready yet (refused, reset, loading, ...)
  }
}

// ---- processes and files ----------------------------------------------------------------------

std::uintmax_t size_or_zero(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  return ec ? 0 : size;
}

std::string read_from(const fs::path& file, std::uintmax_t offset) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  in.seekg(static_cast<std::streamoff>(offset));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

/// Blocking waitpid that retries on EINTR; returns waitpid's result.
pid_t wait_child(pid_t pid, int* status, int flags) {
  for (;;) {
    const pid_t r = ::waitpid(pid, status, flags);
    if (r >= 0 || errno != EINTR) return r;
  }
}

/// Everything the child needs, prepared before fork(): after fork() in a multi-threaded
/// process only async-signal-safe calls are allowed, so the child must not allocate.
struct child_setup {
  const char* binary;
  char* const* argv;
  char* const* envp;
  bool detached;
  pid_t parent;
  int stdin_fd;
  int output_fd;
  int error_pipe;
  long max_fd;
};

[[noreturn]] void run_child(const child_setup& setup) {
  if (setup.detached) {
    ::setsid();  // no controlling terminal, no tie to our session
  } else {
    // Die with the program even when it aborts or is SIGKILLed, and close the race where it
    // died before prctl().
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != setup.parent) ::_exit(126);
    // Own process group: a terminal's Ctrl-C reaches only the program (or its debugger), which
    // then ends the servers itself, instead of the servers quitting under a test that still runs.
    ::setpgid(0, 0);
  }
  // Ignored dispositions and the blocked mask survive exec; the server expects defaults.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  ::dup2(setup.stdin_fd, STDIN_FILENO);
  ::dup2(setup.output_fd, STDOUT_FILENO);
  ::dup2(setup.output_fd, STDERR_FILENO);
  // Inherited descriptors (sockets, epoll instances, other servers' ports) must not leak into
  // the server; marking them close-on-exec keeps the error pipe usable until exec.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (long fd = 3; fd < setup.max_fd; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  }
  ::execve(setup.binary, setup.argv, setup.envp);
  const int err = errno;
  [[maybe_unused]] const auto ignored = ::write(setup.error_pipe, &err, sizeof err);
  ::_exit(127);
}

/// The command line of one start; everything on it (no config file), so each start is self-contained.
std::vector<std::string> server_args(const std::string& binary, const std::string& host, std::uint16_t port,
                                     std::uint16_t tls_port, std::uint16_t bus_port, const fs::path& dir,
                                     const server_options& o) {
  std::vector<std::string> args = {binary,
                                   "--port",
                                   std::to_string(port),
                                   "--bind",
                                   host,
                                   "--save",
                                   "",  // no RDB snapshots: a restart starts empty
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   dir.string(),
                                   "--logfile",
                                   (dir / "redis.log").string(),
                                   "--daemonize",
                                   "no",
                                   "--protected-mode",
                                   "no"};
  if (!o.password.empty()) args.insert(args.end(), {"--requirepass", o.password});
  if (o.user) {
    const auto& user = *o.user;
    args.insert(args.end(), {"--user", user.name, "on", user.password.empty() ? "nopass" : ">" + user.password, "~*",
                             "&*", "+@all"});
  }
  if (o.cluster_node_timeout) {
    args.insert(args.end(),
                {"--cluster-enabled", "yes", "--cluster-config-file", (dir / "nodes.conf").string(), "--cluster-port",
                 std::to_string(bus_port), "--cluster-node-timeout", std::to_string(o.cluster_node_timeout->count())});
  }
  if (o.tls) {
    args.insert(args.end(),
                {"--tls-port", std::to_string(tls_port), "--tls-cert-file", o.tls->cert_file.string(), "--tls-key-file",
                 o.tls->key_file.string(), "--tls-auth-clients", o.tls->require_client_cert ? "yes" : "no"});
    if (!o.tls->ca_file.empty()) args.insert(args.end(), {"--tls-ca-cert-file", o.tls->ca_file.string()});
  }
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return args;
}

constexpr std::string_view set_dir_prefix = "redlock-local-";
constexpr const char* owner_file = "owner.pid";

fs::path temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  return (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
}

/// Removes the directories left by programs that were killed before their destructors ran
/// (their servers died with them, through the parent-death signal).
void remove_orphaned_dirs(const fs::path& base) noexcept {
  try {
    std::error_code ec;
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
      const auto& dir = it->path();
      if (!dir.filename().string().starts_with(set_dir_prefix)) continue;
      pid_t owner = 0;
      // No owner file yet: another process is creating it right now; leave it.
      if (!(std::ifstream(dir / owner_file) >> owner) || owner <= 0) continue;
      std::error_code ignored;
      if (::kill(owner, 0) == -1 && errno == ESRCH) fs::remove_all(dir, ignored);
    }
  } catch (...) {  // best effort: a failed sweep must not fail a start
  }
}

}  // namespace

std::string find_server_binary(const server_options& options) {
  std::string name = options.server_binary;
  if (name.empty()) {
    const char* env = std::getenv("REDLOCK_REDIS_SERVER");
    name = (env != nullptr && *env != '\0') ? env : "redis-server";
  }
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) {
      throw std::runtime_error(fmt::format("cannot execute '{}': {}", name, std::strerror(errno)));
    }
    return name;
  }
  const char* path_env = std::getenv("PATH");
  std::string_view path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (;;) {
    const auto colon = path.find(':');
    const auto dir = path.substr(0, colon);
    const auto candidate = (dir.empty() ? fs::path(".") : fs::path(dir)) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  throw std::runtime_error(
      fmt::format("cannot find '{}' in PATH (install redis-server, or set REDLOCK_REDIS_SERVER to its path)", name));
}

port_unavailable::port_unavailable(std::uint16_t p, int err)
    : std::runtime_error(err == EADDRINUSE ? fmt::format("port {} is in use", p)
                         : err == EACCES
                             ? fmt::format("port {}: {} (ports below 1024 need privileges)", p, std::strerror(err))
                             : fmt::format("port {}: {}", p, std::strerror(err))),
      port(p),
      error(err) {}

// ---- node ---------------------------------------------------------------------------------------

node::node(std::shared_ptr<const server_options> options, fs::path dir, lifetime kind, port_request ports)
    : options_(std::move(options)),
      kind_(kind),
      binary_(find_server_binary(*options_)),
      dir_(std::move(dir)),
      requested_(ports) {
  fs::create_directories(dir_);
  try {
    reserve_ports();
  } catch (...) {
    close_fd(port_holder_);
    close_fd(tls_port_holder_);
    close_fd(bus_port_holder_);
    throw;
  }
}

node::~node() {
  send_kill();
  reap();
  close_fd(port_holder_);
  close_fd(tls_port_holder_);
  close_fd(bus_port_holder_);
}

void node::reserve_ports() {
  std::uint16_t port = requested_.port;
  unique_fd plain(hold_port(port));
  std::uint16_t tls_port = requested_.tls_port;
  unique_fd tls;
  if (options_->tls) tls = unique_fd(hold_port(tls_port));
  std::uint16_t bus_port = 0;
  unique_fd bus;
  if (options_->cluster_node_timeout) bus = unique_fd(hold_port(bus_port));
  close_fd(port_holder_);
  close_fd(tls_port_holder_);
  close_fd(bus_port_holder_);
  port_holder_ = plain.release();
  tls_port_holder_ = tls.release();
  bus_port_holder_ = bus.release();
  port_ = port;
  tls_port_ = tls_port;
  bus_port_ = bus_port;
}

std::string node::address() const { return fmt::format("{}:{}", host_, port_); }

void node::spawn() {
  auto args = server_args(binary_, host_, port_, tls_port_, bus_port_, dir_, *options_);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The environment, plus the clock shim's variables when asked for (built before fork: the child
  // may not allocate).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v{*e};
    if (options_->clock_shim.empty() || !(v.starts_with("LD_PRELOAD=") || v.starts_with("REDLOCK_CLOCK_FILE=")))
      env_strings.emplace_back(v);
  }
  if (!options_->clock_shim.empty()) {
    const auto file = clock_file();
    if (!fs::exists(file)) {
      const char zeros[16] = {};
      std::ofstream(file, std::ios::binary).write(zeros, sizeof zeros);
    }
    env_strings.push_back("LD_PRELOAD=" + options_->clock_shim);
    env_strings.push_back("REDLOCK_CLOCK_FILE=" + file.string());
  }
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const auto console_file = dir_ / "console.log";  // stdout/stderr: configuration errors land here
  // The files are appended to across restarts; only this run's part matters for errors.
  log_offset_ = size_or_zero(dir_ / "redis.log");
  console_offset_ = size_or_zero(console_file);

  unique_fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (dev_null.get() < 0) throw_errno("open /dev/null");
  unique_fd console(::open(console_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (console.get() < 0) throw_errno("open {}", console_file.c_str());
  // The child reports a failed exec through this pipe; a successful exec closes it (CLOEXEC).
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  unique_fd pipe_read(pipe_fds[0]);
  unique_fd pipe_write(pipe_fds[1]);

  const long open_max = ::sysconf(_SC_OPEN_MAX);
  const child_setup setup{
      binary_.c_str(), argv.data(),   envp.data(),      kind_ == lifetime::detached,       ::getpid(),
      dev_null.get(),  console.get(), pipe_write.get(), std::clamp(open_max, 256L, 65536L)};
  const pid_t child = ::fork();
  if (child < 0) throw_errno("fork");
  if (child == 0) run_child(setup);

  pipe_write.reset();
  int exec_errno = 0;
  ssize_t n = 0;
  do {
    n = ::read(pipe_read.get(), &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    wait_child(child, &status, 0);
    throw std::runtime_error(fmt::format("cannot execute '{}': {}", binary_, std::strerror(exec_errno)));
  }
  pid_ = child;
  paused_ = false;
}

node::start_result node::await_ready(clock_type::time_point deadline) {
  auto pause_between = 5ms;
  for (;;) {
    if (reap_if_exited()) {
      if (run_output().find("Address already in use") != std::string::npos) return start_result::address_in_use;
      throw std::runtime_error(fmt::format("redis-server on port {} exited during startup ({}); output:\n{}", port_,
                                           exit_status_, output_tail()));
    }
    const auto now = clock_type::now();
    if (now >= deadline) {
      send_kill();
      reap();
      throw std::runtime_error(fmt::format("redis-server on port {} did not answer PING within {} ms; output:\n{}",
                                           port_, options_->start_timeout.count(), output_tail()));
    }
    if (answers_ping(port_, *options_, pid_, std::min(deadline, now + 1s))) return start_result::ready;
    std::this_thread::sleep_for(pause_between);
    pause_between = std::min(pause_between * 2, std::chrono::milliseconds{50});
  }
}

void node::start() {
  spawn();
  wait_started();
}

void node::wait_started() {
  auto deadline = clock_type::now() + options_->start_timeout;
  for (int attempt = 1;; ++attempt) {
    if (await_ready(deadline) == start_result::ready) return;
    // Someone bound the port without SO_REUSEADDR before we reserved it.
    if (attempt == max_start_attempts && (requested_.port != 0 || requested_.tls_port != 0)) {
      throw port_unavailable(requested_.port != 0 ? requested_.port : requested_.tls_port, EADDRINUSE);
    }
    if (attempt == max_start_attempts) {
      throw std::runtime_error(fmt::format("redis-server could not find a free port after {} attempts; output:\n{}",
                                           attempt, output_tail()));
    }
    reserve_ports();
    spawn();
    deadline = clock_type::now() + options_->start_timeout;
  }
}

void node::send_kill() noexcept {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);  // harmless for SIGKILL, and leaves no stopped process if it is lost
    ::kill(pid_, SIGKILL);
  }
}

void node::reap() noexcept {
  if (pid_ > 0) {
    int status = 0;
    if (wait_child(pid_, &status, 0) == pid_) {
      try {
        exit_status_ = describe_status(status);
      } catch (...) {
      }
    }
  }
  pid_ = -1;
  paused_ = false;
}

bool node::reap_if_exited() const {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = wait_child(pid_, &status, WNOHANG);
  if (r == 0) return false;
  // r == pid_: it terminated; -1 (ECHILD): someone else reaped it (SIGCHLD ignored).
  exit_status_ = r == pid_ ? describe_status(status) : "reaped elsewhere";
  pid_ = -1;
  paused_ = false;
  return true;
}

std::string node::run_output() const {
  return read_from(dir_ / "console.log", console_offset_) + read_from(dir_ / "redis.log", log_offset_);
}

std::string node::output_tail() const {
  std::string out = run_output();
  if (out.size() > output_tail_chars) out = "..." + out.substr(out.size() - output_tail_chars);
  return out.empty() ? std::string("(no output)") : out;
}

pid_t node::pid() const {
  reap_if_exited();
  return pid_;
}

bool node::running() const {
  reap_if_exited();
  return pid_ > 0;
}

void node::stop() {
  if (!running()) return;
  ::kill(pid_, SIGCONT);  // a stopped process would not act on SIGTERM
  ::kill(pid_, SIGTERM);
  const auto deadline = clock_type::now() + 5s;
  while (clock_type::now() < deadline) {
    if (reap_if_exited()) return;
    std::this_thread::sleep_for(5ms);
  }
  send_kill();
  reap();
}

void node::kill() {
  send_kill();
  reap();
}

void node::pause() {
  if (!running()) throw std::logic_error(fmt::format("pause(): redis-server on port {} is not running", port_));
  if (paused_) return;
  ::kill(pid_, SIGSTOP);
  // Wait for the stop to take effect, so the caller's next request certainly goes unanswered.
  int status = 0;
  if (wait_child(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status)) {
    paused_ = true;
    return;
  }
  exit_status_ = describe_status(status);
  pid_ = -1;
  throw std::runtime_error(fmt::format("pause(): redis-server on port {} exited ({})", port_, exit_status_));
}

void node::resume() {
  if (!paused_ || pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  int status = 0;
  paused_ = false;
  if (wait_child(pid_, &status, WCONTINUED) == pid_ && !WIFCONTINUED(status)) {
    exit_status_ = describe_status(status);
    pid_ = -1;
  }
}

void node::restart() {
  stop();
  const auto deadline = clock_type::now() + options_->start_timeout;
  for (int attempt = 1;; ++attempt) {
    spawn();
    if (await_ready(deadline) == start_result::ready) return;
    // The port is held, so a clash means a non-cooperating process bound it explicitly; it may
    // be transient. Callers rely on the same port, so no moving here.
    if (attempt == max_start_attempts || clock_type::now() >= deadline) {
      throw std::runtime_error(fmt::format(
          "restart(): redis-server cannot listen on port {} (address in use); output:\n{}", port_, output_tail()));
    }
    std::this_thread::sleep_for(attempt * 100ms);
  }
}

void node::release() noexcept {
  pid_ = -1;
  paused_ = false;
  close_fd(port_holder_);
  close_fd(tls_port_holder_);
  close_fd(bus_port_holder_);
}

std::string node::command(std::initializer_list<std::string_view> args, std::chrono::milliseconds timeout) {
  return command(std::span<const std::string_view>(args.begin(), args.end()), timeout);
}

std::string node::command(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  const std::vector<std::string_view> views(args.begin(), args.end());
  return command(std::span<const std::string_view>(views), timeout);
}

std::string node::command(std::span<const std::string_view> args, std::chrono::milliseconds timeout) {
  if (args.empty()) throw std::invalid_argument("command(): no command");
  const auto deadline = clock_type::now() + timeout;
  blocking_connection conn(port_, deadline);
  if (const auto rejected = authenticate(conn, *options_, deadline); !rejected.empty()) {
    throw std::runtime_error(fmt::format("AUTH rejected by 127.0.0.1:{}: {}", port_, rejected));
  }
  return conn.call(args.front(), args.subspan(1), deadline).raw;
}

// ---- session ------------------------------------------------------------------------------------

class session::impl {
 public:
  impl(std::uint16_t port, const server_options& options, std::chrono::milliseconds timeout)
      : port_(port), timeout_(timeout), conn_(port, clock_type::now() + timeout) {
    if (const auto rejected = authenticate(conn_, options, clock_type::now() + timeout); !rejected.empty()) {
      throw std::runtime_error(fmt::format("AUTH rejected by 127.0.0.1:{}: {}", port_, rejected));
    }
  }
  std::string command(const std::vector<std::string>& args) {
    if (args.empty()) throw std::invalid_argument("session::command(): no command");
    const std::span rest(args.begin() + 1, args.end());
    return conn_.call(args.front(), rest, clock_type::now() + timeout_).raw;
  }
  std::string raw(std::string_view payload) { return conn_.call_raw(payload, clock_type::now() + timeout_).raw; }

 private:
  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
  blocking_connection conn_;
};

session::session(std::unique_ptr<impl> i) noexcept : impl_(std::move(i)) {}
session::~session() = default;
session::session(session&&) noexcept = default;
session& session::operator=(session&&) noexcept = default;
std::string session::command(const std::vector<std::string>& args) { return impl_->command(args); }
std::string session::raw(std::string_view payload) { return impl_->raw(payload); }

session node::open(std::chrono::milliseconds timeout) {
  return session{std::make_unique<session::impl>(port_, *options_, timeout)};
}

// ---- node_set -----------------------------------------------------------------------------------

node_set::node_set(std::size_t count, server_options options)
    : options_(std::make_shared<const server_options>(std::move(options))) {
  const auto base = temp_base();
  static std::once_flag swept;
  std::call_once(swept, [&] { remove_orphaned_dirs(base); });
  std::string pattern = (base / (std::string(set_dir_prefix) + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp {}", pattern);
  dir_ = pattern;
  try {
    std::ofstream(dir_ / owner_file) << ::getpid() << '\n';
    nodes_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      nodes_.push_back(std::make_unique<local::node>(options_, dir_ / fmt::format("node-{}", i + 1)));
    }
    // Fork them all first, then wait: the servers start in parallel.
    for (auto& n : nodes_) n->spawn();
    for (auto& n : nodes_) n->wait_started();
  } catch (...) {
    destroy();
    throw;
  }
}

node_set::~node_set() { destroy(); }

node_set::node_set(node_set&& other) noexcept
    : options_(std::move(other.options_)), dir_(std::exchange(other.dir_, {})), nodes_(std::move(other.nodes_)) {
  other.nodes_.clear();
}

node_set& node_set::operator=(node_set&& other) noexcept {
  if (this != &other) {
    destroy();
    options_ = std::move(other.options_);
    dir_ = std::exchange(other.dir_, {});
    nodes_ = std::move(other.nodes_);
    other.nodes_.clear();
  }
  return *this;
}

void node_set::destroy() noexcept {
  // Signal all first, so they die in parallel; the node destructors then reap.
  for (auto& n : nodes_) n->send_kill();
  nodes_.clear();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }
}

local::node& node_set::at(std::size_t i) {
  if (i >= nodes_.size()) {
    throw std::out_of_range(fmt::format("node_set::node({}): only {} nodes", i, nodes_.size()));
  }
  return *nodes_[i];
}

std::vector<std::uint16_t> node_set::ports() const {
  std::vector<std::uint16_t> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n->port());
  return out;
}

std::string node_set::masters() const {
  std::string out;
  for (const auto& n : nodes_) out += (out.empty() ? "" : ",") + n->address();
  return out;
}

}  // namespace redlock::local
