// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The library's version. This header is the single source of the version number: CMake reads it
/// for `project(VERSION)`, the package's version file and the pkg-config file.

#include <redlock/export.hpp>

/// Major version: changes break source compatibility (0 while the API settles).
#define REDLOCK_VERSION_MAJOR 0
/// Minor version: new features; while the major is 0, a minor step may also break the API.
#define REDLOCK_VERSION_MINOR 10
/// Patch version: fixes only.
#define REDLOCK_VERSION_PATCH 0

/// The version as one number, `major * 10000 + minor * 100 + patch`, for `#if` tests.
#define REDLOCK_VERSION (REDLOCK_VERSION_MAJOR * 10000 + REDLOCK_VERSION_MINOR * 100 + REDLOCK_VERSION_PATCH)

namespace redlock {

/// Helper of `REDLOCK_VERSION_STR`: the argument as a string literal.
#define REDLOCK_VERSION_STR_(x) #x
/// The macro argument's value as a string literal (for `version_string`).
#define REDLOCK_VERSION_STR(x) REDLOCK_VERSION_STR_(x)

/// The version of the headers in use, `"major.minor.patch"`, made from the numbers above so that
/// the two can never disagree.
inline constexpr const char* version_string = REDLOCK_VERSION_STR(REDLOCK_VERSION_MAJOR) "." REDLOCK_VERSION_STR(
    REDLOCK_VERSION_MINOR) "." REDLOCK_VERSION_STR(REDLOCK_VERSION_PATCH);

/// The version the library was compiled as; differs from `version_string` only when headers and
/// library binary come from different releases.
REDLOCK_API const char* library_version() noexcept;

}  // namespace redlock
