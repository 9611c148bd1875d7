// SPDX-License-Identifier: BSL-1.0
// The lock kinds' table (redlock/core/kind_spec.hpp): which row each set of options gets, what
// each row holds, and every step of every kind encoded byte for byte. The expected bytes are
// written out here with a RESP writer of the test's own, not with the library's encoder.

#include <redlock/core/kind_spec.hpp>
#include <redlock/detail/scripts.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

using redlock::lock_kind;
using redlock::core::arg_ref;
using redlock::core::encode_step;
using redlock::core::find_kind;
using redlock::core::key_ref;
using redlock::core::kind_spec;
using redlock::core::step;
using redlock::core::step_spec;
using redlock::core::step_values;
namespace kinds = redlock::core::kinds;
namespace scripts = redlock::detail;

// A RESP array of bulk strings, as Redis expects a command.
std::string resp(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto a : args) out += "$" + std::to_string(a.size()) + "\r\n" + std::string{a} + "\r\n";
  return out;
}

std::string encoded(const kind_spec& k, step s, const step_values& v, bool by_sha = true) {
  redlock::resp::request req;
  if (!encode_step(req, k.of(s), v, by_sha)) return "(none)";
  EXPECT_EQ(req.commands(), 1u);
  return req.payload();
}

// One lock's values, every field distinct so that a field sent in the wrong place shows.
struct fixture {
  std::vector<std::string> all{"p:a", "p:b", "p:c"};
  step_values v;
  fixture() {
    v.key = "p:res";
    v.all_keys = all;
    v.token = "0123456789abcdef0123456789abcdef01234567";
    v.owner = "owner-7";
    v.waiter = "fedcba9876543210:2a";
    v.ttl_ms = 30000;
    v.ticket = 41;
    v.entry_timeout_ms = 550;
    v.permits = 3;
    v.fence_floor = 1700000000000123;
    v.fence = 1700000000000999;
    v.create = true;
    v.round = 7;
    v.keep = "kept-token";
  }
};

// ---- the plain lock: its wire traffic is Redlock's and stays exactly as it was ----------------------

TEST(kind_spec, plain_lock_requests_are_redlocks_byte_for_byte) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::plain, step::acquire, v), resp({"SET", "p:res", v.token, "NX", "PX", "30000"}));
  EXPECT_EQ(encoded(kinds::plain, step::release, v),
            resp({"EVALSHA", scripts::release_script.sha1, "4", "p:res", "p:res:redlock-queue", "p:res:redlock-expiry",
                  "p:res:redlock-offer", v.token, "1"}));
  EXPECT_EQ(encoded(kinds::plain, step::release, v, false),
            resp({"EVAL", scripts::release_script.body, "4", "p:res", "p:res:redlock-queue", "p:res:redlock-expiry",
                  "p:res:redlock-offer", v.token, "1"}));
  EXPECT_EQ(encoded(kinds::plain, step::extend, v),
            resp({"EVALSHA", scripts::extend_script.sha1, "1", "p:res", v.token, "30000"}));
  EXPECT_EQ(
      encoded(kinds::plain, step::fair_acquire, v),
      resp({"EVALSHA", scripts::fair_acquire_script.sha1, "4", "p:res", "p:res:redlock-queue", "p:res:redlock-expiry",
            "p:res:redlock-offer", v.token, "30000", "fedcba9876543210:2a", "41", "550", "7"}));
  EXPECT_EQ(encoded(kinds::plain, step::confirm, v), "(none)");
  EXPECT_EQ(encoded(kinds::plain, step::leave, v), "(none)");
  EXPECT_EQ(encoded(kinds::plain, step::dequeue, v),
            resp({"EVALSHA", scripts::dequeue_script.sha1, "4", "p:res", "p:res:redlock-queue", "p:res:redlock-expiry",
                  "p:res:redlock-offer", "fedcba9876543210:2a", "kept-token"}));
  // A failed round is released as a held lock is, but hands the key to nobody ("0").
  EXPECT_EQ(encoded(kinds::plain, step::abandon, v),
            resp({"EVALSHA", scripts::release_script.sha1, "4", "p:res", "p:res:redlock-queue", "p:res:redlock-expiry",
                  "p:res:redlock-offer", v.token, "0"}));
}

// ---- every other kind, every step -------------------------------------------------------------------

TEST(kind_spec, fenced_steps) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::fenced, step::acquire, v),
            resp({"EVALSHA", scripts::fence_acquire_script.sha1, "2", "p:res", "p:res:redlock-fence", v.token, "30000",
                  "1700000000000123"}));
  EXPECT_EQ(encoded(kinds::fenced, step::confirm, v), resp({"EVALSHA", scripts::fence_confirm_script.sha1, "2", "p:res",
                                                            "p:res:redlock-fence", v.token, "1700000000000999", "1"}));
  auto no_create = v;
  no_create.create = false;
  EXPECT_EQ(encoded(kinds::fenced, step::confirm, no_create, false),
            resp({"EVAL", scripts::fence_confirm_script.body, "2", "p:res", "p:res:redlock-fence", v.token,
                  "1700000000000999", "0"}));
  // Held, a fenced lock is a plain token key: the plain extension, and the plain release, which
  // also names the counter (a hand-over grants a fence).
  EXPECT_EQ(encoded(kinds::fenced, step::release, v),
            resp({"EVALSHA", scripts::release_script.sha1, "5", "p:res", "p:res:redlock-queue", "p:res:redlock-expiry",
                  "p:res:redlock-offer", "p:res:redlock-fence", v.token, "1"}));
  EXPECT_EQ(encoded(kinds::fenced, step::extend, v), encoded(kinds::plain, step::extend, v));
  // Its fair rounds: the plain lock's fair acquisition, then the counter and the floor.
  EXPECT_EQ(encoded(kinds::fenced, step::fair_acquire, v),
            resp({"EVALSHA", scripts::fair_acquire_script.sha1, "5", "p:res", "p:res:redlock-queue",
                  "p:res:redlock-expiry", "p:res:redlock-offer", "p:res:redlock-fence", v.token, "30000", v.waiter,
                  "41", "550", "7", "1700000000000123"}));
  EXPECT_EQ(encoded(kinds::fenced, step::dequeue, v), encoded(kinds::plain, step::dequeue, v));
  EXPECT_EQ(encoded(kinds::fenced, step::leave, v), "(none)");
  // A failed round also gives its counter step back (the release's keys, the counter last).
  EXPECT_EQ(encoded(kinds::fenced, step::abandon, v, false),
            resp({"EVAL", scripts::fence_abandon_script.body, "5", "p:res", "p:res:redlock-queue",
                  "p:res:redlock-expiry", "p:res:redlock-offer", "p:res:redlock-fence", v.token}));
}

TEST(kind_spec, reentrant_steps) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::reentrant, step::acquire, v),
            resp({"EVALSHA", scripts::reentrant_acquire_script.sha1, "2", "p:res", "p:res:redlock-holds", "owner-7",
                  "30000", v.token}));
  EXPECT_EQ(encoded(kinds::reentrant, step::release, v),
            resp({"EVALSHA", scripts::reentrant_release_script.sha1, "2", "p:res", "p:res:redlock-holds", "owner-7",
                  "0", v.token}));
  EXPECT_EQ(encoded(kinds::reentrant, step::extend, v),
            resp({"EVALSHA", scripts::reentrant_extend_script.sha1, "2", "p:res", "p:res:redlock-holds", "owner-7",
                  "30000", v.token}));
  EXPECT_EQ(encoded(kinds::reentrant, step::confirm, v), "(none)");
}

TEST(kind_spec, reader_steps) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::reader, step::acquire, v),
            resp({"EVALSHA", scripts::read_acquire_script.sha1, "3", "p:res", "p:res:redlock-readers",
                  "p:res:redlock-writer", v.token, "30000"}));
  EXPECT_EQ(encoded(kinds::reader, step::release, v),
            resp({"EVALSHA", scripts::read_release_script.sha1, "2", "p:res", "p:res:redlock-readers", v.token}));
  EXPECT_EQ(encoded(kinds::reader, step::extend, v), resp({"EVALSHA", scripts::read_extend_script.sha1, "2", "p:res",
                                                           "p:res:redlock-readers", v.token, "30000"}));
}

TEST(kind_spec, writer_steps) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::writer, step::acquire, v),
            resp({"EVALSHA", scripts::write_acquire_script.sha1, "3", "p:res", "p:res:redlock-readers",
                  "p:res:redlock-writer", v.token, "30000", "fedcba9876543210:2a", "550"}));
  EXPECT_EQ(encoded(kinds::writer, step::leave, v, false),
            resp({"EVAL", scripts::write_leave_script.body, "1", "p:res:redlock-writer", "fedcba9876543210:2a"}));
  EXPECT_EQ(encoded(kinds::writer, step::release, v), encoded(kinds::plain, step::release, v));
  EXPECT_EQ(encoded(kinds::writer, step::extend, v), encoded(kinds::plain, step::extend, v));
}

TEST(kind_spec, semaphore_steps) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::semaphore, step::acquire, v),
            resp({"EVALSHA", scripts::semaphore_acquire_script.sha1, "2", "p:res", "p:res:redlock-permits", v.token,
                  "30000", "3"}));
  EXPECT_EQ(encoded(kinds::semaphore, step::release, v),
            resp({"EVALSHA", scripts::semaphore_release_script.sha1, "2", "p:res", "p:res:redlock-permits", v.token}));
  EXPECT_EQ(encoded(kinds::semaphore, step::extend, v), resp({"EVALSHA", scripts::semaphore_extend_script.sha1, "2",
                                                              "p:res", "p:res:redlock-permits", v.token, "30000"}));
}

TEST(kind_spec, multi_resource_steps_name_every_key) {
  fixture f;
  const auto& v = f.v;
  EXPECT_EQ(encoded(kinds::multi, step::acquire, v),
            resp({"EVALSHA", scripts::multi_acquire_script.sha1, "3", "p:a", "p:b", "p:c", v.token, "30000"}));
  EXPECT_EQ(encoded(kinds::multi, step::release, v),
            resp({"EVALSHA", scripts::multi_release_script.sha1, "3", "p:a", "p:b", "p:c", v.token}));
  EXPECT_EQ(encoded(kinds::multi, step::extend, v, false),
            resp({"EVAL", scripts::multi_extend_script.body, "3", "p:a", "p:b", "p:c", v.token, "30000"}));
}

// Binary-safe names: every byte of a key (and of the suffix joined to it) reaches the wire.
TEST(kind_spec, keys_are_binary_safe) {
  fixture f;
  const std::string key{"k\0\r\n\xff", 5};
  f.v.key = key;
  EXPECT_EQ(encoded(kinds::reader, step::release, f.v),
            resp({"EVALSHA", scripts::read_release_script.sha1, "2", key, key + ":redlock-readers", f.v.token}));
}

// ---- the table itself --------------------------------------------------------------------------------

TEST(kind_spec, each_set_of_options_gets_its_row_or_a_reason) {
  std::string_view why;
  EXPECT_EQ(find_kind(lock_kind::exclusive, false, false, false, &why), &kinds::plain);
  EXPECT_EQ(find_kind(lock_kind::exclusive, true, false, false, &why), &kinds::fenced);
  EXPECT_EQ(find_kind(lock_kind::exclusive, false, true, false, &why), &kinds::reentrant);
  EXPECT_EQ(find_kind(lock_kind::read, false, false, false, &why), &kinds::reader);
  EXPECT_EQ(find_kind(lock_kind::write, false, false, false, &why), &kinds::writer);
  EXPECT_EQ(find_kind(lock_kind::semaphore, false, false, false, &why), &kinds::semaphore);
  EXPECT_EQ(find_kind(lock_kind::exclusive, false, false, true, &why), &kinds::multi);
  // Every other combination is refused with a reason.
  std::size_t refused = 0;
  for (int k = 0; k <= 4; ++k) {
    for (const bool fence : {false, true}) {
      for (const bool owned : {false, true}) {
        for (const bool multi : {false, true}) {
          why = {};
          const auto* row = find_kind(static_cast<lock_kind>(k), fence, owned, multi, &why);
          if (row) continue;
          ++refused;
          EXPECT_FALSE(why.empty()) << k << fence << owned << multi;
        }
      }
    }
  }
  EXPECT_EQ(refused, 5u * 2 * 2 * 2 - 7);
}

// What a row must hold to work: the steps every lock uses, and the steps its rules call for.
TEST(kind_spec, every_row_has_what_its_rules_use) {
  std::set<std::string_view> names;
  for (const auto* k : kinds::all) {
    SCOPED_TRACE(std::string{k->name});
    EXPECT_TRUE(names.insert(k->name).second);
    EXPECT_TRUE(k->acquire.exists());
    EXPECT_TRUE(k->release.exists());
    EXPECT_TRUE(k->extend.exists());
    EXPECT_EQ(k->fence, k->confirm.exists()) << "a fence is confirmed, and only a fence";
    EXPECT_EQ(k->claims, k->leave.exists()) << "a claim is dropped, and only a claim";
    EXPECT_EQ(k->fair, k->fair_acquire.exists());
    // The first round's answer is read as a fair round's, but for the ticket.
    EXPECT_FALSE(k->fair && k->scripted() && !k->fence) << "fair rounds start from a plain SET or a fence's grant";
    EXPECT_FALSE(k->resend_after_grant && k->claims) << "a late acquire must not leave a claim behind";
    EXPECT_EQ(k->resend_after_grant, k->scripted() && !k->claims);
  }
}

// Every script a step names is one the client loads on each connection, and a step sends at least
// as many KEYS and ARGV as its script reads (the highest KEYS[n] and ARGV[n] in its body).
TEST(kind_spec, every_step_sends_what_its_script_reads) {
  // (No std::regex: GCC 12 warns inside it at -O2 with the sanitizers.)
  const auto highest = [](std::string_view body, std::string_view name) {
    std::size_t top = 0;
    for (auto at = body.find(name); at != std::string_view::npos; at = body.find(name, at + 1)) {
      std::size_t i = at + name.size(), n = 0;
      if (i >= body.size() || body[i] != '[') continue;
      while (++i < body.size() && body[i] >= '0' && body[i] <= '9')
        n = n * 10 + static_cast<std::size_t>(body[i] - '0');
      top = std::max(top, n);
    }
    return top;
  };
  for (const auto* k : kinds::all) {
    for (const auto s : {step::acquire, step::fair_acquire, step::release, step::extend, step::confirm, step::leave,
                         step::dequeue, step::abandon}) {
      const auto& row = k->of(s);
      if (!row.script) continue;
      SCOPED_TRACE(std::string{k->name} + " step " + std::to_string(static_cast<int>(s)));
      EXPECT_NE(std::find(std::begin(scripts::all_scripts), std::end(scripts::all_scripts), row.script),
                std::end(scripts::all_scripts));
      const bool every_key = row.key_count == 1 && row.keys[0] == key_ref::all;
      // The release and the fair acquisition read a fencing counter (and its floor) only when
      // sent one: a fenced lock's.
      const bool optional_fence = row.script == &scripts::release_script || row.script == &scripts::fair_acquire_script;
      const bool fence_sent = row.key_count == 5;
      if (!every_key) {
        EXPECT_GE(row.key_count + (optional_fence && !fence_sent ? 1 : 0), highest(row.script->body, "KEYS"));
      }
      EXPECT_GE(row.arg_count + (optional_fence && !fence_sent && row.script == &scripts::fair_acquire_script ? 1 : 0),
                highest(row.script->body, "ARGV"));
      if (optional_fence && fence_sent) {
        EXPECT_EQ(row.keys[4], key_ref::fence);
      }
    }
  }
}

}  // namespace
