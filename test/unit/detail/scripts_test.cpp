// SPDX-License-Identifier: BSL-1.0
// The Lua scripts' digests (redlock/detail/scripts.hpp): every `EVALSHA` names the SHA-1 of the
// script's body, as Redis computes it for `SCRIPT LOAD`. A wrong constant would not fail any
// lock: each EVALSHA would meet NOSCRIPT and fall back to EVAL, quietly doubling the traffic. Here
// every digest is computed from its body, with no server.

#include <redlock/detail/scripts.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <openssl/evp.h>
#include <set>
#include <string>
#include <string_view>

namespace {

std::string sha1_hex(std::string_view body) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXPECT_EQ(EVP_Digest(body.data(), body.size(), md, &len, EVP_sha1(), nullptr), 1);
  std::string out;
  char hex[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", md[i]);
    out += hex;
  }
  return out;
}

TEST(scripts, every_digest_is_the_sha1_of_its_body) {
  for (const auto* s : redlock::detail::all_scripts) {
    EXPECT_EQ(s->sha1, sha1_hex(s->body)) << "script beginning: " << s->body.substr(0, 60);
  }
}

TEST(scripts, every_script_is_loaded_once) {
  std::set<std::string_view> bodies, digests;
  for (const auto* s : redlock::detail::all_scripts) {
    EXPECT_TRUE(bodies.insert(s->body).second) << s->body.substr(0, 60);
    EXPECT_TRUE(digests.insert(s->sha1).second) << s->sha1;
  }
  EXPECT_EQ(std::size(redlock::detail::all_scripts), 22u);
}

// The digest helper itself, on the FIPS 180 test vector.
TEST(scripts, sha1_helper_matches_the_standard_vector) {
  EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
}

}  // namespace
