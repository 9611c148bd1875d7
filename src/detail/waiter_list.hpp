// SPDX-License-Identifier: BSL-1.0
#pragma once
// Callers waiting for something on a strand (private to src/): a lock's loss, its next event. Each
// waiter can be cancelled on its own through its handler's cancellation slot; the list and every
// completion stay on the strand.

#include "completion.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

namespace redlock::detail {

template <class Signature>
class waiter_list;

/// Waiters completed with `(error_code, Args...)`; a cancelled one gets `operation_aborted` and
/// default `Args`.
template <class... Args>
class waiter_list<void(boost::system::error_code, Args...)> {
 public:
  using handler_type = boost::asio::any_completion_handler<void(boost::system::error_code, Args...)>;

  /// Adds `h` at the end. Its cancellation slot, when connected, completes it with
  /// `operation_aborted` (and default `Args`) on `ex`'s strand `strand`, as long as `owner` lives;
  /// `member` names this list in `*owner`. `fallback`: the executor for a handler without one.
  template <class Owner, class Strand, class Executor>
  void add(handler_type h, const Strand& strand, std::weak_ptr<Owner> owner, waiter_list Owner::*member,
           const Executor& fallback) {
    const auto id = ++last_id_;
    auto slot = boost::asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
      slot.assign([owner = std::move(owner), member, id, strand, fallback](boost::asio::cancellation_type) {
        boost::asio::post(strand, [owner, member, id, fallback] {
          if (auto o = owner.lock()) ((*o).*member).cancel(id, fallback);
        });
      });
    }
    entries_.push_back(entry{id, handler_box<handler_type>{std::move(h)}});
  }

  bool empty() const noexcept { return entries_.empty(); }
  std::size_t size() const noexcept { return entries_.size(); }

  /// Completes the oldest waiter with `(ec, args...)`.
  template <class Executor>
  void complete_front(const Executor& fallback, boost::system::error_code ec, Args... args) {
    auto h = std::move(entries_.front().box.handler);
    entries_.erase(entries_.begin());
    complete_handler(std::move(h), fallback, ec, std::move(args)...);
  }

  /// Completes every waiter with `(ec, args...)` (copied to each), oldest first. Those added by a
  /// completion (it runs later, on its executor) stay.
  template <class Executor>
  void complete_all(const Executor& fallback, boost::system::error_code ec, const Args&... args) {
    auto all = std::move(entries_);
    entries_.clear();
    // Every waiter is told, also when telling one throws (the first exception goes on after).
    std::exception_ptr failure;
    for (auto& e : all) {
      try {
        complete_handler(std::move(e.box.handler), fallback, ec, args...);
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  }

 private:
  template <class Executor>
  void cancel(std::uint64_t id, const Executor& fallback) {
    auto it = std::find_if(entries_.begin(), entries_.end(), [id](const entry& e) { return e.id == id; });
    if (it == entries_.end()) return;  // completed meanwhile
    auto h = std::move(it->box.handler);
    entries_.erase(it);
    complete_handler(std::move(h), fallback, make_error_code(boost::asio::error::operation_aborted), Args{}...);
  }

  struct entry {
    std::uint64_t id;
    handler_box<handler_type> box;
  };
  std::vector<entry> entries_;
  std::uint64_t last_id_ = 0;
};

}  // namespace redlock::detail
