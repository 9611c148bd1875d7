// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// `REDLOCK_API`: what the shared library exports. The library is compiled with
/// `-fvisibility=hidden -fvisibility-inlines-hidden`, so that only what the installed headers
/// declare is exported: the classes, functions and objects marked with this macro. Whatever else
/// the library holds (its own `src/` types, fmt) stays inside it.
///
/// The macro means the same when the library is built and when it is used, static or shared: on
/// ELF, the one platform of the library, a symbol has no import side to mark. So no build
/// defines anything for it, and a consumer of the static library needs no definition either.

/// Marks a declaration of the installed headers that the library defines and exports.
#if defined(__GNUC__) || defined(__clang__)
#define REDLOCK_API __attribute__((visibility("default")))
#else
#define REDLOCK_API
#endif
