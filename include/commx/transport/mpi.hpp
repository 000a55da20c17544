// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::mpi`: commx over the MPI library a cluster already runs. Messages go straight
/// from the caller's buffer to MPI_Isend, as MPI_BYTE (a derived datatype past 2 GiB), and
/// straight into the receiver's buffer: commx copies nothing but messages of up to 1 KiB into
/// receives of less than 1025 bytes (see below).
///
/// An endpoint wraps an MPI communicator: `mpi::from_env()` wraps MPI_COMM_WORLD (initialising
/// MPI if nobody has, see commx::init), `mpi(comm)` any communicator the application has; commx
/// never frees it and never sends on it (it works on duplicates, see detail/mpi/contexts.hpp).
/// World ranks are that communicator's ranks.
///
/// Receives never lose a message to a buffer that is too small: it fails with errc::truncated
/// and the message is kept for the next receive that matches it. MPI's own posted receive
/// would truncate and consume it, so no message travels longer than the receives commx posts:
/// past 1 KiB a message is announced and its bytes follow (detail/mpi/announcement.hpp).
/// Receives are posted to MPI before their message arrives, as an MPI code's are, into their
/// buffer or, below 1025 bytes, into a scratch buffer and copied (so a buffer of 1025 bytes or
/// more that refuses a message for its element size has had it written into it; the message
/// is held all the same):
/// - blocking ones (`recv_blocking`, which the communicator's `recv` and `sendrecv` use) with
///   MPI_Start and MPI_Test on a persistent receive kept for their buffer (detail/mpi/
///   persistent.hpp): an 8-byte receive costs what MPI_Recv costs;
/// - those with a request (`irecv`) with MPI_Irecv. They are looked at in posting order, so a
///   message one refuses goes to the next posted receive that matches: once a message is held,
///   the receives still with MPI are withdrawn (MPI_Cancel; what MPI already gave them is held
///   after it) and wait on the matched path below.
/// The matched path: the endpoint takes the first message MPI_Improbe matches for the earliest
/// posted receive, learns its size, asks the receive buffer for room (`recv_buffer::prepare`)
/// and only then receives it (MPI_Mrecv, MPI_Imrecv). It serves receives from this rank itself,
/// with any_tag over several tag banks, into growable buffers, and while messages are held or
/// matched-path receives wait; with `receive_path::matched` (COMMX_MPI_RECEIVES=matched), all.
/// Its price is MPI's unexpected-message path: with Open MPI 4.1, MPI_Mprobe and MPI_Mrecv of
/// an 8-byte message cost 1,160 instructions where MPI_Recv costs 698 (bench/HISTORY.md).
///
/// Blocking sends make no request (`send_blocking`): MPI_Isend and MPI_Test. Blocking calls
/// read the clock for their deadline only once they have polled a few microseconds in vain.
///
/// Waiting: MPI posts no events to sleep on. `event_count()` counts polls, so
/// `wait_for_event` returns after one step of backing off (detail/mpi/backoff.hpp: poll, then
/// yield, then sleep up to 500 us) and its caller tests again; the backoff lengthens while
/// nothing progresses, so a waiting rank does not burn a core.
///
/// What MPI does not do, this transport cannot either:
/// - A rank never "leaves": an MPI process that ends before MPI_Finalize ends the job, so
///   errc::peer_lost is never raised here (mpirun stops the job instead).
/// - A posted send cannot always be withdrawn (Open MPI cannot cancel sends; MPI-4 deprecates
///   it). `cancel` tries MPI_Cancel (never on an announced message, whose announcement has
///   gone); a send that stays posted is kept by the endpoint until it completes or the endpoint
///   closes, so its message may still arrive and its buffer must stay valid until then.
/// - Splitting (MPI_Comm_split) and the native collectives wait as MPI waits: deadlines apply to
///   point-to-point and to the collectives of the policies written over point-to-point.
///
/// Errors: every MPI return code is checked; a failure raises commx::error naming the MPI call
/// with MPI_Error_string's text (errc::invalid_argument for MPI's argument errors,
/// errc::protocol_violation for the rest). Every communicator commx makes gets
/// MPI_ERRORS_RETURN; the application's own communicators keep their handlers.
///
/// Thread safety: one endpoint is used by one thread at a time (commx::init asks for
/// MPI_THREAD_SERIALIZED); endpoints used from several threads at once need MPI_THREAD_MULTIPLE.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/detail/mpi/announcement.hpp"
#include "commx/transport/detail/mpi/backoff.hpp"
#include "commx/transport/detail/mpi/rma_window.hpp"
#include "commx/transport/detail/mpi/call.hpp"
#include "commx/transport/detail/mpi/contexts.hpp"
#include "commx/transport/detail/mpi/endpoint_state.hpp"
#include "commx/transport/detail/mpi/init.hpp"
#include "commx/transport/detail/mpi/persistent.hpp"
#include "commx/transport/message.hpp"

namespace commx::transport {

/// One rank's endpoint over MPI: each commx context on MPI communicators of its own, messages by
/// MPI_Isend and MPI_Improbe (see the file comment).
class mpi {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "mpi";

  /// A send (its MPI request) or a receive (its slot in the endpoint); once complete, how it
  /// ended.
  class request {
   public:
    request() = default;
    /// Takes over `other`'s operation, field by field: a request is moved into a container
    /// just after it was built, and a copy in 16-byte pieces would read back fields written
    /// one by one a moment before (a store-forwarding stall per message).
    request(request&& other) noexcept
        : send_(other.send_), slot_(other.slot_), announced_(other.announced_) {
      copy_fields(other.outcome_, outcome_);
    }
    /// Takes over `other`'s operation, field by field (see the move constructor).
    request& operator=(request&& other) noexcept {
      send_ = other.send_;
      slot_ = other.slot_;
      announced_ = other.announced_;
      copy_fields(other.outcome_, outcome_);
      return *this;
    }
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    ~request() = default;

   private:
    friend class mpi;
    static constexpr std::uint32_t no_slot = ~std::uint32_t{0};
    MPI_Request send_ = MPI_REQUEST_NULL;  // a send's
    std::uint32_t slot_ = no_slot;         // a receive's slot in the endpoint
    bool announced_ = false;               // a send whose announcement has gone: never withdrawn
    op_result outcome_{};
  };

  /// How receives meet MPI (see the file comment): `posted` (the default) posts them to MPI
  /// before their message arrives, as an MPI code would, at MPI's cost; `matched` probes first.
  /// Both lose nothing to a buffer that is too small. COMMX_MPI_RECEIVES=posted|matched chooses
  /// without recompiling.
  using receive_path = detail::mpi::receive_path;

  /// COMMX_MPI_RECEIVES, or `posted`.
  /// @throws commx::error errc::invalid_argument for another value.
  static receive_path receive_path_from_env() {
    const char* text = std::getenv("COMMX_MPI_RECEIVES");  // NOLINT(concurrency-mt-unsafe)
    if (text == nullptr || *text == '\0' || std::string_view(text) == "posted") {
      return receive_path::posted;
    }
    if (std::string_view(text) == "matched") return receive_path::matched;
    throw error(errc::invalid_argument,
                fmt::format("COMMX_MPI_RECEIVES='{}' is neither 'matched' nor 'posted'", text));
  }

  /// Wraps `comm` (not owned, never freed). Collective over `comm`. MPI must be initialised
  /// (commx::init); `guard`, if given, is kept for as long as the endpoint lives.
  /// @throws commx::error errc::bootstrap_failed when MPI is not initialised.
  explicit mpi(MPI_Comm comm, receive_path receives = receive_path_from_env(),
               std::shared_ptr<init> guard = nullptr)
      : state_(std::make_unique<state>(comm, std::move(guard))) {
    state_->receives = receives;
  }

  /// The world of a job started by mpirun, srun or mpiexec: MPI_COMM_WORLD, with MPI
  /// initialised if the application has not done it (and finalised when the endpoint closes).
  static mpi from_env() {
    auto guard = std::make_shared<init>();
    return mpi(MPI_COMM_WORLD, receive_path_from_env(), std::move(guard));
  }

  /// Endpoints move; a moved-from endpoint owns nothing.
  mpi(mpi&&) noexcept = default;
  /// Endpoints move; a moved-from endpoint owns nothing.
  mpi& operator=(mpi&&) noexcept = default;
  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;
  ~mpi() = default;

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return state_->rank; }
  /// The number of world ranks (>= 1).
  [[nodiscard]] int size() const { return state_->size; }
  /// Ranks that MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together share a node; ids are
  /// numbered in the order of each node's lowest rank.
  [[nodiscard]] int node_of(int peer) const {
    return peer >= 0 && peer < size() ? state_->nodes[static_cast<std::size_t>(peer)] : 0;
  }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`); `data` must stay valid and unchanged
  /// until the request completes (transport concept, transport/concept.hpp).
  request isend(int dest, context_id ctx, int tag, std::span<const std::byte> data) {
    const detail::mpi::context& c = context_of(ctx, "isend", dest, tag, data.size());
    request req;
    std::optional<state::copy_list::iterator> copy;
    if (dest == state_->rank && data.size() <= state::self_buffered) [[unlikely]] {
      copy = state_->kept_copies.emplace(state_->kept_copies.end(), data.begin(), data.end());
      data = **copy;
    }
    try {
      req.announced_ = start_send(c, dest, tag, data, req.send_, "isend");
    } catch (...) {
      if (copy) state_->kept_copies.erase(*copy);
      throw;
    }
    if (copy) state_->orphans.push_back({std::exchange(req.send_, MPI_REQUEST_NULL), copy});
    req.outcome_.source = rank();
    req.outcome_.tag = tag;
    req.outcome_.bytes = data.size();
    return req;
  }

  /// Starts receiving a message from `source` (or any_source) with `tag` (or any_tag) on `ctx`
  /// into `buffer` (transport concept).
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    const context& c = context_of(ctx, "irecv", source, tag, buffer.capacity());
    state& s = *state_;
    request req;
    if (s.receives == receive_path::posted && postable(buffer, source, tag) &&
        s.may_post_to_mpi()) {
      const int bank = tag == any_tag ? 0 : s.tags.bank_of(tag);
      req.slot_ = s.post_to_mpi(source, ctx, tag, buffer, mpi_source(c, source), mpi_tag(tag),
                                c.banks[static_cast<std::size_t>(bank)]);
      return req;
    }
    req.slot_ = s.post(source, ctx, tag, buffer);
    return req;
  }

  /// Makes progress; true once `req` has completed, successfully or not.
  bool test(request& req) {
    if (req.slot_ != request::no_slot) return test_receive(req);
    if (req.send_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    const int code = MPI_Test(&req.send_, &done, MPI_STATUS_IGNORE);
    detail::mpi::check(code, "MPI_Test",
                       where("isend", unknown, req.outcome_.tag, req.outcome_.bytes));
    if (done == 0) {
      // A send may wait for its receive (rendezvous, or MPICH's sends to self): MPI cannot
      // match it to the receives this endpoint holds, so offer them their messages.
      (void)state_->progress_posted(request::no_slot);
      return false;
    }
    state_->waiting.progressed();
    return true;
  }

  /// How a completed request ended: the matched source, tag and byte count, or the error.
  const op_result& result(const request& req) const { return req.outcome_; }

  /// Withdraws `req` if it has not matched yet (true); false if it has completed.
  bool cancel(request& req) {
    if (req.slot_ != request::no_slot) return cancel_receive(req);
    return cancel_send(req);
  }

  /// The first queued message that a receive with these arguments would match, without
  /// receiving it; an error result when `source` is gone and nothing from it is queued.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    const detail::mpi::context& c = context_of(ctx, "iprobe", source, tag, 0);
    (void)state_->progress_posted(request::no_slot);  // posted receives take theirs first
    if (auto held = state_->find_held(source, ctx, tag)) {
      const auto& h = state_->held[*held];
      return op_result{h.source, h.tag, h.bytes};
    }
    for (int bank : state_->banks_for(tag)) {
      int found = 0;
      MPI_Status status;
      const int code = MPI_Iprobe(mpi_source(c, source), mpi_tag(tag),
                                  c.banks[static_cast<std::size_t>(bank)], &found, &status);
      detail::mpi::check(code, "MPI_Iprobe", where("iprobe", source, tag, 0));
      if (found == 0) continue;
      state_->waiting.progressed();
      const int sender = c.world_of(status.MPI_SOURCE);
      const int found_tag = state_->tags.commx_tag(bank, status.MPI_TAG);
      if (detail::mpi::bytes_of(status) > detail::mpi::inline_limit) [[unlikely]] {
        // An announcement: the size is inside it. Taken out of MPI's queue (the first message
        // from that sender with that tag is this one) and held, so it stays first.
        std::optional<state::message_in_hand> m = state_->probe_mpi(c, sender, found_tag);
        if (!m)
          throw_error(errc::protocol_violation, where("iprobe", sender, found_tag, 0),
                      "MPI_Improbe missed the message MPI_Iprobe found");
        m->ctx = ctx;
        state_->held.push_back(std::move(*m));
        return op_result{sender, found_tag, state_->held.back().bytes};
      }
      return op_result{sender, found_tag, detail::mpi::bytes_of(status)};
    }
    return std::nullopt;
  }

  /// A counter that changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const { return state_->polls; }

  /// One step of backing off (see the file comment), then "something may have happened".
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    if (state_->polls != seen) return;
    state_->retry_orphans();
    // Every receive this endpoint holds gets its message now, whichever request the caller
    // waits for: a peer's send may need it to complete before anything else can.
    if (!state_->progress_posted(request::no_slot)) state_->waiting.step(when);
    ++state_->polls;
  }

  /// Makes progress without waiting (a layered stack calls it for the level it does not wait
  /// in): every receive this endpoint holds gets its message if MPI has it; else one probe
  /// drives MPI's own progress (sends in flight, incoming data).
  void progress() {
    state_->retry_orphans();
    if (state_->progress_posted(request::no_slot)) {
      ++state_->polls;
      return;
    }
    int found = 0;
    detail::mpi::check(
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, state_->world, &found, MPI_STATUS_IGNORE),
        "MPI_Iprobe");
  }

  // --- customisation points the communicator uses when a transport has them ----------------

  /// A blocking send without a request (transport::blocking_send): MPI_Isend, and MPI_Test at
  /// once, which is all an eager message costs; a send that is still pending then waits as a
  /// request's `wait` does, with `until` resolved against `timeout` only now, and is withdrawn
  /// (`cancel`) at the deadline: errc::timeout. Sends to this rank itself are left to `isend`
  /// (nullopt), which buffers small ones.
  std::optional<op_result> send_blocking(int dest, context_id ctx, int tag,
                                         std::span<const std::byte> data, const deadline& until,
                                         clock::duration timeout);

  /// A blocking receive without a request (transport::blocking_recv), as `irecv` receives but
  /// cheaper: posted (the default), MPI_Start on a persistent receive (detail/mpi/
  /// persistent.hpp) and MPI_Test; matched, one MPI_Improbe finds the message, `in.prepare`
  /// checks its size and MPI_Mrecv receives it. Either way a message `in` refuses is held for
  /// the next receive. The first polls read no clock; after them the receive waits as a
  /// request's `wait` does, with `until` resolved against `timeout` only then, and is withdrawn
  /// at the deadline: errc::timeout. Receives posted earlier and still waiting in the endpoint
  /// come first, and so do the messages it holds: then this leaves the receive to `irecv`
  /// (nullopt).
  std::optional<op_result> recv_blocking(int source, context_id ctx, int tag,
                                         const recv_buffer& buffer, const deadline& until,
                                         clock::duration timeout);

  /// Collective over `parent`'s ranks: MPI_Comm_split(color, key) of the parent's MPI
  /// communicator (a negative color: MPI_UNDEFINED). The new communicator's context is the
  /// largest `next_free` of the parent's ranks (and the next id, for its collectives).
  context_split split(context_id parent, int color, int key, context_id next_free) {
    const detail::mpi::context& c = context_of(parent, "split", unknown, unknown, 0);
    const context_id fresh = agree_on(c, next_free);
    MPI_Comm made = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_split(c.banks[0], color < 0 ? MPI_UNDEFINED : color, key, &made),
                       "MPI_Comm_split", where("split", unknown, unknown, 0));
    return adopt(fresh, made);
  }

  /// Collective over `parent`'s ranks: one communicator per node, from
  /// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), ordered by `key`.
  context_split split_by_node(context_id parent, int key, context_id next_free) {
    const detail::mpi::context& c = context_of(parent, "split_by_node", unknown, unknown, 0);
    const context_id fresh = agree_on(c, next_free);
    MPI_Comm made = MPI_COMM_NULL;
    detail::mpi::check(
        MPI_Comm_split_type(c.banks[0], MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &made),
        "MPI_Comm_split_type", where("split_by_node", unknown, unknown, 0));
    return adopt(fresh, made);
  }

  /// Frees the MPI communicators of a communicator made by `split`: `ctx` and `ctx + 1`.
  void release(context_id ctx) noexcept {
    if (!state_) return;
    for (const context_id freed : {ctx, ctx + 1}) {
      if (const context* c = state_->contexts.find(freed)) {
        for (MPI_Comm bank : c->banks) state_->repeated.forget(bank);
      }
    }
    state_->contexts.release(ctx);
    state_->contexts.release(ctx + 1);
  }

#if defined(OMPI_MAJOR_VERSION)
  /// What carries a commx::window of E elements: an MPI-3 RMA window (window.hpp). Open MPI
  /// only: with Debian 12's MPICH (4.0) a put completed by MPI_Win_flush and followed by a
  /// barrier is not seen by its target (a 20-line program without commx shows it), so commx
  /// carries windows as messages there.
  template <class E>
  using rma_window = detail::mpi::rma_window<E>;
  /// Whether rma_window carries elements of type E: those MPI's compare-and-swap takes as bits.
  template <class E>
  static constexpr bool rma_carries = detail::mpi::rma_element<E>;
#endif

  /// The MPI communicator that carries context `ctx` (tags up to MPI_TAG_UB), for handing
  /// whole operations to MPI (coll::native).
  /// @throws commx::error errc::invalid_argument for a context this endpoint does not know.
  [[nodiscard]] MPI_Comm communicator_of(context_id ctx) const {
    return context_of(ctx, "communicator_of", unknown, unknown, 0).banks[0];
  }

  /// MPI_TAG_UB: commx's tags above it are carried on further MPI communicators (tag_banks).
  [[nodiscard]] int tag_upper_bound() const { return state_->tags.upper; }
  /// How many MPI communicators each context uses to carry commx's tag range.
  [[nodiscard]] int tag_banks() const { return state_->tags.banks; }

 private:
  using context = detail::mpi::context;

  // `from` into `to` field by field (see request's move). The fence keeps the compiler from
  // merging the source's and the tag's 4-byte loads into one 8-byte load, which could not be
  // forwarded from the two 4-byte stores that wrote them (take_arrival's, just before).
  static void copy_fields(const op_result& from, op_result& to) {
    to.source = from.source;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    to.tag = from.tag;
    to.bytes = from.bytes;
    to.error = from.error;
  }

  // What the endpoint keeps between calls (detail/mpi/endpoint_state.hpp); behind a pointer
  // so the endpoint moves cheaply and a moved-from endpoint frees nothing.
  using state = detail::mpi::endpoint_state;

  // Polls a blocking call makes before it reads the clock for its deadline (a few
  // microseconds): a ping-pong's answer comes within them.
  static constexpr int quick_polls = 64;

  // The rest of a blocking call whose operation did not complete at once: what a request's
  // wait does (commx::detail::wait_until, then cancel at the deadline).
  [[gnu::noinline]] op_result wait_out(request& req, const deadline& until,
                                       clock::duration timeout) {
    const clock::time_point when = until.resolve(timeout);
    for (;;) {
      const std::uint64_t seen = event_count();
      if (test(req)) return req.outcome_;
      if (clock::now() >= when) {
        if (!cancel(req)) return req.outcome_;  // it completed meanwhile
        return {req.outcome_.source, req.outcome_.tag, req.outcome_.bytes,
                make_error_code(errc::timeout)};
      }
      wait_for_event(seen, when);
    }
  }

  // A blocking receive takes message `m` (found for it, its ctx set), or refuses it: then the
  // endpoint holds it for the next receive, as `deliver` does.
  op_result take(state::message_in_hand& m, const recv_buffer& buffer, const deadline& until,
                 clock::duration timeout);

  // Starts the MPI send of one message: the message itself on the context's communicator or,
  // past inline_limit, its announcement there (completed in the background) and its bytes on
  // the bulk communicator (detail/mpi/announcement.hpp). True if it was announced.
  bool start_send(const context& c, int dest, int tag, std::span<const std::byte> data,
                  MPI_Request& handle, const char* operation) {
    state& s = *state_;
    MPI_Comm comm = c.banks[static_cast<std::size_t>(s.tags.bank_of(tag))];
    int mpi_tag = s.tags.mpi_tag(tag);
    const bool announced = data.size() > detail::mpi::inline_limit;
    if (announced) [[unlikely]] {
      mpi_tag = s.announce(comm, c.local_of(dest), mpi_tag, data.size(),
                           where(operation, dest, tag, data.size()));
      comm = c.bulk;
    }
    const detail::mpi::byte_layout layout(data.size());
    const int code = MPI_Isend(data.data(), layout.count(), layout.type(), c.local_of(dest),
                               mpi_tag, comm, &handle);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Isend", where(operation, dest, tag, data.size()));
    return announced;
  }

  // A receive may be posted to MPI when its buffer is fixed (and within MPI's int count) and
  // one MPI communicator can match its tag; not from this rank itself, whose sends the matched
  // path serves. Its caller checks that nothing waits in the endpoint that MPI would overtake.
  [[nodiscard]] bool postable(const recv_buffer& buffer, int source, int tag) const {
    return buffer.capacity() <= static_cast<std::size_t>(INT_MAX) && source != state_->rank &&
           (tag != any_tag || state_->tags.banks == 1);
  }

  // A blocking receive posted to MPI: a persistent receive of at least announcement_bytes
  // (detail/mpi/persistent.hpp), into the buffer itself or the endpoint's scratch, started and
  // polled; the first polls read no clock.
  op_result receive_posted(const context& c, context_id ctx, int source, int tag,
                           const recv_buffer& buffer, const deadline& until,
                           clock::duration timeout);

  // True once the started persistent receive `handle` (`kept`) has completed, in `status`.
  bool test_started(MPI_Request& handle, MPI_Request kept, MPI_Status& status, int tag);

  // Where a blocking receive posted to MPI put what arrived.
  struct arrival {
    const context& c;
    context_id ctx;
    int requested_tag;
    const recv_buffer& buffer;
    std::byte* into;  // the buffer's start, or the scratch
    bool direct;      // into the buffer itself
  };

  // What arrived for a blocking receive posted to MPI: an inline message (copied from the
  // scratch, or held if the buffer refuses it), or an announcement (then its bytes are taken as
  // a matched message's are).
  op_result posted_arrived(const arrival& a, const MPI_Status& status, const deadline& until,
                           clock::duration timeout);

  [[nodiscard]] error_context where(const char* operation, int peer, int tag,
                                    std::size_t bytes) const {
    return {state_->rank, peer, tag, bytes, operation};
  }

  const context& context_of(context_id ctx, const char* operation, int peer, int tag,
                            std::size_t bytes) const {
    const context* c = state_->contexts.find(ctx);
    if (c == nullptr) [[unlikely]] {
      throw_error(errc::invalid_argument, where(operation, peer, tag, bytes),
                  fmt::format("context {} is not a communicator of this MPI endpoint", ctx));
    }
    return *c;
  }

  static int mpi_source(const context& c, int source) {
    return source == any_source ? MPI_ANY_SOURCE : c.local_of(source);
  }
  [[nodiscard]] int mpi_tag(int tag) const {
    return tag == any_tag ? MPI_ANY_TAG : state_->tags.mpi_tag(tag);
  }

  // How a request ends: its receive tested to completion, or it withdrawn (out of line:
  // detail/mpi/request_ends.hpp).
  bool test_receive(request& req);
  bool cancel_receive(request& req);
  bool cancel_send(request& req);

  // Every rank of the parent learns the largest next free context id among them.
  context_id agree_on(const context& parent, context_id next_free) {
    context_id fresh = next_free;
    detail::mpi::check(
        MPI_Allreduce(MPI_IN_PLACE, &fresh, 1, MPI_UINT64_T, MPI_MAX, parent.banks[0]),
        "MPI_Allreduce", where("split", unknown, unknown, 0));
    return fresh;
  }

  // A communicator MPI made becomes contexts `fresh` (its point-to-point) and `fresh + 1` (a
  // duplicate, for the collectives policy's messages).
  context_split adopt(context_id fresh, MPI_Comm made) {
    context_split out;
    out.context = fresh;
    if (made == MPI_COMM_NULL) return out;
    state_->contexts.adopt(fresh, made, state_->tags.banks, state_->world);
    MPI_Comm dup = MPI_COMM_NULL;
    detail::mpi::check(MPI_Comm_dup(made, &dup), "MPI_Comm_dup");
    state_->contexts.adopt(fresh + 1, dup, state_->tags.banks, state_->world);
    detail::mpi::check(MPI_Comm_rank(made, &out.rank), "MPI_Comm_rank");
    int members = 0;
    detail::mpi::check(MPI_Comm_size(made, &members), "MPI_Comm_size");
    const context& c = *state_->contexts.find(fresh);
    out.members.resize(static_cast<std::size_t>(members));
    for (int r = 0; r < members; ++r) out.members[static_cast<std::size_t>(r)] = c.world_of(r);
    return out;
  }

  std::unique_ptr<state> state_;
};

static_assert(transport<mpi>);
static_assert(blocking_send<mpi> && blocking_recv<mpi>);

}  // namespace commx::transport

// The blocking calls' and the requests' ends' definitions.
#include "commx/transport/detail/mpi/blocking_calls.hpp"  // IWYU pragma: export
#include "commx/transport/detail/mpi/request_ends.hpp"    // IWYU pragma: export
