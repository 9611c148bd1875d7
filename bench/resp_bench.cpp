// SPDX-License-Identifier: BSL-1.0
// Micro-benchmarks of the sans-I/O codec on the lock path: encoding SET NX PX and the release
// script call, and parsing their replies (Google Benchmark; noise-prone, compare within one run).

#include <redlock/resp/parser.hpp>
#include <redlock/resp/request.hpp>

#include <benchmark/benchmark.h>

#include <string>

namespace {

void encode_set_nx_px(benchmark::State& state) {
  redlock::resp::request req;
  const std::string key = "orders:42";
  const std::string token(40, 'a');
  for (auto _ : state) {
    req.clear();
    req.push("SET", key, token, "NX", "PX", 10000);
    benchmark::DoNotOptimize(req.payload().data());
  }
}
BENCHMARK(encode_set_nx_px);

void encode_evalsha(benchmark::State& state) {
  redlock::resp::request req;
  const std::string sha(40, 'f');
  for (auto _ : state) {
    req.clear();
    req.push("EVALSHA", sha, 1, "orders:42", "0123456789abcdef0123456789abcdef01234567");
    benchmark::DoNotOptimize(req.payload().data());
  }
}
BENCHMARK(encode_evalsha);

void parse_reply(benchmark::State& state, std::string wire) {
  redlock::resp::parser p;
  redlock::resp::response out;
  boost::system::error_code ec;
  for (auto _ : state) {
    out.clear();
    p.reset();
    benchmark::DoNotOptimize(p.consume(wire, out, ec));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * wire.size()));
}
BENCHMARK_CAPTURE(parse_reply, ok, std::string("+OK\r\n"));
BENCHMARK_CAPTURE(parse_reply, integer, std::string(":1\r\n"));
BENCHMARK_CAPTURE(parse_reply, null, std::string("_\r\n"));
BENCHMARK_CAPTURE(parse_reply, array_of_100_bulks, [] {
  std::string s = "*100\r\n";
  for (int i = 0; i < 100; ++i) s += "$10\r\n0123456789\r\n";
  return s;
}());

}  // namespace
