// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// RESP2/RESP3 reply values as a flat, pre-order list of nodes.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

/// The Redis wire protocol (RESP2 and RESP3): the requests `connection::async_exec` sends
/// (`request`), the reply values it returns (`response`), and the incremental parser of replies.
namespace redlock::resp {

/// The wire type of one RESP value. RESP2's null bulk string (`$-1`) and null array (`*-1`) are
/// both reported as `null`, like RESP3's `_`.
enum class type : std::uint8_t {
  simple_string,    ///< `+OK`
  simple_error,     ///< `-ERR ...`
  integer,          ///< `:42`
  blob_string,      ///< `$3\r\nabc` (binary-safe)
  blob_error,       ///< `!5\r\nERR x` (RESP3, binary-safe)
  null,             ///< `_`, `$-1`, `*-1`
  boolean,          ///< `#t` / `#f`; value is "t" or "f"
  double_type,      ///< `,3.14` (also inf, -inf, nan); value is the text as sent
  big_number,       ///< `(12345678901234567890`; value is the digits as sent
  verbatim_string,  ///< `=8\r\ntxt:text`; value keeps the 3-letter format and colon
  array,            ///< `*N`
  map,              ///< `%N`: N key/value pairs, 2N child nodes
  set,              ///< `~N`
  attribute,        ///< `|N`: N key/value pairs of metadata preceding the value they describe
  push,             ///< `>N`: out-of-band data (pub/sub, client tracking), not a reply to a request
};

/// True for the types that have child nodes (array, map, set, attribute, push).
constexpr bool is_aggregate(type t) noexcept {
  return t == type::array || t == type::map || t == type::set || t == type::attribute || t == type::push;
}

/// Number of child nodes an aggregate with declared size `size` has (maps and attributes: pairs).
constexpr std::size_t element_multiplicity(type t) noexcept { return (t == type::map || t == type::attribute) ? 2 : 1; }

/// One value of a reply. Aggregates carry their declared `aggregate_size` (pairs for map and
/// attribute) and an empty `value`; their children follow them in the list at `depth + 1`.
struct node {
  /// The value's wire type.
  type data_type = type::null;
  /// Aggregates: the declared number of elements (pairs for map and attribute). Others: 0.
  std::size_t aggregate_size = 0;
  /// Nesting level: 0 for a reply's top-level value, one more than the enclosing aggregate's.
  std::size_t depth = 0;
  /// Scalars: the payload as sent, without type prefix or CRLF (binary-safe). Aggregates: empty.
  std::string value;

  /// Equal when type, size, depth and value are.
  friend bool operator==(const node&, const node&) = default;
};

/// Nodes of one or more replies in pre-order. Each reply starts with a node at depth 0
/// (an attribute at depth 0 belongs to the reply that follows it).
using response = std::vector<node>;

/// True for `simple_error` and `blob_error`.
constexpr bool is_error(type t) noexcept { return t == type::simple_error || t == type::blob_error; }

/// The value of the first reply in `r`: its first depth-0 node that is not an attribute (RESP3
/// attributes precede the value they describe). Null when there is none.
inline const node* reply_value(const response& r) noexcept {
  for (const auto& n : r) {
    if (n.depth == 0 && n.data_type != type::attribute) return &n;
  }
  return nullptr;
}

}  // namespace redlock::resp
