// SPDX-License-Identifier: BSL-1.0
#pragma once
// The timer of every wait in the library: on the library's clock (redlock/clock.hpp), so that a
// deadline computed from a validity and the wait for it agree, suspends included.

#include <redlock/timer.hpp>

namespace redlock::detail {
using timer = redlock::timer;
}  // namespace redlock::detail
