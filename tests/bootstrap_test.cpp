// SPDX-License-Identifier: MIT
// Rank, size, root and token from each launcher's variables.

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "commx/bootstrap.hpp"

namespace {
commx::bootstrap::lookup from(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

using commx::bootstrap::launcher;

TEST_CASE("each launcher's variables give rank and size", "[bootstrap]") {
  auto env = commx::bootstrap::from_env(from({{"COMMX_RANK", "2"},
                                              {"COMMX_SIZE", "4"},
                                              {"COMMX_ROOT", "127.0.0.1:5000"},
                                              {"COMMX_TOKEN", "abcd"}}));
  CHECK(env.rank == 2);
  CHECK(env.size == 4);
  CHECK(env.source == launcher::commx);
  CHECK(env.root == "127.0.0.1:5000");
  CHECK(env.token == "abcd");

  env = commx::bootstrap::from_env(from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}}));
  CHECK((env.rank == 5 && env.size == 8 && env.source == launcher::slurm));
  CHECK(!env.root);

  env = commx::bootstrap::from_env(
      from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}}));
  CHECK((env.rank == 1 && env.size == 3 && env.source == launcher::open_mpi));

  env = commx::bootstrap::from_env(from({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  CHECK((env.rank == 0 && env.size == 2 && env.source == launcher::pmi));

  env = commx::bootstrap::from_env(from({}));
  CHECK((env.rank == 0 && env.size == 1 && env.source == launcher::none));
}

TEST_CASE("commx's variables win over the launcher's", "[bootstrap]") {
  const auto env = commx::bootstrap::from_env(from(
      {{"COMMX_RANK", "1"}, {"COMMX_SIZE", "2"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "9"}}));
  CHECK((env.rank == 1 && env.size == 2 && env.source == launcher::commx));
}

TEST_CASE("malformed variables raise bootstrap_failed naming the variable", "[bootstrap]") {
  using Catch::Matchers::Contains;
  auto fails_with = [](std::map<std::string, std::string> vars, const std::string& text) {
    try {
      (void)commx::bootstrap::from_env(from(std::move(vars)));
    } catch (const commx::error& e) {
      CHECK(e.code() == commx::errc::bootstrap_failed);
      CHECK_THAT(e.what(), Contains(text));
      return;
    }
    FAIL("no error for " << text);
  };
  fails_with({{"COMMX_RANK", "x"}, {"COMMX_SIZE", "2"}}, "COMMX_RANK='x'");
  fails_with({{"COMMX_RANK", "2"}, {"COMMX_SIZE", "2"}},
             "COMMX_RANK=2 is not a rank of COMMX_SIZE=2");
  fails_with({{"COMMX_RANK", "0"}}, "COMMX_RANK is set but COMMX_SIZE is not");
  fails_with({{"SLURM_NTASKS", "4"}}, "SLURM_NTASKS is set but SLURM_PROCID is not");
  fails_with({{"PMI_RANK", "-1"}, {"PMI_SIZE", "2"}}, "PMI_RANK='-1'");
  fails_with({{"COMMX_RANK", "0"}, {"COMMX_SIZE", "0"}}, "is not a rank of");
  fails_with({{"COMMX_ROOT", "localhost"}}, "host:port");
}

TEST_CASE("a launch of a job of several launches places its ranks at COMMX_RANK_BASE",
          "[bootstrap]") {
  using Catch::Matchers::Contains;
  const auto env = commx::bootstrap::from_env(from({{"OMPI_COMM_WORLD_RANK", "1"},
                                                    {"OMPI_COMM_WORLD_SIZE", "2"},
                                                    {"COMMX_RANK_BASE", "2"},
                                                    {"COMMX_JOB_SIZE", "4"}}));
  CHECK((env.rank == 3 && env.size == 4 && env.source == launcher::open_mpi));
  const auto refused = [](std::map<std::string, std::string> vars) {
    try {
      (void)commx::bootstrap::from_env(from(std::move(vars)));
    } catch (const commx::error& e) {
      CHECK(e.code() == commx::errc::bootstrap_failed);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(refused({{"PMI_RANK", "0"},
                      {"PMI_SIZE", "3"},
                      {"COMMX_RANK_BASE", "2"},
                      {"COMMX_JOB_SIZE", "4"}}),
             Contains("does not fit in COMMX_JOB_SIZE=4"));
  CHECK_THAT(refused({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"COMMX_RANK_BASE", "2"}}),
             Contains("COMMX_RANK_BASE is set but COMMX_JOB_SIZE is not"));
}
