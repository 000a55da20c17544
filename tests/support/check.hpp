// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Assertions for code that runs inside ranks. Catch2's REQUIRE is not thread-safe, and in a
/// multi-process job there is no Catch2 at all; so a rank checks with COMMX_CHECK, which throws,
/// and the job (run_inproc, commxrun) carries the failure to the test that started it.

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "commx/error.hpp"

namespace commx::test {

struct check_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail_check(const char* file, int line, const std::string& what) {
  throw check_failed(fmt::format("{}:{}: check failed: {}", file, line, what));
}

/// Runs `body` and returns the commx::errc it threw; fails the check if it threw nothing or
/// something else.
template <class Body>
commx::error expect_error(commx::errc expected, Body&& body, const char* file, int line) {
  try {
    body();
  } catch (const commx::error& e) {
    if (e.code() != expected) {
      fail_check(file, line,
                 fmt::format("expected errc {} but got '{}'", make_error_code(expected).message(),
                             e.what()));
    }
    return e;
  }
  fail_check(file, line,
             fmt::format("expected errc '{}' but nothing was thrown",
                         make_error_code(expected).message()));
}

}  // namespace commx::test

#define COMMX_CHECK(cond)                                              \
  do {                                                                 \
    if (!(cond)) ::commx::test::fail_check(__FILE__, __LINE__, #cond); \
  } while (false)

#define COMMX_CHECK_EQ(a, b)                                                                     \
  do {                                                                                           \
    const auto& commx_a_ = (a);                                                                  \
    const auto& commx_b_ = (b);                                                                  \
    if (!(commx_a_ == commx_b_))                                                                 \
      ::commx::test::fail_check(__FILE__, __LINE__,                                              \
                                fmt::format("{} == {} ({} vs {})", #a, #b, commx_a_, commx_b_)); \
  } while (false)

#define COMMX_EXPECT_ERROR(errc_value, ...) \
  ::commx::test::expect_error(              \
      errc_value, [&] { __VA_ARGS__; }, __FILE__, __LINE__)
