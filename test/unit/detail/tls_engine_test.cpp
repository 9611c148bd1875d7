// SPDX-License-Identifier: BSL-1.0
// detail::tls_engine against an OpenSSL server session over memory BIOs: the bytes between them
// are moved by hand, split as a socket may split them, so each test is a transcript.
#include "detail/tls_engine.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <string>
#include <string_view>

namespace {

namespace asio = boost::asio;
using redlock::detail::tls_engine;

// A server context with a fresh P-256 key and a self-signed certificate (the client trusts
// nobody: it verifies nothing here, as with `insecure_skip_verify`).
struct server_context {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  server_context() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("test"), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(cert));
    X509_sign(cert, key, EVP_sha256());
    SSL_CTX_use_certificate(ctx, cert);
    SSL_CTX_use_PrivateKey(ctx, key);
    X509_free(cert);
    EVP_PKEY_free(key);
  }
  ~server_context() { SSL_CTX_free(ctx); }
};

struct session_pair : ::testing::Test {
  static inline server_context* server_ctx = nullptr;
  static void SetUpTestSuite() { server_ctx = new server_context; }
  static void TearDownTestSuite() { delete std::exchange(server_ctx, nullptr); }

  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  std::unique_ptr<tls_engine> client;
  SSL* server = SSL_new(server_ctx->ctx);
  BIO* server_in = BIO_new(BIO_s_mem());
  BIO* server_out = BIO_new(BIO_s_mem());

  session_pair() {
    SSL_CTX_set_verify(client_ctx, SSL_VERIFY_NONE, nullptr);
    client = std::make_unique<tls_engine>(client_ctx);
    SSL_set_bio(server, server_in, server_out);
    SSL_set_accept_state(server);
  }
  ~session_pair() override {
    client.reset();
    SSL_free(server);
    SSL_CTX_free(client_ctx);
  }

  // The client's records to the server, all of them.
  void to_server() {
    const auto out = client->output();
    BIO_write(server_in, out.data(), static_cast<int>(out.size()));
    client->consume_output(out.size());
  }
  // What the server sent, taken off its BIO.
  std::string from_server() {
    std::string bytes(static_cast<std::size_t>(BIO_pending(server_out)), '\0');
    BIO_read(server_out, bytes.data(), static_cast<int>(bytes.size()));
    return bytes;
  }
  // Gives the client `bytes` as a socket read would put them in its input.
  void deliver(std::string_view bytes) {
    while (!bytes.empty()) {
      const auto space = client->input_space();
      const std::size_t n = std::min(space.size(), bytes.size());
      std::memcpy(space.data(), bytes.data(), n);
      client->commit_input(n);
      bytes.remove_prefix(n);
    }
  }
  void server_write(std::string_view plain) {
    ASSERT_EQ(SSL_write(server, plain.data(), static_cast<int>(plain.size())), static_cast<int>(plain.size()));
  }
  std::string server_read() {
    std::string got(4096, '\0');
    const int n = SSL_read(server, got.data(), static_cast<int>(got.size()));
    got.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return got;
  }
  // The handshake, each server flight given `step` bytes at a time.
  void handshake(std::size_t step = 1 << 20) {
    bool done = false;
    for (int rounds = 0; rounds < 10; ++rounds) {
      ASSERT_FALSE(client->handshake(done));
      to_server();
      if (done) break;
      ASSERT_FALSE(client->may_read());
      (void)SSL_do_handshake(server);
      const std::string flight = from_server();
      for (std::size_t i = 0; i + step < flight.size(); i += step) {
        deliver(std::string_view{flight}.substr(i, step));
        ASSERT_FALSE(client->handshake(done));
        ASSERT_FALSE(done);
        ASSERT_FALSE(client->may_read());  // it asked for more
      }
      deliver(std::string_view{flight}.substr((flight.size() - 1) / step * step));
    }
    ASSERT_TRUE(done);
    ASSERT_EQ(SSL_do_handshake(server), 1);
    deliver(from_server());  // the server's session tickets
  }
  std::size_t read(std::string& into, std::size_t room, boost::system::error_code& ec) {
    std::string buf(room, '\0');
    const std::size_t n = client->read(asio::buffer(buf), ec);
    into.append(buf, 0, n);
    return n;
  }
};

TEST_F(session_pair, a_handshake_fed_a_byte_at_a_time_completes_and_then_carries_data_both_ways) {
  handshake(1);
  ASSERT_FALSE(client->write("*1\r\n$4\r\nPING\r\n"));
  to_server();
  EXPECT_EQ(server_read(), "*1\r\n$4\r\nPING\r\n");
  server_write("+PONG\r\n");
  deliver(from_server());
  std::string got;
  boost::system::error_code ec;
  EXPECT_EQ(read(got, 64, ec), 7u);
  EXPECT_FALSE(ec);
  EXPECT_EQ(got, "+PONG\r\n");
  // Nothing more: it asks for input, and says so until input comes.
  EXPECT_EQ(read(got, 64, ec), 0u);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(client->may_read());
}

TEST_F(session_pair, records_split_anywhere_and_records_that_come_together_give_every_byte_once) {
  handshake();
  server_write("first reply\r\n");
  server_write("second reply\r\n");
  server_write("third\r\n");
  const std::string wire = from_server();
  std::string got;
  boost::system::error_code ec;
  // Half of the first record: no bytes, no error, and no read until more comes.
  deliver(std::string_view{wire}.substr(0, 10));
  EXPECT_TRUE(client->may_read());
  EXPECT_EQ(read(got, 256, ec), 0u);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(client->may_read());
  // The rest at once: all three records, in one read.
  deliver(std::string_view{wire}.substr(10));
  EXPECT_EQ(read(got, 256, ec), 34u);
  EXPECT_EQ(got, "first reply\r\nsecond reply\r\nthird\r\n");
}

TEST_F(session_pair, a_small_buffer_takes_the_plaintext_in_pieces_and_the_engine_says_more_is_there) {
  handshake();
  server_write(std::string(100, 'x') + "END");
  deliver(from_server());
  std::string got;
  boost::system::error_code ec;
  int reads = 0;
  while (client->may_read() && reads < 100) {
    read(got, 16, ec);
    ASSERT_FALSE(ec);
    ++reads;
  }
  EXPECT_EQ(got, std::string(100, 'x') + "END");
  EXPECT_EQ(reads, 7);  // six full pieces of 16, then the last 7 bytes, when it found it needs input
}

TEST_F(session_pair, taken_output_stays_put_while_later_records_are_made) {
  handshake();
  ASSERT_FALSE(client->write("one"));
  const std::string_view wire = client->take_output();
  const std::string copy{wire};
  EXPECT_TRUE(client->output().empty());
  for (int i = 0; i < 50; ++i) ASSERT_FALSE(client->write(std::string(1000, 'y')));  // reallocates the output
  EXPECT_EQ(wire, copy);
  BIO_write(server_in, wire.data(), static_cast<int>(wire.size()));
  client->release_wire();
  EXPECT_EQ(server_read(), "one");
  // Partly sent output: the rest, in order.
  to_server();
  std::string all;
  for (std::string s; !(s = server_read()).empty();) all += s;
  EXPECT_EQ(all, std::string(50000, 'y'));
}

TEST_F(session_pair, the_end_of_input_without_close_notify_is_stream_truncated_after_the_bytes_before_it) {
  handshake();
  server_write("last words");
  deliver(from_server());
  client->input_ended();
  std::string got;
  boost::system::error_code ec;
  EXPECT_EQ(read(got, 64, ec), 10u);
  EXPECT_FALSE(ec);  // kept for the next read
  EXPECT_EQ(read(got, 64, ec), 0u);
  EXPECT_EQ(ec, asio::ssl::error::stream_truncated);
}

TEST_F(session_pair, close_notify_is_eof) {
  handshake();
  (void)SSL_shutdown(server);
  deliver(from_server());
  std::string got;
  boost::system::error_code ec;
  EXPECT_EQ(read(got, 64, ec), 0u);
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_F(session_pair, bytes_that_are_no_record_fail_in_the_ssl_category_with_an_alert_to_send) {
  handshake();
  deliver("+OK\r\n+OK\r\n+OK\r\n");
  std::string got;
  boost::system::error_code ec;
  EXPECT_EQ(read(got, 64, ec), 0u);
  EXPECT_EQ(ec.category(), asio::error::get_ssl_category());
  EXPECT_FALSE(client->output().empty());  // the alert
}

TEST_F(session_pair, a_plain_resp_answer_to_the_client_hello_is_a_wrong_version_number) {
  bool done = false;
  ASSERT_FALSE(client->handshake(done));
  EXPECT_FALSE(client->output().empty());
  client->consume_output(client->output().size());
  deliver("-ERR unknown command\r\n");
  const auto ec = client->handshake(done);
  EXPECT_FALSE(done);
  ASSERT_EQ(ec.category(), asio::error::get_ssl_category());
  EXPECT_EQ(ERR_GET_REASON(static_cast<unsigned long>(ec.value())), SSL_R_WRONG_VERSION_NUMBER);
}

TEST_F(session_pair, an_error_another_library_left_on_the_thread_does_not_fail_a_step) {
  handshake();
  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);  // stale: not this session's
  std::string got;
  boost::system::error_code ec;
  EXPECT_EQ(read(got, 64, ec), 0u);
  EXPECT_FALSE(ec);  // it only needs input
  server_write("ok");
  deliver(from_server());
  EXPECT_EQ(read(got, 64, ec), 2u);
  EXPECT_FALSE(ec);
}

}  // namespace
