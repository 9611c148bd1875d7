// SPDX-License-Identifier: BSL-1.0
// The lock kinds' table (redlock/core/kind_spec.hpp): choosing a row, and encoding its steps.

#include <redlock/core/kind_spec.hpp>

#include <cassert>

namespace redlock::core {

const kind_spec* find_kind(lock_kind kind, bool fence, bool owned, bool multi, std::string_view* why) noexcept {
  const auto refuse = [why](std::string_view w) -> const kind_spec* {
    if (why) *why = w;
    return nullptr;
  };
  if (kind > lock_kind::semaphore) return refuse("unknown lock kind");
  if (fence && (kind != lock_kind::exclusive || multi || owned))
    return refuse("fence is only for a plain exclusive lock of one resource, without owner");
  if (owned && (kind != lock_kind::exclusive || multi)) return refuse("owner is only for exclusive locks");
  if (multi) return kind == lock_kind::exclusive ? &kinds::multi : refuse("several resources only for exclusive locks");
  if (fence) return &kinds::fenced;
  if (owned) return &kinds::reentrant;
  switch (kind) {
    case lock_kind::exclusive:
      return &kinds::plain;
    case lock_kind::read:
      return &kinds::reader;
    case lock_kind::write:
      return &kinds::writer;
    case lock_kind::semaphore:
      return &kinds::semaphore;
  }
  return refuse("unknown lock kind");
}

namespace {

std::string_view suffix_of(key_ref k) noexcept {
  switch (k) {
    case key_ref::queue:
      return detail::queue_suffix;
    case key_ref::expiry:
      return detail::expiry_suffix;
    case key_ref::offer:
      return detail::offer_suffix;
    case key_ref::fence:
      return detail::fence_suffix;
    case key_ref::holds:
      return detail::holds_suffix;
    case key_ref::readers:
      return detail::readers_suffix;
    case key_ref::writer:
      return detail::writer_suffix;
    case key_ref::permits:
      return detail::permits_suffix;
    case key_ref::lock:
    case key_ref::all:
      break;
  }
  return {};
}

}  // namespace

namespace {

// Calls `put(head, tail)` for each bulk string of a script step after its first two (EVALSHA and
// the digest, or EVAL and the body): the key count, the keys, the arguments. An integer's text
// lives for the call only.
template <class Put>
void for_each_script_arg(const step_spec& s, const step_values& v, std::size_t keys, Put&& put) {
  const auto number = [&put](std::int64_t n) { put(resp::detail::integer_text(n).view(), {}); };
  number(static_cast<std::int64_t>(keys));
  for (const auto k : s.key_refs()) {
    if (k == key_ref::lock) {
      put(v.key, {});
    } else if (k == key_ref::all) {
      for (const auto& key : v.all_keys) put(key, {});
    } else {
      put(v.key, suffix_of(k));
    }
  }
  for (const auto a : s.arg_refs()) {
    switch (a) {
      case arg_ref::token:
        put(v.token, {});
        break;
      case arg_ref::owner:
        put(v.owner, {});
        break;
      case arg_ref::ttl:
        number(v.ttl_ms);
        break;
      case arg_ref::waiter:
        put(v.waiter, {});
        break;
      case arg_ref::ticket:
        number(v.ticket);
        break;
      case arg_ref::entry_timeout:
        number(v.entry_timeout_ms);
        break;
      case arg_ref::permits:
        number(v.permits);
        break;
      case arg_ref::fence_floor:
        number(v.fence_floor);
        break;
      case arg_ref::fence:
        number(v.fence);
        break;
      case arg_ref::create:
        put(v.create ? std::string_view{"1"} : std::string_view{"0"}, {});
        break;
      case arg_ref::zero:
        put(std::string_view{"0"}, {});
        break;
      case arg_ref::one:
        put(std::string_view{"1"}, {});
        break;
      case arg_ref::round:
        number(static_cast<std::int64_t>(v.round));
        break;
      case arg_ref::keep:
        put(v.keep, {});
        break;
    }
  }
}

}  // namespace

bool encode_step(resp::request& req, const step_spec& s, const step_values& v, bool by_sha) {
  if (s.set_nx) {
    req.push("SET", v.key, v.token, "NX", "PX", v.ttl_ms);
    return true;
  }
  if (!s.script) return false;
  std::size_t keys = 0;
  for (const auto k : s.key_refs()) keys += k == key_ref::all ? v.all_keys.size() : 1;
  const std::string_view command = by_sha ? std::string_view{"EVALSHA"} : std::string_view{"EVAL"};
  const std::string_view script = by_sha ? std::string_view{s.script->sha1} : std::string_view{s.script->body};
  // Sized first, then written into room made once (an extension is encoded on every renewal).
  std::size_t bytes = resp::detail::bulk_size(command.size()) + resp::detail::bulk_size(script.size());
  std::size_t count = 2;
  for_each_script_arg(s, v, keys, [&](std::string_view head, std::string_view tail) {
    bytes += resp::detail::bulk_size(head.size() + tail.size());
    ++count;
  });
  auto w = req.begin_sized(count, bytes);
  w.put(command);
  w.put(script);
  for_each_script_arg(s, v, keys, [&w](std::string_view head, std::string_view tail) { w.put(head, tail); });
  assert(w.full());
  return true;
}

}  // namespace redlock::core
