// The Redlock client's I/O shell: fans requests out to every master at once, feeds the answers to
// the quorum collector (core/quorum.hpp) and acts on its decision. The arithmetic (quorum,
// validity, retry delays) lives in core/; this file sends, waits and releases.

#include "detail/completion.hpp"
#include "detail/log.hpp"
#include <redlock/client.hpp>
#include <redlock/core/quorum.hpp>
#include <redlock/detail/observe.hpp>
#include <redlock/detail/scripts.hpp>
#include <redlock/detail/token.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <utility>

namespace redlock {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;

error_code validate(const client_config& cfg, std::string* what) {
  auto bad = [&](std::string field) {
    if (what) *what = std::move(field);
    return make_error_code(error::invalid_config);
  };
  if (cfg.masters.empty()) return bad("no masters");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < cfg.masters.size(); ++i) {
    const auto& m = cfg.masters[i];
    std::string inner;
    if (validate(m, &inner)) return bad("master " + std::to_string(i + 1) + ": " + inner);
    const auto id = m.unix_socket.empty() ? m.host + ":" + std::to_string(m.port) : "unix:" + m.unix_socket;
    // Two entries for one server would let one master cast two votes; another database of the same
    // server is the same master. (Aliases of one host under different names cannot be seen here.)
    if (!seen.insert(id).second) return bad("master listed twice: " + id);
  }
  if (cfg.request_timeout <= std::chrono::milliseconds::zero()) return bad("request_timeout is not positive");
  if (cfg.release_timeout <= std::chrono::milliseconds::zero()) return bad("release_timeout is not positive");
  if (!(cfg.drift.factor >= 0.0 && cfg.drift.factor < 1.0)) return bad("drift.factor outside [0, 1)");
  if (cfg.drift.fixed < std::chrono::milliseconds::zero()) return bad("drift.fixed is negative");
  if (cfg.retry.base_delay < std::chrono::milliseconds::zero() ||
      cfg.retry.jitter < std::chrono::milliseconds::zero() || cfg.retry.max_wait < std::chrono::milliseconds::zero())
    return bad("retry delays must not be negative");
  if (cfg.max_resource_length == 0) return bad("max_resource_length is 0");
  if (cfg.max_ttl <= std::chrono::milliseconds::zero() || cfg.max_ttl > std::chrono::hours{24 * 366})
    return bad("max_ttl outside (0, 366 days]");
  if (what) what->clear();
  return {};
}

namespace detail {

using strand_type = asio::strand<asio::any_io_executor>;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// ---- logging --------------------------------------------------------------------------------------

// "lock "orders:42" [1f2e3d4c]": the resource (made printable, cut) and the first 8 hex digits of
// the token, never the whole token (it would let anyone release the lock).
std::string lock_name(std::string_view resource, std::string_view token) {
  std::string out = fmt::format("lock \"{}\"", printable(resource, 128));
  if (!token.empty()) fmt::format_to(std::back_inserter(out), " [{}]", short_token(token));
  return out;
}

std::string_view status_text(master_status s) noexcept {
  switch (s) {
    case master_status::pending:
      return "pending";
    case master_status::granted:
      return "granted";
    case master_status::taken:
      return "taken";
    case master_status::server_error:
      return "server error";
    case master_status::timeout:
      return "timeout";
    case master_status::unreachable:
      return "unreachable";
    case master_status::failed:
      return "failed";
  }
  return "unknown";
}

// What each master answered: "1 granted 412 us, 2 taken 380 us, 3 server error "WRONGTYPE..."
// 1.20 ms, 4 unreachable, 5 pending". Server texts are untrusted: made printable, and the lock's
// token is redacted should a server echo it.
std::string describe_nodes(const std::vector<master_result>& nodes, std::string_view token) {
  std::string out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    if (i) out += ", ";
    fmt::format_to(std::back_inserter(out), "{} {}", i + 1, status_text(n.status));
    if (n.status == master_status::server_error) {
      fmt::format_to(std::back_inserter(out), " \"{}\"", printable(n.server_text, 160, {token}));
    } else if (n.status == master_status::failed && n.error) {
      fmt::format_to(std::back_inserter(out), " ({})", describe(n.error));
    }
    if (n.status != master_status::pending && n.status != master_status::unreachable) {
      fmt::format_to(std::back_inserter(out), " {}", format_duration(n.latency));
    }
  }
  return out;
}

std::size_t count_status(const std::vector<master_result>& nodes, master_status s) {
  return static_cast<std::size_t>(
      std::count_if(nodes.begin(), nodes.end(), [s](const master_result& n) { return n.status == s; }));
}

// The client's counters: written from the strands of many operations at once (fetch_add).
struct client_counters {
  using counter = std::atomic<std::uint64_t>;
  counter lock_operations{0}, lock_attempts{0}, acquired{0}, not_acquired{0}, quorum_unavailable{0},
      validity_expired{0}, aborted{0}, rejected{0};
  counter extensions{0}, extension_failures{0}, lost{0}, releases{0}, release_failures{0}, background_releases{0};
  live_histogram<false> acquire_latency;
};

inline void add(std::atomic<std::uint64_t>& c) noexcept { bump<false>(c); }

class client_impl;
// A held lock was lost (counted and logged by its client).
void note_lost(client_impl& client, const struct lock_state& st, error_code reason);

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Which command a reply answers: each has its own "yes" and "no".
enum class reply_kind { set_nx, script };

// What one master's reply means: "OK" to SET or the integer 1 from a script is granted; nil to
// SET or 0 from a script (the key is not ours) is taken; anything else is a failure of that master.
master_result classify(error_code ec, const resp::response& r, reply_kind kind) {
  master_result out;
  if (ec == error::server_error) {
    out.status = master_status::server_error;
    out.error = ec;
    if (const auto* v = resp::reply_value(r)) out.server_text = v->value;
    return out;
  }
  if (ec) {
    out.error = ec;
    if (ec == error::master_timeout) {
      out.status = master_status::timeout;
    } else if (ec == error::not_connected) {
      out.status = master_status::unreachable;
    } else {
      out.status = master_status::failed;  // sent, then lost: outcome unknown
    }
    return out;
  }
  const auto* v = resp::reply_value(r);
  if (!v) {
    out.status = master_status::failed;
    out.error = error::unexpected_reply;
    return out;
  }
  const auto& n = *v;
  const bool set = kind == reply_kind::set_nx;
  if (set ? (n.data_type == resp::type::simple_string && n.value == "OK")
          : (n.data_type == resp::type::integer && n.value == "1")) {
    out.status = master_status::granted;
  } else if (set ? n.data_type == resp::type::null : (n.data_type == resp::type::integer && n.value == "0")) {
    out.status = master_status::taken;
  } else {
    out.status = master_status::failed;
    out.error = error::unexpected_reply;
  }
  return out;
}

struct watch_call;

struct lock_state {
  std::shared_ptr<client_impl> owner;
  std::string resource;
  std::string key;
  std::string token;
  std::chrono::milliseconds ttl{0};
  std::atomic<clock_type::rep> deadline{0};
  std::atomic<bool> held{false};
  std::atomic<bool> lost{false};
  std::atomic<std::size_t> extensions{0};
  std::size_t attempts = 0;
  mutable std::mutex mutex;  // guards nodes, loss_reason, watcher
  std::vector<master_result> nodes;
  error_code loss_reason;
  std::shared_ptr<watch_call> watcher;  // created on demand (keep_alive, async_wait_lost, loss_slot)

  void set_nodes(std::vector<master_result> n) {
    std::lock_guard guard{mutex};
    nodes = std::move(n);
  }
  void set_deadline(clock_type::time_point tp) noexcept {
    deadline.store(tp.time_since_epoch().count(), std::memory_order_release);
  }
  clock_type::time_point get_deadline() const noexcept {
    return clock_type::time_point{clock_type::duration{deadline.load(std::memory_order_acquire)}};
  }
};

// One operation on all masters: lock (with its retries), extend or unlock. It lives on its own
// strand; every master's answer is delivered there, and the coroutine driving it waits for the
// quorum's decision on `event_`.
struct call : std::enable_shared_from_this<call> {
  explicit call(const asio::any_io_executor& ex) : strand(asio::make_strand(ex)), event(strand) {}

  strand_type strand;
  asio::steady_timer event;  // a wake-up: cancelled when the decision comes, or on cancellation
  bool cancelled = false;

  // The current round of requests.
  std::uint64_t round = 0;
  core::quorum votes{0};
  std::vector<master_result> nodes;
  bool decided = false;
  clock_type::time_point round_start{};
  clock_type::time_point decided_at{};

  void begin_round(std::size_t n) {
    ++round;
    round_start = clock_type::now();
    votes = core::quorum{n};
    nodes.assign(n, master_result{});
    decided = false;
  }

  // One master's answer. `yes` says whether it counts towards the quorum. Answers from an older
  // round (a straggler of a failed attempt) only matter to that round's release, already queued.
  void answer(std::uint64_t r, std::size_t i, master_result res, bool yes) {
    if (r != round) return;
    res.latency = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - round_start);
    nodes[i] = std::move(res);
    if (yes) {
      votes.yes();
    } else {
      votes.no();
    }
    if (!decided && votes.state() != core::quorum_state::pending) {
      decided = true;
      decided_at = clock_type::now();
      event.cancel();
    }
  }

  asio::awaitable<void> wait_decision() {
    while (!decided && !cancelled) {
      event.expires_at(clock_type::time_point::max());
      co_await event.async_wait(use_tuple);
    }
  }

  asio::awaitable<void> sleep(clock_type::duration d) {
    event.expires_after(d);
    co_await event.async_wait(use_tuple);
  }

  asio::awaitable<void> sleep_until(clock_type::time_point tp) {
    event.expires_at(tp);
    co_await event.async_wait(use_tuple);
  }

  virtual void on_cancel() = 0;
  void cancel() {
    if (cancelled) return;
    cancelled = true;
    event.cancel();
    on_cancel();
  }
  virtual ~call() = default;
};

// Installs a slot handler that cancels `c` on its strand (terminal and partial only: a request
// already sent cannot be taken back, so total cancellation is not offered).
template <class Handler>
void bind_cancellation(Handler& h, const std::shared_ptr<call>& c) {
  auto slot = asio::get_associated_cancellation_slot(h);
  if (!slot.is_connected()) return;
  slot.assign([w = std::weak_ptr<call>(c)](asio::cancellation_type type) {
    if (!(type & (asio::cancellation_type::terminal | asio::cancellation_type::partial))) return;
    if (auto self = w.lock()) asio::post(self->strand, [self] { self->cancel(); });
  });
}

// Watches one held lock: signals its loss (at the latest `margin` before the validity deadline,
// from a timer armed on the deadline itself) and, with keep-alive, extends it before it runs out.
struct watch_call final : call {
  using lost_handler = asio::any_completion_handler<void(error_code)>;

  explicit watch_call(const asio::any_io_executor& ex) : call(ex), expiry(strand), fallback(ex) {}

  asio::steady_timer expiry;
  std::uint64_t expiry_generation = 0;
  asio::any_io_executor fallback;
  std::weak_ptr<lock_state> state;  // weak: the state owns the watcher
  clock_type::duration margin{};
  keep_alive_options opts;  // resolved: no zero durations left
  bool keeping = false;     // the keep-alive loop runs
  clock_type::time_point hold_start{};
  bool lost = false;
  error_code pending_reason;  // why the coming expiry will be a loss, when known before it
  std::uint64_t last_waiter = 0;
  std::vector<std::pair<std::uint64_t, lost_handler>> waiters;
  asio::cancellation_signal loss_signal;

  // (Re)arms the loss timer at the current deadline minus the margin.
  void arm_expiry(clock_type::time_point deadline) {
    if (lost || cancelled) return;
    const auto generation = ++expiry_generation;
    expiry.expires_at(deadline - margin);
    expiry.async_wait([self = std::static_pointer_cast<watch_call>(shared_from_this()), generation](error_code ec) {
      if (ec || generation != self->expiry_generation) return;  // re-armed or stopped
      self->declare_lost(self->pending_reason ? self->pending_reason : make_error_code(error::validity_expired));
    });
  }

  void declare_lost(error_code reason) {
    if (lost || cancelled) return;
    lost = true;
    if (auto st = state.lock()) {
      {
        std::lock_guard guard{st->mutex};
        st->loss_reason = reason;
        st->lost = true;
      }
      note_lost(*st->owner, *st, reason);
    }
    expiry.cancel();
    event.cancel();  // wakes the keep-alive loop, which then ends
    loss_signal.emit(asio::cancellation_type::terminal);
    finish_waiters(error::lock_lost);
  }

  void finish_waiters(error_code ec) {
    auto ws = std::move(waiters);
    waiters.clear();
    for (auto& [id, h] : ws) complete_handler(std::move(h), fallback, ec);
  }

  void add_waiter(lost_handler h) {
    if (lost) {
      complete_handler(std::move(h), fallback, make_error_code(error::lock_lost));
      return;
    }
    if (cancelled) {
      complete_handler(std::move(h), fallback, make_error_code(asio::error::operation_aborted));
      return;
    }
    const auto id = ++last_waiter;
    auto slot = asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
      slot.assign([w = std::weak_ptr<call>(shared_from_this()), id](asio::cancellation_type) {
        if (auto self = w.lock()) {
          asio::post(self->strand, [self, id] { static_cast<watch_call&>(*self).drop_waiter(id); });
        }
      });
    }
    waiters.emplace_back(id, std::move(h));
  }

  void drop_waiter(std::uint64_t id) {
    for (auto it = waiters.begin(); it != waiters.end(); ++it) {
      if (it->first == id) {
        auto h = std::move(it->second);
        waiters.erase(it);
        complete_handler(std::move(h), fallback, make_error_code(asio::error::operation_aborted));
        return;
      }
    }
  }

  // Stopped (released, handle dropped, client closed): no timer or operation stays behind.
  void on_cancel() override {
    expiry.cancel();
    finish_waiters(asio::error::operation_aborted);
  }
};

// Completes an operation on a handle that has no client to post through: hop through the system
// executor so as never to complete inline, holding outstanding work on the handler's executor
// until the completion has been handed over (so its io_context cannot be torn down meanwhile).
template <class Handler, class... Args>
void complete_without_client(Handler h, Args... args) {
  auto work = asio::prefer(asio::get_associated_executor(h), asio::execution::outstanding_work.tracked);
  asio::post(asio::system_executor(), [h = std::move(h), work = std::move(work), args...]() mutable {
    complete_handler(std::move(h), work, std::move(args)...);
  });
}

class client_impl : public std::enable_shared_from_this<client_impl> {
 public:
  client_impl(asio::any_io_executor ex, client_config cfg)
      : ex_(std::move(ex)), cfg_(std::move(cfg)), log_(cfg_.logging) {
    config_error_ = validate(cfg_, &config_problem_);
    if (config_error_) {
      REDLOCK_LOG(log_, log_level::error, "invalid configuration: {}", config_problem_);
      return;
    }
    conns_.reserve(cfg_.masters.size());
    names_.reserve(cfg_.masters.size());
    for (std::size_t i = 0; i < cfg_.masters.size(); ++i) {
      auto m = cfg_.masters[i];
      names_.push_back(fmt::format("master {} ({})", i + 1, address_of(m)));
      // A master without a sink of its own logs through the client's, named in every message.
      if (!m.logging.sink) {
        m.logging = cfg_.logging;
        m.logging.prefix = cfg_.logging.prefix.empty() ? names_.back() : cfg_.logging.prefix + ": " + names_.back();
      } else if (m.logging.prefix.empty()) {
        m.logging.prefix = names_.back();
      }
      conns_.push_back(std::make_unique<connection>(ex_, std::move(m)));
    }
    REDLOCK_LOG(log_, log_level::info, "client started: {} masters, quorum {}", size(), size() / 2 + 1);
  }

  void start() {
    for (auto& c : conns_) c->async_run([](error_code) {});
  }

  asio::any_io_executor ex_;
  client_config cfg_;
  error_code config_error_;
  std::string config_problem_;
  std::vector<std::unique_ptr<connection>> conns_;
  std::vector<std::string> names_;  // "master N (address)", for log messages
  std::atomic<bool> closed_{false};
  logger log_;
  client_counters counters_;

  client_stats stats() const {
    const auto& c = counters_;
    client_stats s;
    s.masters.reserve(conns_.size());
    for (const auto& conn : conns_) s.masters.push_back(conn->stats());
    // Outcomes before operations: operations are counted first.
    s.locks_acquired = read(c.acquired);
    s.locks_not_acquired = read(c.not_acquired);
    s.locks_quorum_unavailable = read(c.quorum_unavailable);
    s.locks_validity_expired = read(c.validity_expired);
    s.locks_aborted = read(c.aborted);
    s.locks_rejected = read(c.rejected);
    s.lock_attempts = read(c.lock_attempts);
    s.lock_operations = read(c.lock_operations);
    s.extensions = read(c.extensions);
    s.extension_failures = read(c.extension_failures);
    s.locks_lost = read(c.lost);
    s.releases = read(c.releases);
    s.release_failures = read(c.release_failures);
    s.background_releases = read(c.background_releases);
    s.acquire_latency = c.acquire_latency.snapshot();
    s.log_messages = log_.messages();
    s.log_sink_errors = log_.sink_errors();
    return s;
  }

  std::size_t size() const noexcept { return conns_.size(); }

  // ---- operations registry (so that close() reaches operations waiting on a timer) ------------

  void enroll(const std::shared_ptr<call>& c) {
    std::lock_guard guard{calls_mutex_};
    if (calls_.size() >= 2 * live_hint_ + 16) {
      std::erase_if(calls_, [](const std::weak_ptr<call>& w) { return w.expired(); });
      live_hint_ = calls_.size();
    }
    calls_.push_back(c);
  }

  void close() {
    if (closed_.exchange(true)) return;
    REDLOCK_LOG(log_, log_level::info, "client closed");
    std::vector<std::weak_ptr<call>> calls;
    {
      std::lock_guard guard{calls_mutex_};
      calls.swap(calls_);
    }
    for (auto& w : calls) {
      if (auto c = w.lock()) asio::post(c->strand, [c] { c->cancel(); });
    }
    for (auto& conn : conns_) conn->close();
  }

  // ---- sending --------------------------------------------------------------------------------

  // Runs `s` on master `i` with EVALSHA, falling back to EVAL when the master's script cache is
  // empty (a restarted master, or SCRIPT FLUSH). The fallback is queued on the same connection,
  // so it still runs after any request sent before it.
  template <class Handler>
  void run_script(std::size_t i, const script& s, const std::string& key, const std::string& token,
                  std::optional<std::int64_t> ttl_ms, clock_type::duration timeout, Handler h) {
    resp::request req;
    if (ttl_ms) {
      req.push("EVALSHA", s.sha1, 1, key, token, *ttl_ms);
    } else {
      req.push("EVALSHA", s.sha1, 1, key, token);
    }
    // The fallback runs after this call returned, perhaps after the client was dropped: it keeps
    // the client's internals (and so the connection) alive until it has been queued.
    connection* conn = conns_[i].get();
    conn->async_exec(std::move(req), timeout,
                     asio::bind_executor(asio::get_associated_executor(h),
                                         [self = shared_from_this(), i, conn, s, key, token, ttl_ms, timeout,
                                          h = std::move(h)](error_code ec, resp::response r) mutable {
                                           const auto* v = resp::reply_value(r);
                                           if (ec == error::server_error && v && starts_with(v->value, "NOSCRIPT")) {
                                             REDLOCK_LOG(self->log_, log_level::debug,
                                                         "{}: script not in the server's cache (NOSCRIPT): "
                                                         "sending it with EVAL",
                                                         self->names_[i]);
                                             resp::request eval;
                                             if (ttl_ms) {
                                               eval.push("EVAL", s.body, 1, key, token, *ttl_ms);
                                             } else {
                                               eval.push("EVAL", s.body, 1, key, token);
                                             }
                                             conn->async_exec(std::move(eval), timeout, std::move(h));
                                             return;
                                           }
                                           std::move(h)(ec, std::move(r));
                                         }));
  }

  // The release script on every master, nobody waiting (failed attempts, dropped handles).
  void release_everywhere(const std::string& key, const std::string& token) {
    for (std::size_t i = 0; i < size(); ++i) {
      run_script(i, release_script, key, token, std::nullopt, cfg_.release_timeout,
                 asio::bind_executor(ex_, [](error_code, resp::response) {}));
    }
  }

  // ---- lock -----------------------------------------------------------------------------------

  using lock_handler = asio::any_completion_handler<void(error_code, lock)>;

  struct lock_call final : call {
    using call::call;
    std::optional<lock_handler> handler;
    asio::any_io_executor fallback;
    std::shared_ptr<lock_state> state;
    clock_type::time_point started = clock_type::now();
    void on_cancel() override { finish(asio::error::operation_aborted); }
    void finish(error_code ec) {
      if (!handler) return;
      lock_handler h = std::move(*handler);
      handler.reset();
      if (!ec) state->held = true;
      state->owner->count_lock_outcome(ec, started);
      complete_handler(std::move(h), fallback, ec, lock::make(state));
    }
  };

  // Every lock operation ends here, once, with its outcome.
  void count_lock_outcome(error_code ec, clock_type::time_point started) {
    auto& c = counters_;
    if (!ec) {
      add(c.acquired);
      c.acquire_latency.record(clock_type::now() - started);
    } else if (ec == error::not_acquired) {
      add(c.not_acquired);
    } else if (ec == error::quorum_unavailable) {
      add(c.quorum_unavailable);
    } else if (ec == error::validity_expired) {
      add(c.validity_expired);
    } else if (ec == error::invalid_argument || ec == error::invalid_config) {
      add(c.rejected);
    } else {
      add(c.aborted);
    }
  }

  error_code check_lock_args(const std::string& resource, std::chrono::milliseconds ttl) const {
    if (config_error_) return config_error_;
    if (resource.empty() || resource.size() > cfg_.max_resource_length) return error::invalid_argument;
    // Bounded before any arithmetic: the validity is computed in steady_clock nanoseconds.
    if (ttl <= std::chrono::milliseconds::zero() || ttl > cfg_.max_ttl) return error::invalid_argument;
    // A success decided at the very end of the per-master deadline must still leave validity.
    const auto usable = std::chrono::microseconds{ttl} - core::drift(ttl, cfg_.drift);
    if (usable <= std::chrono::microseconds{cfg_.request_timeout}) return error::invalid_argument;
    return {};
  }

  void start_lock(lock_handler h, std::string resource, std::chrono::milliseconds ttl, bool retry) {
    add(counters_.lock_operations);
    auto c = std::make_shared<lock_call>(ex_);
    c->fallback = ex_;
    c->state = std::make_shared<lock_state>();
    c->state->owner = shared_from_this();
    c->state->resource = std::move(resource);
    bind_cancellation(h, c);
    c->handler.emplace(std::move(h));
    enroll(c);
    asio::co_spawn(c->strand, lock_loop(c, ttl, retry), [c](std::exception_ptr e) {
      if (e) c->finish(make_error_code(boost::system::errc::not_enough_memory));
    });
  }

  asio::awaitable<void> lock_loop(std::shared_ptr<lock_call> c, std::chrono::milliseconds ttl, bool retry) {
    const auto state = c->state;  // the user's handle may drop its copy at any time
    auto& st = *state;
    if (auto ec = check_lock_args(st.resource, ttl)) {
      REDLOCK_LOG(log_, log_level::debug, "{}: rejected ({} ms): {}", lock_name(st.resource, {}), ttl.count(),
                  describe(ec));
      c->finish(ec);
      co_return;
    }
    if (closed_) {
      c->finish(asio::error::operation_aborted);
      co_return;
    }
    error_code tec;
    st.token = make_token(tec);
    if (tec) {
      REDLOCK_LOG(log_, log_level::error, "{}: cannot draw a token: {}", lock_name(st.resource, {}), describe(tec));
      c->finish(tec);
      co_return;
    }
    st.key = cfg_.key_prefix + st.resource;
    st.ttl = ttl;
    const auto first_start = clock_type::now();
    // Jitter only needs to desynchronise clients, not to be secret: one seeded engine per thread.
    thread_local std::minstd_rand rng{std::random_device{}()};
    for (;;) {
      ++st.attempts;
      add(counters_.lock_attempts);
      c->begin_round(size());
      const auto round = c->round;
      const auto start = clock_type::now();
      for (std::size_t i = 0; i < size(); ++i) {
        resp::request req;
        req.push("SET", st.key, st.token, "NX", "PX", ttl.count());
        conns_[i]->async_exec(std::move(req), cfg_.request_timeout,
                              asio::bind_executor(c->strand, [c, round, i](error_code ec, resp::response r) {
                                auto res = classify(ec, r, reply_kind::set_nx);
                                const bool yes = res.status == master_status::granted;
                                c->answer(round, i, std::move(res), yes);
                              }));
      }
      co_await c->wait_decision();
      st.set_nodes(c->nodes);

      error_code ec;
      if (c->cancelled || closed_) {
        ec = asio::error::operation_aborted;
      } else if (c->votes.state() == core::quorum_state::reached) {
        const auto v = core::validity<clock_type>(ttl, start, c->decided_at, cfg_.drift);
        if (v > clock_type::duration::zero()) {
          st.set_deadline(core::validity_deadline<clock_type>(ttl, start, cfg_.drift));
          REDLOCK_LOG(log_, log_level::debug, "{}: acquired for {} ms in {} (attempt {}), validity {}; masters: {}",
                      lock_name(st.resource, st.token), ttl.count(), format_duration(clock_type::now() - first_start),
                      st.attempts, format_duration(v), describe_nodes(c->nodes, st.token));
          c->finish({});
          co_return;
        }
        ec = error::validity_expired;
      } else {
        const bool contended = std::any_of(c->nodes.begin(), c->nodes.end(),
                                           [](const master_result& n) { return n.status == master_status::taken; });
        ec = contended ? error::not_acquired : error::quorum_unavailable;
      }
      // Failed (or cancelled) attempt: release everywhere at once, so others need not wait for
      // expiry. Each release is queued behind this attempt's SET on the same connection, so a
      // SET still in flight (timed out, or not answered yet) cannot leave a key behind.
      release_everywhere(st.key, st.token);
      if (ec == asio::error::operation_aborted) {
        REDLOCK_LOG(log_, log_level::debug, "{}: cancelled during attempt {}", lock_name(st.resource, st.token),
                    st.attempts);
        c->finish(ec);
        co_return;
      }
      const auto delay = core::retry_delay(cfg_.retry, std::uniform_real_distribution<double>{0.0, 1.0}(rng));
      const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - first_start);
      if (!retry || !core::may_retry(cfg_.retry, st.attempts, elapsed, delay)) {
        // Contention is business as usual; masters failing or answering too slowly are not.
        REDLOCK_LOG(log_, ec == error::not_acquired ? log_level::debug : log_level::warning,
                    "{}: not acquired after {} attempt(s) in {}: {}; masters: {}", lock_name(st.resource, st.token),
                    st.attempts, format_duration(clock_type::now() - first_start), describe(ec),
                    describe_nodes(c->nodes, st.token));
        c->finish(ec);
        co_return;
      }
      REDLOCK_LOG(log_, log_level::debug, "{}: attempt {} failed: {}; masters: {}; retrying in {}",
                  lock_name(st.resource, st.token), st.attempts, describe(ec), describe_nodes(c->nodes, st.token),
                  format_duration(delay));
      co_await c->sleep(delay);
      if (c->cancelled || closed_) {
        REDLOCK_LOG(log_, log_level::debug, "{}: cancelled while waiting to retry", lock_name(st.resource, st.token));
        c->finish(asio::error::operation_aborted);
        co_return;
      }
    }
  }

  // ---- unlock ---------------------------------------------------------------------------------

  using unlock_handler = asio::any_completion_handler<void(error_code, std::size_t)>;

  struct unlock_call final : call {
    using call::call;
    std::optional<unlock_handler> handler;
    asio::any_io_executor fallback;
    void on_cancel() override { finish(asio::error::operation_aborted, 0); }
    void finish(error_code ec, std::size_t held) {
      if (!handler) return;
      unlock_handler h = std::move(*handler);
      handler.reset();
      complete_handler(std::move(h), fallback, ec, held);
    }
  };

  void start_unlock(std::shared_ptr<lock_state> st, unlock_handler h) {
    auto c = std::make_shared<unlock_call>(ex_);
    c->fallback = ex_;
    bind_cancellation(h, c);
    c->handler.emplace(std::move(h));
    const bool was_held = st && st->held.exchange(false);
    if (was_held) stop_watching(st);
    asio::co_spawn(c->strand, unlock_run(c, std::move(st), was_held), [c](std::exception_ptr e) {
      if (e) c->finish(make_error_code(boost::system::errc::not_enough_memory), 0);
    });
  }

  asio::awaitable<void> unlock_run(std::shared_ptr<unlock_call> c, std::shared_ptr<lock_state> st, bool was_held) {
    if (!was_held) {
      c->finish(error::not_locked, 0);
      co_return;
    }
    c->begin_round(size());
    const auto round = c->round;
    for (std::size_t i = 0; i < size(); ++i) {
      // No cancellation slot on these: a release runs to completion even if its caller is gone.
      run_script(i, release_script, st->key, st->token, std::nullopt, cfg_.release_timeout,
                 asio::bind_executor(c->strand, [c, round, i](error_code ec, resp::response r) {
                   auto res = classify(ec, r, reply_kind::script);
                   // Any clean answer counts: the key is gone from that master either way.
                   const bool answered = res.status == master_status::granted || res.status == master_status::taken;
                   c->answer(round, i, std::move(res), answered);
                 }));
    }
    co_await c->wait_decision();
    st->set_nodes(c->nodes);
    const auto held = count_status(c->nodes, master_status::granted);
    const bool reached = c->votes.state() == core::quorum_state::reached;
    if (c->decided) {  // not when the caller cancelled first: the release goes on unobserved
      add(reached ? counters_.releases : counters_.release_failures);
      if (reached) {
        REDLOCK_LOG(log_, log_level::debug, "{}: released in {} ({} master(s) still held it); masters: {}",
                    lock_name(st->resource, st->token), format_duration(c->decided_at - c->round_start), held,
                    describe_nodes(c->nodes, st->token));
      } else {
        REDLOCK_LOG(log_, log_level::warning,
                    "{}: release answered by too few masters (the rest expire with the ttl); masters: {}",
                    lock_name(st->resource, st->token), describe_nodes(c->nodes, st->token));
      }
    }
    c->finish(reached ? error_code{} : error::quorum_unavailable, held);
  }

  // ---- extend ---------------------------------------------------------------------------------

  using extend_handler = asio::any_completion_handler<void(error_code)>;

  struct extend_call final : call {
    using call::call;
    std::optional<extend_handler> handler;
    asio::any_io_executor fallback;
    void on_cancel() override { finish(asio::error::operation_aborted); }
    void finish(error_code ec) {
      if (!handler) return;
      extend_handler h = std::move(*handler);
      handler.reset();
      complete_handler(std::move(h), fallback, ec);
    }
  };

  void start_extend(std::shared_ptr<lock_state> st, extend_handler h, std::chrono::milliseconds ttl) {
    auto c = std::make_shared<extend_call>(ex_);
    c->fallback = ex_;
    bind_cancellation(h, c);
    c->handler.emplace(std::move(h));
    asio::co_spawn(c->strand, extend_run(c, std::move(st), ttl), [c](std::exception_ptr e) {
      if (e) c->finish(make_error_code(boost::system::errc::not_enough_memory));
    });
  }

  asio::awaitable<void> extend_run(std::shared_ptr<extend_call> c, std::shared_ptr<lock_state> st,
                                   std::chrono::milliseconds ttl) {
    if (!st || !st->held) {
      c->finish(error::not_locked);
      co_return;
    }
    if (auto ec = check_lock_args(st->resource, ttl)) {
      c->finish(ec);
      co_return;
    }
    const auto ec = co_await extend_round(c, st, ttl);
    if (!ec) deadline_moved(st);
    c->finish(ec);  // no effect when cancelled: completed already, and the old deadline stands
  }

  // One extension of `st` to `ttl` on every master, on `c`'s strand. Moves the deadline on success.
  asio::awaitable<error_code> extend_round(std::shared_ptr<call> c, std::shared_ptr<lock_state> st,
                                           std::chrono::milliseconds ttl, bool keep_alive = false) {
    const auto start = clock_type::now();
    const auto old_deadline = st->get_deadline();
    if (start >= old_deadline) {  // someone else may hold it now
      note_extension(*st, error::validity_expired, ttl, {}, nullptr, keep_alive);
      co_return error::validity_expired;
    }
    // The extension must be decided within the remaining validity; no master may take longer.
    const auto timeout = std::min<clock_type::duration>(cfg_.request_timeout, old_deadline - start);
    c->begin_round(size());
    const auto round = c->round;
    for (std::size_t i = 0; i < size(); ++i) {
      run_script(i, extend_script, st->key, st->token, ttl.count(), timeout,
                 asio::bind_executor(c->strand, [c, round, i](error_code ec, resp::response r) {
                   auto res = classify(ec, r, reply_kind::script);
                   const bool yes = res.status == master_status::granted;
                   c->answer(round, i, std::move(res), yes);
                 }));
    }
    co_await c->wait_decision();
    st->set_nodes(c->nodes);
    if (c->cancelled) co_return asio::error::operation_aborted;
    error_code ec;
    if (c->votes.state() == core::quorum_state::reached) {
      if (c->decided_at < old_deadline &&
          core::validity<clock_type>(ttl, start, c->decided_at, cfg_.drift) > clock_type::duration::zero()) {
        st->set_deadline(core::validity_deadline<clock_type>(ttl, start, cfg_.drift));
        ++st->extensions;
      } else {
        ec = error::validity_expired;
      }
    } else {
      const bool lost = std::any_of(c->nodes.begin(), c->nodes.end(),
                                    [](const master_result& n) { return n.status == master_status::taken; });
      ec = lost ? error::not_owner : error::quorum_unavailable;
    }
    note_extension(*st, ec, ttl, c->decided_at - start, &c->nodes, keep_alive);
    co_return ec;
  }

  // Counts and logs the outcome of one extension (not a cancelled one).
  void note_extension(const lock_state& st, error_code ec, std::chrono::milliseconds ttl, clock_type::duration took,
                      const std::vector<master_result>* nodes, bool keep_alive) {
    add(ec ? counters_.extension_failures : counters_.extensions);
    const char* what = keep_alive ? "keep-alive extension" : "extension";
    if (!ec) {
      REDLOCK_LOG(log_, log_level::debug, "{}: {} to {} ms done in {}; masters: {}", lock_name(st.resource, st.token),
                  what, ttl.count(), format_duration(took), describe_nodes(*nodes, st.token));
    } else if (nodes) {
      REDLOCK_LOG(log_, log_level::warning, "{}: {} failed: {}; masters: {}", lock_name(st.resource, st.token), what,
                  describe(ec), describe_nodes(*nodes, st.token));
    } else {
      REDLOCK_LOG(log_, log_level::warning, "{}: {} failed: {} (the validity had already run out)",
                  lock_name(st.resource, st.token), what, describe(ec));
    }
  }

  // A held lock was lost: counted and logged once (from the watcher's strand).
  void note_loss(const lock_state& st, error_code reason) {
    add(counters_.lost);
    REDLOCK_LOG(log_, log_level::warning, "{}: lost ({}); the holder must stop relying on it",
                lock_name(st.resource, st.token), describe(reason));
  }

  // ---- watching and keep-alive ----------------------------------------------------------------

  // The watcher of `st`, created (and its loss timer armed) on first use; null when not held.
  std::shared_ptr<watch_call> watcher_of(const std::shared_ptr<lock_state>& st) {
    std::lock_guard guard{st->mutex};
    if (st->watcher) return st->watcher;
    if (!st->held) return nullptr;
    auto w = std::make_shared<watch_call>(ex_);
    w->state = st;
    w->margin = std::max<clock_type::duration>(std::chrono::milliseconds{2}, st->ttl / 20);
    st->watcher = w;
    enroll(w);
    asio::post(w->strand, [w, deadline = st->get_deadline(), closed = closed_.load()] {
      if (closed) {
        w->cancel();
      } else {
        w->arm_expiry(deadline);
      }
    });
    return w;
  }

  void deadline_moved(const std::shared_ptr<lock_state>& st) {
    std::shared_ptr<watch_call> w;
    {
      std::lock_guard guard{st->mutex};
      w = st->watcher;
    }
    if (w) asio::post(w->strand, [w, d = st->get_deadline()] { w->arm_expiry(d); });
  }

  static void stop_watching(const std::shared_ptr<lock_state>& st) {
    std::shared_ptr<watch_call> w;
    {
      std::lock_guard guard{st->mutex};
      w = st->watcher;
    }
    if (w) asio::post(w->strand, [w] { w->cancel(); });
  }

  void keep_alive(const std::shared_ptr<lock_state>& st, keep_alive_options opts) {
    auto w = watcher_of(st);
    if (!w) return;
    // Resolve the defaults from the ttl; the margin follows the extension ttl.
    if (opts.ttl <= std::chrono::milliseconds::zero()) opts.ttl = st->ttl;
    if (opts.renew_below <= std::chrono::milliseconds::zero()) opts.renew_below = opts.ttl / 2;
    if (opts.retry_interval <= std::chrono::milliseconds::zero())
      opts.retry_interval = std::max<std::chrono::milliseconds>(std::chrono::milliseconds{1}, opts.ttl / 10);
    if (opts.notify_margin <= std::chrono::milliseconds::zero())
      opts.notify_margin = std::max<std::chrono::milliseconds>(std::chrono::milliseconds{2}, opts.ttl / 20);
    asio::post(w->strand, [this, self = shared_from_this(), w, st, opts] {
      if (w->cancelled || w->lost) return;
      w->opts = opts;
      w->margin = opts.notify_margin;
      w->arm_expiry(st->get_deadline());
      if (w->keeping) return;
      w->keeping = true;
      w->hold_start = clock_type::now();
      asio::co_spawn(w->strand, keep_alive_loop(w, st), [w](std::exception_ptr e) {
        w->keeping = false;
        if (e) w->declare_lost(make_error_code(boost::system::errc::not_enough_memory));
      });
    });
  }

  asio::awaitable<void> keep_alive_loop(std::shared_ptr<watch_call> w, std::shared_ptr<lock_state> st) {
    while (!w->cancelled && !w->lost) {
      const auto& o = w->opts;
      const auto deadline = st->get_deadline();
      if (const auto renew_at = deadline - o.renew_below; clock_type::now() < renew_at) {
        co_await w->sleep_until(renew_at);  // woken early by stop or loss
        continue;                           // the deadline may have moved (a manual extend)
      }
      const bool capped = (o.max_extensions != 0 && st->extensions >= o.max_extensions) ||
                          (o.max_hold.count() > 0 && clock_type::now() + o.ttl > w->hold_start + o.max_hold);
      if (capped) {
        w->pending_reason = error::extension_limit;  // the loss timer will say so at the deadline
        REDLOCK_LOG(log_, log_level::info,
                    "{}: keep-alive stopped at its cap ({} extension(s)); the lock will be lost at its deadline",
                    lock_name(st->resource, st->token), st->extensions.load());
        co_return;
      }
      const auto ec = co_await extend_round(w, st, o.ttl, true);
      if (w->cancelled || w->lost) co_return;
      if (!ec) {
        w->pending_reason.clear();
        w->arm_expiry(st->get_deadline());
        continue;
      }
      if (ec == error::not_owner || ec == error::validity_expired) {
        w->declare_lost(ec);  // the key is gone or taken: no point waiting for the deadline
        co_return;
      }
      // No quorum this time (masters down or slow): retry while an attempt can still finish in time.
      w->pending_reason = ec;
      const auto next = clock_type::now() + o.retry_interval;
      if (next + cfg_.request_timeout >= st->get_deadline() - w->margin) {
        w->declare_lost(ec);
        co_return;
      }
      REDLOCK_LOG(log_, log_level::debug, "{}: keep-alive retrying in {}", lock_name(st->resource, st->token),
                  format_duration(o.retry_interval));
      co_await w->sleep_until(next);
    }
  }

 private:
  std::mutex calls_mutex_;
  std::vector<std::weak_ptr<call>> calls_;
  std::size_t live_hint_ = 0;
};

void note_lost(client_impl& client, const lock_state& st, error_code reason) { client.note_loss(st, reason); }

}  // namespace detail

// ---- lock -------------------------------------------------------------------------------------

lock lock::make(std::shared_ptr<detail::lock_state> state) noexcept { return lock{std::move(state)}; }

lock& lock::operator=(lock&& other) noexcept {
  if (this != &other) {
    release_in_background();
    state_ = std::move(other.state_);
  }
  return *this;
}

lock::~lock() { release_in_background(); }

void lock::release_in_background() noexcept {
  if (!state_ || !state_->held.exchange(false)) return;
  try {
    auto& owner = *state_->owner;
    detail::add(owner.counters_.background_releases);
    REDLOCK_LOG(owner.log_, log_level::debug, "{}: handle dropped while held: releasing in the background",
                detail::lock_name(state_->resource, state_->token));
    detail::client_impl::stop_watching(state_);
    state_->owner->release_everywhere(state_->key, state_->token);
  } catch (...) {
    // Out of memory while queuing the release: the keys expire with the ttl.
  }
}

bool lock::owns_lock() const noexcept { return state_ && state_->held; }

const std::string& lock::resource() const noexcept {
  static const std::string empty;
  return state_ ? state_->resource : empty;
}

const std::string& lock::token() const noexcept {
  static const std::string empty;
  return state_ ? state_->token : empty;
}

lock::clock::time_point lock::validity_deadline() const noexcept {
  return state_ ? state_->get_deadline() : clock::time_point{};
}

std::vector<master_result> lock::masters() const {
  if (!state_) return {};
  std::lock_guard guard{state_->mutex};
  return state_->nodes;
}

std::size_t lock::attempts() const noexcept { return state_ ? state_->attempts : 0; }

std::size_t lock::extensions() const noexcept { return state_ ? state_->extensions.load() : 0; }

void lock::keep_alive(keep_alive_options opts) {
  if (state_) state_->owner->keep_alive(state_, opts);
}

bool lock::lost() const noexcept { return state_ && state_->lost; }

boost::system::error_code lock::loss_reason() const {
  if (!state_) return {};
  std::lock_guard guard{state_->mutex};
  return state_->loss_reason;
}

void lock::start_wait_lost(lost_handler h) {
  auto w = state_ ? state_->owner->watcher_of(state_) : nullptr;
  if (!w) {
    const bool was_lost = state_ && state_->lost;
    detail::complete_without_client(std::move(h), make_error_code(was_lost ? error::lock_lost : error::not_locked));
    return;
  }
  asio::post(w->strand, [w, h = std::move(h)]() mutable { w->add_waiter(std::move(h)); });
}

boost::asio::cancellation_slot lock::loss_slot() {
  auto w = state_ ? state_->owner->watcher_of(state_) : nullptr;
  if (!w) return {};  // not connected: binding it means "never cancelled"
  return w->loss_signal.slot();
}

void lock::start_unlock(unlock_handler h) {
  if (!state_) {
    // No client to post through: hop through the system executor so as never to complete inline,
    // then run on the handler's own executor.
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked), std::size_t{0});
    return;
  }
  state_->owner->start_unlock(state_, std::move(h));
}

void lock::start_extend(extend_handler h, std::chrono::milliseconds ttl) {
  if (!state_) {
    detail::complete_without_client(std::move(h), make_error_code(error::not_locked));
    return;
  }
  state_->owner->start_extend(state_, std::move(h), ttl);
}

// ---- client -----------------------------------------------------------------------------------

client::client(executor_type ex, client_config cfg)
    : impl_(std::make_shared<detail::client_impl>(std::move(ex), std::move(cfg))) {
  impl_->start();
}

client::~client() { impl_->close(); }

client::executor_type client::get_executor() const noexcept { return impl_->ex_; }
const client_config& client::config() const noexcept { return impl_->cfg_; }

std::vector<connection_status> client::masters() const {
  std::vector<connection_status> out;
  for (const auto& c : impl_->conns_) out.push_back(c->status());
  return out;
}

client_stats client::stats() const { return impl_->stats(); }

void client::start_lock(lock_handler h, std::string resource, std::chrono::milliseconds ttl, bool retry) {
  impl_->start_lock(std::move(h), std::move(resource), ttl, retry);
}

void client::close() { impl_->close(); }

}  // namespace redlock

#undef REDLOCK_LOG
