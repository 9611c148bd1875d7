#include <redlock_test/redis_cluster.hpp>

#include <fmt/format.h>

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
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

namespace redlock::test {
namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How many times a start is retried when the port turns out to be taken.
constexpr int max_start_attempts = 5;
// How much of the server's log goes into an exception message.
constexpr std::size_t log_tail_chars = 4000;

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

// ---- RESP, just enough for a blocking client -----------------------------------------------

std::string encode_command(std::span<const std::string_view> args) {
  std::string out = fmt::format("*{}\r\n", args.size());
  for (const auto arg : args) {
    out += fmt::format("${}\r\n", arg.size());
    out.append(arg);
    out += "\r\n";
  }
  return out;
}

constexpr std::size_t incomplete = std::string_view::npos;

/// The end of the RESP value starting at `pos`, or `incomplete` if more bytes are needed.
std::size_t reply_end(std::string_view buf, std::size_t pos, int depth = 0) {
  if (depth > 64) throw std::runtime_error("RESP reply nests too deeply");
  if (pos >= buf.size()) return incomplete;
  const auto eol = buf.find("\r\n", pos);
  if (eol == std::string_view::npos) return incomplete;
  const auto header = buf.substr(pos + 1, eol - pos - 1);
  const auto next = eol + 2;
  const auto length = [&] {
    long long n = 0;
    const auto [end, ec] = std::from_chars(header.data(), header.data() + header.size(), n);
    if (ec != std::errc{} || end != header.data() + header.size()) {
      throw std::runtime_error(fmt::format("malformed RESP length '{}'", header));
    }
    return n;
  };
  switch (buf[pos]) {
    case '+':
    case '-':
    case ':':
    case '_':
    case '#':
    case ',':
    case '(':
      return next;
    case '$':
    case '!':
    case '=': {
      const auto n = length();
      if (n < 0) return next;  // RESP2 null
      if (static_cast<unsigned long long>(n) + 2 > buf.size() - next) return incomplete;
      return next + static_cast<std::size_t>(n) + 2;
    }
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': {
      const auto n = length();
      if (n < 0) return next;
      const bool pairs = buf[pos] == '%' || buf[pos] == '|';
      auto at = next;
      for (long long i = 0; i < n * (pairs ? 2 : 1); ++i) {
        at = reply_end(buf, at, depth + 1);
        if (at == incomplete) return incomplete;
      }
      // An attribute describes the value that follows it: both form the reply.
      return buf[pos] == '|' ? reply_end(buf, at, depth + 1) : at;
    }
    default:
      throw std::runtime_error(
          fmt::format("not a RESP reply (first byte 0x{:02x})", static_cast<unsigned char>(buf[pos])));
  }
}

/// A loopback TCP connection with deadlines, for the readiness probe and `command()`.
/// Non-blocking underneath so that every wait is bounded by poll().
class blocking_connection {
 public:
  blocking_connection(std::uint16_t port, clock_type::time_point deadline) : port_(port) {
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

  void send_all(std::string_view data, clock_type::time_point deadline) {
    while (!data.empty()) {
      // MSG_NOSIGNAL: a closed peer must not raise SIGPIPE in the test process.
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

  /// Reads one complete reply and returns its bytes.
  std::string read_reply(clock_type::time_point deadline) {
    for (;;) {
      if (const auto end = reply_end(buffer_, 0); end != incomplete) {
        std::string reply = buffer_.substr(0, end);
        buffer_.erase(0, end);
        return reply;
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

 private:
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
  std::string buffer_;
};

/// The AUTH command for the options: the default user's password, else the ACL user (which
/// keeps working when extra arguments switch the default user off). Empty: no AUTH needed.
std::vector<std::string_view> auth_command(const redis_options& options) {
  if (!options.password.empty()) return {"AUTH", options.password};
  if (options.user) return {"AUTH", options.user->name, options.user->password};
  return {};
}

/// Authenticates `conn` as `auth_command()` says; returns the rejecting reply, or "" when done.
std::string authenticate(blocking_connection& conn, const redis_options& options, clock_type::time_point deadline) {
  const auto auth = auth_command(options);
  if (auth.empty()) return {};
  conn.send_all(encode_command(auth), deadline);
  auto reply = conn.read_reply(deadline);
  return reply == "+OK\r\n" ? std::string() : reply;
}

/// True when the server on `port` answers PING (after AUTH) and is the process `pid`: the pid
/// check rules out answering for a foreign server that got hold of the same port.
bool answers_ping(std::uint16_t port, const redis_options& options, pid_t pid, clock_type::time_point deadline) {
  try {
    blocking_connection conn(port, deadline);
    if (!authenticate(conn, options, deadline).empty()) return false;
    const std::string_view ping[] = {"PING"};
    conn.send_all(encode_command(ping), deadline);
    if (conn.read_reply(deadline) != "+PONG\r\n") return false;
    const std::string_view info[] = {"INFO", "server"};
    conn.send_all(encode_command(info), deadline);
    return conn.read_reply(deadline).find(fmt::format("\nprocess_id:{}\r\n", pid)) != std::string::npos;
  } catch (const std::exception&) {
    return false;  // not ready yet (refused, reset, loading, ...)
  }
}

// ---- processes and files ---------------------------------------------------------------------

std::string resolve_binary(const redis_options& options) {
  std::string name = options.server_binary;
  if (name.empty()) {
    const char* env = std::getenv("REDLOCK_REDIS_SERVER");
    name = (env != nullptr && *env != '\0') ? env : "redis-server";
  }
  if (name.find('/') != std::string::npos) return name;  // exec reports a bad path
  // Searched here rather than with execvp in the child, so a missing server is a clear error.
  const char* path_env = std::getenv("PATH");
  std::string_view path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = path.find(':');
    const auto dir = path.substr(0, colon);
    const auto candidate = (dir.empty() ? std::filesystem::path(".") : std::filesystem::path(dir)) / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  throw std::runtime_error(
      fmt::format("cannot find '{}' in PATH; set REDLOCK_REDIS_SERVER or redis_options::server_binary", name));
}

std::uintmax_t size_or_zero(const std::filesystem::path& file) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  return ec ? 0 : size;
}

std::string read_from(const std::filesystem::path& file, std::uintmax_t offset) {
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
  pid_t parent;
  int stdin_fd;
  int output_fd;
  int error_pipe;
  long max_fd;
};

[[noreturn]] void run_child(const child_setup& setup) {
  // Die with the test process even when it aborts or is SIGKILLed, and close the race where
  // it died before prctl().
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != setup.parent) ::_exit(126);
  // Own process group: a terminal's Ctrl-C reaches only the test (or its debugger), which then
  // ends the servers itself, instead of the servers quitting under a test that still runs.
  ::setpgid(0, 0);
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
  // Inherited descriptors (sockets, the proxy's epoll, other servers' ports) must not leak into
  // the server; marking them close-on-exec keeps the error pipe usable until exec.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (long fd = 3; fd < setup.max_fd; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  }
  ::execv(setup.binary, setup.argv);
  const int err = errno;
  [[maybe_unused]] const auto ignored = ::write(setup.error_pipe, &err, sizeof err);
  ::_exit(127);
}

constexpr std::string_view dir_prefix = "redlock-redis-";
constexpr const char* owner_file = "owner.pid";

std::filesystem::path temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  return (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
}

/// Removes the directories left by test processes that were killed before their destructors
/// ran (their servers died with them, through the parent-death signal).
void remove_orphaned_dirs(const std::filesystem::path& base) noexcept {
  try {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
      const auto& dir = it->path();
      if (!dir.filename().string().starts_with(dir_prefix)) continue;
      pid_t owner = 0;
      // No owner file yet: another process is creating it right now; leave it.
      if (!(std::ifstream(dir / owner_file) >> owner) || owner <= 0) continue;
      std::error_code ignored;
      if (::kill(owner, 0) == -1 && errno == ESRCH) std::filesystem::remove_all(dir, ignored);
    }
  } catch (...) {  // best effort: a failed sweep must not fail a test
  }
}

}  // namespace

// ---- redis_node -----------------------------------------------------------------------------

redis_node::redis_node(std::shared_ptr<const redis_options> options) : options_(std::move(options)) {
  const auto base = temp_base();
  static std::once_flag swept;
  std::call_once(swept, [&] { remove_orphaned_dirs(base); });
  std::string pattern = (base / (std::string(dir_prefix) + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp {}", pattern);
  dir_ = pattern;
  try {
    std::ofstream(dir_ / owner_file) << ::getpid() << '\n';
    reserve_new_port();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

redis_node::~redis_node() {
  send_kill();
  reap();
  if (port_holder_fd_ >= 0) ::close(port_holder_fd_);
  try {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  } catch (...) {  // bad_alloc while building paths: leave the directory behind
  }
}

void redis_node::reserve_new_port() {
  // A socket bound to port 0 gets a port no other socket is bound to. Keeping it bound (with
  // SO_REUSEADDR, never listening) means nobody else's bind(0) or connect() picks the port,
  // while redis-server, which also sets SO_REUSEADDR, can still bind and listen on it.
  unique_fd holder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (holder.get() < 0) throw_errno("socket");
  const int one = 1;
  if (::setsockopt(holder.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    throw_errno("setsockopt(SO_REUSEADDR)");
  }
  auto addr = loopback_address(0);
  if (::bind(holder.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    throw_errno("bind 127.0.0.1:0");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(holder.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw_errno("getsockname");
  }
  if (port_holder_fd_ >= 0) ::close(port_holder_fd_);
  port_holder_fd_ = holder.release();
  port_ = ntohs(addr.sin_port);
}

void redis_node::spawn() {
  const std::string binary = resolve_binary(*options_);
  const auto log_file = dir_ / "redis.log";
  const auto console_file = dir_ / "console.log";  // stdout/stderr: config errors land here

  // Everything on the command line (no config file): each start is self-contained.
  std::vector<std::string> args = {binary,
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   host_,
                                   "--save",
                                   "",  // no RDB snapshots: a restart starts empty
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   dir_.string(),
                                   "--logfile",
                                   log_file.string(),
                                   "--daemonize",
                                   "no",
                                   "--protected-mode",
                                   "no"};
  if (!options_->password.empty()) {
    args.insert(args.end(), {"--requirepass", options_->password});
  }
  if (options_->user) {
    const auto& user = *options_->user;
    args.insert(args.end(), {"--user", user.name, "on", user.password.empty() ? "nopass" : ">" + user.password, "~*",
                             "&*", "+@all"});
  }
  args.insert(args.end(), options_->extra_args.begin(), options_->extra_args.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // The log files are appended to across restarts; only this run's part matters for errors.
  log_offset_ = size_or_zero(log_file);
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
  const child_setup setup{binary.c_str(),
                          argv.data(),
                          ::getpid(),
                          dev_null.get(),
                          console.get(),
                          pipe_write.get(),
                          std::clamp(open_max, 256L, 65536L)};
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
    throw std::runtime_error(fmt::format("cannot execute '{}': {}", binary, std::strerror(exec_errno)));
  }
  pid_ = child;
  paused_ = false;
}

redis_node::start_result redis_node::await_ready(clock_type::time_point deadline) {
  auto pause_between = 5ms;
  for (;;) {
    if (reap_if_exited()) {
      if (run_output().find("Address already in use") != std::string::npos) return start_result::address_in_use;
      throw std::runtime_error(fmt::format("redis-server on port {} exited during startup ({}); output:\n{}", port_,
                                           exit_status_, log_tail()));
    }
    const auto now = clock_type::now();
    if (now >= deadline) {
      send_kill();
      reap();
      throw std::runtime_error(fmt::format("redis-server on port {} did not answer PING within {} ms; output:\n{}",
                                           port_, options_->start_timeout.count(), log_tail()));
    }
    if (answers_ping(port_, *options_, pid_, std::min(deadline, now + 1s))) {
      return start_result::ready;
    }
    std::this_thread::sleep_for(pause_between);
    pause_between = std::min(pause_between * 2, std::chrono::milliseconds{50});
  }
}

void redis_node::send_kill() noexcept {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);  // harmless for SIGKILL, and leaves no stopped process if it is lost
    ::kill(pid_, SIGKILL);
  }
}

void redis_node::reap() noexcept {
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

bool redis_node::reap_if_exited() const {
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

std::string redis_node::run_output() const {
  return read_from(dir_ / "console.log", console_offset_) + read_from(dir_ / "redis.log", log_offset_);
}

std::string redis_node::log_tail() const {
  std::string out = run_output();
  if (out.size() > log_tail_chars) out = "..." + out.substr(out.size() - log_tail_chars);
  return out.empty() ? std::string("(no output)") : out;
}

pid_t redis_node::pid() const {
  reap_if_exited();
  return pid_;
}

bool redis_node::running() const {
  reap_if_exited();
  return pid_ > 0;
}

void redis_node::stop() {
  if (!running()) return;
  if (paused_) ::kill(pid_, SIGCONT);  // a stopped process would not act on SIGTERM
  ::kill(pid_, SIGTERM);
  const auto deadline = clock_type::now() + 5s;
  while (clock_type::now() < deadline) {
    if (reap_if_exited()) return;
    std::this_thread::sleep_for(5ms);
  }
  send_kill();
  reap();
}

void redis_node::kill() {
  send_kill();
  reap();
}

void redis_node::pause() {
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

void redis_node::resume() {
  if (!paused_ || pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  int status = 0;
  paused_ = false;
  if (wait_child(pid_, &status, WCONTINUED) == pid_ && !WIFCONTINUED(status)) {
    exit_status_ = describe_status(status);
    pid_ = -1;
  }
}

void redis_node::restart() {
  stop();
  const auto deadline = clock_type::now() + options_->start_timeout;
  for (int attempt = 1;; ++attempt) {
    spawn();
    if (await_ready(deadline) == start_result::ready) return;
    // The port is held by port_holder_fd_, so a clash means a non-cooperating process bound it
    // explicitly; it may be transient.
    if (attempt == max_start_attempts || clock_type::now() >= deadline) {
      throw std::runtime_error(fmt::format(
          "restart(): redis-server cannot listen on port {} (address in use); output:\n{}", port_, log_tail()));
    }
    std::this_thread::sleep_for(attempt * 100ms);
  }
}

// Waits for the server spawned by the cluster; when its port was taken meanwhile, moves to a
// fresh port and tries again.
void redis_node::await_started() {
  auto deadline = clock_type::now() + options_->start_timeout;
  for (int attempt = 1;; ++attempt) {
    if (await_ready(deadline) == start_result::ready) return;
    if (attempt == max_start_attempts) {
      throw std::runtime_error(
          fmt::format("redis-server could not find a free port after {} attempts; output:\n{}", attempt, log_tail()));
    }
    reserve_new_port();
    spawn();
    deadline = clock_type::now() + options_->start_timeout;
  }
}

std::string redis_node::command(std::initializer_list<std::string_view> args, std::chrono::milliseconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  blocking_connection conn(port_, deadline);
  if (const auto rejected = authenticate(conn, *options_, deadline); !rejected.empty()) {
    throw std::runtime_error(fmt::format("AUTH rejected by 127.0.0.1:{}: {}", port_, rejected));
  }
  conn.send_all(encode_command(std::span(args.begin(), args.size())), deadline);
  return conn.read_reply(deadline);
}

// ---- redis_cluster ----------------------------------------------------------------------------

redis_cluster::redis_cluster(std::size_t count, redis_options options)
    : options_(std::make_shared<const redis_options>(std::move(options))) {
  nodes_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) nodes_.push_back(std::unique_ptr<redis_node>(new redis_node(options_)));
  // Fork them all first, then wait: the servers start in parallel. On an exception the
  // already started nodes are killed by their destructors.
  for (auto& n : nodes_) n->spawn();
  for (auto& n : nodes_) n->await_started();
}

redis_cluster::~redis_cluster() {
  // Signal all first, so they die in parallel; the node destructors then reap and clean up.
  for (auto& n : nodes_) n->send_kill();
  nodes_.clear();
}

redis_node& redis_cluster::node(std::size_t i) {
  if (i >= nodes_.size()) {
    throw std::out_of_range(fmt::format("redis_cluster::node({}): only {} nodes", i, nodes_.size()));
  }
  return *nodes_[i];
}

std::vector<std::uint16_t> redis_cluster::ports() const {
  std::vector<std::uint16_t> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n->port());
  return out;
}

}  // namespace redlock::test
