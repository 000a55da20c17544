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
/// Sub-communicators: `split(color, key)`, `split_by_node()` and `split_by_site()`; messages of
/// different communicators never match each other.
///
/// Thread safety: a communicator (and every communicator split from it) is used by one thread
/// at a time. Copies share the same rank: they are handles, not new communicators, and they
/// and the rank's requests are copied and destroyed by that thread too (their count of owners
/// has no atomics: detail/local_shared.hpp).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/coll/flat.hpp"
#include "commx/deadline.hpp"
#include "commx/detail/agreement.hpp"
#include "commx/detail/call_check.hpp"
#include "commx/detail/collective_call.hpp"
#include "commx/detail/communicator_nonblocking.hpp"
#include "commx/detail/local_shared.hpp"
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

/// Whether a shrink needs more than half of the old communicator (communicator::shrink).
enum class shrink_quorum : std::uint8_t { majority, any };

namespace detail {

struct communicator_access;

template <class Span>
using span_element = std::remove_const_t<typename Span::element_type>;

}  // namespace detail

/// A group of ranks that exchange typed messages over transport `T` and run collectives
/// through policy `C`, counting what they do with `S` (see the file comment).
/// @tparam T the transport (transport::inproc, shm, tcp, wan, mpi).
/// @tparam C the collectives policy (coll::flat, binomial, ring, hierarchical, tuned, native).
/// @tparam S the stats policy (stats::none costs nothing; stats::counting counts).
///
/// Thread safety: a communicator, its copies, its requests and the communicators split from it
/// are used by one thread at a time; different ranks' communicators may be used concurrently.
template <transport::transport T, coll::collectives<T> C = coll::flat,
          stats::policy S = stats::none>
class communicator
    : public detail::nonblocking_collectives<communicator<T, C, S>, commx::request<T, S>> {
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
      : state_(detail::local_shared<detail::rank_state<T, S>>::make(std::move(endpoint))),
        group_(detail::local_shared<const detail::group>::make(state_->endpoint.size())),
        ctx_(0),
        rank_(state_->endpoint.rank()),
        collective_calls_(std::make_shared<std::uint32_t>(0)),
        timeout_(opts.timeout),
        checks_(opts.checks),
        reduction_(opts.reduction) {
    state_->recovery.suspect_after = opts.suspect_after;
  }

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
  /// Site id of `peer`: ranks with equal ids are at one site (COMMX_SITE on tcp and wan); 0 for
  /// every rank on a transport without sites. A node is at one site.
  [[nodiscard]] int site_of(int peer) const {
    check_rank(peer, "site_of");
    if constexpr (requires(const T& t) { t.site_of(0); }) {
      return state_->endpoint.site_of(group_->world_of(peer));
    } else {
      return 0;
    }
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

  // --- point-to-point (out of line: detail/communicator_p2p.hpp) ----------------------------

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
    static_assert(detail::outlives_request<M> || transfer_mode_of<M> == transfer_mode::serialized,
                  "commx: isend sends from the caller's buffer, which must outlive the request: "
                  "pass an lvalue or a span, not a temporary (or use send)");
    return post_send(dest, tag, message, stats::op::isend);
  }

  /// Starts a receive into `message`, which must outlive the request.
  template <transferable M>
  [[nodiscard]] request irecv(int source, int tag, M&& message) {
    static_assert(
        detail::outlives_request<M>,
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

  /// Moves on what this rank has in flight without blocking: its nonblocking collectives, the
  /// active messages and window operations addressed to it (active_messages.hpp, window.hpp),
  /// and what its transport has to send or take in. Every other call does this too; a rank
  /// that computes for long without calling commx calls this now and then.
  void progress() {
    check_valid("progress");
    if (!state_->running.empty()) state_->running.advance_all();
    if constexpr (requires(T & t) { t.progress(); }) state_->endpoint.progress();
  }

  /// The ranks of this communicator that this rank knows failed (died, lost their connection,
  /// threw), in the order it learned of them. After errc::peer_lost the lost peer is among them
  /// if it failed (not if it finished), and so is every failure this rank saw before, which may
  /// be the cause: a peer that failed because another did. Empty where the transport does not
  /// tell (`transport::knows_failures`; mpi: an MPI job ends as a whole). Takes in what has
  /// arrived first, without blocking.
  [[nodiscard]] std::vector<int> known_lost() {
    check_valid("known_lost");
    if constexpr (requires(T & t) { t.progress(); }) state_->endpoint.progress();
    return detail::known_lost_ranks(state_->endpoint, *group_);
  }

  /// Acknowledges every failure known_lost() reports (ULFM's MPI_Comm_ack_failed): while a
  /// member's failure is unacknowledged, `any_source` receives and probes on this communicator
  /// that nothing queued matches end with errc::peer_lost (detail/failures.hpp); after, they
  /// wait for the others. Returns the ranks acknowledged so far, in the order learned.
  std::vector<int> acknowledge_failures();

  /// Blocks until a message matching (source, tag) is queued and returns its status, without
  /// receiving it.
  status probe(int source, int tag, deadline until = {});

  /// The status of the first queued message matching (source, tag), if any.
  std::optional<status> iprobe(int source, int tag) {
    check_source(source, tag, "iprobe");
    if constexpr (S::enabled) state_->stats.on_call(stats::op::probe);
    return find_queued(source, tag, "iprobe");
  }

  // --- after a failure (out of line: detail/communicator_recovery.hpp) ----------------------

  /// Not collective: every pending and later operation on this communicator, at every
  /// surviving member, ends with errc::revoked (agree and shrink still work; communicators
  /// split from it are not revoked).
  void revoke();
  /// Whether this rank has seen the communicator revoked (takes in notices that arrived).
  bool is_revoked();
  /// Collective over the survivors, also on a revoked communicator: every rank that returns
  /// gets the same value (`op` of the survivors' values) and the same lost ranks (detail/
  /// agreement.hpp: uniform, also when ranks die during the call; its cost).
  template <std::integral V, agreement_op Op>
  agreement<V> agree(V value, Op op, deadline until = {});
  /// Collective over the survivors, also on a revoked communicator: a new communicator of the
  /// ranks that return, in this one's order, without every rank agreed lost. When the members
  /// span nodes or a network joins them (transport::splits_within_node: tcp, wan), survivors
  /// that are half of this communicator or less raise errc::no_majority (a partition or a
  /// stall must not give two working halves) unless `quorum` is `any`. A rank that is
  /// alive but agreed lost (silent, or cut off from some members) gets errc::excluded.
  communicator shrink(shrink_quorum quorum, deadline until = {});
  /// shrink with the majority rule.
  communicator shrink(deadline until = {}) { return shrink(shrink_quorum::majority, until); }

  // --- collectives (out of line: detail/communicator_collectives.hpp) -----------------------

  /// Returns once every rank has entered.
  /// @throws commx::error errc::timeout when `until` passes first, errc::peer_lost.
  void barrier(deadline until = {}) { run(barrier_call(), until); }

  /// Copies root's `data` (a value or contiguous range) into every rank's.
  template <class M>
  void bcast(M&& data, int root, deadline until = {}) {
    run(bcast_call(data, root), until);
  }

  /// In place: root's `data` becomes the element-wise `op` of every rank's `data`.
  template <class M, class Op>
  void reduce(M&& data, Op op, int root, deadline until = {}) {
    run(reduce_call(data, op, root), until);
  }

  /// In place: every rank's `data` becomes the element-wise `op` of every rank's `data`.
  template <class M, class Op>
  void allreduce(M&& data, Op op, deadline until = {}) {
    run(allreduce_call(data, op), until);
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
    run(gather_call(in, out, root), until);
  }

  /// Rank r's `out` receives root's `in[r*n, (r+1)*n)`, n being `out`'s size; `in` is ignored
  /// on other ranks.
  template <class In, class Out>
  void scatter(const In& in, Out&& out, int root, deadline until = {}) {
    run(scatter_call(in, out, root), until);
  }

  /// Every rank's `out` (p times `in`'s size) receives every rank's `in` in rank order.
  template <class In, class Out>
  void allgather(const In& in, Out&& out, deadline until = {}) {
    run(allgather_call(in, out), until);
  }

  /// Rank r's `out[s*n, (s+1)*n)` receives rank s's `in[r*n, (r+1)*n)`.
  template <class In, class Out>
  void alltoall(const In& in, Out&& out, deadline until = {}) {
    run(alltoall_call(in, out), until);
  }

  /// In place: rank r's `data` becomes the element-wise `op` of ranks 0..r's `data`.
  template <class M, class Op>
  void scan(M&& data, Op op, deadline until = {}) {
    run(scan_call(data, op), until);
  }

  /// In place: rank r > 0's `data` becomes the `op` of ranks 0..r-1's; rank 0's is unchanged.
  template <class M, class Op>
  void exscan(M&& data, Op op, deadline until = {}) {
    run(exscan_call(data, op), until);
  }

  /// Root's `out[displs[r], +counts[r])` receives rank r's `in`; `counts` and `displs` (one
  /// per rank) are read at the root only. Without `displs` the blocks lie back to back.
  template <class In, class Out>
  void gatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
               std::span<const std::size_t> displs, int root, deadline until = {}) {
    run(gatherv_call(in, out, counts, displs, root), until);
  }
  /// As above, with the blocks back to back at the root (displacements from `counts`).
  template <class In, class Out>
  void gatherv(const In& in, Out&& out, std::span<const std::size_t> counts, int root,
               deadline until = {}) {
    const detail::packed_displacements displs(rank_ == root ? counts : counts.first(0));
    gatherv(in, std::forward<Out>(out), counts, displs.view(), root, until);
  }

  /// Rank r's `out` (counts[r] elements) receives root's `in[displs[r], +counts[r])`.
  template <class In, class Out>
  void scatterv(const In& in, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, Out&& out, int root, deadline until = {}) {
    run(scatterv_call(in, counts, displs, out, root), until);
  }
  /// As above, with the blocks back to back at the root (displacements from `counts`).
  template <class In, class Out>
  void scatterv(const In& in, std::span<const std::size_t> counts, Out&& out, int root,
                deadline until = {}) {
    const detail::packed_displacements displs(rank_ == root ? counts : counts.first(0));
    scatterv(in, counts, displs.view(), std::forward<Out>(out), root, until);
  }

  /// Every rank's `out[displs[r], +counts[r])` receives rank r's `in`; every rank passes the
  /// same `counts` and `displs`.
  template <class In, class Out>
  void allgatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
                  std::span<const std::size_t> displs, deadline until = {}) {
    run(allgatherv_call(in, out, counts, displs), until);
  }
  /// As above, with the blocks back to back (displacements from `counts`).
  template <class In, class Out>
  void allgatherv(const In& in, Out&& out, std::span<const std::size_t> counts,
                  deadline until = {}) {
    const detail::packed_displacements displs(counts);
    allgatherv(in, std::forward<Out>(out), counts, displs.view(), until);
  }

  /// Rank r's `in[send_displs[s], +send_counts[s])` goes to rank s's
  /// `out[recv_displs[r], +recv_counts[r])`.
  template <class In, class Out>
  void alltoallv(const In& in, std::span<const std::size_t> send_counts,
                 std::span<const std::size_t> send_displs, Out&& out,
                 std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                 deadline until = {}) {
    run(alltoallv_call(in, send_counts, send_displs, out, recv_counts, recv_displs), until);
  }
  /// As above, with the blocks back to back on both sides (displacements from the counts).
  template <class In, class Out>
  void alltoallv(const In& in, std::span<const std::size_t> send_counts, Out&& out,
                 std::span<const std::size_t> recv_counts, deadline until = {}) {
    const detail::packed_displacements send_displs(send_counts);
    const detail::packed_displacements recv_displs(recv_counts);
    alltoallv(in, send_counts, send_displs.view(), std::forward<Out>(out), recv_counts,
              recv_displs.view(), until);
  }

  /// `in` (sum(counts) elements, on every rank) is reduced element-wise with `op`; rank r's
  /// `out` (counts[r] elements) receives block r of the result.
  template <class In, class Out, class Op>
  void reduce_scatter(const In& in, Out&& out, std::span<const std::size_t> counts, Op op,
                      deadline until = {}) {
    run(reduce_scatter_call(in, out, counts, op), until);
  }

  /// reduce_scatter with every block the size of `out`.
  template <class In, class Out, class Op>
  void reduce_scatter_block(const In& in, Out&& out, Op op, deadline until = {});

  // --- sub-communicators (out of line: detail/communicator_split.hpp) -----------------------

  /// Collective: the ranks that pass the same `color` form a new communicator, ordered by
  /// `key` then by rank here. A rank passing `undefined_color` gets a null communicator.
  communicator split(int color, int key, deadline until = {});

  /// Collective: one communicator per node, holding the ranks that share this rank's node.
  communicator split_by_node(deadline until = {});

  /// Collective: one communicator per site, holding the ranks at this rank's site.
  communicator split_by_site(deadline until = {}) { return split(site_of(rank_), rank_, until); }

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
  friend class detail::nonblocking_collectives<communicator, request>;
  friend struct detail::communicator_access;

  static std::size_t as_size(int n) { return static_cast<std::size_t>(n); }

  template <class Span>
  using element_of = detail::span_element<Span>;

  [[nodiscard]] error_context where(const char* operation, int peer, int tag,
                                    std::size_t bytes) const {
    return {rank_, peer, tag, bytes, operation};
  }

  // Sub-communicators (detail/communicator_split.hpp).
  communicator child(context_id fresh, std::vector<int> members, int new_rank) const;
  template <class Made>
  communicator adopt(Made&& made);

  // Argument checks, each throwing errc::invalid_argument (detail/communicator_checks.hpp):
  // the test inline on every call, what failed and why in a cold `reject_` function.
  void check_valid(const char* operation) const;
  void check_rank(int peer, const char* operation) const;
  void check_root(int root, const char* operation) const;
  void check_dest(int dest, int tag, const char* operation) const;
  void check_source(int source, int tag, const char* operation) const;
  void check_count(std::size_t given, std::size_t needed, const char* operation,
                   const char* what) const;
  enum class peer_role : std::uint8_t { rank, root, dest, source };
  [[noreturn, gnu::cold, gnu::noinline]] void reject_peer(int peer, int tag, peer_role role,
                                                          const char* operation) const;
  [[noreturn, gnu::cold, gnu::noinline]] void reject_count(std::size_t given, std::size_t needed,
                                                           const char* operation,
                                                           const char* what) const;
  void check_layout(std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                    std::size_t buffer, const char* operation, const char* what) const;
  static std::size_t total(std::span<const std::size_t> counts);

  // Point-to-point plumbing (detail/communicator_p2p.hpp).
  std::optional<status> find_queued(int source, int tag, const char* operation);

  [[nodiscard]] int world_source(int source) const {
    return source == any_source ? any_source : group_->world_of(source);
  }

  request make_request(stats::op kind, error_context context, bool is_recv);
  template <class M>
  request post_send(int dest, int tag, const M& message, stats::op kind);
  request post_bytes(int dest, int tag, std::span<const std::byte> bytes,
                     std::unique_ptr<std::vector<std::byte>> staging, stats::op kind,
                     const detail::stopwatch<S>& watch);
  template <class M>
  void send_now(int dest, int tag, const M& message, const deadline& until, stats::op kind);
  template <class M>
  static transport::recv_buffer receive_buffer(M& message, std::vector<std::byte>* staging);

  template <class M>
  static constexpr bool fixed_buffer = recv_mode_of<std::remove_cvref_t<M>> == recv_mode::fixed;

  template <class M>
  request post_recv(int source, int tag, M& message, stats::op kind);
  template <class M>
  status recv_now(int source, int tag, M& message, const deadline& until, stats::op kind);
  [[noreturn]] void fail(const transport::op_result& result, const error_context& context) const;

  // Collectives' plumbing (detail/communicator_collectives.hpp).
  // Each collective, prepared (detail::collective_call) for `run` (blocking) or `start`.
  auto barrier_call();
  template <class M>
  auto bcast_call(M& data, int root);
  template <class M, class Op>
  auto reduce_call(M& data, Op op, int root);
  template <class M, class Op>
  auto allreduce_call(M& data, Op op);
  template <class M, class Op>
  auto scan_call(M& data, Op op);
  template <class M, class Op>
  auto exscan_call(M& data, Op op);
  template <class In, class Out, class Op>
  auto reduce_scatter_call(const In& in, Out& out, std::span<const std::size_t> counts, Op op);
  template <class In, class Out>
  auto gather_call(const In& in, Out& out, int root);
  template <class In, class Out>
  auto scatter_call(const In& in, Out& out, int root);
  template <class In, class Out>
  auto allgather_call(const In& in, Out& out);
  template <class In, class Out>
  auto alltoall_call(const In& in, Out& out);
  template <class In, class Out>
  auto gatherv_call(const In& in, Out& out, std::span<const std::size_t> counts,
                    std::span<const std::size_t> displs, int root);
  template <class In, class Out>
  auto scatterv_call(const In& in, std::span<const std::size_t> counts,
                     std::span<const std::size_t> displs, Out& out, int root);
  template <class In, class Out>
  auto allgatherv_call(const In& in, Out& out, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs);
  template <class In, class Out>
  auto alltoallv_call(const In& in, std::span<const std::size_t> send_counts,
                      std::span<const std::size_t> send_displs, Out& out,
                      std::span<const std::size_t> recv_counts,
                      std::span<const std::size_t> recv_displs);
  // Every rank numbers its collective calls alike (the number goes into the call's tags).
  std::uint32_t number_call(stats::op kind);
  template <class Call>
  void run(Call call, deadline until);
  template <class Call>
  request start(Call call);

  detail::local_shared<detail::rank_state<T, S>> state_;
  detail::local_shared<const detail::group> group_;
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

// The larger members, out of line by concern (each part includes this header first).
#include "commx/detail/communicator_checks.hpp"       // IWYU pragma: export
#include "commx/detail/communicator_collectives.hpp"  // IWYU pragma: export
#include "commx/detail/communicator_p2p.hpp"          // IWYU pragma: export
#include "commx/detail/communicator_recovery.hpp"     // IWYU pragma: export
#include "commx/detail/communicator_split.hpp"        // IWYU pragma: export
