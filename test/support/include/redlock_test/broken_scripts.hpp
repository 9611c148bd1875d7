// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The lock scripts as they were before an outside review found them faulty (docs/safety.md,
/// "What every script guarantees"), kept as broken twins: the script model and the fleet
/// simulation must catch each when it is put back. Tests only; never loaded by the library.

#include <redlock/detail/scripts.hpp>

namespace redlock::test::broken {

namespace scripts = redlock::detail;

// Extensions that re-arm to the new ttl, even a shorter one.
inline constexpr scripts::script old_extend{
    R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end)",
    ""};
inline constexpr scripts::script old_multi_extend{R"(for i = 1, #KEYS do
  if redis.call("get",KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do redis.call("pexpire",KEYS[i],ARGV[2]) end
return 1)",
                                                  ""};
inline constexpr scripts::script old_semaphore_extend{R"(local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local s = redis.call("zscore",KEYS[1],ARGV[1])
if not s or tonumber(s) <= now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call("zadd",KEYS[1],now+ttl,ARGV[1])
if redis.call("pttl",KEYS[1]) < ttl then
  redis.call("pexpire",KEYS[1],ttl)
  redis.call("pexpire",KEYS[2],ttl)
end
return 1)",
                                                      ""};
// Readers whose marker keeps the longest ttl ever, whose set could lose its ttl.
inline constexpr scripts::script old_read_acquire{R"(local v = redis.call("get",KEYS[1])
if (v and v ~= "redlock:readers") or redis.call("exists",KEYS[3]) == 1 then return {0,0} end
local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local ttl = tonumber(ARGV[2])
redis.call("zremrangebyscore",KEYS[2],"-inf",now)
redis.call("zadd",KEYS[2],now+ttl,ARGV[1])
if not v or redis.call("pttl",KEYS[1]) < ttl then
  redis.call("set",KEYS[1],"redlock:readers","px",ttl)
  redis.call("pexpire",KEYS[2],ttl)
end
return {1,redis.call("zcard",KEYS[2])})",
                                                  ""};
inline constexpr scripts::script old_read_release{R"(if redis.call("zrem",KEYS[2],ARGV[1]) == 0 then return 0 end
if redis.call("get",KEYS[1]) ~= "redlock:readers" then return 1 end
local t = redis.call("time")
redis.call("zremrangebyscore",KEYS[2],"-inf",t[1]*1000+math.floor(t[2]/1000))
if redis.call("zcard",KEYS[2]) == 0 then redis.call("del",KEYS[1]) end
return 1)",
                                                  ""};
inline constexpr scripts::script old_read_extend{R"(local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local s = redis.call("zscore",KEYS[2],ARGV[1])
if not s or tonumber(s) <= now or redis.call("get",KEYS[1]) ~= "redlock:readers" then return 0 end
local ttl = tonumber(ARGV[2])
redis.call("zadd",KEYS[2],now+ttl,ARGV[1])
if redis.call("pttl",KEYS[1]) < ttl then
  redis.call("pexpire",KEYS[1],ttl)
  redis.call("pexpire",KEYS[2],ttl)
end
return 1)",
                                                 ""};
// A fenced grant that seeds a missing counter from its own master's clock.
inline constexpr scripts::script old_fence_acquire{R"(local c = redis.call("get",KEYS[2])
if not redis.call("set",KEYS[1],ARGV[1],"nx","px",ARGV[2]) then return {0,tonumber(c or "0")} end
if not c then
  local t = redis.call("time")
  c = t[1]..string.format("%06d",t[2])
end
local f = math.max(tonumber(c),tonumber(ARGV[3]))+1
redis.call("set",KEYS[2],string.format("%d",f))
return {1,f})",
                                                   ""};
// A failed fenced round's release that takes the counter step back whoever holds the key: the
// step it takes back may be another holder's grant, whose fence the next grant hands out again.
inline constexpr scripts::script unchecked_fence_abandon{R"(local c = redis.call("get",KEYS[4])
if c and tonumber(c) > 0 then redis.call("decr",KEYS[4]) end
if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
redis.call("del",KEYS[1])
return 1)",
                                                         ""};
// A fair master that orders a waiter by the ticket it stored, not the one sent.
inline constexpr scripts::script old_fair{R"(local q, e, o, me = KEYS[2], KEYS[3], KEYS[4], ARGV[3]
local held = redis.call("exists",KEYS[1]) == 1
local mine = redis.call("hget",o,me)
local stale = false
if held and mine then
  local v = redis.pcall("get",KEYS[1])
  stale = type(v) == "string" and string.match(mine,"^%d+:%d+:(.+)$") == v
  held = not stale
end
local sent = tonumber(ARGV[4])
local ticket = sent
local now
local function clock()
  if not now then
    local t = redis.call("time")
    now = t[1]*1000+math.floor(t[2]/1000)
  end
  return now
end
local swept = false
local function sweep()
  swept = true
  local gone = redis.call("zrangebyscore",e,"-inf",clock(),"limit",0,100)
  if #gone == 0 then return false end
  redis.call("zrem",q,unpack(gone))
  redis.call("zrem",e,unpack(gone))
  redis.call("hdel",o,unpack(gone))
  return true
end
local function back()
  local l = redis.call("zrange",q,-1,-1,"withscores")
  if l[2] then return math.floor(tonumber(l[2]))+1 end
  return 1
end
if sent <= 0 then
  sweep()
  if sent < 0 then
    redis.call("zrem",q,me)
    ticket = back()
    redis.call("zadd",q,ticket,me)
  else
    local s = redis.call("zscore",q,me)
    if s then ticket = tonumber(s) end
  end
end
local status = 0
if not held then
  local function first()
    local h = redis.call("zrange",q,0,0,"withscores")
    return h[1] == nil or h[1] == me or (ticket > 0 and (ticket < tonumber(h[2]) or (ticket == tonumber(h[2]) and me < h[1])))
  end
  local ok = first()
  if not ok and not swept and sweep() then ok = first() end
  if ok then
    redis.call("zrem",e,me)
    redis.call("zrem",q,me)
    if mine then redis.call("hdel",o,me) end
    if stale then redis.call("del",KEYS[1]) end
    redis.call("set",KEYS[1],ARGV[1],"nx","px",ARGV[2])
    return {1,ticket}
  end
  status = -1
elseif not swept and not redis.call("zscore",e,me) then
  sweep()
end
if ticket == 0 then ticket = back() end
local timeout = tonumber(ARGV[5])
redis.call("zadd",q,ticket,me)
redis.call("zadd",e,clock()+timeout,me)
if ARGV[6] ~= "0" then
  redis.call("hset",o,me,ARGV[2]..":"..ARGV[6]..":"..ARGV[1])
elseif mine then
  redis.call("hdel",o,me)
end
if stale then redis.call("del",KEYS[1]) end
if redis.call("pttl",q) < timeout then
  redis.call("pexpire",q,timeout)
  redis.call("pexpire",e,timeout)
end
if redis.call("pttl",o) < timeout then redis.call("pexpire",o,timeout) end
return {status,ticket})",
                                          ""};

// A fair round that takes for its own, and deletes, a key handed to any waiter (not only to itself).
inline constexpr scripts::script stealing_fair{R"(local q, e, o, me = KEYS[2], KEYS[3], KEYS[4], ARGV[3]
local held = redis.call("exists",KEYS[1]) == 1
local mine = redis.call("hget",o,me)
local stale = false
if held then
  local v = redis.pcall("get",KEYS[1])
  for _, x in ipairs(redis.call("hvals",o)) do
    if type(v) == "string" and string.match(x,"^%d+:%d+:(.+)$") == v then stale = true end
  end
  held = not stale
end
local sent = tonumber(ARGV[4])
local ticket = sent
local now
local function clock()
  if not now then
    local t = redis.call("time")
    now = t[1]*1000+math.floor(t[2]/1000)
  end
  return now
end
local swept = false
local function sweep()
  swept = true
  local gone = redis.call("zrangebyscore",e,"-inf",clock(),"limit",0,100)
  if #gone == 0 then return false end
  redis.call("zrem",q,unpack(gone))
  redis.call("zrem",e,unpack(gone))
  redis.call("hdel",o,unpack(gone))
  return true
end
local function back()
  local l = redis.call("zrange",q,-1,-1,"withscores")
  if l[2] then return math.floor(tonumber(l[2]))+1 end
  return 1
end
if sent <= 0 then
  sweep()
  if sent < 0 then
    redis.call("zrem",q,me)
    ticket = back()
    redis.call("zadd",q,ticket,me)
  else
    local s = redis.call("zscore",q,me)
    if s then ticket = tonumber(s) end
  end
end
local status = 0
if not held then
  local function first()
    local h = redis.call("zrange",q,0,1,"withscores")
    local i = h[1] == me and 3 or 1
    return h[i] == nil or (ticket > 0 and (ticket < tonumber(h[i+1]) or (ticket == tonumber(h[i+1]) and me < h[i])))
  end
  local ok = first()
  if not ok and not swept and sweep() then ok = first() end
  if ok then
    redis.call("zrem",e,me)
    redis.call("zrem",q,me)
    if mine then redis.call("hdel",o,me) end
    if stale then redis.call("del",KEYS[1]) end
    redis.call("set",KEYS[1],ARGV[1],"nx","px",ARGV[2])
    return {1,ticket}
  end
  status = -1
elseif not swept and not redis.call("zscore",e,me) then
  sweep()
end
if ticket == 0 then ticket = back() end
local timeout = tonumber(ARGV[5])
redis.call("zadd",q,ticket,me)
redis.call("zadd",e,clock()+timeout,me)
if ARGV[6] ~= "0" then
  redis.call("hset",o,me,ARGV[2]..":"..ARGV[6]..":"..ARGV[1])
elseif mine then
  redis.call("hdel",o,me)
end
if stale then redis.call("del",KEYS[1]) end
if redis.call("pttl",q) < timeout then
  redis.call("pexpire",q,timeout)
  redis.call("pexpire",e,timeout)
end
if redis.call("pttl",o) < timeout then redis.call("pexpire",o,timeout) end
return {status,ticket})",
                                               ""};
// A dequeue that gives back the key its waiter was granted by hand-overs, ignoring the token kept.
inline constexpr scripts::script unkept_dequeue{R"(local v = redis.call("hget",KEYS[4],ARGV[1])
redis.call("zrem",KEYS[2],ARGV[1])
redis.call("zrem",KEYS[3],ARGV[1])
if not v then return 0 end
redis.call("hdel",KEYS[4],ARGV[1])
local tok = string.match(v,"^%d+:%d+:(.+)$")
if redis.call("get",KEYS[1]) ~= tok then return 0 end
redis.call("del",KEYS[1])
local h = redis.call("zrange",KEYS[2],0,0)[1]
if h then redis.call("publish","redlock:wake:"..string.sub(h,1,16),h) end
return 1)",
                                                ""};

}  // namespace redlock::test::broken
