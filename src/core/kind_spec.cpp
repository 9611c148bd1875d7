// SPDX-License-Identifier: BSL-1.0
// The lock kinds' table (redlock/core/kind_spec.hpp): choosing a row, and encoding its steps.

#include <redlock/core/kind_spec.hpp>

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

bool encode_step(resp::request& req, const step_spec& s, const step_values& v, bool by_sha) {
  if (s.set_nx) {
    req.push("SET", v.key, v.token, "NX", "PX", v.ttl_ms);
    return true;
  }
  if (!s.script) return false;
  std::size_t keys = 0;
  for (const auto k : s.key_refs()) keys += k == key_ref::all ? v.all_keys.size() : 1;
  req.begin(3 + keys + s.arg_count);
  req.arg(by_sha ? std::string_view{"EVALSHA"} : std::string_view{"EVAL"});
  req.arg(by_sha ? s.script->sha1 : s.script->body);
  req.arg(static_cast<std::int64_t>(keys));
  for (const auto k : s.key_refs()) {
    if (k == key_ref::lock) {
      req.arg(v.key);
    } else if (k == key_ref::all) {
      for (const auto& key : v.all_keys) req.arg(key);
    } else {
      req.arg(v.key, suffix_of(k));
    }
  }
  for (const auto a : s.arg_refs()) {
    switch (a) {
      case arg_ref::token:
        req.arg(v.token);
        break;
      case arg_ref::owner:
        req.arg(v.owner);
        break;
      case arg_ref::ttl:
        req.arg(v.ttl_ms);
        break;
      case arg_ref::waiter:
        req.arg(v.waiter);
        break;
      case arg_ref::ticket:
        req.arg(v.ticket);
        break;
      case arg_ref::entry_timeout:
        req.arg(v.entry_timeout_ms);
        break;
      case arg_ref::permits:
        req.arg(v.permits);
        break;
      case arg_ref::fence_floor:
        req.arg(v.fence_floor);
        break;
      case arg_ref::fence:
        req.arg(v.fence);
        break;
      case arg_ref::create:
        req.arg(v.create ? std::string_view{"1"} : std::string_view{"0"});
        break;
      case arg_ref::zero:
        req.arg(std::string_view{"0"});
        break;
    }
  }
  return true;
}

}  // namespace redlock::core
