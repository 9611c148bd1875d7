// SPDX-License-Identifier: BSL-1.0
#pragma once
// One readiness wait for all the sockets of a strand, TLS or not (private to src/): the lock
// client's masters' connections (and a cluster master's node connections) share it.
//
// Why: Asio 1.81's epoll reactor arms each socket's read on its own, and every arm costs a system
// call: an `async_read_some` first tries the read at once (it fails with EAGAIN when the reply is
// not there yet, which is nearly always, since the connection re-arms right after a reply), and
// an `async_wait` re-registers the socket with `epoll_ctl`. That is one call per reply beyond the
// read itself. Here the sockets sit in an epoll set of our own (level-triggered, each added once
// per connection), registered with Asio's reactor like a socket, and one wait on that set stands
// for all of them. The wait is a reactor operation of our own whose "read" is the `epoll_wait` on
// the set: the reactor runs it when the set turns readable, and re-arming it after a wake-up that
// found everything costs no system call (Asio's speculative-read rule, which a socket read cannot
// use without failing with EAGAIN). A wake-up costs the reactor's wait and one `epoll_wait` on the
// set, however many replies it brings, and every read it triggers finds data.
// docs/benchmarks.md, "System calls per lock+unlock".
//
// Level-triggered, so a socket with unread bytes keeps the set readable: a reader that is told
// its socket is ready must read it or be removed (`remove`), or the wait would spin. The reactor
// watches the set edge-triggered, so what a wake-up left unread brings no new edge (every new
// arrival does): bytes a full read left behind (the reader says so), and a hang-up or error that
// came with the bytes the read took (the event says so; a master killed right after its reply).
// Then the next arm asks the kernel to look again (`epoll_ctl`).
//
// The operation uses Asio's reactor interface (boost::asio::detail), which is not a public API:
// it is built for the Boost version the project requires (1.81) with its epoll reactor; with any
// other Boost, or the io_uring backend, the poller is not usable and the sockets read through Asio.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace redlock::detail {

class read_poller : public std::enable_shared_from_this<read_poller> {
 public:
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;

  /// Told that its socket is readable (or hung up, or failed), on the strand.
  class reader {
   public:
    /// Returns true if bytes may be left unread (the read filled its buffer).
    virtual bool on_readable() = 0;

   protected:
    ~reader() = default;
  };

  /// A poller on `strand`; `usable()` is false when the epoll set cannot be made (the sockets
  /// then read through Asio, as without a poller).
  explicit read_poller(const strand_type& strand);
  ~read_poller();
  read_poller(const read_poller&) = delete;
  read_poller& operator=(const read_poller&) = delete;

  bool usable() const noexcept { return usable_; }

  /// Watches `fd` for `r` until `remove` or until the socket is closed; returns its key, or 0
  /// when the set refuses it (the caller reads through Asio then). On the strand.
  std::uint64_t add(int fd, reader* r);
  /// Stops telling `key`'s reader. `fd_open`: the socket is still open, so the set must drop it
  /// (a closed socket has left the set already). On the strand.
  void remove(std::uint64_t key, int fd, bool fd_open) noexcept;
  /// Makes sure the set is being waited for (a reader wants its next bytes). On the strand.
  void want();

  /// Work put off to the end of the wake-up in progress.
  class deferred {
   public:
    virtual void at_wake_end() = 0;

   protected:
    ~deferred() = default;
  };
  /// On the strand: a wake-up is telling readers, or running what they put off. What the replies
  /// cause (the next requests; operations started by the completions they ran inline) can wait
  /// for the wake-up's end, where it goes out at once, one write per connection, and costs no
  /// scheduler pass of its own (each pass costs a zero-timeout `epoll_wait`).
  bool waking() const noexcept { return waking_; }
  /// Whether a task may be put off: while `waking()`, but not from a task that is running (one
  /// generation per wake-up: an operation that fails at its start and is retried at once from its
  /// completion must cost a scheduler pass per try, or the wake-up would never end).
  bool takes_tasks() const noexcept { return waking_ && !running_tasks_; }
  /// While `waking()` (a task: `takes_tasks()`): `t->at_wake_end()` runs on the strand at the
  /// wake-up's end, before the set is armed again. Tasks run first, in order, then the flushes
  /// (`flush`: a connection's write of what queued meanwhile), during which `waking()` is false.
  void defer(std::shared_ptr<deferred> t, bool flush);

 private:
  struct entry {
    std::uint64_t key;
    reader* r;
  };
  struct wait_op;     // the reactor operation that waits for the set (read_poller.cpp)
  struct reactor_of;  // the reactor's registration of the set
  void arm();
  void cancel() noexcept;
  void on_wake(std::unique_ptr<wait_op> op);

  strand_type strand_;
  int set_ = -1;  // the epoll set
  std::unique_ptr<reactor_of> reactor_;
  std::unique_ptr<wait_op> spare_;  // the operation, between two waits
  std::vector<entry> entries_;
  std::uint64_t next_key_ = 0;
  bool usable_ = false;
  bool armed_ = false;
  bool look_again_ = false;     // bytes may be left unread: the next arm makes the kernel look
  bool waking_ = false;         // on_wake() is telling readers: it re-arms once it has told them all
  bool running_tasks_ = false;  // see takes_tasks()
  std::vector<std::shared_ptr<deferred>> tasks_, flushes_;  // see defer()
};

}  // namespace redlock::detail
