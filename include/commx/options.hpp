// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::options`: a communicator's settings. The default timeout is 60 s, or COMMX_TIMEOUT
/// seconds (fractions allowed) from the environment.

#include <chrono>
#include <cstdlib>
#include <string>

#include "commx/deadline.hpp"
#include "commx/error.hpp"

namespace commx {

namespace detail {

inline clock::duration timeout_from_env(const char* text, clock::duration fallback) {
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0)) {
    throw error(errc::invalid_argument,
                fmt::format("COMMX_TIMEOUT='{}' is not a positive number of seconds", text));
  }
  return clamped(std::chrono::duration<double>(seconds));
}

}  // namespace detail

struct options {
  /// How long a blocking call waits when its caller gives no deadline.
  clock::duration timeout =
      detail::timeout_from_env(std::getenv("COMMX_TIMEOUT"), std::chrono::seconds(60));
};

}  // namespace commx
