// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// The lock scripts as they were before an outside review found them faulty (docs/safety.md,
/// "What every script guarantees"), kept as broken twins: the script model and the fleet
/// simulation must catch each when it is put back. Tests only; never loaded by the library.

#include <redlock/detail/scripts.hpp>

#include <array>
#include <cstddef>
#include <string_view>

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
inline constexpr scripts::script unchecked_fence_abandon{R"(local c = redis.call("get",KEYS[5])
if c and tonumber(c) > 0 then redis.call("decr",KEYS[5]) end
if redis.call("get",KEYS[1]) ~= ARGV[1] then return 0 end
redis.call("del",KEYS[1])
return 1)",
                                                         ""};

// The newer twins are the library's script with one fault put back, made at compile time from
// its text so that they follow every other change to it.
struct edit {
  std::string_view from;  // found exactly once in the script
  std::string_view to;
};
struct twin_text {
  char data[4096]{};
  std::size_t size = 0;
  constexpr std::string_view view() const { return {data, size}; }
};
// Not a constant expression (so the twin does not compile) when an edit's text is missing,
// repeated, or the result does not fit.
template <std::size_t K>
constexpr twin_text twin(std::string_view body, const std::array<edit, K>& edits) {
  twin_text out;
  for (char ch : body) out.data[out.size++] = ch;
  for (const auto& e : edits) {
    const std::string_view now = out.view();
    const auto at = now.find(e.from);
    if (at == std::string_view::npos || now.find(e.from, at + 1) != std::string_view::npos) throw "edit not unique";
    if (now.size() - e.from.size() + e.to.size() > sizeof out.data) throw "twin too long";
    twin_text next;
    for (char ch : now.substr(0, at)) next.data[next.size++] = ch;
    for (char ch : e.to) next.data[next.size++] = ch;
    for (char ch : now.substr(at + e.from.size())) next.data[next.size++] = ch;
    out = next;
  }
  return out;
}

// A fair master that orders a waiter by the ticket it stored, not the one sent.
inline constexpr twin_text old_fair_text =
    twin(scripts::fair_acquire_script.body, std::array<edit, 1>{{
                                                {R"(    local h = redis.call("zrange",q,0,1,"withscores")
    local i = h[1] == me and 3 or 1
    return h[i] == nil or (ticket > 0 and (ticket < tonumber(h[i+1]) or (ticket == tonumber(h[i+1]) and me < h[i])))
)",
                                                 R"(    local h = redis.call("zrange",q,0,0,"withscores")
    return h[1] == nil or h[1] == me or (ticket > 0 and (ticket < tonumber(h[2]) or (ticket == tonumber(h[2]) and me < h[1])))
)"},
                                            }});
inline constexpr scripts::script old_fair{old_fair_text.view(), ""};

// A fair round that takes for its own, and deletes, a key handed to any waiter (not only to itself).
inline constexpr twin_text stealing_fair_text =
    twin(scripts::fair_acquire_script.body,
         std::array<edit, 2>{{
             {"if held and mine then\n", "if held then\n"},
             {R"(  stale = type(v) == "string" and string.match(mine,"^f?%d+:%d+:(.+)$") == v
)",
              R"(  for _, x in ipairs(redis.call("hvals",o)) do
    if type(v) == "string" and string.match(x,"^f?%d+:%d+:(.+)$") == v then stale = true end
  end
)"},
         }});
inline constexpr scripts::script stealing_fair{stealing_fair_text.view(), ""};

// A dequeue that gives back the key its waiter was granted by hand-overs, ignoring the token kept.
inline constexpr twin_text unkept_dequeue_text =
    twin(scripts::dequeue_script.body, std::array<edit, 1>{{
                                           {"if tok == ARGV[2] or redis.call(", "if redis.call("},
                                       }});
inline constexpr scripts::script unkept_dequeue{unkept_dequeue_text.view(), ""};

// A fenced lock's release that hands the key over without granting the next fence: the waiter's
// fence on that master is no larger than its predecessor's.
inline constexpr twin_text unfenced_handover_text =
    twin(scripts::release_script.body, std::array<edit, 1>{{
                                           {"      redis.call(\"set\",KEYS[5],n)\n", ""},
                                       }});
inline constexpr scripts::script unfenced_handover{unfenced_handover_text.view(), ""};

// A release that names no counter (a plain lock's on the same name, or an earlier version's) and
// still hands the key to a fenced waiter: the counter does not move, and the waiter's failed round
// takes back a step nobody made.
inline constexpr twin_text unmarked_handover_text = twin(
    scripts::release_script.body, std::array<edit, 2>{{
                                      {"  if f == \"f\" and not (n and", "  if KEYS[5] and f == \"f\" and not (n and"},
                                      {"    if f == \"f\" then\n", "    if KEYS[5] and f == \"f\" then\n"},
                                  }});
inline constexpr scripts::script unmarked_handover{unmarked_handover_text.view(), ""};

}  // namespace redlock::test::broken
