// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::communicator<Transport, Collectives, Stats>`: a group of ranks that exchange typed
/// messages over a transport and run collectives through a policy.
///
/// Point-to-point: `send`, `recv`, `isend`, `irecv`, `sendrecv`, `probe`, `iprobe`. A message
/// is any transferable value (serialize.hpp): trivially copyable values and contiguous ranges
/// of them go as their bytes without a copy; other types go through cereal. Receives match on
/// (source, tag), either of which may be `any_source`/`any_tag`; messages from one source with
/// one tag arrive in the order they were sent.
///
/// Every blocking call takes a `deadline` last; by default the communicator's timeout applies.
/// A call that misses it raises errc::timeout and withdraws what it had pending itself
/// (`wait_all`/`wait_any` leave the caller's other requests as they were).
///
/// Sub-communicators: `split(color, key)` and `split_by_node()`; messages of different
/// communicators never match each other.
///
/// Thread safety: a communicator (and every communicator split from it) is used by one thread
/// at a time. Copies share the same rank: they are handles, not new communicators.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/coll/detail/rank_order.hpp"
#include "commx/coll/flat.hpp"
#include "commx/deadline.hpp"
#include "commx/detail/call_check.hpp"
#include "commx/detail/coll_port.hpp"
#include "commx/detail/rank_state.hpp"
#include "commx/error.hpp"
#include "commx/options.hpp"
#include "commx/request.hpp"
#include "commx/serialize.hpp"
#include "commx/stats.hpp"
#include "commx/transport/concept.hpp"

namespace commx {

/// The color that leaves a rank out of every communicator `split` makes.
inline constexpr int undefined_color = -1;

namespace detail {

template <class Span>
using span_element = std::remove_const_t<typename Span::element_type>;

}  // namespace detail

/// A group of ranks that exchange typed messages over transport `T` and run collectives
/// through policy `C`, counting what they do with `S` (see the file comment).
/// @tparam T the transport (transport::inproc, shm, tcp, wan, mpi).
/// @tparam C the collectives policy (coll::flat, binomial, ring, hierarchical, tuned, native).
/// @tparam S the stats policy (stats::none costs nothing; stats::counting counts).
///
/// Thread safety: a communicator and the communicators split from it are used by one thread at
/// a time; different ranks' communicators may be used concurrently.
template <transport::transport T, coll::collectives<T> C = coll::flat,
          stats::policy S = stats::none>
class communicator {
 public:
  /// The transport, `T`.
  using transport_type = T;
  /// The collectives policy, `C`.
  using collectives_type = C;
  /// The stats policy, `S`.
  using stats_type = S;
  /// What isend and irecv return.
  using request = commx::request<T, S>;

  /// A null communicator: what `split` gives a rank with `undefined_color`.
  communicator() = default;

  /// The world communicator over a transport endpoint.
  explicit communicator(T endpoint, options opts = {})
      : state_(std::make_shared<detail::rank_state<T, S>>(std::move(endpoint))),
        group_(std::make_shared<const detail::group>(state_->endpoint.size())),
        ctx_(0),
        rank_(state_->endpoint.rank()),
        collective_calls_(std::make_shared<std::uint32_t>(0)),
        timeout_(opts.timeout),
        checks_(opts.checks),
        reduction_(opts.reduction) {}

  /// The world communicator of a job started by commxrun, srun or mpirun.
  static communicator from_env(options opts = {}) requires requires { T::from_env(); }
  { return communicator(T::from_env(), opts); }

  /// Whether this is a null communicator (default-constructed, or split with
  /// undefined_color): every other call on it throws errc::invalid_argument.
  [[nodiscard]] bool is_null() const { return state_ == nullptr; }
  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const { return rank_; }
  /// The number of ranks (0 for a null communicator).
  [[nodiscard]] int size() const { return group_ ? group_->size() : 0; }
  /// Node id of `peer`: ranks with equal ids share a node.
  [[nodiscard]] int node_of(int peer) const {
    check_rank(peer, "node_of");
    return state_->endpoint.node_of(group_->world_of(peer));
  }
  /// `peer`'s rank in the world communicator.
  [[nodiscard]] int world_rank_of(int peer) const {
    check_rank(peer, "world_rank_of");
    return group_->world_of(peer);
  }
  /// How long a call waits when it is given no deadline (options::timeout).
  [[nodiscard]] clock::duration timeout() const { return timeout_; }
  /// Sets timeout() for later calls on this communicator.
  void set_timeout(clock::duration timeout) { timeout_ = timeout; }
  /// How much collectives check before they move data (options::checks).
  [[nodiscard]] check_level checks() const { return checks_; }
  /// Sets checks(); every rank must set the same level.
  void set_checks(check_level level) { checks_ = level; }
  /// The order floating-point reductions combine in (options::reduction).
  [[nodiscard]] reduction_order reduction() const { return reduction_; }
  /// Sets reduction(); every rank must set the same order.
  void set_reduction(reduction_order order) { reduction_ = order; }

  /// This rank's transport endpoint, for what only that transport offers (wan::retune, ...).
  [[nodiscard]] T& transport() {
    check_valid("transport");
    return state_->endpoint;
  }
  /// This rank's counters, shared by every communicator split from the same world.
  [[nodiscard]] S& stats() {
    check_valid("stats");
    return state_->stats;
  }
  /// This rank's counters, shared by every communicator split from the same world.
  [[nodiscard]] const S& stats() const {
    check_valid("stats");
    return state_->stats;
  }

  // --- point-to-point ---------------------------------------------------------------------

  /// Sends `message` to `dest` with `tag`, returning once its buffer may be reused.
  /// @throws commx::error errc::invalid_argument (rank or tag), errc::peer_lost, errc::timeout.
  template <transferable M>
  void send(int dest, int tag, const M& message, deadline until = {}) {
    send_now(dest, tag, message, until, stats::op::send);
  }

  /// Receives into `message` (see serialize.hpp for how each type is filled).
  /// @throws commx::error errc::truncated (nothing written, the message stays queued),
  ///   errc::type_mismatch, errc::serialization_failed, errc::peer_lost, errc::timeout,
  ///   errc::invalid_argument.
  template <transferable M>
  status recv(int source, int tag, M&& message, deadline until = {}) {
    if constexpr (transport::blocking_recv<T>) {
      return recv_now(source, tag, message, until, stats::op::recv);
    } else {
      request req = post_recv(source, tag, message, stats::op::recv);
      return req.wait(until);
    }
  }

  /// Starts a send; `message` must stay alive and unchanged until the request completes
  /// (serialized messages are encoded at once and need not).
  template <transferable M>
  [[nodiscard]] request isend(int dest, int tag, M&& message) {
    static_assert(std::is_lvalue_reference_v<M> || std::ranges::view<std::remove_cvref_t<M>> ||
                      transfer_mode_of<M> == transfer_mode::serialized,
                  "commx: isend sends from the caller's buffer, which must outlive the request: "
                  "pass an lvalue or a span, not a temporary (or use send)");
    return post_send(dest, tag, message, stats::op::isend);
  }

  /// Starts a receive into `message`, which must outlive the request.
  template <transferable M>
  [[nodiscard]] request irecv(int source, int tag, M&& message) {
    static_assert(
        std::is_lvalue_reference_v<M> || std::ranges::view<std::remove_cvref_t<M>>,
        "commx: irecv needs a buffer that outlives the request: pass an lvalue or a span");
    return post_recv(source, tag, message, stats::op::irecv);
  }

  /// Sends `out` to `dest` and receives `in` from `source` at once, so that a ring of
  /// sendrecvs cannot deadlock.
  template <transferable Out, transferable In>
  status sendrecv(int dest, int send_tag, const Out& out, int source, int recv_tag, In&& in,
                  deadline until = {}) {
    const clock::time_point when = until.resolve(timeout_);
    request incoming = post_recv(source, recv_tag, in, stats::op::sendrecv);
    send_now(dest, send_tag, out, when, stats::op::sendrecv);
    return incoming.wait(when);
  }

  /// Blocks until a message matching (source, tag) is queued and returns its status, without
  /// receiving it.
  status probe(int source, int tag, deadline until = {}) {
    const clock::time_point when = until.resolve(timeout_);
    const detail::stopwatch<S> watch;
    check_source(source, tag, "probe");
    if constexpr (S::enabled) state_->stats.on_call(stats::op::probe);
    for (;;) {
      const std::uint64_t seen = state_->endpoint.event_count();
      if (auto found = find_queued(source, tag, "probe")) {
        if constexpr (S::enabled) state_->stats.add_wait_time(stats::op::probe, watch.seconds());
        return *found;
      }
      if (clock::now() >= when) {
        throw_error(errc::timeout, where("probe", source, tag, 0),
                    "no matching message before the deadline");
      }
      state_->endpoint.wait_for_event(seen, when);
    }
  }

  /// The status of the first queued message matching (source, tag), if any.
  std::optional<status> iprobe(int source, int tag) {
    check_source(source, tag, "iprobe");
    if constexpr (S::enabled) state_->stats.on_call(stats::op::probe);
    return find_queued(source, tag, "iprobe");
  }

  // --- collectives ----------------------------------------------------------------------

  /// Returns once every rank has entered.
  /// @throws commx::error errc::timeout when `until` passes first, errc::peer_lost.
  void barrier(deadline until = {}) {
    check_valid("barrier");
    run_collective(
        signature<std::byte>(stats::op::barrier, -1, detail::call_signature::not_compared), until,
        [](auto& port) { C::barrier(port); });
  }

  /// Copies root's `data` (a value or contiguous range) into every rank's.
  template <class M>
  void bcast(M&& data, int root, deadline until = {}) {
    check_root(root, "bcast");
    auto elements = detail::elements_of(data);
    using E = element_of<decltype(elements)>;
    run_collective(signature<E>(stats::op::bcast, root, elements.size()), until, [&](auto& port) {
      C::bcast(port, std::span(elements.data(), elements.size()), root);
    });
  }

  /// In place: root's `data` becomes the element-wise `op` of every rank's `data`.
  template <class M, class Op>
  void reduce(M&& data, Op op, int root, deadline until = {}) {
    check_root(root, "reduce");
    auto elements = detail::elements_of(data);
    check_op<decltype(elements), Op>();
    using E = element_of<decltype(elements)>;
    run_reduction(signature<E>(stats::op::reduce, root, elements.size(), op), until,
                  [&](auto& port, auto policy) {
                    policy.reduce(port, std::span<E>(elements.data(), elements.size()), op, root);
                  });
  }

  /// In place: every rank's `data` becomes the element-wise `op` of every rank's `data`.
  template <class M, class Op>
  void allreduce(M&& data, Op op, deadline until = {}) {
    check_valid("allreduce");
    auto elements = detail::elements_of(data);
    check_op<decltype(elements), Op>();
    using E = element_of<decltype(elements)>;
    run_reduction(signature<E>(stats::op::allreduce, -1, elements.size(), op), until,
                  [&](auto& port, auto policy) {
                    policy.allreduce(port, std::span<E>(elements.data(), elements.size()), op);
                  });
  }

  /// The reduction of one value per rank, returned on every rank.
  template <raw_scalar V, class Op>
  V allreduce_value(V value, Op op, deadline until = {}) {
    allreduce(value, op, until);
    return value;
  }

  /// Root's `out` (p times `in`'s size) receives every rank's `in` in rank order; `out` is
  /// ignored on other ranks.
  template <class In, class Out>
  void gather(const In& in, Out&& out, int root, deadline until = {}) {
    check_root(root, "gather");
    auto sent = detail::elements_of(in);
    auto got = detail::elements_of(out);
    if (rank_ == root) check_count(got.size(), sent.size() * as_size(size()), "gather", "out");
    using E = element_of<decltype(got)>;
    run_collective(signature<E>(stats::op::gather, root, sent.size()), until, [&](auto& port) {
      C::gather(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()), root);
    });
  }

  /// Rank r's `out` receives root's `in[r*n, (r+1)*n)`, n being `out`'s size; `in` is ignored
  /// on other ranks.
  template <class In, class Out>
  void scatter(const In& in, Out&& out, int root, deadline until = {}) {
    check_root(root, "scatter");
    auto sent = detail::elements_of(in);
    auto got = detail::elements_of(out);
    if (rank_ == root) check_count(sent.size(), got.size() * as_size(size()), "scatter", "in");
    using E = element_of<decltype(got)>;
    run_collective(signature<E>(stats::op::scatter, root, got.size()), until, [&](auto& port) {
      C::scatter(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()),
                 root);
    });
  }

  /// Every rank's `out` (p times `in`'s size) receives every rank's `in` in rank order.
  template <class In, class Out>
  void allgather(const In& in, Out&& out, deadline until = {}) {
    check_valid("allgather");
    auto sent = detail::elements_of(in);
    auto got = detail::elements_of(out);
    check_count(got.size(), sent.size() * as_size(size()), "allgather", "out");
    using E = element_of<decltype(got)>;
    run_collective(signature<E>(stats::op::allgather, -1, sent.size()), until, [&](auto& port) {
      C::allgather(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()));
    });
  }

  /// Rank r's `out[s*n, (s+1)*n)` receives rank s's `in[r*n, (r+1)*n)`.
  template <class In, class Out>
  void alltoall(const In& in, Out&& out, deadline until = {}) {
    check_valid("alltoall");
    auto sent = detail::elements_of(in);
    auto got = detail::elements_of(out);
    check_count(got.size(), sent.size(), "alltoall", "out");
    if (sent.size() % as_size(size()) != 0) {
      throw_error(
          errc::invalid_argument, where("alltoall", unknown, unknown, sent.size_bytes()),
          fmt::format("{} elements do not split evenly among {} ranks", sent.size(), size()));
    }
    using E = element_of<decltype(got)>;
    run_collective(signature<E>(stats::op::alltoall, -1, sent.size()), until, [&](auto& port) {
      C::alltoall(port, std::span(sent.data(), sent.size()), std::span(got.data(), got.size()));
    });
  }

  /// In place: rank r's `data` becomes the element-wise `op` of ranks 0..r's `data`.
  template <class M, class Op>
  void scan(M&& data, Op op, deadline until = {}) {
    check_valid("scan");
    auto elements = detail::elements_of(data);
    check_op<decltype(elements), Op>();
    using E = element_of<decltype(elements)>;
    run_reduction(signature<E>(stats::op::scan, -1, elements.size(), op), until,
                  [&](auto& port, auto policy) {
                    policy.scan(port, std::span<E>(elements.data(), elements.size()), op);
                  });
  }

  /// In place: rank r > 0's `data` becomes the `op` of ranks 0..r-1's; rank 0's is unchanged.
  template <class M, class Op>
  void exscan(M&& data, Op op, deadline until = {}) {
    check_valid("exscan");
    auto elements = detail::elements_of(data);
    check_op<decltype(elements), Op>();
    using E = element_of<decltype(elements)>;
    run_reduction(signature<E>(stats::op::exscan, -1, elements.size(), op), until,
                  [&](auto& port, auto policy) {
                    policy.exscan(port, std::span<E>(elements.data(), elements.size()), op);
                  });
  }

  /// Root's `out[displs[r], +counts[r])` receives rank r's `in`; `counts` and `displs` (one
  /// per rank) are read at the root only. Without `displs` the blocks lie back to back.
  template <class In, class Out>
  void gatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
               std::span<const std::size_t> displs, int root, deadline until = {}) {
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
  /// As above, with the blocks back to back at the root (displacements from `counts`).
  template <class In, class Out>
  void gatherv(const In& in, Out&& out, std::span<const std::size_t> counts, int root,
               deadline until = {}) {
    const auto displs = rank_ == root ? packed(counts) : std::vector<std::size_t>{};
    gatherv(in, std::forward<Out>(out), counts, displs, root, until);
  }

  /// Rank r's `out` (counts[r] elements) receives root's `in[displs[r], +counts[r])`.
  template <class In, class Out>
  void scatterv(const In& in, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, Out&& out, int root, deadline until = {}) {
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
  /// As above, with the blocks back to back at the root (displacements from `counts`).
  template <class In, class Out>
  void scatterv(const In& in, std::span<const std::size_t> counts, Out&& out, int root,
                deadline until = {}) {
    const auto displs = rank_ == root ? packed(counts) : std::vector<std::size_t>{};
    scatterv(in, counts, displs, std::forward<Out>(out), root, until);
  }

  /// Every rank's `out[displs[r], +counts[r])` receives rank r's `in`; every rank passes the
  /// same `counts` and `displs`.
  template <class In, class Out>
  void allgatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
                  std::span<const std::size_t> displs, deadline until = {}) {
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
  /// As above, with the blocks back to back (displacements from `counts`).
  template <class In, class Out>
  void allgatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
                  deadline until = {}) {
    allgatherv(in, std::forward<Out>(out), counts, packed(counts), until);
  }

  /// Rank r's `in[send_displs[s], +send_counts[s])` goes to rank s's
  /// `out[recv_displs[r], +recv_counts[r])`.
  template <class In, class Out>
  void alltoallv(const In& in, std::span<const std::size_t> send_counts,
                 std::span<const std::size_t> send_displs, Out&& out,
                 std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                 deadline until = {}) {
    check_valid("alltoallv");
    auto sent = detail::elements_of(in);
    auto got = detail::elements_of(out);
    check_layout(send_counts, send_displs, sent.size(), "alltoallv", "in");
    check_layout(recv_counts, recv_displs, got.size(), "alltoallv", "out");
    using E = element_of<decltype(got)>;
    run_collective(signature<E>(stats::op::alltoallv, -1, detail::call_signature::not_compared),
                   until, [&](auto& port) {
                     C::alltoallv(port, std::span(sent.data(), sent.size()), send_counts,
                                  send_displs, std::span(got.data(), got.size()), recv_counts,
                                  recv_displs);
                   });
  }
  /// As above, with the blocks back to back on both sides (displacements from the counts).
  template <class In, class Out>
  void alltoallv(const In& in, std::span<const std::size_t> send_counts, Out&& out,
                 std::span<const std::size_t> recv_counts, deadline until = {}) {
    alltoallv(in, send_counts, packed(send_counts), std::forward<Out>(out), recv_counts,
              packed(recv_counts), until);
  }

  /// `in` (sum(counts) elements, on every rank) is reduced element-wise with `op`; rank r's
  /// `out` (counts[r] elements) receives block r of the result.
  template <class In, class Out, class Op>
  void reduce_scatter(const In& in, Out&& out, std::span<const std::size_t> counts, Op op,
                      deadline until = {}) {
    check_valid("reduce_scatter");
    auto sent = detail::elements_of(in);
    auto got = detail::elements_of(out);
    using E = std::remove_const_t<typename decltype(sent)::element_type>;
    check_op<std::span<E>, Op>();
    check_layout(counts, packed(counts), sent.size(), "reduce_scatter", "in");
    check_count(sent.size(), total(counts), "reduce_scatter", "in");
    check_count(got.size(), counts[as_size(rank_)], "reduce_scatter", "out");
    std::vector<E> work(sent.begin(), sent.end());  // policies reduce in place
    run_reduction(signature<E>(stats::op::reduce_scatter, -1, detail::fingerprint(counts), op),
                  until, [&](auto& port, auto policy) {
                    policy.reduce_scatter(port, std::span<E>(work), counts, op);
                  });
    std::copy_n(work.begin(), got.size(), got.begin());
  }

  /// reduce_scatter with every block the size of `out`.
  template <class In, class Out, class Op>
  void reduce_scatter_block(const In& in, Out&& out, Op op, deadline until = {}) {
    const std::vector<std::size_t> counts(as_size(size()), detail::elements_of(out).size());
    reduce_scatter(in, std::forward<Out>(out), counts, op, until);
  }

  // --- sub-communicators ----------------------------------------------------------------

  /// Collective: the ranks that pass the same `color` form a new communicator, ordered by
  /// `key` then by rank here. A rank passing `undefined_color` gets a null communicator.
  communicator split(int color, int key, deadline until = {}) {
    check_valid("split");
    if (color < 0 && color != undefined_color) {
      throw_error(errc::invalid_argument, where("split", unknown, unknown, 0),
                  fmt::format("color {} is negative", color));
    }
    // A transport that makes communicators itself (MPI_Comm_split) is asked to.
    if constexpr (requires(T & t) { t.split(ctx_, color, key, context_id{}); }) {
      if constexpr (S::enabled) state_->stats.on_call(stats::op::split);
      return adopt(state_->endpoint.split(ctx_, color, key, state_->next_context));
    }
    struct entry {
      int color;
      int key;
      context_id next_context;
    };
    const entry mine{color, key, state_->next_context};
    std::vector<entry> all(as_size(size()));
    run_collective(signature<entry>(stats::op::split, -1, detail::call_signature::not_compared),
                   until, [&](auto& port) {
                     C::allgather(port, std::span<const entry>(&mine, 1), std::span<entry>(all));
                   });

    context_id fresh = 0;
    for (const entry& e : all) fresh = std::max(fresh, e.next_context);
    state_->next_context = fresh + 2;
    if (color == undefined_color) return {};

    std::vector<int> members;  // parent ranks, then world ranks
    for (int r = 0; r < size(); ++r) {
      if (all[as_size(r)].color == color) members.push_back(r);
    }
    std::ranges::stable_sort(members, {}, [&](int r) { return all[as_size(r)].key; });
    const int new_rank = static_cast<int>(std::ranges::find(members, rank_) - members.begin());
    for (int& r : members) r = group_->world_of(r);

    return child(fresh, std::move(members), new_rank);
  }

  /// Collective: one communicator per node, holding the ranks that share this rank's node.
  communicator split_by_node(deadline until = {}) {
    check_valid("split_by_node");
    if constexpr (requires(T & t) { t.split_by_node(ctx_, rank_, context_id{}); }) {
      if constexpr (S::enabled) state_->stats.on_call(stats::op::split);
      return adopt(state_->endpoint.split_by_node(ctx_, rank_, state_->next_context));
    }
    return split(state_->endpoint.node_of(group_->world_of(rank_)), rank_, until);
  }

  /// Collective: a communicator with the same ranks whose messages never meet this one's.
  communicator dup(deadline until = {}) { return split(0, rank_, until); }

  /// The same communicator (ranks, messages, counters) running its collectives with policy
  /// `C2`: one job can compare policies, or mix them per call, without a second rendezvous.
  /// Not collective; both views share one sequence of collective calls.
  template <coll::collectives<T> C2>
  [[nodiscard]] communicator<T, C2, S> with_collectives() const {
    communicator<T, C2, S> view;
    view.state_ = state_;
    view.group_ = group_;
    view.ctx_ = ctx_;
    view.rank_ = rank_;
    view.collective_calls_ = collective_calls_;
    view.timeout_ = timeout_;
    view.checks_ = checks_;
    view.reduction_ = reduction_;
    view.lease_ = lease_;
    return view;
  }

 private:
  template <transport::transport T2, coll::collectives<T2> C2, stats::policy S2>
  friend class communicator;

  static std::size_t as_size(int n) { return static_cast<std::size_t>(n); }

  // A new communicator of `members` (world ranks, in rank order) on contexts fresh, fresh + 1.
  // It keeps this one's endpoint and settings (timeout, checks, reduction order).
  communicator child(context_id fresh, std::vector<int> members, int new_rank) const {
    communicator made = *this;
    made.group_ =
        std::make_shared<const detail::group>(std::move(members), state_->endpoint.size());
    made.ctx_ = fresh;
    made.rank_ = new_rank;
    made.collective_calls_ = std::make_shared<std::uint32_t>(0);
    made.lease_.reset();  // adopt() gives it a lease of its own when its transport needs one
    return made;
  }

  // What a transport's own split made (see transport/concept.hpp). When the transport frees
  // what it made for a context (`release`), the last handle onto the new communicator tells it.
  template <class Made>
  communicator adopt(Made&& made) {
    state_->next_context = made.context + 2;
    if (made.members.empty()) return {};
    communicator fresh = child(made.context, std::move(made.members), made.rank);
    if constexpr (requires(T & t) { t.release(made.context); }) {
      fresh.lease_ = std::shared_ptr<void>(
          nullptr, [state = state_, ctx = made.context](void*) { state->endpoint.release(ctx); });
    }
    return fresh;
  }

  template <class Span>
  using element_of = detail::span_element<Span>;

  [[nodiscard]] error_context where(const char* operation, int peer, int tag,
                                    std::size_t bytes) const {
    return {rank_, peer, tag, bytes, operation};
  }

  void check_valid(const char* operation) const {
    if (state_ == nullptr) {
      throw error(errc::invalid_argument, fmt::format("{} on a null communicator", operation));
    }
  }

  void check_rank(int peer, const char* operation) const {
    check_valid(operation);
    if (peer < 0 || peer >= size()) {
      throw_error(errc::invalid_argument, where(operation, peer, unknown, 0),
                  fmt::format("rank {} is not in [0, {})", peer, size()));
    }
  }

  void check_root(int root, const char* operation) const {
    check_valid(operation);
    if (root < 0 || root >= size()) {
      throw_error(errc::invalid_argument, where(operation, root, unknown, 0),
                  fmt::format("root {} is not in [0, {})", root, size()));
    }
  }

  void check_dest(int dest, int tag, const char* operation) const {
    check_rank(dest, operation);
    if (tag < 0 || tag > max_tag) {
      throw_error(errc::invalid_argument, where(operation, dest, tag, 0),
                  fmt::format("tag {} is not in [0, {}]", tag, max_tag));
    }
  }

  void check_source(int source, int tag, const char* operation) const {
    if (source != any_source)
      check_rank(source, operation);
    else
      check_valid(operation);
    if (tag != any_tag && (tag < 0 || tag > max_tag)) {
      throw_error(errc::invalid_argument, where(operation, source, tag, 0),
                  fmt::format("tag {} is neither any_tag nor in [0, {}]", tag, max_tag));
    }
  }

  void check_count(std::size_t given, std::size_t needed, const char* operation,
                   const char* what) const {
    if (given != needed) {
      throw_error(errc::invalid_argument, where(operation, unknown, unknown, given),
                  fmt::format("'{}' holds {} elements; {} ranks need exactly {}", what, given,
                              size(), needed));
    }
  }

  // Blocks given by counts and displacements (one each per rank) must lie inside the buffer.
  void check_layout(std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                    std::size_t buffer, const char* operation, const char* what) const {
    if (counts.size() != as_size(size()) || displs.size() != as_size(size())) {
      throw_error(errc::invalid_argument, where(operation, unknown, unknown, buffer),
                  fmt::format("{} counts and {} displacements given for {} ranks", counts.size(),
                              displs.size(), size()));
    }
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (displs[r] > buffer || counts[r] > buffer - displs[r]) {
        throw_error(errc::invalid_argument, where(operation, static_cast<int>(r), unknown, buffer),
                    fmt::format("block {} ([{}, +{})) does not fit '{}' of {} elements", r,
                                displs[r], counts[r], what, buffer));
      }
    }
  }

  static std::size_t total(std::span<const std::size_t> counts) {
    std::size_t sum = 0;
    for (std::size_t c : counts) sum += c;
    return sum;
  }

  /// Displacements that lay the blocks back to back.
  static std::vector<std::size_t> packed(std::span<const std::size_t> counts) {
    std::vector<std::size_t> displs(counts.size());
    std::size_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      displs[r] = offset;
      offset += counts[r];
    }
    return displs;
  }

  template <class Elements, class Op>
  static constexpr void check_op() {
    using E = std::remove_const_t<typename Elements::element_type>;
    static_assert(!std::is_const_v<typename Elements::element_type>,
                  "commx: a reduction's data must be writable");
    static_assert(std::is_convertible_v<std::invoke_result_t<Op&, const E&, const E&>, E>,
                  "commx: a reduction op must take two elements and return one");
  }

  std::optional<status> find_queued(int source, int tag, const char* operation) {
    auto found = state_->endpoint.iprobe(world_source(source), ctx_, tag);
    if (!found) return std::nullopt;
    if (found->error) {
      throw_error(found->error, where(operation, source, tag, 0),
                  fmt::format("{} is gone", group_->describe(found->source)));
    }
    return status{group_->local_of(found->source), found->tag, found->bytes};
  }

  [[nodiscard]] int world_source(int source) const {
    return source == any_source ? any_source : group_->world_of(source);
  }

  request make_request(stats::op kind, error_context context, bool is_recv) {
    request req;
    req.state_ = state_;
    req.group_ = group_;
    req.where_ = context;
    req.kind_ = kind;
    req.timeout_ = timeout_;
    req.is_recv_ = is_recv;
    req.active_ = true;
    return req;
  }

  template <class M>
  request post_send(int dest, int tag, const M& message, stats::op kind) {
    const detail::stopwatch<S> watch;
    check_dest(dest, tag, stats::name(kind).data());
    std::span<const std::byte> bytes;
    std::unique_ptr<std::vector<std::byte>> staging;
    if constexpr (transfer_mode_of<M> == transfer_mode::raw) {
      bytes = detail::bytes_of(message);
    } else {
      staging = std::make_unique<std::vector<std::byte>>(detail::serialize(message));
      bytes = *staging;
    }
    return post_bytes(dest, tag, bytes, std::move(staging), kind, watch);
  }

  // A send of bytes (`staging` holds them for a serialized message), checked already.
  request post_bytes(int dest, int tag, std::span<const std::byte> bytes,
                     std::unique_ptr<std::vector<std::byte>> staging, stats::op kind,
                     const detail::stopwatch<S>& watch) {
    if constexpr (S::enabled) state_->stats.on_call(kind);
    request req =
        make_request(kind, where(stats::name(kind).data(), dest, tag, bytes.size()), false);
    req.staging_ = std::move(staging);
    req.handle_ = state_->endpoint.isend(group_->world_of(dest), ctx_, tag, bytes);
    if constexpr (S::enabled) {
      state_->stats.on_sent(kind, bytes.size());
      state_->stats.add_send_time(kind, watch.seconds());  // posting; waiting is the request's
    }
    return req;
  }

  // A blocking send: through the transport's own blocking send where it has one
  // (transport::blocking_send: no request, no shared state copied, and no clock read unless
  // the send has to wait), else a request waited for. Counted alike either way.
  template <class M>
  void send_now(int dest, int tag, const M& message, const deadline& until, stats::op kind) {
    if constexpr (!transport::blocking_send<T>) {
      post_send(dest, tag, message, kind).wait(until);
    } else {
      const detail::stopwatch<S> watch;
      check_dest(dest, tag, stats::name(kind).data());
      std::span<const std::byte> bytes;
      std::vector<std::byte> staging;
      if constexpr (transfer_mode_of<M> == transfer_mode::raw) {
        bytes = detail::bytes_of(message);
      } else {
        staging = detail::serialize(message);
        bytes = staging;
      }
      const std::optional<transport::op_result> sent =
          state_->endpoint.send_blocking(group_->world_of(dest), ctx_, tag, bytes, until, timeout_);
      if (!sent) [[unlikely]] {
        std::unique_ptr<std::vector<std::byte>> kept;
        if constexpr (transfer_mode_of<M> != transfer_mode::raw) {
          kept = std::make_unique<std::vector<std::byte>>(std::move(staging));
          bytes = *kept;
        }
        post_bytes(dest, tag, bytes, std::move(kept), kind, watch).wait(until);
        return;
      }
      if constexpr (S::enabled) {
        state_->stats.on_call(kind);
        state_->stats.on_sent(kind, bytes.size());
        state_->stats.add_send_time(kind, watch.seconds());
      }
      if (sent->error) [[unlikely]] {
        detail::throw_failed(*sent, where(stats::name(kind).data(), dest, tag, bytes.size()),
                             *group_);
      }
    }
  }

  // Where a receive into `message` writes: its own bytes (a fixed buffer), the container grown
  // to fit, or `staging` (serialized messages, decoded once received).
  template <class M>
  static transport::recv_buffer receive_buffer(M& message, std::vector<std::byte>* staging) {
    using target = std::remove_cvref_t<M>;
    if constexpr (recv_mode_of<target> == recv_mode::fixed) {
      // A fixed range takes any whole number of its elements; a single value exactly itself.
      return transport::recv_buffer(detail::writable_bytes_of(message),
                                    detail::element_size<target>(), !raw_range<target>);
    } else if constexpr (recv_mode_of<target> == recv_mode::resize) {
      return {static_cast<void*>(std::addressof(message)), &detail::grow_container<target>};
    } else {
      return {static_cast<void*>(staging), &detail::grow_container<std::vector<std::byte>>};
    }
  }

  template <class M>
  static constexpr bool fixed_buffer = recv_mode_of<std::remove_cvref_t<M>> == recv_mode::fixed;

  template <class M>
  request post_recv(int source, int tag, M& message, stats::op kind) {
    using target = std::remove_cvref_t<M>;
    check_source(source, tag, stats::name(kind).data());
    if constexpr (S::enabled) state_->stats.on_call(kind);
    request req = make_request(kind, where(stats::name(kind).data(), source, tag, 0), true);
    if constexpr (recv_mode_of<target> == recv_mode::serialized) {
      req.staging_ = std::make_unique<std::vector<std::byte>>();
      req.target_ = std::addressof(message);
      req.decode_ = [](request& r) {
        detail::deserialize(*r.staging_, *static_cast<target*>(r.target_), r.where_);
      };
    }
    const transport::recv_buffer buffer = receive_buffer(message, req.staging_.get());
    if constexpr (fixed_buffer<M>) req.where_.bytes = buffer.capacity();
    req.handle_ = state_->endpoint.irecv(world_source(source), ctx_, tag, buffer);
    return req;
  }

  // A blocking receive through the transport's own (transport::blocking_recv): what
  // post_recv and a request's wait do, without the request. Counted alike.
  template <class M>
  status recv_now(int source, int tag, M& message, const deadline& until, stats::op kind) {
    using target = std::remove_cvref_t<M>;
    const detail::stopwatch<S> watch;
    check_source(source, tag, stats::name(kind).data());
    std::vector<std::byte> staging;  // serialized messages only
    const transport::recv_buffer buffer = receive_buffer(message, &staging);
    const std::optional<transport::op_result> got =
        state_->endpoint.recv_blocking(world_source(source), ctx_, tag, buffer, until, timeout_);
    if (!got) [[unlikely]]
      return post_recv(source, tag, message, kind).wait(until);
    if constexpr (S::enabled) {
      state_->stats.on_call(kind);
      state_->stats.add_wait_time(kind, watch.seconds());
    }
    const auto here = [&] {
      return where(stats::name(kind).data(), source, tag, fixed_buffer<M> ? buffer.capacity() : 0);
    };
    if (got->error) [[unlikely]]
      detail::throw_failed(*got, here(), *group_);
    if constexpr (S::enabled) state_->stats.on_received(kind, got->bytes);
    if constexpr (recv_mode_of<target> == recv_mode::serialized) {
      detail::deserialize(staging, message, here());
    }
    return status{group_->local_of(got->source), got->tag, got->bytes};
  }

  template <class E>
  static detail::call_signature signature(stats::op kind, int root, std::uint64_t count) {
    return {static_cast<std::uint64_t>(kind), root, count, sizeof(E), 0};
  }
  template <class E, class Op>
  static detail::call_signature signature(stats::op kind, int root, std::uint64_t count,
                                          const Op&) {
    return {static_cast<std::uint64_t>(kind), root, count, sizeof(E),
            detail::type_fingerprint<Op>()};
  }

  // A reduction runs under C, or under C with rank-order folds when reproducible bits across
  // policies were asked for; `body(port, policy)` calls the policy's collective.
  template <class Body>
  void run_reduction(const detail::call_signature& call, deadline until, Body&& body) {
    run_collective(call, until, [&](auto& port) {
      if (reduction_ == reduction_order::reproducible) {
        body(port, coll::detail::rank_order_over<C>{});
      } else {
        body(port, C{});
      }
    });
  }

  template <class Body>
  void run_collective(const detail::call_signature& call, deadline until, Body&& body) {
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

  std::shared_ptr<detail::rank_state<T, S>> state_;
  std::shared_ptr<const detail::group> group_;
  context_id ctx_ = 0;
  int rank_ = unknown;
  std::shared_ptr<std::uint32_t> collective_calls_;  // shared by copies of this communicator
  clock::duration timeout_{};
  check_level checks_ = check_level::basic;
  reduction_order reduction_ = reduction_order::policy;
  // Held by every handle onto a communicator whose transport resources are freed with it.
  std::shared_ptr<void> lease_;
};

}  // namespace commx
