// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The transport's `library_call()` guard where it has one (transport/concept.hpp), else a
/// guard that does nothing: the communicator holds it around what it does of one blocking call.

namespace commx::detail {

/// What a transport without `library_call()` gets.
struct no_library_call {};

/// A guard for one blocking call of the program's into the library, on `endpoint`.
template <class T>
[[nodiscard]] auto library_call(T& endpoint) {
  if constexpr (requires { endpoint.library_call(); }) {
    return endpoint.library_call();
  } else {
    return no_library_call{};
  }
}

}  // namespace commx::detail
