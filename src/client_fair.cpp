// SPDX-License-Identifier: BSL-1.0
// Fair hand-over (docs/design.md, "Fair hand-over"): this client's inbox on every master, the
// waiters it names, the scripts loaded on each connection, and leaving the queues.
#include "detail/client_state.hpp"
#include "detail/completion.hpp"
#include "detail/log.hpp"
#include <redlock/core/validity.hpp>
#include <redlock/detail/token.hpp>
#include <redlock/resp/request.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/container/small_vector.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <set>

namespace redlock {
namespace detail {

// ---- fair hand-over -------------------------------------------------------------------------------

namespace {

// Answers to SUBSCRIBE of the wake channel: a master that refuses (an ACL without the channel, or
// RESP2) leaves its waiters to the retry schedule, which is logged once per connection.
struct inbox_sink final : reply_sink {
  explicit inbox_sink(std::weak_ptr<client_impl> c) : owner(std::move(c)) {}
  std::weak_ptr<client_impl> owner;
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (!ec || ec == asio::error::operation_aborted) return;
    auto c = owner.lock();
    if (!c) return;
    c->set_deaf(master_of(tag));
    const auto* v = resp::reply_value(r);
    REDLOCK_LOG(c->log(), ec == error::not_supported ? log_level::info : log_level::warning,
                "master {}: no wake-ups for waiters ({}{}{}); they retry on their schedule", master_of(tag) + 1,
                describe(ec), v && ec == error::server_error ? ": " : "",
                v && ec == error::server_error ? printable(v->value, 160) : std::string{});
  }
};

// A waiter's name or a master's message to it: the operation's number, and the round of a
// hand-over (0 for a wake-up) with its fence (a fenced lock's; 0: none); `probe`: the release
// asks whether the client is there, and either hands over or wakes next.
struct waiter_message {
  std::uint64_t op = 0;
  std::uint64_t round = 0;
  std::int64_t fence = 0;
  bool probe = false;
};

// "<inbox>:<hex number>" (a waiter's name, or a wake-up), or the same and ":<decimal round>" (a
// hand-over), then ":<decimal fence>" (a fenced lock's hand-over) or a trailing ':' (a probe) ->
// the numbers, if the inbox is `inbox`.
std::optional<waiter_message> parse_waiter(std::string_view text, std::string_view inbox) noexcept {
  if (text.size() <= inbox.size() + 1 || text.substr(0, inbox.size()) != inbox || text[inbox.size()] != ':')
    return std::nullopt;
  const char* p = text.data() + inbox.size() + 1;
  const char* end = text.data() + text.size();
  waiter_message m;
  auto r = std::from_chars(p, end, m.op, 16);
  if (r.ec != std::errc{} || r.ptr == p) return std::nullopt;
  if (r.ptr == end) return m;
  if (*r.ptr != ':') return std::nullopt;
  p = r.ptr + 1;
  r = std::from_chars(p, end, m.round, 10);
  if (r.ec != std::errc{} || r.ptr == p || m.round == 0) return std::nullopt;
  if (r.ptr + 1 == end && *r.ptr == ':') {
    m.probe = true;
    return m;
  }
  if (r.ptr != end && *r.ptr == ':') {
    p = r.ptr + 1;
    r = std::from_chars(p, end, m.fence, 10);
    if (r.ec != std::errc{} || r.ptr == p || r.ptr != end || m.fence <= 0) return std::nullopt;
    return m;
  }
  if (r.ptr != end) return std::nullopt;
  return m;
}

}  // namespace

std::string client_impl::new_waiter(op_base& op) {
  const auto n = ++next_waiter_;
  waiters_[n] = &op;
  return fmt::format("{}:{:x}", inbox_, n);
}

void client_impl::forget_waiter(std::string_view member) noexcept {
  if (const auto m = parse_waiter(member, inbox_)) waiters_.erase(m->op);
}

namespace {

// Answers to SCRIPT LOAD: a master that refuses (an ACL without SCRIPT, say) still works through
// the EVAL fallback; logged once per connection.
// Each answer is the master's digest of one script (in all_scripts order): one that is not the
// script's own refuses the master (error::script_mismatch).
struct script_load_sink final : reply_sink {
  explicit script_load_sink(std::weak_ptr<client_impl> c) : owner(std::move(c)) {}
  std::weak_ptr<client_impl> owner;
  std::uint64_t last_logged = ~std::uint64_t{0};
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (ec == asio::error::operation_aborted) return;
    auto c = owner.lock();
    if (!c) return;
    std::size_t k = 0;
    for (const auto& n : r) {
      if (n.depth != 0 || n.data_type == resp::type::attribute) continue;
      const bool digest = n.data_type == resp::type::blob_string || n.data_type == resp::type::simple_string;
      if (digest && k < std::size(all_scripts) && n.value != all_scripts[k]->sha1) {
        return c->refuse_master(master_of(tag), error::script_mismatch,
                                fmt::format("SCRIPT LOAD answered \"{}\" for the script whose SHA-1 is {}",
                                            printable(n.value, 64), all_scripts[k]->sha1));
      }
      ++k;
    }
    if (!ec || tag == last_logged) return;
    last_logged = tag;
    const auto* v = resp::reply_value(r);
    REDLOCK_LOG(c->log(), log_level::info, "master {}: scripts not preloaded ({}{}{}); EVALSHA falls back to EVAL",
                master_of(tag) + 1, describe(ec), v && ec == error::server_error ? ": " : "",
                v && ec == error::server_error ? printable(v->value, 160) : std::string{});
  }
};

}  // namespace

void client_impl::refuse_master(std::size_t i, error_code cause, std::string_view why) {
  if (i >= links_.size() || closed_ || refused_[i]) return;
  refused_[i] = true;
  REDLOCK_LOG(log_, log_level::error, "{}: not used any more: {}: {}", names_[i], describe(cause), why);
  // Closed for good: its requests fail, and the next ones are refused as `not_connected` (the
  // lock operations keep `cause` as its result's error, see down_cause).
  links_[i]->close();
  health_.failed(i, cause);
  readiness_changed();
}

void client_impl::load_scripts(std::size_t i, bool again) {
  // Once per connection: a link that comes back without reconnecting (a stall that healed) still
  // has its scripts.
  if (scripts_loaded_.size() != links_.size()) scripts_loaded_.assign(links_.size(), 0);
  const auto connects = links_[i]->stats().connects;
  if (scripts_loaded_[i] == connects && !again) return;
  scripts_loaded_[i] = connects;
  if (!scripts_sink_) scripts_sink_ = std::make_shared<script_load_sink>(weak_from_this());
  if (scripts_payload_.empty()) {
    resp::request req;
    for (const auto* s : all_scripts) req.push("SCRIPT", "LOAD", s->body);
    scripts_payload_ = std::move(req).take_payload();
  }
  // Queued before anything this connection carries for a lock: FIFO puts every EVALSHA after it.
  (void)links_[i]->submit(scripts_payload_, std::size(all_scripts), clock_type::now() + cfg_.release_timeout,
                          scripts_sink_, make_tag(++script_loads_, i));
}

void client_impl::subscribe_inbox(std::size_t i) {
  if (!inbox_sink_) inbox_sink_ = std::make_shared<inbox_sink>(weak_from_this());
  if (deaf_.size() != links_.size()) deaf_.assign(links_.size(), false);
  deaf_[i] = false;  // until the master refuses
  scratch_.clear();
  scratch_.push("SUBSCRIBE", wake_channel_);
  // Its deadline is the release timeout: a master that does not confirm is as slow as that.
  const auto ec = links_[i]->submit(scratch_.payload(), 1, clock_type::now() + cfg_.release_timeout, inbox_sink_,
                                    make_tag(release_round, i), true);
  if (ec && ec != error::not_connected) inbox_sink_->on_reply(make_tag(release_round, i), ec, no_reply);
}

void client_impl::ensure_inbox() {
  if (inbox_wanted_ || closed_) return;
  inbox_wanted_ = true;
  // A link without a connection yet subscribes from on_link_up, once its handshake is done.
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (links_[i]->protocol() != 0) subscribe_inbox(i);
  }
}

void client_impl::on_push(std::size_t i, const resp::response& push) {
  // >3 message <channel> <payload>
  if (push.size() != 4 || push[0].data_type != resp::type::push || push[1].value != "message" ||
      push[2].value != wake_channel_)
    return;
  const auto m = parse_waiter(push[3].value, inbox_);
  if (!m) return;
  const auto it = waiters_.find(m->op);
  if (it == waiters_.end()) return;  // that acquisition has ended (its dequeue gives a hand-over back)
  if (m->probe) return;              // a hand-over or a wake-up follows
  if (m->round != 0) return it->second->on_handover(i, m->round, m->fence);
  it->second->on_wake(i);
}

bool client_impl::recently_contended(const std::string& key) {
  if (contended_.empty()) return false;
  const auto it = contended_.find(key);
  if (it == contended_.end()) return false;
  if (it->second > clock_type::now()) return true;
  contended_.erase(it);
  return false;
}

void client_impl::note_contended(const std::string& key) {
  const auto now = clock_type::now();
  // Bounded: expired hints go first, then (rarely) all of them; a lost hint costs fairness only.
  if (contended_.size() >= 1024) std::erase_if(contended_, [now](const auto& e) { return e.second <= now; });
  if (contended_.size() >= 1024) contended_.clear();
  contended_[key] = now + entry_timeout_;
}

void client_impl::leave_queues(const lock_state& st, std::string_view member, std::string_view keep,
                               const std::vector<bool>& reached) {
  auto v = st.values();
  v.waiter = member;
  v.keep = keep;
  scratch_.clear();
  if (!core::encode_step(scratch_, st.spec->dequeue, v, false)) return;
  // Every master, granting ones too: a master that handed this waiter the key keeps its offer
  // until now. A dequeue that may not have run (its master was down, or its connection broke
  // or stalled first) could leave a key handed to the waiter with a token it does not keep
  // there until the key's ttl: where the waiter's requests may have run, it is sent again on
  // that master's next connection, as a release in doubt is. Run twice, it finds nothing the
  // second time; run late, it can only delete a key of the waiter's own offer, which nothing
  // else ever writes. Worth sending while the entry lives and, after it, a key handed to it; a
  // full ledger drops it before any lock's release (a key for it to free needs a hand-over that
  // raced the leaving, while a release's key is there whenever the release is).
  send_in_background(std::string{scratch_.payload()}, std::max(st.ttl, st.longest_ttl) + entry_timeout_, reached, true);
}

}  // namespace detail
}  // namespace redlock

#undef REDLOCK_LOG
