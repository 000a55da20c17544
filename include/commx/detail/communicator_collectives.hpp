// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator's collectives (communicator.hpp), out of line: each entry point checks its
/// arguments, views its buffers as spans and runs the policy's collective on a port of its own
/// (detail/coll_port.hpp), after comparing the call across ranks when checks ask for it.

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

namespace commx {

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::barrier(deadline until) {
  check_valid("barrier");
  run_collective(signature<std::byte>(stats::op::barrier, -1, detail::call_signature::not_compared),
                 until, [](auto& port) { C::barrier(port); });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline void communicator<T, C, S>::bcast(M&& data, int root, deadline until) {
  check_root(root, "bcast");
  auto elements = detail::elements_of(data);
  using E = element_of<decltype(elements)>;
  run_collective(signature<E>(stats::op::bcast, root, elements.size()), until, [&](auto& port) {
    C::bcast(port, std::span(elements.data(), elements.size()), root);
  });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline void communicator<T, C, S>::reduce(M&& data, Op op, int root, deadline until) {
  check_root(root, "reduce");
  auto elements = detail::elements_of(data);
  check_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  run_reduction(signature<E>(stats::op::reduce, root, elements.size(), op), until,
                [&](auto& port, auto policy) {
                  policy.reduce(port, std::span<E>(elements.data(), elements.size()), op, root);
                });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline void communicator<T, C, S>::allreduce(M&& data, Op op, deadline until) {
  check_valid("allreduce");
  auto elements = detail::elements_of(data);
  check_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  run_reduction(signature<E>(stats::op::allreduce, -1, elements.size(), op), until,
                [&](auto& port, auto policy) {
                  policy.allreduce(port, std::span<E>(elements.data(), elements.size()), op);
                });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::gather(const In& in, Out&& out, int root, deadline until) {
  check_root(root, "gather");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) check_count(got.size(), sent.size() * as_size(size()), "gather", "out");
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::gather, root, sent.size()), until, [&](auto& port) {
    C::gather(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()), root);
  });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::scatter(const In& in, Out&& out, int root, deadline until) {
  check_root(root, "scatter");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) check_count(sent.size(), got.size() * as_size(size()), "scatter", "in");
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::scatter, root, got.size()), until, [&](auto& port) {
    C::scatter(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()), root);
  });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::allgather(const In& in, Out&& out, deadline until) {
  check_valid("allgather");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_count(got.size(), sent.size() * as_size(size()), "allgather", "out");
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::allgather, -1, sent.size()), until, [&](auto& port) {
    C::allgather(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()));
  });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::alltoall(const In& in, Out&& out, deadline until) {
  check_valid("alltoall");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_count(got.size(), sent.size(), "alltoall", "out");
  if (sent.size() % as_size(size()) != 0) {
    throw_error(errc::invalid_argument, where("alltoall", unknown, unknown, sent.size_bytes()),
                fmt::format("{} elements do not split evenly among {} ranks", sent.size(), size()));
  }
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::alltoall, -1, sent.size()), until, [&](auto& port) {
    C::alltoall(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()));
  });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline void communicator<T, C, S>::scan(M&& data, Op op, deadline until) {
  check_valid("scan");
  auto elements = detail::elements_of(data);
  check_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  run_reduction(signature<E>(stats::op::scan, -1, elements.size(), op), until,
                [&](auto& port, auto policy) {
                  policy.scan(port, std::span<E>(elements.data(), elements.size()), op);
                });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M, class Op>
inline void communicator<T, C, S>::exscan(M&& data, Op op, deadline until) {
  check_valid("exscan");
  auto elements = detail::elements_of(data);
  check_op<decltype(elements), Op>();
  using E = element_of<decltype(elements)>;
  run_reduction(signature<E>(stats::op::exscan, -1, elements.size(), op), until,
                [&](auto& port, auto policy) {
                  policy.exscan(port, std::span<E>(elements.data(), elements.size()), op);
                });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::gatherv(const In& in, Out&& out,
                                           std::span<const std::size_t> counts,
                                           std::span<const std::size_t> displs, int root,
                                           deadline until) {
  check_root(root, "gatherv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) {
    check_layout(counts, displs, got.size(), "gatherv", "out");
    check_count(sent.size(), counts[as_size(rank_)], "gatherv", "in");
  }
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::gatherv, root, detail::call_signature::not_compared),
                 until, [&](auto& port) {
                   C::gatherv(port, std::span(sent.data(), sent.size()),
                              std::span(got.data(), got.size()), counts, displs, root);
                 });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::scatterv(const In& in, std::span<const std::size_t> counts,
                                            std::span<const std::size_t> displs, Out&& out,
                                            int root, deadline until) {
  check_root(root, "scatterv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  if (rank_ == root) {
    check_layout(counts, displs, sent.size(), "scatterv", "in");
    check_count(got.size(), counts[as_size(rank_)], "scatterv", "out");
  }
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::scatterv, root, detail::call_signature::not_compared),
                 until, [&](auto& port) {
                   C::scatterv(port, std::span(sent.data(), sent.size()), counts, displs,
                               std::span(got.data(), got.size()), root);
                 });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::allgatherv(const In& in, Out&& out,
                                              std::span<const std::size_t> counts,
                                              std::span<const std::size_t> displs, deadline until) {
  check_valid("allgatherv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_layout(counts, displs, got.size(), "allgatherv", "out");
  check_count(sent.size(), counts[as_size(rank_)], "allgatherv", "in");
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::allgatherv, -1, detail::fingerprint(counts)), until,
                 [&](auto& port) {
                   C::allgatherv(port, std::span(sent.data(), sent.size()),
                                 std::span(got.data(), got.size()), counts, displs);
                 });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out>
inline void communicator<T, C, S>::alltoallv(const In& in, std::span<const std::size_t> send_counts,
                                             std::span<const std::size_t> send_displs, Out&& out,
                                             std::span<const std::size_t> recv_counts,
                                             std::span<const std::size_t> recv_displs,
                                             deadline until) {
  check_valid("alltoallv");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  check_layout(send_counts, send_displs, sent.size(), "alltoallv", "in");
  check_layout(recv_counts, recv_displs, got.size(), "alltoallv", "out");
  using E = element_of<decltype(got)>;
  run_collective(signature<E>(stats::op::alltoallv, -1, detail::call_signature::not_compared),
                 until, [&](auto& port) {
                   C::alltoallv(port, std::span(sent.data(), sent.size()), send_counts, send_displs,
                                std::span(got.data(), got.size()), recv_counts, recv_displs);
                 });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class In, class Out, class Op>
inline void communicator<T, C, S>::reduce_scatter(const In& in, Out&& out,
                                                  std::span<const std::size_t> counts, Op op,
                                                  deadline until) {
  check_valid("reduce_scatter");
  auto sent = detail::elements_of(in);
  auto got = detail::elements_of(out);
  using E = std::remove_const_t<typename decltype(sent)::element_type>;
  check_op<std::span<E>, Op>();
  check_layout(counts, packed(counts), sent.size(), "reduce_scatter", "in");
  check_count(sent.size(), total(counts), "reduce_scatter", "in");
  check_count(got.size(), counts[as_size(rank_)], "reduce_scatter", "out");
  std::vector<E> work(sent.begin(), sent.end());  // policies reduce in place
  run_reduction(signature<E>(stats::op::reduce_scatter, -1, detail::fingerprint(counts), op), until,
                [&](auto& port, auto policy) {
                  policy.reduce_scatter(port, std::span<E>(work), counts, op);
                });
  std::copy_n(work.begin(), got.size(), got.begin());
}

// A reduction runs under C, or under C with rank-order folds when reproducible bits across
// policies were asked for; `body(port, policy)` calls the policy's collective.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class Body>
inline void communicator<T, C, S>::run_reduction(const detail::call_signature& call, deadline until,
                                                 Body&& body) {
  run_collective(call, until, [&](auto& port) {
    if (reduction_ == reduction_order::reproducible) {
      body(port, coll::detail::rank_order_over<C>{});
    } else {
      body(port, C{});
    }
  });
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class Body>
inline void communicator<T, C, S>::run_collective(const detail::call_signature& call,
                                                  deadline until, Body&& body) {
  const auto kind = static_cast<stats::op>(call.kind);
  check_valid(stats::name(kind).data());
  const detail::stopwatch<S> watch;
  if constexpr (S::enabled) state_->stats.on_call(kind);
  const clock::time_point when = until.resolve(timeout_);
  // Every rank numbers its collective calls alike; the number goes into the tags, so what a
  // failed call left in flight can never be taken for a later call's data.
  const std::uint32_t call_number = (*collective_calls_)++;
  if (checks_ == check_level::collective) {
    detail::coll_port<T, S> check(*state_, *group_, ctx_ + 1, rank_, when, kind, call_number,
                                  /*phase=*/1);
    detail::check_same_call(check, call, rank_);
  }
  detail::coll_port<T, S> port(*state_, *group_, ctx_ + 1, rank_, when, kind, call_number);
  body(port);
  if constexpr (S::enabled) state_->stats.add_collective_time(kind, watch.seconds());
}

}  // namespace commx
