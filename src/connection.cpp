// SPDX-License-Identifier: BSL-1.0
// The I/O shell of one node connection. Decisions about which request a reply belongs to, what
// times out and what a failure means for each request live in detail::multiplexer (with the read
// path, detail::reply_reader), and the handshake's in core::handshake_fsm; this file moves bytes,
// runs timers and reconnects. It also implements detail::master_link, the lock client's path to a
// connection that runs on the client's own strand.

#include "detail/completion.hpp"
#include "detail/log.hpp"
#include "detail/master_link.hpp"
#include <redlock/connection.hpp>
#include <redlock/core/handshake_fsm.hpp>
#include <redlock/core/link_health.hpp>
#include <redlock/detail/multiplexer.hpp>
#include <redlock/detail/observe.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace redlock {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// The TLS layer works over a reference to the connection's socket, so that every path that closes
// the socket (stall, close(), connect timeout) aborts TLS operations too, and the plain path keeps
// its socket as it was.
using tls_stream = asio::ssl::stream<asio::generic::stream_protocol::socket&>;

// Loads the files of `t` into a new client context (TLS 1.2+, peer verified unless told not to).
// Returns invalid_config, with `what` naming the field, its path and OpenSSL's reason, on failure.
error_code make_tls_context(const tls_options& t, std::shared_ptr<asio::ssl::context>& out, std::string* what) {
  auto bad = [&](std::string_view field, const std::string& path, const error_code& ec) {
    if (what) *what = fmt::format("{} '{}': {}", field, path, ec ? ec.message() : std::string{"not a directory"});
    return make_error_code(error::invalid_config);
  };
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_compression);
  // Redis never renegotiates; a renegotiation offered by a peer would make a write wait for a read.
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION);
  // OpenSSL would otherwise ask for the pass phrase of an encrypted key on the terminal.
  ctx->set_password_callback([](std::size_t, asio::ssl::context::password_purpose) { return std::string{}; });
  error_code ec;
  if (t.insecure_skip_verify) {
    ctx->set_verify_mode(asio::ssl::verify_none, ec);
  } else {
    ctx->set_verify_mode(asio::ssl::verify_peer, ec);
    if (!t.ca_file.empty()) {
      ctx->load_verify_file(t.ca_file, ec);
      if (ec) return bad("tls.ca_file", t.ca_file, ec);
    }
    if (!t.ca_dir.empty()) {
      std::error_code fec;
      if (!std::filesystem::is_directory(t.ca_dir, fec)) return bad("tls.ca_dir", t.ca_dir, {});
      ctx->add_verify_path(t.ca_dir, ec);
      if (ec) return bad("tls.ca_dir", t.ca_dir, ec);
    }
    if (t.ca_file.empty() && t.ca_dir.empty()) {
      ctx->set_default_verify_paths(ec);
      if (ec) return bad("the system's default CA store", "", ec);
    }
  }
  if (!t.cert_file.empty()) {
    ctx->use_certificate_chain_file(t.cert_file, ec);
    if (ec) return bad("tls.cert_file", t.cert_file, ec);
    ctx->use_private_key_file(t.key_file, asio::ssl::context::pem, ec);
    if (ec) return bad("tls.key_file", t.key_file, ec);
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      if (what) *what = fmt::format("tls.key_file '{}' is not the key of tls.cert_file '{}'", t.key_file, t.cert_file);
      return make_error_code(error::invalid_config);
    }
  }
  out = std::move(ctx);
  return {};
}

bool is_tls_error(const error_code& ec) noexcept {
  return ec.category() == error_category() && ec.value() >= static_cast<int>(error::tls_not_offered) &&
         ec.value() <= static_cast<int>(error::tls_handshake_failed);
}

// What a failed TLS connect means, from OpenSSL's reason (and the verify result); `text` gets
// OpenSSL's own words. Errors that are not TLS's (a refused connect, an AUTH error) pass through.
error_code classify_tls_failure(const error_code& ec, SSL* ssl, std::string& text) {
  if (ec == asio::ssl::error::stream_truncated) {
    text = "the master closed the connection during the TLS handshake";
    return make_error_code(error::tls_handshake_failed);
  }
  if (ec.category() != asio::error::get_ssl_category()) return ec;
  text = ec.message();
  const int reason = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    const long v = SSL_get_verify_result(ssl);
    text = X509_verify_cert_error_string(v);
    switch (v) {
      case X509_V_ERR_CERT_HAS_EXPIRED:
      case X509_V_ERR_CERT_NOT_YET_VALID:
        return make_error_code(error::tls_certificate_expired);
      case X509_V_ERR_HOSTNAME_MISMATCH:
      case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return make_error_code(error::tls_name_mismatch);
      default:
        return make_error_code(error::tls_certificate_untrusted);
    }
  }
  // Plain RESP where a TLS record was expected ("-ERR ..." read as a record header).
  if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_UNKNOWN_PROTOCOL ||
      reason == SSL_R_PACKET_LENGTH_TOO_LONG || reason == SSL_R_HTTP_REQUEST)
    return make_error_code(error::tls_not_offered);
  // An alert from the master (OpenSSL numbers them from SSL_AD_REASON_OFFSET).
  if (reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) return make_error_code(error::tls_refused);
  return make_error_code(error::tls_handshake_failed);
}

}  // namespace

error_code validate(const connection_config& cfg, std::string* what) {
  auto bad = [&](const char* field) {
    if (what) *what = field;
    return make_error_code(error::invalid_config);
  };
  if (cfg.unix_socket.empty()) {
    if (cfg.host.empty()) return bad("host is empty");
    if (cfg.port == 0) return bad("port is 0");
  } else if (cfg.unix_socket.size() >= sizeof(sockaddr_un::sun_path)) {
    return bad("unix_socket path longer than the system allows");
  }
  if (cfg.database < 0) return bad("database is negative");
  if (cfg.connect_timeout <= std::chrono::milliseconds::zero()) return bad("connect_timeout is not positive");
  if (cfg.stall_grace < std::chrono::milliseconds::zero()) return bad("stall_grace is negative");
  if (cfg.connect_probe_interval < std::chrono::milliseconds::zero()) return bad("connect_probe_interval is negative");
  if (cfg.reconnect.initial < std::chrono::milliseconds::zero() || cfg.reconnect.max < cfg.reconnect.initial)
    return bad("reconnect backoff: need 0 <= initial <= max");
  if (!(cfg.reconnect.jitter >= 0.0 && cfg.reconnect.jitter <= 1.0)) return bad("reconnect jitter outside [0, 1]");
  if (cfg.limits.max_depth == 0 || cfg.limits.max_depth > resp::parser::hard_max_depth)
    return bad("limits.max_depth outside [1, parser::hard_max_depth]");
  if (cfg.limits.max_line_length < 16 || cfg.limits.max_bulk_length == 0 || cfg.limits.max_nodes == 0 ||
      cfg.limits.max_aggregate_size == 0)
    return bad("limits too small to read any reply");
  if (cfg.tls.enabled) {
    const auto& t = cfg.tls;
    if (!cfg.unix_socket.empty()) return bad("tls with unix_socket: Redis serves Unix sockets without TLS");
    if (!t.key_file.empty() && t.cert_file.empty()) return bad("tls.key_file without tls.cert_file");
    if (!t.cert_file.empty() && t.key_file.empty()) return bad("tls.cert_file without tls.key_file");
    if (t.insecure_skip_verify && (!t.ca_file.empty() || !t.ca_dir.empty() || !t.server_name.empty()))
      return bad("tls.insecure_skip_verify with tls.ca_file, tls.ca_dir or tls.server_name (nothing would be checked)");
    std::shared_ptr<asio::ssl::context> ctx;
    if (auto ec = make_tls_context(t, ctx, what)) return ec;
  }
  if (what) what->clear();
  return {};
}

std::string address_of(const connection_config& cfg) {
  if (!cfg.unix_socket.empty()) return "unix:" + cfg.unix_socket;
  const std::string_view scheme = cfg.tls.enabled ? "rediss://" : "";
  if (cfg.host.find(':') != std::string::npos) return fmt::format("{}[{}]:{}", scheme, cfg.host, cfg.port);
  return fmt::format("{}{}:{}", scheme, cfg.host, cfg.port);
}

namespace {

log_options with_default_prefix(log_options opts, const connection_config& cfg) {
  if (opts.prefix.empty()) opts.prefix = address_of(cfg);
  return opts;
}

// The connection's counters. Written only on the connection's strand (one writer at a time, hence
// detail::bump<true>: relaxed load + store), read by stats() from any thread.
struct counters {
  using counter = std::atomic<std::uint64_t>;
  counter requests{0}, ok{0}, server_errors{0}, timeouts{0}, not_connected{0}, connection_lost{0}, protocol_errors{0},
      cancelled{0}, aborted{0}, invalid{0};
  counter written{0}, replies{0}, dropped_replies{0}, pushes{0}, bytes_written{0}, bytes_read{0};
  counter connect_attempts{0}, connects{0}, connect_failures{0}, auth_failures{0}, disconnects{0}, stalls{0};
  detail::live_histogram<true> latency;
};

void inc(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept { detail::bump<true>(c, n); }

using handler_type = asio::any_completion_handler<void(error_code, resp::response)>;
using strand_type = asio::strand<asio::any_io_executor>;
using socket_type = asio::generic::stream_protocol::socket;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// What the multiplexer completes: the public caller's type-erased handler, or (the lock client's
// internal path, issue 11) a reply sink and its tag, which cost no allocation and are called in
// place on the strand.
// Boost 1.81's any_completion_handler move *assignment* re-wraps the source instead of moving it
// (unbounded recursion), and the queue move-assigns when it erases from the middle, so assignment
// here is destroy + move-construct.
struct pending {
  handler_type handler;                      // empty for an internal request
  std::shared_ptr<detail::reply_sink> sink;  // set for an internal request
  std::uint64_t tag = 0;
  std::chrono::steady_clock::time_point start;  // reached the strand: its latency counts from here
  pending(handler_type h, std::chrono::steady_clock::time_point t) noexcept : handler(std::move(h)), start(t) {}
  pending(std::shared_ptr<detail::reply_sink> s, std::uint64_t t, std::chrono::steady_clock::time_point at) noexcept
      : sink(std::move(s)), tag(t), start(at) {}
  pending(pending&&) noexcept = default;
  pending& operator=(pending&& other) noexcept {
    if (this != &other) {
      handler.~handler_type();
      new (&handler) handler_type(std::move(other.handler));
      sink = std::move(other.sink);
      tag = other.tag;
      start = other.start;
    }
    return *this;
  }
  ~pending() = default;
};

}  // namespace

class connection::impl : public std::enable_shared_from_this<impl> {
 public:
  // The public connection: a strand of its own on `ex`.
  impl(asio::any_io_executor ex, connection_config cfg) : impl(ex, asio::make_strand(ex), std::move(cfg)) {}
  // A master_link: on the strand it is given, shared with the lock client's operations.
  impl(strand_type strand, connection_config cfg) : impl(strand.get_inner_executor(), strand, std::move(cfg)) {
    fail_fast_when_overdue_ = true;
  }
  impl(asio::any_io_executor ex, strand_type strand, connection_config cfg)
      : ex_(std::move(ex)),
        strand_(std::move(strand)),
        cfg_(std::move(cfg)),
        // On the strand's inner executor, not the strand: see enter_strand().
        socket_(strand_.get_inner_executor()),
        serve_done_(strand_),
        deadline_timer_(strand_),
        aux_timer_(strand_),
        flush_timer_(strand_),
        tls_nudge_timer_(strand_),
        mux_(cfg_.limits),
        rng_(std::random_device{}()),
        log_(with_default_prefix(cfg_.logging, cfg_)) {}

  asio::any_io_executor ex_;
  strand_type strand_;
  connection_config cfg_;

  // ---- called from any thread -------------------------------------------------------------

  void exec(handler_type h, resp::request req, clock::duration timeout) {
    const auto id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    // The slot handler is installed here, in the initiating thread, so that a cancellation emitted
    // right after initiation is not lost; it reaches the strand after the request does (FIFO).
    auto slot = asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
      slot.assign([w = weak_from_this(), id](asio::cancellation_type type) {
        if (auto self = w.lock()) {
          asio::post(self->strand_, [self, id, type] { self->cancel_request(id, type); });
        }
      });
    }
    asio::post(strand_, [self = shared_from_this(), id, h = std::move(h), req = std::move(req), timeout]() mutable {
      self->exec_on_strand(id, std::move(h), std::move(req), timeout);
    });
  }

  void run(run_handler h) {
    auto slot = asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
      slot.assign([w = weak_from_this()](asio::cancellation_type type) {
        if (!!(type & asio::cancellation_type::terminal)) {
          if (auto self = w.lock()) self->close();
        }
      });
    }
    asio::post(strand_, [self = shared_from_this(), h = std::move(h)]() mutable {
      if (self->state_ != connection_state::idle) {
        self->complete_run(std::move(h), make_error_code(error::invalid_argument));
        return;
      }
      std::string what;
      if (auto ec = validate(self->cfg_, &what)) {
        REDLOCK_LOG(self->log_, log_level::error, "invalid configuration: {}", what);
        self->record_error(ec, what);
        self->set_state(connection_state::closed);
        // Internal requests may have queued since master_link::run() (never public ones).
        self->fail_all_requests(make_error_code(error::not_connected), make_error_code(error::not_connected));
        self->complete_run(std::move(h), ec);
        return;
      }
      if (self->cfg_.tls.enabled) {
        // validate() loaded the files already; a file changed since is reported the same way.
        if (auto ec = make_tls_context(self->cfg_.tls, self->tls_ctx_, &what)) {
          REDLOCK_LOG(self->log_, log_level::error, "invalid configuration: {}", what);
          self->record_error(ec, what);
          self->set_state(connection_state::closed);
          self->fail_all_requests(make_error_code(error::not_connected), make_error_code(error::not_connected));
          self->complete_run(std::move(h), ec);
          return;
        }
      }
      self->run_handler_.emplace(std::move(h));  // not assignment: see `pending`
      self->set_state(connection_state::connecting);
      asio::co_spawn(self->strand_, self->run_loop(), [self](std::exception_ptr e) {
        // Only allocation failure can escape the loop; say so instead of looking like close().
        if (e) self->record_error(make_error_code(boost::system::errc::not_enough_memory), "");
        self->finish_run();
      });
    });
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->close_on_strand(); });
  }

  // master_link::close_after_writes: what was queued before this call (the releases of operations
  // that `client::close` cancelled) is still written, then the connection closes as by close();
  // at the latest after `limit`.
  void close_after_writes(clock::duration limit) {
    asio::post(strand_, [self = shared_from_this(), limit] {
      if (self->closing_) return;
      if (self->state_ != connection_state::up) return self->close_on_strand();
      self->flush_then_close_ = true;
      self->start_write();
      if (self->flushed()) return;
      self->flush_timer_.expires_after(limit);
      self->flush_timer_.async_wait([self](error_code ec) {
        if (!ec) self->close_on_strand();
      });
    });
  }

  // With flush_then_close_: closes once nothing is being written or waits to be; true if it did.
  bool flushed() {
    if (!flush_then_close_ || writing_ || mux_.has_waiting()) return false;
    close_on_strand();
    return true;
  }

  // master_link::run: async_run without a caller to tell.
  void run_detached() {
    run_requested_.store(true, std::memory_order_relaxed);
    run(run_handler{[](error_code) {}});
  }

  // master_link::submit, on the strand: no erased handler, no post, no allocation in steady state.
  error_code submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                    std::shared_ptr<detail::reply_sink> sink, std::uint64_t tag, bool push_confirmed) {
    inc(stats_.requests);
    if (payload.empty() || replies == 0 || !sink || (push_confirmed && replies != 1)) {
      inc(stats_.invalid);
      return make_error_code(error::invalid_argument);
    }
    // RESP2 has no pushes: a SUBSCRIBE there would switch the whole connection to subscribe mode,
    // where the lock client's commands are refused. Never write one (see also refuse_on_resp2()).
    if (push_confirmed && protocol() == 2) {
      inc(stats_.invalid);
      return make_error_code(error::not_supported);
    }
    // Requests queue while (re)connecting, and from run() on: its post may not have reached the
    // strand yet, and a caller that just started the link should not see it as down.
    const bool starting = state_ == connection_state::idle && run_requested_.load(std::memory_order_relaxed);
    if ((!accepting() && !starting) || closing_) {
      inc(stats_.not_connected);
      return make_error_code(error::not_connected);
    }
    const auto id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    const auto now = clock::now();
    mux_.add(id, payload, replies, deadline, pending{std::move(sink), tag, now}, stall_point(now, deadline),
             push_confirmed ? detail::confirmed_by::push : detail::confirmed_by::reply);
    arm_deadline(deadline);
    start_write();
    return {};
  }

  // The RESP version of the current connection (0: none), from any thread.
  int protocol() const noexcept { return protocol_.load(std::memory_order_relaxed); }

  connection_status status() const {
    std::lock_guard lock{status_mutex_};
    return status_;
  }

  connection_stats stats() const {
    const auto& c = stats_;
    connection_stats s;
    // Outcomes before `requests`: requests are counted first, so this order keeps
    // requests >= completed() on one thread's view (relaxed loads promise no more).
    s.ok = detail::read(c.ok);
    s.server_errors = detail::read(c.server_errors);
    s.timeouts = detail::read(c.timeouts);
    s.not_connected = detail::read(c.not_connected);
    s.connection_lost = detail::read(c.connection_lost);
    s.protocol_errors = detail::read(c.protocol_errors);
    s.cancelled = detail::read(c.cancelled);
    s.aborted = detail::read(c.aborted);
    s.invalid = detail::read(c.invalid);
    s.requests = detail::read(c.requests);
    s.written = detail::read(c.written);
    s.replies = detail::read(c.replies);
    s.dropped_replies = detail::read(c.dropped_replies);
    s.pushes = detail::read(c.pushes);
    s.bytes_written = detail::read(c.bytes_written);
    s.bytes_read = detail::read(c.bytes_read);
    s.connect_attempts = detail::read(c.connect_attempts);
    s.connects = detail::read(c.connects);
    s.connect_failures = detail::read(c.connect_failures);
    s.auth_failures = detail::read(c.auth_failures);
    s.disconnects = detail::read(c.disconnects);
    s.stalls = detail::read(c.stalls);
    s.latency = c.latency.snapshot();
    s.log_messages = log_.messages();
    s.log_sink_errors = log_.sink_errors();
    return s;
  }

 private:
  // ---- completion helpers -----------------------------------------------------------------

  // Never called inline from an initiating function (every path starts with a post to the strand).
  void complete(handler_type h, error_code ec, resp::response r) {
    detail::complete_handler(std::move(h), ex_, ec, std::move(r));
  }

  void complete_run(run_handler h, error_code ec) { detail::complete_handler(std::move(h), ex_, ec); }

  auto completer() {
    return [this](pending&& p, error_code ec, resp::response& r) {
      count_outcome(p.start, ec);
      if (p.sink) {
        // In place: the sink reads the nodes where the read path left them.
        const auto sink = std::move(p.sink);
        sink->on_reply(p.tag, ec, r);
      } else {
        complete(std::move(p.handler), ec, std::move(r));
      }
    };
  }

  // Finishes every queued request (see multiplexer::fail_all).
  void fail_all_requests(error_code written_ec, error_code waiting_ec) {
    mux_.fail_all(written_ec, waiting_ec, completer());
  }

  // Every request given to the multiplexer ends here (through `completer`), exactly once.
  void count_outcome(clock::time_point start, error_code ec) {
    if (!ec) {
      inc(stats_.ok);
      stats_.latency.record(clock::now() - start);
    } else if (ec == error::server_error) {
      inc(stats_.server_errors);
      stats_.latency.record(clock::now() - start);
    } else if (ec == error::master_timeout) {
      inc(stats_.timeouts);
    } else if (ec == error::not_connected) {
      inc(stats_.not_connected);
    } else if (ec == error::connection_lost) {
      inc(stats_.connection_lost);
    } else if (ec == asio::error::operation_aborted) {
      inc(closing_ ? stats_.aborted : stats_.cancelled);
    } else if (ec == error::not_supported) {
      inc(stats_.invalid);  // refused without effect, as submit() counts it
    } else {
      inc(stats_.protocol_errors);  // the stream broke on bad bytes after the request was written
    }
  }

  // ---- requests ---------------------------------------------------------------------------

  void exec_on_strand(std::uint64_t id, handler_type h, resp::request req, clock::duration timeout) {
    inc(stats_.requests);
    if (req.empty() || timeout <= clock::duration::zero()) {
      inc(stats_.invalid);
      complete(std::move(h), make_error_code(error::invalid_argument), {});
      return;
    }
    // Fail fast while the node is known to be unreachable instead of holding the caller until
    // its deadline (see accepting()).
    if (!accepting()) {
      inc(stats_.not_connected);
      complete(std::move(h), make_error_code(error::not_connected), {});
      return;
    }
    const auto now = clock::now();
    const auto deadline = (timeout >= clock::time_point::max() - now) ? clock::time_point::max() : now + timeout;
    const std::size_t replies = req.commands();
    mux_.add(id, req.payload(), replies, deadline, pending{std::move(h), now}, stall_point(now, deadline));
    arm_deadline(deadline);
    start_write();
  }

  void cancel_request(std::uint64_t id, asio::cancellation_type type) {
    const bool after_write = !!(type & (asio::cancellation_type::terminal | asio::cancellation_type::partial));
    if (mux_.cancel(id, after_write, asio::error::operation_aborted, completer())) {
      REDLOCK_LOG(log_, log_level::trace, "request cancelled by its caller");
    }
  }

  // One timer for all deadlines of this connection, armed at the earliest one.
  void arm_deadline(clock::time_point tp) {
    if (tp >= armed_deadline_) return;
    armed_deadline_ = tp;
    const auto generation = ++deadline_generation_;
    deadline_timer_.expires_at(tp);
    deadline_timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (ec || generation != self->deadline_generation_) return;  // re-armed or cancelled
      self->armed_deadline_ = clock::time_point::max();
      const auto before = detail::read(self->stats_.timeouts);
      const auto now = clock::now();
      auto next = self->mux_.expire(now, make_error_code(error::master_timeout), self->completer());
      if (const auto expired = detail::read(self->stats_.timeouts) - before; expired > 0) {
        REDLOCK_LOG(self->log_, log_level::debug,
                    "{} request(s) timed out (those already written are abandoned: their late replies will be "
                    "dropped)",
                    expired);
      }
      if (self->fail_fast_when_overdue_ && !self->overdue_ && self->state_ == connection_state::up &&
          self->mux_.overdue()) {
        self->overdue_ = true;
        REDLOCK_LOG(self->log_, log_level::debug,
                    "a written request timed out: new requests fail fast until its "
                    "reply comes or the connection is replaced");
      }
      if (self->state_ == connection_state::up && self->reading_ && !self->stalled_) {
        const auto stall = self->mux_.stall_point();
        if (stall <= now) return self->declare_stalled();
        next = std::min(next, stall);
      }
      // Re-armed no sooner than 1 ms from now: under a backlog every request has a deadline a few
      // microseconds after the previous one, and one expiry pass per request (each a scan of the
      // queue) grows with the square of the requests in flight. A timeout may fire 1 ms late.
      if (next != clock::time_point::max())
        self->arm_deadline(std::max(next, clock::now() + std::chrono::milliseconds{1}));
    });
  }

  // When a request queued at `now` with `deadline` marks the stream stalled (core::stall_point).
  clock::time_point stall_point(clock::time_point now, clock::time_point deadline) const noexcept {
    if (!cfg_.detect_stalls) return clock::time_point::max();
    return core::stall_point<clock>(now, deadline, cfg_.stall_grace);
  }

  void set_protocol(int p) noexcept { protocol_.store(p, std::memory_order_relaxed); }

  // A connection that came up as RESP2 cannot carry push-confirmed requests (a SUBSCRIBE would put
  // it in subscribe mode): those queued while connecting complete with not_supported, unsent.
  void refuse_on_resp2() {
    if (protocol() != 2) return;
    if (const auto n =
            mux_.refuse_waiting(detail::confirmed_by::push, make_error_code(error::not_supported), completer());
        n > 0) {
      REDLOCK_LOG(log_, log_level::debug, "{} subscription request(s) refused: the connection is RESP2", n);
    }
  }

  // Whether a new request is queued (or refused at once with not_connected). Requests queue while
  // up; for the lock client (a master_link) not while a written request timed out and is still
  // unanswered (overdue: the node or the path is in trouble, a new vote could only wait behind it,
  // and a quorum decides sooner without it). The public connection keeps queueing then: one
  // caller's short timeout must not fail the other callers' requests. And requests queue during
  // a reconnect whose outcome is not in doubt (the first connect, or after the
  // node closed the connection: it was reachable a moment ago). After a stall or a failed attempt
  // the node is suspect: requests fail fast until an attempt succeeds, instead of each waiting
  // out its deadline behind a connect that may never answer.
  bool accepting() const noexcept {
    if (state_ == connection_state::up) return !(overdue_ && fail_fast_when_overdue_);
    return state_ == connection_state::connecting && !suspect_;
  }

  // The oldest written request is overdue beyond its grace: replies behind it cannot come either.
  // Close abortively (RST, unsent bytes dropped: a queue of requests the node never saw must not
  // reach it late) and let the run loop reconnect at once.
  void declare_stalled() {
    stalled_ = true;
    inc(stats_.stalls);
    REDLOCK_LOG(log_, log_level::warning,
                "{} written request(s) unanswered well past their deadline: the connection is stalled (packet loss, "
                "a partition or a stopped server); replacing it",
                mux_.in_flight());
    // Down from now on, not when serve() has unwound: a request made meanwhile fails fast with
    // not_connected instead of being queued on a dead stream and failed as connection_lost.
    suspect_ = true;
    set_state(connection_state::down);
    record_error(make_error_code(error::connection_stalled), "");
    error_code ignored;
    socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    socket_.close(ignored);  // the reader ends with operation_aborted; serve() reports the stall
  }

  // ---- lifecycle --------------------------------------------------------------------------

  asio::awaitable<void> run_loop() {
    std::uint32_t attempt = 0;
    std::uint64_t failed_attempts = 0;  // since the connection was last up
    bool was_up = false;
    bool went_down = false;   // the last failure was of a live connection (already logged)
    error_code last_failure;  // the last connect failure, logged above debug; repeats go to debug
    while (!closing_) {
      set_state(connection_state::connecting);
      inc(stats_.connect_attempts);
      REDLOCK_LOG(log_, log_level::debug, "connecting (attempt {})", failed_attempts + 1);
      set_protocol(0);
      std::string server_text;
      error_code ec = co_await connect_and_handshake(server_text);
      if (closing_) break;
      const bool connected = !ec;
      if (connected) {
        attempt = 0;
        inc(stats_.connects);
        {
          std::lock_guard lock{status_mutex_};
          ++status_.connects;
        }
        if (!was_up) {
          REDLOCK_LOG(log_, log_level::info, "connection up (RESP{})", protocol());
        } else {
          REDLOCK_LOG(log_, log_level::info, "connection up again (RESP{}) after {} failed attempt(s)", protocol(),
                      failed_attempts);
        }
        was_up = true;
        went_down = false;
        failed_attempts = 0;
        last_failure.clear();
        suspect_ = false;
        overdue_ = false;
        refuse_on_resp2();  // before anything can be written
        set_state(connection_state::up);
        ec = co_await serve();
        server_text.clear();
      }
      set_protocol(0);
      if (closing_) break;
      // A stall or a failed attempt makes the node suspect (requests fail fast until it is back).
      const bool stalled = std::exchange(stalled_, false);
      if (stalled || !connected) suspect_ = true;
      detail::redact(server_text, {cfg_.password});
      record_error(ec, server_text);
      notify_failed(ec);  // before the waiting requests fail: the observer can say why
      // Whatever was written may or may not have run on the node; whatever waits was never sent.
      const error_code written_ec = (ec.category() == error_category() && ec != error::connection_stalled)
                                        ? ec
                                        : make_error_code(error::connection_lost);
      set_state(connection_state::down);
      // Counted before the requests complete, so that their handlers see counters that agree.
      if (connected) {
        inc(stats_.disconnects);
      } else {
        inc(stats_.connect_failures);
        if (ec == error::auth_failed) inc(stats_.auth_failures);
      }
      const auto lost_before = detail::read(stats_.connection_lost) + detail::read(stats_.protocol_errors);
      const auto unsent_before = detail::read(stats_.not_connected);
      mux_.fail_all(written_ec, make_error_code(error::not_connected), completer());
      const auto lost = detail::read(stats_.connection_lost) + detail::read(stats_.protocol_errors) - lost_before;
      const auto unsent = detail::read(stats_.not_connected) - unsent_before;
      reset_stream();
      if (connected) notify_down();
      const double r = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
      // Nothing answered (a stall, a connect that timed out): retry soon (core::next_reconnect).
      const auto step = core::next_reconnect(cfg_.reconnect, attempt, stalled || ec == error::connect_timeout, r);
      const auto delay = step.delay;
      if (connected) {
        // A node sending bad bytes is worse news than a connection closing.
        const bool bad_bytes = ec.category() == error_category() && ec != error::connection_lost;
        REDLOCK_LOG(log_, bad_bytes ? log_level::error : log_level::warning,
                    "connection down: {}; {} written request(s) failed (outcome unknown), {} not sent; "
                    "reconnecting in {}",
                    detail::describe(ec), lost, unsent, detail::format_duration(delay));
        went_down = true;
      } else {
        ++failed_attempts;
        const bool tls_failure = is_tls_error(ec);
        const bool refused = ec == error::auth_failed || ec == error::handshake_failed || tls_failure;
        // Say it once: a node that stays down would otherwise fill the log at every attempt.
        const auto level = ec == last_failure ? log_level::debug
                           : refused          ? log_level::error
                           : went_down        ? log_level::debug
                                              : log_level::warning;
        if (tls_failure) {
          REDLOCK_LOG(log_, level, "TLS connect failed: {} ({}); {} request(s) not sent; retrying in {} (attempt {})",
                      detail::describe(ec), server_text, unsent, detail::format_duration(delay), failed_attempts);
        } else if (refused) {
          REDLOCK_LOG(log_, level, "{}: {}; {} request(s) not sent; retrying in {} (attempt {})",
                      ec == error::auth_failed ? "authentication refused" : "handshake refused",
                      server_text.empty() ? detail::describe(ec) : detail::printable(server_text, 256, {cfg_.password}),
                      unsent, detail::format_duration(delay), failed_attempts);
        } else {
          REDLOCK_LOG(log_, level, "connect failed: {}; {} request(s) not sent; retrying in {} (attempt {})",
                      detail::describe(ec), unsent, detail::format_duration(delay), failed_attempts);
        }
        last_failure = ec;
      }
      aux_timer_.expires_after(delay);
      attempt = step.next_attempt;
      co_await aux_timer_.async_wait(use_tuple);
    }
  }

  void finish_run() {
    REDLOCK_LOG(log_, log_level::info, "connection closed");
    closing_ = true;
    set_protocol(0);
    reset_stream();
    mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
    set_state(connection_state::closed);
    deadline_timer_.cancel();
    if (run_handler_) {
      run_handler h = std::move(*run_handler_);
      run_handler_.reset();
      complete_run(std::move(h), asio::error::operation_aborted);
    }
  }

  void close_on_strand() {
    if (closing_) return;
    closing_ = true;
    flush_timer_.cancel();
    if (state_ == connection_state::idle) {
      set_state(connection_state::closed);
      mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
      return;
    }
    error_code ignored;
    socket_.close(ignored);  // reader and writer finish with operation_aborted
    aux_timer_.cancel();
    // Complete now rather than when the run loop unwinds: close() promises prompt completion.
    mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
  }

  void reset_stream() {
    error_code ignored;
    socket_.close(ignored);
    tls_.reset();  // a TLS operation still pending keeps its own reference until it completes
    mux_.reset_read();
    // A write still pending on the old socket completes with an error that is no longer news.
    ++stream_generation_;
    writing_ = false;
    write_error_ = {};
  }

  // ---- connect and handshake --------------------------------------------------------------

  asio::awaitable<error_code> connect_and_handshake(std::string& server_text) {
    // One timer bounds connect + handshake: on expiry it closes the socket, which aborts whatever
    // operation is in progress, and the abort is reported as connect_timeout. The generation
    // check ignores an expiry that was already queued when the attempt finished.
    const auto generation = ++connect_generation_;
    connect_timed_out_ = false;
    aux_timer_.expires_after(cfg_.connect_timeout);
    aux_timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (ec || generation != self->connect_generation_) return;
      self->connect_timed_out_ = true;
      error_code ignored;
      self->socket_.close(ignored);
    });
    tls_.reset();
    tls_plain_port_ = false;
    handshake_bytes_read_ = 0;
    error_code ec = co_await connect_socket();
    if (!ec && tls_ctx_) ec = co_await tls_handshake();
    const bool tls_up = !ec && tls_;
    if (!ec) ec = co_await handshake(server_text);
    ++connect_generation_;
    aux_timer_.cancel();
    tls_nudge_timer_.cancel();
    if (auto probe = std::exchange(tls_probe_, nullptr)) {
      error_code ignored;
      probe->close(ignored);
    }
    if (tls_plain_port_ && !closing_) {
      ec = make_error_code(error::tls_not_offered);
      server_text = "the port answered PING in plain RESP";
    } else if (connect_timed_out_ && !closing_) {
      ec = make_error_code(error::connect_timeout);
    } else if (ec && tls_up && !closing_ && handshake_bytes_read_ == 0 &&
               (ec == asio::error::connection_reset || ec == asio::error::eof || ec == asio::error::broken_pipe ||
                ec == asio::ssl::error::stream_truncated)) {
      // TLS 1.3 ends the client's handshake before the server has checked the client certificate;
      // a server that refuses it sends an alert and closes, and the alert is often lost to the
      // reset that our first request provokes. Nothing else closes a fresh TLS session unanswered.
      ec = make_error_code(error::tls_refused);
      server_text =
          "the master closed the connection right after the TLS handshake: it requires a client certificate "
          "(tls.cert_file) or does not trust the one sent";
    } else if (ec && tls_ && !closing_) {
      ec = classify_tls_failure(ec, tls_->native_handle(), server_text);
    }
    if (ec) {
      error_code ignored;
      socket_.close(ignored);
    }
    co_return ec;
  }

  asio::awaitable<error_code> connect_socket() {
    if (!cfg_.unix_socket.empty()) {
      asio::local::stream_protocol::endpoint ep{cfg_.unix_socket};
      auto [ec] = co_await socket_.async_connect(asio::generic::stream_protocol::endpoint{ep}, use_tuple);
      co_return ec;
    }
    std::vector<asio::ip::tcp::endpoint> endpoints;
    error_code ec;
    auto address = asio::ip::make_address(cfg_.host, ec);
    if (!ec) {
      endpoints.emplace_back(address, cfg_.port);
    } else {
      asio::ip::tcp::resolver resolver{strand_};
      auto [rec, results] = co_await resolver.async_resolve(cfg_.host, std::to_string(cfg_.port), use_tuple);
      if (rec) co_return rec;
      for (const auto& entry : results) endpoints.push_back(entry.endpoint());
    }
    if (suspect_ && cfg_.connect_probe_interval > std::chrono::milliseconds::zero() && endpoints.size() == 1) {
      co_return co_await probe_connect(endpoints.front());
    }
    ec = asio::error::host_not_found;
    for (const auto& ep : endpoints) {
      if (closing_) co_return asio::error::operation_aborted;
      error_code ignored;
      socket_.close(ignored);
      std::tie(ec) = co_await socket_.async_connect(asio::generic::stream_protocol::endpoint{ep}, use_tuple);
      if (!ec) {
        // Lock requests are small and latency-bound: never let Nagle hold them back.
        socket_.set_option(asio::ip::tcp::no_delay{true}, ignored);
        break;
      }
    }
    co_return ec;
  }

  // A connect to a suspect node (see connection_config::connect_probe_interval): a SYN lost to a
  // partition is retransmitted by the kernel only after 1 s, then 3 s, so a path that heals in
  // between would wait for it. Instead a fresh connect (a new SYN) starts every probe interval
  // while the earlier ones go on; the first to complete becomes the connection, a refusal ends
  // the race at once, and the whole is bounded by connect_timeout.
  asio::awaitable<error_code> probe_connect(const asio::ip::tcp::endpoint& ep) {
    struct race {
      explicit race(const strand_type& s) : wake(s) {}
      std::vector<std::unique_ptr<socket_type>> sockets;
      std::optional<std::size_t> winner;
      error_code refused;
      asio::steady_timer wake;
    };
    const auto r = std::make_shared<race>(strand_);
    const auto until = clock::now() + cfg_.connect_timeout;
    const asio::generic::stream_protocol::endpoint target{ep};
    while (!closing_ && !r->winner && !r->refused) {
      const auto now = clock::now();
      if (now >= until) break;
      r->sockets.push_back(std::make_unique<socket_type>(strand_.get_inner_executor()));
      const std::size_t i = r->sockets.size() - 1;
      r->sockets[i]->async_connect(target, [self = shared_from_this(), r, i](error_code ec) {
        auto* me = self.get();
        me->enter_strand([r, i, ec] {
          if (r->winner || r->refused || ec == asio::error::operation_aborted) return;
          if (ec) {
            r->refused = ec;
          } else {
            r->winner = i;
          }
          r->wake.cancel();
        });
      });
      r->wake.expires_at(std::min(now + cfg_.connect_probe_interval, until));
      co_await r->wake.async_wait(use_tuple);
    }
    error_code ignored;
    for (std::size_t i = 0; i < r->sockets.size(); ++i) {
      if (i != r->winner) r->sockets[i]->close(ignored);  // their connects end with operation_aborted
    }
    if (closing_) co_return asio::error::operation_aborted;
    if (r->refused) co_return r->refused;
    if (!r->winner) co_return error::connect_timeout;
    socket_.close(ignored);
    socket_ = std::move(*r->sockets[*r->winner]);
    socket_.set_option(asio::ip::tcp::no_delay{true}, ignored);
    co_return error_code{};
  }

  // The TLS handshake on the connected socket: SNI and name check for the server name, then the
  // handshake itself; every byte afterwards goes through tls_.
  asio::awaitable<error_code> tls_handshake() {
    auto stream = std::make_shared<tls_stream>(socket_, *tls_ctx_);
    tls_ = stream;
    SSL* ssl = stream->native_handle();
    const std::string& name = cfg_.tls.server_name.empty() ? cfg_.host : cfg_.tls.server_name;
    error_code not_ip;
    (void)asio::ip::make_address(name, not_ip);
    // SNI carries host names only (RFC 6066); an address is checked against the certificate's
    // IP entries instead of its DNS names.
    if (not_ip) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (!cfg_.tls.insecure_skip_verify) {
      const int ok =
          not_ip ? SSL_set1_host(ssl, name.c_str()) : X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
      if (ok != 1) co_return make_error_code(error::tls_handshake_failed);
    }
    // A plain Redis port takes the ClientHello for the start of an inline command and waits for
    // more (its line search stops at the hello's first NUL byte): TLS to a plain port would only
    // time out. So, half-way through the connect timeout with no answer to the hello, a second
    // connection to the same address asks "PING" in plain RESP; a RESP answer means the port is
    // plain, and the attempt ends at once with tls_not_offered. A stopped or slow TLS server
    // leaves the probe unanswered and the attempt ends as it would have (connect_timeout).
    const auto generation = connect_generation_;
    tls_nudge_timer_.expires_after(cfg_.connect_timeout / 2);
    tls_nudge_timer_.async_wait([self = shared_from_this(), generation, stream](error_code ec) {
      if (ec || generation != self->connect_generation_ || self->tls_ != stream) return;
      if (SSL_get_state(stream->native_handle()) != TLS_ST_CW_CLNT_HELLO) return;  // the server answered
      asio::co_spawn(self->strand_, self->probe_plain(self, generation), asio::detached);
    });
    auto [ec] = co_await stream->async_handshake(asio::ssl::stream_base::client, use_tuple);
    co_return ec;
  }

  // See tls_handshake(): whether the master's port answers plain RESP.
  // `self` keeps the connection alive while the probe runs.
  asio::awaitable<void> probe_plain([[maybe_unused]] std::shared_ptr<impl> self, std::uint64_t generation) {
    error_code ec;
    const auto target = socket_.remote_endpoint(ec);
    if (ec) co_return;
    const auto probe = std::make_shared<socket_type>(strand_.get_inner_executor());
    tls_probe_ = probe;
    std::tie(ec) = co_await probe->async_connect(target, use_tuple);
    if (!ec) {
      constexpr std::string_view ping = "PING\r\n";
      std::tie(ec, std::ignore) = co_await asio::async_write(*probe, asio::buffer(ping), use_tuple);
    }
    char first = 0;
    std::size_t n = 0;
    if (!ec) std::tie(ec, n) = co_await probe->async_read_some(asio::buffer(&first, 1), use_tuple);
    error_code ignored;
    probe->close(ignored);
    if (ec || n == 0 || generation != connect_generation_ || (first != '+' && first != '-')) co_return;
    tls_plain_port_ = true;
    socket_.close(ignored);  // the TLS handshake ends with operation_aborted
  }

  // The handshake's writes and reads, through TLS when it is on.
  asio::awaitable<std::tuple<error_code, std::size_t>> write_all(asio::const_buffer b) {
    if (const auto stream = tls_) {
      auto r = co_await asio::async_write(*stream, b, use_tuple);
      co_return r;
    }
    auto r = co_await asio::async_write(socket_, b, use_tuple);
    co_return r;
  }
  asio::awaitable<std::tuple<error_code, std::size_t>> read_some(asio::mutable_buffer b) {
    if (const auto stream = tls_) {
      auto r = co_await stream->async_read_some(b, use_tuple);
      co_return r;
    }
    auto r = co_await socket_.async_read_some(b, use_tuple);
    co_return r;
  }

  // Carries out the actions of core::handshake_fsm, which decides everything.
  asio::awaitable<error_code> handshake(std::string& server_text) {
    core::handshake_fsm fsm{{cfg_.username, cfg_.password, cfg_.client_name, cfg_.database}};
    resp::response replies;
    error_code ec;
    bool fallback_logged = false;
    for (;;) {
      const core::handshake_action a = fsm.resume(ec, replies);
      ec.clear();
      switch (a.type) {
        case core::handshake_action::kind::write: {
          if (!fallback_logged && !fsm.fallback_reason().empty()) {
            fallback_logged = true;
            REDLOCK_LOG(log_, log_level::debug, "the server refused HELLO 3 ({}): falling back to RESP2",
                        detail::printable(fsm.fallback_reason(), 256, {cfg_.password}));
          }
          auto [wec, n] = co_await write_all(asio::buffer(a.bytes));
          inc(stats_.bytes_written, n);
          ec = wec;
          break;
        }
        case core::handshake_action::kind::read:
          replies.clear();
          ec = co_await read_replies(a.replies, replies);
          break;
        case core::handshake_action::kind::done:
          if (!fallback_logged && !fsm.fallback_reason().empty()) {
            REDLOCK_LOG(log_, log_level::debug, "the server refused HELLO 3 ({}): falling back to RESP2",
                        detail::printable(fsm.fallback_reason(), 256, {cfg_.password}));
          }
          if (!a.ec) set_protocol(a.protocol);
          server_text = a.server_text;
          co_return a.ec;
      }
    }
  }

  // Reads `count` replies (handshake only: nothing else is in flight), skipping push messages.
  asio::awaitable<error_code> read_replies(std::size_t count, resp::response& out) {
    detail::reply_reader& reader = mux_.reader();
    for (std::size_t got = 0; got < count;) {
      error_code ec;
      switch (reader.next(ec)) {
        case detail::reply_reader::status::reply:
          out.insert(out.end(), reader.reply().begin(), reader.reply().end());
          ++got;
          break;
        case detail::reply_reader::status::push:
          break;
        case detail::reply_reader::status::error:
          co_return ec;
        case detail::reply_reader::status::need_more: {
          const auto space = reader.read_space();
          auto [rec, n] = co_await read_some(asio::buffer(space.data(), space.size()));
          if (!tls_ && handshake_bytes_read_ == 0) {
            // The first answer of a plain connection. A TLS port resets it (the HELLO is left
            // unread when the first bytes are not a TLS record) or sends an alert record. A plain
            // close (eof) stays what it is: a node that hangs up is not necessarily a TLS port.
            const bool closed = rec == asio::error::connection_reset;
            const bool tls_record =
                !rec && n > 0 &&
                (static_cast<unsigned char>(space[0]) == 0x15 || static_cast<unsigned char>(space[0]) == 0x16);
            if (closed || tls_record) co_return make_error_code(error::tls_expected);
          }
          if (rec) co_return rec;
          handshake_bytes_read_ += n;
          inc(stats_.bytes_read, n);
          reader.commit_read(n);
          break;
        }
      }
    }
    co_return error_code{};
  }

  // ---- serving: one reader, one writer ----------------------------------------------------

  // Runs the reader and the writer until the stream fails; returns why.
  asio::awaitable<error_code> serve() {
    reading_ = true;
    read_error_ = {};
    // Synchronous writes (start_write's first try) must never block the strand.
    error_code nb;
    socket_.non_blocking(true, nb);
    notify_up();                           // may queue requests (re-sent releases)
    start_write();                         // what was queued while connecting
    if (auto perr = dispatch_replies()) {  // bytes that came with the handshake
      read_error_ = perr;
      reading_ = false;
    } else {
      start_read();
    }
    while (reading_) {
      serve_done_.expires_at(clock::time_point::max());
      co_await serve_done_.async_wait(use_tuple);
    }
    error_code ec = read_error_;
    error_code ignored;
    socket_.close(ignored);  // a write in progress ends too
    // A TLS write must finish before the socket is reused: its next step would write to the new
    // connection (socket_ is shared by reference). The close above makes it end at once.
    while (tls_writes_ > 0) {
      serve_done_.expires_at(clock::time_point::max());
      co_await serve_done_.async_wait(use_tuple);
    }
    if (write_error_ && (!ec || ec == asio::error::operation_aborted)) ec = write_error_;
    if (stalled_ && !closing_) ec = error::connection_stalled;
    write_error_ = {};
    co_return ec;
  }

  // The hot path's completion handlers (socket reads and writes) have no associated executor: the
  // socket lives on the strand's inner executor, so Asio calls them straight from the scheduler,
  // and they enter the strand here (inline when the strand is free). Binding them to the strand
  // instead would cost a heap allocation per completion in Boost 1.81: strand<any_io_executor>'s
  // execute() queries its inner executor's blocking property, and any_executor returns such a
  // query's result through `new`.
  template <class F>
  void enter_strand(F&& f) {
    strand_.dispatch(std::forward<F>(f), std::allocator<void>{});
  }

  // The writer: no coroutine and no wake-up timer. Queuing a request starts the write at once when
  // none is in progress (no scheduler pass is spent waking a writer); the write's completion takes
  // everything that queued meanwhile, in one write.
  void start_write() {
    if (writing_ || state_ != connection_state::up || !mux_.has_waiting()) return;
    const auto in_flight_before = mux_.in_flight();
    std::string_view bytes = mux_.prepare_write();
    const auto batch = mux_.in_flight() - in_flight_before;
    inc(stats_.written, batch);
    REDLOCK_LOG(log_, log_level::trace, "writing {} request(s), {} bytes", batch, bytes.size());
    if (tls_) return start_tls_write(bytes);
    if (in_flight_before == 0) {
      // An idle connection (the latency-bound case): write at once, in this scheduler pass. The
      // socket's buffer is empty, so the bytes almost always go out whole and the write costs no
      // completion pass. A busy connection keeps coalescing what queues behind a write in flight.
      error_code wec;
      const std::size_t n = socket_.write_some(asio::buffer(bytes), wec);
      inc(stats_.bytes_written, n);
      if (wec && wec != asio::error::would_block && wec != asio::error::try_again) {
        write_error_ = wec;
        error_code ignored;
        socket_.close(ignored);  // the reader notices and the connection resets
        return;
      }
      if (n == bytes.size()) return;
      bytes.remove_prefix(n);
    }
    writing_ = true;
    asio::async_write(
        socket_, asio::buffer(bytes),
        [self = shared_from_this(), generation = stream_generation_](error_code ec, std::size_t n) {
          auto* me = self.get();
          me->enter_strand([self = std::move(self), generation, ec, n] { self->on_written(generation, ec, n); });
        });
  }

  // TLS's writes: always asynchronous. A synchronous first try, as on the plain path, would drive
  // the TLS stream's engine from a second operation while its asynchronous read is pending; Asio's
  // SSL stream does not support that (they share the engine and its buffers), and in tests it
  // lost a pending read now and then (a killed or stopped master went unnoticed). It saved 45 k of
  // 321 k instructions per lock+unlock and no measurable latency (docs/benchmarks.md, "TLS").
  // Handlers run on the strand (bound), because the TLS stream's reads and writes share OpenSSL
  // state that two threads must not touch at once; binding costs an allocation per completion
  // that the plain path avoids (see enter_strand()).
  void start_tls_write(std::string_view bytes) {
    writing_ = true;
    ++tls_writes_;
    asio::async_write(*tls_, asio::buffer(bytes),
                      asio::bind_executor(strand_, [self = shared_from_this(), stream = tls_,
                                                    generation = stream_generation_](error_code ec, std::size_t n) {
                        if (--self->tls_writes_ == 0) self->serve_done_.cancel();
                        self->on_written(generation, ec, n);
                      }));
  }

  void on_written(std::uint64_t generation, error_code ec, std::size_t n) {
    if (generation != stream_generation_) return;  // the stream it wrote to was reset
    writing_ = false;
    inc(stats_.bytes_written, n);
    if (ec) {
      write_error_ = ec;
      if (flush_then_close_) return close_on_strand();
      error_code ignored;
      socket_.close(ignored);  // the reader notices and the connection resets
      return;
    }
    start_write();
    flushed();
  }

  // The reader: read, hand the bytes to the multiplexer, let it route what is complete. One reply
  // costs one scheduler pass: the read's completion, which runs the replies' sinks in place.
  void start_read() {
    const auto space = mux_.read_space();
    if (tls_) {
      tls_->async_read_some(
          asio::buffer(space.data(), space.size()),
          asio::bind_executor(strand_, [self = shared_from_this(), stream = tls_, generation = stream_generation_](
                                           error_code ec, std::size_t n) { self->on_read(generation, ec, n); }));
      return;
    }
    socket_.async_read_some(
        asio::buffer(space.data(), space.size()),
        [self = shared_from_this(), generation = stream_generation_](error_code ec, std::size_t n) {
          auto* me = self.get();
          me->enter_strand([self = std::move(self), generation, ec, n] { self->on_read(generation, ec, n); });
        });
  }

  void on_read(std::uint64_t generation, error_code ec, std::size_t n) {
    if (generation != stream_generation_) return;
    if (!ec && closing_) ec = asio::error::operation_aborted;
    if (!ec) {
      inc(stats_.bytes_read, n);
      mux_.commit_read(n);
      ec = dispatch_replies();
      if (!ec && overdue_ && !mux_.overdue()) {
        // The late replies came: the stream is in step again, on the same socket.
        overdue_ = false;
        REDLOCK_LOG(log_, log_level::debug, "the overdue replies came: accepting requests again");
        notify_up();
      }
      if (!ec && !closing_) {
        start_read();
        return;
      }
      if (!ec) ec = asio::error::operation_aborted;
    }
    read_error_ = ec;
    reading_ = false;
    serve_done_.cancel();
  }

  // What dispatch tells about each message: counters and logs.
  auto note_read() {
    return [this](detail::read_event e) {
      switch (e) {
        case detail::read_event::push: {
          inc(stats_.pushes);
          std::lock_guard lock{status_mutex_};
          ++status_.pushes;
          break;
        }
        case detail::read_event::reply:
          inc(stats_.replies);
          break;  // before its handler runs
        case detail::read_event::dropped: {
          inc(stats_.dropped_replies);
          REDLOCK_LOG(log_, log_level::debug, "dropped a late reply (its request had timed out or been cancelled)");
          std::lock_guard lock{status_mutex_};
          ++status_.dropped_replies;
          break;
        }
        case detail::read_event::unsolicited:
          // A reply nobody asked for: the stream cannot be trusted.
          REDLOCK_LOG(log_, log_level::error, "the node sent a reply nobody asked for: dropping the connection");
          break;
      }
    };
  }

  error_code dispatch_replies() {
    return mux_.dispatch(completer(), note_read(), [this](resp::response& push) {
      // Out of band (a pub/sub message): in place, as replies are.
      if (auto o = observer_.lock()) o->on_push(observer_index_, push);
    });
  }

  // ---- the lock client's observer (master_link) ----------------------------------------------

 public:
  void observe(std::weak_ptr<detail::link_observer> o, std::size_t index) {
    observer_ = std::move(o);
    observer_index_ = index;
  }

 private:
  void notify_up() {
    if (auto o = observer_.lock()) o->on_link_up(observer_index_);
  }
  void notify_failed(error_code ec) {
    if (auto o = observer_.lock()) o->on_link_failed(observer_index_, ec);
  }
  void notify_down() {
    if (auto o = observer_.lock()) o->on_link_down(observer_index_);
  }

  // ---- status -----------------------------------------------------------------------------

  void set_state(connection_state s) {
    state_ = s;
    std::lock_guard lock{status_mutex_};
    status_.state = s;
  }

  void record_error(error_code ec, std::string_view text) {
    std::lock_guard lock{status_mutex_};
    status_.last_error = ec;
    status_.last_error_text = text;
  }

  socket_type socket_;
  std::shared_ptr<asio::ssl::context> tls_ctx_;  // set when TLS is on
  std::shared_ptr<tls_stream> tls_;              // the current connection's TLS layer, if any
  std::size_t tls_writes_ = 0;                   // TLS writes not completed yet (see serve())
  std::size_t handshake_bytes_read_ = 0;         // bytes of the current attempt's Redis handshake
  std::shared_ptr<socket_type> tls_probe_;       // see probe_plain()
  bool tls_plain_port_ = false;                  // probe_plain() found plain RESP on the TLS port
  asio::steady_timer serve_done_;                // wakes serve() when the reader stops
  asio::steady_timer deadline_timer_;
  asio::steady_timer aux_timer_;        // connect timeout, then reconnect backoff
  asio::steady_timer flush_timer_;      // bounds close_after_writes
  asio::steady_timer tls_nudge_timer_;  // see tls_handshake()
  bool flush_then_close_ = false;       // close_after_writes: close once the queue is written
  detail::multiplexer<pending> mux_;
  std::minstd_rand rng_;
  std::optional<run_handler> run_handler_;
  error_code write_error_;
  clock::time_point armed_deadline_ = clock::time_point::max();
  std::uint64_t deadline_generation_ = 0;
  connection_state state_ = connection_state::idle;
  bool closing_ = false;
  bool writing_ = false;                 // an async_write is in progress
  bool reading_ = false;                 // the reader runs (serve() waits for it)
  error_code read_error_;                // why the reader stopped
  std::uint64_t stream_generation_ = 0;  // bumped when the stream resets
  std::uint64_t connect_generation_ = 0;
  bool connect_timed_out_ = false;
  bool stalled_ = false;                 // declare_stalled() closed the current stream
  bool suspect_ = false;                 // since a stall or a failed attempt, until the next connect succeeds
  bool overdue_ = false;                 // up, but a written request timed out and its reply is still owed
  bool fail_fast_when_overdue_ = false;  // a master_link's connection (see accepting())
  std::weak_ptr<detail::link_observer> observer_;
  std::size_t observer_index_ = 0;
  std::atomic<std::uint64_t> next_id_{0};
  std::atomic<bool> run_requested_{false};  // master_link::run() was called
  std::atomic<int> protocol_{0};            // RESP version of the current connection, 0 when none

  mutable std::mutex status_mutex_;
  connection_status status_;

  counters stats_;
  detail::logger log_;
};

connection::connection(executor_type ex, connection_config cfg)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(cfg))) {}

connection::~connection() {
  if (impl_) impl_->close();
}

connection::executor_type connection::get_executor() const noexcept { return impl_->ex_; }
const connection_config& connection::config() const noexcept { return impl_->cfg_; }

void connection::start_exec(exec_handler h, resp::request req, clock::duration timeout) {
  impl_->exec(std::move(h), std::move(req), timeout);
}

void connection::start_run(run_handler h) { impl_->run(std::move(h)); }

void connection::close() { impl_->close(); }

connection_status connection::status() const { return impl_->status(); }

connection_stats connection::stats() const { return impl_->stats(); }

// ---- detail::master_link ----------------------------------------------------------------------

namespace detail {

master_link::master_link(strand_type strand, connection_config cfg)
    : impl_(std::make_shared<connection::impl>(std::move(strand), std::move(cfg))) {}

master_link::~master_link() {
  if (impl_) impl_->close();
}

void master_link::run() { impl_->run_detached(); }

void master_link::observe(std::weak_ptr<link_observer> o, std::size_t index) { impl_->observe(std::move(o), index); }

void master_link::close() { impl_->close(); }

void master_link::close_after_writes(clock::duration limit) { impl_->close_after_writes(limit); }

error_code master_link::submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                               std::shared_ptr<reply_sink> sink, std::uint64_t tag, bool push_confirmed) {
  return impl_->submit(payload, replies, deadline, std::move(sink), tag, push_confirmed);
}

int master_link::protocol() const noexcept { return impl_->protocol(); }

connection_status master_link::status() const { return impl_->status(); }

connection_stats master_link::stats() const { return impl_->stats(); }

const connection_config& master_link::config() const noexcept { return impl_->cfg_; }

}  // namespace detail

#undef REDLOCK_LOG

}  // namespace redlock
