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

/// KEYS[1] = key, KEYS[2] = its waiter queue, KEYS[3] = the queue's expiries; ARGV[1] = token.
/// Deletes the key only if it still holds our token: 0 (not ours), 1 (deleted), 2 (deleted, and
/// waiters are queued: the first of them, after dropping expired entries, is woken by a message
/// on its client's channel). See docs/design.md, "Fair hand-over".
inline constexpr script release_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
redis.call("del",KEYS[1])
local h = redis.call("zrange",KEYS[2],0,0)[1]
if not h then return 1 end
local t = redis.call("time")
local gone = redis.call("zrangebyscore",KEYS[3],"-inf",t[1]*1000+math.floor(t[2]/1000),"limit",0,100)
if #gone > 0 then
  redis.call("zrem",KEYS[2],unpack(gone))
  redis.call("zrem",KEYS[3],unpack(gone))
  h = redis.call("zrange",KEYS[2],0,0)[1]
  if not h then return 1 end
end
redis.call("publish","redlock:wake:"..string.sub(h,1,16),h)
return 2)",
    "07bcbc10cd59cbaf016856570d4b8c83d1b28354"};

/// KEYS[1] = key, ARGV[1] = token, ARGV[2] = ttl in ms. Re-arms the expiry only if the key still
/// holds our token: 1 or 0.
inline constexpr script extend_script{
    R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end)",
    "36e94d1c6e02fcefaa7ee5d79eee614dbac55f10"};

/// The fair acquisition (docs/design.md, "Fair hand-over"). KEYS as for `release_script`; ARGV[1]
/// = token, ARGV[2] = ttl in ms, ARGV[3] = the waiter (`<client inbox>:<operation>`), ARGV[4] = its
/// ticket (>0: keep it; 0: none yet, take the one held here or the next free one; -1: move to the
/// back), ARGV[5] = how long its queue entry lives without being renewed, in ms. Drops expired
/// entries, then sets the key (`SET NX PX`, as plain Redlock) only if the key is absent and no
/// waiter with a smaller (ticket, name) is queued; otherwise queues or renews the waiter.
/// Returns {status, ticket}: status 1 granted, 0 the key is held, -1 the key is free but another
/// waiter comes first.
inline constexpr script fair_acquire_script{
    R"(local q, e, me = KEYS[2], KEYS[3], ARGV[3]
local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local gone = redis.call("zrangebyscore",e,"-inf",now,"limit",0,100)
if #gone > 0 then
  redis.call("zrem",q,unpack(gone))
  redis.call("zrem",e,unpack(gone))
end
local function back()
  local l = redis.call("zrange",q,-1,-1,"withscores")
  if l[2] then return math.floor(tonumber(l[2]))+1 end
  return 1
end
local ticket = tonumber(ARGV[4])
if ticket < 0 then
  redis.call("zrem",q,me)
  ticket = back()
  redis.call("zadd",q,ticket,me)
elseif ticket == 0 then
  local s = redis.call("zscore",q,me)
  if s then ticket = tonumber(s) end
end
local status = 0
if redis.call("exists",KEYS[1]) == 0 then
  local h = redis.call("zrange",q,0,0,"withscores")
  if h[1] == nil or h[1] == me or (ticket > 0 and (ticket < tonumber(h[2]) or (ticket == tonumber(h[2]) and me < h[1]))) then
    redis.call("set",KEYS[1],ARGV[1],"nx","px",ARGV[2])
    redis.call("zrem",q,me)
    redis.call("zrem",e,me)
    return {1,ticket}
  end
  status = -1
end
if ticket == 0 then ticket = back() end
local timeout = tonumber(ARGV[5])
redis.call("zadd",q,ticket,me)
redis.call("zadd",e,now+timeout,me)
if redis.call("pttl",q) < timeout then
  redis.call("pexpire",q,timeout)
  redis.call("pexpire",e,timeout)
end
return {status,ticket})",
    "81e90200cb22be414be31f72be562a15d9eaadf1"};

/// The channel on which a client's waiters are woken: this prefix and the client's inbox, the
/// first 16 characters of each of its waiters' names.
inline constexpr std::string_view wake_channel_prefix = "redlock:wake:";
/// Suffixes of a lock key's waiter queue and its expiries.
inline constexpr std::string_view queue_suffix = ":redlock-queue";
inline constexpr std::string_view expiry_suffix = ":redlock-expiry";

}  // namespace redlock::detail
