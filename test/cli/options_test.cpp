// SPDX-License-Identifier: BSL-1.0
// The redlock tool's pure parts: durations, command lines, configuration files, the choice of
// masters, JSON and text output.

#include "options.hpp"

#include "local_nodes.hpp"
#include "output.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace redlock::cli;
using std::chrono::milliseconds;

std::optional<milliseconds> dur(std::string_view s) { return parse_duration(s); }

TEST(cli_duration, accepts_units_and_bare_seconds) {
  EXPECT_EQ(dur("500ms"), 500ms);
  EXPECT_EQ(dur("30s"), 30s);
  EXPECT_EQ(dur("2m"), 2min);
  EXPECT_EQ(dur("1h"), 1h);
  EXPECT_EQ(dur("10"), 10s);
  EXPECT_EQ(dur("0"), 0ms);
  EXPECT_EQ(dur("1.5s"), 1500ms);
  EXPECT_EQ(dur("0.25"), 250ms);
  EXPECT_EQ(dur("1.5m"), 90s);
  EXPECT_EQ(dur("366h"), 366h);
}

TEST(cli_duration, rejects_everything_else_with_a_reason) {
  for (const char* bad : {"", "5x", "-1s", "+1s", "1.5ms", "s", " 5s", "5s ", "1e3", "5 s", ".5s", "5.s", "5sec",
                          "1h30m", "0x10", "9999999h", "100000000000000000000000s", "1.0000000001s"}) {
    std::string why;
    EXPECT_FALSE(parse_duration(bad, &why)) << "'" << bad << "'";
    EXPECT_FALSE(why.empty()) << "'" << bad << "'";
  }
  std::string why;
  parse_duration("5x", &why);
  EXPECT_NE(why.find("unknown unit 'x'"), std::string::npos) << why;
  parse_duration("1.5ms", &why);
  EXPECT_NE(why.find("whole number of milliseconds"), std::string::npos) << why;
}

TEST(cli_duration, formats_back) {
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(30s), "30s");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(1001ms), "1.001s");
  EXPECT_EQ(format_duration(2min), "2m");
  EXPECT_EQ(format_duration(90min), "90m");
  EXPECT_EQ(format_duration(1h), "1h");
  EXPECT_EQ(format_duration(0ms), "0s");
}

std::vector<std::string> args(std::initializer_list<const char*> a) { return {a.begin(), a.end()}; }

TEST(cli_run_options, parses_options_then_the_command) {
  const auto a =
      args({"--resource", "jobs:nightly", "--ttl=10s", "-w", "2m", "--grace", "3s", "--max-hold", "1h", "--foreground",
            "-v", "--nodes", "h1:1,h2:2,h3:3", "--prefix", "app:", "--", "sh", "-c", "exit 3"});
  const auto o = parse_run(a);
  EXPECT_EQ(o.resource, "jobs:nightly");
  EXPECT_EQ(o.ttl, 10s);
  EXPECT_EQ(o.wait, 2min);
  EXPECT_EQ(o.grace, 3s);
  EXPECT_EQ(o.max_hold, 1h);
  EXPECT_TRUE(o.foreground);
  EXPECT_TRUE(o.common.verbose);
  EXPECT_EQ(o.common.nodes, "h1:1,h2:2,h3:3");
  EXPECT_EQ(o.common.prefix, "app:");
  EXPECT_EQ(o.command, (std::vector<std::string>{"sh", "-c", "exit 3"}));
}

TEST(cli_run_options, defaults) {
  const auto o = parse_run(args({"-r", "x", "true"}));
  EXPECT_EQ(o.ttl, 30s);
  EXPECT_EQ(o.wait, 0ms);
  EXPECT_EQ(o.grace, 10s);
  EXPECT_EQ(o.max_hold, 0ms);
  EXPECT_FALSE(o.foreground);
  EXPECT_FALSE(o.common.json);
  EXPECT_EQ(o.json_fd, -1);
}

TEST(cli_run_options, the_first_non_option_starts_the_command) {
  const auto o = parse_run(args({"-r", "x", "ls", "-l", "--ttl", "1s"}));
  EXPECT_EQ(o.command, (std::vector<std::string>{"ls", "-l", "--ttl", "1s"}));
  EXPECT_EQ(o.ttl, 30s);
  // After "--" even a command that looks like an option.
  EXPECT_EQ(parse_run(args({"-r", "x", "--", "-weird"})).command, (std::vector<std::string>{"-weird"}));
}

TEST(cli_run_options, json_fd_implies_json) {
  const auto o = parse_run(args({"-r", "x", "--json-fd", "3", "true"}));
  EXPECT_TRUE(o.common.json);
  EXPECT_EQ(o.json_fd, 3);
}

template <class Parse = decltype(&parse_run)>
void expect_usage_error(const std::vector<std::string>& a, std::string_view needle, Parse parse = &parse_run) {
  try {
    parse(a);
    ADD_FAILURE() << "no usage_error for " << testing::PrintToString(a);
  } catch (const usage_error& e) {
    EXPECT_NE(std::string_view{e.what()}.find(needle), std::string_view::npos) << e.what();
  }
}

TEST(cli_run_options, usage_errors_name_the_problem) {
  expect_usage_error(args({"true"}), "missing --resource");
  expect_usage_error(args({"-r", "x"}), "missing the command");
  expect_usage_error(args({"-r", "x", "--"}), "missing the command after '--'");
  expect_usage_error(args({"-r", "x", "--ttl", "5x", "true"}), "'5x' is not a duration");
  expect_usage_error(args({"-r", "x", "--ttl", "0", "true"}), "--ttl must be positive");
  expect_usage_error(args({"-r", "x", "--ttl"}), "option --ttl needs a value");
  expect_usage_error(args({"-r", "x", "--bogus", "true"}), "unknown option '--bogus'");
  expect_usage_error(args({"-r", "x", "--foreground=yes", "true"}), "takes no value");
  expect_usage_error(args({"-r", "", "true"}), "empty");
  expect_usage_error(args({"-r", "x", "--json-fd", "-1", "true"}), "not a file descriptor");
  expect_usage_error(args({"-r", "x", "--request-timeout", "0", "true"}), "must be positive");
}

TEST(cli_run_options, kinds_of_lock) {
  auto o = parse_run(args({"-r", "x", "true"}));
  EXPECT_EQ(o.kind, redlock::lock_kind::exclusive);
  EXPECT_EQ(o.permits, 1u);
  EXPECT_FALSE(o.fence);
  EXPECT_FALSE(o.owner);
  EXPECT_FALSE(o.reentrant);
  EXPECT_EQ(o.resources, (std::vector<std::string>{"x"}));

  EXPECT_EQ(parse_run(args({"-r", "x", "--shared", "true"})).kind, redlock::lock_kind::read);
  EXPECT_EQ(parse_run(args({"-r", "x", "--write", "true"})).kind, redlock::lock_kind::write);
  o = parse_run(args({"-r", "x", "--permits", "3", "true"}));
  EXPECT_EQ(o.kind, redlock::lock_kind::semaphore);
  EXPECT_EQ(o.permits, 3u);
  EXPECT_EQ(parse_run(args({"-r", "x", "--permits=1", "true"})).kind, redlock::lock_kind::semaphore);
  EXPECT_EQ(parse_run(args({"-r", "x", "--permits", "1048576", "true"})).permits, 1048576u);
  // The same kind twice is no conflict; the last number of permits counts.
  EXPECT_EQ(parse_run(args({"-r", "x", "--shared", "--shared", "true"})).kind, redlock::lock_kind::read);
  EXPECT_EQ(parse_run(args({"-r", "x", "--permits", "2", "--permits", "5", "true"})).permits, 5u);
  EXPECT_TRUE(parse_run(args({"-r", "x", "--fence", "true"})).fence);
  EXPECT_EQ(parse_run(args({"-r", "x", "--owner", "host-1/42/job", "true"})).owner, "host-1/42/job");
  EXPECT_TRUE(parse_run(args({"-r", "x", "--reentrant", "true"})).reentrant);
}

TEST(cli_run_options, several_resources_in_order) {
  const auto o = parse_run(args({"-r", "b", "--resource", "a", "--resource=c", "--", "true"}));
  EXPECT_EQ(o.resources, (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(o.resource, "b");  // messages and REDLOCK_RESOURCE name the first
  EXPECT_EQ(o.kind, redlock::lock_kind::exclusive);
}

TEST(cli_run_options, conflicting_kinds_are_usage_errors_naming_both_flags) {
  expect_usage_error(args({"-r", "x", "--shared", "--permits", "2", "true"}),
                     "--shared and --permits cannot be combined");
  expect_usage_error(args({"-r", "x", "--permits", "2", "--shared", "true"}),
                     "--permits and --shared cannot be combined");
  expect_usage_error(args({"-r", "x", "--shared", "--write", "true"}), "--shared and --write cannot be combined");
  expect_usage_error(args({"-r", "x", "--write", "--permits", "2", "true"}),
                     "--write and --permits cannot be combined");
  expect_usage_error(args({"-r", "x", "--fence", "--shared", "true"}), "--fence cannot be combined with --shared");
  expect_usage_error(args({"-r", "x", "--write", "--fence", "true"}), "--fence cannot be combined with --write");
  expect_usage_error(args({"-r", "x", "--fence", "--permits", "2", "true"}),
                     "--fence cannot be combined with --permits");
  expect_usage_error(args({"-r", "x", "--owner", "me", "--shared", "true"}),
                     "--owner cannot be combined with --shared");
  expect_usage_error(args({"-r", "x", "--reentrant", "--permits", "3", "true"}),
                     "--reentrant cannot be combined with --permits");
  expect_usage_error(args({"-r", "x", "--fence", "--owner", "me", "true"}), "--fence cannot be combined with --owner");
  expect_usage_error(args({"-r", "x", "--reentrant", "--fence", "true"}),
                     "--fence cannot be combined with --reentrant");
  expect_usage_error(args({"-r", "x", "--owner", "me", "--reentrant", "true"}),
                     "--owner and --reentrant cannot be combined");
  for (const char* kind : {"--shared", "--write", "--fence", "--reentrant"}) {
    expect_usage_error(args({"-r", "x", "-r", "y", kind, "true"}),
                       fmt::format("several --resource cannot be combined with {}", kind));
  }
  expect_usage_error(args({"-r", "x", "-r", "y", "--permits", "2", "true"}),
                     "several --resource cannot be combined with --permits");
  expect_usage_error(args({"-r", "x", "-r", "y", "--owner", "me", "true"}),
                     "several --resource cannot be combined with --owner");
}

TEST(cli_run_options, bad_kind_values_are_usage_errors) {
  for (const char* bad : {"0", "-1", "two", "2x", "", "1048577", "99999999999999999999999"}) {
    expect_usage_error(args({"-r", "x", "--permits", bad, "true"}), "is not a number of permits in 1..1048576");
  }
  expect_usage_error(args({"-r", "x", "--permits"}), "option --permits needs a value");
  expect_usage_error(args({"-r", "x", "--shared=yes", "true"}), "takes no value");
  expect_usage_error(args({"-r", "x", "--fence=1", "true"}), "takes no value");
  expect_usage_error(args({"-r", "x", "-r", "x", "true"}), "--resource 'x' is given twice");
  for (const std::string& bad : {std::string{}, std::string{"a b"}, std::string{"tab\there"}, std::string(257, 'o')}) {
    try {
      parse_run(std::vector<std::string>{"-r", "x", "--owner", bad, "true"});
      ADD_FAILURE() << "no usage_error for owner '" << bad << "'";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string_view{e.what()}.find("option --owner: not an owner id"), std::string_view::npos) << e.what();
      if (!bad.empty()) {
        EXPECT_EQ(std::string_view{e.what()}.find(bad), std::string_view::npos) << e.what();  // never repeated
      }
    }
  }
  EXPECT_EQ(parse_run(args({"-r", "x", "--owner", std::string(256, 'o').c_str(), "true"})).owner,
            std::string(256, 'o'));
  // --help skips the checks of the combination too.
  EXPECT_TRUE(parse_run(args({"--shared", "--permits", "2", "--help"})).common.help);
}

TEST(cli_run_options, owner_ids_and_kind_flags) {
  EXPECT_TRUE(valid_owner("a"));
  EXPECT_TRUE(valid_owner("host/pid:42/task"));
  EXPECT_FALSE(valid_owner(""));
  EXPECT_FALSE(valid_owner("a b"));
  EXPECT_FALSE(valid_owner("a\x7f"));
  EXPECT_FALSE(valid_owner(std::string(257, 'a')));
  EXPECT_EQ(kind_flag(redlock::lock_kind::read), "--shared");
  EXPECT_EQ(kind_flag(redlock::lock_kind::write), "--write");
  EXPECT_EQ(kind_flag(redlock::lock_kind::semaphore), "--permits");
  EXPECT_EQ(kind_flag(redlock::lock_kind::exclusive), "");
}

TEST(cli_run_options, help_skips_the_requirements) {
  EXPECT_TRUE(parse_run(args({"--help"})).common.help);
  EXPECT_TRUE(parse_run(args({"-h"})).common.help);
}

TEST(cli_status_options, one_resource) {
  EXPECT_EQ(parse_status(args({"orders:42", "--json"})).resource, "orders:42");
  EXPECT_TRUE(parse_status(args({"--json", "x"})).common.json);
  EXPECT_EQ(parse_status(args({"--", "-odd"})).resource, "-odd");
  expect_usage_error(args({}), "missing the resource", &parse_status);
  expect_usage_error(args({"a", "b"}), "one resource at a time", &parse_status);
  expect_usage_error(args({"--ttl", "1s", "a"}), "unknown option '--ttl'", &parse_status);
}

TEST(cli_nodes_options, actions) {
  EXPECT_EQ(parse_nodes(args({})).what, nodes_options::action::list);
  EXPECT_EQ(parse_nodes(args({"list", "--json"})).what, nodes_options::action::list);
  const auto up = parse_nodes(args({"up", "3"}));
  EXPECT_EQ(up.what, nodes_options::action::up);
  EXPECT_EQ(up.count, 3u);
  EXPECT_EQ(parse_nodes(args({"down"})).what, nodes_options::action::down);
  expect_usage_error(args({"up"}), "needs the number", &parse_nodes);
  expect_usage_error(args({"up", "0"}), "not a number of masters", &parse_nodes);
  expect_usage_error(args({"up", "16"}), "not a number of masters", &parse_nodes);
  expect_usage_error(args({"up", "x"}), "not a number of masters", &parse_nodes);
  expect_usage_error(args({"sideways"}), "unknown 'nodes' action", &parse_nodes);
  expect_usage_error(args({"down", "now"}), "takes no argument", &parse_nodes);
}

TEST(cli_config_file, reads_keys_comments_and_quotes) {
  const auto s = parse_config_text(
      "# masters\n"
      "nodes = 10.0.0.1:7001, 10.0.0.2:7001\n"
      "\n"
      "  username=locker  \n"
      "password_file = /etc/redlock/pw\n"
      "key_prefix = \"lock:\"\n"
      "request_timeout = 300ms\n"
      "release_timeout = 2s\n"
      "connect_timeout = 1.5s\n"
      "database = 2\n",
      "test.conf");
  EXPECT_EQ(s.nodes, "10.0.0.1:7001, 10.0.0.2:7001");
  EXPECT_EQ(s.username, "locker");
  EXPECT_EQ(s.password_file, "/etc/redlock/pw");
  EXPECT_EQ(s.key_prefix, "lock:");
  EXPECT_EQ(s.request_timeout, 300ms);
  EXPECT_EQ(s.release_timeout, 2s);
  EXPECT_EQ(s.connect_timeout, 1500ms);
  EXPECT_EQ(s.database, 2);
}

void expect_config_error(std::string_view text, std::string_view needle, std::string_view absent = {}) {
  try {
    parse_config_text(text, "my.conf");
    ADD_FAILURE() << "no config_error for " << text;
  } catch (const config_error& e) {
    const std::string_view what = e.what();
    EXPECT_NE(what.find(needle), std::string_view::npos) << what;
    if (!absent.empty()) {
      EXPECT_EQ(what.find(absent), std::string_view::npos) << what;
    }
  }
}

TEST(cli_config_file, refuses_mistakes_with_file_and_line) {
  expect_config_error("nodes = a:1\npassword = hunter2-secret\n", "my.conf:2: passwords are not accepted",
                      "hunter2-secret");
  expect_config_error("colour = blue\n", "my.conf:1: unknown key 'colour'");
  expect_config_error("nodes = a:1\nnodes = b:1\n", "my.conf:2: 'nodes' is set twice");
  expect_config_error("request_timeout = soon\n", "'soon' is not a duration");
  expect_config_error("request_timeout = 0\n", "must be positive");
  expect_config_error("nodes\n", "expected 'key = value'");
  expect_config_error("nodes =\n", "empty value");
  expect_config_error("database = -1\n", "not a database number");
}

/// A fake environment and file system for `resolve`.
struct world {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;
  std::optional<std::string> local;

  resolved_config resolve_with(const common_options& o) const {
    return resolve(
        o,
        [this](std::string_view name) -> std::optional<std::string> {
          const auto it = env.find(std::string{name});
          if (it == env.end() || it->second.empty()) return std::nullopt;
          return it->second;
        },
        [this](const std::string& path, std::string& why) -> std::optional<std::string> {
          const auto it = files.find(path);
          if (it == files.end()) {
            why = "No such file or directory";
            return std::nullopt;
          }
          return it->second;
        },
        [this] { return local; });
  }
};

TEST(cli_resolve, masters_from_flag_then_env_then_file_then_local) {
  world w;
  w.local = "127.0.0.1:1001";
  common_options o;
  EXPECT_EQ(w.resolve_with(o).origin, masters_origin::local);
  EXPECT_EQ(w.resolve_with(o).client.masters.at(0).port, 1001);

  w.files["/c.conf"] = "nodes = 127.0.0.1:2001,127.0.0.1:2002\n";
  w.env["REDLOCK_CONFIG"] = "/c.conf";
  auto r = w.resolve_with(o);
  EXPECT_EQ(r.origin, masters_origin::file);
  EXPECT_EQ(r.client.masters.size(), 2u);
  EXPECT_EQ(r.config_path, "/c.conf");

  w.env["REDLOCK_NODES"] = "127.0.0.1:3001";
  r = w.resolve_with(o);
  EXPECT_EQ(r.origin, masters_origin::environment);
  EXPECT_EQ(r.client.masters.at(0).port, 3001);

  o.nodes = "127.0.0.1:4001,[::1]:4002,unix:/tmp/r.sock";
  r = w.resolve_with(o);
  EXPECT_EQ(r.origin, masters_origin::flag);
  ASSERT_EQ(r.client.masters.size(), 3u);
  EXPECT_EQ(redlock::address_of(r.client.masters[0]), "127.0.0.1:4001");
  EXPECT_EQ(redlock::address_of(r.client.masters[1]), "[::1]:4002");
  EXPECT_EQ(redlock::address_of(r.client.masters[2]), "unix:/tmp/r.sock");
  // --verbose says where they came from.
  bool said = false;
  for (const auto& n : r.notes) said = said || n.find("from --nodes") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(cli_resolve, config_flag_beats_env_and_settings_apply) {
  world w;
  w.files["/a.conf"] = "nodes = 127.0.0.1:1\nkey_prefix = a:\nrequest_timeout = 400ms\nconnect_timeout = 2s\n";
  w.files["/b.conf"] = "nodes = 127.0.0.1:2\n";
  w.env["REDLOCK_CONFIG"] = "/b.conf";
  common_options o;
  o.config_file = "/a.conf";
  auto r = w.resolve_with(o);
  EXPECT_EQ(r.client.masters.at(0).port, 1);
  EXPECT_EQ(r.client.key_prefix, "a:");
  EXPECT_EQ(r.client.request_timeout, 400ms);
  EXPECT_EQ(r.client.masters.at(0).connect_timeout, 2s);
  EXPECT_EQ(key_of(r, "job"), "a:job");
  // Flags and the environment beat the file.
  w.env["REDLOCK_PREFIX"] = "e:";
  EXPECT_EQ(w.resolve_with(o).client.key_prefix, "e:");
  o.prefix = "f:";
  o.request_timeout = 100ms;
  r = w.resolve_with(o);
  EXPECT_EQ(r.client.key_prefix, "f:");
  EXPECT_EQ(r.client.request_timeout, 100ms);
}

TEST(cli_resolve, credentials_from_env_or_password_file_and_never_in_notes) {
  world w;
  w.env["REDLOCK_NODES"] = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
  w.env["REDLOCK_PASSWORD"] = "env-Secret-123";
  w.env["REDLOCK_USERNAME"] = "locker";
  auto r = w.resolve_with({});
  for (const auto& m : r.client.masters) {
    EXPECT_EQ(m.password, "env-Secret-123");
    EXPECT_EQ(m.username, "locker");
  }
  for (const auto& n : r.notes) EXPECT_EQ(n.find("env-Secret-123"), std::string::npos) << n;
  EXPECT_EQ(r.password_origin, "REDLOCK_PASSWORD");

  world f;
  f.files["/c.conf"] = "nodes = 127.0.0.1:1\nusername = filer\npassword_file = /pw\n";
  f.files["/pw"] = "file-Secret-456\n";
  common_options o;
  o.config_file = "/c.conf";
  r = f.resolve_with(o);
  EXPECT_EQ(r.client.masters.at(0).password, "file-Secret-456");  // the trailing newline is not part of it
  EXPECT_EQ(r.client.masters.at(0).username, "filer");
  for (const auto& n : r.notes) EXPECT_EQ(n.find("file-Secret-456"), std::string::npos) << n;
  // The environment beats the file.
  f.env["REDLOCK_PASSWORD"] = "env-Secret-789";
  EXPECT_EQ(f.resolve_with(o).client.masters.at(0).password, "env-Secret-789");
}

void expect_tls_error(const world& w, const common_options& o, std::string_view needle) {
  try {
    w.resolve_with(o);
    ADD_FAILURE() << "no config_error, expected " << needle;
  } catch (const config_error& e) {
    EXPECT_NE(std::string_view{e.what()}.find(needle), std::string_view::npos) << e.what();
  }
}

// TLS: rediss:// entries, or every TCP master with --tls / REDLOCK_TLS / 'tls = yes'; the settings
// from the flag, else the environment, else the file, on every TLS master only.
TEST(cli_resolve, tls_from_list_flag_env_and_file) {
  world w;
  common_options o;
  o.nodes = "rediss://127.0.0.1:1,127.0.0.1:2";
  auto r = w.resolve_with(o);
  EXPECT_TRUE(r.client.masters.at(0).tls.enabled);
  EXPECT_FALSE(r.client.masters.at(1).tls.enabled);
  o.tls = true;
  r = w.resolve_with(o);
  EXPECT_TRUE(r.client.masters.at(1).tls.enabled);
  bool said = false;
  for (const auto& n : r.notes) said = said || n.find("TLS to 2 masters, trusting the system's CA store") == 0;
  EXPECT_TRUE(said);

  // The file's settings, beaten by the environment, beaten by the flag (checked through the
  // error validate() gives for a file that does not exist: it names the path that won).
  w.files["/t.conf"] = "nodes = 127.0.0.1:1\ntls = yes\ntls_ca_file = /file/ca.crt\n";
  common_options f;
  f.config_file = "/t.conf";
  expect_tls_error(w, f, "/file/ca.crt");
  w.env["REDLOCK_TLS_CA_FILE"] = "/env/ca.crt";
  expect_tls_error(w, f, "/env/ca.crt");
  f.tls_ca_file = "/flag/ca.crt";
  expect_tls_error(w, f, "/flag/ca.crt");

  // A key without a certificate; TLS settings with no TLS master; a bad REDLOCK_TLS.
  world k;
  common_options kk;
  kk.nodes = "rediss://127.0.0.1:1";
  kk.tls_key_file = "/k.pem";
  expect_tls_error(k, kk, "--tls-key without --tls-cert: a private key needs its client certificate");
  kk.nodes = "127.0.0.1:1";
  expect_tls_error(k, kk, "no master uses TLS");
  k.env["REDLOCK_TLS"] = "maybe";
  expect_tls_error(k, kk, "REDLOCK_TLS: 'maybe'");
}

void expect_resolve_error(const world& w, const common_options& o, std::string_view needle) {
  try {
    w.resolve_with(o);
    ADD_FAILURE() << "no config_error, expected " << needle;
  } catch (const config_error& e) {
    EXPECT_NE(std::string_view{e.what()}.find(needle), std::string_view::npos) << e.what();
  }
}

TEST(cli_resolve, configuration_errors) {
  world w;
  expect_resolve_error(w, {}, "no masters configured");
  common_options o;
  o.nodes = "127.0.0.1:notaport";
  expect_resolve_error(w, o, "bad list of masters from --nodes: master 1 ('127.0.0.1:notaport')");
  o.nodes = "";
  expect_resolve_error(w, o, "bad list of masters");
  o.nodes = "127.0.0.1:1,127.0.0.1:1";
  expect_resolve_error(w, o, "listed twice");
  w.env["REDLOCK_NODES"] = "x:1,,y:2";
  expect_resolve_error(w, {}, "bad list of masters from REDLOCK_NODES");
  w.env.clear();
  o = {};
  o.config_file = "/missing.conf";
  expect_resolve_error(w, o, "cannot read the configuration file '/missing.conf'");
  w.files["/c.conf"] = "nodes = 127.0.0.1:1\npassword_file = /nope\n";
  o.config_file = "/c.conf";
  expect_resolve_error(w, o, "cannot read the password file '/nope'");
  w.files["/c.conf"] = "nodes = 127.0.0.1:1\nusername = u\n";
  expect_resolve_error(w, o, "no password");
}

TEST(cli_json, quoting) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c\n\t"), "\"a\\\"b\\\\c\\n\\t\"");
  EXPECT_EQ(json_quote(std::string_view{"\x01\x7f", 2}), "\"\\u0001\\u007f\"");
  EXPECT_EQ(json_quote("h\xc3\xa9"), "\"h\xc3\xa9\"");                 // valid UTF-8 passes
  EXPECT_EQ(json_quote("\xff\xc3"), "\"\\ufffd\\ufffd\"");             // invalid bytes are replaced
  EXPECT_EQ(json_quote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // a surrogate is not UTF-8
}

TEST(cli_json, writer_nests_and_separates) {
  json_writer j;
  j.begin_object()
      .field("s", "x")
      .field("n", 3)
      .field("b", true)
      .null_field("z")
      .key("a")
      .begin_array()
      .value(1)
      .begin_object()
      .field("k", 1.5)
      .end_object()
      .end_array()
      .key("e")
      .begin_object()
      .end_object()
      .end_object();
  EXPECT_EQ(j.str(), R"({"s":"x","n":3,"b":true,"z":null,"a":[1,{"k":1.500}],"e":{}})");
}

TEST(cli_text, printable_and_short_token) {
  EXPECT_EQ(printable("ok text"), "ok text");
  EXPECT_EQ(printable("a\x1b[31mb"), "a\\x1b[31mb");
  EXPECT_EQ(short_token("0123456789abcdef0123456789abcdef01234567"), "01234567");
  EXPECT_EQ(short_token("abc"), "abc");
}

TEST(cli_local_state_dir, precedence) {
  using redlock::local::state_dir_from;
  EXPECT_EQ(state_dir_from(std::string{"/s"}, std::string{"/run/user/1"}, 1), "/s");
  EXPECT_EQ(state_dir_from(std::nullopt, std::string{"/run/user/1"}, 1), "/run/user/1/redlock");
  EXPECT_EQ(state_dir_from(std::string{""}, std::nullopt, 1000), "/tmp/redlock-1000");
}

}  // namespace
