// SPDX-License-Identifier: BSL-1.0
// The smallest useful program on redlock-asio: try a lock once and say what happened. With no
// master listening it must report the outage (quorum_unavailable), which proves that headers,
// library and dependencies link and run together. It also uses one of Asio's deprecated
// interfaces (io_context::post), as existing services do: linking redlock must not take it away.
#include <redlock/redlock.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#ifdef BOOST_ASIO_NO_DEPRECATED
#error "redlock imposed BOOST_ASIO_NO_DEPRECATED on its consumer"
#endif

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (std::strcmp(redlock::library_version(), redlock::version_string) != 0) return 3;
  redlock::client_config cfg;
  if (auto ec = redlock::parse_masters(argc > 1 ? argv[1] : "127.0.0.1:1", cfg.masters)) return 4;
  boost::asio::io_context ioc;
  auto work = boost::asio::make_work_guard(ioc);
  std::promise<void> posted;
  ioc.post([&] { posted.set_value(); });  // deprecated, but the user's to use
  std::thread io{[&] { ioc.run(); }};
  posted.get_future().get();
  redlock::client locks{ioc.get_executor(), cfg};
  auto result = locks.async_try_lock("consumer:demo", 5s, boost::asio::use_future);
  int status = 0;
  try {
    auto lock = result.get();
    std::printf("redlock %s: acquired, validity until +%lld ms\n", redlock::version_string,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(lock.validity_deadline() -
                                                                                             redlock::clock::now())
                                           .count()));
    lock.async_unlock(boost::asio::use_future).get();
  } catch (const boost::system::system_error& e) {
    std::printf("redlock %s: %s\n", redlock::version_string, e.code().message().c_str());
    status = e.code() == redlock::error::quorum_unavailable ? 0 : 1;
  }
  locks.close();
  work.reset();
  io.join();
  return status;
}
