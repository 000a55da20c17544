// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How transport::mpi's requests end, out of line as its blocking calls are: a receive tested
/// to completion (its slot's result copied into the request), a receive withdrawn from MPI or
/// from the endpoint, a send withdrawn or left to finish in the background (see mpi.hpp's
/// file comment on what MPI cannot withdraw).

#include <mpi.h>

#include <utility>

#include "commx/transport/mpi.hpp"

namespace commx::transport {

inline bool mpi::test_receive(request& req) {
  state& s = *state_;
  auto& r = s.slots[req.slot_];
  if (r.state == state::phase::with_mpi && s.held.empty() && s.posted[0] == req.slot_) {
    // The earliest receive, with MPI, nothing held: what progress_posted's first turn does,
    // without the pass around it (a window's receives are mostly tested in this state).
    if (!s.test_with_mpi(r)) return false;
    s.posted.erase_at(0);
    s.take_arrival(r);
    s.waiting.progressed();
  } else if (r.state == state::phase::posted || r.state == state::phase::with_mpi ||
             r.state == state::phase::arrived) {
    (void)s.progress_posted(req.slot_);
  }
  if (r.state == state::phase::receiving) s.finish_receiving(r);
  if (r.state != state::phase::done) return false;
  copy_fields(r.result, req.outcome_);
  s.release_slot(req.slot_);
  req.slot_ = request::no_slot;
  s.waiting.progressed();
  return true;
}

inline bool mpi::cancel_receive(request& req) {
  auto& r = state_->slots[req.slot_];
  bool withdrawn = false;
  if (r.state == state::phase::with_mpi && state_->cancel_with_mpi(r)) {
    state_->posted.remove(req.slot_);
    withdrawn = true;
  } else if (r.state == state::phase::with_mpi || r.state == state::phase::arrived) {
    state_->posted.remove(req.slot_);
    state_->take_arrival(r);  // too late: it has its message
  }
  if (r.state == state::phase::posted) {
    state_->posted.remove(req.slot_);
    withdrawn = true;
  }
  if (r.state == state::phase::receiving) {
    // Matched: its data is already on the way, and MPI cannot cancel it.
    detail::mpi::check(MPI_Wait(&r.mpi, MPI_STATUS_IGNORE), "MPI_Wait",
                       where("recv", r.result.source, r.result.tag, r.result.bytes));
  }
  req.outcome_ = r.result;
  state_->release_slot(req.slot_);
  req.slot_ = request::no_slot;
  return withdrawn;
}

inline bool mpi::cancel_send(request& req) {
  if (req.send_ == MPI_REQUEST_NULL) return false;
  const error_context here = where("isend", unknown, req.outcome_.tag, req.outcome_.bytes);
  int done = 0;
  MPI_Status status;
  detail::mpi::check(MPI_Test(&req.send_, &done, &status), "MPI_Test", here);
  if (done != 0) return false;
  if (req.announced_) {
    // Its announcement has gone: the receiver will wait for these bytes.
    state_->orphans.push_back({std::exchange(req.send_, MPI_REQUEST_NULL), std::nullopt});
    return true;
  }
  detail::mpi::check(MPI_Cancel(&req.send_), "MPI_Cancel", here);
  detail::mpi::check(MPI_Test(&req.send_, &done, &status), "MPI_Test", here);
  if (done != 0) {
    int cancelled = 0;
    detail::mpi::check(MPI_Test_cancelled(&status, &cancelled), "MPI_Test_cancelled", here);
    return cancelled != 0;
  }
  state_->orphans.push_back({std::exchange(req.send_, MPI_REQUEST_NULL), std::nullopt});
  return true;
}

}  // namespace commx::transport
