// SPDX-License-Identifier: BSL-1.0
// The votes of the keep-alive's passes, gathered into batches: each master is sent the votes that
// came due together in one request with one TIME behind them, the plain extensions among them in
// one `extend_many_script` call; the answers are split back into one a vote. docs/safety.md,
// "Restarts and clock jumps" and "Extensions in one script".

#include "detail/client_state.hpp"
#include "detail/log.hpp"
#include <redlock/core/extend_batch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace redlock::detail {

namespace {

// While a vote is told its answer: it was sampled by its batch's TIME (vote_reply reads the flag).
struct sample_scope {
  explicit sample_scope(bool& f, bool sampled) : flag(f) { flag = sampled; }
  ~sample_scope() { flag = false; }
  sample_scope(const sample_scope&) = delete;
  sample_scope& operator=(const sample_scope&) = delete;
  bool& flag;
};

}  // namespace

std::string_view client_impl::timed(std::string_view payload) {
  vote_buf_.assign(payload);
  vote_buf_.append(time_command);
  return vote_buf_;
}

void client_impl::send_votes(std::string_view payload, clock_type::time_point deadline,
                             const std::shared_ptr<reply_sink>& sink, std::uint64_t round) {
  if (!cfg_.guard.clock_jumps) return send_all(payload, deadline, sink, round);
  // A batch already full (a vote made by a handler that a refusal ran inline, before its batch
  // went) is not grown past `max_batch`: this vote then goes to every master on its own.
  bool gathered = false;
  if (batching_ && batch_.votes.size() < max_batch) {
    for (std::size_t i = 0; i < links_.size() && !gathered; ++i) gathered = batchable(i);
  }
  if (gathered) {
    auto& b = batch_;
    b.votes.push_back({sink, round});
    try {
      b.payload.append(payload);
    } catch (...) {
      b.votes.pop_back();  // the votes and their bytes stay in step
      throw;
    }
    b.deadline = std::min(b.deadline, deadline);
  }
  // TIME behind the vote, in the same write: its answer is read with the vote's (made once, when a
  // master is sent the vote now rather than in a batch).
  bool with_time_built = false;
  std::vector<std::pair<std::size_t, error_code>> refused;  // allocates only when a master is down
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (gathered && batchable(i)) continue;
    const bool with_time = !time_refused_[i];
    if (with_time && !with_time_built) {
      (void)timed(payload);
      with_time_built = true;
    }
    const std::string_view p = with_time ? std::string_view{vote_buf_} : payload;
    if (auto ec = links_[i]->submit(p, with_time ? 2 : 1, deadline, sink, make_tag(round, i)))
      refused.emplace_back(i, ec);
  }
  // A full batch goes last: its refusals are told there, and what they run inline (handlers) must
  // come after every use of `payload` (the client's scratch buffer, which they may encode into)
  // and after this vote went to every master.
  const bool full = gathered && batch_full();
  for (const auto& [i, ec] : refused) sink->on_reply(make_tag(round, i), ec, no_reply);
  if (full) send_vote_batch();
}

bool client_impl::joins_many(const lock_state& st) const noexcept {
  if (!batching_ || batch_.votes.size() >= max_batch || !cfg_.guard.clock_jumps) return false;
  if (!core::joins_extend_many(st.spec->extend)) return false;
  // One request's bytes for every master: only where each of them takes the call.
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (!batchable(i) || !many_ok_[i]) return false;
  }
  return true;
}

void client_impl::send_extension(const lock_state& st, const core::step_values& v, clock_type::time_point deadline,
                                 const std::shared_ptr<reply_sink>& sink, std::uint64_t round) {
  if (!joins_many(st)) return send_votes(scratch_step(step::extend, st, v), deadline, sink, round);
  auto& b = batch_;
  b.votes.push_back({sink, round, true});
  try {
    b.joined.add(v.key, v.token, v.ttl_ms);
  } catch (...) {
    b.votes.pop_back();  // the votes and their bytes stay in step
    throw;
  }
  st.longest_ttl = std::max(st.longest_ttl, std::chrono::milliseconds{v.ttl_ms});  // as scratch_step does
  b.deadline = std::min(b.deadline, deadline);
  if (batch_full()) send_vote_batch();
}

// ---- one TIME per master for a batch of votes --------------------------------------------------
//
// A pass of the keep-alive timer extends the locks that came due, up to 256 of them at a time
// (renewals fall on a grid so that they come due together). Their votes go to each master in
// requests of up to `max_batch` votes with one TIME behind the last: the master runs a request in
// order, so that TIME is read after every vote of it, later than the TIME behind each vote would
// have been. For a clock that moves and stays moved it sees whatever those would have seen (and
// moves in between), so the guard lets no such vote count that it would have stopped. What it
// gives up (a move undone before the batch's TIME runs; a vote judged a little later against a
// quarantine's end) is in docs/safety.md, "Restarts and clock jumps".

// A batch's answers on one master (the tag's): the votes' replies, then TIME's.
struct batch_sink final : reply_sink {
  batch_sink(std::weak_ptr<client_impl> c, clock_type::time_point at, client_impl::vote_targets v)
      : owner(std::move(c)), sent(at), votes(std::move(v)) {}
  void on_reply(std::uint64_t tag, error_code ec, const resp::response& r) override {
    if (auto c = owner.lock()) c->deliver_batch(master_of(tag), ec, r, sent, votes);
  }
  std::weak_ptr<client_impl> owner;
  clock_type::time_point sent;
  client_impl::vote_targets votes;  // filled once, before the batch is sent
};

// A cluster master routes each key to its node: a batch of keys is not one request there. A
// master whose TIME was refused gets its votes one by one, as send_votes sends them. Neither
// changes during a timer's pass (nothing is read in it; a pass cut short ends with its batch
// sent, and the next one starts a new batch), so a batch's masters are the same from its first
// vote to its sending.
bool client_impl::batchable(std::size_t i) const noexcept {
  return !cfg_.masters[i].cluster.enabled && !time_refused_[i];
}

void client_impl::flush_vote_batch() {
  batching_ = false;
  send_vote_batch();
}

void client_impl::send_vote_batch() {
  if (batch_.votes.empty()) return;  // its storage stays for the next one
  // The votes' own commands, then the joined extensions' one call, then TIME; and the sink: when
  // any of it cannot be made (an allocation failed), the batch stays as it was, to go with the
  // next one.
  const std::size_t votes_bytes = batch_.payload.size();
  const std::size_t n = batch_.votes.size();
  const std::size_t replies = n - batch_.joined.size() + (batch_.joined.empty() ? 0 : 1) + 1;
  const bool own_sink = n == 1 && batch_.joined.empty();
  std::shared_ptr<reply_sink> sink;
  try {
    batch_.joined.encode(batch_.payload);
    batch_.payload.append(time_command);
    // One vote alone, with its own command, goes out as send_votes would have sent it; more (or
    // a joined one) share one sink, which tells each vote its own answer.
    sink = own_sink ? batch_.votes[0].sink
                    : std::make_shared<batch_sink>(weak_from_this(), clock_type::now(), vote_targets{});
  } catch (...) {
    batch_.payload.resize(votes_bytes);
    throw;
  }
  batch_.joined.clear();
  // Taken out of the batch before anything is sent (nothing below allocates until the requests):
  // a refusal told below may gather new votes (a handler run inline), which start the next batch,
  // and whatever throws, no vote is sent twice.
  const auto deadline = std::exchange(batch_.deadline, clock_type::time_point::max());
  std::string bytes = std::exchange(batch_.payload, {});
  gathered_vote single;  // a lone vote leaves the list's storage in the batch
  std::span<const gathered_vote> told;
  if (own_sink) {
    single = std::move(batch_.votes.front());
    batch_.votes.clear();
    told = {&single, 1};
  } else {
    auto& list = static_cast<batch_sink&>(*sink).votes;
    list.swap(batch_.votes);
    told = list;
  }
  // Every master is sent the batch before any refusal is told: what a refusal runs inline must
  // not come between the batch's `sent` and a later master's request (it would widen that
  // master's clock sample).
  std::vector<std::pair<std::size_t, error_code>> refused;  // allocates only when a master is down
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (!batchable(i)) continue;
    const auto tag = own_sink ? make_tag(told[0].round, i) : make_tag(0, i);
    if (const auto ec = links_[i]->submit(bytes, replies, deadline, sink, tag)) refused.emplace_back(i, ec);
  }
  for (const auto& [i, ec] : refused) {
    for (const auto& v : told) v.sink->on_reply(make_tag(v.round, i), ec, no_reply);
  }
  // The storage goes back for the next batch, unless one was gathered meanwhile; the next batch's
  // vote list is made whole at once (the last one went with its sink).
  if (batch_.payload.empty() && bytes.capacity() <= 2 * kept_bytes) {
    bytes.clear();
    batch_.payload.swap(bytes);
  }
  if (batch_.votes.capacity() == 0) {
    try {
      batch_.votes.reserve(max_batch);
    } catch (const std::bad_alloc&) {
      // It grows as votes come, then.
    }
  }
}

void client_impl::deliver_batch(std::size_t i, error_code ec, const resp::response& r, clock_type::time_point sent,
                                const vote_targets& votes) {
  // Where each top-level value starts (an attribute before a value belongs to it), and where its
  // value is (after the attribute).
  std::vector<std::size_t> starts;
  starts.reserve(votes.size() + 2);
  bool pending_start = false;
  for (std::size_t k = 0; k < r.size(); ++k) {
    if (r[k].depth != 0) continue;
    if (!pending_start) starts.push_back(k);
    pending_start = r[k].data_type == resp::type::attribute;
  }
  const auto value_at = [&r](std::size_t at) {
    while (at < r.size() && r[at].data_type == resp::type::attribute) {  // skip it and its children
      ++at;
      while (at < r.size() && r[at].depth != 0) ++at;
    }
    return at;
  };
  std::size_t joined = 0;
  for (const auto& v : votes) joined += v.joined ? 1 : 0;
  const std::size_t own = votes.size() - joined;  // their answers come first, in order
  const bool whole = (!ec || ec == error::server_error) && starts.size() == own + (joined == 0 ? 0 : 1) + 1;
  if (!whole) {
    // No answers (the request failed or timed out), or a reply of the wrong shape.
    if (!ec) ec = make_error_code(error::unexpected_reply);
    for (const auto& v : votes) v.sink->on_reply(make_tag(v.round, i), ec, no_reply);
    return;
  }
  // TIME's sample, once for the batch, before any vote is judged.
  const std::size_t time_at = value_at(starts.back());
  const resp::node* time_value = time_at < r.size() ? &r[time_at] : nullptr;
  bool sampled = false;
  if (time_value && resp::is_error(time_value->data_type)) {
    if (!time_refused_[i]) {
      time_refused_[i] = true;
      REDLOCK_LOG(log_, log_level::warning, "{}: TIME was refused ({}): its clock is not checked at votes", names_[i],
                  printable(time_value->value, 200));
      publish_hazards();
    }
  } else if (time_value) {
    (void)take_time(i, r, time_at, sent, clock_type::now());
    sampled = true;
  }
  // The flag says "sampled by the batch" to vote_reply for one call at a time, whatever it throws
  // (the votes after a throw go unanswered: their extensions stay open until the locks' loss
  // points, where the locks are declared lost, as for an answer that never came).
  resp::response one;
  std::size_t k = 0;
  for (const auto& v : votes) {
    if (v.joined) continue;
    one.assign(r.begin() + static_cast<std::ptrdiff_t>(starts[k]),
               r.begin() + static_cast<std::ptrdiff_t>(starts[k + 1]));
    ++k;
    const resp::node* answer = resp::reply_value(one);
    const error_code vec =
        answer && resp::is_error(answer->data_type) ? make_error_code(error::server_error) : error_code{};
    const sample_scope scope{shared_sample_, sampled};
    v.sink->on_reply(make_tag(v.round, i), vec, one);
  }
  if (joined != 0) deliver_joined(i, r, value_at(starts[own]), votes, joined, sampled);
}

// Each joined extension is told its element of the call's answer as if it were the answer of its
// own `extend_script` (a value at depth 0), so that nothing after this knows how it was sent.
void client_impl::deliver_joined(std::size_t i, const resp::response& r, std::size_t at, const vote_targets& votes,
                                 std::size_t count, bool sampled) {
  const auto answer = core::read_extend_many(r, at, count);
  resp::response one(1);
  std::size_t k = 0;
  const auto tell = [&](const gathered_vote& v, error_code vec, const resp::response& reply) {
    const sample_scope scope{shared_sample_, sampled};
    v.sink->on_reply(make_tag(v.round, i), vec, reply);
  };
  if (answer == core::extend_many_answer::elements) {
    for (const auto& v : votes) {
      if (!v.joined) continue;
      const resp::node& e = r[at + 1 + k++];
      one[0].data_type = e.data_type;
      one[0].value = e.value;
      tell(v, resp::is_error(e.data_type) ? make_error_code(error::server_error) : error_code{}, one);
    }
    return;
  }
  // The call as a whole failed. NOSCRIPT (a cache flushed while connected, or an ACL that denies
  // SCRIPT LOAD) goes to each extension, whose own EVAL then goes again (eval_instead), and the
  // scripts are loaded again. Whatever failed, such calls stop on this connection: its extensions
  // go one by one (each EVALSHA cached by its EVAL, with TIME behind the batch) from the next pass
  // on, as before the script existed, rather than meet the same failure on every batch.
  if (answer == core::extend_many_answer::noscript && many_ok_[i]) load_scripts(i, true);
  if (many_ok_[i]) {
    many_ok_[i] = false;
    REDLOCK_LOG(log_, log_level::warning, "{}: a batch of extensions in one script was {} ({}): extending one by one",
                names_[i], answer == core::extend_many_answer::malformed ? "answered unreadably" : "refused",
                at < r.size() ? printable(r[at].value, 200) : std::string{});
  }
  error_code vec = make_error_code(error::unexpected_reply);
  const resp::response* reply = &no_reply;
  if (answer != core::extend_many_answer::malformed) {
    vec = make_error_code(error::server_error);
    one[0].data_type = r[at].data_type;
    one[0].value = r[at].value;
    reply = &one;
  }
  for (const auto& v : votes) {
    if (v.joined) tell(v, vec, *reply);
  }
}

}  // namespace redlock::detail
