// SPDX-License-Identifier: MIT
// commx/log.hpp alone: level names, the prefix, and that a disabled level costs no evaluation.
// The level read from COMMX_LOG and the lines a real job prints: tests/log/.

#include <catch2/catch.hpp>

#include <string>

#include "commx/log.hpp"

namespace {

std::string prefix(const commx::log::context& c, commx::log::level l) {
  fmt::memory_buffer out;
  commx::log::append_prefix(out, c, l);
  return fmt::to_string(out);
}

}  // namespace

TEST_CASE("log levels parse by name, and nothing else does", "[log]") {
  using commx::log::level;
  CHECK(commx::log::parse_level("off") == level::off);
  CHECK(commx::log::parse_level("error") == level::error);
  CHECK(commx::log::parse_level("warn") == level::warn);
  CHECK(commx::log::parse_level("info") == level::info);
  CHECK(commx::log::parse_level("debug") == level::debug);
  CHECK_FALSE(commx::log::parse_level("INFO"));
  CHECK_FALSE(commx::log::parse_level("warning"));
  CHECK_FALSE(commx::log::parse_level(""));
  CHECK(commx::detail::read_log_level(nullptr) == commx::log::default_level);
  CHECK(commx::detail::read_log_level("") == commx::log::default_level);
  CHECK(commx::detail::read_log_level("debug") == level::debug);
  CHECK(commx::detail::read_log_level("bogus") == commx::log::default_level);  // and says so
}

TEST_CASE("a log line names the rank and the stack it comes from", "[log]") {
  using commx::log::level;
  CHECK(prefix({"tcp", 3}, level::info) == "commx[rank 3 tcp] info: ");
  CHECK(prefix({"relay"}, level::warn) == "commx[relay] warn: ");
  CHECK(prefix({}, level::error) == "commx error: ");
}

TEST_CASE("a disabled level evaluates none of its arguments", "[log]") {
  using commx::log::level;
  const commx::log::context ctx{"test", 0};
  int evaluated = 0;
  const auto count = [&] { return ++evaluated; };

  commx::log::set_threshold(level::warn);
  COMMX_LOG(info, ctx, "not printed {}", count());
  COMMX_LOG(debug, ctx, "not printed {}", count());
  CHECK(evaluated == 0);
  CHECK_FALSE(commx::log::enabled(level::info));
  CHECK(commx::log::enabled(level::warn));

  commx::log::set_threshold(level::off);
  COMMX_LOG(error, ctx, "not printed {}", count());
  CHECK(evaluated == 0);

  commx::log::set_threshold(level::debug);
  COMMX_LOG(debug, ctx, "printed once: {}", count());
  CHECK(evaluated == 1);
  commx::log::set_threshold(level::warn);
}
