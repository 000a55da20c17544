// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::native`: every collective handed whole to the MPI library (MPI_Allreduce,
/// MPI_Bcast, MPI_Reduce_scatter, MPI_Scan, MPI_Exscan, the "v" variants, ...), which knows the
/// machine better than any algorithm written over point-to-point. Only over transport::mpi:
/// `communicator<transport::inproc, coll::native>` does not compile.
///
/// Data goes as MPI's own types where C++ has them (double as MPI_DOUBLE, std::int32_t as
/// MPI_INT32_T, ...) and as contiguous bytes otherwise. Reductions with std::plus,
/// std::multiplies, op::max, op::min and the bitwise ops on arithmetic types are MPI_SUM,
/// MPI_PROD, MPI_MAX, MPI_MIN, MPI_BAND, ...; any other op becomes an MPI_Op_create user op,
/// commutative exactly when `commx::commutative<Op, E>` says so, so MPI folds non-commutative
/// ops in rank order. MPI chooses the order of commutative reductions: results may differ in
/// the last bits from the other policies' (set reduction_order::reproducible for rank order).
///
/// Each collective runs on the communicator's collectives context (an MPI communicator of its
/// own) and blocks as MPI blocks: the call's deadline does not apply, and ranks that pass
/// different counts get whatever MPI makes of it (an error, or a hang), unless the communicator
/// checks calls (check_level::collective), which catches them before MPI is called. Messages
/// are not counted in stats (MPI moves them); calls and time are.
///
/// Nonblocking collectives run `native::nonblocking` (coll/detail/native/nonblocking.hpp):
/// MPI's own MPI_Iallreduce, MPI_Ibcast, ... .

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/coll/detail/blocks.hpp"
#include "commx/coll/detail/native/types.hpp"
#include "commx/transport/detail/mpi/call.hpp"
#include "commx/transport/mpi.hpp"

namespace commx::coll {

/// Every collective handed whole to the MPI library; only over transport::mpi.
struct native {
  /// The policy's name, as benches and examples print it.
  static constexpr std::string_view name = "native";
  /// How the policy works, in one line.
  static constexpr std::string_view description =
      "the MPI library's own collectives (MPI_Allreduce, MPI_Bcast, ...), over transport::mpi";

  /// Only over transport::mpi.
  template <class Transport>
  static constexpr bool supports = std::is_same_v<Transport, transport::mpi>;

  /// What nonblocking collectives run: MPI's nonblocking forms.
  struct nonblocking;

  /// MPI_Barrier.
  template <class Port>
  static void barrier(Port& p) {
    check(p, MPI_Barrier(comm(p)), "MPI_Barrier");
  }

  /// MPI_Bcast.
  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    check(p, MPI_Bcast(data.data(), count(data, "bcast"), type<E>(), root, comm(p)), "MPI_Bcast");
  }

  /// MPI_Reduce (in place at the root).
  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    const detail::native::reduction_op<Op, E> mpi_op(op);
    const bool at_root = p.rank() == root;
    const void* in = at_root ? MPI_IN_PLACE : data.data();
#ifdef MPICH_NUMVERSION
    // MPICH 4.0's MPI_Reduce crashes with MPI_IN_PLACE at a root other than 0 (its
    // reduce-scatter-gather algorithm, a few KiB and up): that root sends from a copy.
    std::vector<E> copy;
    if (at_root && root != 0) {
      copy.assign(data.begin(), data.end());
      in = copy.data();
    }
#endif
    check(p,
          MPI_Reduce(in, at_root ? data.data() : nullptr, count(data, "reduce"), type<E>(),
                     mpi_op.handle(), root, comm(p)),
          "MPI_Reduce");
  }

  /// MPI_Allreduce in place.
  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    const detail::native::reduction_op<Op, E> mpi_op(op);
    check(p,
          MPI_Allreduce(MPI_IN_PLACE, data.data(), count(data, "allreduce"), type<E>(),
                        mpi_op.handle(), comm(p)),
          "MPI_Allreduce");
  }

  /// MPI_Gather.
  template <class Port, class E>
  static void gather(Port& p, std::span<const E> in, std::span<E> out, int root) {
    const int n = count(in, "gather");
    check(p, MPI_Gather(in.data(), n, type<E>(), out.data(), n, type<E>(), root, comm(p)),
          "MPI_Gather");
  }

  /// MPI_Scatter.
  template <class Port, class E>
  static void scatter(Port& p, std::span<const E> in, std::span<E> out, int root) {
    const int n = count(out, "scatter");
    check(p, MPI_Scatter(in.data(), n, type<E>(), out.data(), n, type<E>(), root, comm(p)),
          "MPI_Scatter");
  }

  /// MPI_Allgather.
  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    const int n = count(in, "allgather");
    check(p, MPI_Allgather(in.data(), n, type<E>(), out.data(), n, type<E>(), comm(p)),
          "MPI_Allgather");
  }

  /// MPI_Alltoall.
  template <class Port, class E>
  static void alltoall(Port& p, std::span<const E> in, std::span<E> out) {
    const int n = count_of(in.size() / static_cast<std::size_t>(p.size()), "alltoall");
    check(p, MPI_Alltoall(in.data(), n, type<E>(), out.data(), n, type<E>(), comm(p)),
          "MPI_Alltoall");
  }

  /// MPI_Scan in place.
  template <class Port, class E, class Op>
  static void scan(Port& p, std::span<E> data, Op op) {
    const detail::native::reduction_op<Op, E> mpi_op(op);
    check(p,
          MPI_Scan(MPI_IN_PLACE, data.data(), count(data, "scan"), type<E>(), mpi_op.handle(),
                   comm(p)),
          "MPI_Scan");
  }

  /// Rank 0's data is left as it was (MPI leaves it undefined, so rank 0 keeps a copy).
  template <class Port, class E, class Op>
  static void exscan(Port& p, std::span<E> data, Op op) {
    const detail::native::reduction_op<Op, E> mpi_op(op);
    std::vector<E> kept;
    if (p.rank() == 0) kept.assign(data.begin(), data.end());
    check(p,
          MPI_Exscan(MPI_IN_PLACE, data.data(), count(data, "exscan"), type<E>(), mpi_op.handle(),
                     comm(p)),
          "MPI_Exscan");
    if (p.rank() == 0) std::ranges::copy(kept, data.begin());
  }

  /// MPI_Gatherv.
  template <class Port, class E>
  static void gatherv(Port& p, std::span<const E> in, std::span<E> out,
                      std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                      int root) {
    const bool at_root = p.rank() == root;
    const std::vector<int> c = at_root ? ints(counts, "gatherv") : std::vector<int>{};
    const std::vector<int> d = at_root ? ints(displs, "gatherv") : std::vector<int>{};
    check(p,
          MPI_Gatherv(in.data(), count(in, "gatherv"), type<E>(), out.data(), c.data(), d.data(),
                      type<E>(), root, comm(p)),
          "MPI_Gatherv");
  }

  /// MPI_Scatterv.
  template <class Port, class E>
  static void scatterv(Port& p, std::span<const E> in, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, std::span<E> out, int root) {
    const bool at_root = p.rank() == root;
    const std::vector<int> c = at_root ? ints(counts, "scatterv") : std::vector<int>{};
    const std::vector<int> d = at_root ? ints(displs, "scatterv") : std::vector<int>{};
    check(p,
          MPI_Scatterv(in.data(), c.data(), d.data(), type<E>(), out.data(), count(out, "scatterv"),
                       type<E>(), root, comm(p)),
          "MPI_Scatterv");
  }

  /// MPI_Allgatherv.
  template <class Port, class E>
  static void allgatherv(Port& p, std::span<const E> in, std::span<E> out,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs) {
    const std::size_t own = displs[static_cast<std::size_t>(p.rank())];
    if (p.size() == 1) {  // MPICH 4.0's MPI_Allgatherv copies nothing on one rank
      detail::place_own_block(in, out, own);
      return;
    }
    const std::vector<int> c = ints(counts, "allgatherv");
    const std::vector<int> d = ints(displs, "allgatherv");
    check(p,
          MPI_Allgatherv(allgatherv_source(in, out, own), count(in, "allgatherv"), type<E>(),
                         out.data(), c.data(), d.data(), type<E>(), comm(p)),
          "MPI_Allgatherv");
  }

  /// MPI_Alltoallv.
  template <class Port, class E>
  static void alltoallv(Port& p, std::span<const E> in, std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, std::span<E> out,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs) {
    const std::vector<int> sc = ints(send_counts, "alltoallv");
    const std::vector<int> sd = ints(send_displs, "alltoallv");
    const std::vector<int> rc = ints(recv_counts, "alltoallv");
    const std::vector<int> rd = ints(recv_displs, "alltoallv");
    check(p,
          MPI_Alltoallv(in.data(), sc.data(), sd.data(), type<E>(), out.data(), rc.data(),
                        rd.data(), type<E>(), comm(p)),
          "MPI_Alltoallv");
  }

  /// MPI_Reduce_scatter in place: block r of the reduction lands at the front of rank r's data.
  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    const detail::native::reduction_op<Op, E> mpi_op(op);
    const std::vector<int> c = ints(counts, "reduce_scatter");
    check(p,
          MPI_Reduce_scatter(MPI_IN_PLACE, data.data(), c.data(), type<E>(), mpi_op.handle(),
                             comm(p)),
          "MPI_Reduce_scatter");
  }

 private:
  // The MPI communicator of the port's context: the communicator lends its collectives
  // context, which transport::mpi keeps as an MPI communicator of its own.
  template <class Port>
  static MPI_Comm comm(Port& p) {
    return p.endpoint().communicator_of(p.context());
  }

  template <class Port>
  static void check(Port& p, int code, const char* call) {
    commx::detail::mpi::check(code, call, {p.rank(), unknown, unknown, 0, call});
  }

  template <class E>
  static MPI_Datatype type() {
    return detail::native::datatype<std::remove_const_t<E>>();
  }

  template <class E>
  static int count(std::span<E> data, const char* operation) {
    return count_of(data.size(), operation);
  }
  static int count_of(std::size_t n, const char* operation) {
    return detail::native::count_of(n, operation);
  }

  // What an allgatherv sends from: MPI_IN_PLACE where `in` is this rank's own block of `out`
  // already, since MPI forbids aliased buffers.
  template <class E>
  static const void* allgatherv_source(std::span<const E> in, std::span<E> out, std::size_t own) {
    return in.data() == out.data() + own ? MPI_IN_PLACE : in.data();
  }

  static std::vector<int> ints(std::span<const std::size_t> values, const char* operation) {
    std::vector<int> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = count_of(values[i], operation);
    return out;
  }
};

}  // namespace commx::coll

#include "commx/coll/detail/native/nonblocking.hpp"  // IWYU pragma: export
