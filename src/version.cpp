// SPDX-License-Identifier: BSL-1.0
#include <redlock/version.hpp>

namespace redlock {

const char* library_version() noexcept { return version_string; }

}  // namespace redlock
