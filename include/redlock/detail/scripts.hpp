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

// ---- lock kinds (docs/design.md, "Lock kinds"; docs/safety.md, "Lock kinds") ---------------------
// Each acquire script answers {status, number} like the fair one (core::command::acquire_script);
// each release and extend script answers 1 (ours) or 0.

/// KEYS[1] = key, KEYS[2] = its fencing counter; ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = the
/// largest counter the caller saw (0: none). `SET NX PX` as plain Redlock; on success moves the
/// counter above both its value and ARGV[3] (seeded from the server's clock in microseconds when
/// missing, so that a master restarted without persistence resumes above the fences it gave) and
/// returns {1, fence}; else {0, counter}. Starting from the largest value seen keeps the masters'
/// counters equal after contention, so that the fence rarely needs confirming.
inline constexpr script fence_acquire_script{
    R"(local c = redis.call("get",KEYS[2])
if not redis.call("set",KEYS[1],ARGV[1],"nx","px",ARGV[2]) then return {0,tonumber(c or "0")} end
if not c then
  local t = redis.call("time")
  c = t[1]..string.format("%06d",t[2])
end
local f = math.max(tonumber(c),tonumber(ARGV[3]))+1
redis.call("set",KEYS[2],string.format("%d",f))
return {1,f})",
    "5955d949b6cd5979688934ba203e10276d93de56"};

/// KEYS as for `fence_acquire_script`; ARGV[1] = token, ARGV[2] = the fence. Where the key still
/// holds our token, raises the counter to the fence: 1; else 0.
inline constexpr script fence_confirm_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(redis.call("get",KEYS[2]) or "0") < tonumber(ARGV[2]) then redis.call("set",KEYS[2],ARGV[2]) end
return 1)",
    "eaf7800394a83630f68119c33738160be75d9f70"};

/// KEYS = the keys of every resource; ARGV[1] = token, ARGV[2] = ttl in ms. Sets every key or none:
/// {1, count} when none existed, else {0, the first existing key's index}.
inline constexpr script multi_acquire_script{
    R"(for i = 1, #KEYS do
  if redis.call("exists",KEYS[i]) == 1 then return {0,i} end
end
for i = 1, #KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end
return {1,#KEYS})",
    "8728f63e62d7ca38fa6c8519112680b386592755"};

/// KEYS as for `multi_acquire_script`; ARGV[1] = token. Deletes the keys that hold our token: 1 if
/// any did, else 0.
inline constexpr script multi_release_script{
    R"(local n = 0
for i = 1, #KEYS do
  if redis.call("get",KEYS[i]) == ARGV[1] then
    redis.call("del",KEYS[i])
    n = n + 1
  end
end
if n > 0 then return 1 end
return 0)",
    "84a5a8656118614d95ddbbb9e98afd0477480676"};

/// KEYS as for `multi_acquire_script`; ARGV[1] = token, ARGV[2] = ttl in ms. Re-arms every key only
/// if every key holds our token: 1, else 0.
inline constexpr script multi_extend_script{
    R"(for i = 1, #KEYS do
  if redis.call("get",KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do redis.call("pexpire",KEYS[i],ARGV[2]) end
return 1)",
    "c1b2aaaeb9620fffc1e08a4c1f52abed4b152eba"};

/// KEYS[1] = key, KEYS[2] = its holds; ARGV[1] = owner, ARGV[2] = ttl in ms, ARGV[3] = this hold's
/// token. Takes the key if absent, or joins it if the owner holds it (never shortening it), and
/// records the hold: {1, holds}; {0, 0} when someone else holds it.
inline constexpr script reentrant_acquire_script{
    R"(local v = redis.call("get",KEYS[1])
if not v then
  redis.call("set",KEYS[1],ARGV[1],"px",ARGV[2])
  redis.call("del",KEYS[2])
elseif v ~= ARGV[1] then
  return {0,0}
elseif redis.call("pttl",KEYS[1]) < tonumber(ARGV[2]) then
  redis.call("pexpire",KEYS[1],ARGV[2])
end
redis.call("hset",KEYS[2],ARGV[3],"1")
redis.call("pexpire",KEYS[2],redis.call("pttl",KEYS[1]))
return {1,redis.call("hlen",KEYS[2])})",
    "ac2c211b094c5145390f0789106483e9d75d8f56"};

/// KEYS as for `reentrant_acquire_script`; ARGV[1] = owner, ARGV[2] unused, ARGV[3] = the hold's
/// token. Drops that hold (1), and the key with the last one; 0 if the hold is not here.
inline constexpr script reentrant_release_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] or redis.call("hdel",KEYS[2],ARGV[3]) == 0 then return 0 end
if redis.call("hlen",KEYS[2]) == 0 then redis.call("del",KEYS[1]) end
return 1)",
    "60b9632eebcb4ac9b6ade2d6bf926c2ee6bfabd3"};

/// KEYS as for `reentrant_acquire_script`; ARGV[1] = owner, ARGV[2] = ttl in ms, ARGV[3] = the hold's
/// token. If the hold is here, makes the key live at least ttl more: 1; else 0.
inline constexpr script reentrant_extend_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] or redis.call("hexists",KEYS[2],ARGV[3]) == 0 then return 0 end
if redis.call("pttl",KEYS[1]) < tonumber(ARGV[2]) then
  redis.call("pexpire",KEYS[1],ARGV[2])
  redis.call("pexpire",KEYS[2],ARGV[2])
end
return 1)",
    "56905c8fe1d34c32daaf884a07f2b00c7c21a848"};

/// KEYS[1] = key, KEYS[2] = its readers, KEYS[3] = its waiting writer; ARGV[1] = token, ARGV[2] =
/// ttl in ms. While readers hold it, the key holds `readers_marker` and lives at least as long as
/// each of them (their expiries, in server milliseconds, are the scores). Refused ({0, 0}) when a
/// writer holds the key or waits for it; else {1, readers}.
inline constexpr script read_acquire_script{
    R"(local v = redis.call("get",KEYS[1])
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
    "a6a5f9ffdd58f069b541e8a7be47dda879f12036"};

/// KEYS[1] = key, KEYS[2] = its readers; ARGV[1] = token. Drops the reader (1; 0 if absent), and the
/// key with the last live reader.
inline constexpr script read_release_script{
    R"(if redis.call("zrem",KEYS[2],ARGV[1]) == 0 then return 0 end
if redis.call("get",KEYS[1]) ~= "redlock:readers" then return 1 end
local t = redis.call("time")
redis.call("zremrangebyscore",KEYS[2],"-inf",t[1]*1000+math.floor(t[2]/1000))
if redis.call("zcard",KEYS[2]) == 0 then redis.call("del",KEYS[1]) end
return 1)",
    "4e0748b14a040dab62f37abc6eb11b8866cd9608"};

/// KEYS as for `read_release_script`; ARGV[1] = token, ARGV[2] = ttl in ms. If the reader is here
/// and not expired, moves its expiry to ttl from now (the key lives at least as long): 1; else 0.
inline constexpr script read_extend_script{
    R"(local t = redis.call("time")
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
    "3fd00b391f732b7a85cfa9f24f18ccca94dff9cc"};

/// KEYS as for `read_acquire_script`; ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = the waiting
/// writer's name, ARGV[4] = how long its claim lives unless renewed, in ms. Takes the key if
/// absent: {1, 0}. While readers hold it, claims the writer's place (unless another writer did)
/// so that no new reader enters: {-1, 0}. Else {0, 0}.
inline constexpr script write_acquire_script{
    R"(local v = redis.call("get",KEYS[1])
if not v then
  redis.call("set",KEYS[1],ARGV[1],"px",ARGV[2])
  if redis.call("get",KEYS[3]) == ARGV[3] then redis.call("del",KEYS[3]) end
  return {1,0}
end
if v ~= "redlock:readers" then return {0,0} end
local w = redis.call("get",KEYS[3])
if w and w ~= ARGV[3] then return {0,0} end
redis.call("set",KEYS[3],ARGV[3],"px",ARGV[4])
return {-1,0})",
    "c6d024948f957f07135e3006cf2c641f041904da"};

/// KEYS[1] = a key's waiting writer; ARGV[1] = the writer's name. Drops the claim if it is that
/// writer's: 1, else 0.
inline constexpr script write_leave_script{
    R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) end
return 0)",
    "6c015f8e0f584393e2a8b7801d6eeea0a1ff1e87"};

/// KEYS[1] = the semaphore's holders (token -> expiry in server ms), KEYS[2] = its permit count;
/// ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = permits. Drops expired holders, then admits
/// the caller if fewer than `permits` remain: {1, holders}; else {0, holders}. An error reply if
/// live holders use another permit count.
inline constexpr script semaphore_acquire_script{
    R"(local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
redis.call("zremrangebyscore",KEYS[1],"-inf",now)
local n = redis.call("zcard",KEYS[1])
local p = redis.call("get",KEYS[2])
if n > 0 and p and p ~= ARGV[3] then
  return redis.error_reply("REDLOCK semaphore has "..p.." permits, not "..ARGV[3])
end
if n >= tonumber(ARGV[3]) then return {0,n} end
local ttl = tonumber(ARGV[2])
redis.call("zadd",KEYS[1],now+ttl,ARGV[1])
local left = redis.call("pttl",KEYS[1])
if left < ttl then
  redis.call("pexpire",KEYS[1],ttl)
  left = ttl
end
redis.call("set",KEYS[2],ARGV[3],"px",left)
return {1,n+1})",
    "cecd19c45a3c871c8a96b1e43f078791d4c4505c"};

/// KEYS as for `semaphore_acquire_script`; ARGV[1] = token. Drops the holder: 1 (0 if absent).
inline constexpr script semaphore_release_script{
    R"(if redis.call("zrem",KEYS[1],ARGV[1]) == 0 then return 0 end
if redis.call("exists",KEYS[1]) == 0 then redis.call("del",KEYS[2]) end
return 1)",
    "6d9bd32d2e266817cd6417bdf85b39fe6e6ffb19"};

/// KEYS as for `semaphore_acquire_script`; ARGV[1] = token, ARGV[2] = ttl in ms. If the holder is
/// here and not expired, moves its expiry to ttl from now: 1; else 0.
inline constexpr script semaphore_extend_script{
    R"(local t = redis.call("time")
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
    "e1863583bbc52e1a718b6376234c3f2ee077044c"};

/// The channel on which a client's waiters are woken: this prefix and the client's inbox, the
/// first 16 characters of each of its waiters' names.
inline constexpr std::string_view wake_channel_prefix = "redlock:wake:";
/// Suffixes of a lock key's waiter queue and its expiries.
inline constexpr std::string_view queue_suffix = ":redlock-queue";
inline constexpr std::string_view expiry_suffix = ":redlock-expiry";

/// Suffixes of the keys beside a lock key that the lock kinds use.
inline constexpr std::string_view fence_suffix = ":redlock-fence";
inline constexpr std::string_view holds_suffix = ":redlock-holds";
inline constexpr std::string_view readers_suffix = ":redlock-readers";
inline constexpr std::string_view writer_suffix = ":redlock-writer";
inline constexpr std::string_view permits_suffix = ":redlock-permits";
/// What a read/write lock's key holds while readers hold it (never a token: those are hex).
inline constexpr std::string_view readers_marker = "redlock:readers";

/// Every script, loaded (`SCRIPT LOAD`) on each new connection before any request of a lock can
/// use it, so that an `EVALSHA` never meets an empty script cache: its `NOSCRIPT` answer, coming
/// after the quorum decided, would leave that master without the key (a plain `SET` in flight
/// still lands). Requests queued while the first connection was being made go before them: a
/// lock whose `NOSCRIPT` comes after its quorum sends its `EVAL` while it is still held (see
/// `lock_op::on_reply`). The fallback to `EVAL` stays for a cache flushed while connected.
inline constexpr const script* all_scripts[] = {
    &release_script,           &extend_script,
    &fair_acquire_script,      &fence_acquire_script,
    &fence_confirm_script,     &multi_acquire_script,
    &multi_release_script,     &multi_extend_script,
    &reentrant_acquire_script, &reentrant_release_script,
    &reentrant_extend_script,  &read_acquire_script,
    &read_release_script,      &read_extend_script,
    &write_acquire_script,     &write_leave_script,
    &semaphore_acquire_script, &semaphore_release_script,
    &semaphore_extend_script,
};

}  // namespace redlock::detail
