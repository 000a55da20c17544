// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator's collectives (communicator.hpp), out of line. Each collective is prepared
/// once (`*_call`: its arguments checked, its buffers viewed as spans, the policy's collective
/// wrapped as `body(port, policy)`); the blocking form runs it on a port of its own
/// (detail/coll_port.hpp), the nonblocking form on a fiber its request drives
/// (detail/collective_task.hpp). Either compares the call across ranks first when checks ask.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/coll/detail/rank_order.hpp"
#include "commx/detail/call_check.hpp"
#include "commx/detail/coll_port.hpp"
#include "commx/detail/collective_task.hpp"
#include "commx/detail/library_call.hpp"

namespace commx {

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline auto communicator<T, C, S>::barrier_call() {
  check_valid("barrier");
  return detail::make_call<false>(
      detail::signature_of<std::byte>(stats::op::barrier, -1, detail::call_signature::not_compared),
      [](auto& port, auto policy) { policy.barrier(port); });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline auto communicator<T, C, S>::bcast_call(M& data, int root) {
  check_root(root, "bcast");
  auto elements = detail::elements_of(data);
  using E = element_of<decltype(elements)>;
  const std::span<E> d(elements.data(), elements.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::bcast, root, d.size()),
      [d, root](auto& port, auto policy) { policy.bcast(port, d, root); }, d.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline auto communicator<T, C, S>::reduce_call(M& data, Op op, int root) {
  check_root(root, "reduce");
  auto elements = detail::elements_of(data);
  detail::check_reduction_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  const std::span<E> d(elements.data(), elements.size());
  return detail::make_call<true>(
      detail::signature_of<E>(stats::op::reduce, root, d.size(), op),
      [d, op, root](auto& port, auto policy) { policy.reduce(port, d, op, root); }, d.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline auto communicator<T, C, S>::allreduce_call(M& data, Op op) {
  check_valid("allreduce");
  auto elements = detail::elements_of(data);
  detail::check_reduction_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  const std::span<E> d(elements.data(), elements.size());
  return detail::make_call<true>(
      detail::signature_of<E>(stats::op::allreduce, -1, d.size(), op),
      [d, op](auto& port, auto policy) { policy.allreduce(port, d, op); }, d.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::gather_call(const In& in, Out& out, int root) {
  check_root(root, "gather");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) check_count(got.size(), sent.size() * as_size(size()), "gather", "out");
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::gather, root, i.size()),
      [i, o, root](auto& port, auto policy) { policy.gather(port, i, o, root); }, i.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::scatter_call(const In& in, Out& out, int root) {
  check_root(root, "scatter");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) check_count(sent.size(), got.size() * as_size(size()), "scatter", "in");
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::scatter, root, o.size()),
      [i, o, root](auto& port, auto policy) { policy.scatter(port, i, o, root); }, o.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::allgather_call(const In& in, Out& out) {
  check_valid("allgather");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_count(got.size(), sent.size() * as_size(size()), "allgather", "out");
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::allgather, -1, i.size()),
      [i, o](auto& port, auto policy) { policy.allgather(port, i, o); }, i.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::alltoall_call(const In& in, Out& out) {
  check_valid("alltoall");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_count(got.size(), sent.size(), "alltoall", "out");
  if (sent.size() % as_size(size()) != 0) {
    throw_error(errc::invalid_argument, where("alltoall", unknown, unknown, sent.size_bytes()),
                fmt::format("{} elements do not split evenly among {} ranks", sent.size(), size()));
  }
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::alltoall, -1, i.size()),
      [i, o](auto& port, auto policy) { policy.alltoall(port, i, o); }, i.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline auto communicator<T, C, S>::scan_call(M& data, Op op) {
  check_valid("scan");
  auto elements = detail::elements_of(data);
  detail::check_reduction_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  const std::span<E> d(elements.data(), elements.size());
  return detail::make_call<true>(
      detail::signature_of<E>(stats::op::scan, -1, d.size(), op),
      [d, op](auto& port, auto policy) { policy.scan(port, d, op); }, d.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline auto communicator<T, C, S>::exscan_call(M& data, Op op) {
  check_valid("exscan");
  auto elements = detail::elements_of(data);
  detail::check_reduction_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  const std::span<E> d(elements.data(), elements.size());
  return detail::make_call<true>(
      detail::signature_of<E>(stats::op::exscan, -1, d.size(), op),
      [d, op](auto& port, auto policy) { policy.exscan(port, d, op); }, d.empty());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::gatherv_call(const In& in, Out& out,
                                                std::span<const std::size_t> counts,
                                                std::span<const std::size_t> displs, int root) {
  check_root(root, "gatherv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) {
    check_layout(counts, displs, got.size(), "gatherv", "out");
    check_count(sent.size(), counts[as_size(rank_)], "gatherv", "in");
  }
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::gatherv, root, detail::call_signature::not_compared),
      [i, o, c = detail::owned(counts), d = detail::owned(displs), root](auto& port, auto policy) {
        policy.gatherv(port, i, o, std::span<const std::size_t>(c), std::span<const std::size_t>(d),
                       root);
      });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::scatterv_call(const In& in, std::span<const std::size_t> counts,
                                                 std::span<const std::size_t> displs, Out& out,
                                                 int root) {
  check_root(root, "scatterv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) {
    check_layout(counts, displs, sent.size(), "scatterv", "in");
    check_count(got.size(), counts[as_size(rank_)], "scatterv", "out");
  }
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::scatterv, root, detail::call_signature::not_compared),
      [i, o, c = detail::owned(counts), d = detail::owned(displs), root](auto& port, auto policy) {
        policy.scatterv(port, i, std::span<const std::size_t>(c), std::span<const std::size_t>(d),
                        o, root);
      });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::allgatherv_call(const In& in, Out& out,
                                                   std::span<const std::size_t> counts,
                                                   std::span<const std::size_t> displs) {
  check_valid("allgatherv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_layout(counts, displs, got.size(), "allgatherv", "out");
  check_count(sent.size(), counts[as_size(rank_)], "allgatherv", "in");
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  const bool nothing = total(counts) == 0;
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::allgatherv, -1, detail::fingerprint(counts)),
      [i, o, c = detail::owned(counts, nothing), d = detail::owned(displs, nothing)](auto& port,
                                                                                     auto policy) {
        policy.allgatherv(port, i, o, std::span<const std::size_t>(c),
                          std::span<const std::size_t>(d));
      },
      nothing);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline auto communicator<T, C, S>::alltoallv_call(const In& in,
                                                  std::span<const std::size_t> send_counts,
                                                  std::span<const std::size_t> send_displs,
                                                  Out& out,
                                                  std::span<const std::size_t> recv_counts,
                                                  std::span<const std::size_t> recv_displs) {
  check_valid("alltoallv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_layout(send_counts, send_displs, sent.size(), "alltoallv", "in");
  check_layout(recv_counts, recv_displs, got.size(), "alltoallv", "out");
  using E = element_of<decltype(got)>;
  const std::span<const E> i(sent.data(), sent.size());
  const std::span<E> o(got.data(), got.size());
  return detail::make_call<false>(
      detail::signature_of<E>(stats::op::alltoallv, -1, detail::call_signature::not_compared),
      [i, o, sc = detail::owned(send_counts), sd = detail::owned(send_displs),
       rc = detail::owned(recv_counts), rd = detail::owned(recv_displs)](auto& port, auto policy) {
        using counts = std::span<const std::size_t>;
        policy.alltoallv(port, i, counts(sc), counts(sd), o, counts(rc), counts(rd));
      });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out, class Op>
inline auto communicator<T, C, S>::reduce_scatter_call(const In& in, Out& out,
                                                       std::span<const std::size_t> counts, Op op) {
  check_valid("reduce_scatter");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  using E = std::remove_const_t<typename decltype(sent)::element_type>;
  detail::check_reduction_op<std::span<E>, Op>();
  check_layout(counts, detail::packed_displacements(counts).view(), sent.size(), "reduce_scatter",
               "in");
  const std::size_t elements = total(counts);
  check_count(sent.size(), elements, "reduce_scatter", "in");
  check_count(got.size(), counts[as_size(rank_)], "reduce_scatter", "out");
  const std::span<E> o(got.data(), got.size());
  // Policies reduce in place: into a copy of `in`, whose own block then goes to `out`.
  const bool nothing = elements == 0;
  return detail::make_call<true>(
      detail::signature_of<E>(stats::op::reduce_scatter, -1, detail::fingerprint(counts), op),
      [work = std::vector<E>(sent.begin(), sent.end()), o, c = detail::owned(counts, nothing), op](
          auto& port, auto policy) mutable {
        policy.reduce_scatter(port, std::span<E>(work), std::span<const std::size_t>(c), op);
        std::copy_n(work.begin(), o.size(), o.begin());
      },
      nothing);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out, class Op>
inline void communicator<T, C, S>::reduce_scatter_block(const In& in, Out&& out, Op op,
                                                        deadline until) {
  // Every rank passes the same block size, so an empty block here is empty everywhere:
  // unless the call is compared across ranks, it is numbered and done, as MPI's own.
  const std::size_t block = detail::elements_of(out).size();
  if (block == 0 && checks_ != check_level::collective) {
    check_valid("reduce_scatter");
    check_count(detail::elements_of(in).size(), 0, "reduce_scatter", "in");
    number_call(stats::op::reduce_scatter);
    return;
  }
  // In place up to 64 ranks: a count-0 call then allocates nothing.
  const coll::detail::scratch<std::size_t, detail::in_place_counts> counts(as_size(size()));
  std::ranges::fill(counts.view(), block);
  reduce_scatter(in, std::forward<Out>(out), std::span<const std::size_t>(counts.view()), op,
                 until);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline std::uint32_t communicator<T, C, S>::number_call(stats::op kind) {
  if (group_->revoked()) [[unlikely]]
    reject_peer(unknown, unknown, peer_role::rank, stats::name(kind).data());
  if constexpr (S::enabled) state_->stats.on_call(kind);
  // In the tags, the number keeps what a failed call left in flight from being taken for a
  // later call's data.
  return (*collective_calls_)++;
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class Call>
inline void communicator<T, C, S>::run(Call call, deadline until) {
  [[maybe_unused]] const auto inside = detail::library_call(state_->endpoint);
  const auto kind = static_cast<stats::op>(call.signature.kind);
  const detail::stopwatch<S> watch;
  const std::uint32_t call_number = number_call(kind);
  // Resolved only when a message has to wait: a call that moves nothing and compares nothing
  // reads no clock (and costs what MPI's own count-0 calls cost).
  detail::call_deadline when(until, timeout_);
  if (checks_ == check_level::collective) {
    detail::coll_port<T, S> check(*state_, *group_, ctx_ + 1, rank_, &when, kind, call_number,
                                  /*phase=*/1);
    detail::check_same_call(check, call.signature, rank_);
  }
  if (call.moves_nothing) return;
  detail::coll_port<T, S> port(*state_, *group_, ctx_ + 1, rank_, &when, kind, call_number);
  // A reduction runs under C, or under C with rank-order folds when reproducible bits across
  // policies were asked for.
  if (Call::reduces && reduction_ == reduction_order::reproducible) {
    call.body(port, coll::detail::rank_order_over<C>{});
  } else {
    call.body(port, C{});
  }
  if constexpr (S::enabled) state_->stats.add_collective_time(kind, watch.seconds());
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class Call>
inline auto communicator<T, C, S>::start(Call call) -> request {
  const auto kind = static_cast<stats::op>(call.signature.kind);
  const std::uint32_t call_number = number_call(kind);  // numbered when started, as MPI
  request req = make_request(kind, where(stats::name(kind).data(), unknown, unknown, 0), false);
  // The code holds the rank's state and group itself: the communicator may go first.
  auto code = [state = state_, members = group_, ctx = ctx_ + 1, rank = rank_, kind, call_number,
               compare = checks_ == check_level::collective,
               in_rank_order = Call::reduces && reduction_ == reduction_order::reproducible,
               call = std::move(call)](detail::collective_driver& driver) mutable {
    if (compare) {
      detail::coll_port<T, S> check(*state, *members, ctx, rank, nullptr, kind, call_number,
                                    /*phase=*/1, &driver);
      detail::check_same_call(check, call.signature, rank);
    }
    if (call.moves_nothing) return;
    detail::coll_port<T, S> port(*state, *members, ctx, rank, nullptr, kind, call_number,
                                 /*phase=*/0, &driver);
    using policy = typename coll::nonblocking_of<C>::type;
    if (in_rank_order) {
      call.body(port, coll::detail::rank_order_over<policy>{});
    } else {
      call.body(port, policy{});
    }
  };
  req.task_ =
      std::make_unique<detail::fiber_collective<decltype(code)>>(std::move(code), state_->running);
  req.active_ = true;
  (void)req.task_->advance();  // posts its first messages now, as MPI's would
  return req;
}

}  // namespace commx
