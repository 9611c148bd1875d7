// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The check-the-token Lua scripts, and their SHA-1 digests for `EVALSHA` (an integration test
/// checks each digest against `SCRIPT LOAD` on a real server).

#include <redlock/export.hpp>

#include <string_view>

namespace redlock::detail {

// The scripts (and the kinds that point at them, core/kind_spec.hpp) are exported: one object
// for the library and its users alike, so that addresses compare equal on both sides.
struct script {
  std::string_view body;
  std::string_view sha1;
};

/// KEYS[1] = key, KEYS[2] = its waiter queue, KEYS[3] = the queue's expiries, KEYS[4] = the
/// waiters' offers, and for a fenced lock KEYS[5] = its fencing counter; ARGV[1] = token, ARGV[2] =
/// "1" to hand the key over (a held lock's release), else "0" (a failed round's). Deletes the key
/// only if it still holds our token: 0 (not ours), 1 (deleted), 2 (deleted, and waiters are
/// queued). With waiters, after dropping expired entries, the first of them is told on its
/// client's channel. With "1" and an offer from that waiter, a first message `<waiter>:<round>:`
/// asks whether its client is there: if a connection of this master received it (a waiter whose
/// process died has none left; `PUBLISH` counts only this node's receivers), the key is set for
/// the waiter with the offer's token and ttl (the waiter keeps its place in the queue until its
/// acquisition ends), and only then a second message, `<waiter>:<round>`, hands it over. A fenced
/// waiter's offer is marked (`f<ttl>:<round>:<token>`): its hand-over is also a grant of the
/// fence, so it is made only by a release that names the counter, and only where the counter is
/// one as the grants write it; the counter moves one up with the key, and the message is
/// `<waiter>:<round>:<fence>`. (A release that set a fenced waiter's key without that step would
/// let the waiter's failed round take back a step nobody made, `fence_abandon_script`.) Otherwise
/// the message is the waiter's name: a wake-up, which also says that this master hands it nothing
/// this time. The counter is read before anything is written; one of another type only turns the
/// hand-over off (a held lock can always be released). See docs/design.md, "Fair hand-over".
REDLOCK_API inline constexpr script release_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
local n = KEYS[5] and redis.pcall("get",KEYS[5])
if type(n) ~= "string" then n = nil end
redis.call("del",KEYS[1])
local h = redis.call("zrange",KEYS[2],0,0)[1]
if not h then return 1 end
local t = redis.call("time")
local gone = redis.call("zrangebyscore",KEYS[3],"-inf",t[1]*1000+math.floor(t[2]/1000),"limit",0,100)
if #gone > 0 then
  redis.call("zrem",KEYS[2],unpack(gone))
  redis.call("zrem",KEYS[3],unpack(gone))
  redis.call("hdel",KEYS[4],unpack(gone))
  h = redis.call("zrange",KEYS[2],0,0)[1]
  if not h then return 1 end
end
local c = "redlock:wake:"..string.sub(h,1,16)
if ARGV[2] == "1" then
  local f, ttl, round, tok = string.match(redis.call("hget",KEYS[4],h) or "","^(f?)(%d+):(%d+):(.+)$")
  if f == "f" and not (n and string.match(n,"^[1-9]%d*$") and tonumber(n) < 9007199254740000) then tok = nil end
  if tok and redis.call("publish",c,h..":"..round..":") > 0 then
    redis.call("set",KEYS[1],tok,"px",ttl)
    local m = h..":"..round
    if f == "f" then
      n = string.format("%d",tonumber(n)+1)
      redis.call("set",KEYS[5],n)
      m = m..":"..n
    end
    redis.call("publish",c,m)
    return 2
  end
end
redis.call("publish",c,h)
return 2)",
    "1f3142f2afd8a1940791c9f5d7e40c2d511e4378"};

/// The end of a fair waiter's acquisition (docs/design.md, "Fair hand-over"). KEYS as for
/// `release_script`; ARGV[1] = the waiter, ARGV[2] = the token it keeps (the granted lock's, or
/// empty). Drops the waiter's queue entry and offer; if a release handed it the key with an offer
/// whose token is not the one kept, deletes the key and wakes the first waiter: 1; else 0.
REDLOCK_API inline constexpr script dequeue_script{
    R"(local v = redis.call("hget",KEYS[4],ARGV[1])
redis.call("zrem",KEYS[2],ARGV[1])
redis.call("zrem",KEYS[3],ARGV[1])
if not v then return 0 end
redis.call("hdel",KEYS[4],ARGV[1])
local tok = string.match(v,"^f?%d+:%d+:(.+)$")
if tok == ARGV[2] or redis.call("get",KEYS[1]) ~= tok then return 0 end
redis.call("del",KEYS[1])
local h = redis.call("zrange",KEYS[2],0,0)[1]
if h then redis.call("publish","redlock:wake:"..string.sub(h,1,16),h) end
return 1)",
    "588d47b0d78d2f2ebf87de2845c0ee13ed8b90c4"};

/// KEYS[1] = key, ARGV[1] = token, ARGV[2] = ttl in ms. If the key still holds our token, makes it
/// live at least ttl more (never less than it already had: an extension that fails after moving an
/// expiry earlier would leave its holder trusting a deadline the masters no longer keep): 1; else 0.
REDLOCK_API inline constexpr script extend_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call("pttl",KEYS[1]) < tonumber(ARGV[2]) then redis.call("pexpire",KEYS[1],ARGV[2]) end
return 1)",
    "54f7213a22b0c2233b720f9ba59a80a38f2f4cb4"};

/// Many `extend_script`s in one call, for the keep-alive's batches: KEYS[i] = a key, ARGV[2i - 1]
/// = its token, ARGV[2i] = its ttl in ms. Each key is judged and extended as `extend_script` would
/// on its own; the answer is an array with each key's 1, 0, or error (a key of another type fails
/// alone, through `redis.pcall`). Written for no one's keys but the caller's: a wrong ARGV count
/// fails the whole call before anything is read.
REDLOCK_API inline constexpr script extend_many_script{
    R"(if #ARGV ~= 2 * #KEYS then return redis.error_reply("ERR extend_many: two ARGV per key") end
local r = {}
for i, key in ipairs(KEYS) do
  local v = redis.pcall("get",key)
  if type(v) == "table" and v.err then
    r[i] = v
  elseif v ~= ARGV[2 * i - 1] then
    r[i] = 0
  else
    local ttl = tonumber(ARGV[2 * i])
    if redis.call("pttl",key) < ttl then redis.call("pexpire",key,ttl) end
    r[i] = 1
  end
end
return r)",
    "309f352b9daea212dffe81e129b0805d76a9ef00"};

/// The fair acquisition (docs/design.md, "Fair hand-over"). KEYS as for `release_script`; ARGV[1]
/// = token, ARGV[2] = ttl in ms, ARGV[3] = the waiter (`<client inbox>:<operation>`), ARGV[4] = its
/// ticket (>0: keep it; 0: none yet, take the one held here or the next free one; -1: move to the
/// back), ARGV[5] = how long its queue entry lives without being renewed, in ms, ARGV[6] = the
/// round ("0": the waiter takes no hand-over, and leaves no offer). Sets the key (`SET NX PX`, as plain Redlock) only
/// if the key is absent and no live waiter with a smaller (ticket, name) is queued; otherwise queues or renews the
/// waiter, with its offer: the token, ttl and round with which a holder's release hands it the key (`release_script`).
/// A key that still holds the token of the waiter's previous offer was handed to one of its earlier rounds, which the
/// waiter has given up: it is deleted first, and the key is judged free (when the caller is not first, the first other
/// waiter is woken, as by a release). The caller is judged by the ticket it sent
/// against the first other waiter, whatever ticket this master still stores for it. A caller that adds an entry (ticket
/// 0 or -1, or a ticket but no entry here) first drops expired ones, as the release does, so that dead entries stay
/// few. A caller renewing its entry, or the woken head's round, drops them only when it is not first at a free key:
/// dropping entries can only move the caller forward, so looking first decides alike, and these two commonest calls
/// skip the `TIME` and the range scan. Every path reads the offers and the expiries or the queue before it writes
/// (the grant drops the caller's expiry first): a helper key of the wrong type fails the script before it writes, as
/// every script must; a lock key that is not a string (another kind's, on the same name) is held, as for `SET NX`.
/// Returns {status, ticket}: status 1 granted, 0 the key is held, -1 the key is free but another waiter comes first.
/// A fenced lock also sends KEYS[5] = its fencing counter and ARGV[7] = the largest counter the caller saw; its offer
/// is marked (`f` first), and it is answered {status, number, ticket}, the number as `fence_acquire_script` answers
/// it: a grant moves the counter above both its value and ARGV[7] and answers it; otherwise (or with no counter) the
/// counter, or this master's clock in microseconds, negated. A counter that is not one is an error reply before
/// anything is written.
REDLOCK_API inline constexpr script fair_acquire_script{
    R"(local q, e, o, me, fk = KEYS[2], KEYS[3], KEYS[4], ARGV[3], KEYS[5]
local cnt = fk and redis.call("get",fk)
if cnt and not (string.match(cnt,"^%d+$") and tonumber(cnt) < 9007199254740000) then
  return redis.error_reply("REDLOCK fence counter is not a counter")
end
local function answer(status, ticket)
  if not fk then return {status,ticket} end
  if cnt then return {status,tonumber(cnt),ticket} end
  local t = redis.call("time")
  return {status,-(t[1]*1000000+t[2]),ticket}
end
local held = redis.call("exists",KEYS[1]) == 1
local mine = redis.call("hget",o,me)
local stale = false
if held and mine then
  local v = redis.pcall("get",KEYS[1])
  stale = type(v) == "string" and string.match(mine,"^f?%d+:%d+:(.+)$") == v
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
    if cnt then
      local f = math.max(tonumber(cnt),tonumber(ARGV[7]))+1
      redis.call("set",fk,string.format("%d",f))
      return {1,f,ticket}
    end
    return answer(1,ticket)
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
  redis.call("hset",o,me,(fk and "f" or "")..ARGV[2]..":"..ARGV[6]..":"..ARGV[1])
elseif mine then
  redis.call("hdel",o,me)
end
if stale then
  redis.call("del",KEYS[1])
  local h = redis.call("zrange",q,0,1)
  local w = h[1] == me and h[2] or h[1]
  if w then redis.call("publish","redlock:wake:"..string.sub(w,1,16),w) end
end
if redis.call("pttl",q) < timeout then
  redis.call("pexpire",q,timeout)
  redis.call("pexpire",e,timeout)
end
if redis.call("pttl",o) < timeout then redis.call("pexpire",o,timeout) end
return answer(status,ticket))",
    "3221b78050fe50e49e1b369d610e857b1e06e646"};

// ---- lock kinds (docs/design.md, "Lock kinds"; docs/safety.md, "Lock kinds") ---------------------
// Each acquire script answers {status, number} like the fair one (core::command::acquire_script);
// each release and extend script answers 1 (ours) or 0.

/// KEYS[1] = key, KEYS[2] = its fencing counter; ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = the
/// largest counter the caller saw (0: none). `SET NX PX` as plain Redlock; on success moves the
/// counter above both its value and ARGV[3] and returns {1, fence}; else {0, counter}.
/// Starting from the largest value seen keeps the masters' counters equal after contention, so
/// that the fence rarely needs confirming. A missing counter (first use, or a master restarted
/// without its data) is not created here: the answer carries this master's clock in microseconds,
/// negated, instead ({1, -clock} or {0, -clock}), and the client fixes the fence from what the
/// other masters hold before the confirmation creates it (docs/safety.md, "Fencing tokens"). A counter that is not one
/// (not decimal digits, or so large that a double could no longer count on from it) is an error reply before anything
/// is written.
REDLOCK_API inline constexpr script fence_acquire_script{
    R"(local c = redis.call("get",KEYS[2])
if c and not (string.match(c,"^%d+$") and tonumber(c) < 9007199254740000) then
  return redis.error_reply("REDLOCK fence counter is not a counter")
end
if not redis.call("set",KEYS[1],ARGV[1],"nx","px",ARGV[2]) then
  if c then return {0,tonumber(c)} end
  local t = redis.call("time")
  return {0,-(t[1]*1000000+t[2])}
end
if not c then
  local t = redis.call("time")
  return {1,-(t[1]*1000000+t[2])}
end
local f = math.max(tonumber(c),tonumber(ARGV[3]))+1
redis.call("set",KEYS[2],string.format("%d",f))
return {1,f})",
    "c76bb7dfb03bd925912b30c4ed12e1a183dcf332"};

/// KEYS as for `fence_acquire_script`; ARGV[1] = token, ARGV[2] = the fence, ARGV[3] = "1" when the
/// fence was checked against a majority of counters (only such a fence may create a missing
/// counter: one resting on clocks could be below an earlier fence, and later rounds would take
/// the counter it created for proof). Where the key still holds our token, raises the counter to
/// the fence (creating it if so told): 1; else 0. A counter that is not one is an error reply
/// before anything is written.
REDLOCK_API inline constexpr script fence_confirm_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
local c = redis.call("get",KEYS[2])
if c and not (string.match(c,"^%d+$") and tonumber(c) < 9007199254740000) then
  return redis.error_reply("REDLOCK fence counter is not a counter")
end
if c then
  if tonumber(c) < tonumber(ARGV[2]) then redis.call("set",KEYS[2],ARGV[2]) end
elseif ARGV[3] == "1" then
  redis.call("set",KEYS[2],ARGV[2])
end
return 1)",
    "91769d181b052bb317e68778cfc9ca3d5475cebd"};

/// The release of a fenced round that failed or was cancelled (its fence was never handed to anyone).
/// KEYS as for a fenced lock's `release_script` (KEYS[5] = the fencing counter); ARGV[1] = token.
/// Does what `release_script` does with "0" (it hands nothing over) and, when the key still held
/// our token, takes back the one step that our grant, or the release that handed us the key,
/// moved the counter up: nothing else can have changed the counter while the key was ours (a
/// grant or a hand-over needs the key absent or another's, a confirmation needs the key to hold
/// its caller's token), and that step raised it by at least one, so it stays at or above what it
/// was before, and no fence anyone was given can be handed again (docs/safety.md, "Fencing
/// tokens"). Failed rounds then leave the counters where they found them (or at the floor they
/// were sent with), and the next holder's masters agree on its fence without a confirmation. The
/// counter is read before anything is written (a key of another type is an error reply that
/// changed nothing); one that is not a counter as the grants write them (canonical decimal
/// digits, not 0) is left alone.
REDLOCK_API inline constexpr script fence_abandon_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
local c = redis.call("get",KEYS[5])
redis.call("del",KEYS[1])
if c and string.match(c,"^[1-9]%d*$") and tonumber(c) < 9007199254740000 then redis.call("decr",KEYS[5]) end
local h = redis.call("zrange",KEYS[2],0,0)[1]
if not h then return 1 end
local t = redis.call("time")
local gone = redis.call("zrangebyscore",KEYS[3],"-inf",t[1]*1000+math.floor(t[2]/1000),"limit",0,100)
if #gone > 0 then
  redis.call("zrem",KEYS[2],unpack(gone))
  redis.call("zrem",KEYS[3],unpack(gone))
  redis.call("hdel",KEYS[4],unpack(gone))
  h = redis.call("zrange",KEYS[2],0,0)[1]
  if not h then return 1 end
end
redis.call("publish","redlock:wake:"..string.sub(h,1,16),h)
return 2)",
    "addc8f4f69a375ba107b5d48ba5a979b9d876ec1"};

/// KEYS = the keys of every resource; ARGV[1] = token, ARGV[2] = ttl in ms. Sets every key or none:
/// {1, count} when none existed, else {0, the first existing key's index}.
REDLOCK_API inline constexpr script multi_acquire_script{
    R"(for i = 1, #KEYS do
  if redis.call("exists",KEYS[i]) == 1 then return {0,i} end
end
for i = 1, #KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end
return {1,#KEYS})",
    "8728f63e62d7ca38fa6c8519112680b386592755"};

/// KEYS as for `multi_acquire_script`; ARGV[1] = token. Deletes the keys that hold our token: 1 if
/// any did, else 0.
REDLOCK_API inline constexpr script multi_release_script{
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

/// KEYS as for `multi_acquire_script`; ARGV[1] = token, ARGV[2] = ttl in ms. Only if every key holds
/// our token, makes each live at least ttl more (never less than it had): 1, else 0.
REDLOCK_API inline constexpr script multi_extend_script{
    R"(for i = 1, #KEYS do
  if redis.call("get",KEYS[i]) ~= ARGV[1] then return 0 end
end
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS do
  if redis.call("pttl",KEYS[i]) < ttl then redis.call("pexpire",KEYS[i],ttl) end
end
return 1)",
    "635badc0541a004ff86ed0351fc948ee65d6329d"};

/// KEYS[1] = key, KEYS[2] = its holds; ARGV[1] = owner, ARGV[2] = ttl in ms, ARGV[3] = this hold's
/// token. Takes the key if absent, or joins it if the owner holds it (never shortening it), and
/// records the hold: {1, holds}; {0, 0} when someone else holds it.
REDLOCK_API inline constexpr script reentrant_acquire_script{
    R"(local v = redis.call("get",KEYS[1])
if v and v ~= ARGV[1] then return {0,0} end
local n = redis.call("hlen",KEYS[2])
if not v then
  redis.call("set",KEYS[1],ARGV[1],"px",ARGV[2])
  if n > 0 then redis.call("del",KEYS[2]) end
elseif redis.call("pttl",KEYS[1]) < tonumber(ARGV[2]) then
  redis.call("pexpire",KEYS[1],ARGV[2])
end
redis.call("hset",KEYS[2],ARGV[3],"1")
redis.call("pexpire",KEYS[2],redis.call("pttl",KEYS[1]))
return {1,redis.call("hlen",KEYS[2])})",
    "7594d36b7bb27abdcd0119db2a60c1943aabbcbc"};

/// KEYS as for `reentrant_acquire_script`; ARGV[1] = owner, ARGV[2] unused, ARGV[3] = the hold's
/// token. Drops that hold (1), and the key with the last one; 0 if the hold is not here.
REDLOCK_API inline constexpr script reentrant_release_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] or redis.call("hdel",KEYS[2],ARGV[3]) == 0 then return 0 end
if redis.call("hlen",KEYS[2]) == 0 then redis.call("del",KEYS[1]) end
return 1)",
    "60b9632eebcb4ac9b6ade2d6bf926c2ee6bfabd3"};

/// KEYS as for `reentrant_acquire_script`; ARGV[1] = owner, ARGV[2] = ttl in ms, ARGV[3] = the hold's
/// token. If the hold is here, makes the key live at least ttl more: 1; else 0.
REDLOCK_API inline constexpr script reentrant_extend_script{
    R"(if redis.call("get",KEYS[1]) ~= ARGV[1] or redis.call("hexists",KEYS[2],ARGV[3]) == 0 then return 0 end
if redis.call("pttl",KEYS[1]) < tonumber(ARGV[2]) then
  redis.call("pexpire",KEYS[1],ARGV[2])
  redis.call("pexpire",KEYS[2],ARGV[2])
end
return 1)",
    "56905c8fe1d34c32daaf884a07f2b00c7c21a848"};

/// KEYS[1] = key, KEYS[2] = its readers, KEYS[3] = its waiting writer; ARGV[1] = token, ARGV[2] =
/// ttl in ms. While readers hold it, the key holds `readers_marker` and the sorted set KEYS[2] has
/// each reader's token scored by its expiry (server ms); the marker and the set expire with the
/// last live reader (no sooner, and no later: a writer never waits for a reader that left).
/// Refused ({0, 0}) when a writer holds the key or waits for it; else {1, readers}.
REDLOCK_API inline constexpr script read_acquire_script{
    R"(local v = redis.call("get",KEYS[1])
if (v and v ~= "redlock:readers") or redis.call("exists",KEYS[3]) == 1 then return {0,0} end
local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
redis.call("zremrangebyscore",KEYS[2],"-inf",now)
redis.call("zadd",KEYS[2],now+tonumber(ARGV[2]),ARGV[1])
local last = redis.call("zrange",KEYS[2],-1,-1,"withscores")[2]
if not v then redis.call("set",KEYS[1],"redlock:readers") end
redis.call("pexpireat",KEYS[1],last)
redis.call("pexpireat",KEYS[2],last)
return {1,redis.call("zcard",KEYS[2])})",
    "b6d5faeea69eb5c23311c0f5685b26a00ca2adc4"};

/// KEYS[1] = key, KEYS[2] = its readers; ARGV[1] = token. Drops the reader (1; 0 if absent); the
/// marker and the set then expire with the last live reader, or go at once without one.
REDLOCK_API inline constexpr script read_release_script{
    R"(local v = redis.call("get",KEYS[1])
if redis.call("zrem",KEYS[2],ARGV[1]) == 0 then return 0 end
if v ~= "redlock:readers" then return 1 end
local t = redis.call("time")
redis.call("zremrangebyscore",KEYS[2],"-inf",t[1]*1000+math.floor(t[2]/1000))
local last = redis.call("zrange",KEYS[2],-1,-1,"withscores")[2]
if not last then
  redis.call("del",KEYS[1])
else
  redis.call("pexpireat",KEYS[1],last)
  redis.call("pexpireat",KEYS[2],last)
end
return 1)",
    "bdcda4e406368a7982ee3c1aad597de487a30999"};

/// KEYS as for `read_release_script`; ARGV[1] = token, ARGV[2] = ttl in ms. If the reader is here
/// and not expired, makes its entry live at least ttl more (never less than it had), and the
/// marker and the set as long as the last live reader: 1; else 0.
REDLOCK_API inline constexpr script read_extend_script{
    R"(local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local s = redis.call("zscore",KEYS[2],ARGV[1])
if not s or tonumber(s) <= now or redis.call("get",KEYS[1]) ~= "redlock:readers" then return 0 end
local e = now+tonumber(ARGV[2])
if e > tonumber(s) then redis.call("zadd",KEYS[2],e,ARGV[1]) end
local last = redis.call("zrange",KEYS[2],-1,-1,"withscores")[2]
redis.call("pexpireat",KEYS[1],last)
redis.call("pexpireat",KEYS[2],last)
return 1)",
    "3fbaab0013688dfb376edc45a078f730bedd67b2"};

/// KEYS as for `read_acquire_script`; ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = the waiting
/// writer's name, ARGV[4] = how long its claim lives unless renewed, in ms. Takes the key if
/// absent: {1, 0}. While readers hold it, claims the writer's place (unless another writer did)
/// so that no new reader enters: {-1, 0}. Else {0, 0}.
REDLOCK_API inline constexpr script write_acquire_script{
    R"(local v = redis.call("get",KEYS[1])
local w = redis.call("get",KEYS[3])
if not v then
  redis.call("set",KEYS[1],ARGV[1],"px",ARGV[2])
  if w == ARGV[3] then redis.call("del",KEYS[3]) end
  return {1,0}
end
if v ~= "redlock:readers" or (w and w ~= ARGV[3]) then return {0,0} end
redis.call("set",KEYS[3],ARGV[3],"px",ARGV[4])
return {-1,0})",
    "63b30dcd6ce4ec86d08a7e9607c791b31b3c5927"};

/// KEYS[1] = a key's waiting writer; ARGV[1] = the writer's name. Drops the claim if it is that
/// writer's: 1, else 0.
REDLOCK_API inline constexpr script write_leave_script{
    R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) end
return 0)",
    "6c015f8e0f584393e2a8b7801d6eeea0a1ff1e87"};

/// KEYS[1] = the semaphore's holders (token -> expiry in server ms), KEYS[2] = its permit count;
/// ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = permits. Admits the caller if fewer than
/// `permits` live holders remain (dropping the expired ones): {1, holders}; else {0, holders}.
/// An error reply, before anything is written, if live holders use another permit count.
REDLOCK_API inline constexpr script semaphore_acquire_script{
    R"(local p = redis.call("get",KEYS[2])
local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local n = redis.call("zcount",KEYS[1],"("..now,"+inf")
if n > 0 and p and p ~= ARGV[3] then
  return redis.error_reply("REDLOCK semaphore has "..p.." permits, not "..ARGV[3])
end
if n >= tonumber(ARGV[3]) then return {0,n} end
redis.call("zremrangebyscore",KEYS[1],"-inf",now)
local ttl = tonumber(ARGV[2])
redis.call("zadd",KEYS[1],now+ttl,ARGV[1])
local left = redis.call("pttl",KEYS[1])
if left < ttl then
  redis.call("pexpire",KEYS[1],ttl)
  left = ttl
end
redis.call("set",KEYS[2],ARGV[3],"px",left)
return {1,n+1})",
    "37702e59c01970394c43191203de8d5af51d36f5"};

/// KEYS as for `semaphore_acquire_script`; ARGV[1] = token. Drops the holder: 1 (0 if absent).
REDLOCK_API inline constexpr script semaphore_release_script{
    R"(if redis.call("zrem",KEYS[1],ARGV[1]) == 0 then return 0 end
if redis.call("exists",KEYS[1]) == 0 then redis.call("del",KEYS[2]) end
return 1)",
    "6d9bd32d2e266817cd6417bdf85b39fe6e6ffb19"};

/// KEYS as for `semaphore_acquire_script`; ARGV[1] = token, ARGV[2] = ttl in ms. If the holder is
/// here and not expired, makes its entry live at least ttl more (never less than it had), and the
/// set at least as long: 1; else 0.
REDLOCK_API inline constexpr script semaphore_extend_script{
    R"(local t = redis.call("time")
local now = t[1]*1000+math.floor(t[2]/1000)
local s = redis.call("zscore",KEYS[1],ARGV[1])
if not s or tonumber(s) <= now then return 0 end
local ttl = tonumber(ARGV[2])
if now+ttl > tonumber(s) then redis.call("zadd",KEYS[1],now+ttl,ARGV[1]) end
if redis.call("pttl",KEYS[1]) < ttl then
  redis.call("pexpire",KEYS[1],ttl)
  redis.call("pexpire",KEYS[2],ttl)
end
return 1)",
    "946d3eaccb9a0d7ddcb01fec0eaffb290ddfb9d6"};

/// The channel on which a client's waiters are woken: this prefix and the client's inbox, the
/// first 16 characters of each of its waiters' names.
inline constexpr std::string_view wake_channel_prefix = "redlock:wake:";
/// Suffixes of a lock key's waiter queue and its expiries.
inline constexpr std::string_view queue_suffix = ":redlock-queue";
inline constexpr std::string_view expiry_suffix = ":redlock-expiry";
/// Suffix of a lock key's waiters' offers: waiter name -> "<ttl>:<round>:<token>" (a fenced
/// waiter's: "f<ttl>:<round>:<token>").
inline constexpr std::string_view offer_suffix = ":redlock-offer";

/// Suffixes of the keys beside a lock key that the lock kinds use.
inline constexpr std::string_view fence_suffix = ":redlock-fence";
inline constexpr std::string_view holds_suffix = ":redlock-holds";
inline constexpr std::string_view readers_suffix = ":redlock-readers";
inline constexpr std::string_view writer_suffix = ":redlock-writer";
inline constexpr std::string_view permits_suffix = ":redlock-permits";
/// What a read/write lock's key holds while readers hold it (never a token: those are hex).
inline constexpr std::string_view readers_marker = "redlock:readers";
/// Values that mark a key as the library's own (the readers' marker): an owner id may not start
/// with this, or a reentrant lock could join a key it does not own.
inline constexpr std::string_view reserved_value_prefix = "redlock:";

/// Every suffix above. A lock key that ends with one of them could be another lock's helper key
/// (resource "x:redlock-fence" is the fencing counter of resource "x"), so that one user's lock
/// could overwrite, or block, another's: such resource names are refused.
inline constexpr std::string_view helper_suffixes[] = {queue_suffix, expiry_suffix,  offer_suffix,  fence_suffix,
                                                       holds_suffix, readers_suffix, writer_suffix, permits_suffix};

/// Every script, loaded (`SCRIPT LOAD`) on each new connection before any request of a lock can
/// use it, so that an `EVALSHA` never meets an empty script cache: its `NOSCRIPT` answer, coming
/// after the quorum decided, would leave that master without the key (a plain `SET` in flight
/// still lands). Requests queued while the first connection was being made go before them: a
/// lock whose `NOSCRIPT` comes after its quorum sends its `EVAL` while it is still held (see
/// `lock_op::on_reply`). The fallback to `EVAL` stays for a cache flushed while connected.
inline constexpr const script* all_scripts[] = {
    &release_script,           &dequeue_script,          &extend_script,        &extend_many_script,
    &fair_acquire_script,      &fence_acquire_script,    &fence_confirm_script, &fence_abandon_script,
    &multi_acquire_script,     &multi_release_script,    &multi_extend_script,  &reentrant_acquire_script,
    &reentrant_release_script, &reentrant_extend_script, &read_acquire_script,  &read_release_script,
    &read_extend_script,       &write_acquire_script,    &write_leave_script,   &semaphore_acquire_script,
    &semaphore_release_script, &semaphore_extend_script,
};

}  // namespace redlock::detail
