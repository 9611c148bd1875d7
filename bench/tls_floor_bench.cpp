// SPDX-License-Identifier: BSL-1.0
// The bare OpenSSL floor of a TLS lock+unlock: what the client side of the records alone costs,
// with no Asio and no redlock code. Five client SSL objects, each paired with a server SSL object
// over memory BIOs (the bytes are moved by hand), exchange per cycle what our client exchanges with
// five masters: a 116-byte lock request and its 38-byte reply, a 194-byte unlock request and its
// 4-byte reply (measured on the wire of tls_bench's plain mode). The client context is set up as
// ours is (TLS 1.2 at least, no renegotiation, the peer verified); both sides keep OpenSSL's
// default cipher suites, as redis-server does, so the negotiated suite is the one our connections
// get (printed).
//
// Usage:
//   tls_floor_bench CYCLES
//       CYCLES cycles after a warm-up, printing "cycles=N allocations=A version=V cipher=C".
//       Allocations are OpenSSL's (CRYPTO_set_mem_functions), counted on the client side only.
//       Run twice under `valgrind --tool=callgrind --toggle-collect='floor_client_*'` with
//       different CYCLES, so that only the client's calls are counted, and divide the difference
//       (bench/report.py tls-cost does).

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <string>

namespace {

unsigned long allocations = 0;
bool counting = false;

void* count_malloc(std::size_t n, const char*, int) {
  if (counting) ++allocations;
  return std::malloc(n);
}
void* count_realloc(void* p, std::size_t n, const char*, int) {
  if (counting) ++allocations;
  return std::realloc(p, n);
}
void count_free(void* p, const char*, int) { std::free(p); }

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "tls_floor_bench: %s\n", what);
  ERR_print_errors_fp(stderr);
  std::exit(1);
}

// A self-signed certificate for 127.0.0.1 (RSA-2048, as tls_bench's); the client trusts it as its CA.
struct identity {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  identity() {
    key = EVP_RSA_gen(2048);
    cert = X509_new();
    if (!key || !cert) fail("key generation");
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert), 2 * 86400);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1,
                               0);
    X509_set_issuer_name(cert, name);
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, "IP:127.0.0.1");
    X509_EXTENSION* ca = X509V3_EXT_conf_nid(nullptr, &v3, NID_basic_constraints, "critical,CA:TRUE");
    if (!ext || !ca || X509_add_ext(cert, ext, -1) != 1 || X509_add_ext(cert, ca, -1) != 1) fail("extensions");
    X509_EXTENSION_free(ext);
    X509_EXTENSION_free(ca);
    if (X509_sign(cert, key, EVP_sha256()) == 0) fail("signing");
  }
  ~identity() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

struct pair {
  SSL* client = nullptr;
  SSL* server = nullptr;
  BIO* client_in = BIO_new(BIO_s_mem());  // what the server sent, for the client to read
  BIO* client_out = BIO_new(BIO_s_mem());
  BIO* server_in = BIO_new(BIO_s_mem());
  BIO* server_out = BIO_new(BIO_s_mem());
};

// Moves what `from` wrote to `to`'s input (the network's part: not counted).
void carry(BIO* from, BIO* to) {
  std::array<char, 16384> buf;
  for (int n; (n = BIO_read(from, buf.data(), static_cast<int>(buf.size()))) > 0;) BIO_write(to, buf.data(), n);
}

// The counted client calls: one SSL_write per request, SSL_read until the reply is whole.
extern "C" __attribute__((noinline)) void floor_client_write(SSL* ssl, const char* data, int n) {
  counting = true;
  if (SSL_write(ssl, data, n) != n) fail("SSL_write");
  counting = false;
}
extern "C" __attribute__((noinline)) void floor_client_read(SSL* ssl, int n) {
  counting = true;
  char buf[4096];
  for (int got = 0; got < n;) {
    const int r = SSL_read(ssl, buf, sizeof buf);
    if (r <= 0) fail("SSL_read");
    got += r;
  }
  counting = false;
}

void server_echo(pair& p, int request, const char* reply, int reply_size) {
  char buf[4096];
  for (int got = 0; got < request;) {
    const int r = SSL_read(p.server, buf, sizeof buf);
    if (r <= 0) fail("server SSL_read");
    got += r;
  }
  if (SSL_write(p.server, reply, reply_size) != reply_size) fail("server SSL_write");
}

}  // namespace

int main(int argc, char** argv) {
  CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free);
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 1000;
  identity id;
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX* sctx = SSL_CTX_new(TLS_server_method());
  if (!cctx || !sctx) fail("contexts");
  SSL_CTX_set_min_proto_version(cctx, TLS1_2_VERSION);
  SSL_CTX_set_options(cctx, SSL_OP_ALL | SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, nullptr);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(cctx), id.cert);
  if (SSL_CTX_use_certificate(sctx, id.cert) != 1 || SSL_CTX_use_PrivateKey(sctx, id.key) != 1) fail("server key");

  constexpr int masters = 5;
  std::array<pair, masters> pairs;
  for (auto& p : pairs) {
    p.client = SSL_new(cctx);
    p.server = SSL_new(sctx);
    SSL_set_bio(p.client, p.client_in, p.client_out);
    SSL_set_bio(p.server, p.server_in, p.server_out);
    BIO_up_ref(p.client_in);
    BIO_up_ref(p.client_out);
    BIO_up_ref(p.server_in);
    BIO_up_ref(p.server_out);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(p.client), "127.0.0.1");
    SSL_set_connect_state(p.client);
    SSL_set_accept_state(p.server);
    for (int i = 0; i < 20 && !(SSL_is_init_finished(p.client) && SSL_is_init_finished(p.server)); ++i) {
      SSL_do_handshake(p.client);
      carry(p.client_out, p.server_in);
      SSL_do_handshake(p.server);
      carry(p.server_out, p.client_in);
    }
    if (!SSL_is_init_finished(p.client) || SSL_get_verify_result(p.client) != X509_V_OK) fail("handshake");
  }

  const std::string lock(116, 'l'), unlock(194, 'u'), lock_reply(38, 'r'), unlock_reply(4, 'r');
  auto cycle = [&] {
    for (const auto& [request, reply] : {std::pair{&lock, &lock_reply}, std::pair{&unlock, &unlock_reply}}) {
      for (auto& p : pairs) floor_client_write(p.client, request->data(), static_cast<int>(request->size()));
      for (auto& p : pairs) {
        carry(p.client_out, p.server_in);
        server_echo(p, static_cast<int>(request->size()), reply->data(), static_cast<int>(reply->size()));
        carry(p.server_out, p.client_in);
      }
      for (auto& p : pairs) floor_client_read(p.client, static_cast<int>(reply->size()));
    }
  };
  // The warm-up also reads TLS 1.3's session tickets, which arrive after the handshake.
  for (int i = 0; i < 50; ++i) cycle();
  allocations = 0;
  for (int i = 0; i < cycles; ++i) cycle();
  std::printf("cycles=%d allocations=%lu version=%s cipher=%s\n", cycles, allocations, SSL_get_version(pairs[0].client),
              SSL_get_cipher_name(pairs[0].client));
  for (auto& p : pairs) {
    SSL_free(p.client);
    SSL_free(p.server);
    BIO_free(p.client_in);
    BIO_free(p.client_out);
    BIO_free(p.server_in);
    BIO_free(p.server_out);
  }
  SSL_CTX_free(cctx);
  SSL_CTX_free(sctx);
  return 0;
}
