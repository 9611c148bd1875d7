// TEMPORARY bridge: master_link over the public connection, until the connection's internal path lands.
#include <boost/asio/bind_executor.hpp>

#include "detail/master_link.hpp"

namespace redlock::detail {

namespace {
struct shim_state {
  std::unique_ptr<connection> conn;
  master_link::strand_type strand;
};
}  // namespace

master_link::master_link(strand_type strand, connection_config cfg) {
  auto c = std::make_unique<connection>(strand, std::move(cfg));
  impl_ = std::shared_ptr<connection::impl>(
      reinterpret_cast<connection::impl*>(new shim_state{std::move(c), std::move(strand)}),
      [](connection::impl* p) { delete reinterpret_cast<shim_state*>(p); });
}
master_link::~master_link() { close(); }
static shim_state& S(const std::shared_ptr<connection::impl>& p) { return *reinterpret_cast<shim_state*>(p.get()); }
void master_link::run() {
  S(impl_).conn->async_run([](boost::system::error_code) {});
}
void master_link::close() { S(impl_).conn->close(); }
boost::system::error_code master_link::submit(std::string_view payload, std::size_t replies, clock::time_point deadline,
                                              std::shared_ptr<reply_sink> sink, std::uint64_t tag) {
  auto st = S(impl_).conn->status().state;
  if (st == connection_state::down || st == connection_state::closed) return error::not_connected;
  resp::request req;
  (void)replies;
  req.push_range("X", std::vector<std::string_view>{});
  req.clear();
  // raw payload: rebuild through a request is not possible; use a hack
  struct raw_request : resp::request {};
  resp::request r2;
  *reinterpret_cast<std::string*>(&r2) = std::string(payload);
  reinterpret_cast<std::size_t*>(reinterpret_cast<char*>(&r2) + sizeof(std::string))[0] = replies;
  S(impl_).conn->async_exec(std::move(r2), deadline - clock::now(),
                            boost::asio::bind_executor(S(impl_).strand, [sink, tag](boost::system::error_code ec,
                                                                                    resp::response r) {
                              sink->on_reply(tag, ec, r);
                            }));
  return {};
}
connection_status master_link::status() const { return S(impl_).conn->status(); }
connection_stats master_link::stats() const { return S(impl_).conn->stats(); }
const connection_config& master_link::config() const noexcept { return S(impl_).conn->config(); }

}  // namespace redlock::detail
