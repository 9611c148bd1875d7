// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Where Redis Cluster keeps a key: its hash slot (CRC16/XMODEM of the key, or of its hash tag,
/// modulo 16384), and the helper keys that must live in a lock key's slot. Pure: no I/O.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace redlock::core {

/// The number of hash slots of a Redis Cluster.
inline constexpr std::uint16_t slot_count = 16384;

namespace detail_slot {
constexpr std::array<std::uint16_t, 256> make_crc16_table() noexcept {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    unsigned crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = static_cast<std::uint16_t>(crc);
  }
  return table;
}
inline constexpr auto crc16_table = make_crc16_table();
}  // namespace detail_slot

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes keys with.
constexpr std::uint16_t crc16(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (unsigned char c : bytes)
    crc = static_cast<std::uint16_t>(crc << 8) ^ detail_slot::crc16_table[((crc >> 8) ^ c) & 0xff];
  return crc;
}

/// The key's hash tag: the bytes between its first `{` and the first `}` after it, when there
/// is at least one; Redis hashes only those. Nothing when the key has no valid tag.
constexpr std::optional<std::string_view> hash_tag(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return std::nullopt;
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return std::nullopt;
  return key.substr(open + 1, close - open - 1);
}

/// The hash slot of `key`, as Redis Cluster computes it.
constexpr std::uint16_t key_slot(std::string_view key) noexcept {
  const auto tag = hash_tag(key);
  return static_cast<std::uint16_t>(crc16(tag ? *tag : key) & (slot_count - 1));
}

/// @brief How a lock names its helper keys (fair queue, fence counter, holds, readers...).
///
/// On a plain master a helper key is the lock key plus its suffix, as always. On a cluster
/// master every key a script names must be in one slot, so a lock key without a hash tag is
/// wrapped: `{key}` plus the suffix hashes like `key`. A lock key with a tag keeps `key` plus
/// the suffix (already in its slot): the two schemes give the same names for tagged keys. Which
/// scheme a master uses follows from what it is (a cluster node or not), so every client of a
/// master agrees on the names without any transition (docs/safety.md, "Cluster masters").
enum class key_naming : std::uint8_t {
  plain,    ///< lock key + suffix
  slotted,  ///< lock key + suffix when tagged, else `{lock key}` + suffix
};

/// Why a lock key cannot be used on a cluster master (empty when it can). Two shapes are
/// refused: a key with a `}` but no valid hash tag (wrapping it in braces would change its
/// slot), and a key that is one whole tag, `{name}` (its helper keys would be those of `name`).
inline std::string_view slotted_key_problem(std::string_view lock_key) noexcept {
  const auto tag = hash_tag(lock_key);
  if (!tag) {
    if (lock_key.find('}') != std::string_view::npos)
      return "has a '}' but no hash tag: wrapping it in braces for a cluster master would change its slot";
    return {};
  }
  if (lock_key.size() == tag->size() + 2)
    return "is one whole hash tag: on a cluster master its helper keys would be those of the name inside the "
           "braces (use that name: it hashes to the same slot)";
  return {};
}

/// Appends the helper key of `lock_key` with `suffix` under `naming` to `out`.
inline void append_helper_key(std::string& out, std::string_view lock_key, std::string_view suffix, key_naming naming) {
  if (naming == key_naming::slotted && !hash_tag(lock_key)) {
    out += '{';
    out += lock_key;
    out += '}';
  } else {
    out += lock_key;
  }
  out += suffix;
}

}  // namespace redlock::core
