// SPDX-License-Identifier: BSL-1.0
#pragma once
// The TLS client context of a node connection (private to src/; defined in stream.cpp).

#include <redlock/connection.hpp>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>

namespace redlock::detail {

/// Loads the files of `t` into a new client context (TLS 1.2 at least, the peer verified unless
/// told not to). On failure returns `invalid_config`, with `what` naming the field, its path and
/// OpenSSL's reason.
boost::system::error_code make_tls_context(const tls_options& t, std::shared_ptr<boost::asio::ssl::context>& out,
                                           std::string* what);

}  // namespace redlock::detail
