// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// commx's one error type: `commx::errc` registered as a `std::error_code` enum with the
/// category "commx", and `commx::error`, a `std::system_error` whose message names the rank,
/// the peer, the tag and the sizes involved.

#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include <fmt/format.h>

namespace commx {

/// What went wrong. Zero is reserved for success, as `std::error_code` requires.
enum class errc {
  timeout = 1,            ///< a deadline passed before the operation completed
  peer_lost,              ///< the peer left the job or its process is gone
  truncated,              ///< the message is larger than the receive buffer
  invalid_argument,       ///< a wrong rank, tag, size, root or communicator
  protocol_violation,     ///< a peer sent something the protocol does not allow
  authentication_failed,  ///< a peer could not prove it holds the job token
  bootstrap_failed,       ///< rank, size or rendezvous could not be established
  serialization_failed,   ///< cereal could not encode or decode a message
  type_mismatch,          ///< a message's size is not a whole number of the receiver's elements
  collective_mismatch,    ///< ranks called a collective with different arguments
  cancelled,              ///< the operation was cancelled before it matched
  handler_failed,         ///< an active-message handler threw at the target (active_messages.hpp)
  revoked,                ///< the communicator was revoked (communicator::revoke)
  no_majority,            ///< a shrink kept half of the communicator or less (communicator::shrink)
  excluded,               ///< the survivors agreed this rank lost (communicator::shrink)
};

namespace detail {

class error_category_impl final : public std::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "commx"; }

  [[nodiscard]] std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::timeout:
        return "deadline passed";
      case errc::peer_lost:
        return "peer lost";
      case errc::truncated:
        return "message truncated";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::protocol_violation:
        return "protocol violation";
      case errc::authentication_failed:
        return "authentication failed";
      case errc::bootstrap_failed:
        return "bootstrap failed";
      case errc::serialization_failed:
        return "serialization failed";
      case errc::type_mismatch:
        return "message size does not match the element type";
      case errc::collective_mismatch:
        return "collective called with mismatched arguments";
      case errc::cancelled:
        return "operation cancelled";
      case errc::handler_failed:
        return "active-message handler failed";
      case errc::revoked:
        return "communicator revoked";
      case errc::no_majority:
        return "survivors are not a majority";
      case errc::excluded:
        return "the survivors agreed this rank lost";
    }
    return "unknown commx error";
  }

  // Lets portable code test `ec == std::errc::timed_out` without knowing commx.
  [[nodiscard]] std::error_condition default_error_condition(int value) const noexcept override {
    switch (static_cast<errc>(value)) {
      case errc::timeout:
        return std::errc::timed_out;
      case errc::peer_lost:
        return std::errc::connection_reset;
      case errc::truncated:
        return std::errc::message_size;
      case errc::invalid_argument:
        return std::errc::invalid_argument;
      case errc::protocol_violation:
        return std::errc::protocol_error;
      case errc::authentication_failed:
        return std::errc::permission_denied;
      case errc::cancelled:
        return std::errc::operation_canceled;
      default:
        return {value, *this};
    }
  }
};

// Initialised at compile time, so that error_category() has no guard to test: every
// comparison of an error_code with an errc calls it, several times per message.
constinit inline const error_category_impl error_category_instance{};

}  // namespace detail

/// The category of every `commx::errc`.
inline const std::error_category& error_category() noexcept {
  return detail::error_category_instance;
}

/// Makes `errc` values convert to std::error_code (found by argument-dependent lookup).
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// The one exception commx throws. `code()` is a `commx::errc`; `what()` names rank, peer, tag
/// and sizes where they apply.
class error : public std::system_error {
 public:
  /// An error with code `ec`; `what` names what failed.
  error(std::error_code ec, const std::string& what) : std::system_error(ec, what) {}
  /// An error with code `e`; `what` names what failed.
  error(errc e, const std::string& what) : std::system_error(make_error_code(e), what) {}
};

/// Marks "no rank" or "no tag" in an error's context.
inline constexpr int unknown = -1;

/// Where an error happened, so that every message reads the same way.
struct error_context {
  int rank = unknown;          ///< the rank that failed
  int peer = unknown;          ///< the peer involved, if any
  int tag = unknown;           ///< the tag involved, if any
  std::size_t bytes = 0;       ///< size of the buffer or message involved, if any
  const char* operation = "";  ///< e.g. "recv", "bcast"
};

namespace detail {

inline std::string describe(const error_context& where) {
  std::string text = fmt::format("rank {}: {}", where.rank, where.operation);
  if (where.peer != unknown) text += fmt::format(" peer {}", where.peer);
  if (where.tag != unknown) text += fmt::format(" tag {}", where.tag);
  text += fmt::format(" ({} bytes)", where.bytes);
  return text;
}

}  // namespace detail

/// The `commx::error` throw_error throws: `code`, the context, and a sentence saying why.
[[nodiscard]] inline error make_error(std::error_code code, const error_context& where,
                                      std::string_view reason = {}) {
  std::string text = detail::describe(where);
  if (!reason.empty()) text += fmt::format(": {}", reason);
  return {code, text};
}

/// Throws `commx::error` with `code`, the context, and a sentence saying why.
[[noreturn]] inline void throw_error(std::error_code code, const error_context& where,
                                     std::string_view reason = {}) {
  throw make_error(code, where, reason);
}

/// Throws `commx::error` with `code`, the context, and a sentence saying why.
[[noreturn]] inline void throw_error(errc code, const error_context& where,
                                     std::string_view reason = {}) {
  throw_error(make_error_code(code), where, reason);
}

}  // namespace commx

// A standard trait's specialisation (errc converts to std::error_code), not commx's API.
/// @cond
template <>
struct std::is_error_code_enum<commx::errc> : std::true_type {};
/// @endcond
