// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// An Asio timer on the library's clock. Apart from redlock/clock.hpp so that the headers that only
/// name the clock do not pull in Asio's timer machinery.

#include <redlock/clock.hpp>

#include <boost/asio/basic_waitable_timer.hpp>

namespace redlock {

/// An Asio timer on `redlock::clock`: to wait until a `validity_deadline()`.
using timer = boost::asio::basic_waitable_timer<boot_clock>;

}  // namespace redlock
