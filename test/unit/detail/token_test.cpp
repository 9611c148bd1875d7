// SPDX-License-Identifier: BSL-1.0
// Lock tokens (src/token.cpp): random bytes are taken from a per-thread batch, which a fork must
// not share with the parent.
#include <redlock/detail/token.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>

namespace {

std::string token() {
  boost::system::error_code ec;
  auto t = redlock::detail::make_token(ec);
  EXPECT_FALSE(ec) << ec.message();
  return t;
}

TEST(token, forty_hex_digits_and_unique_across_batches) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {  // 31 batches of 32
    const auto t = token();
    ASSERT_EQ(t.size(), 40u);
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    ASSERT_TRUE(seen.insert(t).second) << "repeated token " << t;
  }
}

// A child forked while its parent holds a part-used batch must draw fresh bytes: otherwise both
// would hand out the same next tokens.
TEST(token, a_forked_child_never_repeats_its_parents_tokens) {
  (void)token();  // the parent's batch now holds 31 unused tokens
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string mine;
    for (int i = 0; i < 31; ++i) mine += token();
    const auto n = ::write(fds[1], mine.data(), mine.size());
    ::_exit(n == static_cast<ssize_t>(mine.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string child;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) child.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(child.size(), 31u * 40u);
  std::set<std::string> parents;
  for (int i = 0; i < 31; ++i) parents.insert(token());
  for (std::size_t i = 0; i < child.size(); i += 40) {
    EXPECT_EQ(parents.count(child.substr(i, 40)), 0u)
        << "the child repeated its parent's token " << child.substr(i, 40);
  }
}

}  // namespace
