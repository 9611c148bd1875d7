// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The `redlock` tool's commands. Each returns the process's exit status.

#include "options.hpp"

#include <string_view>

namespace redlock::cli {

/// `redlock run`: acquire, run the command with the lock kept alive, release (run.cpp).
int run_command(const run_options& opts, const resolved_config& cfg);
/// `redlock status`: what each master holds for a resource (status.cpp).
int status_command(const status_options& opts, const resolved_config& cfg);
/// `redlock nodes`: local masters for trying things out (nodes.cpp).
int nodes_command(const nodes_options& opts);

/// Writes "redlock: <text>\n" to stderr in one write.
void complain(std::string_view text);

}  // namespace redlock::cli
