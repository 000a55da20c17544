// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Ports over other ports, so that a policy can run another policy's algorithm on part of the
/// group or one level up: `sub_port`, over a subset of a port's ranks (a node's ranks, the node
/// leaders; rank i of the sub-port is `members[i]` of the parent), and `site_level_port`, the
/// same ranks with sites taken for nodes. Messages go through the port below unchanged.

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "commx/coll/concept.hpp"

namespace commx::coll::detail {

template <class Port>
class sub_port {
 public:
  using pending = typename Port::pending;
  static constexpr std::string_view stack = stack_of<Port>();
  static constexpr bool simulated = simulated_stack<Port>();

  /// `members` are parent ranks in the order they get sub-port ranks; `me` is this rank's
  /// index among them.
  sub_port(Port& parent, std::vector<int> members, int me)
      : parent_(parent), owned_(std::move(members)), members_(owned_), me_(me) {}
  /// The same over members kept elsewhere (a communicator's node_layout), for as long as they
  /// live: nothing is copied.
  sub_port(Port& parent, std::span<const int> members, int me)
      : parent_(parent), members_(members), me_(me) {}
  // members_ may point into owned_: a copy would point into the original's.
  sub_port(const sub_port&) = delete;
  sub_port& operator=(const sub_port&) = delete;
  sub_port(sub_port&&) noexcept = default;  // a vector's move keeps its elements where they are
  sub_port& operator=(sub_port&&) = delete;

  [[nodiscard]] int rank() const { return me_; }
  [[nodiscard]] int size() const { return static_cast<int>(members_.size()); }
  [[nodiscard]] int node_of(int peer) const { return parent_.node_of(parent_rank(peer)); }
  [[nodiscard]] int site_of(int peer) const requires requires(const Port& p) { p.site_of(0); }
  { return parent_.site_of(parent_rank(peer)); }
  [[nodiscard]] int parent_rank(int peer) const { return members_[static_cast<std::size_t>(peer)]; }

  template <class E>
  void send(int peer, std::span<const E> out) {
    parent_.send(parent_rank(peer), out);
  }
  template <class E>
  void send(int peer, std::span<E> out) {
    parent_.send(parent_rank(peer), std::span<const E>(out));
  }
  template <class E>
  void recv(int peer, std::span<E> in) {
    parent_.recv(parent_rank(peer), in);
  }
  template <class E>
  pending isend(int peer, std::span<const E> out) {
    return parent_.isend(parent_rank(peer), out);
  }
  template <class E>
  pending irecv(int peer, std::span<E> in) {
    return parent_.irecv(parent_rank(peer), in);
  }
  void wait_all(std::span<pending> requests) { parent_.wait_all(requests); }

 private:
  Port& parent_;
  std::vector<int> owned_;
  std::span<const int> members_;
  int me_;
};

/// The same ranks one level up: what the port calls sites are this port's nodes, and it knows
/// of no sites itself. coll::hierarchical runs its node-level algorithm over it among the node
/// leaders, which is the site level.
template <class Port>
class site_level_port {
 public:
  using pending = typename Port::pending;
  static constexpr std::string_view stack = stack_of<Port>();
  static constexpr bool simulated = simulated_stack<Port>();

  explicit site_level_port(Port& below) : below_(below) {}

  [[nodiscard]] int rank() const { return below_.rank(); }
  [[nodiscard]] int size() const { return below_.size(); }
  [[nodiscard]] int node_of(int peer) const { return below_.site_of(peer); }

  template <class E>
  void send(int peer, std::span<const E> out) {
    below_.send(peer, out);
  }
  template <class E>
  void send(int peer, std::span<E> out) {
    below_.send(peer, std::span<const E>(out));
  }
  template <class E>
  void recv(int peer, std::span<E> in) {
    below_.recv(peer, in);
  }
  template <class E>
  pending isend(int peer, std::span<const E> out) {
    return below_.isend(peer, out);
  }
  template <class E>
  pending irecv(int peer, std::span<E> in) {
    return below_.irecv(peer, in);
  }
  void wait_all(std::span<pending> requests) { below_.wait_all(requests); }

 private:
  Port& below_;
};

}  // namespace commx::coll::detail
