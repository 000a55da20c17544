// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's blocking calls without a request (engine.hpp; transport::tcp's
/// send_blocking and recv_blocking). A small send the receiver has credit for is written at
/// once, and what the socket does not take is copied behind it, so the call returns done; any
/// other send is left to `isend`. A receive matches and waits as `irecv` and a request's wait
/// do, on a recycled operation, reading no clock until a test has found it unfinished.
///
/// Out of line as Asio's detail/impl files are, included by engine.hpp.

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline std::optional<op_result> engine::send_eager(int dest, context_id ctx, int tag,
                                                   std::span<const std::byte> data) {
  peer_link& link = peers_[index(dest)];
  const std::uint64_t cost = data.size() + header_size;
  if (data.size() > cfg_.eager_threshold || link.send_credit < cost) return std::nullopt;
  link.send_credit -= cost;
  connection& c = *link.conn;
  const header_bytes header =
      encode(frame_header{frame_kind::eager, 0, rank(), tag, ctx, data.size(), 0});
  std::error_code ec;
  // Still being connected: the frame waits in the queue.
  const std::size_t n = c.open ? c.write_now(header, data, ec) : 0;
  if (ec) {
    broken(dest, ec);
    return lost(dest, data.size());
  }
  if (n < header_size + data.size()) {
    out_frame& f = c.out.emplace_back();
    f.header = header;
    f.owned.assign(data.begin(), data.end());
    f.payload = f.owned;
    f.written = n;
    flush(dest);
  }
  return op_result{dest, tag, data.size()};
}

inline std::optional<op_result> engine::send_blocking(int dest, context_id ctx, int tag,
                                                      std::span<const std::byte> data) {
  // To this rank itself, or to a peer that is gone: as isend does it.
  if (dest == rank() || peers_[index(dest)].state != presence::present) return std::nullopt;
  std::optional<op_result> sent = send_eager(dest, ctx, tag, data);
  if (sent) peers_[index(dest)].bytes_sent += data.size();
  return sent;
}

inline op_result engine::recv_blocking(int source, context_id ctx, int tag,
                                       const recv_buffer& buffer, const deadline& until,
                                       clock::duration timeout) {
  const std::shared_ptr<operation> op = irecv(source, ctx, tag, buffer);
  std::optional<clock::time_point> when;  // resolved once a test found it unfinished
  bool extended = false;
  for (;;) {
    const std::uint64_t seen = events_;
    if (test(op)) return op->result;
    if (!when) when = until.resolve(timeout);
    if (clock::now() >= *when) {
      // A receive that matched is not withdrawn half-way at `until` (the concept: a timeout
      // is for a receive nothing matched; the communicator, whose short waits on stacks with
      // recovery end here, posts the receive again after one): its data is on the way, and it
      // has one more `timeout` to arrive. Else, or then, it is withdrawn as a request's wait
      // withdraws it, whatever stage it is at; one that completed meanwhile has its result.
      if (!extended && op->where != operation::stage::posted) {
        extended = true;
        when = clock::now() + std::min(timeout, clock::duration(std::chrono::hours(1)));
        continue;
      }
      if (cancel(op)) return op_result{source, tag, 0, make_error_code(errc::timeout)};
      return op->result;
    }
    wait_for_event(seen, *when);
  }
}

}  // namespace commx::detail::tcp
