// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Lock tokens: 20 bytes from the operating system's cryptographic random source, as 40 hex digits.

#include <redlock/export.hpp>

#include <boost/system/error_code.hpp>

#include <string>

namespace redlock::detail {

/// A fresh token, or an empty string with `ec` set when the OS source fails (never a weaker one).
REDLOCK_API std::string make_token(boost::system::error_code& ec);

}  // namespace redlock::detail
