// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::mpi_wan` ("mpi+wan"): one job over sites as CosmoGrid ran over MPWide: MPI
/// among the ranks of a site (whatever the site's MPI does inside it: shared memory within a
/// node, its interconnect between nodes) and wan's parallel streams between sites (through
/// commx-relay where compute nodes have no route), with one transport's semantics
/// (node_and_network.hpp, its inner level being the site).
///
/// Launch: each site under its own mpirun (or srun), its ranks placed in the job by
/// COMMX_RANK_BASE and COMMX_JOB_SIZE and meeting at COMMX_ROOT, COMMX_SITE naming the site,
/// as for wan (docs/environment.md); one mpirun may also start several sites, its ranks told
/// their site by COMMX_SITE. MPI_COMM_WORLD is split by site; the ranks COMMX_SITE puts at a
/// site must all be in one MPI job. MPI is initialised if the application has not done it.
///
/// Communicators: MPI knows only the communicators it made, so `split` is the stack's own
/// (detail/layered/split_through_levels.hpp): the ranks agree over wan, then MPI_Comm_split
/// makes the site's part under the same context id. As over MPI alone, a rank never leaves a
/// site by itself (mpirun ends the site's job) and splitting waits as MPI waits; a site that
/// goes away is errc::peer_lost to the others, from wan.

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commx/error.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/detail/layered/on_network.hpp"
#include "commx/transport/detail/layered/split_through_levels.hpp"
#include "commx/transport/mpi.hpp"
#include "commx/transport/node_and_network.hpp"
#include "commx/transport/wan.hpp"

namespace commx::transport {

/// MPI within a site, wan's streams between sites (see the file comment).
class mpi_wan : public node_and_network<mpi, wan, level::site> {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "mpi+wan";

  /// Joins over `net` (this rank's wan endpoint in the whole job) and `world` (an MPI
  /// communicator holding every rank of this rank's site, not owned): all ranks meet over wan,
  /// then `world` is split by site. `guard`, if given, is kept while the endpoint lives.
  /// @throws commx::error errc::bootstrap_failed when this site's ranks are not all in `world`;
  ///   as node_and_network::meet and transport::mpi do.
  static mpi_wan over(wan net, MPI_Comm world, std::shared_ptr<init> guard = nullptr) {
    return detail::layered::join_with<mpi_wan>(
        std::move(net), [&](const wan& joined, const std::vector<int>& members) {
          return site_endpoint(joined, members, world, std::move(guard));
        });
  }

  /// Joins the job the environment describes: MPI_COMM_WORLD (MPI initialised if nobody has,
  /// finalised when the endpoint closes), and wan as wan::from_env, with data streams between
  /// sites only.
  static mpi_wan from_env() {
    auto guard = std::make_shared<init>();
    wan::config cfg = detail::wan::config_from_env();
    cfg.streams_within_site = false;
    return over(wan(std::move(cfg)), MPI_COMM_WORLD, std::move(guard));
  }

  /// Collective over `parent`'s ranks: the communicator of the ranks with this `color`
  /// (none for a negative one), ordered by `key`, on both levels (see the file comment).
  /// @throws commx::error as detail::layered::communicators_through_levels::split does.
  context_split split(context_id parent, int color, int key, context_id next_free) {
    return made_.split(network(), inner(), parent, color, key, next_free);
  }

  /// Frees what `split` made for `ctx` and `ctx + 1` (MPI's communicators).
  void release(context_id ctx) noexcept {
    made_.forget(ctx);
    inner().release(ctx);
  }

 private:
  template <class Stack, class Net, class MakeInner>
  friend Stack detail::layered::join_with(Net net, MakeInner&& make_inner);

  // This site's MPI endpoint: `world` split by site, checked to hold exactly `members`.
  static mpi site_endpoint(const wan& net, const std::vector<int>& members, MPI_Comm world,
                           std::shared_ptr<init> guard) {
    MPI_Comm site = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split(world, net.site_of(net.rank()), net.rank(), &site),
                       "MPI_Comm_split");
    int count = 0;
    detail::mpi::check(MPI_Comm_size(site, &count), "MPI_Comm_size");
    std::vector<int> in_mpi(static_cast<std::size_t>(count));
    const int me = net.rank();
    detail::mpi::check(MPI_Allgather(&me, 1, MPI_INT, in_mpi.data(), 1, MPI_INT, site),
                       "MPI_Allgather");
    if (in_mpi != members) {
      (void)MPI_Comm_free(&site);
      throw error(errc::bootstrap_failed,
                  fmt::format("rank {}: COMMX_SITE puts ranks {} at this site, but the MPI job "
                              "holds ranks {} of it: start each site's ranks under one mpirun",
                              me, members, in_mpi));
    }
    mpi inner(site, mpi::receive_path_from_env(), std::move(guard));
    detail::mpi::check(MPI_Comm_free(&site), "MPI_Comm_free");  // `inner` works on duplicates
    return inner;
  }

  mpi_wan(wan net, mpi site, std::vector<int> members)
      : node_and_network(std::move(net), std::move(site), std::move(members)), made_(size()) {}

  detail::layered::communicators_through_levels made_;
};

static_assert(transport<mpi_wan>);

}  // namespace commx::transport
