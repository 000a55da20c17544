// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// TLS on a tcp or wan connection: OpenSSL, its credentials set up through Asio's
/// `ssl::context`.
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
/// How it moves bytes: `tls_channel` runs OpenSSL's SSL over the connection's socket through a
/// BIO of its own. A read that finds the socket empty fails with would_block, OpenSSL's state
/// intact, as with a plain socket. A write is always taken whole: its records wait in the
/// channel until the socket takes them (`flush_ciphertext`), and the writer stops offering
/// plaintext once `ciphertext_waiting()` passes `backlog_limit`. So the engine's
/// read-until-would_block discipline and its write waits work unchanged, and what a write took
/// is committed (a cancelled frame cannot be half in a record); only a short read no longer
/// means the socket is empty.
///
/// Not `asio::ssl::stream`: its engine passes every byte through a BIO pair and two buffers of
/// its own, three copies each way on top of the kernel's (a 4 MiB ping-pong on loopback: 5.9 ms
/// through it, 5.0 ms this way; bench/HISTORY.md, "TLS").

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/socket.h>

#include <asio.hpp>
#include <asio/ssl/context.hpp>  // not asio/ssl.hpp: its stream is not used, and costs
#include <asio/ssl/error.hpp>    // every tcp translation unit half a second to parse
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
    // RELEASE_BUFFERS (which asio::ssl::stream sets) would free a connection's record buffers
    // whenever it is idle; a job's connections are seldom idle for long, so the buffers stay.
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

/// One connection's TLS session: OpenSSL's SSL over the connection's socket, through a BIO
/// whose writes always succeed (the ciphertext waits in `backlog_`) and whose reads are the
/// socket's (would_block as a retry).
class tls_channel {
 public:
  /// Plaintext is not offered while more ciphertext than this waits for the socket.
  static constexpr std::size_t backlog_limit = std::size_t{256} << 10;

  /// `key` serves when the context has no certificates.
  tls_channel(tls_context& context, asio::ip::tcp::socket& socket, const tls_key& key)
      : ssl_(SSL_new(context.native().native_handle())), socket_(&socket), key_(key) {
    if (!ssl_) throw error(errc::bootstrap_failed, "tls: " + openssl_reason());
    SSL* ssl = ssl_.get();
    SSL_set_ex_data(ssl, key_slot(), this);
    if (!context.certificates()) {
      SSL_set_psk_client_callback(ssl, &tls_channel::client_key);
      SSL_set_psk_server_callback(ssl, &tls_channel::server_key);
    }
    // Records are read many at a time (one system call for up to read_buffer bytes).
    SSL_set_read_ahead(ssl, 1);
    SSL_set_default_read_buffer_len(ssl, read_buffer);
    BIO* bio = BIO_new(socket_method());
    if (bio == nullptr) throw error(errc::bootstrap_failed, "tls: " + openssl_reason());
    BIO_set_data(bio, this);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl, bio, bio);
  }
  tls_channel(const tls_channel&) = delete;
  tls_channel& operator=(const tls_channel&) = delete;
  ~tls_channel() = default;

  /// The TLS handshake, asynchronously, then the accepting side's word that it accepts the
  /// connecting side's credentials (in TLS 1.3 the connecting side is done before the other
  /// has checked its certificate, and would learn of a refusal only at its first read):
  /// `done(error_code)`; the text of a failure is `failure_text(ec)`. The channel must live
  /// until `done` runs (it runs once: at the end, or when the socket is closed under it).
  template <class Done>
  void async_handshake(bool client, Done&& done) {
    client_ = client;
    done_ = std::forward<Done>(done);
    if (client) {
      SSL_set_connect_state(ssl_.get());
    } else {
      SSL_set_accept_state(ssl_.get());
    }
    step();
  }
  static std::string failure_text(const std::error_code& ec) {
    if (ec.category() == asio::error::get_ssl_category()) {
      std::array<char, 256> text{};
      ERR_error_string_n(static_cast<unsigned long>(ec.value()), text.data(), text.size());
      return fmt::format("TLS handshake failed: {} (different credentials?)", text.data());
    }
    return fmt::format("TLS handshake failed: {}", ec.message());
  }

  void rebind(asio::ip::tcp::socket& s) { socket_ = &s; }

  /// Plaintext read: would_block when the socket has nothing (then nothing is left in
  /// OpenSSL's buffers either), eof at the end of the stream. A peer that closes without
  /// TLS's close_notify reads as the end of the stream too: commx's own frames say whether
  /// that was in order.
  std::size_t read_some(asio::mutable_buffer into, std::error_code& ec) {
    ec = {};
    std::size_t n = 0;
    if (SSL_read_ex(ssl_.get(), into.data(), into.size(), &n) == 1) return n;
    ec = failure(0);
    return 0;
  }

  /// Encrypts as much of `buffers` as fits under the backlog limit, small buffers gathered
  /// into one record; returns the plaintext bytes taken (all of them are then committed).
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers& buffers, std::error_code& ec) {
    ec = {};
    std::size_t taken = 0;
    std::size_t gathered = 0;
    const auto seal = [&](const void* data, std::size_t size) {
      std::size_t n = 0;
      if (SSL_write_ex(ssl_.get(), data, size, &n) != 1) {
        ec = failure(0);
        return false;
      }
      return true;
    };
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::const_buffer b(*it);
      while (b.size() > 0 && ciphertext_waiting() < backlog_limit) {
        if (b.size() >= record && gathered == 0) {  // large: sealed straight from the buffer
          const std::size_t size =
              std::min(b.size(), std::max(record, backlog_limit - ciphertext_waiting()));
          if (!seal(b.data(), size)) return taken;
          taken += size;
          b += size;
          continue;
        }
        const std::size_t size = std::min(b.size(), record - gathered);
        std::memcpy(scratch_.data() + gathered, b.data(), size);
        gathered += size;
        b += size;
        if (gathered == record) {
          if (!seal(scratch_.data(), gathered)) return taken;
          taken += gathered;
          gathered = 0;
        }
      }
      if (b.size() > 0) break;  // the backlog is full
    }
    if (gathered > 0) {
      if (!seal(scratch_.data(), gathered)) return taken;
      taken += gathered;
    }
    return taken;
  }

  /// Writes waiting ciphertext to the socket: the bytes written (ec: the connection broke).
  std::size_t flush_ciphertext(std::error_code& ec) {
    ec = {};
    std::size_t total = 0;
    while (sent_ < backlog_.size()) {
      const ssize_t n = ::send(socket_->native_handle(), backlog_.data() + sent_,
                               backlog_.size() - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) ec = {errno, std::system_category()};
        break;
      }
      sent_ += static_cast<std::size_t>(n);
      total += static_cast<std::size_t>(n);
    }
    if (sent_ == backlog_.size()) {
      backlog_.clear();
      sent_ = 0;
    }
    return total;
  }
  [[nodiscard]] std::size_t ciphertext_waiting() const { return backlog_.size() - sent_; }

 private:
  static constexpr std::size_t record = 16384;  // TLS's largest plaintext record
  static constexpr std::size_t read_buffer = std::size_t{128} << 10;
  static constexpr std::array<std::byte, 8> confirmed{std::byte{'C'}, std::byte{'M'},
                                                      std::byte{'X'}, std::byte{'T'}};

  /// The error of the SSL call that just returned `result`: would_block when it waits for the
  /// socket, eof at the end of the stream.
  std::error_code failure(int result) {
    const int why = SSL_get_error(ssl_.get(), result);
    std::error_code ec;
    switch (why) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        return asio::error::would_block;
      case SSL_ERROR_ZERO_RETURN:
        ec = asio::error::eof;
        break;
      case SSL_ERROR_SYSCALL:
        ec = socket_error_ ? socket_error_ : std::error_code(asio::error::eof);
        break;
      default: {
        const unsigned long code = ERR_peek_last_error();
        ec = code != 0 ? std::error_code(static_cast<int>(code), asio::error::get_ssl_category())
                       : std::error_code(asio::error::eof);
      }
    }
    ERR_clear_error();
    return ec;
  }

  /// The handshake's next move: on until it needs the socket, then a wait for it.
  void step() {
    std::error_code ec;
    bool finished = false;
    if (!handshaken_) {
      const int r = SSL_do_handshake(ssl_.get());
      if (r == 1) {
        handshaken_ = true;
      } else {
        ec = failure(r);
      }
    }
    if (handshaken_ && !client_ && !ec) {
      if (!confirmation_sent_) {
        std::size_t n = 0;
        if (SSL_write_ex(ssl_.get(), confirmed.data(), confirmed.size(), &n) != 1) {
          ec = failure(0);
        }
        confirmation_sent_ = true;
      }
    } else if (handshaken_ && client_ && !ec) {
      while (confirmation_have_ < confirmation_.size() && !ec) {
        confirmation_have_ += read_some(asio::buffer(confirmation_.data() + confirmation_have_,
                                                     confirmation_.size() - confirmation_have_),
                                        ec);
      }
      if (!ec && confirmation_ != confirmed) ec = std::make_error_code(std::errc::protocol_error);
      finished = !ec;
    }
    std::error_code wec;
    flush_ciphertext(wec);  // a refusal's alert too: the peer then learns why
    if (ec && ec != asio::error::would_block) return complete(ec);
    if (wec) return complete(wec);
    if (!client_ && confirmation_sent_ && ciphertext_waiting() == 0) finished = true;
    if (finished) return complete({});
    const auto wait =
        ciphertext_waiting() > 0 ? asio::socket_base::wait_write : asio::socket_base::wait_read;
    socket_->async_wait(wait, [this](std::error_code wait_ec) {
      if (wait_ec) return complete(wait_ec);
      step();
    });
  }

  void complete(std::error_code ec) {
    auto done = std::move(done_);
    done_ = nullptr;
    if (done) done(ec);
  }

  // The BIO between OpenSSL and the socket.
  static BIO_METHOD* socket_method() {
    static BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "commx socket");
      BIO_meth_set_write_ex(m, [](BIO* b, const char* data, std::size_t size, std::size_t* done) {
        auto* self = static_cast<tls_channel*>(BIO_get_data(b));
        const auto* bytes = reinterpret_cast<const std::byte*>(data);
        self->backlog_.insert(self->backlog_.end(), bytes, bytes + size);
        *done = size;
        return 1;
      });
      BIO_meth_set_read_ex(m, [](BIO* b, char* data, std::size_t size, std::size_t* done) {
        auto* self = static_cast<tls_channel*>(BIO_get_data(b));
        BIO_clear_retry_flags(b);
        for (;;) {
          const ssize_t n = ::recv(self->socket_->native_handle(), data, size, MSG_DONTWAIT);
          if (n > 0) {
            *done = static_cast<std::size_t>(n);
            return 1;
          }
          if (n == 0) return 0;  // the end of the stream
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            BIO_set_retry_read(b);
          } else {
            self->socket_error_ = {errno, std::system_category()};
          }
          return 0;
        }
      });
      BIO_meth_set_ctrl(m, [](BIO*, int command, long, void*) -> long {
        return command == BIO_CTRL_FLUSH ? 1 : 0;
      });
      return m;
    }();
    return method;
  }

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

  struct ssl_free {
    void operator()(SSL* s) const { SSL_free(s); }
  };

  std::unique_ptr<SSL, ssl_free> ssl_;
  asio::ip::tcp::socket* socket_;
  tls_key key_;
  std::vector<std::byte> backlog_;           ///< ciphertext the socket has not taken yet
  std::size_t sent_ = 0;                     ///< of backlog_
  std::array<std::byte, record> scratch_{};  ///< small buffers, gathered into one record
  std::error_code socket_error_;             ///< what broke a read, when the socket did
  // the handshake
  bool client_ = false;
  bool handshaken_ = false;
  bool confirmation_sent_ = false;
  std::array<std::byte, 8> confirmation_{};
  std::size_t confirmation_have_ = 0;
  std::function<void(std::error_code)> done_;
};

}  // namespace commx::detail::tcp
