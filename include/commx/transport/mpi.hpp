// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::mpi`: commx over the MPI library a cluster already runs. Messages go straight
/// from the caller's buffer to MPI_Isend, as MPI_BYTE (a derived datatype past 2 GiB), and
/// straight into the receiver's buffer: commx copies nothing.
///
/// An endpoint wraps an MPI communicator: `mpi::from_env()` wraps MPI_COMM_WORLD (initialising
/// MPI if nobody has, see commx::init), `mpi(comm)` any communicator the application has; commx
/// never frees it and never sends on it (it works on duplicates, see detail/mpi/contexts.hpp).
/// World ranks are that communicator's ranks.
///
/// Receives, by default, use MPI's matched probe: a posted receive takes the first message
/// MPI_Improbe matches for it, learns its size, asks the receive buffer for room
/// (`recv_buffer::prepare`) and only then receives it with MPI_Imrecv. So a buffer that is too
/// small fails with errc::truncated having written nothing, and the message, already matched,
/// is kept by the endpoint for the next receive that matches it: nothing is lost, unlike a
/// truncated MPI_Irecv. Receives are offered messages in the order they were posted. The price
/// is MPI's unexpected-message path on every receive: with Open MPI 4.1, MPI_Mprobe and
/// MPI_Mrecv of an 8-byte message cost 1,160 instructions where MPI_Recv costs 698
/// (bench/README.md). `receive_path::posted` (COMMX_MPI_RECEIVES=posted) hands receives into
/// fixed buffers to MPI_Irecv instead, at MPI's cost and with MPI's semantics for a buffer that
/// is too small.
///
/// Blocking sends and receives make no request (`send_blocking`, `recv_blocking`, which the
/// communicator's `send`, `recv` and `sendrecv` use): MPI_Isend and MPI_Test; MPI_Improbe and
/// MPI_Mrecv; or, posted, MPI_Start and MPI_Test on a persistent receive kept for that buffer
/// (detail/mpi/persistent.hpp). They read the clock for their deadline only once they have
/// polled a few microseconds in vain.
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
///   it). `cancel` tries MPI_Cancel; a send that stays posted is kept by the endpoint until it
///   completes or the endpoint closes, so its message may still arrive and its buffer must stay
///   valid until then.
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
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
#include "commx/transport/detail/mpi/backoff.hpp"
#include "commx/transport/detail/mpi/call.hpp"
#include "commx/transport/detail/mpi/contexts.hpp"
#include "commx/transport/detail/mpi/init.hpp"
#include "commx/transport/detail/mpi/persistent.hpp"
#include "commx/transport/message.hpp"

namespace commx::transport {

/// A new communicator made by the transport itself (`mpi::split`, `mpi::split_by_node`): its
/// context id, its members as world ranks in rank order, and this rank in it. No members: this
/// rank is in none.
struct context_split {
  context_id context = 0;
  std::vector<int> members;
  int rank = -1;
};

class mpi {
 public:
  static constexpr std::string_view name = "mpi";

  /// A send (its MPI request) or a receive (its slot in the endpoint); once complete, how it
  /// ended.
  class request {
   public:
    request() = default;

   private:
    friend class mpi;
    static constexpr std::uint32_t no_slot = ~std::uint32_t{0};
    MPI_Request send_ = MPI_REQUEST_NULL;           // a send's, or a receive posted to MPI's
    std::uint32_t slot_ = no_slot;                  // a matched-path receive's slot
    const detail::mpi::context* posted_ = nullptr;  // set for a receive posted to MPI
    recv_buffer buffer_{std::span<std::byte>{}};    // ... and its buffer, to check the size
    op_result outcome_{};
    bool mpi_freed_ = false;  // a receive posted to MPI that failed, and MPI freed it
  };

  /// How receives meet MPI (see the file comment): `matched` (the default) probes first and
  /// loses nothing to a buffer that is too small; `posted` hands receives into fixed buffers
  /// to MPI_Irecv before their message arrives, as an MPI code would, at MPI's own cost and
  /// with MPI's semantics for a buffer that is too small (errc::truncated, and the message is
  /// gone, partly written). COMMX_MPI_RECEIVES=posted|matched chooses without recompiling.
  /// An endpoint with posted receives sets MPI_ERRORS_RETURN on MPI_COMM_WORLD and
  /// MPI_COMM_SELF, where MPICH reports a truncated receive.
  enum class receive_path { matched, posted };

  /// COMMX_MPI_RECEIVES, or `matched`.
  /// @throws commx::error errc::invalid_argument for another value.
  static receive_path receive_path_from_env() {
    const char* text = std::getenv("COMMX_MPI_RECEIVES");  // NOLINT(concurrency-mt-unsafe)
    if (text == nullptr || *text == '\0' || std::string_view(text) == "matched") {
      return receive_path::matched;
    }
    if (std::string_view(text) == "posted") return receive_path::posted;
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
    if (receives == receive_path::posted) {
      // MPICH raises a truncated receive's error from MPI_Test on MPI_COMM_WORLD's handler
      // (or MPI_COMM_SELF's), whatever communicator the receive was on; fatal by default.
      for (MPI_Comm raised_on : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
        detail::mpi::check(MPI_Comm_set_errhandler(raised_on, MPI_ERRORS_RETURN),
                           "MPI_Comm_set_errhandler");
      }
    }
  }

  /// The world of a job started by mpirun, srun or mpiexec: MPI_COMM_WORLD, with MPI
  /// initialised if the application has not done it (and finalised when the endpoint closes).
  static mpi from_env() {
    auto guard = std::make_shared<init>();
    return mpi(MPI_COMM_WORLD, receive_path_from_env(), std::move(guard));
  }

  mpi(mpi&&) noexcept = default;
  mpi& operator=(mpi&&) noexcept = default;
  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;
  ~mpi() = default;

  [[nodiscard]] int rank() const { return state_->rank; }
  [[nodiscard]] int size() const { return state_->size; }
  /// Ranks that MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together share a node; ids are
  /// numbered in the order of each node's lowest rank.
  [[nodiscard]] int node_of(int peer) const {
    return peer >= 0 && peer < size() ? state_->nodes[static_cast<std::size_t>(peer)] : 0;
  }

  request isend(int dest, context_id ctx, int tag, std::span<const std::byte> data) {
    const detail::mpi::context& c = context_of(ctx, "isend", dest, tag, data.size());
    request req;
    std::optional<state::copy_list::iterator> copy;
    if (dest == state_->rank && data.size() <= state::self_buffered) [[unlikely]] {
      copy = state_->self_copies.emplace(state_->self_copies.end(), data.begin(), data.end());
      data = **copy;
    }
    const detail::mpi::byte_layout layout(data.size());
    const int code = MPI_Isend(
        data.data(), layout.count(), layout.type(), c.local_of(dest), state_->tags.mpi_tag(tag),
        c.banks[static_cast<std::size_t>(state_->tags.bank_of(tag))], &req.send_);
    if (code != MPI_SUCCESS && copy) state_->self_copies.erase(*copy);
    detail::mpi::check(code, "MPI_Isend", where("isend", dest, tag, data.size()));
    if (copy) state_->orphans.push_back({std::exchange(req.send_, MPI_REQUEST_NULL), copy});
    req.outcome_.source = rank();
    req.outcome_.tag = tag;
    req.outcome_.bytes = data.size();
    return req;
  }

  request irecv(int source, context_id ctx, int tag, recv_buffer buffer) {
    const detail::mpi::context& c = context_of(ctx, "irecv", source, tag, buffer.capacity());
    request req;
    if (state_->receives == receive_path::posted && postable(buffer, source, tag)) {
      post_to_mpi(req, c, source, tag, buffer);
      return req;
    }
    req.slot_ = state_->post(source, ctx, tag, buffer);
    return req;
  }

  bool test(request& req) {
    if (req.slot_ != request::no_slot) return test_receive(req);
    if (req.send_ == MPI_REQUEST_NULL) return true;
    if (req.posted_ != nullptr) return test_posted(req);
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

  const op_result& result(const request& req) const { return req.outcome_; }

  bool cancel(request& req) {
    if (req.slot_ != request::no_slot) return cancel_receive(req);
    if (req.posted_ != nullptr) return cancel_posted(req);
    return cancel_send(req);
  }

  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    const detail::mpi::context& c = context_of(ctx, "iprobe", source, tag, 0);
    (void)state_->progress_posted(request::no_slot);  // posted receives take theirs first
    if (auto held = state_->find_held(source, ctx, tag)) {
      const auto& h = state_->held[*held];
      return op_result{h.source, h.tag, h.bytes, {}};
    }
    for (int bank : state_->banks_for(tag)) {
      int found = 0;
      MPI_Status status;
      const int code = MPI_Iprobe(mpi_source(c, source), mpi_tag(tag),
                                  c.banks[static_cast<std::size_t>(bank)], &found, &status);
      detail::mpi::check(code, "MPI_Iprobe", where("iprobe", source, tag, 0));
      if (found != 0) {
        state_->waiting.progressed();
        return op_result{c.world_of(status.MPI_SOURCE),
                         state_->tags.commx_tag(bank, status.MPI_TAG),
                         detail::mpi::bytes_of(status),
                         {}};
      }
    }
    return std::nullopt;
  }

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

  // --- customisation points the communicator uses when a transport has them ----------------

  /// A blocking send without a request (transport::blocking_send): MPI_Isend, and MPI_Test at
  /// once, which is all an eager message costs; a send that is still pending then waits as a
  /// request's `wait` does, with `until` resolved against `timeout` only now, and is withdrawn
  /// (`cancel`) at the deadline: errc::timeout. Sends to this rank itself are left to `isend`
  /// (nullopt), which buffers small ones.
  std::optional<op_result> send_blocking(int dest, context_id ctx, int tag,
                                         std::span<const std::byte> data, const deadline& until,
                                         clock::duration timeout) {
    state& s = *state_;
    if (dest == s.rank) [[unlikely]]
      return std::nullopt;
    const context& c = context_of(ctx, "send", dest, tag, data.size());
    const detail::mpi::byte_layout layout(data.size());
    MPI_Request handle = MPI_REQUEST_NULL;
    int code =
        MPI_Isend(data.data(), layout.count(), layout.type(), c.local_of(dest), s.tags.mpi_tag(tag),
                  c.banks[static_cast<std::size_t>(s.tags.bank_of(tag))], &handle);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Isend", where("send", dest, tag, data.size()));
    int done = 0;
    code = MPI_Test(&handle, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Test", where("send", dest, tag, data.size()));
    if (done == 0) [[unlikely]] {
      request req;
      req.send_ = handle;
      req.outcome_ = {s.rank, tag, data.size(), {}};
      return wait_out(req, until, timeout);
    }
    s.waiting.progressed();
    return op_result{s.rank, tag, data.size(), {}};
  }

  /// A blocking receive without a request (transport::blocking_recv), as `irecv` receives but
  /// cheaper when the message is there or about to be: by default one MPI_Improbe finds it,
  /// `in.prepare` checks its size and MPI_Mrecv receives it (a message `in` refuses is held for
  /// the next receive, as ever); posted (`receive_path::posted`, where `irecv` would post to
  /// MPI) MPI_Start on a persistent receive (detail/mpi/persistent.hpp) and MPI_Test. The
  /// first polls read no clock; after them the receive waits as a request's `wait` does, with
  /// `until` resolved against `timeout` only then, and is withdrawn at the deadline:
  /// errc::timeout. Receives posted earlier and still waiting in the endpoint come first, and
  /// so do the messages it holds: then this leaves the receive to `irecv` (nullopt).
  std::optional<op_result> recv_blocking(int source, context_id ctx, int tag,
                                         const recv_buffer& buffer, const deadline& until,
                                         clock::duration timeout) {
    state& s = *state_;
    if (!s.posted.empty() || !s.held.empty()) [[unlikely]]
      return std::nullopt;
    const context& c = context_of(ctx, "recv", source, tag, buffer.capacity());
    if (s.receives == receive_path::posted && postable(buffer, source, tag)) {
      return receive_posted(c, source, tag, buffer, until, timeout);
    }
    for (int poll = 0; poll < quick_polls; ++poll) {
      if (std::optional<state::found_message> m = s.probe_mpi(c, source, tag)) {
        return take(*m, ctx, buffer);
      }
    }
    request req;
    req.slot_ = s.post(source, ctx, tag, buffer);
    return wait_out(req, until, timeout);
  }

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

  /// The MPI communicator that carries context `ctx` (tags up to MPI_TAG_UB), for handing
  /// whole operations to MPI (coll::native).
  /// @throws commx::error errc::invalid_argument for a context this endpoint does not know.
  [[nodiscard]] MPI_Comm communicator_of(context_id ctx) const {
    return context_of(ctx, "communicator_of", unknown, unknown, 0).banks[0];
  }

  /// MPI_TAG_UB, and how many MPI communicators each context uses for commx's tag range.
  [[nodiscard]] int tag_upper_bound() const { return state_->tags.upper; }
  [[nodiscard]] int tag_banks() const { return state_->tags.banks; }

 private:
  using context = detail::mpi::context;

  // What the endpoint keeps between calls; behind a pointer so the endpoint moves cheaply and
  // a moved-from endpoint frees nothing.
  struct state {
    enum class phase : std::uint8_t { free, posted, receiving, done };

    struct receive {
      phase state = phase::free;
      int source = any_source;  // as posted: world rank or any_source
      context_id ctx = 0;
      int tag = any_tag;  // as posted: commx tag or any_tag
      recv_buffer buffer{std::span<std::byte>{}};
      MPI_Request mpi = MPI_REQUEST_NULL;  // the MPI_Imrecv while receiving
      op_result result{};
    };

    // A message matched (so out of MPI's queue) that its receive refused: the next matching
    // receive takes it.
    struct held_message {
      MPI_Message message = MPI_MESSAGE_NULL;
      int source = 0;  // world rank
      context_id ctx = 0;
      int tag = 0;
      std::size_t bytes = 0;
    };

    // A message found for a receive, by MPI_Improbe or in `held`.
    struct found_message {
      MPI_Message message = MPI_MESSAGE_NULL;
      std::optional<std::size_t> held_index;
      int source = 0;
      int tag = 0;
      std::size_t bytes = 0;
    };

    // MPI is checked first: `tags` reads it.
    state(MPI_Comm comm, std::shared_ptr<init> keep)
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
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    ~state() {
      int finalized = 1;
      if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0) return;
      // Messages matched but never taken, sends never completed: MPI_Finalize must not wait
      // for them.
      std::vector<std::byte> sink;
      for (held_message& h : held) {
        sink.resize(h.bytes);
        const detail::mpi::byte_layout layout(h.bytes);
        (void)MPI_Mrecv(sink.data(), layout.count(), layout.type(), &h.message, MPI_STATUS_IGNORE);
      }
      for (receive& r : slots) {
        if (r.state == phase::receiving) (void)MPI_Wait(&r.mpi, MPI_STATUS_IGNORE);
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

    std::uint32_t post(int source, context_id ctx, int tag, recv_buffer buffer) {
      std::uint32_t slot = 0;
      if (free_slots.empty()) {
        slot = static_cast<std::uint32_t>(slots.size());
        slots.emplace_back();
      } else {
        slot = free_slots.back();
        free_slots.pop_back();
      }
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

    // The first message receive `r` would take: a held one first (they were matched before
    // anything MPI still queues), else what MPI_Improbe matches.
    std::optional<found_message> find_message(const receive& r) {
      if (!held.empty()) {
        if (auto i = find_held(r.source, r.ctx, r.tag)) {
          return found_message{held[*i].message, i, held[*i].source, held[*i].tag, held[*i].bytes};
        }
      }
      const context* c = contexts.find(r.ctx);
      if (c == nullptr) return std::nullopt;  // released: cancel_receive's business
      return probe_mpi(*c, r.source, r.tag);
    }

    // The first message MPI_Improbe matches for (source, tag) on context `c`, now taken out of
    // MPI's queue: whoever gets it must receive it (MPI_Mrecv, MPI_Imrecv) or hold it.
    std::optional<found_message> probe_mpi(const context& c, int want_source, int want_tag) {
      const int source = want_source == any_source ? MPI_ANY_SOURCE : c.local_of(want_source);
      const int bank_count = want_tag == any_tag ? tags.banks : 1;
      for (int i = 0; i < bank_count; ++i) {
        const int bank = want_tag == any_tag ? i : tags.bank_of(want_tag);
        int found = 0;
        found_message m;
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
        return m;
      }
      return std::nullopt;
    }

    // Offers queued messages to posted receives in posting order, up to receive `until` (all
    // of them for no_slot). A message found for one receive goes to the earliest posted
    // receive that matches it, which may be an earlier one it arrived too late for.
    // True if a receive took (or refused) a message.
    bool progress_posted(std::uint32_t until) {
      bool delivered = false;
      for (std::size_t i = 0; i < posted.size();) {
        const std::uint32_t slot = posted[i];
        std::optional<found_message> m = find_message(slots[slot]);
        if (!m) {
          if (slot == until) return delivered;
          ++i;
          continue;
        }
        std::size_t j = 0;
        const context_id ctx = slots[slot].ctx;
        while (!matches(slots[posted[j]].source, slots[posted[j]].ctx, slots[posted[j]].tag,
                        m->source, ctx, m->tag)) {
          ++j;
        }
        const std::uint32_t taker = posted[j];
        posted.erase(posted.begin() + static_cast<std::ptrdiff_t>(j));
        deliver(slots[taker], *m);
        waiting.progressed();
        delivered = true;
        if (taker == until) return delivered;
        i = j;
      }
      return delivered;
    }

    // Receive `r` takes message `m`, or refuses it (then the message is held for the next).
    void deliver(receive& r, found_message& m) {
      std::error_code refused;
      std::byte* into = r.buffer.prepare(m.bytes, refused);
      r.result = {m.source, m.tag, m.bytes, refused};
      if (refused) {
        if (!m.held_index) held.push_back({m.message, m.source, r.ctx, m.tag, m.bytes});
        r.state = phase::done;
        return;
      }
      if (m.held_index) held.erase(held.begin() + static_cast<std::ptrdiff_t>(*m.held_index));
      const detail::mpi::byte_layout layout(m.bytes);
      detail::mpi::check(MPI_Imrecv(into, layout.count(), layout.type(), &m.message, &r.mpi),
                         "MPI_Imrecv", {rank, m.source, m.tag, m.bytes, "recv"});
      r.state = phase::receiving;
      finish_receiving(r);
    }

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
      std::optional<copy_list::iterator> self_copy;
    };

    // Sends that could not be withdrawn, and sends from self_copies: completed in the
    // background.
    void retry_orphans() {
      for (std::size_t i = 0; i < orphans.size();) {
        int done = 0;
        if (MPI_Test(&orphans[i].request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0) {
          if (orphans[i].self_copy) self_copies.erase(*orphans[i].self_copy);
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
    std::vector<std::uint32_t> posted;  // unmatched receives, in posting order
    std::deque<held_message> held;
    copy_list self_copies;
    std::vector<background_send> orphans;
    std::uint64_t polls = 0;
    detail::mpi::backoff waiting;
    receive_path receives = receive_path::matched;
  };

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

  // A blocking receive takes the message MPI_Improbe matched for it, or refuses it (then the
  // endpoint holds it for the next receive, as `deliver` does).
  op_result take(state::found_message& m, context_id ctx, const recv_buffer& buffer) {
    state_->waiting.progressed();
    std::error_code refused;
    std::byte* into = buffer.prepare(m.bytes, refused);
    if (refused) {
      state_->held.push_back({m.message, m.source, ctx, m.tag, m.bytes});
      return {m.source, m.tag, m.bytes, refused};
    }
    const detail::mpi::byte_layout layout(m.bytes);
    const int code = MPI_Mrecv(into, layout.count(), layout.type(), &m.message, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) [[unlikely]]
      detail::mpi::fail(code, "MPI_Mrecv", where("recv", m.source, m.tag, m.bytes));
    return {m.source, m.tag, m.bytes, {}};
  }

  // A receive goes to MPI_Irecv when its buffer is fixed, one MPI communicator can match its
  // tag, and no receive waits in the endpoint (or message is held) that MPI would overtake.
  // Never from this rank itself: Open MPI 4.1 reports a truncated receive from self as a
  // success, so those take the matched path, which checks sizes itself.
  [[nodiscard]] bool postable(const recv_buffer& buffer, int source, int tag) const {
    return buffer.capacity() != static_cast<std::size_t>(-1) && source != state_->rank &&
           (tag != any_tag || state_->tags.banks == 1) && state_->posted.empty() &&
           state_->held.empty();
  }

  void post_to_mpi(request& req, const context& c, int source, int tag, recv_buffer buffer) {
    std::error_code ec;
    std::byte* into = buffer.prepare(buffer.capacity(), ec);  // a fixed buffer: its start
    const detail::mpi::byte_layout layout(buffer.capacity());
    const int bank = tag == any_tag ? 0 : state_->tags.bank_of(tag);
    detail::mpi::check(MPI_Irecv(into, layout.count(), layout.type(), mpi_source(c, source),
                                 mpi_tag(tag), c.banks[static_cast<std::size_t>(bank)], &req.send_),
                       "MPI_Irecv", where("irecv", source, tag, buffer.capacity()));
    req.posted_ = &c;
    req.buffer_ = buffer;
    req.outcome_.tag = tag;
  }

  bool test_posted(request& req) {
    int done = 0;
    MPI_Status status;
    const int code = MPI_Test(&req.send_, &done, &status);
    if (code == MPI_SUCCESS && done == 0) return false;
    req.mpi_freed_ = code != MPI_SUCCESS && req.send_ == MPI_REQUEST_NULL;
    finish_posted(req, code, status);
    return true;
  }

  // MPI's truncation is the receive's error; any other failure is thrown.
  void finish_posted(request& req, int code, const MPI_Status& status) {
    req.outcome_ = posted_outcome(*req.posted_, req.outcome_.tag, req.buffer_, code, status);
    req.send_ = MPI_REQUEST_NULL;
    req.posted_ = nullptr;
  }

  // How a receive posted to MPI (for `requested_tag`, into `buffer`) ended.
  op_result posted_outcome(const context& c, int requested_tag, const recv_buffer& buffer, int code,
                           const MPI_Status& status) {
    state_->waiting.progressed();
    op_result out{c.world_of(status.MPI_SOURCE),
                  requested_tag != any_tag ? requested_tag : status.MPI_TAG,
                  0,
                  {}};
    if (code != MPI_SUCCESS) [[unlikely]] {
      if (detail::mpi::errc_of(code) != errc::truncated) {
        detail::mpi::fail(code, "MPI_Test", where("recv", unknown, requested_tag, 0));
      }
      out.bytes = buffer.capacity();
      out.error = make_error_code(errc::truncated);
      return out;
    }
    out.bytes = detail::mpi::bytes_of(status);
    (void)buffer.prepare(out.bytes, out.error);  // whole elements?
    return out;
  }

  // A blocking receive posted to MPI: started as a persistent receive (detail/mpi/
  // persistent.hpp; past 2 GiB as post_to_mpi posts it), then polled.
  op_result receive_posted(const context& c, int source, int tag, const recv_buffer& buffer,
                           const deadline& until, clock::duration timeout) {
    if (buffer.capacity() > static_cast<std::size_t>(INT_MAX)) [[unlikely]] {
      request req;
      post_to_mpi(req, c, source, tag, buffer);
      return wait_out(req, until, timeout);
    }
    std::error_code ec;
    std::byte* into = buffer.prepare(buffer.capacity(), ec);  // a fixed buffer: its start
    const int bank = tag == any_tag ? 0 : state_->tags.bank_of(tag);
    int code = MPI_SUCCESS;
    MPI_Request handle =
        state_->repeated.find(into, static_cast<int>(buffer.capacity()), mpi_source(c, source),
                              mpi_tag(tag), c.banks[static_cast<std::size_t>(bank)], code);
    if (handle == MPI_REQUEST_NULL) [[unlikely]]
      detail::mpi::fail(code, "MPI_Recv_init", where("recv", source, tag, buffer.capacity()));
    const MPI_Request kept = handle;  // MPI may set `handle` to MPI_REQUEST_NULL on an error
    code = MPI_Start(&handle);
    if (code != MPI_SUCCESS) [[unlikely]] {
      state_->repeated.discard(kept, handle != MPI_REQUEST_NULL);
      detail::mpi::fail(code, "MPI_Start", where("recv", source, tag, buffer.capacity()));
    }
    for (int poll = 0; poll < quick_polls; ++poll) {
      int done = 0;
      MPI_Status status;
      code = MPI_Test(&handle, &done, &status);
      if (code == MPI_SUCCESS && done != 0) [[likely]]
        return posted_outcome(c, tag, buffer, code, status);
      if (code != MPI_SUCCESS) {
        state_->repeated.discard(kept, handle != MPI_REQUEST_NULL);
        return posted_outcome(c, tag, buffer, code, status);
      }
    }
    request req;
    req.send_ = handle;
    req.posted_ = &c;
    req.buffer_ = buffer;
    req.outcome_.tag = tag;
    op_result out = wait_out(req, until, timeout);
    if (out.error) state_->repeated.discard(kept, !req.mpi_freed_);  // truncated or withdrawn
    return out;
  }

  bool cancel_posted(request& req) {
    const error_context here = where("irecv", unknown, req.outcome_.tag, 0);
    detail::mpi::check(MPI_Cancel(&req.send_), "MPI_Cancel", here);
    MPI_Status status;
    const int code = MPI_Wait(&req.send_, &status);
    req.mpi_freed_ = code != MPI_SUCCESS && req.send_ == MPI_REQUEST_NULL;
    int cancelled = 0;
    if (code == MPI_SUCCESS) {
      detail::mpi::check(MPI_Test_cancelled(&status, &cancelled), "MPI_Test_cancelled", here);
    }
    if (cancelled != 0) {
      req.send_ = MPI_REQUEST_NULL;
      req.posted_ = nullptr;
      return true;
    }
    finish_posted(req, code, status);
    return false;
  }

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

  bool test_receive(request& req) {
    auto& r = state_->slots[req.slot_];
    if (r.state == state::phase::posted) (void)state_->progress_posted(req.slot_);
    if (r.state == state::phase::receiving) state_->finish_receiving(r);
    if (r.state != state::phase::done) return false;
    req.outcome_ = r.result;
    state_->release_slot(req.slot_);
    req.slot_ = request::no_slot;
    state_->waiting.progressed();
    return true;
  }

  bool cancel_receive(request& req) {
    auto& r = state_->slots[req.slot_];
    bool withdrawn = false;
    if (r.state == state::phase::posted) {
      std::erase(state_->posted, req.slot_);
      withdrawn = true;
    } else if (r.state == state::phase::receiving) {
      // Matched: its data is already on the way, and MPI cannot cancel it.
      detail::mpi::check(MPI_Wait(&r.mpi, MPI_STATUS_IGNORE), "MPI_Wait",
                         where("recv", r.result.source, r.result.tag, r.result.bytes));
    }
    req.outcome_ = r.result;
    state_->release_slot(req.slot_);
    req.slot_ = request::no_slot;
    return withdrawn;
  }

  bool cancel_send(request& req) {
    if (req.send_ == MPI_REQUEST_NULL) return false;
    const error_context here = where("isend", unknown, req.outcome_.tag, req.outcome_.bytes);
    int done = 0;
    MPI_Status status;
    detail::mpi::check(MPI_Test(&req.send_, &done, &status), "MPI_Test", here);
    if (done != 0) return false;
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
