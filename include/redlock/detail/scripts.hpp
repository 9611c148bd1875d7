#pragma once
/// @file
/// The check-the-token Lua scripts, and their SHA-1 digests for `EVALSHA` (an integration test
/// checks each digest against `SCRIPT LOAD` on a real server).

#include <string_view>

namespace redlock::detail {

struct script {
  std::string_view body;
  std::string_view sha1;
};

/// KEYS[1] = key, ARGV[1] = token. Deletes the key only if it still holds our token: 1 or 0.
inline constexpr script release_script{
    R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end)",
    "b70c2384248f88e6b75b9f89241a180f856ad852"};

/// KEYS[1] = key, ARGV[1] = token, ARGV[2] = ttl in ms. Re-arms the expiry only if the key still
/// holds our token: 1 or 0.
inline constexpr script extend_script{
    R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end)",
    "36e94d1c6e02fcefaa7ee5d79eee614dbac55f10"};

}  // namespace redlock::detail
