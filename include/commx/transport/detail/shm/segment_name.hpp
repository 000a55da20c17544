// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The name of a job's shared-memory segment, derived from what identifies the job: the token
/// commxrun hands every rank, or the job and step ids of Slurm, Open MPI or PMIx. Two jobs never
/// share a name; one job's ranks always agree on it. commxrun includes this header too, so that
/// it can remove the segment of a job whose ranks were killed before they removed it themselves.
///
/// Standard library only: the launcher includes it without the rest of commx.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <unistd.h>

namespace commx::detail::shm {

/// FNV-1a, 64 bits: spreads the job identity over the name without showing it. The token is a
/// secret; /dev/shm is world-readable, so the name must not contain it. (Not a security
/// boundary: the segment itself is created 0600.)
constexpr std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 0xcbf29ce484222325ULL) {
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

/// "/commx-<16 hex digits>" for a job identity (and the user, so two users' jobs never meet).
inline std::string segment_name(std::string_view job_identity, unsigned uid = ::getuid()) {
  std::uint64_t hash = fnv1a(job_identity);
  hash = fnv1a(std::to_string(uid), hash);
  static constexpr char digits[] = "0123456789abcdef";
  std::string name = "/commx-";
  for (int shift = 60; shift >= 0; shift -= 4) name += digits[(hash >> shift) & 0xf];
  return name;
}

/// What identifies this job to every one of its ranks, from the variables `get` looks up; none
/// when no launcher says. The commx token wins; then Slurm's job and step, Open MPI's job id,
/// PMIx's namespace (MPICH's Hydra: its PMI KVS name).
template <class Lookup>
std::optional<std::string> job_identity(const Lookup& get) {
  if (auto token = get("COMMX_TOKEN")) return "commx:" + *token;
  if (auto job = get("SLURM_JOB_ID")) {
    auto step = get("SLURM_STEP_ID");
    return "slurm:" + *job + "." + (step ? *step : std::string("batch"));
  }
  if (auto job = get("OMPI_MCA_ess_base_jobid")) return "ompi:" + *job;
  if (auto ns = get("PMIX_NAMESPACE")) return "pmix:" + *ns;
  if (auto kvs = get("PMI_KVSNAME")) return "pmi:" + *kvs;
  return std::nullopt;
}

}  // namespace commx::detail::shm
