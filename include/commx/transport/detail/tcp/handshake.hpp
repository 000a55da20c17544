// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Mutual challenge-response authentication of a new TCP connection with the job token
/// (COMMX_TOKEN), which never crosses the wire: each side proves it holds the token by an
/// HMAC-SHA256 over both sides' fresh random nonces. Four fixed-size messages:
///
/// | message | from | bytes | content |
/// |---|---|---|---|
/// | hello | connecting side | 48 | magic "CMXH", version, purpose (join/peer/stream/relay), flags (bit 0: TLS follows, tls.hpp), a zero byte, rank, size, 32-byte nonce |
/// | challenge | accepting side | 80 | magic, version, 3 zero bytes, its rank, size, 32-byte nonce, proof = HMAC(token, "commx server" hello nonce rank size) |
/// | response | connecting side | 40 | magic, 4 zero bytes, proof = HMAC(token, "commx client" hello challenge) |
/// | verdict | accepting side | 8 | magic, 0 (accepted) or a refusal code |
///
/// A hello that asks for TLS is followed, once accepted, by a TLS handshake whose pre-shared key
/// (unless certificates serve) is HMAC(token, "commx tls" hello challenge): fresh per connection.
///
/// Every proof covers the other side's fresh nonce, so nothing can be replayed, and names the
/// ranks, so a proof for one pair of ranks is no proof for another. Proofs are compared in
/// constant time (CRYPTO_memcmp). Everything here is a pure function of its bytes, so the
/// fuzz target can drive it without sockets.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "commx/error.hpp"
#include "commx/transport/detail/tcp/wire.hpp"

namespace commx::detail::tcp::handshake {

inline constexpr std::uint32_t magic = 0x48584d43;  // "CMXH"
inline constexpr std::size_t nonce_size = 32;
inline constexpr std::size_t proof_size = 32;
inline constexpr std::size_t hello_size = 48;
inline constexpr std::size_t challenge_size = 48 + proof_size;
inline constexpr std::size_t response_size = 8 + proof_size;
inline constexpr std::size_t verdict_size = 8;

/// Why the connection is being made.
enum class purpose : std::uint8_t {
  join = 1,    ///< a rank joins the job at rank 0 (the rendezvous); the connection stays as theirs
  peer = 2,    ///< a rank connects to another on first use, once the table is known
  stream = 3,  ///< an extra connection to a connected peer (transport::wan's data streams)
  relay = 4,   ///< a rank (or a relay on its behalf) asks commx-relay to carry it (route.hpp);
               ///< the relay has no rank and answers as the caller's own
};

enum class verdict_code : std::uint32_t {
  accepted = 0,
  bad_proof = 1,
  unexpected = 2,  ///< a valid peer the acceptor does not expect (wrong size, duplicate rank)
  /// The acceptor encrypts every connection (COMMX_TLS=on), and this one did not ask to be.
  tls_required = 3,
  /// This one asked for TLS, which the acceptor has off (COMMX_TLS=off).
  tls_off = 4,
  /// Both ranks of a pair dialed each other at once, or the acceptor already has a connection
  /// to this rank: the other connection carries the pair's messages, this one is not needed.
  crossed = 5,
};

using nonce = std::array<std::byte, nonce_size>;
using proof = std::array<std::byte, proof_size>;
using hello_bytes = std::array<std::byte, hello_size>;
using challenge_bytes = std::array<std::byte, challenge_size>;
using response_bytes = std::array<std::byte, response_size>;
using verdict_bytes = std::array<std::byte, verdict_size>;

struct hello {
  purpose why = purpose::peer;
  int rank = 0;
  int size = 0;
  nonce client_nonce{};
  bool tls = false;  ///< a TLS handshake follows the verdict
};

struct challenge {
  int rank = 0;
  int size = 0;
  nonce server_nonce{};
};

/// Fresh random bytes from OpenSSL's CSPRNG.
inline nonce fresh_nonce() {
  nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw error(errc::authentication_failed, "tcp: OpenSSL could not produce random bytes");
  }
  return n;
}

/// HMAC-SHA256 of the concatenated `parts` keyed with `token`.
template <std::size_t N>
proof hmac(std::string_view token, const std::array<std::span<const std::byte>, N>& parts) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  proof out{};
  bool ok = ctx != nullptr;
  if (ok) {
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                                 OSSL_PARAM_construct_end()};
    ok = EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(token.data()), token.size(),
                      params) == 1;
    for (const auto& part : parts) {
      ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()),
                                part.size()) == 1;
    }
    std::size_t length = 0;
    ok = ok &&
         EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &length, out.size()) ==
             1 &&
         length == out.size();
  }
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (!ok) throw error(errc::authentication_failed, "tcp: OpenSSL could not compute an HMAC");
  return out;
}

inline bool same_proof(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

inline std::span<const std::byte> label(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

inline hello_bytes encode(const hello& h) {
  hello_bytes out{};
  wire::put(&out[0], magic, 4);
  wire::put(&out[4], protocol_version, 1);
  wire::put(&out[5], static_cast<std::uint8_t>(h.why), 1);
  wire::put(&out[6], h.tls ? 1U : 0U, 1);
  wire::put(&out[8], static_cast<std::uint32_t>(h.rank), 4);
  wire::put(&out[12], static_cast<std::uint32_t>(h.size), 4);
  std::copy(h.client_nonce.begin(), h.client_nonce.end(), out.begin() + 16);
  return out;
}

/// Decodes a hello; nullopt when any field is malformed (not when the rank is unwelcome: that
/// is the acceptor's policy).
inline std::optional<hello> decode_hello(std::span<const std::byte, hello_size> in) {
  if (wire::get(&in[0], 4) != magic || wire::get(&in[4], 1) != protocol_version ||
      wire::get(&in[6], 1) > 1 || wire::get(&in[7], 1) != 0)
    return std::nullopt;
  const auto why = wire::get(&in[5], 1);
  if (why != static_cast<std::uint8_t>(purpose::join) &&
      why != static_cast<std::uint8_t>(purpose::peer) &&
      why != static_cast<std::uint8_t>(purpose::stream) &&
      why != static_cast<std::uint8_t>(purpose::relay))
    return std::nullopt;
  const auto rank = wire::get(&in[8], 4);
  const auto size = wire::get(&in[12], 4);
  if (size < 1 || size > max_ranks || rank >= size) return std::nullopt;
  hello h;
  h.why = static_cast<purpose>(why);
  h.tls = wire::get(&in[6], 1) == 1;
  h.rank = static_cast<int>(rank);
  h.size = static_cast<int>(size);
  std::copy(in.begin() + 16, in.end(), h.client_nonce.begin());
  return h;
}

/// The acceptor's answer to `hello`: its own rank and nonce, and its proof over both nonces.
inline challenge_bytes make_challenge(std::string_view token, const hello_bytes& hello_in,
                                      const challenge& c) {
  challenge_bytes out{};
  wire::put(&out[0], magic, 4);
  wire::put(&out[4], protocol_version, 1);
  wire::put(&out[8], static_cast<std::uint32_t>(c.rank), 4);
  wire::put(&out[12], static_cast<std::uint32_t>(c.size), 4);
  std::copy(c.server_nonce.begin(), c.server_nonce.end(), out.begin() + 16);
  const auto signed_part = std::span<const std::byte>(out).first(48);
  const proof p =
      hmac<3>(token, {label("commx server"), std::span<const std::byte>(hello_in), signed_part});
  std::copy(p.begin(), p.end(), out.begin() + 48);
  return out;
}

/// Checks a challenge against the hello we sent: well formed, from the acceptor we meant, and
/// signed with the token. Returns the acceptor's side, or nullopt.
inline std::optional<challenge> check_challenge(std::string_view token, const hello_bytes& sent,
                                                std::span<const std::byte, challenge_size> in) {
  if (wire::get(&in[0], 4) != magic || wire::get(&in[4], 1) != protocol_version ||
      wire::get(&in[5], 3) != 0)
    return std::nullopt;
  challenge c;
  const auto rank = wire::get(&in[8], 4);
  const auto size = wire::get(&in[12], 4);
  if (size < 1 || size > max_ranks || rank >= size) return std::nullopt;
  c.rank = static_cast<int>(rank);
  c.size = static_cast<int>(size);
  std::copy(in.begin() + 16, in.begin() + 48, c.server_nonce.begin());
  const proof expected =
      hmac<3>(token, {label("commx server"), std::span<const std::byte>(sent), in.first(48)});
  if (!same_proof(expected, in.subspan(48))) return std::nullopt;
  return c;
}

inline response_bytes make_response(std::string_view token, const hello_bytes& sent,
                                    std::span<const std::byte, challenge_size> got) {
  response_bytes out{};
  wire::put(&out[0], magic, 4);
  const proof p = hmac<3>(token, {label("commx client"), std::span<const std::byte>(sent), got});
  std::copy(p.begin(), p.end(), out.begin() + 8);
  return out;
}

/// Checks the connecting side's response against the hello it sent and our challenge.
inline bool check_response(std::string_view token, const hello_bytes& got,
                           const challenge_bytes& sent,
                           std::span<const std::byte, response_size> in) {
  if (wire::get(&in[0], 4) != magic || wire::get(&in[4], 4) != 0) return false;
  const proof expected = hmac<3>(token, {label("commx client"), std::span<const std::byte>(got),
                                         std::span<const std::byte>(sent)});
  return same_proof(expected, in.subspan(8));
}

inline verdict_bytes make_verdict(verdict_code code) {
  verdict_bytes out{};
  wire::put(&out[0], magic, 4);
  wire::put(&out[4], static_cast<std::uint32_t>(code), 4);
  return out;
}

/// The verdict's code, or nullopt if the bytes are not a verdict.
inline std::optional<verdict_code> decode_verdict(std::span<const std::byte, verdict_size> in) {
  if (wire::get(&in[0], 4) != magic) return std::nullopt;
  const auto code = wire::get(&in[4], 4);
  if (code > static_cast<std::uint32_t>(verdict_code::crossed)) return std::nullopt;
  return static_cast<verdict_code>(code);
}

/// The pre-shared key of a connection whose hello asked for TLS: both sides' nonces and ranks
/// are in it, so it is new for every connection.
inline proof tls_key(std::string_view token, const hello_bytes& hello_in,
                     const challenge_bytes& challenge_out) {
  return hmac<3>(token, {label("commx tls"), std::span<const std::byte>(hello_in),
                         std::span<const std::byte>(challenge_out)});
}

}  // namespace commx::detail::tcp::handshake
