// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// transport::mpi's blocking calls without a request (transport::blocking_send,
/// transport::blocking_recv), out of line as Asio's `impl` files are: the MPI calls of one
/// blocking send or receive, and the slow path they fall back to when the first polls find
/// nothing (see mpi.hpp's file comment).

#include <mpi.h>

#include <optional>
#include <span>

#include "commx/transport/mpi.hpp"

namespace commx::transport {

inline std::optional<op_result> mpi::send_blocking(int dest, context_id ctx, int tag,
                                                   std::span<const std::byte> data,
                                                   const deadline& until, clock::duration timeout) {
  state& s = *state_;
  if (dest == s.rank) [[unlikely]]
    return std::nullopt;
  const context& c = context_of(ctx, "send", dest, tag, data.size());
  MPI_Request handle = MPI_REQUEST_NULL;
  const bool announced = start_send(c, dest, tag, data, handle, "send");
  int done = 0;
  const int code = MPI_Test(&handle, &done, MPI_STATUS_IGNORE);
  if (code != MPI_SUCCESS) [[unlikely]]
    detail::mpi::fail(code, "MPI_Test", where("send", dest, tag, data.size()));
  if (done == 0) [[unlikely]] {
    request req;
    req.send_ = handle;
    req.announced_ = announced;
    req.outcome_ = {s.rank, tag, data.size()};
    return wait_out(req, until, timeout);
  }
  s.waiting.progressed();
  return op_result{s.rank, tag, data.size()};
}

inline std::optional<op_result> mpi::recv_blocking(int source, context_id ctx, int tag,
                                                   const recv_buffer& buffer, const deadline& until,
                                                   clock::duration timeout) {
  state& s = *state_;
  if (!s.posted.empty() || !s.held.empty()) [[unlikely]]
    return std::nullopt;
  const context& c = context_of(ctx, "recv", source, tag, buffer.capacity());
  if (s.receives == receive_path::posted && postable(buffer, source, tag)) [[likely]] {
    return receive_posted(c, ctx, source, tag, buffer, until, timeout);
  }
  for (int poll = 0; poll < quick_polls; ++poll) {
    if (std::optional<state::message_in_hand> m = s.probe_mpi(c, source, tag)) {
      m->ctx = ctx;
      return take(*m, buffer, until, timeout);
    }
  }
  request req;
  req.slot_ = s.post(source, ctx, tag, buffer);
  return wait_out(req, until, timeout);
}

inline op_result mpi::take(mpi::state::message_in_hand& m, const recv_buffer& buffer,
                           const deadline& until, clock::duration timeout) {
  state& s = *state_;
  s.waiting.progressed();
  op_result out{m.source, m.tag, m.bytes, {}};
  std::byte* into = buffer.prepare(m.bytes, out.error);
  if (out.error) {
    s.hold(std::move(m));
    return out;
  }
  if (m.how == state::carrier::matched) [[likely]] {
    const detail::mpi::byte_layout layout(m.bytes);
    const int code = MPI_Mrecv(into, layout.count(), layout.type(), &m.message, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Mrecv", where("recv", m.source, m.tag, m.bytes));
    return out;
  }
  request req;
  req.slot_ = s.receive_taken(m, into, out);
  return wait_out(req, until, timeout);
}

inline op_result mpi::receive_posted(const mpi::context& c, context_id ctx, int source, int tag,
                                     const recv_buffer& buffer, const deadline& until,
                                     clock::duration timeout) {
  state& s = *state_;
  const bool direct = buffer.capacity() >= detail::mpi::announcement_bytes;
  std::byte* into = s.scratch.data();
  int count = static_cast<int>(s.scratch.size());
  if (direct) {
    std::error_code ec;
    into = buffer.prepare(buffer.capacity(), ec);  // a fixed buffer: its start
    count = static_cast<int>(buffer.capacity());
    state::keep_prefix(s.scratch, into);
  }
  const int bank = tag == any_tag ? 0 : s.tags.bank_of(tag);
  int code = MPI_SUCCESS;
  MPI_Request handle = s.repeated.find(into, count, mpi_source(c, source), mpi_tag(tag),
                                       c.banks[static_cast<std::size_t>(bank)], code);
  if (handle == MPI_REQUEST_NULL) [[unlikely]]
    detail::mpi::fail(code, "MPI_Recv_init", where("recv", source, tag, buffer.capacity()));
  const MPI_Request kept = handle;  // MPI may set `handle` to MPI_REQUEST_NULL on an error
  code = MPI_Start(&handle);
  if (code != MPI_SUCCESS) [[unlikely]] {
    s.repeated.discard(kept, handle != MPI_REQUEST_NULL);
    detail::mpi::fail(code, "MPI_Start", where("recv", source, tag, buffer.capacity()));
  }
  const arrival here{c, ctx, tag, buffer, into, direct};
  MPI_Status status;
  for (int poll = 0; poll < quick_polls; ++poll) {
    if (test_started(handle, kept, status, tag)) [[likely]]
      return posted_arrived(here, status, until, timeout);
  }
  const clock::time_point when = until.resolve(timeout);
  for (;;) {
    const std::uint64_t seen = event_count();
    if (test_started(handle, kept, status, tag))
      return posted_arrived(here, status, until, timeout);
    if (clock::now() >= when) break;
    wait_for_event(seen, when);
  }
  // The deadline: withdrawn, unless its message came meanwhile.
  const error_context at = where("recv", source, tag, buffer.capacity());
  detail::mpi::check(MPI_Cancel(&handle), "MPI_Cancel", at);
  code = MPI_Wait(&handle, &status);
  s.repeated.discard(kept, handle != MPI_REQUEST_NULL);
  detail::mpi::check(code, "MPI_Wait", at);
  int cancelled = 0;
  detail::mpi::check(MPI_Test_cancelled(&status, &cancelled), "MPI_Test_cancelled", at);
  if (cancelled == 0) return posted_arrived(here, status, until, timeout);
  return {source, tag, 0, make_error_code(errc::timeout)};
}

inline bool mpi::test_started(MPI_Request& handle, MPI_Request kept, MPI_Status& status, int tag) {
  int done = 0;
  const int code = MPI_Test(&handle, &done, &status);
  if (code != MPI_SUCCESS) [[unlikely]] {
    state_->repeated.discard(kept, handle != MPI_REQUEST_NULL);
    detail::mpi::fail(code, "MPI_Test", where("recv", unknown, tag, 0));
  }
  return done != 0;
}

inline op_result mpi::posted_arrived(const mpi::arrival& a, const MPI_Status& status,
                                     const deadline& until, clock::duration timeout) {
  state& s = *state_;
  s.waiting.progressed();
  const int bank = a.requested_tag == any_tag ? 0 : s.tags.bank_of(a.requested_tag);
  op_result out{a.c.world_of(status.MPI_SOURCE),
                s.tags.commx_tag(bank, status.MPI_TAG),
                detail::mpi::bytes_of(status),
                {}};
  if (out.bytes <= detail::mpi::inline_limit) [[likely]] {
    s.take_inline(a.buffer, a.into, a.direct ? &s.scratch : nullptr, out, a.ctx);
    return out;
  }
  state::message_in_hand m;
  m.source = out.source;
  m.ctx = a.ctx;
  m.tag = out.tag;
  s.announced(m, std::span<const std::byte>(a.into, out.bytes));
  if (a.direct) state::give_back_prefix(s.scratch, a.into, detail::mpi::announcement_bytes);
  return take(m, a.buffer, until, timeout);
}

}  // namespace commx::transport
