// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The transport concept: what a type must do to carry a communicator's messages.
///
/// A transport object is one rank's endpoint. It moves tagged byte messages between the world
/// ranks of one job; the communicator above it maps communicator ranks to world ranks, types to
/// bytes, and communicators to context ids.
///
/// Requirements, for `t` a `T&`, `req` a `T::request&`, `p` a world rank, `ctx` a `context_id`,
/// `tag` an int, `out` a `std::span<const std::byte>`, `in` a `recv_buffer`, `when` a
/// `clock::time_point` and `seen` a `std::uint64_t`:
///
/// | expression | type | semantics |
/// |---|---|---|
/// | `T::name` | `std::string_view` | the stack's name, as benches and examples print it |
/// | `t.rank()` | `int` | this endpoint's world rank, in [0, size) |
/// | `t.size()` | `int` | the number of world ranks, >= 1 |
/// | `t.node_of(p)` | `int` | a node id: ranks with equal ids share a node (memory, a host); ids are small, >= 0, and the same on every rank |
/// | `t.isend(p, ctx, tag, out)` | `T::request` | starts sending `out` to `p`. `out` must stay valid and unchanged until the request completes. Zero-size messages are messages: they match and complete like any other. `p` may be `t.rank()` (a send to self). Never blocks for long: a send the receiver has not yet asked for is either buffered (small, flow-controlled) or waits for the matching receive without holding up other operations |
/// | `t.irecv(p, ctx, tag, in)` | `T::request` | starts receiving a message from `p` (or `any_source`) with `tag` (or `any_tag`) on `ctx`. A message that `in.prepare` refuses (too large: `errc::truncated`; not whole elements: `errc::type_mismatch`) completes that request with the error, writes nothing into `in`, and goes on to the next matching receive, or stays queued for a later one |
/// | `t.test(req)` | `bool` | makes progress; true once `req` has completed, successfully or not |
/// | `t.result(req)` | `const op_result&` | after completion: the matched source, tag, byte count, or the error |
/// | `t.cancel(req)` | `bool` | withdraws a request that has not matched yet and returns true; returns false for one that has completed (or completes during the call). A request destroyed before completion must be cancelled first |
/// | `t.iprobe(p, ctx, tag)` | `std::optional<op_result>` | the first queued message that a receive with these arguments would match, without receiving it; an `op_result` with an error if `p` is gone and nothing from it is queued |
/// | `t.event_count()` | `std::uint64_t` | a counter that changes whenever something happens to this endpoint (arrival, completion, a peer gone) |
/// | `t.wait_for_event(seen, when)` | `void` | blocks, without burning a core, until `event_count() != seen` or `when` passes |
///
/// Ordering: messages from one source to one destination with the same (ctx, tag) are received
/// in the order they were sent (non-overtaking), also with `any_source`/`any_tag` receives.
/// Receives are matched in the order they were posted.
///
/// A peer that is gone (its process ended, or its endpoint was closed): messages it sent before
/// going are still delivered; a receive naming it that nothing queued can satisfy completes with
/// `errc::peer_lost`, as does a send to it. A peer that failed (rather than finished) joins
/// `failed_peers()` and moves `event_count()`; an `any_source` receive or probe is not ended
/// for it here: the communicator ends it, or not, by its members and the failures it has
/// acknowledged (ULFM's "failure pending", communicator.hpp).
///
/// Deadlines: a transport never blocks past `when` in `wait_for_event`; the communicator turns
/// every timeout into a deadline and every missed deadline into `errc::timeout`.
///
/// Thread safety: one endpoint is used by one thread at a time; different endpoints (ranks) may
/// be used concurrently.
///
/// Optional customisation points, for a transport that makes communicators itself (MPI makes
/// them with MPI_Comm_split); the communicator uses them when they exist, else it splits on
/// its own (an allgather of colours and context ids):
///
/// | expression | type | semantics |
/// |---|---|---|
/// | `t.split(parent, color, key, next)` | a type with `context`, `members`, `rank` | collective over the ranks of context `parent`: the ranks passing the same `color` (>= 0) form a communicator ordered by `key`, then by rank; a negative color joins none. `context` is the new context id (the largest `next` of the parent's ranks; the next id is the new communicator's collectives context), `members` its world ranks in rank order (empty for none), `rank` this rank in it |
/// | `t.split_by_node(parent, key, next)` | as `split` | the same with one communicator per node |
/// | `t.release(ctx)` | `void`, noexcept | the last handle onto a communicator `split` made is gone: free what backs `ctx` and `ctx + 1` |
///
/// Optional locality and traffic, which collectives and tests use where a transport has them:
///
/// | expression | type | semantics |
/// |---|---|---|
/// | `t.site_of(p)` | `int` | a site id: ranks with equal ids are at one site (joined by a site's network; sites are joined by a wide-area link). A node is inside one site. Without it, every rank is at site 0 |
/// | `T::shares_node_memory` | `bool`, constexpr | true when ranks with equal `node_of` may map each other's POSIX shared memory; windows then map theirs (window.hpp). Without it, false |
/// | `T::rma_window<E>`, `T::rma_carries<E>` | a class, `bool` constexpr | the transport's own remote memory access for windows of E (mpi: MPI-3 RMA; ucx: UCP's), which window.hpp uses where `rma_carries<E>`: constructed from (communicator, the caller's span or null, count, deadline), with put, get, accumulate, the atomics, flush, fence, lock and free as window.hpp calls them. Without it, windows map node memory or travel as messages |
/// | `t.bytes_sent_to(p)` | `std::uint64_t` | payload bytes this endpoint has handed to sends to `p` so far, so a test can see which pairs, and so which levels, traffic crossed |
/// | `t.layout_of(p)` | `data_layout` | how `p`'s machine lays out values (byte order; sizes of long, long double, wchar_t: data_layout.hpp), as it said when the job started; the communicator converts raw data received from a rank whose layout differs from this rank's. Without it, every rank has this one's (one machine type: inproc, shm; MPI converts nothing commx sends as bytes) |
/// | `T::node_cannot_split` | `bool`, constexpr | true when ranks with equal `node_of` reach each other through memory they share (one process, one segment): nothing partitions them, and a rank they declared lost learns it when it resumes (`exclude`). Shrink then asks a majority only of communicators that span nodes. Without it, false: a shrink asks a majority always, as on tcp between ranks of one host, where a stalled rank, resumed, finds every connection closed as a rank whose peers all died would (`splits_within_node`) |
/// | `T::simulated` | `bool`, constexpr | true when ranks run on a simulated platform (transport::simgrid): each on a core of its simulated host, so this machine's load does not apply (coll::tuned). Without it, false |
/// | `t.failed_peers()` | `std::vector<int>` | the world ranks this endpoint knows failed (gone without finishing: a process that died, a connection that broke, a rank that threw), in the order it learned of them (`knows_failures`); the communicator's `known_lost()` and its errc::peer_lost messages report them. Without it, none are known (an MPI job ends as a whole) |
/// | `t.exclude(p, why)` | `void` | declares `p` failed at this endpoint although nothing showed it (the survivors agreed it lost, or it stayed silent past the suspicion time, recovery_state.hpp): what waits on it ends with errc::peer_lost, `failed_peers()` gains it, and nothing of it is taken in again; a connection to it is closed, so it sees this endpoint lost in turn, and it is never readmitted (`excludes_peers`). Where the transport can tell `p` itself (inproc: the hub all ranks share; shm: its slot in the segment), `p`, resumed, finds every peer lost and its own rank in its failed_peers(): an agreement then names it lost there too (shrink: errc::excluded). Without it, a silent rank is waited for until the deadline |
/// | `t.library_call()` | a guard, returned by value (it need not be copyable or movable) | the communicator holds one around what it does of one blocking call for the program (a blocking collective, a wait): the transport's calls made meanwhile are the library's own work, as the calls inside MPI_Allreduce are MPI's. A transport that turns the program's time between calls into something (simgrid's measured compute) takes only the time outside such guards. Guards nest. Without it, nothing |
///
/// Optional progress without waiting, which a transport composed of others
/// (`node_and_network.hpp`) calls on the level it is not waiting in:
///
/// | expression | type | semantics |
/// |---|---|---|
/// | `t.progress()` | `void` | takes in what arrived and sends what can go, without blocking |
/// | `t.completed(req)` | `bool` | true once `req` has completed, as `test` would say after a `progress()`, but making no progress itself: who checks many requests (an active-message engine, one receive per peer) progresses once and then checks each for the cost of a load (`progresses_apart`) |
///
/// Optional fast paths for the blocking calls (`blocking_send`, `blocking_recv`): a transport
/// whose library has blocking calls cheaper than a request (MPI) offers them, and the
/// communicator's `send`, `recv` and `sendrecv` use them instead of a request. `until` is a
/// `deadline`, `timeout` the communicator's `clock::duration`:
///
/// | expression | type | semantics |
/// |---|---|---|
/// | `t.send_blocking(p, ctx, tag, out, until, timeout)` | `std::optional<op_result>` | as `isend` and waiting for the request, returning once `out` may be reused: an `op_result` whose `error` is empty, or the error `result` would give, or `errc::timeout` when `until` passes first (the send is then withdrawn as by `cancel`). `until` is resolved against `timeout` only when the call has to wait, so a send that completes at once reads no clock. `std::nullopt`: the transport did nothing, and leaves this send to `isend` |
/// | `t.recv_blocking(p, ctx, tag, in, until, timeout)` | `std::optional<op_result>` | as `irecv` and waiting for the request: the same matching, order and `prepare` semantics (a refused message stays queued), an `op_result` as `result` gives it, or `errc::timeout` when `until` passes before a message matched (nothing stays posted; one that matched by then is not cut off, and has up to one more `timeout` to arrive). `std::nullopt`: the transport did nothing, and leaves this receive to `irecv` |
///
/// A transport's `isend` takes `out` as `const std::span<const std::byte>&`, and so does what it
/// calls with `out` that is not inlined and has no registers left for it (a request returned
/// through a hidden pointer and four arguments take five of six): a span passed by value there
/// goes on the stack in one 16-byte load from the two 8-byte stores that wrote it a moment
/// before, a store-forwarding stall that waits for every store ahead of it, the last message's
/// writes into a peer's memory among them (bench/HISTORY.md, sixteenth entry). mpi's `isend`
/// keeps a value: it points `out` at a copy for a small send to itself.
///
/// Every transport header ends with `static_assert(commx::transport::transport<its_type>)`; the
/// conformance suite (tests/transport/conformance.hpp) checks the semantics above.

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/transport/data_layout.hpp"
#include "commx/transport/message.hpp"

namespace commx::transport {

/// A new communicator made by a transport itself (`split`, `split_by_node`, as mpi's): its
/// context id, its members as world ranks in rank order, and this rank in it. No members: this
/// rank is in none.
struct context_split {
  /// The new context id.
  context_id context = 0;
  /// Its members' world ranks in rank order; empty when this rank is in none.
  std::vector<int> members;
  /// This rank in it, or -1.
  int rank = -1;
};

/// A type that carries one rank's tagged byte messages; see the requirements table above.
template <class T>
concept transport = std::movable<typename T::request> &&
    std::default_initializable<typename T::request> &&
    requires(T& t, const T& ct, typename T::request& req, int peer, context_id ctx, int tag,
             std::span<const std::byte> out, recv_buffer in, clock::time_point when,
             std::uint64_t seen) {
  { T::name } -> std::convertible_to<std::string_view>;
  { ct.rank() } -> std::same_as<int>;
  { ct.size() } -> std::same_as<int>;
  { ct.node_of(peer) } -> std::same_as<int>;
  { t.isend(peer, ctx, tag, out) } -> std::same_as<typename T::request>;
  { t.irecv(peer, ctx, tag, in) } -> std::same_as<typename T::request>;
  { t.test(req) } -> std::same_as<bool>;
  { t.result(req) } -> std::convertible_to<const op_result&>;
  { t.cancel(req) } -> std::same_as<bool>;
  { t.iprobe(peer, ctx, tag) } -> std::same_as<std::optional<op_result>>;
  { ct.event_count() } -> std::same_as<std::uint64_t>;
  { t.wait_for_event(seen, when) } -> std::same_as<void>;
};

/// A transport with a blocking send cheaper than a request (see the table above).
template <class T>
concept blocking_send = requires(T& t, int peer, context_id ctx, int tag,
                                 std::span<const std::byte> out, const deadline& until,
                                 clock::duration timeout) {
  {
    t.send_blocking(peer, ctx, tag, out, until, timeout)
    } -> std::same_as<std::optional<op_result>>;
};

/// A transport with a blocking receive cheaper than a request (see the table above).
template <class T>
concept blocking_recv = requires(T& t, int peer, context_id ctx, int tag, recv_buffer in,
                                 const deadline& until, clock::duration timeout) {
  { t.recv_blocking(peer, ctx, tag, in, until, timeout) } -> std::same_as<std::optional<op_result>>;
};

/// A transport that tells which peers it knows failed (see the table above).
template <class T>
concept knows_failures = requires(const T& t) {
  { t.failed_peers() } -> std::convertible_to<std::vector<int>>;
};

/// A transport that can declare a live peer failed (see the table above).
template <class T>
concept excludes_peers = requires(T& t, int peer, std::string_view why) {
  t.exclude(peer, why);
};

/// Whether ranks of one node can be cut off from each other without knowing it (see
/// `T::node_cannot_split` above): shrink's majority rule then applies within a node too.
template <class T>
inline constexpr bool splits_within_node = !requires {
  requires T::node_cannot_split;
};

/// A transport that knows each rank's data layout (see the table above).
template <class T>
concept knows_layouts = requires(const T& t, int peer) {
  { t.layout_of(peer) } -> std::convertible_to<data_layout>;
};

/// A transport whose progress and completion checks come apart (see the table above).
template <class T>
concept progresses_apart = requires(T& t, const T& ct, const typename T::request& req) {
  t.progress();
  { ct.completed(req) } -> std::same_as<bool>;
};

}  // namespace commx::transport
