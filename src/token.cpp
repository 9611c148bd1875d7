// SPDX-License-Identifier: BSL-1.0
#include <redlock/detail/token.hpp>

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstddef>

namespace redlock::detail {

std::string make_token(boost::system::error_code& ec) {
  std::array<unsigned char, 20> raw{};
  std::size_t got = 0;
  while (got < raw.size()) {
    // getrandom(2) without flags blocks only until the kernel pool is first initialised.
    const auto n = ::getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      ec.assign(errno, boost::system::system_category());
      return {};
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string token(raw.size() * 2, '0');
  for (std::size_t i = 0; i < raw.size(); ++i) {
    token[2 * i] = digits[raw[i] >> 4];
    token[2 * i + 1] = digits[raw[i] & 0xf];
  }
  ec.clear();
  return token;
}

}  // namespace redlock::detail
