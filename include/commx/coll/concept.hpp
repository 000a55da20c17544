// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The collectives-policy concept, and the port through which a policy talks.
///
/// A collectives policy is a type with static member function templates, one per collective,
/// each written once over a *port*: the point-to-point view a communicator lends its policy for
/// one collective call. The port speaks in the communicator's ranks, on a context of its own
/// (so collective traffic never matches a user's receive), with the call's one deadline, and
/// counts messages under the collective's name.
///
/// Port requirements, for `p` a `P&`, `peer` a rank, `out` a `std::span<const E>` and `in` a
/// `std::span<E>` (E trivially copyable):
///
/// | expression | type | semantics |
/// |---|---|---|
/// | `p.rank()`, `p.size()` | `int` | this rank and the communicator's size |
/// | `p.node_of(peer)` | `int` | node id of `peer`: equal ids share a node |
/// | `p.send(peer, out)` | `void` | blocking send |
/// | `p.recv(peer, in)` | `void` | blocking receive of exactly `in.size()` elements; any other size is errc::collective_mismatch |
/// | `p.isend(peer, out)`, `p.irecv(peer, in)` | `P::pending` | nonblocking; buffers stay valid until completion |
/// | `p.wait_all(span<P::pending>)` | `void` | completes them all (a default-constructed pending is complete) |
/// | `P::stack` (optional) | `std::string_view` | the name of the stack the port runs over (the transport's `name`); coll::tuned picks its measured table by it |
/// | `p.site_of(peer)` (optional) | `int` | site id of `peer`: equal ids share a site; a node is inside one site. The communicator's port has it (0 for all on a transport without sites) |
///
/// Policy requirements, for `C` the policy, `T` the transport, `data` a `std::span<E>`, `in` a
/// `std::span<const E>`, `op` a binary operation on E, `root` a rank, `counts` and `displs`
/// `std::span<const std::size_t>` with one entry per rank:
///
/// | expression | semantics |
/// |---|---|
/// | `C::name`, `C::description` | a `std::string_view` each, printed by benches and examples |
/// | `C::supports<T>` | whether the policy works over transport T (native MPI collectives only over MPI) |
/// | `C::barrier(p)` | returns once every rank has entered |
/// | `C::bcast(p, data, root)` | root's `data` is copied into every rank's `data` |
/// | `C::reduce(p, data, op, root)` | in place: root's `data` becomes the element-wise reduction of every rank's `data`, in an order fixed by the rank count that the policy documents; other ranks' `data` is unchanged |
/// | `C::allreduce(p, data, op)` | every rank's `data` becomes the reduction |
/// | `C::gather(p, in, data, root)` | root's `data` (size p * n) receives every rank's `in` (size n) in rank order |
/// | `C::scatter(p, in, data, root)` | rank r's `data` (size n) receives root's `in[r*n, (r+1)*n)` |
/// | `C::allgather(p, in, data)` | every rank's `data` (p * n) receives every `in` (n) in rank order |
/// | `C::alltoall(p, in, data)` | rank r's `data[s*n, (s+1)*n)` receives rank s's `in[r*n, (r+1)*n)` |
/// | `C::scan(p, data, op)` | in place: rank r's `data` becomes `x0 op x1 op ... op xr` |
/// | `C::exscan(p, data, op)` | in place: rank r > 0 gets `x0 op ... op x(r-1)`; rank 0's `data` is unchanged |
/// | `C::gatherv(p, in, data, counts, displs, root)` | root's `data[displs[r], +counts[r])` receives rank r's `in`; counts and displs matter at the root only |
/// | `C::scatterv(p, in, counts, displs, data, root)` | rank r's `data` (counts[r] elements) receives root's `in[displs[r], +counts[r])` |
/// | `C::allgatherv(p, in, data, counts, displs)` | every rank's `data[displs[r], +counts[r])` receives rank r's `in`; counts and displs are the same on every rank; `in` may be this rank's own block of `data` (in place) |
/// | `C::alltoallv(p, in, scounts, sdispls, data, rcounts, rdispls)` | rank r's `in[sdispls[s], +scounts[s])` goes to rank s's `data[rdispls[r], +rcounts[r])` |
/// | `C::reduce_scatter(p, data, counts, op)` | in place: `data` holds sum(counts) elements on every rank; afterwards rank r's `data[0, counts[r])` holds block r of the element-wise reduction; the rest of `data` is unspecified |
///
/// Nonblocking collectives (`communicator::iallreduce`, ...) run the same policy code on a
/// fiber, whose port hands control back wherever the code would block; a policy whose library
/// has nonblocking collectives of its own names, as `C::nonblocking`, a policy to run instead
/// (coll::native's starts MPI_Iallreduce, ... and waits through the port's `await(started)`).
///
/// The communicator checks ranks and sizes before it calls a policy. For one policy and one
/// rank count, results must not depend on the transport: a policy's order of operations may
/// depend on ranks and sizes, never on timing.

#include <concepts>
#include <cstddef>
#include <functional>
#include <span>
#include <string_view>

namespace commx::coll {

/// What a policy may do with the port it is given.
template <class P>
concept port = requires(P& p, const P& cp, int peer, std::span<const double> out,
                        std::span<double> in, std::span<typename P::pending> pending) {
  { cp.rank() } -> std::same_as<int>;
  { cp.size() } -> std::same_as<int>;
  { cp.node_of(peer) } -> std::same_as<int>;
  p.send(peer, out);
  p.recv(peer, in);
  { p.isend(peer, out) } -> std::same_as<typename P::pending>;
  { p.irecv(peer, in) } -> std::same_as<typename P::pending>;
  p.wait_all(pending);
};

/// The name of the stack port P runs over (`P::stack`), or an empty name if P names none.
template <class P>
[[nodiscard]] constexpr std::string_view stack_of() {
  if constexpr (requires { P::stack; }) {
    return P::stack;
  } else {
    return {};
  }
}

/// Whether port (or transport) P's ranks run on a simulated platform (`P::simulated`), each on
/// a core of its simulated host, not on this machine's cores.
template <class P>
[[nodiscard]] constexpr bool simulated_stack() {
  if constexpr (requires { P::simulated; }) {
    return P::simulated;
  } else {
    return false;
  }
}

/// A port with nothing behind it: the concept below checks policies against it, so a policy is
/// checked without instantiating any communicator. Declared only, never called.
struct port_archetype {
  struct pending {};
  /// This rank in the communicator.
  [[nodiscard]] int rank() const;
  /// The communicator's size.
  [[nodiscard]] int size() const;
  /// The node `peer` is on: equal ids share a node.
  [[nodiscard]] int node_of(int peer) const;
  /// Blocking send of `out` to `peer`.
  template <class E>
  void send(int peer, std::span<const E> out);
  /// Blocking receive of exactly `in.size()` elements from `peer`.
  template <class E>
  void recv(int peer, std::span<E> in);
  /// Nonblocking send; `out` stays valid until completion.
  template <class E>
  pending isend(int peer, std::span<const E> out);
  /// Nonblocking receive; `in` stays valid until completion.
  template <class E>
  pending irecv(int peer, std::span<E> in);
  /// Completes every request in `requests`.
  void wait_all(std::span<pending> requests);
};

static_assert(port<port_archetype>);

/// A policy that says what it is, for benches and examples to print.
template <class C>
concept named_policy = requires {
  { C::name } -> std::convertible_to<std::string_view>;
  { C::description } -> std::convertible_to<std::string_view>;
};

/// A policy that works over transport T (native MPI collectives only work over MPI).
template <class C, class T>
concept usable_over = C::template supports<T>;

/// The collectives where every rank contributes and receives the same number of elements.
template <class C>
concept regular_collectives = requires(port_archetype& p, std::span<double> data,
                                       std::span<const double> in, std::plus<> op, int root) {
  C::barrier(p);
  C::bcast(p, data, root);
  C::reduce(p, data, op, root);
  C::allreduce(p, data, op);
  C::gather(p, in, data, root);
  C::scatter(p, in, data, root);
  C::allgather(p, in, data);
  C::alltoall(p, in, data);
  C::scan(p, data, op);
  C::exscan(p, data, op);
};

/// The collectives whose counts differ per rank ("v" variants, reduce_scatter).
template <class C>
concept varying_collectives = requires(port_archetype& p, std::span<double> data,
                                       std::span<const double> in,
                                       std::span<const std::size_t> counts,
                                       std::span<const std::size_t> displs, std::plus<> op,
                                       int root) {
  C::gatherv(p, in, data, counts, displs, root);
  C::scatterv(p, in, counts, displs, data, root);
  C::allgatherv(p, in, data, counts, displs);
  C::alltoallv(p, in, counts, displs, data, counts, displs);
  C::reduce_scatter(p, data, counts, op);
};

/// The policy a nonblocking collective runs: `C::nonblocking` where C names one, else C.
template <class C>
struct nonblocking_of {
  using type = C;  ///< C itself: its blocking code runs on a fiber
};
/// A policy that names its own policy for nonblocking collectives (coll::native).
template <class C>
requires requires { typename C::nonblocking; }
struct nonblocking_of<C> {
  using type = typename C::nonblocking;  ///< the policy C names for nonblocking collectives
};

/// A collectives policy usable over transport T; see the requirements table above.
template <class C, class T>
concept collectives =
    named_policy<C> && usable_over<C, T> && regular_collectives<C> && varying_collectives<C>;

}  // namespace commx::coll
