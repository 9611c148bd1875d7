// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Incremental, sans-I/O parser of RESP2 and RESP3 replies.

#include <redlock/export.hpp>
#include <redlock/resp/node.hpp>

#include <boost/system/error_code.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace redlock::resp {

/// Bounds on one reply. Whatever a peer declares is checked against them before anything is
/// allocated for it, so a hostile or broken node cannot make the client grow memory without bound.
struct parser_limits {
  /// Bytes of one blob string, blob error or verbatim string.
  std::size_t max_bulk_length = 64 * 1024 * 1024;
  /// Bytes of one simple string, simple error, integer, double, big number or boolean line (without CRLF).
  std::size_t max_line_length = 64 * 1024;
  /// Aggregates nested inside one another (a top-level array of strings has nesting 1); at most
  /// `parser::hard_max_depth`.
  std::size_t max_depth = 16;
  /// Declared elements of one aggregate (pairs for maps and attributes).
  std::size_t max_aggregate_size = 1024 * 1024;
  /// Nodes of one reply, attributes included.
  std::size_t max_nodes = 4 * 1024 * 1024;
};

/// Parses one reply at a time from bytes as they arrive, into a flat pre-order list of nodes.
///
/// Input may be split anywhere: the parser keeps its position (a fixed stack of open aggregates,
/// the pending line or bulk string) and never rescans consumed bytes, so parsing is linear in the
/// input however it is split. An element that arrived whole (the usual case) is taken in one step;
/// only one that did not is stepped through byte states, so a line is scanned at most twice. It consumes every byte it
/// is given until a reply is complete, so after "need more" the caller has nothing to keep.
///
/// Errors (malformed input, limits) are reported through the error code, never thrown, and are
/// sticky until reset(): the connection is expected to close. Nodes of an incomplete reply already
/// appended to `out` stay there, so keep passing the same `out` until done().
class REDLOCK_API parser {
 public:
  /// Upper bound of `parser_limits::max_depth`: the size of the fixed stack of open aggregates.
  static constexpr std::size_t hard_max_depth = 64;

  /// A parser ready for the first reply. A `max_depth` above `hard_max_depth` is lowered to it.
  explicit parser(parser_limits limits = {}) noexcept;

  /// Parses bytes of `data`, which must begin at the first byte not yet consumed, appending complete
  /// nodes to `out`. Stops right after one complete top-level reply (then done() is true), at the end
  /// of `data` (need more: no error and not done), or on error. Returns the number of bytes consumed;
  /// the caller discards them and calls again with the rest followed by new bytes. After done(), the
  /// next call starts the next reply.
  ///
  /// On error `ec` is set, the parser stays failed (later calls return 0 and the same error) until
  /// reset(); the return value then counts the bytes examined up to the offending one.
  /// Only allocation failure throws (std::bad_alloc); the parser is then failed as well.
  std::size_t consume(std::string_view data, response& out, boost::system::error_code& ec);

  /// True when the last consume() appended the last node of a complete top-level reply.
  bool done() const noexcept { return done_; }

  /// Forgets any partial reply and error: ready to parse a new reply from its first byte.
  void reset() noexcept;

  /// The limits in force (with `max_depth` at most `hard_max_depth`).
  const parser_limits& limits() const noexcept { return limits_; }

 private:
  enum class state : std::uint8_t {
    type_byte,  // expecting the first byte of a value
    line,       // reading the line after the type byte, up to '\r'
    line_lf,    // the line's '\r' was seen; expecting '\n'
    body,       // reading the bytes of a bulk string
    body_cr,    // expecting the '\r' after a bulk string
    body_lf,    // expecting the '\n' after a bulk string
    failed,     // sticky error until reset()
  };

  // One open aggregate: how many child elements it still expects.
  struct frame {
    std::size_t remaining = 0;
    bool attribute = false;
  };

  std::size_t parse(std::string_view data, response& out);
  std::size_t whole_element(const char* data, std::size_t size, response& out);
  std::size_t scan_line(std::string_view rest, response& out);
  void on_line(std::string_view line, response& out);
  void on_bulk_header(std::string_view line);
  void on_aggregate_header(std::string_view line, response& out);
  void emit_value(type t, std::string_view value, response& out);
  void finish_bulk(response& out);
  bool count_node() noexcept;
  void element_done() noexcept;
  void fail(boost::system::error_code code) noexcept;

  parser_limits limits_;
  state state_ = state::type_byte;
  char type_byte_ = 0;
  bool done_ = false;
  std::size_t depth_ = 0;           // open aggregates, i.e. the depth of the next node
  std::size_t nodes_ = 0;           // nodes of the current reply
  std::size_t body_remaining_ = 0;  // bytes of the pending bulk string still to read
  boost::system::error_code error_;
  std::string line_;  // a line split across calls, accumulated (bounded by the line limits)
  node pending_;      // the bulk string being read, appended to `out` once complete
  std::array<frame, hard_max_depth> frames_{};
};

}  // namespace redlock::resp
