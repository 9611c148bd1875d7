// SPDX-License-Identifier: BSL-1.0
#include "certificates.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace redlock::local {
namespace {

namespace fs = std::filesystem;

template <class T, void (*Free)(T*)>
struct freer {
  void operator()(T* p) const noexcept { Free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, freer<EVP_PKEY, EVP_PKEY_free>>;
using pkey_ctx_ptr = std::unique_ptr<EVP_PKEY_CTX, freer<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using x509_ptr = std::unique_ptr<X509, freer<X509, X509_free>>;
using extension_ptr = std::unique_ptr<X509_EXTENSION, freer<X509_EXTENSION, X509_EXTENSION_free>>;
using bio_ptr = std::unique_ptr<BIO, freer<BIO, BIO_free_all>>;

/// Throws with OpenSSL's first queued reason (and clears the queue).
[[noreturn]] void fail(std::string_view step) {
  const unsigned long code = ERR_get_error();
  char reason[256] = "no reason given";
  if (code != 0) ERR_error_string_n(code, reason, sizeof reason);
  ERR_clear_error();
  throw std::runtime_error(fmt::format("cannot make the TLS certificates: {}: {}", step, reason));
}

void check(int ok, std::string_view step) {
  if (ok <= 0) fail(step);
}

pkey_ptr new_key() {
  // P-256: generated in a millisecond (RSA-2048 takes far longer), and every Redis TLS build takes it.
  pkey_ctx_ptr ctx{EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr)};
  if (!ctx) fail("EVP_PKEY_CTX_new_id");
  check(EVP_PKEY_keygen_init(ctx.get()), "EVP_PKEY_keygen_init");
  check(EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1), "choosing the P-256 curve");
  EVP_PKEY* key = nullptr;
  check(EVP_PKEY_keygen(ctx.get(), &key), "generating a key");
  return pkey_ptr{key};
}

enum class role { ca, server, client };

/// A certificate for `key` named `common_name`, signed by `issuer_key` (self-signed when `issuer`
/// is null).
x509_ptr new_certificate(role r, EVP_PKEY* key, const std::string& common_name, X509* issuer, EVP_PKEY* issuer_key,
                         std::chrono::hours validity) {
  x509_ptr cert{X509_new()};
  if (!cert) fail("X509_new");
  X509* x = cert.get();
  check(X509_set_version(x, 2), "X509_set_version");  // v3, for the extensions
  // A random serial: certificates of two CAs of the same name never share one.
  std::uint64_t serial = 0;
  check(RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof serial), "RAND_bytes");
  serial = (serial >> 1) | 1;  // positive and non-zero
  check(ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), serial), "setting the serial number");
  if (!X509_gmtime_adj(X509_getm_notBefore(x), -3600)) fail("setting notBefore");
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(validity).count();
  if (!X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(seconds))) fail("setting notAfter");
  check(X509_set_pubkey(x, key), "X509_set_pubkey");
  X509_NAME* name = X509_get_subject_name(x);
  check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0),
        "setting the subject");
  check(X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name), "setting the issuer");

  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer : x, x, nullptr, nullptr, 0);
  const auto add = [&](int nid, const char* value) {
    extension_ptr ext{X509V3_EXT_conf_nid(nullptr, &ctx, nid, value)};
    if (!ext) fail(fmt::format("making the extension {}", value));
    check(X509_add_ext(x, ext.get(), -1), "X509_add_ext");
  };
  add(NID_subject_key_identifier, "hash");  // before the authority key id, which a CA takes from it
  add(NID_authority_key_identifier, "keyid:always");
  switch (r) {
    case role::ca:
      add(NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
      add(NID_key_usage, "critical,keyCertSign,cRLSign");
      break;
    case role::server:
      add(NID_basic_constraints, "critical,CA:FALSE");
      add(NID_key_usage, "critical,digitalSignature");
      add(NID_ext_key_usage, "serverAuth");
      // Both the address the masters are listed with and the name, for --tls-server-name localhost.
      add(NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
      break;
    case role::client:
      add(NID_basic_constraints, "critical,CA:FALSE");
      add(NID_key_usage, "critical,digitalSignature");
      add(NID_ext_key_usage, "clientAuth");
      break;
  }
  check(X509_sign(x, issuer_key, EVP_sha256()), "signing the certificate");
  return cert;
}

/// Writes `text` to `path` with exactly `mode` (also when the file already exists).
void write_file(const fs::path& path, std::string_view text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot write " + path.string());
  bool ok = ::fchmod(fd, mode) == 0;
  while (ok && !text.empty()) {
    const auto n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) text.remove_prefix(static_cast<std::size_t>(n));
  }
  const int err = errno;
  if (::close(fd) != 0 && ok) ok = false;
  if (!ok) throw std::system_error(err, std::generic_category(), "cannot write " + path.string());
}

std::string pem_of(X509* cert) {
  bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio) fail("BIO_new");
  check(PEM_write_bio_X509(bio.get(), cert), "PEM_write_bio_X509");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return {data, static_cast<std::size_t>(n)};
}

std::string pem_of(EVP_PKEY* key) {
  bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio) fail("BIO_new");
  check(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr), "PEM_write_bio_PrivateKey");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return {data, static_cast<std::size_t>(n)};
}

}  // namespace

certificate_files certificate_paths(const fs::path& dir) {
  return {dir / "ca.crt", dir / "server.crt", dir / "server.key", dir / "client.crt", dir / "client.key"};
}

certificate_files make_certificates(const fs::path& dir, const std::string& ca_name, std::chrono::hours validity) {
  ERR_clear_error();
  fs::create_directories(dir);
  const auto files = certificate_paths(dir);
  const auto ca_key = new_key();
  const auto ca = new_certificate(role::ca, ca_key.get(), ca_name, nullptr, ca_key.get(), validity);
  const auto server_key = new_key();
  const auto server = new_certificate(role::server, server_key.get(), "localhost", ca.get(), ca_key.get(), validity);
  const auto client_key = new_key();
  const auto client =
      new_certificate(role::client, client_key.get(), "redlock client", ca.get(), ca_key.get(), validity);
  write_file(files.ca_file, pem_of(ca.get()), 0644);
  write_file(files.server_cert_file, pem_of(server.get()), 0644);
  write_file(files.server_key_file, pem_of(server_key.get()), 0600);
  write_file(files.client_cert_file, pem_of(client.get()), 0644);
  write_file(files.client_key_file, pem_of(client_key.get()), 0600);
  return files;
}

}  // namespace redlock::local
