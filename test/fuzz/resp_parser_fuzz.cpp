// SPDX-License-Identifier: BSL-1.0
// libFuzzer target for redlock::resp::parser. The input is parsed as a stream of replies three
// ways (whole, in chunks whose sizes come from the input's first bytes, one byte at a time); the
// results must be identical, well-formed, and stable when re-encoded and parsed again.

#include <redlock/resp/parser.hpp>

#include <boost/system/error_code.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using redlock::resp::node;
using redlock::resp::parser;
using redlock::resp::parser_limits;
using redlock::resp::response;
using redlock::resp::type;

// Small limits so that the fuzzer reaches them quickly.
constexpr parser_limits limits{
    .max_bulk_length = 4096,
    .max_line_length = 512,
    .max_depth = 8,
    .max_aggregate_size = 64,
    .max_nodes = 200,  // reachable within the fuzzer's input sizes
};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

struct outcome {
  response nodes;
  std::vector<std::size_t> reply_ends;  // nodes.size() after each complete reply
  boost::system::error_code ec;

  friend bool operator==(const outcome&, const outcome&) = default;
};

// Feeds `data` in chunks of the sizes `chunk_size(i)` (i = chunk index), as a connection would.
template <class ChunkSize>
outcome feed(std::string_view data, ChunkSize chunk_size) {
  parser p(limits);
  outcome r;
  std::string buffer;
  std::size_t offset = 0;
  for (std::size_t chunk = 0; offset < data.size(); ++chunk) {
    const std::size_t take = std::min(chunk_size(chunk), data.size() - offset);
    buffer.append(data.substr(offset, take));
    offset += take;
    while (!buffer.empty()) {
      const std::size_t consumed = p.consume(buffer, r.nodes, r.ec);
      check(consumed <= buffer.size());
      buffer.erase(0, consumed);
      if (r.ec) {
        // Sticky until reset().
        boost::system::error_code again;
        check(p.consume("+OK\r\n", r.nodes, again) == 0 && again == r.ec && !p.done());
        return r;
      }
      if (!p.done()) {
        check(buffer.empty());  // needing more means every byte given was taken
        break;
      }
      check(consumed > 0);
      r.reply_ends.push_back(r.nodes.size());
    }
  }
  return r;
}

bool is_int64(std::string_view text) {
  std::int64_t value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  return result.ec == std::errc{} && result.ptr == text.data() + text.size();
}

bool scalar_ok(const node& n) {
  const std::string_view v = n.value;
  switch (n.data_type) {
    case type::simple_string:
    case type::simple_error:
    case type::double_type:
    case type::big_number:
      return v.size() <= limits.max_line_length && v.find_first_of("\r\n") == std::string_view::npos &&
             (n.data_type != type::double_type && n.data_type != type::big_number ? true : !v.empty());
    case type::integer:
      return is_int64(v);
    case type::boolean:
      return v == "t" || v == "f";
    case type::null:
      return v.empty();
    case type::blob_string:
    case type::blob_error:
      return v.size() <= limits.max_bulk_length;
    case type::verbatim_string:
      return v.size() <= limits.max_bulk_length && v.size() >= 4 && v[3] == ':';
    default:
      return false;
  }
}

// Walks nodes [first, last) independently of the parser: each node sits at the depth of the open
// aggregates, each aggregate gets exactly aggregate_size * multiplicity children, attributes are not
// elements of their parent, and the reply ends with the first non-attribute top-level value.
// `complete`: the nodes must be exactly one reply; otherwise a proper prefix of one.
bool structure_ok(const response& nodes, std::size_t first, std::size_t last, bool complete) {
  struct open {
    std::size_t remaining;
    bool attribute;
  };
  std::vector<open> stack;
  bool finished = false;
  for (std::size_t i = first; i < last; ++i) {
    if (finished) return false;
    const node& n = nodes[i];
    if (n.depth != stack.size()) return false;
    if (redlock::resp::is_aggregate(n.data_type)) {
      if (!n.value.empty() || n.aggregate_size > limits.max_aggregate_size) return false;
      if (n.depth + 1 > limits.max_depth) return false;
      const std::size_t children = n.aggregate_size * redlock::resp::element_multiplicity(n.data_type);
      const bool attribute = n.data_type == type::attribute;
      if (children > 0) {
        stack.push_back({children, attribute});
        continue;
      }
      if (attribute) continue;
    } else if (n.aggregate_size != 0 || !scalar_ok(n)) {
      return false;
    }
    for (;;) {  // a value is complete: close what it completes
      if (stack.empty()) {
        finished = true;
        break;
      }
      if (--stack.back().remaining > 0) break;
      const bool attribute = stack.back().attribute;
      stack.pop_back();
      if (attribute) break;
    }
  }
  return finished == complete && (last - first) <= limits.max_nodes;
}

// Encodes nodes back to RESP3 (nulls as `_`), to check that what was parsed parses the same again.
std::string encode(const response& nodes, std::size_t first, std::size_t last) {
  std::string out;
  for (std::size_t i = first; i < last; ++i) {
    const node& n = nodes[i];
    const auto line = [&](char marker, std::string_view text) {
      out += marker;
      out += text;
      out += "\r\n";
    };
    const auto bulk = [&](char marker) {
      line(marker, std::to_string(n.value.size()));
      out += n.value;
      out += "\r\n";
    };
    switch (n.data_type) {
      case type::simple_string:
        line('+', n.value);
        break;
      case type::simple_error:
        line('-', n.value);
        break;
      case type::integer:
        line(':', n.value);
        break;
      case type::double_type:
        line(',', n.value);
        break;
      case type::big_number:
        line('(', n.value);
        break;
      case type::boolean:
        line('#', n.value);
        break;
      case type::null:
        line('_', "");
        break;
      case type::blob_string:
        bulk('$');
        break;
      case type::blob_error:
        bulk('!');
        break;
      case type::verbatim_string:
        bulk('=');
        break;
      case type::array:
        line('*', std::to_string(n.aggregate_size));
        break;
      case type::map:
        line('%', std::to_string(n.aggregate_size));
        break;
      case type::set:
        line('~', std::to_string(n.aggregate_size));
        break;
      case type::attribute:
        line('|', std::to_string(n.aggregate_size));
        break;
      case type::push:
        line('>', std::to_string(n.aggregate_size));
        break;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const outcome whole = feed(input, [&](std::size_t) { return input.size(); });
  // Chunk sizes 1..16 cycled from the first (up to) 8 bytes: part of the input, so the fuzzer steers them.
  const std::size_t seeds = std::min<std::size_t>(size, 8);
  const outcome chunked = feed(input, [&](std::size_t i) { return std::size_t{1} + data[i % seeds] % 16u; });
  const outcome bytewise = feed(input, [](std::size_t) { return std::size_t{1}; });
  check(chunked == whole);
  check(bytewise == whole);

  std::size_t first = 0;
  for (const std::size_t end : whole.reply_ends) {
    check(end > first && structure_ok(whole.nodes, first, end, true));
    // A parsed reply, encoded again, parses to the same nodes.
    const std::string again = encode(whole.nodes, first, end);
    const outcome reparsed = feed(again, [&](std::size_t) { return again.size(); });
    check(!reparsed.ec && reparsed.reply_ends.size() == 1);
    check(response(whole.nodes.begin() + static_cast<std::ptrdiff_t>(first),
                   whole.nodes.begin() + static_cast<std::ptrdiff_t>(end)) == reparsed.nodes);
    first = end;
  }
  // Whatever follows the last complete reply (need more, or the error) is the start of one.
  check(structure_ok(whole.nodes, first, whole.nodes.size(), false));
  return 0;
}
