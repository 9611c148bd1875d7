// SPDX-License-Identifier: BSL-1.0
#include <redlock/resp/request.hpp>

#include <cassert>
#include <charconv>
#include <cstring>

namespace redlock::resp::detail {
namespace {

// Callers sized the buffer with decimal_digits(), so 20 bytes (every size_t) is always in range.
char* write_decimal(char* out, std::size_t value) noexcept { return std::to_chars(out, out + 20, value).ptr; }

char* write_crlf(char* out) noexcept {
  out[0] = '\r';
  out[1] = '\n';
  return out + 2;
}

// `head` then `tail` as one bulk string (a key and its suffix, without joining them first).
char* write_joined_bulk(char* out, std::string_view head, std::string_view tail) noexcept {
  *out++ = '$';
  out = write_crlf(write_decimal(out, head.size() + tail.size()));
  if (!head.empty()) std::memcpy(out, head.data(), head.size());  // memcpy from null is undefined
  out += head.size();
  if (!tail.empty()) std::memcpy(out, tail.data(), tail.size());
  out += tail.size();
  return write_crlf(out);
}

}  // namespace

char* grow(std::string& out, std::size_t bytes) {
  const std::size_t old_size = out.size();
  // resize() grows the capacity geometrically, so a long pipeline costs amortised linear time.
  out.resize(old_size + bytes);
  return out.data() + old_size;
}

char* write_header(char* out, std::size_t count) noexcept {
  *out++ = '*';
  return write_crlf(write_decimal(out, count));
}

char* write_bulk(char* out, std::string_view arg) noexcept {
  *out++ = '$';
  out = write_crlf(write_decimal(out, arg.size()));
  if (!arg.empty()) {  // memcpy from a null pointer is undefined even for zero bytes
    std::memcpy(out, arg.data(), arg.size());
    out += arg.size();
  }
  return write_crlf(out);
}

void append_command(std::string& out, std::string_view header, const std::string_view* args, std::size_t count) {
  std::size_t bytes = header.size();
  for (std::size_t i = 0; i < count; ++i) bytes += bulk_size(args[i].size());
  char* at = grow(out, bytes);
  std::memcpy(at, header.data(), header.size());
  at += header.size();
  for (std::size_t i = 0; i < count; ++i) at = write_bulk(at, args[i]);
}

}  // namespace redlock::resp::detail

namespace redlock::resp {

void request::arg(std::string_view head, std::string_view tail) {
  detail::write_joined_bulk(detail::grow(payload_, detail::bulk_size(head.size() + tail.size())), head, tail);
}

void request::command_writer::put(std::string_view head, std::string_view tail) noexcept {
  assert(detail::bulk_size(head.size() + tail.size()) <= static_cast<std::size_t>(end_ - at_));  // as promised
  at_ = detail::write_joined_bulk(at_, head, tail);
}

}  // namespace redlock::resp
