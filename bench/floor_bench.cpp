// SPDX-License-Identifier: BSL-1.0
// An independent floor for scenario (a): the Redlock round trips of one lock+unlock over N
// masters, done with nothing but POSIX sockets and epoll on one thread. It uses no redlock code
// (no library header, not even the RESP encoder), so what it measures is what the network, the
// kernel and the masters cost; whatever our client adds on top is ours.
//
// Per cycle, over persistent non-blocking TCP connections (TCP_NODELAY) to every master:
//   1. write `SET key token NX PX ttl` to all masters at once; wait until a majority said +OK;
//   2. write `EVALSHA <release script> 1 key token` to all; wait until a majority replied.
// The latency of a cycle is 1+2. The next cycle starts as soon as it ends, as a client's loop of
// lock+unlock does: the minority's late replies are read when they come, during the next cycle,
// so their reads and wake-ups cost what they cost any client that does not wait for them.
// --late drain reads them before the next cycle instead, outside any cycle's time (the floor's
// definition before 2026-11-29; it leaves out about two replies' reads per cycle).
//
// It waits in epoll_wait like Asio's reactor does, so both sides pay the same wake-ups. --spin 1
// polls instead (epoll_wait with timeout 0): lower latency for a whole core burnt, which our
// blocking event loop does not do either, so it is not the floor run.sh compares with.
//
// --tls-ca FILE speaks TLS to the masters' TLS ports instead, with OpenSSL over the same sockets
// (the peer verified against FILE and its IP address, as our client does; records read ahead, so
// that a read takes every record that came): the TLS floor that bench/tls_bench compares with.
//
// Usage: floor_bench [--masters host:port,...] [--cycles N] [--warmup W] [--ttl-ms T] [--spin 0|1]
//                    [--tls-ca FILE] [--late flow|drain] [--json FILE]
// Without --masters, the list comes from $REDLOCK_BENCH_MASTERS (redlock_bench sets it when it
// runs this program against its own masters; see bench/run.sh).

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <initializer_list>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <numeric>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "floor_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(2);
}

// Length of the first complete RESP reply in `b`, or 0 while it is incomplete. Only finds reply
// boundaries; arrays are walked element by element.
std::size_t reply_length(std::string_view b) {
  if (b.empty()) return 0;
  const auto eol = b.find("\r\n");
  if (eol == std::string_view::npos) return 0;
  const std::size_t head = eol + 2;
  switch (b[0]) {
    case '+':
    case '-':
    case ':':
      return head;
    case '$': {
      const long n = std::strtol(b.data() + 1, nullptr, 10);
      if (n < 0) return head;
      const std::size_t total = head + static_cast<std::size_t>(n) + 2;
      return b.size() >= total ? total : 0;
    }
    case '*': {
      const long n = std::strtol(b.data() + 1, nullptr, 10);
      std::size_t at = head;
      for (long i = 0; i < n; ++i) {
        const std::size_t len = reply_length(b.substr(at));
        if (len == 0) return 0;
        at += len;
      }
      return at;
    }
    default:
      throw std::runtime_error("unexpected RESP reply type");
  }
}

// A RESP command from its arguments.
std::string command(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (auto a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out += a;
    out += "\r\n";
  }
  return out;
}

struct master {
  int fd = -1;
  SSL* tls = nullptr;  // --tls-ca
  std::array<char, 4096> buf{};
  std::size_t len = 0;        // bytes in buf not yet consumed
  unsigned long replies = 0;  // complete replies read so far
};

void write_all(int fd, std::string_view data, SSL* tls = nullptr) {
  if (tls != nullptr) {
    // One record per request, as our client's write of a lone request makes.
    std::size_t n = 0;
    if (SSL_write_ex(tls, data.data(), data.size(), &n) != 1 || n != data.size()) die("SSL_write");
    return;
  }
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;  // never happens with ~150-byte requests
      die("send");
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

int connect_to(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("expected host:port, got " + host_port);
  const std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) die("getaddrinfo " + host_port);
  const int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0 || ::connect(fd, res->ai_addr, res->ai_addrlen) != 0) die("connect " + host_port);
  ::freeaddrinfo(res);
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
  return fd;
}

// Blocking request/reply used only during set-up (SCRIPT LOAD), before the sockets go non-blocking.
std::string exchange(int fd, const std::string& req, SSL* tls) {
  write_all(fd, req, tls);
  std::string in;
  std::array<char, 512> tmp{};
  while (reply_length(in) == 0) {
    const ssize_t n =
        tls ? SSL_read(tls, tmp.data(), static_cast<int>(tmp.size())) : ::recv(fd, tmp.data(), tmp.size(), 0);
    if (n <= 0) die("recv during set-up");
    in.append(tmp.data(), static_cast<std::size_t>(n));
  }
  return in;
}

struct stats {
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, mean = 0;
};

stats summarize(std::vector<double> v) {
  stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double p) { return v[static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1))]; };
  s.p50 = at(50);
  s.p90 = at(90);
  s.p99 = at(99);
  s.p999 = at(99.9);
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

std::string json_stats(const stats& s) {
  std::array<char, 256> b{};
  std::snprintf(b.data(), b.size(),
                "{\"p50\": %.1f, \"p90\": %.1f, \"p99\": %.1f, \"p99_9\": %.1f, \"max\": %.1f, \"mean\": %.1f}", s.p50,
                s.p90, s.p99, s.p999, s.max, s.mean);
  return b.data();
}

double us(clock_type::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::string masters_arg, json_path = "floor_bench.json", tls_ca;
  int cycles = 20000, warmup = 1000;
  long ttl_ms = 10000;
  bool spin = false, late_flow = true;
  if (const char* env = std::getenv("REDLOCK_BENCH_MASTERS")) masters_arg = env;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--masters") masters_arg = v;
    if (a == "--cycles") cycles = std::stoi(v);
    if (a == "--warmup") warmup = std::stoi(v);
    if (a == "--ttl-ms") ttl_ms = std::stol(v);
    if (a == "--json") json_path = v;
    if (a == "--spin") spin = v != "0";
    if (a == "--tls-ca") tls_ca = v;
    if (a == "--late") late_flow = v != "drain";
  }
  SSL_CTX* tls_ctx = nullptr;
  if (!tls_ca.empty()) {
    tls_ctx = SSL_CTX_new(TLS_client_method());
    if (!tls_ctx || SSL_CTX_load_verify_locations(tls_ctx, tls_ca.c_str(), nullptr) != 1) die("TLS context");
    SSL_CTX_set_min_proto_version(tls_ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_clear_mode(tls_ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(tls_ctx, 1);
  }
  std::vector<std::string> addresses;
  for (std::size_t at = 0; at < masters_arg.size();) {
    const auto comma = std::min(masters_arg.find(',', at), masters_arg.size());
    addresses.push_back(masters_arg.substr(at, comma - at));
    at = comma + 1;
  }
  if (addresses.empty()) {
    std::fprintf(stderr, "usage: floor_bench --masters host:port,... (or set REDLOCK_BENCH_MASTERS)\n");
    return 2;
  }
  const std::size_t n = addresses.size(), quorum = n / 2 + 1;

  // The release script: delete the key only while it still holds our token.
  const std::string script =
      R"(if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end)";
  std::vector<master> ms(n);
  std::string sha;
  const int ep = ::epoll_create1(0);
  if (ep < 0) die("epoll_create1");
  for (std::size_t i = 0; i < n; ++i) {
    ms[i].fd = connect_to(addresses[i]);
    if (tls_ctx) {
      SSL* t = SSL_new(tls_ctx);
      const auto host = addresses[i].substr(0, addresses[i].rfind(':'));
      if (!t || SSL_set_fd(t, ms[i].fd) != 1 || X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t), host.c_str()) != 1 ||
          SSL_connect(t) != 1)
        die("TLS handshake with " + addresses[i]);
      ms[i].tls = t;
    }
    const std::string r = exchange(ms[i].fd, command({"SCRIPT", "LOAD", script}), ms[i].tls);
    if (r.size() < 4 || r[0] != '$') throw std::runtime_error("SCRIPT LOAD failed: " + r);
    sha = r.substr(r.find("\r\n") + 2, 40);
    if (::fcntl(ms[i].fd, F_SETFL, ::fcntl(ms[i].fd, F_GETFL) | O_NONBLOCK) != 0) die("O_NONBLOCK");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, ms[i].fd, &ev) != 0) die("epoll_ctl");
  }

  const std::string key = "floor:a";
  const std::size_t total = static_cast<std::size_t>(warmup + cycles);
  std::vector<double> cycle_us, lock_us;
  std::vector<double> all_us(total, -1.0);  // by cycle: until its last release answered
  cycle_us.reserve(static_cast<std::size_t>(cycles));
  lock_us.reserve(static_cast<std::size_t>(cycles));
  long failures = 0;
  std::array<epoll_event, 16> events{};
  const std::string ttl = std::to_string(ttl_ms);

  // The cycle in progress. Replies come in order on each connection, so the reply numbered r on
  // a connection is cycle r / 2's SET (r even) or release (r odd).
  std::size_t k = 0, oks = 0, set_replies = 0, released = 0;
  bool release_sent = false;
  std::string release;
  std::vector<clock_type::time_point> started(total);
  std::vector<std::size_t> releases_seen(total, 0);
  clock_type::time_point t_lock{}, t_end{};
  auto start_cycle = [&] {
    // A fresh 40-hex-digit token per cycle (ours sends 40 hex digits too).
    std::array<char, 41> token{};
    std::snprintf(token.data(), token.size(), "%040x", static_cast<unsigned>(k));
    const std::string tok{token.data(), 40};
    const std::string set = command({"SET", key, tok, "NX", "PX", ttl});
    release = command({"EVALSHA", sha, "1", key, tok});
    oks = set_replies = released = 0;
    release_sent = false;
    started[k] = clock_type::now();
    for (auto& m : ms) write_all(m.fd, set, m.tls);
  };
  auto finish_cycle = [&](clock_type::time_point end) {
    if (k >= static_cast<std::size_t>(warmup)) {
      cycle_us.push_back(us(end - started[k]));
      lock_us.push_back(us(t_lock - started[k]));
    }
    if (++k < total) start_cycle();
  };
  std::size_t replies_left = 2 * total * n;
  start_cycle();
  while (replies_left > 0) {
    const int ready = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), spin ? 0 : -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int e = 0; e < ready; ++e) {
      master& m = ms[events[static_cast<std::size_t>(e)].data.u64];
      if (m.tls) {
        // Every record that came (read ahead: one recv for them), then the one that finds none.
        std::size_t got = 0;
        while (SSL_read_ex(m.tls, m.buf.data() + m.len, m.buf.size() - m.len, &got) == 1) m.len += got;
        const int why = SSL_get_error(m.tls, 0);
        if (why != SSL_ERROR_WANT_READ) die("SSL_read");
      } else {
        const ssize_t got = ::recv(m.fd, m.buf.data() + m.len, m.buf.size() - m.len, 0);
        if (got <= 0) {
          if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          die("recv");
        }
        m.len += static_cast<std::size_t>(got);
      }
      std::size_t at = 0;
      while (std::size_t len = reply_length({m.buf.data() + at, m.len - at})) {
        const std::string_view r{m.buf.data() + at, len};
        at += len;
        --replies_left;
        const unsigned long idx = m.replies++;
        const std::size_t c = idx / 2;
        if (idx % 2 == 0) {
          // A SET: +OK when acquired, $-1 when the key is taken. One of an ended cycle is late.
          if (c != k) continue;
          ++set_replies;
          if (r == "+OK\r\n" && ++oks == quorum) t_lock = clock_type::now();
          if (!release_sent && (oks == quorum || set_replies == n)) {
            if (oks < quorum) ++failures;
            release_sent = true;
            for (auto& o : ms) write_all(o.fd, release, o.tls);
          }
          continue;
        }
        // A release: :1 or :0.
        const auto now = clock_type::now();
        if (++releases_seen[c] == n) all_us[c] = us(now - started[c]);
        if (c != k) continue;
        ++released;
        // The cycle ends at a majority; with --late drain, the next starts only once every
        // master answered (the late replies read outside the cycle's time).
        if (released == quorum) t_end = now;
        if (released == (late_flow ? quorum : n)) finish_cycle(t_end);
      }
      std::memmove(m.buf.data(), m.buf.data() + at, m.len - at);
      m.len -= at;
    }
  }
  all_us.erase(all_us.begin(), all_us.begin() + warmup);
  for (auto& m : ms) {
    if (m.tls) SSL_free(m.tls);
    ::close(m.fd);
  }
  if (tls_ctx) SSL_CTX_free(tls_ctx);
  ::close(ep);

  const stats c = summarize(cycle_us), l = summarize(lock_us), a = summarize(all_us);
  std::printf(
      "floor     %zu masters%s, %d cycles (after %d warm-up), epoll %s, late replies %s, one thread, no redlock code\n"
      "          SET+release to a majority (the cycle): p50 %.1f p99 %.1f mean %.1f us\n"
      "          SET to a majority (lock only):         p50 %.1f p99 %.1f mean %.1f us\n"
      "          until all %zu releases answered:       p50 %.1f p99 %.1f mean %.1f us; failures %ld\n",
      n, tls_ctx ? " over TLS" : "", cycles, warmup, spin ? "busy-polling" : "blocking",
      late_flow ? "read in the next cycle" : "drained between cycles", c.p50, c.p99, c.mean, l.p50, l.p99, l.mean, n,
      a.p50, a.p99, a.mean, failures);
  std::ofstream out{json_path};
  out << "{\n  \"masters\": " << n << ",\n  \"tls\": " << (tls_ctx ? "true" : "false") << ",\n  \"mode\": \""
      << (spin ? "spin" : "blocking") << "\",\n  \"late\": \"" << (late_flow ? "flow" : "drain")
      << "\",\n  \"cycles\": " << cycles << ",\n  \"lock_unlock_us\": " << json_stats(c)
      << ",\n  \"lock_us\": " << json_stats(l) << ",\n  \"all_replies_us\": " << json_stats(a)
      << ",\n  \"failures\": " << failures << "\n}\n";
  std::printf("wrote %s\n", json_path.c_str());
  return failures == 0 ? 0 : 1;
}
