// SPDX-License-Identifier: MIT
#pragma once
// CosmoGrid's arrangement with each site its own job (seed 004, Fig. 5): the sites' leaders
// join a second job of their own over the wan stack, described by the COMMX_WIDE_ variables,
// the same ones a wan job reads under COMMX_ (COMMX_WIDE_RANK is the site's index,
// COMMX_WIDE_SIZE the number of sites, COMMX_WIDE_ROOT, COMMX_WIDE_TOKEN, COMMX_WIDE_SITE,
// COMMX_WIDE_RELAY, ...). Its token is its own (each site's launcher makes the site's), the wan
// tunings (COMMX_WAN_*) and COMMX_TIMEOUT are shared with the site's job; its eager size is
// COMMX_WIDE_TCP_EAGER, 1 MiB unless set.

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "commx/bootstrap.hpp"
#include "commx/coll/flat.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/wan.hpp"

namespace nbody {

using wide_communicator = commx::communicator<commx::transport::wan, commx::coll::flat>;

/// True when this process's site is a job of its own, joined to the others by its leader.
inline bool sites_are_jobs() {
  const char* root = std::getenv("COMMX_WIDE_ROOT");  // NOLINT(concurrency-mt-unsafe): start-up
  return root != nullptr && *root != '\0';
}

/// The wan job's variables: the job's own ones come from COMMX_WIDE_*; a launcher's (Slurm,
/// Open MPI, PMI) describe the site's job and are hidden.
inline std::optional<std::string> wide_variable(const char* name) {
  static constexpr std::array<std::string_view, 13> per_job{
      "COMMX_RANK",  "COMMX_SIZE",      "COMMX_ROOT",      "COMMX_TOKEN",     "COMMX_SITE",
      "COMMX_RELAY", "COMMX_ROOT_SITE", "COMMX_NODE",      "COMMX_RANK_BASE", "COMMX_JOB_SIZE",
      "COMMX_ADDR",  "COMMX_IFACE",     "COMMX_PORT_RANGE"};
  const std::string_view n(name);
  for (std::string_view own : per_job) {
    if (n == own)
      return commx::bootstrap::process_env(("COMMX_WIDE_" + std::string(n.substr(6))).c_str());
  }
  // Eager up to the most tcp allows (1 MiB; site_links sends pieces under it): a rendezvous
  // costs a round trip of the wide link for every message.
  if (n == "COMMX_TCP_EAGER") {
    auto set = commx::bootstrap::process_env("COMMX_WIDE_TCP_EAGER");
    return set ? set : std::optional<std::string>("1048576");
  }
  if (n.starts_with("SLURM_") || n.starts_with("OMPI_") || n.starts_with("PMI_")) {
    return std::nullopt;
  }
  return commx::bootstrap::process_env(name);
}

inline wide_communicator join_wide_link(commx::options opts) {
  return wide_communicator(commx::transport::wan::from_env(wide_variable), opts);
}

}  // namespace nbody
