// SPDX-License-Identifier: BSL-1.0
// Many plain extensions in one request (redlock/core/extend_batch.hpp).

#include <redlock/core/extend_batch.hpp>
#include <redlock/resp/request.hpp>

#include <algorithm>
#include <cassert>

namespace redlock::core {

bool joins_extend_many(const step_spec& s) noexcept {
  return s.script == &detail::extend_script && s.key_count == 1 && s.keys[0] == key_ref::lock && s.arg_count == 2 &&
         s.args[0] == arg_ref::token && s.args[1] == arg_ref::ttl;
}

namespace {

void append_bulk(std::string& out, std::string_view arg) {
  char* at = resp::detail::grow(out, resp::detail::bulk_size(arg.size()));
  resp::detail::write_bulk(at, arg);
}

}  // namespace

void extend_batch::add(std::string_view key, std::string_view token, std::int64_t ttl_ms) {
  const resp::detail::integer_text ttl{ttl_ms};
  const std::size_t keys_before = keys_.size();
  const std::size_t args_before = args_.size();
  try {
    append_bulk(keys_, key);
    append_bulk(args_, token);
    append_bulk(args_, ttl.view());
  } catch (...) {
    keys_.resize(keys_before);  // the keys and their arguments stay in step
    args_.resize(args_before);
    throw;
  }
  ++count_;
}

void extend_batch::encode(std::string& out, bool by_sha) const {
  if (count_ == 0) return;
  const std::string_view command = by_sha ? std::string_view{"EVALSHA"} : std::string_view{"EVAL"};
  const auto& s = detail::extend_many_script;
  const std::string_view script = by_sha ? std::string_view{s.sha1} : std::string_view{s.body};
  const resp::detail::integer_text keys{count_};
  namespace rd = resp::detail;
  const std::size_t head = rd::header_size(3 + 3 * count_) + rd::bulk_size(command.size()) +
                           rd::bulk_size(script.size()) + rd::bulk_size(keys.view().size());
  char* at = rd::grow(out, head + keys_.size() + args_.size());
  at = rd::write_header(at, 3 + 3 * count_);
  at = rd::write_bulk(at, command);
  at = rd::write_bulk(at, script);
  at = rd::write_bulk(at, keys.view());
  at = std::copy(keys_.begin(), keys_.end(), at);
  at = std::copy(args_.begin(), args_.end(), at);
  assert(at == out.data() + out.size());
  (void)at;
}

void extend_batch::clear() noexcept {
  keys_.clear();
  args_.clear();
  count_ = 0;
}

extend_many_answer read_extend_many(const resp::response& r, std::size_t at, std::size_t count) noexcept {
  if (at >= r.size()) return extend_many_answer::malformed;
  const resp::node& top = r[at];
  if (resp::is_error(top.data_type)) {
    return std::string_view{top.value}.substr(0, 8) == "NOSCRIPT" ? extend_many_answer::noscript
                                                                  : extend_many_answer::refused;
  }
  if (top.data_type != resp::type::array || top.aggregate_size != count || at + count >= r.size())
    return extend_many_answer::malformed;
  for (std::size_t k = 1; k <= count; ++k) {
    const resp::node& e = r[at + k];
    if (e.depth != top.depth + 1) return extend_many_answer::malformed;
    if (resp::is_error(e.data_type)) continue;
    if (e.data_type != resp::type::integer || (e.value != "0" && e.value != "1")) return extend_many_answer::malformed;
  }
  // Nothing of it after its elements (they are scalars: an aggregate among them is caught above).
  if (at + count + 1 < r.size() && r[at + count + 1].depth > top.depth) return extend_many_answer::malformed;
  return extend_many_answer::elements;
}

}  // namespace redlock::core
