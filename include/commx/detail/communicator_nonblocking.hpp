// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The communicator's nonblocking collectives (`ibarrier`, `ibcast`, `ireduce`, `iallreduce`,
/// `igather`, `iscatter`, `iallgather`, `ialltoall`, the v-variants, `iscan`, `iexscan`,
/// `ireduce_scatter`), a base of commx::communicator.
///
/// Each starts its collective and returns a request that `wait`, `test`, `wait_all` and
/// `wait_any` complete as they complete a point-to-point one. The buffers must stay alive and
/// untouched until then (counts and displacements are copied at the start). Every rank starts
/// its collectives, blocking or not, in the same order, as in MPI; a blocking call and its
/// nonblocking form match each other. The collective moves on whenever its rank waits or
/// tests anything, or probes, or sends or receives in a blocking call (MPI's progress rule);
/// it runs on no other thread. Its deadline is that of the `wait` that completes it, and a
/// failure (errc::timeout, errc::peer_lost, errc::collective_mismatch) is thrown by the wait
/// or test that ends it. How: detail/collective_task.hpp.

#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>

namespace commx::detail {

/// A buffer a nonblocking call may keep: an lvalue's, or a view's (it refers elsewhere).
template <class M>
inline constexpr bool outlives_request =
    std::is_lvalue_reference_v<M> || std::ranges::view<std::remove_cvref_t<M>>;

/// The nonblocking collectives of `Communicator`, whose requests are `Request`s.
template <class Communicator, class Request>
class nonblocking_collectives {
 public:
  /// What a nonblocking collective returns.
  using request = Request;

  /// barrier, without blocking.
  [[nodiscard]] request ibarrier() { return self().start(self().barrier_call()); }
  /// bcast, without blocking.
  template <class M>
  [[nodiscard]] request ibcast(M&& data, int root) {
    static_assert(outlives_request<M>, "commx: ibcast needs a buffer that outlives the request");
    return self().start(self().bcast_call(data, root));
  }
  /// reduce, without blocking.
  template <class M, class Op>
  [[nodiscard]] request ireduce(M&& data, Op op, int root) {
    static_assert(outlives_request<M>, "commx: ireduce needs a buffer that outlives the request");
    return self().start(self().reduce_call(data, op, root));
  }
  /// allreduce, without blocking.
  template <class M, class Op>
  [[nodiscard]] request iallreduce(M&& data, Op op) {
    static_assert(outlives_request<M>,
                  "commx: iallreduce needs a buffer that outlives the request");
    return self().start(self().allreduce_call(data, op));
  }
  /// gather, without blocking.
  template <class In, class Out>
  [[nodiscard]] request igather(const In& in, Out&& out, int root) {
    static_assert(outlives_request<Out>, "commx: igather needs a buffer that outlives it");
    return self().start(self().gather_call(in, out, root));
  }
  /// scatter, without blocking.
  template <class In, class Out>
  [[nodiscard]] request iscatter(const In& in, Out&& out, int root) {
    static_assert(outlives_request<Out>, "commx: iscatter needs a buffer that outlives it");
    return self().start(self().scatter_call(in, out, root));
  }
  /// allgather, without blocking.
  template <class In, class Out>
  [[nodiscard]] request iallgather(const In& in, Out&& out) {
    static_assert(outlives_request<Out>, "commx: iallgather needs a buffer that outlives it");
    return self().start(self().allgather_call(in, out));
  }
  /// alltoall, without blocking.
  template <class In, class Out>
  [[nodiscard]] request ialltoall(const In& in, Out&& out) {
    static_assert(outlives_request<Out>, "commx: ialltoall needs a buffer that outlives it");
    return self().start(self().alltoall_call(in, out));
  }
  /// gatherv, without blocking.
  template <class In, class Out>
  [[nodiscard]] request igatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
                                 std::span<const std::size_t> displs, int root) {
    static_assert(outlives_request<Out>, "commx: igatherv needs a buffer that outlives it");
    return self().start(self().gatherv_call(in, out, counts, displs, root));
  }
  /// scatterv, without blocking.
  template <class In, class Out>
  [[nodiscard]] request iscatterv(const In& in, std::span<const std::size_t> counts,
                                  std::span<const std::size_t> displs, Out&& out, int root) {
    static_assert(outlives_request<Out>, "commx: iscatterv needs a buffer that outlives it");
    return self().start(self().scatterv_call(in, counts, displs, out, root));
  }
  /// allgatherv, without blocking.
  template <class In, class Out>
  [[nodiscard]] request iallgatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
                                    std::span<const std::size_t> displs) {
    static_assert(outlives_request<Out>, "commx: iallgatherv needs a buffer that outlives it");
    return self().start(self().allgatherv_call(in, out, counts, displs));
  }
  /// alltoallv, without blocking.
  template <class In, class Out>
  [[nodiscard]] request ialltoallv(const In& in, std::span<const std::size_t> send_counts,
                                   std::span<const std::size_t> send_displs, Out&& out,
                                   std::span<const std::size_t> recv_counts,
                                   std::span<const std::size_t> recv_displs) {
    static_assert(outlives_request<Out>, "commx: ialltoallv needs a buffer that outlives it");
    return self().start(
        self().alltoallv_call(in, send_counts, send_displs, out, recv_counts, recv_displs));
  }
  /// scan, without blocking.
  template <class M, class Op>
  [[nodiscard]] request iscan(M&& data, Op op) {
    static_assert(outlives_request<M>, "commx: iscan needs a buffer that outlives the request");
    return self().start(self().scan_call(data, op));
  }
  /// exscan, without blocking.
  template <class M, class Op>
  [[nodiscard]] request iexscan(M&& data, Op op) {
    static_assert(outlives_request<M>, "commx: iexscan needs a buffer that outlives the request");
    return self().start(self().exscan_call(data, op));
  }
  /// reduce_scatter, without blocking (`in` is copied at the start).
  template <class In, class Out, class Op>
  [[nodiscard]] request ireduce_scatter(const In& in, Out&& out,
                                        std::span<const std::size_t> counts, Op op) {
    static_assert(outlives_request<Out>, "commx: ireduce_scatter needs a buffer that outlives it");
    return self().start(self().reduce_scatter_call(in, out, counts, op));
  }

 private:
  Communicator& self() { return static_cast<Communicator&>(*this); }
};

}  // namespace commx::detail
