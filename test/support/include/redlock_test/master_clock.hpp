// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The wall clock of a test bed's redis-server, under the test's control: shifted by an offset, or
/// stopped at a time and moved by hand. The server must be started with the clock shim
/// (`with_clock_shim`); its key expiry and `TIME` (and so every script's idea of "now") follow.
/// Header-only, tests only.

#include <redlock_test/master_set.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fcntl.h>
#include <stdexcept>
#include <string>

namespace redlock::test {

/// `options` with the test bed's clock shim preloaded into every server.
inline redis_options with_clock_shim(redis_options options = {}) {
  options.clock_shim = REDLOCK_CLOCK_SHIM_PATH;
  return options;
}

/// Controls one server's wall clock (the file `redis_node::clock_file()`, which the shim maps).
/// Changes are seen by the server's next clock read (Redis reads it for every command). Redis
/// expires a key once its clock is *past* the key's expiry, not at it. Copying is not allowed.
class master_clock {
 public:
  using wall = std::chrono::system_clock;

  explicit master_clock(const redis_node& node) {
    const auto path = node.clock_file();
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("no clock file at " + path.string() + " (start the server with_clock_shim)");
    void* p = ::mmap(nullptr, sizeof(slots), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("cannot map " + path.string());
    slots_ = static_cast<slots*>(p);
  }
  ~master_clock() { ::munmap(slots_, sizeof(slots)); }
  master_clock(const master_clock&) = delete;
  master_clock& operator=(const master_clock&) = delete;

  /// The server's clock runs, `offset` ahead of the real one (behind when negative).
  void shift(std::chrono::nanoseconds offset) {
    std::atomic_ref{slots_->frozen_ns}.store(0);
    std::atomic_ref{slots_->offset_ns}.store(offset.count());
  }
  /// The server's clock stands still at `t`.
  void stop_at(wall::time_point t) {
    std::atomic_ref{slots_->frozen_ns}.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }
  /// Stops the clock where it reads now (on a whole millisecond, as Redis counts), if it runs.
  void stop() {
    if (std::atomic_ref{slots_->frozen_ns}.load() == 0) stop_at(std::chrono::floor<std::chrono::milliseconds>(now()));
  }
  /// Moves a stopped clock by `d` (stopping it first where it reads now).
  void advance(std::chrono::nanoseconds d) {
    stop();
    std::atomic_ref{slots_->frozen_ns}.fetch_add(d.count());
  }
  /// What the server reads now.
  wall::time_point now() const {
    const auto frozen = std::atomic_ref{slots_->frozen_ns}.load();
    if (frozen != 0)
      return wall::time_point{std::chrono::duration_cast<wall::duration>(std::chrono::nanoseconds{frozen})};
    return wall::now() + std::chrono::duration_cast<wall::duration>(
                             std::chrono::nanoseconds{std::atomic_ref{slots_->offset_ns}.load()});
  }
  /// The same in milliseconds since the epoch (how the scripts count).
  std::int64_t now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now().time_since_epoch()).count();
  }

 private:
  struct slots {
    std::int64_t offset_ns;
    std::int64_t frozen_ns;
  };
  slots* slots_ = nullptr;
};

}  // namespace redlock::test
