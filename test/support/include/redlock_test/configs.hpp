// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Client configurations pointing at a test bed's masters, tuned for tests (short connect timeout
/// and reconnect backoff, so faults show quickly).

#include <redlock/config.hpp>
#include <redlock_test/master_set.hpp>

#include <chrono>

namespace redlock::test {

inline client_config client_config_for(master_set& servers,
                                       std::chrono::milliseconds request_timeout = std::chrono::milliseconds{200}) {
  using namespace std::chrono_literals;
  client_config cfg;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    connection_config m;
    m.host = servers[i].host();
    m.port = servers[i].port();
    m.connect_timeout = 300ms;
    m.reconnect = {10ms, 100ms, 0.5};
    cfg.masters.push_back(m);
  }
  cfg.request_timeout = request_timeout;
  // The test bed's masters were just started: every one would be quarantined as restarted for
  // the first `restart_quarantine` (about a minute). Tests of the restart guard turn it on.
  cfg.guard.restarts = restart_detection::off;
  return cfg;
}

}  // namespace redlock::test
