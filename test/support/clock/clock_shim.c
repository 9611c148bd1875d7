// SPDX-License-Identifier: BSL-1.0
/* A wall clock that a test can shift or stop, for a redis-server it starts (LD_PRELOAD). Only the
 * wall clock (CLOCK_REALTIME: gettimeofday, clock_gettime, time) changes: it is what Redis takes
 * key expiry and `TIME` from. The monotonic clocks stay real, so the server's event loop runs as
 * usual.
 *
 * The clock is a 16-byte file named by REDLOCK_CLOCK_FILE (see redlock_test/master_clock.hpp):
 * two native int64 nanosecond values, `offset` then `frozen`. While `frozen` is not 0, the wall
 * clock reads `frozen` (stopped there); otherwise it reads the real time plus `offset`. The file
 * is mapped shared, so a change is seen by the next call.
 *
 * C, not C++: it is loaded into a server that is not built with the sanitizers the tests may use,
 * and the build's C++ flags carry them. No allocation and no dlsym: the real clock is read with
 * the raw system call, so that an allocator that reads the clock while it initialises (jemalloc,
 * Redis's) cannot recurse into it. */

#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

struct shared_clock {
  int64_t offset_ns;
  int64_t frozen_ns;
};

static const struct shared_clock* mapped = NULL;
static int state = 0; /* 0: not looked yet, 1: mapped, 2: no file (real time) */

static const struct shared_clock* control(void) {
  if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 0) {
    const struct shared_clock* m = NULL;
    const char* path = getenv("REDLOCK_CLOCK_FILE");
    if (path != NULL && *path != '\0') {
      const int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        void* p = mmap(NULL, sizeof(struct shared_clock), PROT_READ, MAP_SHARED, fd, 0);
        syscall(SYS_close, fd);
        if (p != MAP_FAILED) m = (const struct shared_clock*)p;
      }
    }
    mapped = m;
    __atomic_store_n(&state, m ? 1 : 2, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == 1 ? mapped : NULL;
}

static int real_clock(clockid_t id, struct timespec* ts) { return (int)syscall(SYS_clock_gettime, id, ts); }

/* The wall clock as the test wants it, in nanoseconds since the epoch. */
static int64_t wall_ns(void) {
  const struct shared_clock* c = control();
  if (c) {
    const int64_t frozen = __atomic_load_n(&c->frozen_ns, __ATOMIC_RELAXED);
    if (frozen != 0) return frozen;
  }
  struct timespec ts = {0, 0};
  real_clock(CLOCK_REALTIME, &ts);
  const int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  return c ? now + __atomic_load_n(&c->offset_ns, __ATOMIC_RELAXED) : now;
}

int clock_gettime(clockid_t id, struct timespec* ts) {
  if (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE) return real_clock(id, ts);
  const int64_t ns = wall_ns();
  ts->tv_sec = (time_t)(ns / 1000000000);
  ts->tv_nsec = (long)(ns % 1000000000);
  return 0;
}

int gettimeofday(struct timeval* tv, void* tz) {
  (void)tz;
  const int64_t ns = wall_ns();
  tv->tv_sec = (time_t)(ns / 1000000000);
  tv->tv_usec = (suseconds_t)((ns % 1000000000) / 1000);
  return 0;
}

time_t time(time_t* out) {
  const time_t t = (time_t)(wall_ns() / 1000000000);
  if (out != NULL) *out = t;
  return t;
}
