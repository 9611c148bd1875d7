// SPDX-License-Identifier: BSL-1.0
#pragma once
// What a lock client's master connection learns of its node in the handshake (private to src/).

#include <redlock/core/hazard_guard.hpp>

#include <optional>

namespace redlock::detail {

/// For the hazard guard: `INFO server` and `TIME`, each asked when its flag is set.
struct node_facts {
  bool identify = false;                  ///< ask `INFO server`; set by the link's observer
  bool ask_time = false;                  ///< ask `TIME`; set by the link's observer
  core::node_identity identity;           ///< what INFO said
  std::optional<core::time_sample> time;  ///< TIME, with when it was sent and answered
  std::size_t node = 0;                   ///< a cluster master's node that said it (its map number)
};

}  // namespace redlock::detail
