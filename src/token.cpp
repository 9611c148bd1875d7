// SPDX-License-Identifier: BSL-1.0
#include <redlock/detail/token.hpp>

#include <sys/mman.h>
#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace redlock::detail {

namespace {

constexpr std::size_t token_bytes = 20;
constexpr std::size_t batch_tokens = 32;

// Random bytes are fetched for 32 tokens at a time: one getrandom(2) per lock was one syscall
// in 26 of a lock+unlock cycle. The batch lives in a page of its own per thread, marked
// MADV_WIPEONFORK, so a forked child starts from an empty batch and can never hand out a token
// its parent also hands out (two holders sharing a token could release or extend each other's
// lock). Bytes are wiped as they are handed out. Without that page (mmap or madvise refused),
// each token reads the kernel directly, as before.
struct batch {
  std::array<unsigned char, token_bytes * batch_tokens> bytes;
  std::size_t left;  // unused bytes at the end of `bytes`; 0 in a fresh or forked page
};
static_assert(sizeof(batch) <= 4096);

batch* thread_batch() noexcept {
  thread_local batch* page = []() -> batch* {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (::madvise(p, 4096, MADV_WIPEONFORK) != 0) {
      ::munmap(p, 4096);
      return nullptr;
    }
    return static_cast<batch*>(p);  // zero-filled: left == 0
  }();
  // The page is never unmapped: a thread's exit leaves one page behind, which later threads of
  // a pool do not reuse. Acceptable for the few threads that run io_contexts.
  return page;
}

bool fill(unsigned char* out, std::size_t size, boost::system::error_code& ec) {
  std::size_t got = 0;
  while (got < size) {
    // getrandom(2) without flags blocks only until the kernel pool is first initialised.
    const auto n = ::getrandom(out + got, size - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      ec.assign(errno, boost::system::system_category());
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string make_token(boost::system::error_code& ec) {
  std::array<unsigned char, token_bytes> raw{};
  if (batch* b = thread_batch()) {
    if (b->left < token_bytes) {
      if (!fill(b->bytes.data(), b->bytes.size(), ec)) return {};
      b->left = b->bytes.size();
    }
    unsigned char* from = b->bytes.data() + (b->bytes.size() - b->left);
    std::memcpy(raw.data(), from, token_bytes);
    std::memset(from, 0, token_bytes);
    b->left -= token_bytes;
  } else if (!fill(raw.data(), raw.size(), ec)) {
    return {};
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
