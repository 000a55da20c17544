// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// transport::mpi's matched path as the endpoint state runs it: finding the message a waiting
/// receive takes (held first, else MPI_Improbe for the receives so far together), offering
/// messages to receives in posting order, and starting their MPI_Imrecv. Out of line from
/// endpoint_state.hpp, which includes it; the file comment of transport/mpi.hpp says why.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/transport/detail/mpi/endpoint_state.hpp"

namespace commx::detail::mpi {

inline std::optional<endpoint_state::message_in_hand> endpoint_state::find_message(
    const receive& r, const filter_union& wide) {
  if (!held.empty()) {
    if (auto i = find_held(r.source, r.ctx, r.tag)) {
      message_in_hand m = std::move(held[*i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(*i));
      m.was_held = i;
      return m;
    }
  }
  const context* c = contexts.find(r.ctx);
  if (c == nullptr) return std::nullopt;  // released: cancel_receive's business
  std::optional<message_in_hand> m = probe_mpi(*c, wide.source, wide.tag);
  if (m) m->ctx = r.ctx;
  return m;
}

inline std::optional<endpoint_state::message_in_hand> endpoint_state::probe_mpi(const context& c,
                                                                                int want_source,
                                                                                int want_tag) {
  const int source = want_source == any_source ? MPI_ANY_SOURCE : c.local_of(want_source);
  const int bank_count = want_tag == any_tag ? tags.banks : 1;
  for (int i = 0; i < bank_count; ++i) {
    const int bank = want_tag == any_tag ? i : tags.bank_of(want_tag);
    int found = 0;
    message_in_hand m;
    MPI_Status status;
    const int code =
        MPI_Improbe(source, want_tag == any_tag ? MPI_ANY_TAG : tags.mpi_tag(want_tag),
                    c.banks[static_cast<std::size_t>(bank)], &found, &m.message, &status);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Improbe", {rank, want_source, want_tag, 0, "recv"});
    if (found == 0) continue;
    m.source = c.world_of(status.MPI_SOURCE);
    m.tag = tags.commx_tag(bank, status.MPI_TAG);
    m.bytes = detail::mpi::bytes_of(status);
    if (m.bytes > detail::mpi::inline_limit) [[unlikely]]
      receive_announcement(m);
    return m;
  }
  return std::nullopt;
}

inline bool endpoint_state::progress_posted(std::uint32_t until) {
  bool delivered = false;
  // Per context, the matched-path receives looked at in this pass, together; it only widens.
  // Wider is safe: a message no receive up to this one matches is held, in order.
  std::vector<filter_union>& wide = pass_filters;
  wide.clear();
  const auto widened = [&wide](const receive& r) -> const filter_union& {
    for (filter_union& f : wide) {
      if (f.ctx == r.ctx) {
        f.widen(r);
        return f;
      }
    }
    return wide.emplace_back(filter_union{r.ctx, r.source, r.tag});
  };
  for (std::size_t i = 0; i < posted.size();) {
    // A refused message goes to the next receive: none may stay with MPI. Those withdrawn
    // may be behind us in this pass, and what MPI gave them is held now, ahead of anything
    // a wider probe further on would find for them: look at every receive again.
    if (!held.empty() && withdraw_from_mpi()) i = 0;
    const std::uint32_t slot = posted[i];
    receive& r = slots[slot];
    if (r.state == phase::with_mpi || r.state == phase::arrived) {
      if (!test_with_mpi(r) || earlier_may_pass_on(i)) {
        if (slot == until) return delivered;
        ++i;
        continue;
      }
      posted.erase_at(i);
      take_arrival(r);
      waiting.progressed();
      delivered = true;
      if (slot == until) return delivered;
      if (!held.empty()) i = 0;  // it refused: earlier receives get the first offer
      continue;
    }
    std::optional<message_in_hand> m = find_message(r, widened(r));
    if (!m) {
      if (slot == until) return delivered;
      ++i;
      continue;
    }
    // Receives with MPI have their messages from MPI: the earliest matched-path one takes it.
    std::size_t j = 0;
    const context_id ctx = r.ctx;
    while (j <= i && (slots[posted[j]].state != phase::posted ||
                      !matches(slots[posted[j]].source, slots[posted[j]].ctx, slots[posted[j]].tag,
                               m->source, ctx, m->tag))) {
      ++j;
    }
    if (j > i) {  // for a later receive, after the messages held before it
      hold(std::move(*m));
      continue;
    }
    const std::uint32_t taker = posted[j];
    posted.erase_at(j);
    deliver(slots[taker], *m);
    waiting.progressed();
    delivered = true;
    if (taker == until) return delivered;
    i = j;
  }
  return delivered;
}

inline void endpoint_state::deliver(receive& r, message_in_hand& m) {
  std::error_code refused;
  std::byte* into = r.buffer.prepare(m.bytes, refused);
  r.result = {m.source, m.tag, m.bytes, refused};
  if (refused) {
    hold(std::move(m));
    r.state = phase::done;
    return;
  }
  start_receiving(r, into, m);
}

inline void endpoint_state::start_receiving(receive& r, std::byte* into, message_in_hand& m) {
  const error_context here{rank, m.source, m.tag, m.bytes, "recv"};
  const detail::mpi::byte_layout layout(m.bytes);
  switch (m.how) {
    case carrier::matched:
      detail::mpi::check(MPI_Imrecv(into, layout.count(), layout.type(), &m.message, &r.mpi),
                         "MPI_Imrecv", here);
      break;
    case carrier::copied:
      if (m.bytes != 0) std::memcpy(into, m.copy.data(), m.bytes);
      r.state = phase::done;
      return;
    case carrier::announced: {
      const context* c = contexts.find(m.ctx);
      if (c == nullptr) {
        throw_error(errc::invalid_argument, here, fmt::format("context {} was released", m.ctx));
      }
      detail::mpi::check(MPI_Irecv(into, layout.count(), layout.type(), c->local_of(m.source),
                                   m.bulk_tag, c->bulk, &r.mpi),
                         "MPI_Irecv", here);
      break;
    }
  }
  r.state = phase::receiving;
  finish_receiving(r);
}

}  // namespace commx::detail::mpi
