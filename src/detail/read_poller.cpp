// SPDX-License-Identifier: BSL-1.0
#include "read_poller.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/version.hpp>

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <exception>
#include <utility>

// The reactor interface this file relies on (read_poller.hpp): Asio 1.81's epoll reactor.
#if BOOST_VERSION / 100 == 1081 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#define REDLOCK_READ_POLLER 1
#include <boost/asio/detail/epoll_reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#else
#define REDLOCK_READ_POLLER 0
#endif

namespace redlock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

#if REDLOCK_READ_POLLER

using reactor_type = asio::detail::epoll_reactor;

struct read_poller::reactor_of {
  reactor_type& reactor;
  reactor_type::per_descriptor_data data = nullptr;
};

// The wait: its "read" is an `epoll_wait` on the set that takes what is ready. The reactor runs it
// at once when the previous one did not find everything (speculatively, as a socket read), else
// when the set turns readable; "exhausted" (fewer events than room) lets the next arm skip the
// speculative call. Its completion enters the strand and hands the events to on_wake().
struct read_poller::wait_op final : asio::detail::reactor_op {
  wait_op(int fd, std::weak_ptr<read_poller> owner)
      : reactor_op(error_code{}, &do_perform, &do_complete), set(fd), poller(std::move(owner)) {}

  int set;
  std::weak_ptr<read_poller> poller;  // the streams keep the poller alive, not its wait
  int ready = 0;
  std::array<epoll_event, 64> events;

  static status do_perform(reactor_op* base) {
    auto* o = static_cast<wait_op*>(base);
    int n;
    do {
      n = ::epoll_wait(o->set, o->events.data(), static_cast<int>(o->events.size()), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      o->ec_ = error_code(errno, asio::error::get_system_category());
      return done;
    }
    if (n == 0) return not_done;
    o->ready = n;
    return static_cast<std::size_t>(n) < o->events.size() ? done_and_exhausted : done;
  }

  // `owner` is null when the io_context is being destroyed: the operation is only freed.
  static void do_complete(void* owner, asio::detail::operation* base, const error_code&, std::size_t) {
    std::unique_ptr<wait_op> op(static_cast<wait_op*>(base));
    if (!owner) return;
    auto self = op->poller.lock();
    if (!self) return;
    auto& strand = self->strand_;
    strand.dispatch([self = std::move(self), op = std::move(op)]() mutable { self->on_wake(std::move(op)); },
                    std::allocator<void>{});
  }
};

read_poller::read_poller(const strand_type& strand) : strand_(strand) {
  set_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (set_ < 0) return;
  // The reactor of the strand's inner executor, as the sockets' (see stream::read_some).
  auto& ctx = asio::query(strand.get_inner_executor(), asio::execution::context);
  auto r = std::make_unique<reactor_of>(reactor_of{asio::use_service<reactor_type>(ctx)});
  r->reactor.init_task();
  if (r->reactor.register_descriptor(set_, r->data) != 0) {
    r->reactor.cleanup_descriptor_data(r->data);
    ::close(std::exchange(set_, -1));
    return;
  }
  reactor_ = std::move(r);
  usable_ = true;
}

read_poller::~read_poller() {
  if (reactor_) {
    // A wait still queued completes with operation_aborted and finds the poller gone.
    // Not `closing`: the set is taken out of the reactor's own epoll set explicitly (one call), so
    // that nothing of it is left there, whoever else may share the descriptor (a fork).
    reactor_->reactor.deregister_descriptor(set_, reactor_->data, false);
    reactor_->reactor.cleanup_descriptor_data(reactor_->data);
  }
  if (set_ >= 0) ::close(set_);
}

void read_poller::arm() {
  auto op = spare_ ? std::move(spare_) : std::make_unique<wait_op>(set_, weak_from_this());
  op->ec_ = {};
  op->ready = 0;
  // Speculative unless bytes may be left unread: then the kernel must look at the set again, which
  // only a re-registration (epoll_ctl) makes it do for an edge-triggered registration.
  reactor_->reactor.start_op(reactor_type::read_op, set_, reactor_->data, op.get(), false,
                             !std::exchange(look_again_, false));
  op.release();   // the reactor's now, until do_complete
  armed_ = true;  // once the wait is in place
}

void read_poller::cancel() noexcept { reactor_->reactor.cancel_ops(set_, reactor_->data); }

#else  // no reactor interface: the poller is not usable, and nothing below is called

struct read_poller::reactor_of {};
struct read_poller::wait_op {
  error_code ec_;
  int ready = 0;
  std::array<epoll_event, 1> events;
};
read_poller::read_poller(const strand_type& strand) : strand_(strand) {}
read_poller::~read_poller() = default;
void read_poller::arm() {}
void read_poller::cancel() noexcept {}

#endif

std::uint64_t read_poller::add(int fd, reader* r) {
  if (!usable_) return 0;
  const std::uint64_t key = ++next_key_;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = key;
  if (::epoll_ctl(set_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    // A socket closed without remove() left the set with its close; EEXIST would mean a
    // descriptor shared with another socket, which our sockets never are: read through Asio.
    return 0;
  }
  entries_.push_back({key, r});
  return key;
}

void read_poller::remove(std::uint64_t key, int fd, bool fd_open) noexcept {
  if (key == 0) return;
  if (fd_open) {
    epoll_event ev{};
    (void)::epoll_ctl(set_, EPOLL_CTL_DEL, fd, &ev);
  }
  std::erase_if(entries_, [key](const entry& e) { return e.key == key; });
  // A pending wait is outstanding work: with no socket left to watch it would keep the
  // io_context's run() from returning after the client closed.
  if (entries_.empty() && armed_) cancel();
}

void read_poller::want() {
  // Not while telling readers: the set is still readable until the last of them has read, and a
  // wait armed now would wake at once for bytes about to be read.
  if (usable_ && !armed_ && !waking_ && !entries_.empty()) arm();
}

void read_poller::on_wake(std::unique_ptr<wait_op> op) {
  armed_ = false;
  const error_code ec = op->ec_;
  const int n = op->ready;
  if (!ec && n == 0) {
    // Only a reactor shutting down (the io_context being destroyed) completes a wait that found
    // nothing: nothing is armed again.
    spare_ = std::move(op);
    return;
  }
  if (ec) {
    spare_ = std::move(op);
    // Cancelled by remove() when the set emptied: a socket added since found the wait still armed
    // and relied on it, so look again.
    if (ec == asio::error::operation_aborted) {
      look_again_ = true;
      want();
    }
    return;
  }
  // A full batch may have left ready sockets behind.
  if (static_cast<std::size_t>(n) == op->events.size()) look_again_ = true;
  // What a reader or a task throws (a completion run inline on a strand of the user's, which Asio
  // does not catch there) is rethrown once the wake-up is over: the others are still told, what
  // was put off still goes out, the set is armed again. The first is kept, as Asio keeps one.
  // A reader that threw may have read and left the rest unannounced: the kernel looks again.
  std::exception_ptr thrown;
  auto run = [this, &thrown](auto&& f) {
    try {
      f();
    } catch (...) {
      look_again_ = true;
      if (!thrown) thrown = std::current_exception();
    }
  };
  waking_ = true;
  for (int i = 0; i < n; ++i) {
    // Looked up afresh each time: a reader told before may have removed or added others.
    const auto& event = op->events[static_cast<std::size_t>(i)];
    const std::uint64_t key = event.data.u64;
    // A hang-up or error that came with bytes outlives the one read that takes the bytes, and no
    // later arrival announces it: the next arm makes the kernel look again, as after a full read.
    const bool ends = (event.events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
    const auto it = std::find_if(entries_.begin(), entries_.end(), [key](const entry& e) { return e.key == key; });
    if (it != entries_.end()) {
      if (ends) look_again_ = true;
      run([this, r = it->r] {
        if (r->on_readable()) look_again_ = true;
      });
    }
  }
  spare_ = std::move(op);
  // The tasks, then the flushes, with waking() false so that nothing is put off any more (a
  // write may fail and close its connection, which puts nothing off). No second look for replies
  // before the set is armed again: a cancellation posted by a completion of this wake-up must
  // reach its operation before any reply can (it did when every start was a post of its own).
  running_tasks_ = true;
  for (auto& t : tasks_) run([&t] { std::exchange(t, nullptr)->at_wake_end(); });
  tasks_.clear();
  running_tasks_ = false;
  waking_ = false;
  for (auto& f : flushes_) run([&f] { std::exchange(f, nullptr)->at_wake_end(); });
  flushes_.clear();
  want();
  if (thrown) std::rethrow_exception(thrown);
}

void read_poller::defer(std::shared_ptr<deferred> t, bool flush) {
  (flush ? flushes_ : tasks_).push_back(std::move(t));
}

}  // namespace redlock::detail
