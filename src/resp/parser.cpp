// SPDX-License-Identifier: BSL-1.0
#include <redlock/error.hpp>
#include <redlock/resp/parser.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

namespace redlock::resp {
namespace {

// A length or count line is "-1" or at most 19 digits (any int64); a longer one is garbage,
// rejected before it is buffered.
constexpr std::size_t max_length_line = 20;

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

// A length, count or integer of 1 to 18 digits (no sign): what replies almost always carry, read
// without overflow checks. False for anything else, which the general path then judges.
bool small_unsigned(const char* p, std::size_t n, std::size_t& value) noexcept {
  if (n == 0 || n > 18) return false;
  std::size_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned d = static_cast<unsigned>(static_cast<unsigned char>(p[i])) - '0';
    if (d > 9) return false;
    v = v * 10 + d;
  }
  value = v;
  return true;
}

/// An optional '-' then decimal digits that fit an int64 ("+5", "", "12a" are rejected).
bool parse_int64(std::string_view text, std::int64_t& value) noexcept {
  // Lengths and counts are a digit or two: up to 18 digits cannot overflow, so a plain loop does.
  const bool negative = !text.empty() && text.front() == '-';
  const std::size_t digits = text.size() - (negative ? 1 : 0);
  if (digits >= 1 && digits <= 18) {
    std::size_t v = 0;
    if (!small_unsigned(text.data() + (negative ? 1 : 0), digits, v)) return false;
    value = negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
    return true;
  }
  const char* const end = text.data() + text.size();
  // from_chars rejects a leading '+' and reports overflow instead of wrapping.
  const auto result = std::from_chars(text.data(), end, value);
  return result.ec == std::errc{} && result.ptr == end;
}

/// Loose check of a RESP3 double: kept as text, so only obvious garbage is refused.
bool is_double(std::string_view text) noexcept {
  if (text == "inf" || text == "-inf" || text == "+inf" || text == "nan" || text == "-nan") return true;
  bool digit = false;
  for (const char c : text) {
    if (is_digit(c)) {
      digit = true;
    } else if (c != '+' && c != '-' && c != '.' && c != 'e' && c != 'E') {
      return false;
    }
  }
  return digit;
}

/// An optional sign then at least one digit.
bool is_big_number(std::string_view text) noexcept {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), is_digit);
}

bool is_known_type(char c) noexcept {
  switch (c) {
    case '+':
    case '-':
    case ':':
    case '$':
    case '!':
    case '=':
    case '_':
    case '#':
    case ',':
    case '(':
    case '*':
    case '%':
    case '~':
    case '|':
    case '>':
      return true;
    default:
      return false;
  }
}

// Types whose line is a length or count rather than a value.
bool has_length_line(char c) noexcept {
  switch (c) {
    case '$':
    case '!':
    case '=':
    case '*':
    case '%':
    case '~':
    case '|':
    case '>':
      return true;
    default:
      return false;
  }
}

type aggregate_type(char c) noexcept {
  switch (c) {
    case '%':
      return type::map;
    case '~':
      return type::set;
    case '|':
      return type::attribute;
    case '>':
      return type::push;
    default:
      return type::array;
  }
}

type bulk_type(char c) noexcept {
  switch (c) {
    case '!':
      return type::blob_error;
    case '=':
      return type::verbatim_string;
    default:
      return type::blob_string;
  }
}

}  // namespace

parser::parser(parser_limits limits) noexcept : limits_(limits) {
  limits_.max_depth = std::min(limits_.max_depth, hard_max_depth);
}

void parser::reset() noexcept {
  state_ = state::type_byte;
  type_byte_ = 0;
  done_ = false;
  depth_ = 0;
  nodes_ = 0;
  body_remaining_ = 0;
  error_ = {};
  line_.clear();
  pending_.value.clear();
}

std::size_t parser::consume(std::string_view data, response& out, boost::system::error_code& ec) {
  if (state_ == state::failed) {
    ec = error_;
    return 0;
  }
  if (done_) {  // the previous call completed a reply: this one starts the next
    done_ = false;
    nodes_ = 0;
  }
  std::size_t consumed = 0;
  try {
    consumed = parse(data, out);
  } catch (...) {
    // Our state may be half-updated; refuse to continue rather than misparse.
    fail(make_error_code(boost::system::errc::not_enough_memory));
    throw;
  }
  ec = state_ == state::failed ? error_ : boost::system::error_code{};
  return consumed;
}

std::size_t parser::parse(std::string_view data, response& out) {
  const char* const bytes = data.data();
  const std::size_t size = data.size();
  std::size_t pos = 0;
  while (pos < size && !done_ && state_ != state::failed) {
    switch (state_) {
      case state::type_byte:
        if (const std::size_t whole = whole_element(bytes + pos, size - pos, out); whole != 0) {
          pos += whole;
          break;
        }
        type_byte_ = bytes[pos++];
        if (!is_known_type(type_byte_)) {  // includes RESP3 streamed chunks (';', '.')
          fail(error::protocol_error);
          break;
        }
        state_ = state::line;
        break;
      case state::line:
        pos += scan_line(data.substr(pos), out);
        break;
      case state::line_lf:
        if (bytes[pos++] != '\n') {
          fail(error::protocol_error);
          break;
        }
        state_ = state::type_byte;  // on_line() may move on to a bulk body
        on_line(line_, out);
        line_.clear();
        break;
      case state::body: {
        // Appending as bytes arrive, rather than reserving the declared length, means memory follows
        // what the peer actually sent; the first append of a complete body allocates exactly once.
        const std::size_t take = std::min(size - pos, body_remaining_);
        pending_.value.append(bytes + pos, take);
        pos += take;
        body_remaining_ -= take;
        if (body_remaining_ == 0) state_ = state::body_cr;
        break;
      }
      case state::body_cr:
        if (bytes[pos++] != '\r') {
          fail(error::protocol_error);
          break;
        }
        state_ = state::body_lf;
        break;
      case state::body_lf:
        if (bytes[pos++] != '\n') {
          fail(error::protocol_error);
          break;
        }
        state_ = state::type_byte;
        finish_bulk(out);
        break;
      case state::failed:
        break;
    }
  }
  return pos;
}

// The usual case: the element's whole line (and, for a bulk string, its whole body) is in `data`.
// Taken here without stepping through the states and without copying a body twice. Anything else
// (a split element, malformed bytes, a limit reached) returns 0 before any state changes, or
// returns what it took with the parser in the state the machine would have reached: either way the
// machine then does exactly what it would have done, so results, errors and byte counts are the
// same however the input is split (the split tests and the fuzz target compare them).
std::size_t parser::whole_element(const char* data, std::size_t size, response& out) {
  if (size < 3) return 0;
  const char t = data[0];
  if (!is_known_type(t)) return 0;
  const std::size_t limit = has_length_line(t) ? max_length_line : limits_.max_line_length;
  const char* const line = data + 1;
  // At most one byte past the limit (written so that a limit of SIZE_MAX does not wrap).
  const std::size_t scan = limit < size - 1 ? limit + 1 : size - 1;
  // Lines here are a few bytes: one pass for both ends beats two memchr calls.
  std::size_t content = 0;
  while (content < scan && line[content] != '\r' && line[content] != '\n') ++content;
  const std::size_t line_end = content + 3;  // type byte, content, CRLF
  // A CR within the scan is at most `limit` bytes in: the line is within its limit.
  if (content == scan || line[content] != '\r' || line_end > size || line[content + 1] != '\n') return 0;
  // The commonest types, built in place; any doubt goes to the general path below.
  std::size_t n = 0;
  const bool room = nodes_ < limits_.max_nodes;
  switch (t) {
    case '$': {
      if (!room || !small_unsigned(line, content, n) || n > limits_.max_bulk_length) break;
      if (size - line_end < n + 2) break;
      const char* const body = data + line_end;
      if (body[n] != '\r' || body[n + 1] != '\n') break;
      ++nodes_;
      out.push_back(node{type::blob_string, 0, depth_, std::string(body, n)});
      element_done();
      return line_end + n + 2;
    }
    case ':':
      if (!room || !small_unsigned(line[0] == '-' ? line + 1 : line, line[0] == '-' ? content - 1 : content, n)) break;
      ++nodes_;
      out.push_back(node{type::integer, 0, depth_, std::string(line, content)});
      element_done();
      return line_end;
    case '+':
      if (!room) break;
      ++nodes_;
      out.push_back(node{type::simple_string, 0, depth_, std::string(line, content)});
      element_done();
      return line_end;
    case '*':
      if (!room || !small_unsigned(line, content, n) || n > limits_.max_aggregate_size || depth_ >= limits_.max_depth)
        break;
      ++nodes_;
      out.push_back(node{type::array, n, depth_, {}});
      if (n == 0) {
        element_done();
      } else {
        frames_[depth_] = frame{n, false};
        ++depth_;
      }
      return line_end;
    default:
      break;
  }
  type_byte_ = t;
  on_line(std::string_view(line, content), out);  // what the machine does with a whole line
  if (state_ != state::body && state_ != state::body_cr) return line_end;
  // A bulk string's header: its body and CRLF, when all here and well formed, make the node.
  const std::size_t length = body_remaining_;
  if (size - line_end < length + 2) return line_end;
  const char* const body = data + line_end;
  if (body[length] != '\r' || body[length + 1] != '\n') return line_end;
  if (pending_.data_type == type::verbatim_string && body[3] != ':') return line_end;  // length >= 4 checked
  out.push_back(node{pending_.data_type, 0, pending_.depth, std::string(body, length)});
  body_remaining_ = 0;
  state_ = state::type_byte;
  element_done();
  return line_end + length + 2;
}

// Looks for the '\r' ending the current line in `rest` (non-empty), scanning no further than the
// line limit allows; a line split across calls is accumulated in line_.
std::size_t parser::scan_line(std::string_view rest, response& out) {
  const bool length_line = has_length_line(type_byte_);
  const std::size_t limit = length_line ? max_length_line : limits_.max_line_length;
  const std::size_t room = limit - line_.size();  // line_ never exceeds the limit
  // One byte past the room: if the terminator is not among them, the line is too long.
  const std::size_t scan = rest.size() > room ? room + 1 : rest.size();
  const char* const begin = rest.data();
  const auto* const cr = static_cast<const char*>(std::memchr(begin, '\r', scan));
  const std::size_t content = cr != nullptr ? static_cast<std::size_t>(cr - begin) : scan;
  if (std::memchr(begin, '\n', content) != nullptr) {  // a bare LF, or a line break inside a simple string
    fail(error::protocol_error);
    return content;
  }
  if (cr == nullptr) {
    if (scan > room) {
      fail(length_line ? error::protocol_error : error::reply_too_large);
      return scan;
    }
    line_.append(begin, scan);
    return scan;
  }
  if (content + 1 < rest.size()) {  // the '\n' is here too: finish now, without copying the line if whole
    if (begin[content + 1] != '\n') {
      fail(error::protocol_error);
      return content + 1;
    }
    state_ = state::type_byte;
    if (line_.empty()) {
      on_line(std::string_view(begin, content), out);
    } else {
      line_.append(begin, content);
      on_line(line_, out);
      line_.clear();
    }
    return content + 2;
  }
  line_.append(begin, content);
  state_ = state::line_lf;
  return content + 1;
}

void parser::on_line(std::string_view line, response& out) {
  switch (type_byte_) {
    case '+':
      emit_value(type::simple_string, line, out);
      return;
    case '-':
      emit_value(type::simple_error, line, out);
      return;
    case ':': {
      std::int64_t value = 0;
      if (!parse_int64(line, value)) return fail(error::protocol_error);
      emit_value(type::integer, line, out);
      return;
    }
    case ',':
      if (!is_double(line)) return fail(error::protocol_error);
      emit_value(type::double_type, line, out);
      return;
    case '(':
      if (!is_big_number(line)) return fail(error::protocol_error);
      emit_value(type::big_number, line, out);
      return;
    case '#':
      if (line != "t" && line != "f") return fail(error::protocol_error);
      emit_value(type::boolean, line, out);
      return;
    case '_':
      if (!line.empty()) return fail(error::protocol_error);
      emit_value(type::null, {}, out);
      return;
    case '$':
    case '!':
    case '=':
      if (type_byte_ == '$' && line == "-1") return emit_value(type::null, {}, out);
      return on_bulk_header(line);
    default:
      if (type_byte_ == '*' && line == "-1") return emit_value(type::null, {}, out);
      return on_aggregate_header(line, out);
  }
}

void parser::on_bulk_header(std::string_view line) {
  std::int64_t length = 0;
  // Negative lengths other than "$-1" (handled by the caller), and "?" (streamed strings), are refused.
  if (!parse_int64(line, length) || length < 0) return fail(error::protocol_error);
  if (static_cast<std::uint64_t>(length) > limits_.max_bulk_length) return fail(error::reply_too_large);
  // "txt:" is the least a verbatim string can hold; refusing early spares reading a useless body.
  if (type_byte_ == '=' && length < 4) return fail(error::protocol_error);
  if (!count_node()) return;
  pending_.data_type = bulk_type(type_byte_);
  pending_.aggregate_size = 0;
  pending_.depth = depth_;
  pending_.value.clear();
  body_remaining_ = static_cast<std::size_t>(length);
  state_ = body_remaining_ == 0 ? state::body_cr : state::body;
}

void parser::on_aggregate_header(std::string_view line, response& out) {
  std::int64_t count = 0;
  if (!parse_int64(line, count) || count < 0) return fail(error::protocol_error);
  if (depth_ >= limits_.max_depth) return fail(error::nesting_too_deep);
  const type t = aggregate_type(type_byte_);
  const std::size_t multiplicity = element_multiplicity(t);
  // The second test keeps count * multiplicity from overflowing where size_t is narrower than int64.
  if (static_cast<std::uint64_t>(count) > limits_.max_aggregate_size ||
      static_cast<std::uint64_t>(count) > std::numeric_limits<std::size_t>::max() / multiplicity) {
    return fail(error::reply_too_large);
  }
  if (!count_node()) return;
  // Never reserve by the declared count: children are appended as they arrive.
  node& n = out.emplace_back();
  n.data_type = t;
  n.aggregate_size = static_cast<std::size_t>(count);
  n.depth = depth_;
  const std::size_t children = n.aggregate_size * multiplicity;
  if (children == 0) {
    if (t != type::attribute) element_done();
    return;
  }
  frames_[depth_] = frame{children, t == type::attribute};
  ++depth_;
}

void parser::emit_value(type t, std::string_view value, response& out) {
  if (!count_node()) return;
  node& n = out.emplace_back();
  n.data_type = t;
  n.depth = depth_;
  n.value.assign(value);
  element_done();
}

void parser::finish_bulk(response& out) {
  if (pending_.data_type == type::verbatim_string && pending_.value[3] != ':') {  // length >= 4 checked
    return fail(error::protocol_error);
  }
  out.push_back(std::move(pending_));
  pending_.value.clear();  // moved-from: make it definitely empty for the next bulk
  element_done();
}

bool parser::count_node() noexcept {
  if (nodes_ >= limits_.max_nodes) {
    fail(error::reply_too_large);
    return false;
  }
  ++nodes_;
  return true;
}

// A value (scalar or complete aggregate) was appended: close every aggregate it completes.
void parser::element_done() noexcept {
  while (depth_ > 0) {
    frame& f = frames_[depth_ - 1];
    if (--f.remaining > 0) return;
    --depth_;
    // An attribute describes the value after it: completing it neither counts as an element of its
    // parent nor ends the reply.
    if (f.attribute) return;
  }
  done_ = true;
}

void parser::fail(boost::system::error_code code) noexcept {
  state_ = state::failed;
  error_ = code;
}

}  // namespace redlock::resp
