// SPDX-License-Identifier: BSL-1.0
#include "stream.hpp"

#include "log.hpp"
#include <redlock/core/handshake_fsm.hpp>
#include <redlock/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <optional>
#include <vector>

namespace redlock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using clock = redlock::boot_clock;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// The CAs a verification used, for a message: an untrusted certificate is mended by changing them.
std::string trusted_cas(const tls_options& t) {
  if (t.ca_file.empty() && t.ca_dir.empty()) return "the system CA store";
  if (t.ca_dir.empty()) return "CA file " + t.ca_file;
  if (t.ca_file.empty()) return "CA directory " + t.ca_dir;
  return fmt::format("CA file {} and CA directory {}", t.ca_file, t.ca_dir);
}

// What a failed TLS connect means, from OpenSSL's reason (and the verify result); `text` gets
// OpenSSL's own words. Errors that are not TLS's (a refused connect, an AUTH error) pass through.
error_code classify_tls_failure(const error_code& ec, SSL* ssl, const tls_options& tls, std::string& text) {
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
        // OpenSSL's verify result as it is ("self-signed certificate in certificate chain" is
        // about the chain's root, not the master's own certificate), and what was trusted.
        text = fmt::format("{}; trusting {}", text, trusted_cas(tls));
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

// The state of a race of probes, shared with each probe's completion.
struct stream::probe_race {
  explicit probe_race(const strand_type& s) : wake(s) {}
  std::vector<std::unique_ptr<socket_type>> sockets;
  std::optional<std::size_t> winner;
  error_code refused;
  redlock::detail::timer wake;
};

stream::stream(const strand_type& strand, const connection_config& cfg, std::shared_ptr<read_poller> poller)
    : strand_(strand),
      cfg_(cfg),
      // On the strand's inner executor, not the strand: see read_some().
      socket_(strand.get_inner_executor()),
      poller_(std::move(poller)),
      nudge_timer_(strand),
      drained_(strand) {}

stream::~stream() {
  // Out of the set while the descriptor is open: a close leaves it there when a child process
  // inherited the socket, and the level-triggered set would then stay readable for nobody.
  leave_set();
}

void stream::read_polled(asio::mutable_buffer b, std::shared_ptr<read_target> t) {
  polled_buf_ = b;
  polled_ = t;
  if (tls_ && tls_->may_read()) {
    // The session holds bytes (or the end) the socket brought already: no wait for the socket.
    asio::post(strand_, [this, g = generation_, t = std::move(t)] {
      if (g == generation_) deliver_buffered();
    });
    return;
  }
  wait_readable();
}

void stream::wait_readable() {
  if (poll_key_ == 0) poll_key_ = poller_->add(socket_.native_handle(), this);
  if (poll_key_ == 0) {
    // The set refused the socket (a closed one, say): Asio reads it, and tells the same way.
    auto t = std::exchange(polled_, {}).lock();
    if (!t) return;
    read_some(polled_buf_, [target = std::move(t)](error_code ec, std::size_t n) { target->on_stream_read(ec, n); });
    return;
  }
  poller_->want();
}

void stream::deliver_buffered() {
  const auto t = polled_.lock();
  if (!t || !tls_) return;  // told already (the poller came first), or nobody reads now
  error_code ec;
  const std::size_t n = tls_decrypt(*tls_, polled_buf_, ec);
  if (n == 0 && !ec) return wait_readable();
  polled_.reset();
  t->on_stream_read(ec, n);
}

bool stream::on_readable() {
  const auto t = polled_.lock();
  if (!t) {
    // Nobody reads now (the connection stopped reading, at an error or while closing): the
    // level-triggered set would stay readable for these bytes, so the socket leaves it.
    leave_set();
    return false;
  }
  error_code ec;
  if (tls_) {
    std::size_t n = 0;
    if (tls_->may_read()) {
      // What the session holds goes first (a wake-up that came before a posted delivery): the
      // socket's bytes, or its error, wait for the next look, which the return value asks for.
      n = tls_decrypt(*tls_, polled_buf_, ec);
      if (n > 0 || ec) {
        polled_.reset();
        t->on_stream_read(ec, n);
        return true;
      }
    }
    const auto space = tls_->input_space();
    const std::size_t got = socket_.read_some(space, ec);  // non-blocking since start_serving()
    if (ec == asio::error::would_block || ec == asio::error::try_again) return false;
    const bool filled = !ec && got == space.size();
    if (!ec || ec == asio::error::eof) {
      tls_input(*tls_, ec, got);
      n = tls_decrypt(*tls_, polled_buf_, ec);
      if (n == 0 && !ec) return filled;  // a record not whole yet: the read waits on
    }
    polled_.reset();
    t->on_stream_read(ec, n);
    return filled;
  }
  const std::size_t n = socket_.read_some(polled_buf_, ec);  // non-blocking since start_serving()
  if (ec == asio::error::would_block || ec == asio::error::try_again) return false;  // woken for nothing
  polled_.reset();
  const bool filled = !ec && n == polled_buf_.size();
  t->on_stream_read(ec, n);
  return filled;
}

void stream::tls_input(tls_engine& t, const error_code& ec, std::size_t n) noexcept {
  if (ec == asio::error::eof) {
    t.input_ended();
  } else {
    t.commit_input(n);
  }
}

std::size_t stream::tls_decrypt(tls_engine& t, asio::mutable_buffer b, error_code& ec) {
  const std::size_t n = t.read(b, ec);
  if (!writing_ && !t.output().empty()) {
    // Best effort: a failed write shows at the next one, or the read's own error says enough.
    error_code ignored;
    t.consume_output(socket_.write_some(asio::buffer(t.output()), ignored));
  }
  return n;
}

std::size_t stream::tls_write_now(std::string_view bytes, error_code& ec) {
  if ((ec = tls_->write(bytes))) return 0;
  const std::size_t n = socket_.write_some(asio::buffer(tls_->output()), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec.clear();
  tls_->consume_output(n);
  if (ec) return 0;
  if (tls_->output().empty()) return bytes.size();
  tls_staged_ = bytes.size();
  return 0;
}

void stream::leave_set() noexcept {
  if (poll_key_ != 0) poller_->remove(std::exchange(poll_key_, 0), socket_.native_handle(), socket_.is_open());
}

void stream::unpoll() noexcept {
  // Called before the socket closes (see ~stream()).
  leave_set();
  if (auto t = std::exchange(polled_, {}).lock()) {
    try {
      asio::post(strand_, [this, g = generation_, t = std::move(t)] {
        if (g == generation_) t->on_stream_read(asio::error::operation_aborted, 0);
      });
    } catch (...) {
      // Out of memory: the read is lost, as Asio's own aborted read could be.
    }
  }
}

error_code stream::load_tls(std::string* what) {
  if (!cfg_.tls.enabled) return {};
  return make_tls_context(cfg_.tls, tls_ctx_, what);
}

asio::awaitable<error_code> stream::connect(bool race) {
  // A new socket: a read still waiting belonged to the last one (reset() has dropped it already).
  leave_set();
  polled_.reset();
  ++attempt_;
  aborted_ = false;
  plain_port_ = false;
  handshake_bytes_read_ = 0;
  tls_.reset();
  tls_staged_ = 0;
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
    if (aborted_) co_return asio::error::operation_aborted;
    for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  }
  if (race && endpoints.size() == 1) co_return co_await probe_connect(endpoints.front());
  ec = asio::error::host_not_found;
  for (const auto& ep : endpoints) {
    if (aborted_) co_return asio::error::operation_aborted;
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

// A SYN lost to a partition is retransmitted by the kernel only after 1 s, then 3 s, so a path
// that heals in between would wait for it. A fresh connect (a new SYN) every probe interval does
// not; the whole is bounded by the connect timeout (the caller's, through abort()).
asio::awaitable<error_code> stream::probe_connect(const asio::ip::tcp::endpoint& ep) {
  const auto r = std::make_shared<probe_race>(strand_);
  race_ = r;
  const asio::generic::stream_protocol::endpoint target{ep};
  while (!aborted_ && !r->winner && !r->refused) {
    r->sockets.push_back(std::make_unique<socket_type>(strand_.get_inner_executor()));
    const std::size_t i = r->sockets.size() - 1;
    r->sockets[i]->async_connect(target, [strand = strand_, r, i](error_code ec) mutable {
      strand.dispatch(
          [r, i, ec] {
            if (r->winner || r->refused || ec == asio::error::operation_aborted) return;
            if (ec) {
              r->refused = ec;
            } else {
              r->winner = i;
            }
            r->wake.cancel();
          },
          std::allocator<void>{});
    });
    r->wake.expires_after(cfg_.connect_probe_interval);
    co_await r->wake.async_wait(use_tuple);
  }
  race_.reset();
  error_code ignored;
  for (std::size_t i = 0; i < r->sockets.size(); ++i) {
    if (i != r->winner) r->sockets[i]->close(ignored);  // their connects end with operation_aborted
  }
  if (aborted_) co_return asio::error::operation_aborted;
  if (r->refused) co_return r->refused;
  socket_.close(ignored);
  socket_ = std::move(*r->sockets[*r->winner]);
  socket_.set_option(asio::ip::tcp::no_delay{true}, ignored);
  co_return error_code{};
}

asio::awaitable<error_code> stream::handshake_tls(std::string& text, std::shared_ptr<void> owner) {
  auto tls = std::make_shared<tls_engine>(tls_ctx_->native_handle());
  tls_ = tls;
  SSL* ssl = tls->native_handle();
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
  // A stopped or slow TLS server leaves the plain probe unanswered, and the attempt ends as it
  // would have (the caller's connect timeout).
  const auto attempt = attempt_;
  nudge_timer_.expires_after(cfg_.connect_timeout / 2);
  nudge_timer_.async_wait([this, attempt, tls, owner](error_code ec) {
    if (ec || attempt != attempt_ || tls_ != tls || aborted_) return;
    if (SSL_get_state(tls->native_handle()) != TLS_ST_CW_CLNT_HELLO) return;  // the server answered
    asio::co_spawn(strand_, probe_plain(attempt, owner), asio::detached);
  });
  error_code ec = co_await tls_handshake_steps(tls);
  nudge_timer_.cancel();
  if (auto probe = std::exchange(plain_probe_, nullptr)) {
    error_code ignored;
    probe->close(ignored);
  }
  if (plain_port_) {
    text = "the port answered PING in plain RESP";
    co_return make_error_code(error::tls_not_offered);
  }
  if (ec) ec = classify_tls_failure(ec, ssl, cfg_.tls, text);
  co_return ec;
}

// The handshake's steps: OpenSSL's records go out whole, then the socket's answer comes in, until
// the session is up or fails (its alert, if it made one, sent first). The end of the socket's
// input is `stream_truncated`, other socket errors pass through, as with Asio's SSL stream.
asio::awaitable<error_code> stream::tls_handshake_steps(std::shared_ptr<tls_engine> t) {
  for (;;) {
    bool done = false;
    error_code ec = t->handshake(done);
    if (!t->output().empty()) {
      auto [wec, n] = co_await asio::async_write(socket_, asio::buffer(t->take_output()), use_tuple);
      t->release_wire();
      if (!ec) ec = wec;
    }
    if (ec || done) co_return ec;
    auto [rec, n] = co_await socket_.async_read_some(t->input_space(), use_tuple);
    if (rec && rec != asio::error::eof) co_return rec;
    tls_input(*t, rec, n);
  }
}

// See handshake_tls(): whether the master's port answers plain RESP. `owner` keeps the stream
// alive while the probe runs.
asio::awaitable<void> stream::probe_plain(std::uint64_t attempt, [[maybe_unused]] std::shared_ptr<void> owner) {
  error_code ec;
  const auto target = socket_.remote_endpoint(ec);
  if (ec) co_return;
  const auto probe = std::make_shared<socket_type>(strand_.get_inner_executor());
  plain_probe_ = probe;
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
  if (ec || n == 0 || attempt != attempt_ || aborted_ || (first != '+' && first != '-')) co_return;
  plain_port_ = true;
  socket_.close(ignored);  // the TLS handshake ends with operation_aborted
}

asio::awaitable<std::tuple<error_code, std::size_t>> stream::handshake_write(asio::const_buffer b) {
  if (const auto t = tls_) {
    if (auto ec = t->write({static_cast<const char*>(b.data()), b.size()})) co_return std::tuple{ec, std::size_t{0}};
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(t->take_output()), use_tuple);
    t->release_wire();
    co_return std::tuple{ec, ec ? std::size_t{0} : b.size()};
  }
  auto r = co_await asio::async_write(socket_, b, use_tuple);
  co_return r;
}

asio::awaitable<std::tuple<error_code, std::size_t>> stream::handshake_read(asio::mutable_buffer b) {
  if (const auto t = tls_) {
    for (;;) {
      error_code ec;
      const std::size_t n = t->read(b, ec);
      if (ec && !t->output().empty()) {
        // The session's alert goes to the node before the connection ends, as in the TLS handshake.
        (void)co_await asio::async_write(socket_, asio::buffer(t->take_output()), use_tuple);
        t->release_wire();
      }
      if (n > 0 || ec) {
        handshake_bytes_read_ += n;
        co_return std::tuple{ec, n};
      }
      auto [rec, got] = co_await socket_.async_read_some(t->input_space(), use_tuple);
      if (rec && rec != asio::error::eof) co_return std::tuple{rec, std::size_t{0}};
      tls_input(*t, rec, got);
    }
  }
  auto [ec, n] = co_await socket_.async_read_some(b, use_tuple);
  if (handshake_bytes_read_ == 0) {
    // The first answer of a plain connection. A TLS port resets it (the HELLO is left unread when
    // the first bytes are not a TLS record) or sends an alert record. A plain close (eof) stays
    // what it is: a node that hangs up is not necessarily a TLS port.
    const auto* first = static_cast<const unsigned char*>(b.data());
    const bool tls_record = !ec && n > 0 && (first[0] == 0x15 || first[0] == 0x16);
    if (ec == asio::error::connection_reset || tls_record)
      co_return std::tuple{make_error_code(error::tls_expected), std::size_t{0}};
  }
  if (!ec) handshake_bytes_read_ += n;
  co_return std::tuple{ec, n};
}

error_code stream::classify(error_code ec, std::string& text) const {
  if (!ec || !tls_) return ec;
  return classify_tls_failure(ec, tls_->native_handle(), cfg_.tls, text);
}

bool stream::hung_up_unanswered(const error_code& ec) const noexcept {
  return tls_ && handshake_bytes_read_ == 0 &&
         (ec == asio::error::connection_reset || ec == asio::error::eof || ec == asio::error::broken_pipe ||
          ec == asio::ssl::error::stream_truncated);
}

void stream::abort() {
  aborted_ = true;
  unpoll();  // before the close: see ~stream()
  error_code ignored;
  socket_.close(ignored);
  if (race_) race_->wake.cancel();
}

void stream::start_serving() {
  // Synchronous writes (write()'s first try) must never block the strand.
  error_code ignored;
  socket_.non_blocking(true, ignored);
}

void stream::close() noexcept {
  unpoll();  // before the close: see ~stream()
  error_code ignored;
  socket_.close(ignored);
}

void stream::abort_close() noexcept {
  error_code ignored;
  socket_.set_option(asio::socket_base::linger(true, 0), ignored);
  unpoll();  // before the close: see ~stream()
  socket_.close(ignored);
}

asio::awaitable<void> stream::close_and_drain() {
  close();
  while (tls_writes_ > 0) {
    drained_.expires_at(clock::time_point::max());
    co_await drained_.async_wait(use_tuple);
  }
}

void stream::reset() noexcept {
  close();
  tls_.reset();
  tls_staged_ = 0;
  ++generation_;
  writing_ = false;
}

// ---- the Redis handshake ------------------------------------------------------------------------

namespace {

// Reads `count` replies (handshake only: nothing else is in flight), skipping push messages.
asio::awaitable<error_code> read_replies(stream& s, reply_reader& reader, connection_counters& counters,
                                         std::size_t count, resp::response& out) {
  for (std::size_t got = 0; got < count;) {
    error_code ec;
    switch (reader.next(ec)) {
      case reply_reader::status::reply:
        out.insert(out.end(), reader.reply().begin(), reader.reply().end());
        ++got;
        break;
      case reply_reader::status::push:
        break;
      case reply_reader::status::error:
        co_return ec;
      case reply_reader::status::need_more: {
        const auto space = reader.read_space();
        auto [rec, n] = co_await s.handshake_read(asio::buffer(space.data(), space.size()));
        if (rec) co_return rec;
        inc(counters.bytes_read, n);
        reader.commit_read(n);
        break;
      }
    }
  }
  co_return error_code{};
}

}  // namespace

asio::awaitable<error_code> redis_handshake(stream& s, reply_reader& reader, const connection_config& cfg,
                                            const logger& log, connection_counters& counters, int& protocol,
                                            std::string& server_text, node_facts& facts) {
  core::handshake_fsm fsm{{cfg.username, cfg.password, cfg.client_name, cfg.database, facts.identify, facts.ask_time}};
  clock::time_point sent{};  // when the last write began: TIME runs between it and the read
  resp::response replies;
  error_code ec;
  bool fallback_logged = false;
  for (;;) {
    const core::handshake_action a = fsm.resume(ec, replies);
    ec.clear();
    if (!fallback_logged && !fsm.fallback_reason().empty()) {
      fallback_logged = true;
      REDLOCK_LOG(log, log_level::debug, "the server refused HELLO 3 ({}): falling back to RESP2",
                  printable(fsm.fallback_reason(), 256, {cfg.password}));
    }
    switch (a.type) {
      case core::handshake_action::kind::write: {
        sent = clock::now();
        auto [wec, n] = co_await s.handshake_write(asio::buffer(a.bytes));
        inc(counters.bytes_written, n);
        ec = wec;
        break;
      }
      case core::handshake_action::kind::read:
        replies.clear();
        ec = co_await read_replies(s, reader, counters, a.replies, replies);
        break;
      case core::handshake_action::kind::done:
        if (!a.ec) protocol = a.protocol;
        if (!a.ec && (facts.identify || facts.ask_time)) {
          facts.identity = fsm.identity();
          facts.time.reset();
          if (auto t = fsm.time_us()) facts.time = core::time_sample{sent, clock::now(), *t};
        }
        server_text = a.server_text;
        co_return a.ec;
    }
  }
}

}  // namespace redlock::detail
