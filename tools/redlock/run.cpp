// SPDX-License-Identifier: BSL-1.0
// `redlock run`: acquire the lock, run the command with the lock kept alive, forward signals to
// it, stop it if the lock is lost, release the lock when it exits, and exit with its status.

#include "commands.hpp"
#include "output.hpp"
#include <redlock/client.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/core/validity.hpp>
#include <redlock/format.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <signal.h>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace redlock::cli {

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = redlock::clock;
using std::chrono::milliseconds;

// ---- before fork: the command, its environment, the descriptors it inherits --------------------

/// Finds `name` in PATH like a shell: the first executable regular file; a match that is not
/// executable is returned when nothing better exists (exec then fails with EACCES: status 126).
std::optional<std::string> find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  if (name.empty()) return std::nullopt;
  const char* env = std::getenv("PATH");
  std::string_view path = env != nullptr ? env : "/usr/local/bin:/usr/bin:/bin";
  std::optional<std::string> not_executable;
  for (;;) {
    const auto colon = path.find(':');
    const auto dir = path.substr(0, colon);
    const auto candidate = ((dir.empty() ? std::filesystem::path(".") : std::filesystem::path(dir)) / name).string();
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      if (!not_executable) not_executable = candidate;
    }
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return not_executable;
}

/// The descriptors above 2 open when the tool started: the caller's, passed on to the command
/// (as flock(1) does). Everything the tool opens itself is kept from the command.
std::vector<int> inherited_descriptors() {
  std::vector<int> fds;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    int fd = -1;
    const auto name = it->path().filename().string();
    const auto [p, e] = std::from_chars(name.data(), name.data() + name.size(), fd);
    if (e == std::errc{} && fd > 2) fds.push_back(fd);
  }
  // The listing's own descriptor was among them; it is closed now.
  std::erase_if(fds, [](int fd) { return ::fcntl(fd, F_GETFD) == -1; });
  std::sort(fds.begin(), fds.end());
  return fds;
}

/// The signals the tool handles, with their dispositions when it started (restored in the child).
struct saved_signal {
  int sig;
  struct sigaction original;
};

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig)) return std::string{"SIG"} + abbrev;
  return fmt::format("signal {}", sig);
}

/// Everything the child needs after fork(), prepared before it: in a process with threads (Asio's
/// resolver) only async-signal-safe calls are allowed in the child.
struct child_setup {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  bool own_group = true;
  pid_t parent = -1;
  int report_fd = -1;
  sigset_t mask{};
  const saved_signal* signals = nullptr;
  std::size_t signal_count = 0;
  const int* keep_fds = nullptr;  // sorted
  std::size_t keep_count = 0;
};

[[noreturn]] void child_main(const child_setup& s) {
  if (s.own_group) ::setpgid(0, 0);
  // If the tool dies (even by SIGKILL), the command must not run on without the lock.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != s.parent) ::_exit(exit_software);
  for (std::size_t i = 0; i < s.signal_count; ++i) ::sigaction(s.signals[i].sig, &s.signals[i].original, nullptr);
  ::sigprocmask(SIG_SETMASK, &s.mask, nullptr);
  // Close-on-exec for every descriptor above 2 except the inherited ones.
  unsigned from = 3;
  for (std::size_t i = 0; i <= s.keep_count; ++i) {
    const unsigned to = i < s.keep_count ? static_cast<unsigned>(s.keep_fds[i]) : ~0U;
    if (to > from) {
      if (::close_range(from, to - 1, CLOSE_RANGE_CLOEXEC) != 0) {
        for (unsigned fd = from; fd < to && fd < 65536; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
      }
    }
    if (i < s.keep_count) from = static_cast<unsigned>(s.keep_fds[i]) + 1;
  }
  ::execve(s.path, s.argv, s.envp);
  const int err = errno;
  [[maybe_unused]] const auto n = ::write(s.report_fd, &err, sizeof err);
  ::_exit(err == ENOENT ? exit_not_found : exit_cannot_execute);
}

// ---- the run --------------------------------------------------------------------------------------

/// The loss reason's identifier for the JSON "reason" field ("not_owner", "quorum_unavailable",
/// "validity_expired", "extension_limit"); "other" for a code from another category.
std::string_view loss_reason_name(const error_code& reason) {
  return reason.category() == error_category() ? to_string(static_cast<error>(reason.value())) : "other";
}

/// The resources as messages name them: "'a'", or "'a', 'b'".
std::string subject_of(const std::vector<std::string>& resources) {
  std::string out;
  for (const auto& r : resources) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", r);
  return out;
}

/// A new owner id for --reentrant: 20 bytes of the OS's random source, in hex.
std::string new_owner() {
  std::random_device random;
  std::string out;
  for (int i = 0; i < 5; ++i) out += fmt::format("{:08x}", static_cast<std::uint32_t>(random()));
  return out;
}

class runner {
 public:
  runner(const run_options& o, const resolved_config& cfg, std::string owner_note)
      : o_(o),
        cfg_(cfg),
        owner_note_(std::move(owner_note)),
        key_(key_of(cfg, o.resource)),
        subject_(subject_of(o.resources)),
        quorum_(o.kind == lock_kind::semaphore ? core::semaphore_quorum(cfg.client.masters.size(), o.permits)
                                               : majority_of(cfg.client.masters.size())),
        json_fd_(o.json_fd >= 0 ? o.json_fd : STDERR_FILENO),
        inherited_(inherited_descriptors()),
        term_signals_(ioc_),
        child_signal_(ioc_, SIGCHLD),
        grace_timer_(ioc_) {
    std::erase(inherited_, json_fd_);  // the JSON stream is the tool's, not the command's
    if (o.json_fd >= 0) ::fcntl(json_fd_, F_SETFD, FD_CLOEXEC);
  }

  int run() {
    setup_signals();
    locks_.emplace(ioc_.get_executor(), cfg_.client);
    for (const auto& n : cfg_.notes) verbose(n);
    if (o_.kind == lock_kind::semaphore) {
      const auto n = cfg_.client.masters.size();
      verbose(fmt::format("a semaphore of {} permit{} needs {} of the {} masters (semaphore quorum){}", o_.permits,
                          o_.permits == 1 ? "" : "s", quorum_, n, quorum_ == n ? ": every master must answer" : ""));
    }
    if (!owner_note_.empty()) verbose(owner_note_);
    started_ = clock_type::now();
    await_ready();
    ioc_.run();
    return exit_;
  }

 private:
  enum class phase { acquiring, running, releasing, done };

  // ---- output ----

  bool json() const noexcept { return o_.common.json; }
  void say(std::string_view text) const {
    if (!json()) complain(text);
  }
  void verbose(std::string_view text) const {
    if (o_.common.verbose && !json()) complain(text);
  }
  double elapsed_ms() const { return std::chrono::duration<double, std::milli>(clock_type::now() - started_).count(); }
  /// Starts an event object with its name and time; the caller adds fields and calls `emit`.
  json_writer event(std::string_view name) const {
    json_writer j;
    j.begin_object().field("event", name).field("elapsed_ms", elapsed_ms()).field("resource", o_.resource);
    return j;
  }
  void emit(json_writer& j) const {
    if (!json()) return;
    j.end_object();
    std::string line = j.str() + "\n";
    std::string_view rest = line;
    while (!rest.empty()) {
      const auto n = ::write(json_fd_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere to write: the run goes on
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  /// Each master's answer, for the JSON: `step` names the statuses (docs/cli.md, "JSON output").
  void add_masters(json_writer& j, const std::vector<master_result>& nodes, step_kind step = step_kind::acquire) const {
    j.key("masters").begin_array();
    for (std::size_t i = 0; i < nodes.size() && i < cfg_.client.masters.size(); ++i) {
      const auto& r = nodes[i];
      j.begin_object()
          .field("address", redlock::address_of(cfg_.client.masters[i]))
          .field("status", status_name(r.status, step))
          .field("latency_ms", to_ms(r.latency));
      if (is_failure(r.status)) j.field("error", master_reason(r));
      j.end_object();
    }
    j.end_array();
  }

  /// Each master's answer, one line each, numbered as `master_label` does.
  void verbose_masters(const std::vector<master_result>& nodes, step_kind step = step_kind::acquire) const {
    if (!o_.common.verbose || json()) return;
    for (std::size_t i = 0; i < nodes.size() && i < cfg_.client.masters.size(); ++i) {
      const auto& r = nodes[i];
      std::string line = fmt::format("  {:<32} ", master_label(i, redlock::address_of(cfg_.client.masters[i])));
      if (r.status == master_status::pending) {
        line += "still pending (the outcome was decided before it answered)";
      } else {
        line += fmt::format("{:<13} {:8.3f} ms", status_words(r.status, step), to_ms(r.latency));
      }
      if (is_failure(r.status)) line += "  " + master_reason(r);
      complain(line);
    }
  }

  // ---- signals ----

  void setup_signals() {
    // Ignored at start (nohup, a shell's background job): stay ignored, for the tool and the
    // command alike. Otherwise caught: forwarded to the command, or they end a wait for the lock.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      struct sigaction old {};
      ::sigaction(sig, nullptr, &old);
      saved_.push_back({sig, old});
      if (old.sa_handler != SIG_IGN) term_signals_.add(sig);
    }
    // The tool ignores these, the command gets them back as they were: a broken stderr must not
    // kill the tool (the command would run on unguarded), and in its own process group the
    // command is not the terminal's, so job-control stops would stop the tool alone, and with it
    // the keep-alive.
    std::vector<int> ignored{SIGPIPE};
    if (!o_.foreground) ignored.insert(ignored.end(), {SIGTSTP, SIGTTIN, SIGTTOU});
    for (int sig : ignored) {
      struct sigaction ign {};
      ign.sa_handler = SIG_IGN;
      sigemptyset(&ign.sa_mask);
      struct sigaction old {};
      ::sigaction(sig, &ign, &old);
      saved_.push_back({sig, old});
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    saved_.push_back({SIGCHLD, dfl});
    wait_signal();
  }

  void wait_signal() {
    term_signals_.async_wait([this](error_code ec, int sig) {
      if (ec || phase_ == phase::done) return;
      on_signal(sig);
      wait_signal();
    });
  }

  void on_signal(int sig) {
    switch (phase_) {
      case phase::acquiring:
        if (interrupted_by_ == 0) interrupted_by_ = sig;
        cancel_acquire_.emit(asio::cancellation_type::terminal);
        break;
      case phase::running: {
        // With --foreground the command shares the terminal: SIGINT, SIGQUIT and SIGHUP from it
        // reach the command directly, so only SIGTERM (never sent by a terminal) is passed on.
        const bool forward = !o_.foreground || sig == SIGTERM;
        if (forward) send(sig);
        verbose(fmt::format("{} {}", signal_name(sig),
                            forward ? "forwarded to the command" : "received (the command gets it from the terminal)"));
        auto j = event("signal");
        j.field("signal", signal_name(sig)).field("forwarded", forward);
        emit(j);
        break;
      }
      case phase::releasing:
      case phase::done:
        break;  // the release is bounded; let it finish
    }
  }

  /// Sends `sig` to the command: to its process group (its children too) unless --foreground.
  void send(int sig) const {
    if (child_ <= 0 || child_done_) return;
    if (!o_.foreground) {
      if (::kill(-child_, sig) == 0) return;
    }
    ::kill(child_, sig);
  }

  // ---- acquisition ----

  /// Waits until a majority of masters is connected and handshaken (client::async_wait_ready,
  /// woken by the connections), at most the longest connect timeout: a single attempt is only
  /// fair on connected masters, else the connect and the handshake eat the request deadline and
  /// a slow start reads as "masters unavailable". Whatever the outcome the acquisition follows:
  /// it fails at once, with each master's cause, when no quorum can come up.
  void await_ready() {
    auto connect_timeout = milliseconds{0};
    for (const auto& m : cfg_.client.masters) connect_timeout = std::max(connect_timeout, m.connect_timeout);
    auto handler = asio::bind_cancellation_slot(cancel_acquire_.slot(), [this](error_code ec, quorum_report rep) {
      if (interrupted_by_ != 0) {
        interrupted();
        return;
      }
      if (ec) {
        verbose(fmt::format("masters not ready after {:.1f} ms: {}", elapsed_ms(), readiness_text(rep)));
      } else {
        verbose(fmt::format("{} of {} masters connected in {:.1f} ms", rep.masters - rep.failing.size(), rep.masters,
                            elapsed_ms()));
      }
      start_acquire();
    });
    locks_->async_wait_ready(connect_timeout, std::move(handler));
  }

  void start_acquire() {
    auto handler = asio::bind_cancellation_slot(cancel_acquire_.slot(),
                                                [this](error_code ec, redlock::lock l) { acquired(ec, std::move(l)); });
    const bool wait = o_.wait.count() > 0;
    if (o_.resources.size() > 1) {
      if (wait) {
        locks_->async_lock_all(o_.resources, o_.ttl, std::move(handler));
      } else {
        locks_->async_try_lock_all(o_.resources, o_.ttl, std::move(handler));
      }
    } else if (plain()) {
      // The plain lock keeps the library's plain path (SET NX PX, interoperable).
      if (wait) {
        locks_->async_lock(o_.resource, o_.ttl, std::move(handler));
      } else {
        locks_->async_try_lock(o_.resource, o_.ttl, std::move(handler));
      }
    } else if (wait) {
      locks_->async_lock(o_.resource, o_.ttl, kind_options(), std::move(handler));
    } else {
      locks_->async_try_lock(o_.resource, o_.ttl, kind_options(), std::move(handler));
    }
  }

  /// A plain exclusive lock of one resource, without fence or owner.
  bool plain() const noexcept {
    return o_.resources.size() <= 1 && o_.kind == lock_kind::exclusive && !o_.fence && !o_.owner;
  }

  lock_options kind_options() const {
    lock_options lo;
    lo.kind = o_.kind;
    lo.permits = o_.kind == lock_kind::semaphore ? o_.permits : 1;
    lo.fence = o_.fence;
    lo.owner = o_.owner.value_or(std::string{});
    return lo;
  }

  /// What the lock is, for messages: "", " as a reader", " as one of its 3 permits", ...
  std::string kind_text() const {
    switch (o_.kind) {
      case lock_kind::read:
        return " as a reader";
      case lock_kind::write:
        return " as a writer";
      case lock_kind::semaphore:
        return fmt::format(" as one of its {} permit{}", o_.permits, o_.permits == 1 ? "" : "s");
      case lock_kind::exclusive:
        break;
    }
    return o_.owner ? " as a reentrant owner" : "";
  }

  /// Why the lock was refused, by kind, from what the masters answered (`c` counts them).
  std::string held_text(const std::vector<master_result>& nodes, const answer_counts& c) const {
    if (o_.resources.size() > 1) {
      // A master that refuses several resources answers the first it found held (from 1).
      std::vector<std::string> held;
      for (std::size_t i = 0; i < o_.resources.size(); ++i) {
        const auto found = std::any_of(nodes.begin(), nodes.end(), [i](const master_result& r) {
          return r.status == master_status::taken && r.value == static_cast<std::int64_t>(i + 1);
        });
        if (found) held.push_back(o_.resources[i]);
      }
      if (held.empty()) return fmt::format("cannot lock {}: one of them is held by someone else", subject_);
      return fmt::format("cannot lock {}: {} {} held by someone else", subject_, subject_of(held),
                         held.size() == 1 ? "is" : "are");
    }
    const bool only_queued = c.queued > 0 && c.taken == 0;
    switch (o_.kind) {
      case lock_kind::read:
        return fmt::format("{} is held by a writer, or a writer waits for it", subject_);
      case lock_kind::semaphore:
        return fmt::format("all {} permit{} of {} are taken", o_.permits, o_.permits == 1 ? "" : "s", subject_);
      case lock_kind::write:
        // Readers hold it: this writer claimed its place behind them (dropped again on giving up).
        if (only_queued) return fmt::format("{} is held by readers", subject_);
        break;
      case lock_kind::exclusive:
        if (only_queued) return fmt::format("{} is free, but earlier waiters come first", subject_);
        break;
    }
    return fmt::format("{} is held by someone else", subject_);
  }

  /// What a `queued` answer means for this kind.
  std::string_view queued_as() const noexcept {
    return o_.kind == lock_kind::write ? "queued behind readers" : "queued behind earlier waiters";
  }

  /// The resources as a JSON list, on events about several.
  void add_resources(json_writer& j) const {
    if (o_.resources.size() <= 1) return;
    j.key("resources").begin_array();
    for (const auto& r : o_.resources) j.value(r);
    j.end_array();
  }

  void interrupted() {
    say(fmt::format("interrupted by {} while waiting for {}", signal_name(interrupted_by_), subject_));
    auto j = event("not_acquired");
    j.field("key", key_).field("reason", "interrupted").field("signal", signal_name(interrupted_by_));
    emit(j);
    release_and_finish(128 + interrupted_by_);
  }

  void acquired(error_code ec, redlock::lock l) {
    lock_ = std::move(l);
    if (interrupted_by_ != 0) {
      interrupted();
      return;
    }
    if (ec) {
      acquire_failed(ec);
      return;
    }
    const auto validity = std::chrono::duration_cast<milliseconds>(lock_.validity_deadline() - clock_type::now());
    verbose(fmt::format("acquired {}{} (key '{}') after {} attempt{}, validity {}{}", subject_, kind_text(),
                        printable(key_), lock_.attempts(), lock_.attempts() == 1 ? "" : "s", format_duration(validity),
                        o_.fence ? fmt::format(", fencing token {}", lock_.fence()) : ""));
    verbose_masters(lock_.masters());
    {
      auto j = event("acquired");
      j.field("key", key_)
          .field("ttl_ms", static_cast<std::int64_t>(o_.ttl.count()))
          .field("validity_ms", static_cast<std::int64_t>(validity.count()))
          .field("attempts", lock_.attempts())
          .field("kind", to_string(o_.kind))
          .field("quorum", quorum_);
      if (o_.kind == lock_kind::semaphore) j.field("permits", o_.permits);
      if (o_.fence) j.field("fence", static_cast<std::int64_t>(lock_.fence()));
      add_resources(j);
      add_masters(j, lock_.masters());
      emit(j);
    }
    keep_alive_options ka;
    ka.max_hold = o_.max_hold;  // 0 unless --max-hold: the command decides how long it runs
    lock_.keep_alive(ka);
    wait_events();
    start_command(validity);
  }

  void acquire_failed(error_code ec) {
    const auto nodes = lock_.masters();
    const auto n = cfg_.client.masters.size();
    const auto counts = count_answers(nodes);
    std::string reason;
    std::string message;
    int status = exit_tempfail;
    if (ec == error::not_acquired) {
      reason = "held";
      message = fmt::format("{} ({}); {}", held_text(nodes, counts), answers_text(counts, n, queued_as()),
                            o_.wait.count() > 0 ? fmt::format("gave up after waiting {} ({} attempts)",
                                                              format_duration(o_.wait), lock_.attempts())
                                                : std::string{"use --wait DURATION to wait for it"});
    } else if (ec == error::quorum_unavailable) {
      reason = "unavailable";
      // Each master that could not be used, with its cause (and the server's own words: a refusal
      // of the credentials, OpenSSL's reason).
      message = fmt::format("cannot lock {}: masters unavailable: {}", subject_,
                            unavailable_text(locks_->report(lock_), counts));
    } else if (ec == error::validity_expired) {
      reason = "too_slow";
      message = fmt::format("cannot lock {}: the masters answered too slowly for a ttl of {} (no validity left)",
                            subject_, format_duration(o_.ttl));
    } else if (ec == error::invalid_argument) {
      reason = "invalid_argument";
      status = exit_usage;
      message = fmt::format("cannot lock {}: {} (resource name, ttl or owner)", subject_, ec.message());
    } else if (ec == error::invalid_config) {
      reason = "invalid_config";
      status = exit_config;
      message = fmt::format("cannot lock {}: {}", subject_, ec.message());
    } else {
      reason = "error";
      status = exit_software;
      message = fmt::format("cannot lock {}: {}", subject_, ec.message());
    }
    say(message);
    verbose_masters(nodes);
    auto j = event("not_acquired");
    j.field("key", key_)
        .field("reason", reason)
        .field("message", message)
        .field("attempts", lock_.attempts())
        .field("quorum", quorum_);
    j.key("answers")
        .begin_object()
        .field("granted", counts.granted)
        .field("taken", counts.taken)
        .field("queued", counts.queued)
        .field("pending", counts.pending)
        .field("failed", counts.failed)
        .end_object();
    add_resources(j);
    add_masters(j, nodes);
    emit(j);
    finish(status);
  }

  // ---- the command ----

  void start_command(milliseconds validity) {
    const auto path = find_in_path(o_.command.front());
    if (!path) {
      command_failed(exit_not_found, fmt::format("{}: command not found", printable(o_.command.front())));
      return;
    }
    std::vector<std::string> args = o_.command;
    std::vector<std::string> env;
    std::map<std::string, std::string> ours{
        {"REDLOCK_RESOURCE", o_.resource},
        {"REDLOCK_KEY", key_},
        {"REDLOCK_TTL_MS", std::to_string(o_.ttl.count())},
        {"REDLOCK_VALIDITY_MS", std::to_string(validity.count())},
    };
    std::string names, keys;
    for (const auto& r : o_.resources) {
      names += (names.empty() ? "" : "\n") + r;
      keys += (keys.empty() ? "" : "\n") + key_of(cfg_, r);
    }
    ours["REDLOCK_RESOURCES"] = names;
    ours["REDLOCK_KEYS"] = keys;
    if (o_.fence) ours["REDLOCK_FENCE"] = std::to_string(lock_.fence());
    if (o_.owner) ours["REDLOCK_OWNER"] = *o_.owner;  // for a nested `redlock run --reentrant`
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string_view kv = *e;
      const std::string name{kv.substr(0, kv.find('='))};
      // An outer run's fencing token is not this lock's: never passed on.
      if (ours.find(name) == ours.end() && name != "REDLOCK_FENCE") env.emplace_back(kv);
    }
    for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) {
      command_failed(exit_oserr, fmt::format("pipe: {}", std::strerror(errno)));
      return;
    }
    child_setup s;
    s.path = path->c_str();
    s.argv = argv.data();
    s.envp = envp.data();
    s.own_group = !o_.foreground;
    s.parent = ::getpid();
    s.report_fd = report[1];
    s.signals = saved_.data();
    s.signal_count = saved_.size();
    s.keep_fds = inherited_.data();
    s.keep_count = inherited_.size();

    // Signals stay blocked across fork() until the child has reset their handlers: a signal in
    // between would run the tool's handler in the child.
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &s.mask);
    const pid_t pid = ::fork();
    if (pid == 0) child_main(s);
    const int fork_errno = errno;
    if (pid > 0 && !o_.foreground) ::setpgid(pid, pid);  // also here: no race with our first kill()
    ::pthread_sigmask(SIG_SETMASK, &s.mask, nullptr);
    ::close(report[1]);
    if (pid < 0) {
      ::close(report[0]);
      command_failed(exit_oserr, fmt::format("fork: {}", std::strerror(fork_errno)));
      return;
    }
    child_ = pid;
    int exec_errno = 0;
    ssize_t got = 0;
    do {
      got = ::read(report[0], &exec_errno, sizeof exec_errno);
    } while (got < 0 && errno == EINTR);
    ::close(report[0]);
    if (got == static_cast<ssize_t>(sizeof exec_errno)) {
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      child_done_ = true;
      command_failed(exec_errno == ENOENT ? exit_not_found : exit_cannot_execute,
                     fmt::format("cannot execute {}: {}", printable(*path), std::strerror(exec_errno)));
      return;
    }
    phase_ = phase::running;
    verbose(fmt::format("started the command (pid {}{})", pid, o_.foreground ? ", in the foreground" : ""));
    auto j = event("started");
    j.field("pid", static_cast<std::int64_t>(pid)).field("command", o_.command.front());
    emit(j);
    wait_child();
  }

  void command_failed(int status, std::string message) {
    say(message);
    auto j = event("exec_failed");
    j.field("message", message);
    emit(j);
    release_and_finish(status);
  }

  void wait_child() {
    if (reap()) return;
    child_signal_.async_wait([this](error_code ec, int) {
      if (ec || phase_ != phase::running) return;
      wait_child();
    });
  }

  /// True once the command has exited (and the release has begun).
  bool reap() {
    int st = 0;
    pid_t r = 0;
    do {
      r = ::waitpid(child_, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return false;
    child_done_ = true;
    grace_timer_.cancel();
    int status = exit_software;
    auto j = event("exited");
    if (r < 0) {
      say(fmt::format("lost track of the command: waitpid: {}", std::strerror(errno)));
      j.null_field("status").null_field("signal");
    } else if (WIFEXITED(st)) {
      status = WEXITSTATUS(st);
      verbose(fmt::format("the command exited with status {}", status));
      j.field("status", status).null_field("signal");
    } else if (WIFSIGNALED(st)) {
      status = 128 + WTERMSIG(st);
      verbose(fmt::format("the command was killed by {}", signal_name(WTERMSIG(st))));
      j.null_field("status").field("signal", signal_name(WTERMSIG(st)));
    }
    emit(j);
    release_and_finish(lost_ ? exit_lost : status);
    return true;
  }

  // ---- events: extensions, failed extensions, loss --------------------------------------------

  /// Follows the lock's events (lock::async_wait_event) from the acquisition to the end: reported
  /// as they happen for --verbose/--json, and the loss acted upon.
  void wait_events() {
    lock_.async_wait_event([this](error_code ec, lock_event e) {
      if (ec || phase_ == phase::done) return;  // released or closed: nothing more to follow
      switch (e.what) {
        case lock_event::type::extended:
          if (phase_ == phase::running) on_extended(e);
          break;
        case lock_event::type::extend_failed:
          if (phase_ == phase::running) on_extend_failed(e);
          break;
        case lock_event::type::lost:
          on_lost(e);
          return;
        case lock_event::type::released:
          return;
        case lock_event::type::master_hazard:
          // Not acted upon (the lock still rests on the other masters): said, for the operator.
          if (phase_ == phase::running) on_master_hazard(e);
          break;
      }
      wait_events();
    });
  }

  milliseconds validity_of(const lock_event& e) const {
    return std::chrono::duration_cast<milliseconds>(e.validity_deadline - e.at);
  }

  void on_extended(const lock_event& e) {
    extension_seen_ = true;
    if (!o_.common.verbose && !json()) return;
    const auto validity = validity_of(e);
    verbose(fmt::format("extended {} (extension {}), validity {}", subject_, e.extensions, format_duration(validity)));
    verbose_masters(e.masters, step_kind::extend);
    auto j = event("extended");
    j.field("extensions", e.extensions).field("validity_ms", static_cast<std::int64_t>(validity.count()));
    if (e.missed) j.field("missed", e.missed);
    add_masters(j, e.masters, step_kind::extend);
    emit(j);
  }

  /// A keep-alive extension failed while the lock is still valid: a warning (said also without
  /// --verbose: an operator wants to know that masters are failing before the lock is lost).
  void on_master_hazard(const lock_event& e) {
    say(fmt::format("{}: {}", subject_, e.detail));
    auto j = event("master_hazard");
    j.field("master", e.master).field("detail", e.detail);
    if (e.master < cfg_.client.masters.size()) j.field("address", redlock::address_of(cfg_.client.masters[e.master]));
    emit(j);
  }

  void on_extend_failed(const lock_event& e) {
    extension_seen_ = true;
    const auto validity = validity_of(e);
    say(fmt::format("extending {} failed ({}); retrying while the lock is valid ({} left)", subject_, e.error.message(),
                    format_duration(validity)));
    verbose_masters(e.masters, step_kind::extend);
    auto j = event("extend_failed");
    j.field("error", loss_reason_name(e.error))
        .field("message", e.error.message())
        .field("validity_ms", static_cast<std::int64_t>(validity.count()));
    add_masters(j, e.masters, step_kind::extend);
    emit(j);
  }

  // ---- loss ----

  void on_lost(const lock_event& e) {
    if (phase_ != phase::running) return;
    lost_ = true;
    const auto& reason = e.error;
    const auto why = reason == error::extension_limit
                         ? fmt::format("--max-hold {} reached", format_duration(o_.max_hold))
                         : (e.detail.empty() ? reason.message() : e.detail);
    const auto message = fmt::format("lost the lock on {} ({}): stopping the command with SIGTERM", subject_, why);
    say(message);
    // The answers of the last step decided: an extension's, or the acquisition's if none was.
    const auto step = extension_seen_ || e.extensions > 0 ? step_kind::extend : step_kind::acquire;
    verbose_masters(e.masters, step);
    auto j = event("lost");
    j.field("reason", loss_reason_name(reason)).field("detail", e.detail).field("message", message);
    add_masters(j, e.masters, step);
    emit(j);
    send(SIGTERM);
    send(SIGCONT);  // a stopped command could not act on SIGTERM
    grace_timer_.expires_after(o_.grace);
    grace_timer_.async_wait([this](error_code ec) {
      if (ec || child_done_) return;
      say(fmt::format("the command did not exit within {} of SIGTERM: sending SIGKILL", format_duration(o_.grace)));
      auto k = event("killed");
      k.field("signal", "SIGKILL");
      emit(k);
      send(SIGKILL);
    });
  }

  // ---- the end ----

  void release_and_finish(int status) {
    phase_ = phase::releasing;
    if (!lock_.owns_lock()) {
      finish(status);
      return;
    }
    // Waits for every master (or its release_timeout): the report then says what each did, and
    // closing the client afterwards cuts no release off on its way.
    lock_.async_unlock(unlock_options{.wait_for_all = true}, [this, status](error_code ec, unlock_result r) {
      const auto nodes = lock_.masters();
      const auto counts = fmt::format("{} of {} masters held it, {} did not, {} could not be reached", r.released,
                                      nodes.size(), r.not_held, r.unreachable);
      if (ec) {
        say(fmt::format("releasing {} failed ({}; {}): its keys expire with the ttl ({})", subject_, ec.message(),
                        counts, format_duration(o_.ttl)));
      } else {
        verbose(fmt::format("released {} ({})", subject_, counts));
      }
      verbose_masters(nodes, step_kind::release);
      auto j = event("released");
      j.field("held", r.released).field("not_held", r.not_held).field("unreachable", r.unreachable);
      if (ec) {
        j.field("error", ec.message());
      } else {
        j.null_field("error");
      }
      add_masters(j, nodes, step_kind::release);
      emit(j);
      finish(status);
    });
  }

  void finish(int status) {
    phase_ = phase::done;
    exit_ = status;
    auto j = event("done");
    j.field("exit_status", status);
    emit(j);
    error_code ignored;
    term_signals_.cancel(ignored);
    child_signal_.cancel(ignored);
    grace_timer_.cancel();
    if (locks_) locks_->close();
  }

  const run_options& o_;
  const resolved_config& cfg_;
  std::string owner_note_;  // for --verbose: where the owner of --reentrant came from
  std::string key_;
  std::string subject_;  // "'NAME'", or "'A', 'B'" for several resources
  std::size_t quorum_;   // masters that must grant: a majority, or the semaphore's quorum
  int json_fd_;
  std::vector<int> inherited_;
  std::vector<saved_signal> saved_;
  asio::io_context ioc_{1};
  asio::signal_set term_signals_;
  asio::signal_set child_signal_;
  asio::steady_timer grace_timer_;
  asio::cancellation_signal cancel_acquire_;
  std::optional<redlock::client> locks_;
  redlock::lock lock_;
  clock_type::time_point started_ = clock_type::now();
  phase phase_ = phase::acquiring;
  pid_t child_ = -1;
  bool child_done_ = false;
  bool lost_ = false;
  bool extension_seen_ = false;  // an extension (or a failed one) was reported
  int interrupted_by_ = 0;
  int exit_ = exit_software;
};

}  // namespace

int run_command(const run_options& o, const resolved_config& cfg) {
  // A ttl the library would refuse is a usage error, said in the user's terms.
  const auto needed =
      cfg.client.request_timeout + std::chrono::ceil<milliseconds>(core::drift(o.ttl, cfg.client.drift));
  if (o.ttl <= needed) {
    throw usage_error(
        fmt::format("--ttl {} is too short: it must exceed the request timeout ({}) plus the clock-drift "
                    "allowance, i.e. be more than {}",
                    format_duration(o.ttl), format_duration(cfg.client.request_timeout), format_duration(needed)));
  }
  if (o.ttl > cfg.client.max_ttl) {
    throw usage_error(
        fmt::format("--ttl {} is longer than {}: use a shorter ttl (the lock is kept alive while the "
                    "command runs)",
                    format_duration(o.ttl), format_duration(cfg.client.max_ttl)));
  }
  if (o.json_fd >= 0 && ::fcntl(o.json_fd, F_GETFD) == -1) {
    throw usage_error(fmt::format("--json-fd {}: not an open file descriptor", o.json_fd));
  }
  client_config c = cfg.client;
  c.retry.max_wait = o.wait;
  c.retry.max_attempts = 0;
  resolved_config adjusted = cfg;
  adjusted.client = std::move(c);

  // --reentrant: the owner of an enclosing `redlock run` (REDLOCK_OWNER), else a new one that the
  // command inherits, so that a nested `redlock run --reentrant` re-enters instead of waiting.
  run_options with_owner = o;
  std::string owner_note;
  if (o.reentrant) {
    if (const char* inherited = std::getenv("REDLOCK_OWNER"); inherited != nullptr && *inherited != '\0') {
      if (!valid_owner(inherited)) {
        throw config_error(
            "REDLOCK_OWNER is not an owner id (1 to 256 bytes without blanks or control characters); unset it for a "
            "new owner");
      }
      with_owner.owner = inherited;
      owner_note = "reentrant: the owner from REDLOCK_OWNER (shared with the enclosing runs of that owner)";
    } else {
      with_owner.owner = new_owner();
      owner_note = "reentrant: a new owner, passed to the command as REDLOCK_OWNER";
    }
  }
  runner r{with_owner, adjusted, std::move(owner_note)};
  return r.run();
}

}  // namespace redlock::cli
