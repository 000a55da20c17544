// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// TLS on a tcp or wan connection, with Asio's SSL support over OpenSSL.
///
/// When: COMMX_TLS is `off` (the default), `sites` (connections between ranks at different
/// sites) or `on` (every connection). The connecting side asks for it in its hello, under the
/// token's proofs (handshake.hpp), and the TLS handshake follows the verdict, end to end: a
/// commx-relay on the way carries the records and never holds a key.
///
/// Credentials, checked both ways: a job certificate (COMMX_TLS_CERT and COMMX_TLS_KEY, PEM,
/// the peer's certificate checked against COMMX_TLS_CA) or, by default, a pre-shared key
/// derived from the job token and both sides' handshake nonces (TLS 1.3 PSK). The key is new
/// for every connection, so a recorded one opens no other.
///
/// How it moves bytes: `tls_channel` is an `asio::ssl::stream` whose next layer is the
/// connection's non-blocking socket, seen through `tls_layer`. A read that finds the socket
/// empty fails with would_block, OpenSSL's state intact, as with a plain socket; a write is
/// always taken whole: its ciphertext waits in the layer until the socket takes it
/// (`flush_ciphertext`), and the writer stops offering plaintext once `ciphertext_waiting()`
/// passes `backlog_limit`. So the engine's one-read-until-would_block discipline and its write
/// waits work unchanged; only a short read no longer means the socket is empty (a record holds
/// at most 16 KiB).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "commx/error.hpp"

namespace commx::detail::tcp {

/// Which connections are encrypted (COMMX_TLS).
enum class tls_mode : std::uint8_t {
  off,    ///< none
  sites,  ///< those between ranks at different sites
  on,     ///< every one
};

/// COMMX_TLS's value, or nullopt when it is none of off/sites/on.
inline std::optional<tls_mode> tls_mode_from(std::string_view text) {
  if (text == "off" || text.empty()) return tls_mode::off;
  if (text == "sites") return tls_mode::sites;
  if (text == "on") return tls_mode::on;
  return std::nullopt;
}

/// What COMMX_TLS* say.
struct tls_settings {
  tls_mode mode = tls_mode::off;
  std::string certificate;  ///< PEM chain; empty: a key from the job token
  std::string private_key;
  std::string authority;  ///< the PEM certificate(s) a peer's must be signed by

  /// Whether a connection between sites `mine` and `theirs` is encrypted.
  [[nodiscard]] bool wanted(std::string_view mine, std::string_view theirs) const {
    return mode == tls_mode::on || (mode == tls_mode::sites && mine != theirs);
  }
};

/// The pre-shared key of one connection (derived in handshake.hpp).
using tls_key = std::array<std::byte, 32>;

/// OpenSSL's last error, as text.
inline std::string openssl_reason() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no reason given";
  std::array<char, 256> text{};
  ERR_error_string_n(code, text.data(), text.size());
  return text.data();
}

/// One context for every TLS connection of an endpoint, both roles.
class tls_context {
 public:
  /// @throws commx::error errc::bootstrap_failed when a certificate, key or authority cannot
  /// be loaded (naming the file and OpenSSL's reason).
  explicit tls_context(const tls_settings& s) : context_(asio::ssl::context::tls) {
    SSL_CTX* ctx = context_.native_handle();
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    // SHA-256 suites: a TLS 1.2-style PSK callback serves TLS 1.3 only with those.
    SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256");
    SSL_CTX_set_num_tickets(ctx, 0);  // nothing resumes: every connection has its own key
    // Asio sets RELEASE_BUFFERS, which frees a connection's record buffers whenever it is
    // idle; a job's connections are seldom idle for long, so the buffers stay.
    SSL_CTX_clear_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (s.certificate.empty()) return;
    certificates_ = true;
    std::error_code ec;
    const auto load = [&](const std::string& file, const char* what, auto&& call) {
      call(file, ec);
      if (ec) {
        throw error(errc::bootstrap_failed,
                    fmt::format("tls: cannot load the {} '{}': {}", what, file, ec.message()));
      }
    };
    load(s.certificate, "certificate (COMMX_TLS_CERT)",
         [&](const std::string& f, std::error_code& e) {
           context_.use_certificate_chain_file(f, e);
         });
    load(s.private_key, "private key (COMMX_TLS_KEY)",
         [&](const std::string& f, std::error_code& e) {
           context_.use_private_key_file(f, asio::ssl::context::pem, e);
         });
    load(s.authority, "certificate authority (COMMX_TLS_CA)",
         [&](const std::string& f, std::error_code& e) { context_.load_verify_file(f, e); });
    context_.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }

  asio::ssl::context& native() { return context_; }
  /// Peers prove themselves with certificates (else with the connection's key).
  [[nodiscard]] bool certificates() const { return certificates_; }

 private:
  asio::ssl::context context_;
  bool certificates_ = false;
};

/// An `asio::ssl::stream`'s next layer: a connection's socket, whose writes are all taken.
class tls_layer {
 public:
  using lowest_layer_type = asio::ip::tcp::socket;
  using executor_type = lowest_layer_type::executor_type;

  explicit tls_layer(asio::ip::tcp::socket& s) : socket_(&s) {}

  lowest_layer_type& lowest_layer() { return *socket_; }
  [[nodiscard]] const lowest_layer_type& lowest_layer() const { return *socket_; }
  executor_type get_executor() { return socket_->get_executor(); }
  /// The socket moved (from the handshake's session into the connection).
  void rebind(asio::ip::tcp::socket& s) { socket_ = &s; }

  template <class MutableBuffers>
  std::size_t read_some(const MutableBuffers& buffers, std::error_code& ec) {
    return socket_->read_some(buffers, ec);
  }
  /// Takes every byte: into the backlog, written to the socket by flush().
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers& buffers, std::error_code& ec) {
    ec = {};
    std::size_t n = 0;
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      const asio::const_buffer b(*it);
      const auto* bytes = static_cast<const std::byte*>(b.data());
      backlog_.insert(backlog_.end(), bytes, bytes + b.size());
      n += b.size();
    }
    return n;
  }
  // The handshake runs asynchronously (server_session, client_session), with no backlog.
  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    socket_->async_read_some(buffers, std::forward<Handler>(handler));
  }
  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    socket_->async_write_some(buffers, std::forward<Handler>(handler));
  }

  /// Writes what the socket takes of the backlog now; returns the bytes written, or sets `ec`
  /// when the connection broke.
  std::size_t flush(std::error_code& ec) {
    ec = {};
    std::size_t total = 0;
    while (sent_ < backlog_.size()) {
      const std::size_t n =
          socket_->write_some(asio::buffer(backlog_.data() + sent_, backlog_.size() - sent_), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        ec = {};
        break;
      }
      if (ec) return total;
      sent_ += n;
      total += n;
    }
    if (sent_ == backlog_.size()) {
      backlog_.clear();
      sent_ = 0;
    }
    return total;
  }
  [[nodiscard]] std::size_t waiting() const { return backlog_.size() - sent_; }

 private:
  asio::ip::tcp::socket* socket_;
  std::vector<std::byte> backlog_;
  std::size_t sent_ = 0;
};

/// One connection's TLS session.
class tls_channel {
 public:
  /// Plaintext is not offered while more ciphertext than this waits for the socket.
  static constexpr std::size_t backlog_limit = std::size_t{256} << 10;

  /// `key` serves when the context has no certificates.
  tls_channel(tls_context& context, asio::ip::tcp::socket& socket, const tls_key& key)
      : stream_(socket, context.native()), key_(key) {
    SSL* ssl = stream_.native_handle();
    SSL_set_ex_data(ssl, key_slot(), this);
    if (!context.certificates()) {
      SSL_set_psk_client_callback(ssl, &tls_channel::client_key);
      SSL_set_psk_server_callback(ssl, &tls_channel::server_key);
    }
  }
  tls_channel(const tls_channel&) = delete;
  tls_channel& operator=(const tls_channel&) = delete;
  ~tls_channel() = default;

  /// The TLS handshake, asynchronously, then the accepting side's word that it accepts the
  /// connecting side's credentials (in TLS 1.3 the connecting side is done before the other
  /// has checked its certificate, and would learn of a refusal only at its first read):
  /// `done(error_code)`; the text of a failure is `failure_text(ec)`.
  template <class Done>
  void async_handshake(bool client, Done&& done) {
    stream_.async_handshake(
        client ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
        [this, client, done = std::forward<Done>(done)](std::error_code ec) mutable {
          if (ec) return done(ec);
          if (!client) {
            confirmation_ = confirmed;
            return asio::async_write(
                stream_, asio::buffer(confirmation_),
                [done = std::move(done)](std::error_code wec, std::size_t) mutable { done(wec); });
          }
          asio::async_read(
              stream_, asio::buffer(confirmation_),
              [this, done = std::move(done)](std::error_code rec, std::size_t) mutable {
                if (!rec && confirmation_ != confirmed) {
                  rec = std::make_error_code(std::errc::protocol_error);
                }
                done(rec);
              });
        });
  }
  static std::string failure_text(const std::error_code& ec) {
    if (ec.category() == asio::error::get_ssl_category()) {
      std::array<char, 256> text{};
      ERR_error_string_n(static_cast<unsigned long>(ec.value()), text.data(), text.size());
      return fmt::format("TLS handshake failed: {} (different credentials?)", text.data());
    }
    return fmt::format("TLS handshake failed: {}", ec.message());
  }

  void rebind(asio::ip::tcp::socket& s) { stream_.next_layer().rebind(s); }

  /// Plaintext read, would_block when the socket has nothing (then nothing is left in
  /// OpenSSL's or Asio's buffers either). A peer that closes without TLS's close_notify reads
  /// as the end of the stream: commx's own frames say whether that was in order.
  std::size_t read_some(asio::mutable_buffer into, std::error_code& ec) {
    const std::size_t n = stream_.read_some(into, ec);
    if (ec == asio::ssl::error::stream_truncated) ec = asio::error::eof;
    return n;
  }
  /// Encrypts as much of `buffers` as fits under the backlog limit (Asio gathers small
  /// buffers into one record); returns the plaintext bytes taken.
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers& buffers, std::error_code& ec) {
    ec = {};
    std::size_t taken = 0;
    while (ciphertext_waiting() < backlog_limit) {
      std::array<asio::const_buffer, 64> rest;
      std::size_t count = 0;
      std::size_t offset = taken;
      for (auto it = asio::buffer_sequence_begin(buffers);
           it != asio::buffer_sequence_end(buffers) && count < rest.size(); ++it) {
        asio::const_buffer b(*it);
        if (offset >= b.size()) {
          offset -= b.size();
          continue;
        }
        b += offset;
        offset = 0;
        rest[count++] = b;
      }
      if (count == 0) break;
      const std::size_t n = stream_.write_some(std::span(rest.data(), count), ec);
      if (ec) return taken;
      taken += n;
      if (n == 0) break;
    }
    return taken;
  }
  /// Writes waiting ciphertext to the socket: the bytes written (ec: the connection broke).
  std::size_t flush_ciphertext(std::error_code& ec) { return stream_.next_layer().flush(ec); }
  [[nodiscard]] std::size_t ciphertext_waiting() const { return stream_.next_layer().waiting(); }

 private:
  static int key_slot() {
    static const int slot = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return slot;
  }
  static tls_channel* of(SSL* ssl) {
    return static_cast<tls_channel*>(SSL_get_ex_data(ssl, key_slot()));
  }
  static unsigned int put_key(SSL* ssl, unsigned char* psk, unsigned int max) {
    const tls_channel* self = of(ssl);
    if (self == nullptr || max < self->key_.size()) return 0;
    std::memcpy(psk, self->key_.data(), self->key_.size());
    return static_cast<unsigned int>(self->key_.size());
  }
  static unsigned int client_key(SSL* ssl, const char* /*hint*/, char* identity,
                                 unsigned int max_identity, unsigned char* psk,
                                 unsigned int max_psk) {
    constexpr std::string_view name = "commx";
    if (max_identity <= name.size()) return 0;
    std::memcpy(identity, name.data(), name.size());
    identity[name.size()] = '\0';
    return put_key(ssl, psk, max_psk);
  }
  static unsigned int server_key(SSL* ssl, const char* identity, unsigned char* psk,
                                 unsigned int max_psk) {
    if (identity == nullptr || std::string_view(identity) != "commx") return 0;
    return put_key(ssl, psk, max_psk);
  }

  static constexpr std::array<std::byte, 8> confirmed{std::byte{'C'}, std::byte{'M'},
                                                      std::byte{'X'}, std::byte{'T'}};

  asio::ssl::stream<tls_layer> stream_;
  tls_key key_;
  std::array<std::byte, 8> confirmation_{};
};

}  // namespace commx::detail::tcp
