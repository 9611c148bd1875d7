// Noise-free cost of one lock+unlock cycle in the client: heap allocations per cycle (counted by
// this binary's operator new) and, when run under `valgrind --tool=callgrind`, instructions per
// cycle. Both are taken as the difference between two runs of different lengths, so start-up and
// connection set-up cancel out.
//
// Usage: cycle_cost_bench CYCLES         (prints "cycles=N allocations=A")
//        bench/run.sh runs it twice under callgrind and divides.

#include <redlock/client.hpp>
#include <redlock_test/redis_cluster.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

namespace {
std::atomic<unsigned long> allocations{0};
std::atomic<bool> counting{false};
}  // namespace

void* operator new(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t align) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::aligned_alloc(static_cast<std::size_t>(align), (size + static_cast<std::size_t>(align) - 1) &
                                                                        ~(static_cast<std::size_t>(align) - 1)))
    return p;
  throw std::bad_alloc();
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

int main(int argc, char** argv) {
  namespace asio = boost::asio;
  using namespace std::chrono_literals;
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 1000;
  redlock::test::redis_cluster cluster{5};
  asio::io_context ioc{1};
  redlock::client_config cfg;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    redlock::connection_config m;
    m.host = cluster[i].host();
    m.port = cluster[i].port();
    cfg.masters.push_back(m);
  }
  redlock::client c{ioc.get_executor(), cfg};
  long failures = 0;
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        constexpr auto tuple = asio::as_tuple(asio::use_awaitable);
        for (int i = 0; i < 50; ++i) {  // warm-up: connections up, scripts cached, pools filled
          auto [ec, l] = co_await c.async_lock("cost", 10s, tuple);
          if (!ec) co_await l.async_unlock(tuple);
        }
        counting = true;
        for (int i = 0; i < cycles; ++i) {
          auto [ec, l] = co_await c.async_lock("cost", 10s, tuple);
          if (ec) {
            ++failures;
            continue;
          }
          co_await l.async_unlock(tuple);
        }
        counting = false;
        done = true;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  while (!done) ioc.run_one();
  std::printf("cycles=%d allocations=%lu failures=%ld\n", cycles, allocations.load(), failures);
  c.close();
  ioc.run_for(50ms);
  return failures == 0 ? 0 : 1;
}
