// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::shm`: the ranks of a job on one node talk through one POSIX shared-memory
/// segment, with no daemon, no socket and nothing that needs root.
///
/// Small messages go through a lock-free ring per ordered pair of ranks (no lock and no system
/// call on the way; the receiver polls each record's own stamp, so an 8-byte message crosses
/// between cores as one cache line, detail/shm/ring.hpp); large ones (above
/// COMMX_SHM_LARGE_THRESHOLD, 32 KiB by default) are copied once, straight from the sender's
/// memory with process_vm_readv (the default), or in pipelined pieces through the ring (where
/// the kernel refuses cma, or COMMX_SHM_LARGE=copy), or in pieces one way and by cma
/// in an exchange (COMMX_SHM_LARGE=shape), or by whichever has cost the receiver less lately
/// (COMMX_SHM_LARGE=auto, detail/shm/path_choice.hpp). Messages nobody
/// asked for yet go to a private queue in the
/// receiving process, so senders never deadlock; what it holds of each sender's is
/// bounded by eager credit (COMMX_SHM_EAGER_WINDOW, 1 MiB), beyond which messages wait in the
/// sender's memory as large ones do (detail/shm/credit.hpp). A waiting rank spins briefly,
/// yields, then sleeps on a futex in the segment until a peer wakes it. A peer whose process is
/// gone is noticed within the liveness period (20 ms; 4 ms per rank of a core where more than 5
/// share one) and its pending operations raise errc::peer_lost. See detail/shm/endpoint.hpp for
/// the protocol and detail/shm/segment.hpp for how the segment is created, found, and removed.
///
/// The job is whatever the launcher says (COMMX_RANK/SIZE/TOKEN from commxrun, or Slurm, Open
/// MPI or PMI variables); the segment's name is derived from its identity
/// (detail/shm/segment_name.hpp). Every rank is on node 0.

#include <chrono>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

#include "commx/bootstrap.hpp"
#include "commx/log.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/detail/shm/cross_memory.hpp"
#include "commx/transport/detail/shm/endpoint.hpp"
#include "commx/transport/detail/shm/options.hpp"
#include "commx/transport/detail/shm/segment_name.hpp"

namespace commx::transport {

/// One rank's endpoint in a job whose processes share one node, through one POSIX shared-memory
/// segment (see the file comment).
class shm {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "shm";
  /// Ranks of a node may map each other's POSIX shared memory (windows do: window.hpp).
  static constexpr bool shares_node_memory = true;
  /// One segment joins the node's ranks: an excluded rank finds its own slot marked.
  static constexpr bool node_cannot_split = true;
  /// shm's tuning (COMMX_SHM_*, docs/environment.md).
  using options = detail::shm::options;
  /// How messages above options::large_threshold travel: auto, cma or copy.
  using large_path = detail::shm::large_path;

  /// Null when the operation completed at once, successfully (the common eager send).
  using request = std::shared_ptr<detail::shm::operation>;

  /// Joins the job the environment describes, with options from COMMX_SHM_* (options.hpp).
  /// @throws commx::error errc::bootstrap_failed when the environment names no job (and the
  ///   job has more than one rank) or the segment cannot be made; errc::timeout naming the
  ///   ranks that did not arrive within options::startup_timeout.
  static shm from_env() { return from_env(options::from_env()); }

  /// Joins the job that `get`'s variables describe, with `opts` (tests pass their own lookup).
  static shm from_env(const options& opts, const bootstrap::lookup& get = bootstrap::process_env) {
    const bootstrap::environment env = bootstrap::from_env(get);
    std::optional<std::string> job = detail::shm::job_identity(get);
    if (!job) {
      if (env.size > 1) {
        throw error(errc::bootstrap_failed,
                    fmt::format("shm: rank {} of {}: no job identity in the environment "
                                "(COMMX_TOKEN, SLURM_JOB_ID, OMPI_MCA_ess_base_jobid, "
                                "PMIX_NAMESPACE or PMI_KVSNAME); start the job with commxrun",
                                env.rank, env.size));
      }
      job = fmt::format("single:{}:{}", ::getpid(),
                        std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return shm(detail::shm::segment_name(*job), env.rank, env.size, opts);
  }

  /// Joins the job whose segment is called `segment_name` as `rank` of `size`.
  shm(const std::string& segment_name, int rank, int size, const options& opts = {}) {
    if (size < 1 || rank < 0 || rank >= size) {
      throw error(errc::invalid_argument,
                  fmt::format("shm: rank {} is not a rank of {}", rank, size));
    }
    const std::size_t ring =
        opts.ring_bytes != 0 ? opts.ring_bytes : detail::shm::default_ring_bytes(size);
    // At most 16 MiB: a record's header counts its payload in 24 bits.
    if (ring < 4096 || (ring & (ring - 1)) != 0 || ring > detail::shm::max_record_payload + 1) {
      throw error(errc::invalid_argument,
                  fmt::format("shm: ring size {} is not a power of two in [4 KiB, 16 MiB]", ring));
    }
    auto seg = join(segment_name, rank, size, ring, opts);
    endpoint_ = std::make_unique<detail::shm::endpoint>(std::move(seg), rank, size, opts);
  }

  /// Endpoints move; a moved-from endpoint owns nothing.
  shm(shm&&) noexcept = default;
  /// Endpoints move; a moved-from endpoint owns nothing.
  shm& operator=(shm&&) noexcept = default;
  shm(const shm&) = delete;
  shm& operator=(const shm&) = delete;
  ~shm() = default;

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return endpoint_->rank(); }
  /// The number of world ranks (>= 1).
  [[nodiscard]] int size() const { return endpoint_->size(); }
  /// 0: every rank of a shm job is on this node.
  [[nodiscard]] int node_of(int /*peer*/) const { return 0; }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`); `data` must stay valid and unchanged
  /// until the request completes (transport concept, transport/concept.hpp).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    return endpoint_->send(dest, ctx, tag, data);
  }

  /// Starts receiving a message from `source` (or any_source) with `tag` (or any_tag) on `ctx`
  /// into `buffer` (transport concept).
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    return endpoint_->recv(source, ctx, tag, buffer);
  }

  /// A blocking send without a request (transport::blocking_send): an eager message written
  /// into the ring at once; nullopt (left to `isend`) when it is large or has to wait.
  std::optional<op_result> send_blocking(int dest, context_id ctx, int tag,
                                         std::span<const std::byte> data, const deadline& /*until*/,
                                         clock::duration /*timeout*/) {
    return endpoint_->send_blocking(dest, ctx, tag, data);
  }

  /// A blocking receive without a request (transport::blocking_recv): as `irecv` and waiting,
  /// on an operation the endpoint recycles; the first polls read no clock, and `until` is
  /// resolved against `timeout` only after them. errc::timeout at the deadline (withdrawn).
  std::optional<op_result> recv_blocking(int source, context_id ctx, int tag,
                                         const recv_buffer& buffer, const deadline& until,
                                         clock::duration timeout) {
    return endpoint_->recv_blocking(source, ctx, tag, buffer, until, timeout);
  }

  /// Makes progress; true once `req` has completed, successfully or not.
  bool test(request& req) { return endpoint_->test(req); }

  /// True once `req` has completed, without making progress (after `progress()`).
  [[nodiscard]] bool completed(const request& req) const { return !req || req->done; }

  /// How a completed request ended: the matched source, tag and byte count, or the error.
  const op_result& result(const request& req) const {
    static const op_result delivered{};
    return req ? req->result : delivered;
  }

  /// Withdraws `req` if it has not matched yet (true); false if it has completed.
  bool cancel(request& req) { return req && endpoint_->cancel(*req); }

  /// The first queued message that a receive with these arguments would match, without
  /// receiving it; an error result when `source` is gone and nothing from it is queued.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    return endpoint_->probe(source, ctx, tag);
  }

  /// Makes progress without waiting: takes in what arrived, sends what can go (a transport
  /// composed with others, node_and_network.hpp, calls it on the one it is not waiting in).
  void progress() { endpoint_->poll(); }

  /// A counter that changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const { return endpoint_->event_count(); }
  /// The peers this endpoint found failed, in the order it found them (transport concept).
  [[nodiscard]] std::vector<int> failed_peers() const { return endpoint_->failed_peers(); }

  /// Blocks, without burning a core, until event_count() != `seen` or `when` passes.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    endpoint_->wait_for_event(seen, when);
  }

  /// Marks this rank as failed (its peers count it in failed_peers()), not finished.
  void fail() { endpoint_->fail(); }
  /// Declares a live `peer` failed, for every rank of the node at once (transport concept):
  /// a stalled rank, resumed, finds every peer lost and itself in failed_peers().
  void exclude(int peer, std::string_view why) { endpoint_->exclude(peer, why); }

  /// Whether large messages are copied by cross-memory attach (else through the ring).
  [[nodiscard]] bool cross_memory_enabled() const { return endpoint_->cross_memory_enabled(); }
  /// Large messages copied by both ends so far (COMMX_SHM_SHARED_COPY): received with the
  /// sender's help, and sent with this rank writing part of the copy.
  [[nodiscard]] std::array<std::uint64_t, 2> shared_copies() const {
    return endpoint_->shared_copies();
  }
  /// Whether this rank's waits now count its core as shared (COMMX_SHM_SPIN=auto): more of the
  /// ranks that may run on its CPUs are awake than it has CPUs, or a yield lately handed the
  /// core to another task (detail/shm/waiting.hpp).
  [[nodiscard]] bool waits_share_core() const { return endpoint_->waits_share_core(); }
  /// The largest message that travels whole through the ring (COMMX_SHM_LARGE_THRESHOLD, or
  /// options::threshold_by_load's, at most half a ring).
  [[nodiscard]] std::size_t eager_limit() const { return endpoint_->eager_limit(); }
  /// What this rank holds of small messages nobody has asked for yet, each counted as its
  /// payload plus 64 bytes. At most eager_window() per sender, itself included, however many
  /// are sent: beyond it they stay in the sender's memory until a receive takes them.
  [[nodiscard]] std::size_t held_bytes() const { return endpoint_->held_bytes(); }
  /// That bound per sender (COMMX_SHM_EAGER_WINDOW).
  [[nodiscard]] std::uint64_t eager_window() const { return endpoint_->eager_window(); }
  /// The segment's name (removed from /dev/shm once every rank has arrived).
  [[nodiscard]] const std::string& segment_name() const { return endpoint_->segment_name(); }

 private:
  // segment::join, with its start-up timeout logged (COMMX_LOG=info) as every timeout is.
  // Peers probe whether they may read this process once it has arrived: let them first.
  static detail::shm::segment join(const std::string& segment_name, int rank, int size,
                                   std::size_t ring, const options& opts) {
    if (opts.large != detail::shm::large_path::copy) {
      detail::shm::let_same_user_read_this_process();
    }
    try {
      return detail::shm::segment::join(segment_name, rank, size, ring,
                                        clock::now() + opts.startup_timeout);
    } catch (const error& e) {
      if (e.code() == errc::timeout) COMMX_LOG(info, (log::context{name, rank}), "{}", e.what());
      throw;
    }
  }

  std::unique_ptr<detail::shm::endpoint> endpoint_;
};

static_assert(transport<shm> && blocking_send<shm> && blocking_recv<shm>);

}  // namespace commx::transport
