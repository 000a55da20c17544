// SPDX-License-Identifier: MIT
#pragma once
// The programs and files a test runs or reads are compiled in as paths relative to the test
// program's own directory (commx_test_path in tests/CMakeLists.txt), never as absolute paths:
// the compile commands are then alike in every clone, and a clone at a new path takes its
// objects from the compiler cache (scripts/compiler_cache.sh) instead of compiling them again.

#include <filesystem>
#include <string>
#include <string_view>

namespace commx::test {

/// `relative` (to the directory of the running program) as an absolute path.
[[nodiscard]] inline std::string beside_this_program(std::string_view relative) {
  static const std::filesystem::path directory =
      std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return (directory / relative).lexically_normal().string();
}

}  // namespace commx::test
