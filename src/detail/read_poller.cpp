// SPDX-License-Identifier: BSL-1.0
#include "read_poller.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <exception>
#include <utility>

namespace redlock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

read_poller::read_poller(const strand_type& strand)
    // On the strand's inner executor, as the sockets are: see stream::read_some.
    : strand_(strand), set_(strand.get_inner_executor()) {
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return;
  error_code ec;
  set_.assign(fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  usable_ = true;
}

read_poller::~read_poller() {
  error_code ignored;
  set_.close(ignored);
}

std::uint64_t read_poller::add(int fd, reader* r) {
  if (!usable_) return 0;
  const std::uint64_t key = ++next_key_;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = key;
  if (::epoll_ctl(set_.native_handle(), EPOLL_CTL_ADD, fd, &ev) != 0) {
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
    (void)::epoll_ctl(set_.native_handle(), EPOLL_CTL_DEL, fd, &ev);
  }
  std::erase_if(entries_, [key](const entry& e) { return e.key == key; });
  // A pending wait is outstanding work: with no socket left to watch it would keep the
  // io_context's run() from returning after the client closed.
  if (entries_.empty() && armed_) {
    error_code ignored;
    set_.cancel(ignored);
  }
}

void read_poller::want() {
  // Not while telling readers: the set is still readable until the last of them has read, and a
  // wait armed now would wake at once for bytes about to be read.
  if (usable_ && !armed_ && !waking_ && !entries_.empty()) arm();
}

void read_poller::arm() {
  // No associated executor: the completion enters the strand itself (see stream::read_some). The
  // wait holds the poller weakly: the streams that use it keep it alive, and the last one to go
  // takes it (and its pending wait) with it.
  set_.async_wait(asio::posix::stream_descriptor::wait_read, [w = weak_from_this()](error_code ec) {
    auto self = w.lock();
    if (!self) return;
    auto& strand = self->strand_;
    strand.dispatch([self = std::move(self), ec] { self->on_wake(ec); }, std::allocator<void>{});
  });
  armed_ = true;  // once the wait is in place (async_wait may throw)
}

void read_poller::on_wake(const error_code& ec) {
  armed_ = false;
  if (ec) {
    // Cancelled by remove() when the set emptied: a socket added since found the wait still armed
    // and relied on it, so look again.
    if (ec == asio::error::operation_aborted) want();
    return;
  }
  std::array<epoll_event, 64> events;
  // What a reader or a task throws (a completion run inline on a strand of the user's, which Asio
  // does not catch there) is rethrown once the wake-up is over: the others are still told, what
  // was put off still goes out, the set is armed again. The first is kept, as Asio keeps one.
  std::exception_ptr thrown;
  auto run = [&thrown](auto&& f) {
    try {
      f();
    } catch (...) {
      if (!thrown) thrown = std::current_exception();
    }
  };
  int n;
  do {
    n = ::epoll_wait(set_.native_handle(), events.data(), static_cast<int>(events.size()), 0);
  } while (n < 0 && errno == EINTR);
  waking_ = true;
  for (int i = 0; i < n; ++i) {
    // Looked up afresh each time: a reader told before may have removed or added others.
    const std::uint64_t key = events[static_cast<std::size_t>(i)].data.u64;
    const auto it = std::find_if(entries_.begin(), entries_.end(), [key](const entry& e) { return e.key == key; });
    if (it != entries_.end()) run([r = it->r] { r->on_readable(); });
  }
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
