// SPDX-License-Identifier: BSL-1.0
// The connection's requests: the public async_exec path, the lock client's submit() path, their
// cancellation and deadlines; the public connection's members and detail::master_link, the lock
// client's path to a connection that runs on the client's own strand.

#include "detail/cluster_link.hpp"
#include "detail/connection_impl.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <memory>
#include <utility>

namespace redlock {

namespace asio = boost::asio;
using boost::system::error_code;
using detail::inc;

void connection::impl::exec(handler_type h, resp::request req, clock::duration timeout) {
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

void connection::impl::run(run_handler h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  if (slot.is_connected()) {
    slot.assign([w = weak_from_this()](asio::cancellation_type type) {
      if (!!(type & asio::cancellation_type::terminal)) {
        if (auto self = w.lock()) self->close();
      }
    });
  }
  asio::post(strand_, [self = shared_from_this(), h = std::move(h)]() mutable { self->run_on_strand(std::move(h)); });
}

void connection::impl::close() {
  asio::post(strand_, [self = shared_from_this()] { self->close_on_strand(); });
}

void connection::impl::close_after_writes(clock::duration limit) {
  asio::post(strand_, [self = shared_from_this(), limit] {
    const auto order = self->fsm_.on_close_after_writes();
    if (order != core::link_order::flush) return self->carry_out(order);
    self->start_write();
    if (self->flushed()) return;
    self->flush_timer_.expires_after(limit);
    self->flush_timer_.async_wait([self](error_code ec) {
      if (!ec) self->close_on_strand();
    });
  });
}

void connection::impl::run_detached() {
  run_requested_.store(true, std::memory_order_relaxed);
  run(run_handler{[](error_code) {}});
}

error_code connection::impl::submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
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
  // A vote is refused while a written request is overdue (core::link_fsm::accepting_votes).
  // Requests queue from run() on: its post may not have reached the strand yet, and a caller
  // that just started the link should not see it as down.
  const bool starting = fsm_.state() == connection_state::idle && run_requested_.load(std::memory_order_relaxed);
  if ((!fsm_.accepting_votes() && !starting) || fsm_.closing()) {
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

void connection::impl::observe(std::weak_ptr<detail::link_observer> o, std::size_t index, bool identify,
                               bool ask_time) {
  observer_ = std::move(o);
  observer_index_ = index;
  facts_.identify = identify;
  facts_.ask_time = ask_time;
}

void connection::impl::complete(handler_type h, error_code ec, resp::response r) {
  detail::complete_handler(std::move(h), ex_, ec, std::move(r));
}

void connection::impl::exec_on_strand(std::uint64_t id, handler_type h, resp::request req, clock::duration timeout) {
  inc(stats_.requests);
  if (req.empty() || timeout <= clock::duration::zero()) {
    inc(stats_.invalid);
    complete(std::move(h), make_error_code(error::invalid_argument), {});
    return;
  }
  // Fail fast while the node is known to be unreachable instead of holding the caller until
  // its deadline (core::link_fsm::accepting).
  if (!fsm_.accepting()) {
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

void connection::impl::cancel_request(std::uint64_t id, asio::cancellation_type type) {
  const bool after_write = !!(type & (asio::cancellation_type::terminal | asio::cancellation_type::partial));
  if (mux_.cancel(id, after_write, asio::error::operation_aborted, completer())) {
    REDLOCK_LOG(log_, log_level::trace, "request cancelled by its caller");
  }
}

void connection::impl::arm_deadline(clock::time_point tp) {
  if (tp >= armed_deadline_) return;
  armed_deadline_ = tp;
  const auto generation = ++deadline_generation_;
  deadline_timer_.expires_at(tp);
  deadline_timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
    if (ec || generation != self->deadline_generation_) return;  // re-armed or cancelled
    self->on_deadline();
  });
}

void connection::impl::on_deadline() {
  armed_deadline_ = clock::time_point::max();
  const auto before = detail::read(stats_.timeouts);
  const auto now = clock::now();
  auto next = mux_.expire(now, make_error_code(error::master_timeout), completer());
  if (const auto expired = detail::read(stats_.timeouts) - before; expired > 0) {
    REDLOCK_LOG(log_, log_level::debug,
                "{} request(s) timed out (those already written are abandoned: their late replies will be dropped)",
                expired);
  }
  if (!fsm_.overdue() && mux_.overdue() && fsm_.on_overdue(true)) {
    REDLOCK_LOG(log_, log_level::debug,
                "a written request timed out and its reply is still owed: the lock client's votes fail fast until "
                "it comes or the connection is replaced");
  }
  if (fsm_.watching_stalls() && reading_) {
    const auto stall = mux_.stall_point();
    if (stall <= now) return declare_stalled();
    next = std::min(next, stall);
  }
  // Re-armed no sooner than 1 ms from now: under a backlog every request has a deadline a few
  // microseconds after the previous one, and one expiry pass per request (each a scan of the
  // queue) grows with the square of the requests in flight. A timeout may fire 1 ms late.
  if (next != clock::time_point::max()) arm_deadline(std::max(next, clock::now() + std::chrono::milliseconds{1}));
}

void connection::impl::refuse_on_resp2() {
  if (protocol() != 2) return;
  if (const auto n =
          mux_.refuse_waiting(detail::confirmed_by::push, make_error_code(error::not_supported), completer());
      n > 0) {
    REDLOCK_LOG(log_, log_level::debug, "{} subscription request(s) refused: the connection is RESP2", n);
  }
}

void connection::impl::declare_stalled() {
  if (fsm_.on_stall() != core::link_order::abort_stream) return;
  inc(stats_.stalls);
  REDLOCK_LOG(log_, log_level::warning,
              "{} written request(s) unanswered well past their deadline: the connection is stalled (packet loss, "
              "a partition or a stopped server); replacing it",
              mux_.in_flight());
  publish_state();
  record_error(make_error_code(error::connection_stalled), "");
  stream_.abort_close();  // the reader ends with operation_aborted; the serve step reports the stall
}

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

// A cluster master is a cluster_link (src/cluster_link.cpp) of node links; a plain master is one
// connection. Every member passes to the one that is there.
master_link::master_link(strand_type strand, connection_config cfg, std::shared_ptr<read_poller> poller) {
  if (cfg.cluster.enabled) {
    cluster_ = std::make_shared<cluster_link>(std::move(strand), std::move(cfg), std::move(poller));
  } else {
    impl_ = std::make_shared<connection::impl>(std::move(strand), std::move(cfg), std::move(poller));
  }
}

master_link::~master_link() { close(); }

void master_link::run() { cluster_ ? cluster_->run() : impl_->run_detached(); }

void master_link::observe(std::weak_ptr<link_observer> o, std::size_t index, bool identify, bool ask_time) {
  cluster_ ? cluster_->observe(std::move(o), index, identify, ask_time)
           : impl_->observe(std::move(o), index, identify, ask_time);
}

void master_link::set_restart_quarantine(std::chrono::milliseconds q) {
  if (cluster_) cluster_->set_restart_quarantine(q);
}

void master_link::close() { cluster_ ? cluster_->close() : impl_->close(); }

void master_link::close_after_writes(clock::duration limit) {
  cluster_ ? cluster_->close_after_writes(limit) : impl_->close_after_writes(limit);
}

error_code master_link::submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                               std::shared_ptr<reply_sink> sink, std::uint64_t tag, bool push_confirmed) {
  if (cluster_) return cluster_->submit(payload, replies, deadline, std::move(sink), tag, push_confirmed);
  return impl_->submit(payload, replies, deadline, std::move(sink), tag, push_confirmed);
}

int master_link::protocol() const noexcept { return cluster_ ? cluster_->protocol() : impl_->protocol(); }

connection_status master_link::status() const { return cluster_ ? cluster_->status() : impl_->status(); }

connection_stats master_link::stats() const { return cluster_ ? cluster_->stats() : impl_->stats(); }

const connection_config& master_link::config() const noexcept { return cluster_ ? cluster_->config() : impl_->cfg_; }

std::size_t master_link::answering_node() const noexcept { return cluster_ ? cluster_->answering_node() : 0; }

}  // namespace detail

#undef REDLOCK_LOG

}  // namespace redlock
