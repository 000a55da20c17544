// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What code written once for every stack needs to go on after a failure (README, "Going on
/// after a failure"): whether a communicator type can (revoke, agree and shrink compile only
/// where its transport tells failures and takes any context), and which errors a recovery
/// answers.

#include "commx/communicator.hpp"
#include "commx/error.hpp"

namespace commx {

/// Whether a program on `Comm` can go on after a failure: inproc, shm, tcp, wan, the layered
/// stacks and faulty<T> over them; not mpi and mpi+wan (Debian's MPIs have no ULFM).
template <class Comm>
concept recovers_from_failures = detail::recovers<typename Comm::transport_type>;

/// Whether `e` is what a recovery answers: a peer was lost, or a survivor revoked the
/// communicator because it saw one. Anything else (a timeout, a wrong argument) is not fixed by
/// going on without someone.
[[nodiscard]] inline bool calls_for_recovery(const error& e) {
  return e.code() == errc::peer_lost || e.code() == errc::revoked;
}

}  // namespace commx
