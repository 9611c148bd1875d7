#include "local_nodes.hpp"

#include <fmt/format.h>

#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
#include <netinet/in.h>
#include <poll.h>
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

constexpr int max_port_attempts = 5;
constexpr const char* state_file = "nodes";
constexpr const char* lock_file = ".lock";

[[noreturn]] void throw_errno(const std::string& what) {
  const int err = errno;
  throw std::system_error(err, std::generic_category(), what);
}

/// Owns a file descriptor.
class fd_guard {
 public:
  fd_guard() = default;
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  fd_guard(fd_guard&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_guard& operator=(fd_guard&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~fd_guard() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int ms_left(clock_type::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

/// A socket bound to a free loopback port with SO_REUSEADDR and never listening: nobody else's
/// bind(0) or connect() takes the port while it lives, yet redis-server (which sets SO_REUSEADDR
/// too) can listen on it.
fd_guard reserve_port(std::uint16_t& port) {
  fd_guard s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throw_errno("socket");
  const int one = 1;
  if (::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) throw_errno("setsockopt");
  auto a = loopback(0);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) throw_errno("bind 127.0.0.1:0");
  socklen_t len = sizeof a;
  if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) throw_errno("getsockname");
  port = ntohs(a.sin_port);
  return s;
}

/// Waits until `fd` is ready for `events` or the deadline passes.
bool wait_fd(int fd, short events, clock_type::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

/// The process id the server on `port` reports in `INFO server`, or -1 when it does not answer
/// (yet) within the deadline. Just enough RESP for one bulk-string reply.
pid_t reported_pid(std::uint16_t port, clock_type::time_point deadline) {
  fd_guard s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) return -1;
  const auto a = loopback(port);
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    if (errno != EINPROGRESS || !wait_fd(s.get(), POLLOUT, deadline)) return -1;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return -1;
  }
  std::string_view request = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
  while (!request.empty()) {
    const auto n = ::send(s.get(), request.data(), request.size(), MSG_NOSIGNAL);
    if (n > 0) {
      request.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(s.get(), POLLOUT, deadline)) return -1;
    } else {
      return -1;
    }
  }
  std::string buf;
  for (;;) {
    if (!buf.empty() && buf[0] != '$') return -1;  // an error (LOADING, NOAUTH): not ready for us
    if (const auto eol = buf.find("\r\n"); eol != std::string::npos) {
      std::size_t len = 0;
      const auto [p, ec] = std::from_chars(buf.data() + 1, buf.data() + eol, len);
      if (ec != std::errc{} || p != buf.data() + eol) return -1;
      if (buf.size() >= eol + 2 + len + 2) {
        const auto body = std::string_view{buf}.substr(eol + 2, len);
        const auto at = body.find("process_id:");
        if (at == std::string_view::npos) return -1;
        pid_t pid = -1;
        const auto digits = body.substr(at + 11);
        std::from_chars(digits.data(), digits.data() + digits.size(), pid);
        return pid;
      }
    }
    char chunk[8192];
    const auto n = ::recv(s.get(), chunk, sizeof chunk, 0);
    if (n > 0) {
      buf.append(chunk, static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(s.get(), POLLIN, deadline)) return -1;
    } else {
      return -1;
    }
  }
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string tail(std::string s, std::size_t n = 3000) {
  if (s.size() > n) s = "..." + s.substr(s.size() - n);
  return s.empty() ? std::string{"(no output)"} : s;
}

/// What the server printed (startup errors go to stderr before the log file is opened).
std::string server_output(const fs::path& dir) {
  return tail(read_file(dir / "console.log") + read_file(dir / "redis.log"));
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

pid_t wait_pid(pid_t pid, int* status, int flags) {
  for (;;) {
    const pid_t r = ::waitpid(pid, status, flags);
    if (r >= 0 || errno != EINTR) return r;
  }
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

/// Starts `binary` with `args` in `dir`. Detached: its own session, no tie to us. Owned: its own
/// process group (a terminal's Ctrl-C reaches only us, and we stop it) and killed with us.
/// stdin and stdout are /dev/null, stderr goes to dir/console.log.
pid_t spawn_server(const std::string& binary, const std::vector<std::string>& args, const fs::path& dir,
                   bool detached) {
  std::vector<std::string> all{binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string dir_text = dir.string();
  const auto console_path = dir / "console.log";

  fd_guard null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (null_fd.get() < 0) throw_errno("open /dev/null");
  fd_guard console(::open(console_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (console.get() < 0) throw_errno("open " + console_path.string());
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  fd_guard report_read(pipe_fds[0]);
  fd_guard report_write(pipe_fds[1]);
  const pid_t parent = ::getpid();

  const pid_t child = ::fork();
  if (child < 0) throw_errno("fork");
  if (child == 0) {
    // Only async-signal-safe calls from here on: everything was prepared before fork().
    if (detached) {
      ::setsid();
    } else {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
      ::setpgid(0, 0);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::chdir(dir_text.c_str()) != 0) {
      const int err = errno;
      [[maybe_unused]] auto ignored = ::write(report_write.get(), &err, sizeof err);
      ::_exit(127);
    }
    ::dup2(null_fd.get(), STDIN_FILENO);
    ::dup2(null_fd.get(), STDOUT_FILENO);
    ::dup2(console.get(), STDERR_FILENO);
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    ::execv(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] auto ignored = ::write(report_write.get(), &err, sizeof err);
    ::_exit(127);
  }
  report_write.reset();
  int err = 0;
  ssize_t n = 0;
  do {
    n = ::read(report_read.get(), &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof err)) {
    int status = 0;
    wait_pid(child, &status, 0);
    throw std::runtime_error(fmt::format("cannot execute '{}': {}", binary, std::strerror(err)));
  }
  return child;
}

std::vector<std::string> server_args(std::uint16_t port, const fs::path& dir, const server_options& o) {
  std::vector<std::string> args{"--port",       std::to_string(port),
                                "--bind",       "127.0.0.1",
                                "--save",       "",
                                "--appendonly", "no",
                                "--dir",        dir.string(),
                                "--logfile",    (dir / "redis.log").string(),
                                "--daemonize",  "no"};
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return args;
}

enum class start_outcome { ready, port_taken };

/// Waits until the server `pid` answers on `port`. Returns `port_taken` when it exited because
/// the port was in use; throws when it exited otherwise or did not answer in time (then it is
/// killed and reaped).
start_outcome await_server(pid_t pid, std::uint16_t port, const fs::path& dir, clock_type::time_point deadline,
                           std::chrono::milliseconds timeout) {
  auto pause = 5ms;
  for (;;) {
    int status = 0;
    if (wait_pid(pid, &status, WNOHANG) == pid) {
      const auto out = server_output(dir);
      if (out.find("Address already in use") != std::string::npos) return start_outcome::port_taken;
      throw std::runtime_error(fmt::format("redis-server on port {} exited during startup ({}); its output:\n{}", port,
                                           describe_wait_status(status), out));
    }
    if (clock_type::now() >= deadline) {
      ::kill(pid, SIGKILL);
      wait_pid(pid, &status, 0);
      throw std::runtime_error(fmt::format("redis-server on port {} did not answer within {} ms; its output:\n{}", port,
                                           timeout.count(), server_output(dir)));
    }
    if (reported_pid(port, std::min(deadline, clock_type::now() + 1s)) == pid) return start_outcome::ready;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, 50ms);
  }
}

void kill_and_reap(pid_t pid) noexcept {
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGKILL);
  int status = 0;
  wait_pid(pid, &status, 0);
}

fs::path make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (fs::path((tmp != nullptr && *tmp != '\0') ? tmp : "/tmp") / "redlock-local-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp " + pattern);
  return pattern;
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

// ---- owned nodes --------------------------------------------------------------------------------

node::node(std::shared_ptr<const server_options> options, fs::path dir)
    : options_(std::move(options)), binary_(find_server_binary(*options_)), dir_(std::move(dir)) {
  fs::create_directories(dir_);
  port_holder_ = reserve_port(port_).release();
}

node::~node() {
  kill_and_reap(pid_);
  if (port_holder_ >= 0) ::close(port_holder_);
}

std::string node::address() const { return fmt::format("{}:{}", host_, port_); }

pid_t node::pid() const {
  if (pid_ > 0) {
    int status = 0;
    if (wait_pid(pid_, &status, WNOHANG) != 0) pid_ = -1;  // exited by itself (or reaped elsewhere)
  }
  return pid_;
}

bool node::running() const { return pid() > 0; }

void node::spawn() { pid_ = spawn_server(binary_, server_args(port_, dir_, *options_), dir_, false); }

void node::await_ready() {
  const auto deadline = clock_type::now() + options_->start_timeout;
  for (int attempt = 1;; ++attempt) {
    if (await_server(pid_, port_, dir_, deadline, options_->start_timeout) == start_outcome::ready) return;
    pid_ = -1;
    if (attempt == max_port_attempts) {
      throw std::runtime_error(fmt::format("redis-server cannot listen on port {}: address in use", port_));
    }
    // Someone bound the port without SO_REUSEADDR before us: only possible on the first start.
    fd_guard old(port_holder_);
    port_holder_ = reserve_port(port_).release();
    spawn();
  }
}

void node::kill() {
  kill_and_reap(pid_);
  pid_ = -1;
}

void node::stop() {
  if (!running()) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  const auto deadline = clock_type::now() + 5s;
  while (clock_type::now() < deadline) {
    int status = 0;
    if (wait_pid(pid_, &status, WNOHANG) != 0) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(5ms);
  }
  kill();
}

void node::restart() {
  stop();
  spawn();
  const auto deadline = clock_type::now() + options_->start_timeout;
  // The port is ours (held), so "in use" can only be a foreign process binding it explicitly:
  // retry a few times on the same port, which the callers rely on.
  for (int attempt = 1;; ++attempt) {
    if (await_server(pid_, port_, dir_, deadline, options_->start_timeout) == start_outcome::ready) return;
    pid_ = -1;
    if (attempt == max_port_attempts) {
      throw std::runtime_error(fmt::format("restart: redis-server cannot listen on port {}: address in use", port_));
    }
    std::this_thread::sleep_for(attempt * 100ms);
    spawn();
  }
}

node_set::node_set(std::size_t count, server_options options) : dir_(make_temp_dir()) {
  try {
    auto shared = std::make_shared<const server_options>(std::move(options));
    for (std::size_t i = 0; i < count; ++i) {
      nodes_.push_back(std::unique_ptr<node>(new node(shared, dir_ / fmt::format("node-{}", i + 1))));
    }
    for (auto& n : nodes_) n->spawn();  // in parallel: fork all, then wait
    for (auto& n : nodes_) n->await_ready();
  } catch (...) {
    nodes_.clear();
    std::error_code ec;
    fs::remove_all(dir_, ec);
    throw;
  }
}

node_set::~node_set() {
  for (auto& n : nodes_) {
    if (n->pid_ > 0) {
      ::kill(n->pid_, SIGCONT);
      ::kill(n->pid_, SIGKILL);  // all first, so they die in parallel
    }
  }
  nodes_.clear();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string node_set::masters() const {
  std::string out;
  for (const auto& n : nodes_) out += (out.empty() ? "" : ",") + n->address();
  return out;
}

// ---- detached sets ------------------------------------------------------------------------------

std::string recorded_node::address() const { return fmt::format("{}:{}", host, port); }

std::string recorded_set::masters() const {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n.address();
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
    if (it->path().filename().string().starts_with("node-")) {
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

recorded_set start_detached(const fs::path& dir, std::size_t count, const server_options& options) {
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

  const std::string binary = find_server_binary(options);
  recorded_set set;
  set.dir = dir;
  std::vector<fd_guard> holders(count);
  std::vector<fs::path> dirs(count);
  set.nodes.resize(count);
  const auto cleanup = [&] {
    for (auto& n : set.nodes) kill_and_reap(n.pid);
    remove_state(dir);
  };
  try {
    const auto start = [&](std::size_t i) {
      auto& n = set.nodes[i];
      holders[i] = reserve_port(n.port);
      n.pid = spawn_server(binary, server_args(n.port, dirs[i], options), dirs[i], true);
      const auto st = read_proc_stat(n.pid);
      n.start_time = st ? st->start_time : 0;
    };
    for (std::size_t i = 0; i < count; ++i) {
      dirs[i] = dir / fmt::format("node-{}", i + 1);
      fs::create_directories(dirs[i]);
      start(i);
    }
    write_state(dir, set);  // recorded before waiting: an interrupted start can still be stopped
    for (std::size_t i = 0; i < count; ++i) {
      const auto deadline = clock_type::now() + options.start_timeout;
      for (int attempt = 1;; ++attempt) {
        auto& n = set.nodes[i];
        if (await_server(n.pid, n.port, dirs[i], deadline, options.start_timeout) == start_outcome::ready) break;
        n.pid = -1;
        if (attempt == max_port_attempts) {
          throw std::runtime_error(fmt::format("redis-server could not find a free port after {} attempts", attempt));
        }
        start(i);
        write_state(dir, set);
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
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
