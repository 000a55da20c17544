// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP transport's progress engine: one rank's matching state (posted receives, messages
/// nobody asked for yet), its connections to the ranks it talks to, and the protocol on them.
///
/// Connections are made on first use: a rank joins through rank 0, whose connection to each
/// joiner is closed by agreement once the joiner has the table (engine_rendezvous.hpp), and
/// dials a peer the first time it sends to it or names it in a receive or probe. Frames for a
/// peer wait in its connection until the handshake is through. Where two ranks dial each other
/// at once, the lower rank's dial is the one kept (the acceptor answers the other `crossed`),
/// so a pair has one connection and its messages one order. A rank that talks to k peers holds
/// k connections, rank 0 too.
///
/// Single-threaded: everything runs on the calling thread, inside the transport's calls. The
/// engine makes progress when the rank calls into it (isend, irecv, test, iprobe,
/// wait_for_event); waiting blocks in the kernel (epoll, through Asio's io_context), never in a
/// spin loop.
///
/// Protocol, per pair of ranks over one connection (frames: wire.hpp):
/// - A message of at most the eager threshold goes at once as an `eager` frame, while the
///   sender has window credit at the receiver. The receiver puts the payload straight into a
///   posted receive, or holds it until one is posted; holding it costs the sender credit, which
///   the receiver returns (`credit`) as its user takes the messages. So what a receiver holds
///   from each sender is bounded by the window: a flood cannot exhaust its memory.
/// - A larger message (or one without credit) sends its envelope (`rts`) and waits. When a
///   receive matches it the receiver answers `cts`, and the sender writes header and user buffer
///   in one gathered write (`data`), which the receiver reads straight into the user's buffer.
/// - Where an extension carries data on streams of its own (transport::wan), a large message
///   within the receiver's streamed window skips the cts: its envelope says the data follows,
///   and the chunks leave at once (engine_streamed.hpp).
/// - Matching happens as envelopes arrive, in arrival order, so messages from one sender never
///   overtake each other, eager or not.
/// - A peer that says `bye` finished; a connection that ends without it means the peer failed
///   (killed, crashed). Either way every operation waiting on it completes with
///   errc::peer_lost; a failed peer is counted in failed_peers() (any_source receives are the
///   communicator's to end, transport/concept.hpp). A frame that breaks the
///   protocol closes the connection, and what waited on that peer completes with
///   errc::protocol_violation.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio.hpp>
#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/log.hpp"
#include "commx/transport/detail/operation_pool.hpp"
#include "commx/transport/detail/tcp/config.hpp"
#include "commx/transport/detail/tcp/connection.hpp"
#include "commx/transport/detail/tcp/dial.hpp"
#include "commx/transport/detail/tcp/operation.hpp"
#include "commx/transport/detail/tcp/polling.hpp"
#include "commx/transport/detail/tcp/session.hpp"
#include "commx/transport/detail/tcp/wire.hpp"
#include "commx/transport/detail/unexpected_queue.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::tcp {

class engine {
 public:
  explicit engine(config cfg)
      : keep_running_(asio::make_work_guard(io_)),
        cfg_(std::move(cfg)),
        peers_(static_cast<std::size_t>(cfg_.size)),
        nodes_(static_cast<std::size_t>(cfg_.size), 0),
        sites_(static_cast<std::size_t>(cfg_.size), 0),
        log_{"tcp", cfg_.rank} {
    for (auto& p : peers_) p.send_credit = cfg_.window;
    if (cfg_.tls.mode != tls_mode::off) tls_ = std::make_unique<tls_context>(cfg_.tls);
  }

  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  /// Says bye to every peer, unless the endpoint goes away because of an exception: then the
  /// peers see a failed rank (no bye), not one that finished.
  ~engine() { leave(std::uncaught_exceptions() > 0); }

  [[nodiscard]] int rank() const { return cfg_.rank; }
  [[nodiscard]] int size() const { return cfg_.size; }
  [[nodiscard]] int node_of(int peer) const { return nodes_.at(index(peer)); }
  [[nodiscard]] int site_of(int peer) const { return sites_.at(index(peer)); }
  /// How `peer`'s machine lays out values, from its record in the table (this rank's before).
  [[nodiscard]] transport::data_layout layout_of(int peer) const {
    return *transport::data_layout::from_code(table_.empty() ? cfg_.layout
                                                             : table_.at(index(peer)).layout);
  }
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const {
    return peers_.at(index(peer)).bytes_sent;
  }
  /// Eager bytes from every peer that this rank holds, or has not yet given the credit of back
  /// (each counted with its frame header): at most the window per peer.
  [[nodiscard]] std::uint64_t held_bytes() const {
    std::uint64_t held = 0;
    for (const peer_link& link : peers_) held += link.held;
    return held;
  }
  /// COMMX_TCP_WINDOW.
  [[nodiscard]] std::uint64_t eager_window() const { return cfg_.window; }
  [[nodiscard]] std::uint64_t event_count() const { return events_; }
  /// COMMX_TIMEOUT: how long joining and leaving may take.
  [[nodiscard]] clock::duration timeout() const { return cfg_.timeout; }

  /// This rank's listen endpoint (after the rendezvous), for tests.
  [[nodiscard]] std::optional<asio::ip::tcp::endpoint> listen_endpoint() const {
    if (!acceptor_) return std::nullopt;
    std::error_code ec;
    auto ep = acceptor_->local_endpoint(ec);
    if (ec) return std::nullopt;
    return ep;
  }

  // --- for an extension (transport::wan) -------------------------------------------------

  void extend(extension hooks) {
    if (!hooks.stack.empty()) log_.stack = hooks.stack;
    ext_ = std::move(hooks);
  }
  /// Offers `peer` this rank's streamed window (engine_streamed.hpp): until it has, its large
  /// messages to us wait for their cts.
  void offer_streamed_window(int peer) {
    if (ext_.streamed_window > 0) push_control(peer, frame_kind::grant, ext_.streamed_window);
  }
  /// Sends `peer`'s extension `what` (extension::signalled), after what is queued to it.
  void signal(int peer, std::uint64_t what) { push_control(peer, frame_kind::signal, what); }
  /// Who this engine's log lines come from (log.hpp): its rank and stack.
  [[nodiscard]] const log::context& log_context() const { return log_; }
  asio::io_context& io() { return io_; }
  /// Connects to `peer`'s listen endpoint, through this site's relay when the peer is at
  /// another site (dial.hpp); `done(failure, socket, token_refused)`.
  void dial_rank(int peer, clock::time_point until, dialer::done_fn done,
                 std::optional<asio::ip::tcp::socket> opened = std::nullopt) {
    dial(table_.at(index(peer)), until, std::move(done), std::move(opened));
  }
  /// Whether this rank's connections to `peer` are encrypted (COMMX_TLS), and with what.
  [[nodiscard]] bool tls_wanted(int peer) const {
    return cfg_.tls.wanted(cfg_.site, table_.at(index(peer)).site);
  }
  [[nodiscard]] tls_context* tls() const { return tls_.get(); }
  /// Where a connection to `peer` goes first: this site's relay, or the peer.
  [[nodiscard]] asio::ip::tcp::endpoint first_hop(int peer) const {
    return dialer::first_hop(identity(table_.at(index(peer))), table_.at(index(peer)));
  }
  [[nodiscard]] bool connected(int peer) const {
    return peers_[index(peer)].state == presence::present;
  }
  /// Completes `op` (a send whose data the extension carried) with `result`.
  void complete(operation& op, op_result result) { finish(op, result); }
  /// The receive waiting for rendezvous `cookie`'s data from `peer`, if any.
  [[nodiscard]] std::optional<awaited_receive> awaited(int peer, std::uint64_t cookie) const {
    const auto& waiting = peers_[index(peer)].awaiting_data;
    const auto it = waiting.find(cookie);
    if (it == waiting.end()) return std::nullopt;
    return awaited_receive{it->second.op.get(), it->second.size};
  }
  /// All of rendezvous `cookie`'s data from `peer` has arrived: its receive completes
  /// (engine_streamed.hpp).
  void finish_awaited(int peer, std::uint64_t cookie);
  /// The highest rendezvous id `peer` has announced (an rts): chunks of a higher one came
  /// before their envelope.
  [[nodiscard]] std::uint64_t announced(int peer) const { return peers_[index(peer)].announced; }
  /// Starts connecting to `peer` if nothing connects this rank to it yet (an extension that
  /// needs the connection before the first message: wan's streams).
  void connect_to(int peer) {
    if (peer != rank()) reach(peer);
  }
  /// Whether `peer` finished or failed: nothing more will come from it.
  [[nodiscard]] bool departed(int peer) const {
    const presence p = peers_[index(peer)].state;
    return p == presence::finished || p == presence::failed;
  }
  /// Ends the job's connection with `peer` as failed: what waits on it completes with `why`.
  void fail_peer(int peer, errc why, std::string_view text) {
    if (!connected(peer)) return;
    COMMX_LOG(warn, log_, "closing the connection to rank {}: {}", peer, text);
    gone(peer, presence::failed, make_error_code(why));
  }

  // --- the transport's operations -------------------------------------------------------

  /// `stream`: for an extension with several streams, the one to carry the data (-1: any).
  std::shared_ptr<operation> isend(int dest, context_id ctx, int tag,
                                   const std::span<const std::byte>& data, int stream = -1) {
    peers_[index(dest)].bytes_sent += data.size();
    if (dest == rank()) return send_to_self(ctx, tag, data);
    peer_link& link = peers_[index(dest)];
    if (!reach(dest)) {
      return completed(operation::kind::send, dest, ctx, tag, lost(dest, data.size()));
    }
    if (const std::optional<op_result> sent = send_eager(dest, ctx, tag, data)) {
      return sent->error ? completed(operation::kind::send, dest, ctx, tag, *sent) : nullptr;
    }
    connection& c = *link.conn;
    if (!data.empty() && data.size() <= link.stream_credit && ext_.streams_to &&
        ext_.streams_to(dest)) {
      return send_streamed(dest, ctx, tag, data, stream);
    }
    auto op = pool_.take(operation::kind::send, dest, ctx, tag);
    op->payload = data;
    op->stream = stream;
    op->cookie = link.next_cookie++;
    op->where = operation::stage::awaiting_cts;
    link.awaiting_cts.emplace(op->cookie, op);
    out_frame& f = c.out.emplace_back();
    f.header = encode(frame_header{frame_kind::rts, 0, rank(), tag, ctx, data.size(), op->cookie});
    f.cookie = op->cookie;
    flush(dest);
    return op;
  }

  std::shared_ptr<operation> irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    auto op = pool_.take(operation::kind::recv, source, ctx, tag);
    op->buffer = buffer;
    auto queued = unexpected_.find(source, ctx, tag);
    if (queued != unexpected_.end()) {
      take(op, queued);
      return op;
    }
    // Connected, so that the receive learns if the source fails.
    if (source != any_source && source != rank()) reach(source);
    if (auto gone = lost_source(source)) {
      finish(*op, *gone);
      return op;
    }
    op->where = operation::stage::posted;
    posted_.push_back(op);
    return op;
  }

  bool test(const std::shared_ptr<operation>& op) {
    if (!op || op->done) return true;
    poll_sockets();
    return op->done;
  }

  // Blocking calls without a request (out of line: engine_blocking.hpp).
  std::optional<op_result> send_blocking(int dest, context_id ctx, int tag,
                                         std::span<const std::byte> data);
  op_result recv_blocking(int source, context_id ctx, int tag, const recv_buffer& buffer,
                          const deadline& until, clock::duration timeout);

  /// The peers found failed, in the order they were found (transport concept).
  [[nodiscard]] const std::vector<int>& failed_peers() const { return failed_; }

  /// Runs what work there is (reads, writes, handshakes) without waiting: as a test does, so
  /// one progress and a look at each request cost what one test costs.
  void progress() { poll_sockets(); }
  /// transport::faulty's damaged frame to `peer` (engine_frames.hpp).
  void damage_frame(int peer, bool cut);
  /// Declares `peer` failed (transport::tcp::exclude): gone for good, never readmitted.
  void exclude(int peer, std::string_view why);

  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    if (source != any_source && source != rank()) reach(source);
    poll();
    auto queued = unexpected_.find(source, ctx, tag);
    if (queued != unexpected_.end()) {
      const queued_message& m = *queued;
      return op_result{m.source, m.tag, static_cast<std::size_t>(m.size), {}};
    }
    return lost_source(source);
  }

  /// Withdraws `op` if it has not completed; see the transport's cancel (engine_matching.hpp).
  bool cancel(const std::shared_ptr<operation>& op);

  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    // Polls first where the host has a core for each rank (polling.hpp), then sleeps in epoll.
    if (polling_.poll_first([this] { poll_sockets(); }, [&] { return events_ != seen; },
                            [this] { return bytes_read_; }, when)) {
      return;
    }
    while (events_ == seen && clock::now() < when) io_.run_one_until(when);
  }
  /// How this rank's waits poll before they sleep (polling.hpp), chosen at the rendezvous.
  [[nodiscard]] const polling& wait_polling() const { return polling_; }

  // --- the rendezvous -------------------------------------------------------------------

  /// Joins the job: rank 0 collects every rank's listen endpoint at COMMX_ROOT and hands out
  /// the table (or PMIx does, engine_pmix.hpp); ranks connect to each other on first use.
  /// @throws commx::error errc::bootstrap_failed naming the missing ranks when the rendezvous
  ///   does not complete within the timeout; errc::authentication_failed when a peer does not
  ///   hold the job token.
  void join();

 private:
  /// absent: never connected; connecting: a handshake either way is under way (or this rank's
  /// dial crossed the peer's and waits for it), frames queue; present: connected; finished
  /// (said bye) and failed are for good.
  enum class presence : std::uint8_t { absent, connecting, present, finished, failed };

  void choose_polling();  // once the table is in (engine_rendezvous.hpp)

  struct awaited_data {
    std::shared_ptr<operation> op;  ///< null: the receive was cancelled, drop the data
    std::uint64_t size;
    /// Sent with data_follows and bound for the user's receive: its window goes back to the
    /// sender (grant) once it is in. A stand-in's (queued_message) goes back when a receive
    /// takes the message.
    bool granted_back = false;
  };

  struct peer_link {
    std::unique_ptr<connection> conn;
    presence state = presence::absent;
    std::error_code loss;           ///< what operations on a gone peer report
    std::uint64_t send_credit = 0;  ///< eager bytes we may still send it
    std::uint64_t held = 0;         ///< eager bytes of its we hold or hold credit for
    std::uint64_t unreturned = 0;  ///< eager bytes its messages used that we took, not yet credited
    std::uint64_t next_cookie = 1;
    std::uint64_t stream_credit = 0;  ///< data_follows bytes we may still send it (it granted)
    std::uint64_t stream_held = 0;    ///< its data_follows bytes not yet handed to our user
    std::uint64_t announced = 0;      ///< the highest rendezvous id it announced
    std::unordered_map<std::uint64_t, std::shared_ptr<operation>> awaiting_cts;
    std::unordered_map<std::uint64_t, awaited_data> awaiting_data;
    bool dialing = false;    ///< this rank's dial (and handshake) to it is under way
    bool incoming = false;   ///< its handshake to this rank passed welcome and is finishing
    bool shut = false;       ///< leaving: our side of the connection is shut down
    bool releasing = false;  ///< the rendezvous's, past the table: its end is no loss (release)
    std::uint64_t bytes_sent = 0;  ///< payload bytes handed to sends to it (bytes_sent_to)
  };

  /// Handshakes in progress at once at this rank's port. Beyond it the next connection waits
  /// in the kernel's backlog (never refused) while one that has not proved the token within
  /// proof_allowed is evicted: a flood of strangers cannot hold the port, and ranks arriving
  /// together only wait (or dial again, if evicted).
  static constexpr int max_pending_handshakes = 128;
  /// How long a connection at a full port may take to prove the token before it is evicted.
  static constexpr std::chrono::seconds proof_allowed{2};

  /// The longest pause between dials that a busy port turned away.
  static constexpr std::chrono::milliseconds max_backoff{500};
  /// How much longer than its timeout a joiner waits for rank 0's table (rank 0 waits a whole
  /// timeout for the others to join), and rank 0 for the joiners to take it.
  static constexpr std::chrono::seconds table_grace{2};
  /// How long a rank whose dial crossed the peer's waits for the peer's before dialing again.
  static constexpr std::chrono::seconds crossed_patience{1};

  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  static op_result lost_result(int peer, std::size_t bytes, std::error_code why) {
    return {peer, any_tag, bytes, why};
  }

  op_result lost(int peer, std::size_t bytes) const {
    const std::error_code why = peers_[index(peer)].loss;
    return lost_result(peer, bytes, why ? why : make_error_code(errc::peer_lost));
  }

  void finish(operation& op, op_result result) {
    op.result = result;
    op.done = true;
    op.where = operation::stage::done;
    ++events_;
  }

  std::shared_ptr<operation> completed(operation::kind k, int peer, context_id ctx, int tag,
                                       op_result result) {
    auto op = std::make_shared<operation>(k, peer, ctx, tag);
    finish(*op, result);
    return op;
  }

  void poll() { io_.poll(); }

  // isend's and send_blocking's eager path (engine_blocking.hpp); nullopt when the message
  // does not go eagerly.
  std::optional<op_result> send_eager(int dest, context_id ctx, int tag,
                                      std::span<const std::byte> data);

  // A test's or a polling wait's look (engine_frames.hpp).
  void poll_sockets();

  // --- matching ---------------------------------------------------------------------------

  using queue_position = unexpected_queue<queued_message>::position;

  /// A posted receive takes the front message of `queued` (or fails on it, leaving it queued).
  void take(const std::shared_ptr<operation>& op, queue_position queued);

  /// The first posted receive that matches and accepts a message of `size` bytes, taken off
  /// the posted list with its destination prepared; receives that refuse it fail on the way.
  std::shared_ptr<operation> match_posted(int source, context_id ctx, int tag, std::size_t size);

  std::shared_ptr<operation> send_to_self(context_id ctx, int tag, std::span<const std::byte> data);

  /// Eager over the extension's streams: the envelope with data_follows, and the extension
  /// sends the chunks at once, within the receiver's streamed window (engine_streamed.hpp).
  std::shared_ptr<operation> send_streamed(int dest, context_id ctx, int tag,
                                           std::span<const std::byte> data, int stream);
  /// An envelope with data_follows: the data goes to a posted receive, or to a stand-in.
  void on_streamed_envelope(int peer, const frame_header& h);
  /// A receive takes a queued message whose data came unasked.
  void take_streamed(const std::shared_ptr<operation>& op, queue_position queued,
                     std::byte* target);
  /// We are done with `bytes` of `peer`'s data_follows messages: its window goes back.
  void grant(int peer, std::uint64_t bytes);

  /// Can anyone still answer a receive from `source` that nothing queued satisfies?
  std::optional<op_result> lost_source(int source) const {
    // An any_source receive is not refused for a failure: its communicator decides.
    if (source == any_source || source == rank()) return std::nullopt;
    if (departed(source)) return lost(source, 0);
    return std::nullopt;
  }

  /// Our user took `bytes` of `peer`'s eager messages: give the window back in batches.
  void consumed(int peer, std::size_t bytes) {
    peer_link& link = peers_[index(peer)];
    link.unreturned += bytes + header_size;
    if (link.unreturned >= cfg_.window / 4 && link.state == presence::present) {
      const std::uint64_t amount = link.unreturned;
      link.unreturned = 0;
      link.held -= std::min(link.held, amount);
      push_control(peer, frame_kind::credit, amount);
    }
  }

  // --- writing ----------------------------------------------------------------------------

  void push_control(int peer, frame_kind kind, std::uint64_t cookie);
  void push_payload(int peer, frame_kind kind, std::span<const std::byte> payload);
  void flush(int peer);

  // --- reading ----------------------------------------------------------------------------

  void arm_read(int peer);

  // Asio's epoll reactor is edge-triggered and its waits are not speculative: a wait armed
  // while bytes are already waiting would not fire. So a connection is always read until the
  // kernel says would_block before its next wait is armed, and one that had more to give after
  // a fair share of rounds is resumed through the queue instead.
  void on_readable(int peer);

  /// Whether a `data` frame from `peer` may come next on its connection: a receive asked for
  /// one, and no extension carries the data on connections of its own.
  [[nodiscard]] bool awaits_payload(int peer) const;

  /// Acts on every whole header and payload byte in the staging buffer.
  void process(int peer);

  void begin_payload(int peer, const frame_header& h, std::byte* destination,
                     std::shared_ptr<operation> op, bool into_holding);
  void on_header(int peer, const frame_header& h);
  void end_payload(int peer);

  /// An eager message whose payload arrived while no receive matched: a receive posted since
  /// takes it, or it waits in the queue.
  void deliver_held(int peer, const frame_header& h, std::vector<std::byte> payload);

  // --- peers that go ----------------------------------------------------------------------

  void violation(int peer, std::string_view why);

  /// The connection to `peer` broke (end of stream without bye, reset, write error).
  void broken(int peer, std::error_code);
  void gone(int peer, presence how, std::error_code why);
  /// Ends the rendezvous's connection to `peer` as agreed (engine_rendezvous.hpp).
  void release(int peer);

  // --- connections ------------------------------------------------------------------------

  /// Whether frames for `peer` can go (connected, or being connected: they queue); starts
  /// dialing it when nothing connects the two yet. False once it finished or failed.
  bool reach(int peer);
  /// Dials `peer` (engine_connections.hpp); a dial turned away at a busy port tries again
  /// after `backoff`, until `until`.
  void dial_peer(int peer, clock::time_point until, std::chrono::milliseconds backoff);
  /// `peer`'s handshake to this rank failed after welcome() let it in.
  void lost_incoming(int peer);
  void adopt(int peer, asio::ip::tcp::socket socket, std::unique_ptr<tls_channel> secure,
             bool rendezvous = false);
  void log_refusal(const asio::ip::tcp::endpoint& from, const std::string& why);
  handshake::verdict_code welcome(const handshake::hello& h);
  /// At max_pending_handshakes, evicts the oldest connection that has not said its hello.
  void make_room();
  void accept_next();
  void on_accepted(asio::ip::tcp::socket socket);
  void open_acceptor(const asio::ip::tcp::endpoint& where, bool reuse);

  /// This rank's endpoint `ep` as the table carries it: with the site this rank is at.
  endpoint_record record_of(const asio::ip::tcp::endpoint& ep) const;

  asio::ip::tcp::endpoint resolve(const std::string& host, std::uint16_t port,
                                  const char* variable);
  asio::ip::tcp::endpoint root_endpoint();

  /// Connects to `target`, through this site's relay when it is at another site.
  [[nodiscard]] dial_identity identity(const endpoint_record& target) const;

  void dial(const endpoint_record& target, clock::time_point until, dialer::done_fn done,
            std::optional<asio::ip::tcp::socket> opened = std::nullopt);

  struct dialled {
    bool done = false;
    std::string failure;
    bool token_refused = false;
    bool turned_away = false;  ///< closed before the challenge: a busy port; try again
    std::optional<asio::ip::tcp::socket> socket;
  };

  /// Dials `target` and runs the rendezvous until it is connected or failed (or `until`). The
  /// outcome is shared with the dialer, which may still finish after a deadline.
  std::shared_ptr<dialled> dial_and_wait(const endpoint_record& target, clock::time_point until);

  std::string root_text() const { return fmt::format("{}:{}", cfg_.root_host, cfg_.root_port); }

  /// Runs handlers until `done()` or `until`; false at the deadline. A peer lost meanwhile
  /// fails the rendezvous.
  template <class Done>
  bool run_until(Done&& done, clock::time_point until);
  static std::string rank_list(const std::vector<int>& ranks);
  std::string seconds_text() const;
  void join_as_root(clock::time_point until);
  void join_as_member(clock::time_point until);
  void join_through_pmix(clock::time_point until);  // engine_pmix.hpp

  /// Authenticates a socket connected to rank 0 as a joiner's and adopts it; runs the
  /// rendezvous until then. The outcome's failure is empty when it was adopted.
  std::shared_ptr<dialled> join_handshake(asio::ip::tcp::socket socket, clock::time_point until);

  // --- leaving ----------------------------------------------------------------------------

  /// Says bye to every peer, sends what is still queued, and waits (briefly) until each peer
  /// has closed its end, so nothing it sent is cut off by a reset. `failing`: just closes, so
  /// the peers see a failed rank.
  void leave(bool failing) noexcept;

  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> keep_running_;
  config cfg_;
  std::vector<peer_link> peers_;
  std::vector<int> nodes_;
  std::vector<int> sites_;  // ids in order of first appearance, as nodes_
  std::deque<std::shared_ptr<operation>> posted_;
  commx::detail::operation_pool<operation> pool_;  // receives and rendezvous sends
  unexpected_queue<queued_message> unexpected_;
  std::uint64_t events_ = 0;
  /// Bytes read from every connection, ever: a polling wait's sign that a message is streaming
  /// in (polling.hpp).
  std::uint64_t bytes_read_ = 0;
  std::vector<int> failed_;  // in the order they were found failed
  std::optional<asio::ip::tcp::acceptor> acceptor_;
  std::unique_ptr<tls_context> tls_;  ///< set when COMMX_TLS is not off
  int pending_handshakes_ = 0;
  std::deque<std::weak_ptr<server_session>> sessions_;  ///< in progress, oldest first
  bool accept_paused_ = false;  ///< at max_pending_handshakes: newcomers wait in the backlog
  asio::steady_timer room_timer_{io_};  ///< when a silent connection may be evicted
  bool joined_ = false;
  std::vector<endpoint_record> table_;
  std::optional<asio::ip::tcp::endpoint> relay_;  ///< this site's commx-relay (COMMX_RELAY)
  bool have_table_ = false;
  bool have_abort_ = false;
  std::string abort_text_;
  extension ext_;
  std::size_t poll_turn_ = 0;
  log::context log_;
  polling polling_;
  bool leaving_ = false;  ///< our bye is out: a peer that closes without one is no news
};

}  // namespace commx::detail::tcp

// The engine's larger parts, out of line (each includes this header first).
#include "commx/transport/detail/tcp/engine_blocking.hpp"     // IWYU pragma: export
#include "commx/transport/detail/tcp/engine_connections.hpp"  // IWYU pragma: export
#include "commx/transport/detail/tcp/engine_frames.hpp"       // IWYU pragma: export
#include "commx/transport/detail/tcp/engine_matching.hpp"     // IWYU pragma: export
#include "commx/transport/detail/tcp/engine_pmix.hpp"         // IWYU pragma: export
#include "commx/transport/detail/tcp/engine_rendezvous.hpp"   // IWYU pragma: export
#include "commx/transport/detail/tcp/engine_streamed.hpp"     // IWYU pragma: export
