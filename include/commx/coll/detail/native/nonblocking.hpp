// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::native::nonblocking`: what a nonblocking collective runs over coll::native. Each
/// collective starts MPI's own nonblocking form (MPI_Iallreduce, MPI_Ibcast, ...,
/// MPI_Ireduce_scatter) and waits for it through the port, which hands control back while it
/// is in flight. Included by coll/native.hpp only.
///
/// Reductions with an op of the user's run binomial's schedule over MPI point-to-point
/// instead: MPI would call the op through native's per-type op pointer, and two collectives
/// in flight at once could not each keep their own. MPI cannot withdraw a collective, so the
/// call's deadline does not bound MPI's part, as with native's blocking collectives.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/native.hpp"

namespace commx::coll {

struct native::nonblocking : native {
  template <class Port>
  static void barrier(Port& p) {
    started r(p, "MPI_Ibarrier");
    check(p, MPI_Ibarrier(comm(p), &r.handle), r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    started r(p, "MPI_Ibcast");
    check(p, MPI_Ibcast(data.data(), count(data, "ibcast"), type<E>(), root, comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    if (!predefined<Op, E>()) {
      binomial::reduce(p, data, op, root);
      return;
    }
    const detail::native::reduction_op<Op, E> mpi_op(op);
    const bool at_root = p.rank() == root;
    // A copy at every root, not only MPICH's (see native::reduce): MPI_IN_PLACE is what
    // MPICH's nonblocking reduce mishandles too, and a copy costs little next to the call.
    std::vector<E> copy;
    const void* in = data.data();
    if (at_root) {
      copy.assign(data.begin(), data.end());
      in = copy.data();
    }
    started r(p, "MPI_Ireduce");
    check(p,
          MPI_Ireduce(in, at_root ? data.data() : nullptr, count(data, "ireduce"), type<E>(),
                      mpi_op.handle(), root, comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    if (!predefined<Op, E>()) {
      binomial::allreduce(p, data, op);
      return;
    }
    const detail::native::reduction_op<Op, E> mpi_op(op);
    started r(p, "MPI_Iallreduce");
    check(p,
          MPI_Iallreduce(MPI_IN_PLACE, data.data(), count(data, "iallreduce"), type<E>(),
                         mpi_op.handle(), comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void gather(Port& p, std::span<const E> in, std::span<E> out, int root) {
    const int n = count(in, "igather");
    started r(p, "MPI_Igather");
    check(p,
          MPI_Igather(in.data(), n, type<E>(), out.data(), n, type<E>(), root, comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void scatter(Port& p, std::span<const E> in, std::span<E> out, int root) {
    const int n = count(out, "iscatter");
    started r(p, "MPI_Iscatter");
    check(p,
          MPI_Iscatter(in.data(), n, type<E>(), out.data(), n, type<E>(), root, comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    const int n = count(in, "iallgather");
    started r(p, "MPI_Iallgather");
    check(p, MPI_Iallgather(in.data(), n, type<E>(), out.data(), n, type<E>(), comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void alltoall(Port& p, std::span<const E> in, std::span<E> out) {
    const int n = count_of(in.size() / static_cast<std::size_t>(p.size()), "ialltoall");
    started r(p, "MPI_Ialltoall");
    check(p, MPI_Ialltoall(in.data(), n, type<E>(), out.data(), n, type<E>(), comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void gatherv(Port& p, std::span<const E> in, std::span<E> out,
                      std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                      int root) {
    const bool at_root = p.rank() == root;
    const std::vector<int> c = at_root ? ints(counts, "igatherv") : std::vector<int>{};
    const std::vector<int> d = at_root ? ints(displs, "igatherv") : std::vector<int>{};
    started r(p, "MPI_Igatherv");
    check(p,
          MPI_Igatherv(in.data(), count(in, "igatherv"), type<E>(), out.data(), c.data(), d.data(),
                       type<E>(), root, comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void scatterv(Port& p, std::span<const E> in, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, std::span<E> out, int root) {
    const bool at_root = p.rank() == root;
    const std::vector<int> c = at_root ? ints(counts, "iscatterv") : std::vector<int>{};
    const std::vector<int> d = at_root ? ints(displs, "iscatterv") : std::vector<int>{};
    started r(p, "MPI_Iscatterv");
    check(p,
          MPI_Iscatterv(in.data(), c.data(), d.data(), type<E>(), out.data(),
                        count(out, "iscatterv"), type<E>(), root, comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void allgatherv(Port& p, std::span<const E> in, std::span<E> out,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs) {
    const std::size_t own = displs[static_cast<std::size_t>(p.rank())];
    if (p.size() == 1) {  // as native::allgatherv: MPICH 4.0 copies nothing on one rank
      detail::place_own_block(in, out, own);
      return;
    }
    const std::vector<int> c = ints(counts, "iallgatherv");
    const std::vector<int> d = ints(displs, "iallgatherv");
    started r(p, "MPI_Iallgatherv");
    check(p,
          MPI_Iallgatherv(allgatherv_source(in, out, own), count(in, "iallgatherv"), type<E>(),
                          out.data(), c.data(), d.data(), type<E>(), comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E>
  static void alltoallv(Port& p, std::span<const E> in, std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, std::span<E> out,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs) {
    const std::vector<int> sc = ints(send_counts, "ialltoallv");
    const std::vector<int> sd = ints(send_displs, "ialltoallv");
    const std::vector<int> rc = ints(recv_counts, "ialltoallv");
    const std::vector<int> rd = ints(recv_displs, "ialltoallv");
    started r(p, "MPI_Ialltoallv");
    check(p,
          MPI_Ialltoallv(in.data(), sc.data(), sd.data(), type<E>(), out.data(), rc.data(),
                         rd.data(), type<E>(), comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E, class Op>
  static void scan(Port& p, std::span<E> data, Op op) {
    if (!predefined<Op, E>()) {
      binomial::scan(p, data, op);
      return;
    }
    const detail::native::reduction_op<Op, E> mpi_op(op);
    started r(p, "MPI_Iscan");
    check(p,
          MPI_Iscan(MPI_IN_PLACE, data.data(), count(data, "iscan"), type<E>(), mpi_op.handle(),
                    comm(p), &r.handle),
          r.call);
    p.await(r);
  }

  template <class Port, class E, class Op>
  static void exscan(Port& p, std::span<E> data, Op op) {
    if (!predefined<Op, E>()) {
      binomial::exscan(p, data, op);
      return;
    }
    const detail::native::reduction_op<Op, E> mpi_op(op);
    std::vector<E> kept;  // as native::exscan: rank 0 keeps its data
    if (p.rank() == 0) kept.assign(data.begin(), data.end());
    started r(p, "MPI_Iexscan");
    check(p,
          MPI_Iexscan(MPI_IN_PLACE, data.data(), count(data, "iexscan"), type<E>(), mpi_op.handle(),
                      comm(p), &r.handle),
          r.call);
    p.await(r);
    if (p.rank() == 0) std::ranges::copy(kept, data.begin());
  }

  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    if (!predefined<Op, E>()) {
      binomial::reduce_scatter(p, data, counts, op);
      return;
    }
    const detail::native::reduction_op<Op, E> mpi_op(op);
    const std::vector<int> c = ints(counts, "ireduce_scatter");
    // From a copy, not MPI_IN_PLACE: MPICH 4.0's nonblocking reduce-scatter moves a rank's
    // block to the front of an in-place buffer with an overlapping memcpy and aborts.
    const std::vector<E> in(data.begin(), data.end());
    started r(p, "MPI_Ireduce_scatter");
    check(p,
          MPI_Ireduce_scatter(in.data(), data.data(), c.data(), type<E>(), mpi_op.handle(), comm(p),
                              &r.handle),
          r.call);
    p.await(r);
  }

 private:
  // One MPI nonblocking collective, as the port's `await` takes it.
  struct started {
    template <class Port>
    started(Port& p, const char* name) : call(name), rank(p.rank()) {}
    bool test() {
      int done = 0;
      commx::detail::mpi::check(MPI_Test(&handle, &done, MPI_STATUS_IGNORE), call, where());
      return done != 0;
    }
    void wait() { commx::detail::mpi::check(MPI_Wait(&handle, MPI_STATUS_IGNORE), call, where()); }
    [[nodiscard]] error_context where() const { return {rank, unknown, unknown, 0, call}; }

    MPI_Request handle = MPI_REQUEST_NULL;
    const char* call;
    int rank;
  };

  template <class Op, class E>
  static bool predefined() {
    return detail::native::predefined_op<Op, std::remove_const_t<E>>() != MPI_OP_NULL;
  }
};

}  // namespace commx::coll
