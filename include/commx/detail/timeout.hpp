// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Raising errc::timeout for an operation on a transport endpoint, and logging it first: at
/// COMMX_LOG=info a timeout prints one line with the exception's own text, prefixed with the
/// endpoint's rank and stack (a program that catches the exception and carries on still leaves
/// a trace). Requests, wait_any and the collectives' ports raise their timeouts here.

#include <string_view>

#include "commx/error.hpp"
#include "commx/log.hpp"

namespace commx::detail {

/// Who speaks for `endpoint` in the log: its own context where the transport offers one,
/// otherwise its stack's name and its world rank (what every transport's own lines use).
template <class T>
[[nodiscard]] log::context log_context_of(const T& endpoint) {
  if constexpr (requires { endpoint.log_context(); }) {
    return endpoint.log_context();
  } else {
    return {T::name, endpoint.rank()};
  }
}

/// Logs at info, then throws, errc::timeout for `where` on `endpoint`, saying why (`reason`).
template <class T>
[[noreturn]] void throw_timeout(const T& endpoint, const error_context& where,
                                std::string_view reason) {
  error e = make_error(make_error_code(errc::timeout), where, reason);
  COMMX_LOG(info, log_context_of(endpoint), "{}", e.what());
  throw e;
}

}  // namespace commx::detail
