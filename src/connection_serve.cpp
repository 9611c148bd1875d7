// SPDX-License-Identifier: BSL-1.0
// The connection's life and its bytes: the run loop that carries out core::link_fsm's steps, what
// coming up and going down entail, and the reader and the writer while the connection serves.

#include "detail/connection_impl.hpp"
#include "detail/failure_words.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <memory>
#include <utility>

namespace redlock {

namespace asio = boost::asio;
using boost::system::error_code;
using detail::inc;

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
}  // namespace

void connection::impl::run_on_strand(run_handler h) {
  if (fsm_.state() != connection_state::idle || fsm_.closing()) {
    complete_run(std::move(h), make_error_code(error::invalid_argument));
    return;
  }
  std::string what;
  error_code ec = validate(cfg_, &what);
  // validate() loaded the TLS files already; a file changed since is reported the same way.
  if (!ec) ec = stream_.load_tls(&what);
  if (ec) {
    REDLOCK_LOG(log_, log_level::error, "invalid configuration: {}", what);
    record_error(ec, what);
    (void)fsm_.on_close();
    publish_state();
    // Internal requests may have queued since master_link::run() (never public ones).
    mux_.fail_all(make_error_code(error::not_connected), make_error_code(error::not_connected), completer());
    complete_run(std::move(h), ec);
    return;
  }
  (void)fsm_.start();
  run_handler_.emplace(std::move(h));  // not assignment: see `pending`
  publish_state();
  asio::co_spawn(strand_, run_loop(), [self = shared_from_this()](std::exception_ptr e) {
    // Only allocation failure can escape the loop; say so instead of looking like close().
    if (e) self->record_error(make_error_code(boost::system::errc::not_enough_memory), "");
    self->finish_run();
  });
}

asio::awaitable<void> connection::impl::run_loop() {
  abandon_guard guard{*this};
  std::string server_text;  // the node's own words about the current attempt's failure
  core::link_step s = fsm_.next_attempt();
  for (;;) {
    publish_state();
    switch (s.type) {
      case core::link_step::kind::connect: {
        inc(stats_.connect_attempts);
        REDLOCK_LOG(log_, log_level::debug, "connecting (attempt {})", fsm_.failed_attempts() + 1);
        set_protocol(0);
        server_text.clear();
        arm_attempt_timer();
        const error_code ec = co_await stream_.connect(s.race);
        s = fsm_.on_connected(ec, unit_random());
        break;
      }
      case core::link_step::kind::tls: {
        const error_code ec = co_await stream_.handshake_tls(server_text, shared_from_this());
        s = fsm_.on_tls_done(ec, unit_random());
        break;
      }
      case core::link_step::kind::handshake: {
        int protocol = 0;
        error_code ec =
            co_await detail::redis_handshake(stream_, mux_.reader(), cfg_, log_, stats_, protocol, server_text, facts_);
        if (!ec) set_protocol(protocol);
        const bool hung_up = ec && stream_.hung_up_unanswered(ec);
        if (ec) ec = stream_.classify(ec, server_text);
        s = fsm_.on_handshake_done(ec, hung_up, unit_random());
        break;
      }
      case core::link_step::kind::serve: {
        attempt_timer_.cancel();
        server_text.clear();
        came_up(s);
        const error_code ec = co_await serve();
        set_protocol(0);
        s = fsm_.on_stream_ended(ec, unit_random());
        break;
      }
      case core::link_step::kind::back_off:
        attempt_timer_.cancel();
        went_down(s.failure, server_text);
        backoff_timer_.expires_after(s.failure.delay);
        co_await backoff_timer_.async_wait(use_tuple);
        s = fsm_.on_backoff_done();
        break;
      case core::link_step::kind::finish:
        attempt_timer_.cancel();
        guard.finished = true;
        co_return;
    }
  }
}

void connection::impl::arm_attempt_timer() {
  attempt_timer_.expires_after(cfg_.connect_timeout);
  attempt_timer_.async_wait([self = shared_from_this(), attempt = fsm_.attempt_id()](error_code ec) {
    if (!ec && self->fsm_.on_connect_timeout(attempt) == core::link_order::close_stream) self->stream_.abort();
  });
}

void connection::impl::came_up(const core::link_step& s) {
  inc(stats_.connects);
  status_.count_connect();
  if (s.first_up) {
    REDLOCK_LOG(log_, log_level::info, "connection up (RESP{})", protocol());
  } else {
    REDLOCK_LOG(log_, log_level::info, "connection up again (RESP{}) after {} failed attempt(s)", protocol(),
                s.failure.failed_attempts);
  }
  refuse_on_resp2();  // before anything can be written
}

void connection::impl::went_down(const core::link_failure& f, std::string& server_text) {
  if (!f.text.empty()) server_text = f.text;
  detail::redact(server_text, {cfg_.password});
  record_error(f.cause, server_text);
  notify_failed(f.cause);  // before the waiting requests fail: the observer can say why
  // Counted before the requests complete, so that their handlers see counters that agree.
  if (f.was_up) {
    inc(stats_.disconnects);
  } else {
    inc(stats_.connect_failures);
    if (f.cause == error::auth_failed) inc(stats_.auth_failures);
  }
  const auto lost_before = stats_.lost();
  const auto unsent_before = stats_.unsent();
  mux_.fail_all(f.written_ec, make_error_code(error::not_connected), completer());
  const auto lost = stats_.lost() - lost_before;
  const auto unsent = stats_.unsent() - unsent_before;
  reset_stream();
  if (f.was_up) notify_down();
  REDLOCK_LOG(log_, f.level, "{}", detail::failure_line(f, server_text, {lost, unsent}, cfg_.password));
}

void connection::impl::finish_run() {
  fsm_.on_run_ended();  // also when an exception ended the loop before the machine finished
  REDLOCK_LOG(log_, log_level::info, "connection closed");
  set_protocol(0);
  reset_stream();
  mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
  publish_state();
  deadline_timer_.cancel();
  attempt_timer_.cancel();
  if (run_handler_) {
    run_handler h = std::move(*run_handler_);
    run_handler_.reset();
    complete_run(std::move(h), asio::error::operation_aborted);
  }
}

void connection::impl::carry_out(core::link_order order) {
  switch (order) {
    case core::link_order::none:
    case core::link_order::flush:
      return;
    case core::link_order::close_stream:
      return stream_.close();  // the reader notices and the connection is replaced
    case core::link_order::abort_stream:
      return stream_.abort_close();
    case core::link_order::complete_idle:
      flush_timer_.cancel();
      publish_state();
      mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
      return;
    case core::link_order::close_now:
      flush_timer_.cancel();
      stream_.abort();  // the step in progress (reader, writer, connect) ends with operation_aborted
      backoff_timer_.cancel();
      // Complete now rather than when the run loop unwinds: close() promises prompt completion.
      mux_.fail_all(asio::error::operation_aborted, asio::error::operation_aborted, completer());
      return;
  }
}

bool connection::impl::flushed() {
  if (!fsm_.flushed(stream_.writing(), mux_.has_waiting())) return false;
  close_on_strand();
  return true;
}

void connection::impl::reset_stream() {
  stream_.reset();
  mux_.reset_read();
  write_error_ = {};
  write_deferred_ = false;
}

asio::awaitable<error_code> connection::impl::serve() {
  reading_ = true;
  read_error_ = {};
  stream_.start_serving();
  if (auto o = observer_.lock()) o->on_link_identified(observer_index_, facts_);
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
  co_await stream_.close_and_drain();  // a write in progress ends too
  if (write_error_ && (!ec || ec == asio::error::operation_aborted)) ec = write_error_;
  write_error_ = {};
  co_return ec;
}

void connection::impl::start_write(bool wake_end) {
  if (stream_.writing() || !fsm_.writable() || !mux_.has_waiting()) return;
  // Inside the poller's wake-up, what the replies cause waits for its end (at_wake_end): all of
  // it in one write, with no completion pass (docs/benchmarks.md, "System calls").
  if (!wake_end && (write_deferred_ || (write_deferred_ = stream_.defer_write(shared_from_this())))) return;
  const auto in_flight_before = mux_.in_flight();
  std::string_view bytes = mux_.prepare_write();
  const auto batch = mux_.in_flight() - in_flight_before;
  inc(stats_.written, batch);
  REDLOCK_LOG(log_, log_level::trace, "writing {} request(s), {} bytes", batch, bytes.size());
  if (in_flight_before == 0 || wake_end) {
    // An idle connection (the latency-bound case), or the end of a wake-up (everything of the
    // pass is queued): write at once. The socket's buffer is (nearly) empty, so the bytes
    // almost always go out whole and the write costs no completion pass. Elsewhere a busy
    // connection keeps coalescing what queues behind a write in flight.
    error_code ec;
    const std::size_t n = stream_.write_now(bytes, ec);
    inc(stats_.bytes_written, n);
    if (ec) return write_failed_inline(ec);
    if (n == bytes.size()) return;
    bytes.remove_prefix(n);
  }
  stream_.write_async(bytes, [self = shared_from_this()](error_code ec, std::size_t n) { self->on_written(ec, n); });
}

void connection::impl::on_written(error_code ec, std::size_t n) {
  inc(stats_.bytes_written, n);
  if (ec) return write_failed(ec);
  start_write();
  flushed();
  trim_if_idle();
}

void connection::impl::trim_if_idle() {
  // A burst's queue and buffers are given back once it is over (nothing queued, no write whose
  // bytes are still in use).
  if (mux_.empty() && !stream_.writing()) mux_.trim();
}

void connection::impl::write_failed(error_code ec) {
  write_error_ = ec;
  carry_out(fsm_.on_write_failed());
}

void connection::impl::write_failed_inline(error_code ec) {
  write_error_ = ec;
  stream_.close();
  if (fsm_.closing_after_writes()) asio::post(strand_, [self = shared_from_this()] { self->close_on_strand(); });
}

void connection::impl::start_read() {
  const auto space = mux_.read_space();
  if (stream_.polled()) return stream_.read_polled(asio::buffer(space.data(), space.size()), shared_from_this());
  stream_.read_some(asio::buffer(space.data(), space.size()),
                    [self = shared_from_this()](error_code ec, std::size_t n) { self->on_read(ec, n); });
}

void connection::impl::at_wake_end() {
  write_deferred_ = false;
  start_write(true);
  flushed();  // a connection closing after its writes closes once they are out
}

void connection::impl::on_read(error_code ec, std::size_t n) {
  if (!ec && fsm_.closing()) ec = asio::error::operation_aborted;
  if (!ec) {
    inc(stats_.bytes_read, n);
    mux_.commit_read(n);
    try {
      ec = dispatch_replies();
    } catch (...) {
      // A completion run in place threw (one dispatched on a strand of the caller's, which
      // Asio does not catch there): the replies after it cannot be trusted to be where the
      // stream left them, so the connection is replaced, and the exception goes on to run().
      read_error_ = make_error_code(error::connection_lost);
      reading_ = false;
      serve_done_.cancel();
      throw;
    }
    if (!ec && fsm_.overdue() && !mux_.overdue() && fsm_.on_overdue(false)) {
      // The late replies came: the stream is in step again, on the same socket.
      REDLOCK_LOG(log_, log_level::debug, "the overdue replies came: accepting votes again");
      notify_up();
    }
    if (!ec && !fsm_.closing()) {
      trim_if_idle();
      start_read();
      return;
    }
    if (!ec) ec = asio::error::operation_aborted;
  }
  read_error_ = ec;
  reading_ = false;
  serve_done_.cancel();
}

auto connection::impl::note_read() {
  return [this](detail::read_event e) {
    status_.count(e);
    if (e == detail::read_event::push) {
      inc(stats_.pushes);
    } else if (e == detail::read_event::reply) {
      inc(stats_.replies);  // before its handler runs
    } else if (e == detail::read_event::dropped) {
      inc(stats_.dropped_replies);
      REDLOCK_LOG(log_, log_level::debug, "dropped a late reply (its request had timed out or been cancelled)");
    } else {
      // A reply nobody asked for: the stream cannot be trusted.
      REDLOCK_LOG(log_, log_level::error, "the node sent a reply nobody asked for: dropping the connection");
    }
  };
}

error_code connection::impl::dispatch_replies() {
  return mux_.dispatch(completer(clock::now()), note_read(), [this](resp::response& push) {
    // Out of band (a pub/sub message): in place, as replies are.
    if (auto o = observer_.lock()) o->on_push(observer_index_, push);
  });
}

#undef REDLOCK_LOG

}  // namespace redlock
