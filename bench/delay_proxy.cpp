// SPDX-License-Identifier: BSL-1.0
// A delaying TCP proxy in a process of its own, for redlock_bench's scenario (d) (2 of 5 masters
// slow): the delaying then happens outside the benchmark's process, whose CPU time and event loop
// are the client's alone (the proxy still shares the machine's cores, as the masters do).
//
// Usage: delay_proxy --upstream HOST:PORT --delay-ms MS
// Listens on a free loopback port and forwards each accepted connection to its own connection to
// HOST:PORT, holding every chunk read, in either direction, MS milliseconds before forwarding it
// (order kept, throughput not limited: redlock_test::fault_proxy's latency mode), so a round trip
// through it gains 2 x MS. Prints that port and a newline on stdout once it listens, then runs
// until its stdin reaches end of file (its parent closed the pipe, or died) or it receives
// SIGTERM, SIGINT or SIGHUP. Run by hand from a terminal: Ctrl-D or Ctrl-C stops it; with stdin
// from /dev/null it exits at once. Exit status: 0 after a stop, 1 if it could not start, 2 on a
// usage error.

#include <redlock_test/fault_proxy.hpp>

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <poll.h>
#include <signal.h>
#include <string>

namespace {

int usage() {
  std::fprintf(stderr, "usage: delay_proxy --upstream HOST:PORT --delay-ms MS\n");
  return 2;
}

// Until stdin reaches end of file (or fails) or a stop signal arrives on the signalfd `signals`.
void wait_for_stop(int signals) {
  pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {signals, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0) {
      char buffer[256];
      const ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string host;
  long port = 0, delay_ms = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--upstream") {
      const auto colon = v.rfind(':');
      if (colon == std::string::npos || colon == 0) return usage();
      host = v.substr(0, colon);
      char* end = nullptr;
      port = std::strtol(v.c_str() + colon + 1, &end, 10);
      if (*end != '\0') return usage();
    } else if (a == "--delay-ms") {
      char* end = nullptr;
      delay_ms = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') return usage();
    } else {
      return usage();
    }
  }
  if (argc % 2 == 0 || host.empty() || port <= 0 || port > 65535 || delay_ms < 0) return usage();

  // Blocked before the proxy starts its thread, which inherits the mask: the stop signals then
  // wait in the signalfd for this thread. A client that hangs up must not kill the proxy.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const int signals = signalfd(-1, &stop, SFD_CLOEXEC);
  if (signals < 0) {
    std::perror("delay_proxy: signalfd");
    return 1;
  }
  try {
    redlock::test::fault_proxy proxy{host, static_cast<std::uint16_t>(port)};
    proxy.set_latency(std::chrono::milliseconds{delay_ms});
    std::printf("%u\n", static_cast<unsigned>(proxy.port()));
    std::fflush(stdout);
    wait_for_stop(signals);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delay_proxy: %s\n", e.what());
    return 1;
  }
  return 0;
}
