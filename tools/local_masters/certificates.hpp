// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file
/// A private certificate authority for local TLS masters: a CA certificate and, signed by it, a
/// server certificate for 127.0.0.1 and localhost and a client certificate (for servers that
/// require one). Made with the OpenSSL library, so no `openssl` tool is needed. For trying
/// things out and for tests, never for production: the keys are written unencrypted.

#include <chrono>
#include <filesystem>
#include <string>

namespace redlock::local {

/// The files `make_certificates` writes.
struct certificate_files {
  std::filesystem::path ca_file;           ///< the CA certificate (PEM): what clients trust
  std::filesystem::path server_cert_file;  ///< the servers' certificate (IP:127.0.0.1, DNS:localhost)
  std::filesystem::path server_key_file;   ///< its private key (PEM, mode 0600)
  std::filesystem::path client_cert_file;  ///< a client certificate for mutual TLS
  std::filesystem::path client_key_file;   ///< its private key (PEM, mode 0600)
};

/// The file names `make_certificates` uses in `dir` (nothing is read or written).
certificate_files certificate_paths(const std::filesystem::path& dir);

/// Makes a new CA named `ca_name` (its key is kept in memory only, so nothing more can be signed
/// with it later) and the server and client certificates it signs, valid for `validity` from an
/// hour ago, and writes them to `dir` (created if missing; existing files are replaced). Keys are
/// ECDSA P-256. Throws `std::runtime_error` with OpenSSL's reason when a step fails.
certificate_files make_certificates(const std::filesystem::path& dir, const std::string& ca_name = "redlock local CA",
                                    std::chrono::hours validity = std::chrono::hours{24 * 365});

}  // namespace redlock::local
