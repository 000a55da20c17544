// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What transport::mpi's endpoint keeps between calls (its receive slots, the messages it holds
/// out of MPI's matching queue, the sends that finish in the background, its contexts), apart
/// from the endpoint's protocol in transport/mpi.hpp, which reads and changes it.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/mpi/announcement.hpp"
#include "commx/transport/detail/mpi/backoff.hpp"
#include "commx/transport/detail/mpi/call.hpp"
#include "commx/transport/detail/mpi/contexts.hpp"
#include "commx/transport/detail/mpi/init.hpp"
#include "commx/transport/detail/mpi/persistent.hpp"
#include "commx/transport/detail/mpi/receive_order.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::mpi {

using transport::op_result;
using transport::recv_buffer;

/// How receives meet MPI: `posted` posts them to MPI before their message arrives, `matched`
/// probes first (transport::mpi::receive_path).
enum class receive_path { matched, posted };

// What the endpoint keeps between calls; behind a pointer so the endpoint moves cheaply and
// a moved-from endpoint frees nothing.
struct endpoint_state {
  // posted: waits in the endpoint for a matched message; with_mpi: posted to MPI (MPI_Irecv);
  // arrived: MPI has completed it (`status`), the endpoint has not looked yet; receiving: a
  // message's bytes are on their way into the buffer.
  enum class phase : std::uint8_t { free, posted, with_mpi, arrived, receiving, done };

  struct receive {
    phase state = phase::free;
    int source = any_source;  // as posted: world rank or any_source
    context_id ctx = 0;
    int tag = any_tag;  // as posted: commx tag or any_tag
    recv_buffer buffer{std::span<std::byte>{}};
    MPI_Request mpi = MPI_REQUEST_NULL;  // with_mpi: the MPI_Irecv; receiving: the bytes'
    op_result result{};
    std::byte* target = nullptr;  // with_mpi: the buffer's start, or `scratch`
    bool direct = false;          // with_mpi: into the buffer itself
    MPI_Status status{};          // arrived
    // The target of a small buffer; a direct one's first bytes, as they were (keep_prefix).
    std::unique_ptr<detail::mpi::announcement_frame> scratch;  // kept as the slot is reused
  };

  // How a message that is out of MPI's matching queue, and not yet received, is reached.
  enum class carrier : std::uint8_t {
    matched,    // MPI_Improbe matched it: MPI_Mrecv or MPI_Imrecv receives it
    copied,     // a receive posted to MPI took it into the scratch: the endpoint has it
    announced,  // its announcement was received: its bytes wait on the bulk communicator
  };

  // A message out of MPI's matching queue that no receive has taken: found for a receive,
  // or held because its receive refused it (the next matching receive takes it).
  struct message_in_hand {
    carrier how = carrier::matched;
    MPI_Message message = MPI_MESSAGE_NULL;  // matched
    std::vector<std::byte> copy;             // copied
    int bulk_tag = 0;                        // announced
    int source = 0;                          // world rank
    context_id ctx = 0;
    int tag = 0;
    std::size_t bytes = 0;
    std::optional<std::size_t> was_held;  // its place in `held`, taken out to be offered
  };

  // MPI is checked first: `tags` reads it.
  endpoint_state(MPI_Comm comm, std::shared_ptr<commx::init> keep)
      : guard((check_usable(comm), std::move(keep))) {
    detail::mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    detail::mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    for (context_id ctx : {context_id{0}, context_id{1}}) {
      MPI_Comm dup = MPI_COMM_NULL;
      detail::mpi::check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
      contexts.adopt(ctx, dup, tags.banks, comm);
    }
    world = contexts.find(0)->banks[0];
    find_nodes();
  }
  endpoint_state(const endpoint_state&) = delete;
  endpoint_state& operator=(const endpoint_state&) = delete;

  ~endpoint_state() {
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0) return;
    // Messages matched but never taken, sends never completed: MPI_Finalize must not wait
    // for them.
    std::vector<std::byte> sink;
    for (message_in_hand& h : held) {
      sink.resize(h.bytes);
      const detail::mpi::byte_layout layout(h.bytes);
      if (h.how == carrier::matched) {
        (void)MPI_Mrecv(sink.data(), layout.count(), layout.type(), &h.message, MPI_STATUS_IGNORE);
      } else if (const context* c = contexts.find(h.ctx); h.how == carrier::announced && c) {
        (void)MPI_Recv(sink.data(), layout.count(), layout.type(), c->local_of(h.source),
                       h.bulk_tag, c->bulk, MPI_STATUS_IGNORE);
      }
    }
    for (receive& r : slots) {
      if (r.state == phase::with_mpi) (void)MPI_Cancel(&r.mpi);  // then MPI_Wait below
      if (r.state == phase::receiving || r.state == phase::with_mpi) {
        (void)MPI_Wait(&r.mpi, MPI_STATUS_IGNORE);
      }
    }
    for (background_send& orphan : orphans) (void)MPI_Request_free(&orphan.request);
    repeated.clear();
    contexts.clear();
  }

  static void check_usable(MPI_Comm comm) {
    int initialized = 0;
    detail::mpi::check(MPI_Initialized(&initialized), "MPI_Initialized");
    int finalized = 0;
    detail::mpi::check(MPI_Finalized(&finalized), "MPI_Finalized");
    if (initialized == 0 || finalized != 0) {
      throw error(errc::bootstrap_failed,
                  "transport::mpi: MPI is not initialised (construct a commx::init first, or "
                  "use transport::mpi::from_env())");
    }
    if (comm == MPI_COMM_NULL) {
      throw error(errc::invalid_argument, "transport::mpi: MPI_COMM_NULL is no communicator");
    }
  }

  // Node ids: every rank learns the lowest world rank on its node (MPI_COMM_TYPE_SHARED),
  // then ids number those leaders in order.
  void find_nodes() {
    MPI_Comm shared = MPI_COMM_NULL;
    detail::mpi::check(
        MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared),
        "MPI_Comm_split_type");
    int leader = rank;
    detail::mpi::check(MPI_Bcast(&leader, 1, MPI_INT, 0, shared), "MPI_Bcast");
    detail::mpi::check(MPI_Comm_free(&shared), "MPI_Comm_free");
    std::vector<int> leaders(static_cast<std::size_t>(size));
    detail::mpi::check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world),
                       "MPI_Allgather");
    std::vector<int> seen;
    nodes.resize(leaders.size());
    for (std::size_t r = 0; r < leaders.size(); ++r) {
      auto it = std::ranges::find(seen, leaders[r]);
      if (it == seen.end()) it = seen.insert(seen.end(), leaders[r]);
      nodes[r] = static_cast<int>(it - seen.begin());
    }
  }

  std::uint32_t allocate_slot() {
    if (free_slots.empty()) {
      slots.emplace_back();
      return static_cast<std::uint32_t>(slots.size() - 1);
    }
    const std::uint32_t slot = free_slots.back();
    free_slots.pop_back();
    return slot;
  }

  std::uint32_t post(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    const std::uint32_t slot = allocate_slot();
    receive& r = slots[slot];
    r.state = phase::posted;
    r.source = source;
    r.ctx = ctx;
    r.tag = tag;
    r.buffer = buffer;
    r.result = {};
    posted.push_back(slot);
    return slot;
  }

  // Whether a new receive may go to MPI: no message is held and no receive waits on the
  // matched path, which MPI would overtake. `posted` holds the receives with MPI first, then
  // those on the matched path (these are posted last, and withdrawing turns all into them),
  // so the last one tells.
  [[nodiscard]] bool may_post_to_mpi() const {
    return held.empty() && (posted.empty() || slots[posted.back()].state != phase::posted);
  }

  // A receive posted to MPI (see the file comment): into the buffer when it has room for an
  // announcement, else into the slot's scratch. `mpi_source`, `mpi_tag`, `comm`: MPI's.
  std::uint32_t post_to_mpi(int source, context_id ctx, int tag, const recv_buffer& buffer,
                            int mpi_source, int mpi_tag, MPI_Comm comm) {
    const std::uint32_t slot = allocate_slot();
    receive& r = slots[slot];
    r.source = source;
    r.ctx = ctx;
    r.tag = tag;
    r.buffer = buffer;
    r.result = {};
    r.direct = buffer.capacity() >= detail::mpi::announcement_bytes;
    if (!r.scratch) r.scratch = std::make_unique<detail::mpi::announcement_frame>();
    if (r.direct) {
      std::error_code ec;
      r.target = buffer.prepare(buffer.capacity(), ec);  // a fixed buffer: its start
      keep_prefix(*r.scratch, r.target);
    } else {
      r.target = r.scratch->data();
    }
    const int count = r.direct ? static_cast<int>(buffer.capacity())
                               : static_cast<int>(detail::mpi::announcement_bytes);
    const int code = MPI_Irecv(r.target, count, MPI_BYTE, mpi_source, mpi_tag, comm, &r.mpi);
    if (code != MPI_SUCCESS) [[unlikely]] {
      release_slot(slot);
      detail::mpi::fail(code, "MPI_Irecv", {rank, source, tag, buffer.capacity(), "irecv"});
    }
    r.state = phase::with_mpi;
    posted.push_back(slot);
    return slot;
  }

  // True once receive `r`, posted to MPI, has arrived (MPI completed it).
  bool test_with_mpi(receive& r) {
    if (r.state == phase::arrived) return true;
    int done = 0;
    const int code = MPI_Test(&r.mpi, &done, &r.status);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Test", {rank, r.source, r.tag, 0, "recv"});
    if (done == 0) return false;
    r.state = phase::arrived;
    return true;
  }

  // Whether a receive posted to MPI before posted[i] (which has arrived) has not been looked
  // at and matches what posted[i] got: MPI matched that one first, and if it refuses its
  // message, that message goes to posted[i] instead.
  [[nodiscard]] bool earlier_may_pass_on(std::size_t i) const {
    if (i == 0) return false;  // the usual case: spare the status its MPI_Get_count
    const receive& r = slots[posted[i]];
    const message_in_hand m = sender_of(r, r.status);
    return std::any_of(posted.begin(), posted.begin() + static_cast<std::ptrdiff_t>(i),
                       [&](std::uint32_t earlier) {
                         const receive& e = slots[earlier];
                         return (e.state == phase::with_mpi || e.state == phase::arrived) &&
                                matches(e.source, e.ctx, e.tag, m.source, m.ctx, m.tag);
                       });
  }

  // What MPI put into receive `r` (arrived): an inline message, taken or refused, or an
  // announcement, whose message `r` then takes as a matched one.
  void take_arrival(receive& r) {
    const std::size_t bytes = detail::mpi::bytes_of(r.status);
    if (bytes <= detail::mpi::inline_limit) [[likely]] {
      // Field by field into the slot: a whole op_result built aside and assigned is read back
      // 16 bytes at a time before its pieces are written (a store-forwarding stall).
      op_result& out = r.result;
      out.source = source_of(r, r.status);
      out.tag = tag_of(r, r.status);
      out.bytes = bytes;
      out.error = transport::no_error;
      take_inline(r.buffer, r.target, r.direct ? r.scratch.get() : nullptr, out, r.ctx);
      r.state = phase::done;
      return;
    }
    message_in_hand m = sender_of(r, r.status);
    announced(m, std::span<const std::byte>(r.target, m.bytes));
    if (r.direct) give_back_prefix(*r.scratch, r.target, detail::mpi::announcement_bytes);
    deliver(r, m);
  }

  // Who sent what MPI put into receive `r`, and its count.
  message_in_hand sender_of(const receive& r, const MPI_Status& status) const {
    message_in_hand m;
    m.source = source_of(r, status);
    m.ctx = r.ctx;
    m.tag = tag_of(r, status);
    m.bytes = detail::mpi::bytes_of(status);
    return m;
  }

  // The world rank that sent what MPI put into receive `r`.
  [[nodiscard]] int source_of(const receive& r, const MPI_Status& status) const {
    const context* c = contexts.find(r.ctx);
    return c != nullptr ? c->world_of(status.MPI_SOURCE) : status.MPI_SOURCE;
  }
  // Its commx tag.
  [[nodiscard]] int tag_of(const receive& r, const MPI_Status& status) const {
    return tags.commx_tag(r.tag == any_tag ? 0 : tags.bank_of(r.tag), status.MPI_TAG);
  }

  // A receive posted to MPI into its own buffer (direct) keeps the first bytes MPI may write:
  // MPI puts there whatever comes, an announcement or a message the buffer then refuses, and
  // a buffer that takes no message is left as it was (the transport concept). The price: a
  // copy of announcement_bytes per direct receive.
  static void keep_prefix(detail::mpi::announcement_frame& kept, const std::byte* buffer) {
    std::memcpy(kept.data(), buffer, kept.size());
  }
  // Puts back the `written` bytes of a direct buffer that it does not keep.
  static void give_back_prefix(const detail::mpi::announcement_frame& kept, std::byte* buffer,
                               std::size_t written) {
    std::memcpy(buffer, kept.data(), std::min(written, kept.size()));
  }

  // An inline message of `out.bytes` at `at` (the buffer's own start when `kept`, its first
  // bytes as they were before) for a receive into `buffer`: copied into it, or, refused
  // (out.error), held.
  void take_inline(const recv_buffer& buffer, std::byte* at,
                   const detail::mpi::announcement_frame* kept, op_result& out, context_id ctx) {
    std::byte* to = buffer.prepare(out.bytes, out.error);
    if (out.error) [[unlikely]] {
      message_in_hand m;
      m.how = carrier::copied;
      m.copy.assign(at, at + out.bytes);
      if (kept != nullptr) give_back_prefix(*kept, at, out.bytes);
      m.source = out.source;
      m.ctx = ctx;
      m.tag = out.tag;
      m.bytes = out.bytes;
      hold(std::move(m));
      return;
    }
    if (kept == nullptr && out.bytes != 0) std::memcpy(to, at, out.bytes);
  }

  // While messages are held, no receive may stay with MPI: MPI would give it a message later
  // than a held one it matches. Each is withdrawn (MPI_Cancel) and waits on the matched path;
  // a message MPI already gave one joins `held`, after the messages held before it (it came
  // later than any of them that it matches), in posting order. True if it withdrew any.
  bool withdraw_from_mpi() {
    bool withdrew = false;
    for (const std::uint32_t slot : posted) {
      receive& r = slots[slot];
      if (r.state == phase::with_mpi || r.state == phase::arrived) withdrew = true;
      if (r.state == phase::with_mpi && cancel_with_mpi(r)) {
        r.state = phase::posted;
        continue;
      }
      if (r.state != phase::with_mpi && r.state != phase::arrived) continue;
      r.state = phase::posted;  // and what MPI gave it (`status`) is held
      message_in_hand m = sender_of(r, r.status);
      const std::size_t written = m.bytes;
      if (m.bytes <= detail::mpi::inline_limit) {
        m.how = carrier::copied;
        m.copy.assign(r.target, r.target + m.bytes);
      } else {
        announced(m, std::span<const std::byte>(r.target, m.bytes));
      }
      if (r.direct) give_back_prefix(*r.scratch, r.target, written);
      held.push_back(std::move(m));
    }
    return withdrew;
  }

  // Withdraws receive `r` from MPI; false if MPI had completed it (then `r.status` says with
  // what).
  bool cancel_with_mpi(receive& r) {
    const error_context here{rank, r.source, r.tag, 0, "recv"};
    detail::mpi::check(MPI_Cancel(&r.mpi), "MPI_Cancel", here);
    detail::mpi::check(MPI_Wait(&r.mpi, &r.status), "MPI_Wait", here);
    int cancelled = 0;
    detail::mpi::check(MPI_Test_cancelled(&r.status, &cancelled), "MPI_Test_cancelled", here);
    return cancelled != 0;
  }

  // A slot receiving message `m` (accepted, into `into`) for a blocking receive.
  std::uint32_t receive_taken(message_in_hand& m, std::byte* into, const op_result& result) {
    const std::uint32_t slot = allocate_slot();
    receive& r = slots[slot];
    r.ctx = m.ctx;
    r.buffer = recv_buffer(std::span<std::byte>{});
    r.result = result;
    start_receiving(r, into, m);
    return slot;
  }

  void release_slot(std::uint32_t slot) {
    slots[slot].state = phase::free;
    free_slots.push_back(slot);
  }

  [[nodiscard]] std::vector<int> banks_for(int tag) const {
    if (tag != any_tag) return {tags.bank_of(tag)};
    std::vector<int> all(static_cast<std::size_t>(tags.banks));
    for (int b = 0; b < tags.banks; ++b) all[static_cast<std::size_t>(b)] = b;
    return all;
  }

  static bool matches(int want_source, context_id want_ctx, int want_tag, int source,
                      context_id ctx, int tag) {
    return want_ctx == ctx && (want_source == any_source || want_source == source) &&
           (want_tag == any_tag || want_tag == tag);
  }

  std::optional<std::size_t> find_held(int source, context_id ctx, int tag) const {
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (matches(source, ctx, tag, held[i].source, held[i].ctx, held[i].tag)) return i;
    }
    return std::nullopt;
  }

  // What the matched-path receives of one context looked at so far in a pass would match
  // together: their sources and tags, or a wildcard where they differ.
  struct filter_union {
    context_id ctx = 0;
    int source = any_source;
    int tag = any_tag;

    void widen(const receive& r) {
      if (r.source != source) source = any_source;
      if (r.tag != tag) tag = any_tag;
    }
  };

  // The first message receive `r` would take, out of `held` (which left MPI's queue before
  // anything it still queues) or else MPI's queue, probed for `wide`: the receives up to `r`
  // together. For `r` alone, receives (p, any_tag) then (any, 2) could see p's tag-2 message
  // overtake its tag-1 one: the first looks before either arrives, the second finds the
  // tag-2 one, and the first receive takes it. Whoever gets it receives it or holds it.
  std::optional<message_in_hand> find_message(const receive& r, const filter_union& wide);

  // A message a receive refused waits for the next, where it was among the held ones.
  void hold(message_in_hand&& m) {
    const std::size_t at = m.was_held.value_or(held.size());
    m.was_held.reset();
    held.insert(held.begin() + static_cast<std::ptrdiff_t>(at), std::move(m));
  }

  // The first message MPI_Improbe matches for (source, tag) on context `c`, now taken out of
  // MPI's queue (its `ctx` is the caller's to set). An announcement is received at once and
  // stands for its message.
  std::optional<message_in_hand> probe_mpi(const context& c, int want_source, int want_tag);

  // `m`, matched, is longer than any inline message: its announcement, received now.
  void receive_announcement(message_in_hand& m);

  // `m` becomes the message `frame` announces; a frame that announces nothing is refused.
  void announced(message_in_hand& m, std::span<const std::byte> frame) const;

  [[nodiscard]] int bulk_tag(std::uint32_t sequence) const {
    return static_cast<int>(sequence % (static_cast<std::uint32_t>(tags.upper) + 1));
  }

  // Sends the announcement of a message of `bytes` to `dest` (the communicator's rank) with
  // `mpi_tag` on `comm`, from a copy completed in the background; the bulk tag its bytes go
  // with.
  int announce(MPI_Comm comm, int dest, int mpi_tag, std::size_t bytes, const error_context& here);

  // Offers queued messages to posted receives in posting order, up to receive `until` (all
  // of them for no_slot). A message found for one receive goes to the earliest posted
  // receive that matches it, which may be an earlier one it arrived too late for. Receives
  // posted to MPI are tested in their turn; once one refuses its message, the rest leave MPI.
  // True if a receive took (or refused) a message.
  bool progress_posted(std::uint32_t until);

  // Receive `r` takes message `m`, or refuses it (then the message is held for the next).
  void deliver(receive& r, message_in_hand& m);

  // Receive `r` starts receiving `m`, which it accepted, into `into`.
  void start_receiving(receive& r, std::byte* into, message_in_hand& m);

  void finish_receiving(receive& r) {
    int done = 0;
    detail::mpi::check(MPI_Test(&r.mpi, &done, MPI_STATUS_IGNORE), "MPI_Test",
                       {rank, r.result.source, r.result.tag, r.result.bytes, "recv"});
    if (done != 0) r.state = phase::done;
  }

  // A send to this rank itself may wait for its receive (MPICH's do), and a rank that
  // sends to itself before it receives would wait forever: small ones go from a copy the
  // endpoint keeps until MPI is done with it, and complete at once.
  static constexpr std::size_t self_buffered = std::size_t{64} << 10;
  using copy_list = std::list<std::vector<std::byte>>;

  struct background_send {
    MPI_Request request = MPI_REQUEST_NULL;
    std::optional<copy_list::iterator> kept_copy;
  };

  // Sends that could not be withdrawn, and sends from kept_copies: completed in the
  // background.
  void retry_orphans() {
    for (std::size_t i = 0; i < orphans.size();) {
      int done = 0;
      if (MPI_Test(&orphans[i].request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0) {
        if (orphans[i].kept_copy) kept_copies.erase(*orphans[i].kept_copy);
        orphans.erase(orphans.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  std::shared_ptr<init> guard;  // first: MPI outlives everything below
  detail::mpi::tag_space tags;
  int rank = 0;
  int size = 0;
  MPI_Comm world = MPI_COMM_NULL;  // context 0's communicator
  std::vector<int> nodes;
  detail::mpi::context_table contexts;
  detail::mpi::persistent_receives repeated;  // blocking receives posted to MPI
  std::vector<receive> slots;
  std::vector<std::uint32_t> free_slots;
  receive_order posted;  // unmatched receives, in posting order
  std::deque<message_in_hand> held;
  std::vector<filter_union> pass_filters;  // progress_posted's, kept to reuse its memory
  copy_list kept_copies;  // what sends in the background send: to self, announcements
  std::vector<background_send> orphans;
  std::uint32_t next_sequence = 0;  // of announcements
  // Small blocking receives' target; a direct one's first bytes, as they were (keep_prefix).
  alignas(16) detail::mpi::announcement_frame scratch{};
  std::uint64_t polls = 0;
  detail::mpi::backoff waiting;
  receive_path receives = receive_path::matched;
};

}  // namespace commx::detail::mpi

// The announced messages' part and the matched path, out of line.
#include "commx/transport/detail/mpi/endpoint_announcements.hpp"  // IWYU pragma: export
#include "commx/transport/detail/mpi/endpoint_matched_path.hpp"   // IWYU pragma: export
