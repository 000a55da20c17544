// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The engine behind transport::ucx (see its file comment): matching, requests, endpoints and
/// peers' ends.
///
/// Matching is commx's, on messages UCX has already matched to this worker: every arrival is
/// probed out of UCX's unexpected queue with a mask of zero (any tag) and removed, so UCX
/// never consumes a message into a receive too small for it; commx then offers it to its
/// posted receives in the order they were posted, each checking the size in `prepare`, and a
/// refused message goes on to the next or waits queued, whole, for a later receive. A message
/// taken is received from its handle (`ucp_tag_msg_recv_nbx`): a small one is copied out of
/// UCX's buffer, a large one (rendezvous) lands in the receive's own memory. UCX keeps each
/// sender's messages in order, so probing in arrival order keeps commx's non-overtaking rule.
///
/// Peers: an endpoint is made on first use (a send to the peer, or a receive naming it: then
/// the endpoint watches it), with UCX's peer error handling where UCX can give it (endpoint_of),
/// and announced by a `hello`, so the peer makes one back and both know to say `bye` when they
/// close. A peer that said bye is finished: what it sent before is delivered, and what waits on
/// it then ends with errc::peer_lost. A peer whose endpoint fails without a bye failed: it also
/// joins `failed_peers()`.

#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "commx/error.hpp"
#include "commx/log.hpp"
#include "commx/transport/detail/operation_pool.hpp"
#include "commx/transport/detail/shm/liveness.hpp"
#include "commx/transport/detail/ucx/operation.hpp"
#include "commx/transport/detail/ucx/peer.hpp"
#include "commx/transport/detail/ucx/tag_bits.hpp"
#include "commx/transport/detail/ucx/wireup.hpp"
#include "commx/transport/detail/ucx/worker.hpp"
#include "commx/transport/detail/unexpected_queue.hpp"
#include "commx/transport/message.hpp"
#include "commx/transport/tcp.hpp"

namespace commx::detail::ucx {

class engine {
 public:
  explicit engine(transport::tcp::config cfg)
      : timeout_(cfg.timeout),
        control_(std::move(cfg)),
        bits_(control_.size()),
        peers_(static_cast<std::size_t>(control_.size())),
        log_{"ucx", control_.rank()} {
    // Each rank's process (a watch on ranks of its node) and its worker's address.
    const pid_t pid = ::getpid();
    start_entries start = exchange_start_entries(control_, {pid, shm::process_start_time(pid)},
                                                 worker_.address(), timeout_);
    addresses_ = std::move(start.addresses);
    for (int r = 0; r < size(); ++r) {
      peer& p = peers_[index(r)];
      p.owner = this;
      p.rank = r;
      p.same_node = node_of(r) == node_of(rank());
      if (p.same_node && r != rank()) {
        const process_identity& theirs = start.processes[index(r)];
        p.watch = shm::process_watch(theirs.pid, theirs.started);
      }
    }
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() { close(); }

  [[nodiscard]] int rank() const { return control_.rank(); }
  [[nodiscard]] int size() const { return control_.size(); }
  [[nodiscard]] int node_of(int peer) const { return control_.node_of(peer); }
  [[nodiscard]] int site_of(int peer) const { return control_.site_of(peer); }
  [[nodiscard]] transport::data_layout layout_of(int peer) const {
    return control_.layout_of(peer);
  }
  [[nodiscard]] clock::duration timeout() const { return timeout_; }
  [[nodiscard]] std::uint64_t event_count() const { return events_; }
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const { return peers_[index(peer)].sent; }
  [[nodiscard]] std::vector<int> failed_peers() const { return failed_; }
  /// Endpoints this rank has made (a send to the peer, a receive naming it, its hello).
  [[nodiscard]] int endpoints() const {
    return static_cast<int>(std::ranges::count_if(peers_, [](const peer& p) { return p.ep; }));
  }

  operation_handle isend(int dest, context_id ctx, int tag,
                         const std::span<const std::byte>& data) {
    peer& to = peers_[index(dest)];
    to.sent += data.size();
    if (!bits_.fits(ctx)) return failed_now(dest, tag, context_error(ctx));
    if (to.gone() || endpoint_of(to) == nullptr) return failed_now(dest, tag, to.why_not());
    // The operation UCX would call back with is made only for a send that does not complete
    // at once (the common eager one does): until then it waits in `spare_send_`.
    if (!spare_send_) spare_send_ = operation_handle::make();
    operation& op = *spare_send_;
    op.peer = dest;
    op.tag = tag;
    op.owner = this;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &engine::on_sent;
    param.user_data = &op;
    const ucs_status_ptr_t sent =
        ucp_tag_send_nbx(to.ep, data.data(), data.size(), bits_.pack(ctx, rank(), tag), &param);
    if (sent == nullptr) return nullptr;  // done at once: the common eager send
    if (UCS_PTR_IS_ERR(sent)) return failed_now(dest, tag, lost());
    operation_handle pending = std::move(spare_send_);
    pending->in_flight = sent;
    pending->keep_alive = pending;
    ++held_;
    return pending;
  }

  operation_handle irecv(int source, context_id ctx, int tag,
                         const transport::recv_buffer& buffer) {
    operation_handle op = receives_.take();
    op->is_receive = true;
    op->peer = source;
    op->ctx = ctx;
    op->tag = tag;
    op->buffer = buffer;
    op->owner = this;
    if (!bits_.fits(ctx)) {
      finish(*op, {source, tag, 0, context_error(ctx)});
      return op;
    }
    const auto take_queued = [&] {
      const auto at = unexpected_.find(source, ctx, tag);
      if (at == unexpected_.end()) return false;
      if (take(op, *at)) unexpected_.pop(at);
      return true;
    };
    if (take_queued()) return op;
    if (source != any_source && source != rank()) {
      peer& from = peers_[index(source)];
      (void)endpoint_of(from);  // watches it from now on
      if (from.unreachable) {
        finish(*op, {source, tag, 0, from.why_not()});
        return op;
      }
      if (from.gone()) {
        worker_.drain();  // what it sent before it went may still be in UCX's queue
        progress();
        if (!take_queued()) finish(*op, {source, tag, 0, lost()});
        return op;
      }
    }
    posted_.push_back(op);
    return op;
  }

  bool test(const operation_handle& op) {
    if (!op || op->done) return true;
    progress();
    return op->done;
  }

  bool cancel(const operation_handle& op) {
    if (!op || op->done) return false;
    if (const auto it = std::ranges::find(posted_, op); it != posted_.end()) {
      posted_.erase(it);
      finish(*op, {op->peer, op->tag, 0, make_error_code(errc::cancelled)});
      return true;
    }
    if (op->is_receive) {  // matched: not withdrawn, and given a moment to end by itself
      (void)complete_in_flight(*op);
      return false;
    }
    // A send UCX holds: asked to withdraw it, UCX either does or completes it meanwhile.
    op->cancel_asked = true;
    ucp_request_cancel(worker_.get(), op->in_flight);
    if (!complete_in_flight(*op)) {
      // Not withdrawn within the bound: the endpoint is closed, which ends every send on it
      // (the peer then sees this rank lost), so nothing is left reading the caller's buffer.
      drop_endpoint(peers_[index(op->peer)], "a send could not be withdrawn");
      (void)complete_in_flight(*op);
    }
    return op->result.error == make_error_code(errc::cancelled);
  }

  std::optional<transport::op_result> iprobe(int source, context_id ctx, int tag) {
    progress();
    if (const auto at = unexpected_.find(source, ctx, tag); at != unexpected_.end()) {
      const arrival& a = *at;
      return transport::op_result{a.source, a.tag, a.bytes, {}};
    }
    if (source != any_source && source != rank() && peers_[index(source)].gone()) {
      return transport::op_result{source, tag, 0, lost()};
    }
    return std::nullopt;
  }

  /// Takes in what arrived and notices peers' ends, without blocking: one turn of UCX's
  /// progress, as a wait polls, or turns until UCX has nothing more while it holds operations
  /// (a large message moves a piece a turn).
  void progress() {
    if (held_ > 0) {
      worker_.drain();
    } else {
      (void)worker_.progress();
    }
    take_arrivals();
    if (losses_pending_) notice_losses();
  }

  // Polls first as tcp's waits do (COMMX_TCP_POLL; detail/tcp/polling.hpp: back to back for
  // up to 100 us where each rank has a core, yielding where ranks outnumber them), the budget
  // starting again while UCX has work (a large message streaming in); then sleeps on the
  // worker's descriptor. Sleeping early costs both ends: a sender to an armed worker over
  // shared memory wakes it through a socket, a system call per message.
  void wait_for_event(std::uint64_t seen, clock::time_point until) {
    wait_until([&] { return events_ != seen; }, until);
  }
  /// Waits as wait_for_event does until `done()` (something UCX completes that is not a
  /// message: a window's flush) or `until` passes.
  template <class Done>
  void wait_until(Done&& done, clock::time_point until) {
    progress();
    if (done()) return;
    if (control_.wait_polling().poll_first([this] { progress(); }, done,
                                           [this] { return worker_.activity(); }, until)) {
      return;
    }
    while (!done() && clock::now() < until) {
      check_local_peers();
      (void)worker_.sleep_until(until);
      progress();
    }
  }

  /// UCX's context, for memory that windows map (detail/ucx/rma_window.hpp).
  [[nodiscard]] ucp_context_h ucp_context() const { return worker_.context(); }
  [[nodiscard]] ucp_worker_h ucp_worker() const { return worker_.get(); }
  /// The endpoint to `peer`, made on first use as a send's; null once nothing more can go
  /// there (cut_off).
  ucp_ep_h endpoint_to(int peer) { return endpoint_of(peers_[index(peer)]); }
  /// Whether nothing more goes to `peer`: it finished, failed, or UCX cannot reach it.
  [[nodiscard]] bool cut_off(int peer) const {
    const auto& p = peers_[index(peer)];
    return p.gone() || p.unreachable;
  }

 private:
  [[nodiscard]] static std::size_t index(int r) { return static_cast<std::size_t>(r); }
  static std::error_code lost() { return make_error_code(errc::peer_lost); }
  std::error_code context_error(context_id ctx) const {
    COMMX_LOG(error, log_,
              "context id {} needs more than the {} bits a job of {} ranks "
              "leaves in UCX's tag (detail/ucx/tag_bits.hpp)",
              ctx, bits_.context_width(), size());
    return make_error_code(errc::invalid_argument);
  }

  operation_handle failed_now(int peer, int tag, std::error_code ec) {
    auto op = operation_handle::make();
    op->peer = peer;
    finish(*op, {peer, tag, 0, ec});
    return op;
  }

  void finish(operation& op, const transport::op_result& result) {
    op.result = result;
    op.done = true;
    ++events_;
  }

  // The endpoint to `p`, made on first use (with a hello, so `p` makes one back); null when
  // it cannot be made (the peer is gone). The look inline, the making not: every send and
  // every receive naming a peer asks, and a call each cost some 20 instructions (callgrind).
  ucp_ep_h endpoint_of(peer& p, bool say_hello = true) {
    return p.ep != nullptr ? p.ep : make_endpoint(p, say_hello);
  }
  [[gnu::noinline]] ucp_ep_h make_endpoint(peer& p, bool say_hello) {
    if (p.gone() || p.unreachable) return nullptr;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses_[index(p.rank)].data());
    // UCX's shared-memory transports (posix, sysv, cma, self) have no peer error handling,
    // so an endpoint that asks for it cannot use them; and on an endpoint without it, UCX
    // may abort the process when the peer dies (its tcp transport does). So every endpoint
    // asks for it but one to this rank itself, and one to a rank of this node that nothing
    // else reaches (UCX_TLS=sm,self): commx then watches that peer's process instead
    // (check_local_peers), and UCX's shared memory, which outlives a dead peer, is safe.
    // Once that happened for one rank of the node it holds for all (UCX logs each refusal).
    const bool without = p.rank == rank() || (p.same_node && node_without_peer_mode_);
    params.err_mode = without ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &engine::on_endpoint_failed;
    params.err_handler.arg = &p;
    ucs_status_t made = ucp_ep_create(worker_.get(), &params, &p.ep);
    if (made == UCS_ERR_UNREACHABLE && p.same_node && !without) {
      params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      made = ucp_ep_create(worker_.get(), &params, &p.ep);
      node_without_peer_mode_ = made == UCS_OK;
    }
    if (const ucs_status_t s = made; s != UCS_OK) {
      p.ep = nullptr;
      if (s != UCS_ERR_UNREACHABLE) {  // the peer's worker is gone (its memory, its port)
        COMMX_LOG(info, log_, "no endpoint to rank {}: {}", p.rank, status_text(s));
        p.failed = true;
        losses_pending_ = true;
        return nullptr;
      }
      const char* tls = std::getenv("UCX_TLS");
      COMMX_LOG(error, log_,
                "UCX has no transport to rank {} ({}): {}. Between nodes an endpoint needs one "
                "that reports a peer's failure (tcp, or a fabric's: rc, ud, dc); shared memory "
                "cannot. UCX_TLS={}",
                p.rank, p.same_node ? "this node" : "another node", status_text(s),
                tls != nullptr ? tls : "(unset: all)");
      p.unreachable = true;
      return nullptr;
    }
    if (log::enabled(log::level::info)) log_transports(p);
    if (say_hello && p.rank != rank()) send_control(p, control::hello);
    return p.ep;
  }

  // Which of UCX's transports the endpoint to `p` uses (COMMX_LOG=info).
  void log_transports(const peer& p) {
    for (const std::string& lane : lanes_of(p.ep))
      COMMX_LOG(info, log_, "to rank {}: {}", p.rank, lane);
  }

  void send_control(peer& p, control what) {
    ucp_request_param_t param{};
    const ucs_status_ptr_t sent =
        ucp_tag_send_nbx(p.ep, nullptr, 0, bits_.pack(what, rank()), &param);
    if (sent != nullptr && !UCS_PTR_IS_ERR(sent)) controls_.push_back(sent);
  }

  // Every arrival probed out of UCX, in order, and offered to the posted receives.
  void take_arrivals() {
    for (;;) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h handle = ucp_tag_probe_nb(worker_.get(), 0, 0, 1, &info);
      if (handle == nullptr) return;
      const tag_bits::envelope e = bits_.unpack(info.sender_tag);
      if (e.source >= size() || e.control_message) {
        discard(handle, info.length);
        if (e.source < size()) on_control(peers_[index(e.source)], *e.control_message);
        continue;
      }
      ++events_;
      arrival a{0, e.source, e.ctx, e.tag, info.length, handle};
      if (!offer(a)) unexpected_.push(a);
    }
  }

  // Offers `a` to the posted receives in post order; true when one took it.
  bool offer(arrival& a) {
    for (auto it = posted_.begin(); it != posted_.end();) {
      operation& op = **it;
      if (!matches(op.peer, op.ctx, op.tag, a.source, a.ctx, a.tag)) {
        ++it;
        continue;
      }
      const operation_handle taker = std::move(*it);
      if (it == posted_.begin()) {  // the usual case, and cheaper than erase
        posted_.pop_front();
        it = posted_.begin();
      } else {
        it = posted_.erase(it);
      }
      if (take(taker, a)) return true;
    }
    return false;
  }

  // `op` takes `a` if its buffer accepts it (true); a refused message ends `op` with the
  // error and stays where it was.
  bool take(const operation_handle& op, arrival& a) {
    transport::op_result result{a.source, a.tag, a.bytes, {}};
    std::byte* target = op->buffer.prepare(a.bytes, result.error);
    if (result.error) {
      finish(*op, result);
      return false;
    }
    op->result = result;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv = &engine::on_received;
    param.user_data = op.get();
    std::byte none{};
    const ucs_status_ptr_t got = ucp_tag_msg_recv_nbx(
        worker_.get(), target != nullptr ? target : &none, a.bytes, a.handle, &param);
    if (got == nullptr) {
      finish(*op, result);
    } else if (UCS_PTR_IS_ERR(got)) {
      result.error = lost();
      finish(*op, result);
    } else {
      op->in_flight = got;
      op->keep_alive = op;
      ++held_;
    }
    return true;
  }

  // A message nobody will read (a control message, a stranger's tag): received and dropped.
  void discard(ucp_tag_message_h handle, std::size_t bytes) {
    std::vector<std::byte> sink(std::max<std::size_t>(bytes, 1));
    ucp_request_param_t param{};
    const ucs_status_ptr_t got =
        ucp_tag_msg_recv_nbx(worker_.get(), sink.data(), bytes, handle, &param);
    // A zero-byte control message completes at once; anything larger gets a second at most.
    wait_released(got, std::chrono::seconds(1));
  }

  void on_control(peer& p, control what) {
    if (what == control::hello) {
      (void)endpoint_of(p, false);
    } else if (what == control::bye) {
      p.said_bye = true;
      losses_pending_ = true;
    }
  }

  // Peers lost: found by looking at this node's processes, and what waits on them ended
  // (engine_losses.hpp).
  static constexpr clock::duration local_peers_period = std::chrono::milliseconds(20);
  void check_local_peers();
  void notice_losses();

  static void on_endpoint_failed(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* p = static_cast<peer*>(arg);
    if (!p->said_bye && !p->failed) {
      COMMX_LOG(info, p->owner->log_, "endpoint to rank {} failed: {}", p->rank,
                status_text(status));
    }
    p->failed = !p->said_bye;
    p->owner->losses_pending_ = true;
    ++p->owner->events_;
  }

  static void ended(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<operation*>(user_data);
    if (status != UCS_OK) {
      op->result.error = make_error_code(
          op->cancel_asked && status == UCS_ERR_CANCELED ? errc::cancelled : errc::peer_lost);
    }
    op->in_flight = nullptr;
    --op->owner->held_;
    ucp_request_free(request);
    op->owner->finish(*op, op->result);
    const operation_handle release = std::move(op->keep_alive);
  }
  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    ended(request, status, user_data);
  }
  static void on_received(void* request, ucs_status_t status, const ucp_tag_recv_info_t* /*info*/,
                          void* user_data) {
    ended(request, status, user_data);
  }

  // Progresses until `op` completes, for at most a second; whether it did.
  bool complete_in_flight(operation& op) {
    const clock::time_point until = clock::now() + std::chrono::seconds(1);
    while (!op.done && clock::now() < until) worker_.progress();
    return op.done;
  }

  void drop_endpoint(peer& p, std::string_view why) {
    if (p.ep == nullptr) return;
    COMMX_LOG(info, log_, "closing the endpoint to rank {}: {}", p.rank, why);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_released(ucp_ep_close_nbx(p.ep, &param), std::chrono::seconds(1));
    p.ep = nullptr;
    p.failed = !p.said_bye;
    losses_pending_ = losses_pending_ || !p.noticed;
  }

  void wait_released(ucs_status_ptr_t request, clock::duration bound) {
    if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
    const clock::time_point until = clock::now() + bound;
    while (ucp_request_check_status(request) == UCS_INPROGRESS && clock::now() < until) {
      worker_.progress();
    }
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp_request_cancel(worker_.get(), request);
    }
    ucp_request_free(request);
  }

  // Says bye to every peer with an endpoint, then closes them, each step bounded.
  void close() {
    for (peer& p : peers_) {
      if (p.ep != nullptr && p.rank != rank() && !p.gone()) send_control(p, control::bye);
    }
    const clock::time_point until =
        clock::now() + std::min<clock::duration>(timeout_, std::chrono::seconds(10));
    for (ucs_status_ptr_t c : controls_) {
      while (ucp_request_check_status(c) == UCS_INPROGRESS && clock::now() < until) {
        worker_.progress();
      }
      ucp_request_free(c);
    }
    controls_.clear();
    for (peer& p : peers_) {
      if (p.ep == nullptr) continue;
      ucp_request_param_t param{};
      if (p.gone()) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      }
      wait_released(ucp_ep_close_nbx(p.ep, &param), std::chrono::seconds(2));
      p.ep = nullptr;
    }
    // What arrived and nobody took (queued here, or still in UCX: a peer's bye) is received
    // and dropped, so UCX does not leave its buffers behind.
    unexpected_.remove_if([&](const arrival& a) {
      discard(a.handle, a.bytes);
      return true;
    });
    worker_.drain();
    for (int left = 4096; left > 0; --left) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h handle = ucp_tag_probe_nb(worker_.get(), 0, 0, 1, &info);
      if (handle == nullptr) break;
      discard(handle, info.length);
    }
  }

  clock::duration timeout_;
  transport::tcp control_;  // the bootstrap, kept for the job: its node ids, sites, layouts
  worker worker_;
  tag_bits bits_;
  std::vector<peer> peers_;  // never resized: endpoints' error handlers hold their addresses
  address_table addresses_;
  operation_handle spare_send_;                           // isend's operation, before it is needed
  operation_pool<operation, operation_handle> receives_;  // recycled once nobody else holds one
  std::deque<operation_handle> posted_;
  unexpected_queue<arrival> unexpected_;
  std::vector<ucs_status_ptr_t> controls_;  // hellos and byes UCX still holds
  std::vector<int> failed_;
  std::uint64_t events_ = 0;
  int held_ = 0;  // operations UCX holds (in_flight): progress drains while there are any
  bool losses_pending_ = false;
  clock::time_point local_peers_checked_{};  // check_local_peers' last look
  bool node_without_peer_mode_ = false;      // endpoint_of: this node's peers need UCX_TLS's sm
  log::context log_;
};

}  // namespace commx::detail::ucx

#include "commx/transport/detail/ucx/engine_losses.hpp"  // IWYU pragma: export
