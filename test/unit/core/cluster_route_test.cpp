// SPDX-License-Identifier: BSL-1.0
// Cluster masters, the pure parts: key slots and hash tags (core/key_slot.hpp), routing and
// helper-key renaming of encoded requests and redirect replies (core/cluster_route.hpp), and the
// slot map read from real CLUSTER SHARDS / CLUSTER SLOTS replies (core/slot_map.hpp).

#include <redlock/core/cluster_route.hpp>
#include <redlock/core/hazard_guard.hpp>
#include <redlock/core/kind_spec.hpp>
#include <redlock/core/slot_map.hpp>
#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using namespace redlock::core;

// Every reply in `bytes`, one after the other.
redlock::resp::response parse(std::string_view bytes) {
  redlock::resp::parser p;
  redlock::resp::response out;
  boost::system::error_code ec;
  while (!bytes.empty()) {
    const auto n = p.consume(bytes, out, ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(p.done());
    if (ec || n == 0) break;
    bytes.remove_prefix(n);
    p.reset();
  }
  return out;
}

TEST(key_slot, matches_redis_cluster_for_known_keys) {
  // Values from the Redis Cluster specification and from `CLUSTER KEYSLOT` on Redis 7.0.
  EXPECT_EQ(crc16("123456789"), 0x31C3);
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("orders:42"), key_slot("orders:42"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("{user1000}.followers"), key_slot("{user1000}.following"));
}

TEST(key_slot, only_a_non_empty_first_tag_counts) {
  EXPECT_EQ(hash_tag("a{b}c"), std::optional<std::string_view>{"b"});
  EXPECT_EQ(hash_tag("{}x{y}"), std::nullopt);  // the first '{' opens an empty tag: whole key
  EXPECT_EQ(key_slot("{}x{y}"), crc16("{}x{y}") & 16383);
  EXPECT_EQ(hash_tag("a{b"), std::nullopt);
  EXPECT_EQ(hash_tag("a}b{c}"), std::optional<std::string_view>{"c"});
  EXPECT_EQ(hash_tag("{a{b}c}"), std::optional<std::string_view>{"a{b"});
}

TEST(key_slot, slotted_helper_keys_hash_like_their_lock_key) {
  for (std::string_view key : {"orders:42", "a{b", "{tag}rest", "x{y}z", "{{x}}", "plain"}) {
    std::string helper;
    append_helper_key(helper, key, ":redlock-queue", key_naming::slotted);
    EXPECT_EQ(key_slot(helper), key_slot(key)) << key << " -> " << helper;
    EXPECT_TRUE(slotted_key_problem(key).empty()) << key;
  }
  std::string tagged;
  append_helper_key(tagged, "{t}k", ":redlock-fence", key_naming::slotted);
  EXPECT_EQ(tagged, "{t}k:redlock-fence");  // tagged keys keep the plain names
  std::string wrapped;
  append_helper_key(wrapped, "orders:42", ":redlock-fence", key_naming::slotted);
  EXPECT_EQ(wrapped, "{orders:42}:redlock-fence");
  std::string plain;
  append_helper_key(plain, "orders:42", ":redlock-fence", key_naming::plain);
  EXPECT_EQ(plain, "orders:42:redlock-fence");
}

TEST(key_slot, names_that_would_break_the_slotted_scheme_are_refused) {
  // A '}' without a tag: "{a}b}" would hash "a", not "a}b".
  EXPECT_FALSE(slotted_key_problem("a}b").empty());
  // One whole tag: "{orders}"'s helper keys would be those of "orders".
  EXPECT_FALSE(slotted_key_problem("{orders}").empty());
  std::string of_whole, of_inner;
  append_helper_key(of_whole, "{orders}", ":redlock-holds", key_naming::slotted);
  append_helper_key(of_inner, "orders", ":redlock-holds", key_naming::slotted);
  EXPECT_EQ(of_whole, of_inner);  // why it is refused
  EXPECT_TRUE(slotted_key_problem("{orders}:42").empty());
}

std::string encode(const kind_spec& kind, step s, std::string_view key) {
  step_values v;
  v.key = key;
  v.token = "tok";
  v.ttl_ms = 1000;
  v.waiter = "w";
  v.owner = "o";
  redlock::resp::request req;
  EXPECT_TRUE(encode_step(req, kind.of(s), v, true));
  return req.payload();
}

TEST(cluster_route, every_kind_routes_to_its_lock_keys_slot_with_helpers_renamed) {
  for (const auto* kind : kinds::all) {
    if (kind == &kinds::multi) continue;
    for (auto s : {step::acquire, step::release, step::extend}) {
      for (std::string_view key : {"orders:42", "{t}orders"}) {
        const auto payload = encode(*kind, s, key);
        std::string out;
        const auto r = route_request(payload, out);
        ASSERT_FALSE(r.malformed) << kind->name;
        EXPECT_FALSE(r.cross_slot) << kind->name << " " << key;
        ASSERT_TRUE(r.slot) << kind->name;
        EXPECT_EQ(*r.slot, key_slot(key)) << kind->name;
        EXPECT_EQ(r.commands, 1u);
        // Only a script with helper keys of an untagged key is rewritten.
        const bool helpers = kind->of(s).key_count > 1;
        EXPECT_EQ(r.rewritten, helpers && key == "orders:42") << kind->name;
        if (r.rewritten) {
          EXPECT_NE(out.find("{orders:42}:redlock-"), std::string::npos) << out;
          EXPECT_EQ(out.find("$19\r\norders:42:redlock-"), std::string::npos) << out;
          std::string again;
          const auto r2 = route_request(out, again);  // the rewritten request is well formed
          EXPECT_FALSE(r2.malformed);
          EXPECT_FALSE(r2.rewritten);
          EXPECT_EQ(r2.slot, r.slot);
        } else {
          EXPECT_TRUE(out.empty());
        }
      }
    }
  }
}

TEST(cluster_route, a_helper_key_alone_is_renamed_too) {
  // The writer's leave names only its claim; the fair queue's leave is a raw ZREM.
  step_values v;
  v.key = "orders:42";
  v.waiter = "w";
  redlock::resp::request req;
  ASSERT_TRUE(encode_step(req, kinds::writer.leave, v, false));
  req.push("ZREM", "orders:42:redlock-queue", "w");
  std::string out;
  const auto r = route_request(req.payload(), out);
  EXPECT_TRUE(r.rewritten);
  EXPECT_FALSE(r.cross_slot);
  EXPECT_EQ(r.slot, key_slot("orders:42"));
  EXPECT_NE(out.find("{orders:42}:redlock-writer"), std::string::npos);
  EXPECT_NE(out.find("{orders:42}:redlock-queue"), std::string::npos);
  EXPECT_EQ(out.find("$23\r\norders:42:redlock-queue"), std::string::npos);
}

TEST(cluster_route, pipelined_time_and_keyless_requests) {
  redlock::resp::request req;
  req.push("SET", "orders:42", "tok", "NX", "PX", 1000);
  req.push("TIME");
  std::string out;
  auto r = route_request(req.payload(), out);
  EXPECT_EQ(r.commands, 2u);
  EXPECT_EQ(r.slot, key_slot("orders:42"));
  redlock::resp::request keyless;
  keyless.push("SCRIPT", "LOAD", "return 1");
  r = route_request(keyless.payload(), out);
  EXPECT_FALSE(r.slot);
  EXPECT_FALSE(r.cross_slot);
}

TEST(cluster_route, keys_of_different_slots_are_cross_slot) {
  step_values v;
  const std::string keys[] = {"foo", "bar"};
  v.all_keys = keys;
  v.token = "t";
  v.ttl_ms = 5;
  redlock::resp::request req;
  ASSERT_TRUE(encode_step(req, kinds::multi.acquire, v, true));
  std::string out;
  auto r = route_request(req.payload(), out);
  EXPECT_TRUE(r.cross_slot);
  const std::string same[] = {"{a}foo", "{a}bar"};
  v.all_keys = same;
  req.clear();
  ASSERT_TRUE(encode_step(req, kinds::multi.acquire, v, true));
  r = route_request(req.payload(), out);
  EXPECT_FALSE(r.cross_slot);
  EXPECT_EQ(r.slot, key_slot("a"));
}

redlock::resp::response reply(std::string_view bytes) { return parse(bytes); }

TEST(cluster_route, a_multi_resource_request_is_cut_by_slot_and_joined) {
  step_values v;
  const std::string keys[] = {"foo", "bar", "{foo}x", "baz"};  // slots 12182, 5061, 12182, 4813
  v.all_keys = keys;
  v.token = "tok";
  v.ttl_ms = 5000;
  redlock::resp::request req;
  ASSERT_TRUE(encode_step(req, kinds::multi.acquire, v, true));
  req.push("TIME");  // a vote carries TIME behind it
  auto split = split_by_slot(req.payload());
  ASSERT_TRUE(split);
  EXPECT_EQ(split->rule, join_rule::all_set);
  ASSERT_EQ(split->groups.size(), 3u);
  EXPECT_EQ(split->groups[0].slot, key_slot("foo"));
  EXPECT_EQ(split->groups[0].keys, (std::vector<std::size_t>{1, 3}));
  EXPECT_EQ(split->groups[0].replies, 2u);  // with TIME
  EXPECT_EQ(split->groups[1].keys, (std::vector<std::size_t>{2}));
  EXPECT_EQ(split->groups[2].keys, (std::vector<std::size_t>{4}));
  // Each part is the same script over its own keys, and routes to its slot.
  for (const auto& g : split->groups) {
    std::string out;
    const auto r = route_request(g.payload, out);
    EXPECT_FALSE(r.malformed);
    EXPECT_FALSE(r.cross_slot);
    EXPECT_EQ(r.slot, g.slot);
    EXPECT_NE(g.payload.find(std::string{redlock::detail::multi_acquire_script.sha1}), std::string::npos);
    EXPECT_NE(g.payload.find("$3\r\ntok\r\n$4\r\n5000\r\n"), std::string::npos);
  }
  EXPECT_NE(split->groups[0].payload.find("TIME"), std::string::npos);
  EXPECT_EQ(split->groups[1].payload.find("TIME"), std::string::npos);
  // All parts set: {1, 4}, then TIME's reply as the first part had it.
  const auto time = "*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n";
  auto joined = join_replies(*split, {reply(std::string{"*2\r\n:1\r\n:2\r\n"} + time), reply("*2\r\n:1\r\n:1\r\n"),
                                      reply("*2\r\n:1\r\n:1\r\n")});
  ASSERT_GE(joined.size(), 3u);
  EXPECT_EQ(joined[1].value, "1");
  EXPECT_EQ(joined[2].value, "4");
  EXPECT_EQ(parse_time(joined, 3), 1700000000123456);
  // A refusal in the second part's first key: key 2 of the whole; the earliest refusal wins.
  joined =
      join_replies(*split, {reply("*2\r\n:1\r\n:2\r\n"), reply("*2\r\n:0\r\n:1\r\n"), reply("*2\r\n:0\r\n:1\r\n")});
  EXPECT_EQ(joined[1].value, "0");
  EXPECT_EQ(joined[2].value, "2");
  joined =
      join_replies(*split, {reply("*2\r\n:0\r\n:2\r\n"), reply("*2\r\n:1\r\n:1\r\n"), reply("*2\r\n:1\r\n:1\r\n")});
  EXPECT_EQ(joined[2].value, "3");  // the first part's second key is key 3
  // A part that set its keys while another was refused is undone: the release over its keys.
  const auto undo = undo_part(split->groups[0].payload);
  std::string routed;
  const auto undo_route = route_request(undo, routed);
  EXPECT_EQ(undo_route.commands, 1u);  // not the TIME that went with the part
  EXPECT_EQ(undo_route.slot, key_slot("foo"));
  EXPECT_NE(undo.find(std::string{redlock::detail::multi_release_script.body}), std::string::npos);
  EXPECT_NE(undo.find("$3\r\nfoo\r\n$6\r\n{foo}x\r\n$3\r\ntok\r\n"), std::string::npos) << undo;
  EXPECT_EQ(undo.find("5000"), std::string::npos);
  EXPECT_TRUE(undo_part(redlock::resp::request{}.payload()).empty());
}

TEST(cluster_route, release_and_extension_join_as_any_and_every) {
  step_values v;
  const std::string keys[] = {"foo", "bar"};
  v.all_keys = keys;
  v.token = "tok";
  v.ttl_ms = 5000;
  redlock::resp::request rel, ext, plain;
  ASSERT_TRUE(encode_step(rel, kinds::multi.release, v, false));  // EVAL: recognised by its body
  ASSERT_TRUE(encode_step(ext, kinds::multi.extend, v, true));
  auto r = split_by_slot(rel.payload());
  auto e = split_by_slot(ext.payload());
  ASSERT_TRUE(r && e);
  EXPECT_EQ(r->rule, join_rule::any_one);
  EXPECT_EQ(e->rule, join_rule::every_one);
  EXPECT_EQ(join_replies(*r, {reply(":0\r\n"), reply(":1\r\n")})[0].value, "1");
  EXPECT_EQ(join_replies(*r, {reply(":0\r\n"), reply(":0\r\n")})[0].value, "0");
  EXPECT_EQ(join_replies(*e, {reply(":1\r\n"), reply(":0\r\n")})[0].value, "0");
  EXPECT_EQ(join_replies(*e, {reply(":1\r\n"), reply(":1\r\n")})[0].value, "1");
  // Scripts that cannot be cut are not.
  step_values one;
  one.key = "k";
  one.token = "t";
  ASSERT_TRUE(encode_step(plain, kinds::plain.release, one, true));
  EXPECT_FALSE(split_by_slot(plain.payload()));
}

TEST(cluster_route, malformed_payloads_are_reported) {
  std::string out;
  EXPECT_TRUE(route_request("PING\r\n", out).malformed);
  EXPECT_TRUE(route_request("*2\r\n$3\r\nGET\r\n$10\r\nshort\r\n", out).malformed);
  EXPECT_TRUE(route_request("*3\r\n$7\r\nEVALSHA\r\n$1\r\nx\r\n$1\r\n5\r\n", out).malformed);  // numkeys too big
}

TEST(cluster_route, redirects_are_read) {
  auto r = parse_redirect("MOVED 12182 127.0.0.1:17002");
  EXPECT_EQ(r.what, redirect::kind::moved);
  EXPECT_EQ(r.slot, 12182);
  EXPECT_EQ(r.host, "127.0.0.1");
  EXPECT_EQ(r.port, 17002);
  r = parse_redirect("ASK 3 [::1]:7000");
  EXPECT_EQ(r.what, redirect::kind::ask);
  EXPECT_EQ(r.host, "::1");
  r = parse_redirect("MOVED 3 :7000");  // the answering node's own host
  EXPECT_EQ(r.what, redirect::kind::moved);
  EXPECT_EQ(r.host, "");
  EXPECT_EQ(parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot").what, redirect::kind::try_again);
  EXPECT_EQ(parse_redirect("CLUSTERDOWN Hash slot not served").what, redirect::kind::cluster_down);
  EXPECT_EQ(parse_redirect("MOVED 16384 h:1").what, redirect::kind::none);
  EXPECT_EQ(parse_redirect("MOVED 1 h:0").what, redirect::kind::none);
  EXPECT_EQ(parse_redirect("MOVEDX 1 h:1").what, redirect::kind::none);
  EXPECT_EQ(parse_redirect("ERR wrong").what, redirect::kind::none);
  EXPECT_EQ(parse_redirect("ASK 1").what, redirect::kind::none);
}

// Captured from redis-server 7.0.15 with two primaries (HELLO 3).
constexpr std::string_view shards_reply =
    "*2\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\n"
    "da05d7feab23168cbaac000ae9b4645f1bf71dda\r\n$4\r\nport\r\n:17001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\n"
    "endpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n"
    "$6\r\nonline\r\n%2\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\n"
    "e13cf4adb6d0b586e275122d0daf73a80c29d9ea\r\n$4\r\nport\r\n:17002\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\n"
    "endpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n"
    "$6\r\nonline\r\n";
constexpr std::string_view slots_reply =
    "*2\r\n*3\r\n:0\r\n:8191\r\n*4\r\n$9\r\n127.0.0.1\r\n:17001\r\n$40\r\nda05d7feab23168cbaac000ae9b4645f1bf71dda\r\n"
    "%0\r\n*3\r\n:8192\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:17002\r\n$40\r\n"
    "e13cf4adb6d0b586e275122d0daf73a80c29d9ea\r\n%0\r\n";

TEST(slot_map, reads_cluster_shards_and_cluster_slots_alike) {
  for (auto reply : {shards_reply, slots_reply}) {
    slot_map m;
    ASSERT_TRUE(m.load(parse(reply), "seed"));
    ASSERT_EQ(m.nodes().size(), 2u);
    EXPECT_TRUE(m.complete());
    EXPECT_EQ(m.nodes()[0], (shard_node{"127.0.0.1", 17001, "da05d7feab23168cbaac000ae9b4645f1bf71dda"}));
    EXPECT_EQ(m.nodes()[1].port, 17002);
    EXPECT_EQ(m.owner(0), 0);
    EXPECT_EQ(m.owner(8191), 0);
    EXPECT_EQ(m.owner(8192), 1);
    EXPECT_EQ(m.owner(key_slot("foo")), 1);  // MOVED 12182 127.0.0.1:17002 from the first node
    EXPECT_EQ(m.slots_of(0), 8192u);
  }
}

TEST(slot_map, moved_corrects_one_slot_and_numbers_stay) {
  slot_map m;
  ASSERT_TRUE(m.load(parse(shards_reply), "seed"));
  m.moved(5, "127.0.0.1", 17002);
  EXPECT_EQ(m.owner(5), 1);
  m.moved(6, "127.0.0.1", 17003);  // a node not seen before
  EXPECT_EQ(m.owner(6), 2);
  EXPECT_EQ(m.nodes().size(), 3u);
  ASSERT_TRUE(m.load(parse(slots_reply), "seed"));  // reload: 17003 keeps its number, owns nothing
  EXPECT_EQ(m.owner(6), 0);
  EXPECT_EQ(m.slots_of(2), 0u);
}

TEST(slot_map, refuses_what_is_not_a_map_and_keeps_the_old_one) {
  slot_map m;
  ASSERT_TRUE(m.load(parse(shards_reply), "seed"));
  EXPECT_FALSE(m.load(parse("-ERR This instance has cluster support disabled\r\n"), "seed"));
  EXPECT_FALSE(m.load(parse("*1\r\n*3\r\n:0\r\n:99999\r\n*2\r\n$1\r\nh\r\n:1\r\n"), "seed"));
  EXPECT_EQ(m.owner(0), 0);
  slot_map empty;
  EXPECT_FALSE(empty.complete());
  EXPECT_EQ(empty.owner(0), slot_map::unowned);
}

// Captured from redis-server 7.0.15: 17003 replicates 17001 (HELLO 3).
constexpr std::string_view shards_with_replica =
    "*2\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*2\r\n%7\r\n$2\r\nid\r\n$40\r\n"
    "da05d7feab23168cbaac000ae9b4645f1bf71dda\r\n$4\r\nport\r\n:17001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\n"
    "endpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n"
    "$6\r\nonline\r\n%7\r\n$2\r\nid\r\n$40\r\n199209008e4a66137807a4ba7dd204871d16454d\r\n$4\r\nport\r\n:17003\r\n$"
    "2\r\n"
    "ip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:0\r\n$6\r\nhealth\r\n$7\r\nloading\r\n%2\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\n"
    "nodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\ne13cf4adb6d0b586e275122d0daf73a80c29d9ea\r\n$4\r\nport\r\n:17002\r\n$2\r\n"
    "ip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

TEST(slot_map, replicas_are_known_so_that_a_promotion_can_be_seen) {
  slot_map m;
  ASSERT_TRUE(m.load(parse(shards_with_replica), "seed"));
  ASSERT_EQ(m.nodes().size(), 3u);
  EXPECT_EQ(m.nodes()[2].port, 17003);
  EXPECT_TRUE(m.is_replica(2));
  EXPECT_FALSE(m.is_replica(0));
  EXPECT_EQ(m.slots_of(2), 0u);
  // CLUSTER SLOTS lists replicas after the primary of each range.
  slot_map s;
  ASSERT_TRUE(s.load(parse("*1\r\n*4\r\n:0\r\n:16383\r\n*2\r\n$1\r\na\r\n:1\r\n*2\r\n$1\r\nb\r\n:2\r\n"), "seed"));
  EXPECT_EQ(s.owner(7), 0);
  EXPECT_TRUE(s.is_replica(1));
  // After a failover the replica owns the slots and is no replica any more.
  ASSERT_TRUE(s.load(parse("*1\r\n*4\r\n:0\r\n:16383\r\n*2\r\n$1\r\nb\r\n:2\r\n*2\r\n$1\r\na\r\n:1\r\n"), "seed"));
  EXPECT_EQ(s.owner(7), 1);
  EXPECT_FALSE(s.is_replica(1));
  EXPECT_TRUE(s.is_replica(0));
}

TEST(slot_map, a_node_without_an_address_is_the_one_that_answered) {
  slot_map m;
  ASSERT_TRUE(m.load(parse("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:7000\r\n"), "10.0.0.9"));
  EXPECT_EQ(m.nodes()[0].host, "10.0.0.9");
  EXPECT_TRUE(m.complete());
}

}  // namespace
