// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// Encoding of commands as RESP arrays of bulk strings, several of them pipelined in one buffer.

#include <redlock/export.hpp>

#include <array>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>

namespace redlock::resp {

namespace detail {

/// Integral arguments are sent as decimal text. `bool` and the character types are excluded: whether
/// `'a'` or `true` means a number or text is ambiguous, so those must be passed as strings.
template <class T>
concept integer_argument =
    std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char> && !std::same_as<T, wchar_t> &&
    !std::same_as<T, char8_t> && !std::same_as<T, char16_t> && !std::same_as<T, char32_t>;

/// Anything viewable as bytes: `std::string`, `std::string_view`, `const char*` (up to its '\0').
template <class T>
concept string_argument = std::convertible_to<const T&, std::string_view>;

/// One argument of a command.
template <class T>
concept argument = string_argument<T> || integer_argument<T>;

/// Number of decimal digits of `value`.
constexpr std::size_t decimal_digits(std::size_t value) noexcept {
  std::size_t digits = 1;
  for (; value >= 10; value /= 10) ++digits;
  return digits;
}

/// Encoded size of an array header `*<count>\r\n`.
constexpr std::size_t header_size(std::size_t count) noexcept { return 1 + decimal_digits(count) + 2; }

/// Encoded size of a bulk string `$<length>\r\n<bytes>\r\n`.
constexpr std::size_t bulk_size(std::size_t length) noexcept { return 1 + decimal_digits(length) + 2 + length + 2; }

/// The array header of a command with `Count` bulk strings, built at compile time.
template <std::size_t Count>
struct array_header {
  static constexpr std::size_t size = header_size(Count);
  static constexpr std::array<char, size> text = [] {
    std::array<char, size> out{};
    out[0] = '*';
    std::size_t value = Count;
    for (std::size_t i = size - 3; i >= 1; --i) {
      out[i] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
    out[size - 2] = '\r';
    out[size - 1] = '\n';
    return out;
  }();
  static constexpr std::string_view view() noexcept { return {text.data(), text.size()}; }
};

/// Decimal text of an integer, kept on the stack so that integral arguments cost no allocation.
class integer_text {
 public:
  template <integer_argument T>
  explicit integer_text(T value) noexcept {
    // 20 digits and a sign cover every 64-bit value; wider types would not fit.
    static_assert(sizeof(T) <= sizeof(std::uint64_t), "integral arguments wider than 64 bits are not supported");
    const auto result = std::to_chars(digits_.data(), digits_.data() + digits_.size(), value);
    size_ = static_cast<std::size_t>(result.ptr - digits_.data());
  }
  std::string_view view() const noexcept { return {digits_.data(), size_}; }

 private:
  std::array<char, 24> digits_;
  std::size_t size_;
};

/// Turns an argument into something viewable: a view of the caller's bytes, or the integer's text.
template <argument T>
auto hold(const T& arg) noexcept {
  if constexpr (integer_argument<T>) {
    return integer_text(arg);
  } else {
    return std::string_view(arg);
  }
}

inline std::string_view view_of(std::string_view text) noexcept { return text; }
inline std::string_view view_of(const integer_text& text) noexcept { return text.view(); }

/// Grows `out` by `bytes` and returns where the new bytes start.
REDLOCK_API char* grow(std::string& out, std::size_t bytes);
/// Writes `*<count>\r\n` at `out`; returns the end of what was written.
REDLOCK_API char* write_header(char* out, std::size_t count) noexcept;
/// Writes `$<length>\r\n<arg>\r\n` at `out`; returns the end of what was written.
REDLOCK_API char* write_bulk(char* out, std::string_view arg) noexcept;
/// Appends `header` then each of `args` as a bulk string, growing `out` once.
REDLOCK_API void append_command(std::string& out, std::string_view header, const std::string_view* args,
                                std::size_t count);

}  // namespace detail

/// A buffer of one or more pipelined commands, each encoded as a RESP array of bulk strings
/// (binary-safe). Write `payload()` to the connection, then expect `commands()` replies, in order.
class REDLOCK_API request {
 public:
  request() = default;

  /// Appends one command, such as `push("SET", key, value, "NX", "PX", 10000)`. Each argument is either
  /// string-like (anything convertible to `std::string_view`: with `std::string` and `std::string_view`
  /// every byte is kept, embedded '\0' included) or integral (sent in decimal, without allocating).
  /// The buffer grows at most once per command.
  template <detail::argument... Args>
  void push(std::string_view command, const Args&... args) {
    // The temporaries made by hold() live until push_views returns, so the views stay valid.
    push_views(command, detail::hold(args)...);
  }

  /// Appends one command whose arguments, after `command`, are the elements of `args` (string-like
  /// or integral, as for push). The range is traversed twice: once to size, once to copy.
  template <class Range>
  requires std::ranges::forward_range<const Range> && detail::argument<std::ranges::range_value_t<const Range>>
  void push_range(std::string_view command, const Range& args) {
    std::size_t count = 1;
    std::size_t bytes = detail::bulk_size(command.size());
    for (const auto& arg : args) {
      ++count;
      bytes += detail::bulk_size(detail::view_of(detail::hold(arg)).size());
    }
    char* out = detail::grow(payload_, detail::header_size(count) + bytes);
    out = detail::write_header(out, count);
    out = detail::write_bulk(out, command);
    for (const auto& arg : args) out = detail::write_bulk(out, detail::view_of(detail::hold(arg)));
    ++commands_;
  }

  /// Appends one command built piece by piece, for an encoder that chooses its arguments at run
  /// time (the lock kinds' table, core::encode_step): `begin(count)` with the number of bulk
  /// strings it will have, the command's name included, then exactly `count` calls of `arg`.
  /// No allocation once the buffer has grown.
  void begin(std::size_t count) {
    char* out = detail::grow(payload_, detail::header_size(count));
    detail::write_header(out, count);
    ++commands_;
  }
  /// One bulk string of the command begun with `begin`.
  void arg(std::string_view bytes) {
    detail::write_bulk(detail::grow(payload_, detail::bulk_size(bytes.size())), bytes);
  }
  /// One bulk string made of `head` then `tail` (a key and its suffix), without joining them first.
  void arg(std::string_view head, std::string_view tail);
  /// One bulk string: `value` in decimal.
  void arg(std::int64_t value) { arg(detail::integer_text(value).view()); }

  /// Writes the bulk strings of one command whose room was made at once (`begin_sized`).
  class REDLOCK_API command_writer {
   public:
    /// The next bulk string: `head` then `tail` (a key and its suffix), as one.
    void put(std::string_view head, std::string_view tail = {}) noexcept;
    /// Whether every byte of the room was written (what `begin_sized` was promised).
    bool full() const noexcept { return at_ == end_; }

   private:
    friend class request;
    command_writer(char* at, char* end) noexcept : at_(at), end_(end) {}
    char* at_;
    char* end_;
  };
  /// Appends one command of `count` bulk strings whose `detail::bulk_size`s add up to `bytes`,
  /// growing the buffer once rather than once per argument (`begin` and `arg`): the caller then
  /// `put`s exactly those strings, in order.
  command_writer begin_sized(std::size_t count, std::size_t bytes) {
    const std::size_t header = detail::header_size(count);
    char* out = detail::grow(payload_, header + bytes);
    detail::write_header(out, count);
    ++commands_;
    return {out + header, out + header + bytes};
  }

  /// The exact bytes to write.
  const std::string& payload() const noexcept { return payload_; }
  /// Number of commands pushed, which is the number of replies to expect.
  std::size_t commands() const noexcept { return commands_; }
  /// True when no command was pushed.
  bool empty() const noexcept { return commands_ == 0; }
  /// Removes every command; keeps the buffer's capacity for reuse.
  void clear() noexcept {
    payload_.clear();
    commands_ = 0;
  }
  /// Reserves room for `bytes` bytes of payload in total.
  void reserve(std::size_t bytes) { payload_.reserve(bytes); }
  /// Moves the bytes out (the connection queues them without a copy); the request is left empty.
  std::string take_payload() && noexcept {
    commands_ = 0;
    return std::move(payload_);
  }

 private:
  template <class... Held>
  void push_views(std::string_view command, const Held&... held) {
    constexpr std::size_t count = 1 + sizeof...(Held);
    const std::array<std::string_view, count> args{command, detail::view_of(held)...};
    detail::append_command(payload_, detail::array_header<count>::view(), args.data(), count);
    ++commands_;
  }

  std::string payload_;
  std::size_t commands_ = 0;
};

}  // namespace redlock::resp
