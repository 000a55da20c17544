// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Who this process is in its job: rank, size, the rendezvous address and the job token, from
/// the variables of whichever launcher started it. In order of precedence:
///
/// | launcher | rank | size |
/// |---|---|---|
/// | commxrun (or by hand) | COMMX_RANK | COMMX_SIZE |
/// | Slurm's srun | SLURM_PROCID | SLURM_NTASKS |
/// | Open MPI's mpirun | OMPI_COMM_WORLD_RANK | OMPI_COMM_WORLD_SIZE |
/// | PMI (MPICH's Hydra, ...) | PMI_RANK | PMI_SIZE |
/// | none | 0 | 1 |
///
/// A job made of several launches (one mpirun or srun per site, joined by wan or shm+tcp+wan)
/// says where each launch's ranks go: COMMX_RANK_BASE=b and COMMX_JOB_SIZE=n make the launcher's
/// rank r the job's rank b + r, of n.
///
/// COMMX_ROOT (host:port of the rendezvous) and COMMX_TOKEN (the job's shared secret) come
/// from the environment whatever the launcher; commxrun sets both, under srun or mpirun the
/// user does, unless the network stacks take their endpoints from the launcher's PMIx server
/// instead (bootstrap/pmix.hpp, linked as commx::pmix).

#include <array>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "commx/error.hpp"

namespace commx::bootstrap {

/// Which launcher's variables gave the rank and size.
enum class launcher { commx, slurm, open_mpi, pmi, none };

/// The launcher's name, as error messages and logs print it.
[[nodiscard]] constexpr std::string_view name(launcher which) {
  switch (which) {
    case launcher::commx:
      return "commx";
    case launcher::slurm:
      return "slurm";
    case launcher::open_mpi:
      return "open-mpi";
    case launcher::pmi:
      return "pmi";
    case launcher::none:
      return "none";
  }
  return "?";
}

/// What the launcher's variables say about this process.
struct environment {
  int rank = 0;                      ///< this process's rank
  int size = 1;                      ///< the job's rank count
  launcher source = launcher::none;  ///< the launcher whose variables gave them
  std::optional<std::string> root;   ///< COMMX_ROOT, "host:port"
  std::optional<std::string> token;  ///< COMMX_TOKEN
};

/// Looks a variable up; tests pass their own.
using lookup = std::function<std::optional<std::string>(const char* name)>;

/// The process's environment (std::getenv): the lookup every `from_env` uses unless a test
/// passes its own.
inline std::optional<std::string> process_env(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read at start-up
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

namespace detail {

inline int parse_count(const std::string& text, const char* variable) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < 0 || value > (1L << 24)) {
    throw error(errc::bootstrap_failed,
                fmt::format("{}='{}' is not a non-negative rank or size", variable, text));
  }
  return static_cast<int>(value);
}

}  // namespace detail

/// Reads rank, size, root and token.
/// @throws commx::error errc::bootstrap_failed naming the variable when a value is malformed,
///   when only one of a launcher's pair is set, or when rank is not in [0, size).
inline environment from_env(const lookup& get = process_env) {
  struct pair {
    launcher which;
    const char* rank;
    const char* size;
  };
  constexpr std::array<pair, 4> launchers{{
      {launcher::commx, "COMMX_RANK", "COMMX_SIZE"},
      {launcher::slurm, "SLURM_PROCID", "SLURM_NTASKS"},
      {launcher::open_mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {launcher::pmi, "PMI_RANK", "PMI_SIZE"},
  }};
  environment env;
  for (const pair& p : launchers) {
    auto rank = get(p.rank);
    auto size = get(p.size);
    if (!rank && !size) continue;
    if (!rank || !size) {
      throw error(
          errc::bootstrap_failed,
          fmt::format("{} is set but {} is not", rank ? p.rank : p.size, rank ? p.size : p.rank));
    }
    env.rank = detail::parse_count(*rank, p.rank);
    env.size = detail::parse_count(*size, p.size);
    env.source = p.which;
    if (env.size < 1 || env.rank >= env.size) {
      throw error(errc::bootstrap_failed,
                  fmt::format("{}={} is not a rank of {}={}", p.rank, env.rank, p.size, env.size));
    }
    break;
  }
  const auto base = get("COMMX_RANK_BASE");
  const auto job_size = get("COMMX_JOB_SIZE");
  if (base || job_size) {
    if (!base || !job_size) {
      throw error(errc::bootstrap_failed, fmt::format("{} is set but {} is not",
                                                      base ? "COMMX_RANK_BASE" : "COMMX_JOB_SIZE",
                                                      base ? "COMMX_JOB_SIZE" : "COMMX_RANK_BASE"));
    }
    const int first = detail::parse_count(*base, "COMMX_RANK_BASE");
    const int all = detail::parse_count(*job_size, "COMMX_JOB_SIZE");
    if (first + env.size > all) {
      throw error(errc::bootstrap_failed,
                  fmt::format("COMMX_RANK_BASE={} with a launch of {} ranks does not fit in "
                              "COMMX_JOB_SIZE={}",
                              first, env.size, all));
    }
    env.rank += first;
    env.size = all;
  }
  env.root = get("COMMX_ROOT");
  env.token = get("COMMX_TOKEN");
  if (env.root && env.root->rfind(':') == std::string::npos) {
    throw error(errc::bootstrap_failed,
                fmt::format("COMMX_ROOT='{}' is not of the form host:port", *env.root));
  }
  return env;
}

}  // namespace commx::bootstrap
