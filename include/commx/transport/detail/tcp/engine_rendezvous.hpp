// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's rendezvous (engine.hpp): rank 0 collects the listen endpoints and hands
/// out the table, every other rank dials in (through a relay across sites); ranks connect to
/// each other later, on first use. Out of line as Asio's detail/impl files are, included by
/// engine.hpp.

#include <sys/resource.h>

#include <algorithm>
#include <tuple>

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

// Rank 0 keeps a connection per joiner, and any rank may come to talk to many peers: the
// soft limit on descriptors (often 1024) goes up to the hard one where the job may need more.
inline void raise_descriptor_limit(rlim_t wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

inline void engine::join() {
  if (size() == 1) return;
  raise_descriptor_limit(static_cast<rlim_t>(size()) + max_pending_handshakes + 256);
  const clock::time_point until = clock::now() + cfg_.timeout;
  if (!cfg_.relay_host.empty()) relay_ = resolve(cfg_.relay_host, cfg_.relay_port, "COMMX_RELAY");
  if (cfg_.through_pmix) {
    join_through_pmix(until);
  } else if (rank() == 0) {
    join_as_root(until);
  } else {
    join_as_member(until);
  }
  // Node ids: ranks at the same site share a node when they name the same one (COMMX_NODE),
  // or, naming none, when they listen on the same host address (two sites may use the same
  // private addresses, and one host may hold several named nodes).
  using place = std::tuple<std::string, std::string, std::array<std::uint8_t, 16>>;
  std::vector<place> nodes;
  std::vector<std::string> sites;
  for (int r = 0; r < size(); ++r) {
    const endpoint_record& e = table_[index(r)];
    auto site = std::find(sites.begin(), sites.end(), e.site);
    sites_[index(r)] = static_cast<int>(site - sites.begin());
    if (site == sites.end()) sites.push_back(e.site);
    const place p{e.site, e.node, e.node.empty() ? e.address : std::array<std::uint8_t, 16>{}};
    auto known = std::find(nodes.begin(), nodes.end(), p);
    nodes_[index(r)] = static_cast<int>(known - nodes.begin());
    if (known == nodes.end()) nodes.push_back(p);
  }
  joined_ = true;
  COMMX_LOG(debug, log_, "rendezvous {} done: {} ranks",
            cfg_.through_pmix ? std::string("through PMIx") : "at " + root_text(), size());
  choose_polling();
}

inline endpoint_record engine::record_of(const asio::ip::tcp::endpoint& ep) const {
  endpoint_record e;
  e.site = cfg_.site;
  e.node = cfg_.node;
  e.layout = cfg_.layout;
  e.machine = polling::this_machine();
  e.port = ep.port();
  if (ep.address().is_v6()) {
    e.v6 = true;
    const auto bytes = ep.address().to_v6().to_bytes();
    std::copy(bytes.begin(), bytes.end(), e.address.begin());
  } else {
    const auto bytes = ep.address().to_v4().to_bytes();
    std::copy(bytes.begin(), bytes.end(), e.address.begin());
  }
  return e;
}

inline asio::ip::tcp::endpoint engine::resolve(const std::string& host, std::uint16_t port,
                                               const char* variable) {
  asio::ip::tcp::resolver resolver(io_);
  std::error_code ec;
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {}: cannot resolve {} host '{}': {}", rank(), variable, host,
                            ec ? ec.message() : "no address"));
  }
  return results.begin()->endpoint();
}

inline asio::ip::tcp::endpoint engine::root_endpoint() {
  return resolve(cfg_.root_host, cfg_.root_port, "COMMX_ROOT");
}

inline dial_identity engine::identity(const endpoint_record& target) const {
  dial_identity who{cfg_.token, rank(), size(), std::nullopt, log_.stack};
  if (relay_ && target.site != cfg_.site) who.relay = relay_;
  return who;
}

inline void engine::dial(const endpoint_record& target, clock::time_point until,
                         dialer::done_fn done, std::optional<asio::ip::tcp::socket> opened) {
  dialer::start(io_, identity(target), target, until, std::move(done), std::move(opened));
}

inline std::shared_ptr<engine::dialled> engine::dial_and_wait(const endpoint_record& target,
                                                              clock::time_point until) {
  auto d = std::make_shared<dialled>();
  dial(target, until, [d](const std::string& why, asio::ip::tcp::socket s, bool token) {
    d->done = true;
    d->failure = why;
    d->token_refused = token;
    if (why.empty()) d->socket.emplace(std::move(s));
  });
  if (!run_until([&] { return d->done; }, until) && !d->done) {
    d->failure = "no answer before the deadline";
  }
  return d;
}

template <class Done>
bool engine::run_until(Done&& done, clock::time_point until) {
  while (!done()) {
    for (int r = 0; r < size(); ++r) {
      // A peer that finished may already have said bye; one that failed ends the job.
      if (peers_[index(r)].state == presence::failed) {
        throw error(errc::bootstrap_failed,
                    fmt::format("tcp: rank {}: rank {} left during the rendezvous at {}", rank(), r,
                                root_text()));
      }
    }
    if (clock::now() >= until) return false;
    io_.run_one_until(until);
  }
  return true;
}

inline std::string engine::rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += fmt::format("{}{}", i == 0 ? "" : ", ", ranks[i]);
  }
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", text);
}

inline std::string engine::seconds_text() const {
  return fmt::format("{:.3g} s", std::chrono::duration<double>(cfg_.timeout).count());
}

inline void engine::join_as_root(clock::time_point until) {
  const asio::ip::tcp::endpoint root = root_endpoint();
  table_.assign(index(size()), endpoint_record{});
  table_[0] = record_of(root);
  open_acceptor(root, true);
  const auto joined = [&] {
    return std::all_of(table_.begin() + 1, table_.end(),
                       [](const endpoint_record& e) { return e.port != 0; });
  };
  if (!run_until(joined, until)) {
    std::vector<int> missing;
    for (int r = 1; r < size(); ++r) {
      if (table_[index(r)].port == 0) missing.push_back(r);
    }
    const std::string why = fmt::format("{} of {} did not join the rendezvous at {} within {}",
                                        rank_list(missing), size(), root_text(), seconds_text());
    for (int r = 1; r < size(); ++r) {
      if (peers_[index(r)].state != presence::present) continue;
      push_payload(r, frame_kind::abort, std::as_bytes(std::span(why.data(), why.size())));
    }
    // Give the abort a moment to leave; the peers fail on their own deadline anyway.
    const auto flushed = [&] {
      return std::all_of(peers_.begin(), peers_.end(), [](const peer_link& l) {
        return !l.conn || !l.conn->open || l.conn->idle();
      });
    };
    run_until(flushed, clock::now() + std::chrono::seconds(1));
    throw error(errc::bootstrap_failed, fmt::format("tcp: rank 0: {}", why));
  }
  const std::vector<std::byte> table = encode_table(table_);
  for (int r = 1; r < size(); ++r) {
    push_payload(r, frame_kind::table, table);
    peers_[index(r)].releasing = true;
  }
  // Each joiner closes its side once it has the table; this rank closes its own on that end
  // (broken -> release), so rank 0 holds no connection per rank. Waiting for all of them also
  // means no rank is still in the rendezvous once rank 0 goes on: rank 0's first dial to a
  // rank never finds the old connection there. A joiner not done by the time the others give
  // up on the table (their deadline) is let go; its table still leaves if the socket takes it.
  // The job has begun for the others meanwhile: one lost now is the job's to report, not the
  // rendezvous's (run_until would fail it).
  const auto released = [&] {
    return std::none_of(peers_.begin(), peers_.end(),
                        [](const peer_link& l) { return l.releasing; });
  };
  const clock::time_point released_until = until + table_grace;
  while (!released() && clock::now() < released_until) io_.run_one_until(released_until);
  for (int r = 1; r < size(); ++r) {
    const peer_link& link = peers_[index(r)];
    if (!link.releasing) continue;
    if (link.conn->idle()) {
      COMMX_LOG(info, log_, "rank {} kept its way in open past the table's deadline: let go", r);
      release(r);  // its table is out: it reads it, then the end
    } else {
      exclude(r, "it did not take the rendezvous's table within the timeout");
    }
  }
}

inline void engine::release(int peer) {
  peer_link& link = peers_[index(peer)];
  // Only the rendezvous's connection: a later one (rank 0's dial at its deadline, let in
  // while this rank still waited for its table) is not this one to end.
  if (!link.releasing) return;
  link.releasing = false;
  if (link.state != presence::present) return;
  // Its buffers go now; a connection not yet made stands in, as every link's handlers that
  // the closing cancelled still look for one. The same object: this may run inside a read or
  // a flush of it (broken -> release).
  link.conn->forget(io_);
  link.state = presence::absent;
  ++events_;
  COMMX_LOG(debug, log_, "released the rendezvous's connection with rank {}", peer);
}

inline void engine::join_as_member(clock::time_point until) {
  endpoint_record root = record_of(root_endpoint());
  root.site = cfg_.root_site;
  // Rank 0 may not be listening yet, or its port may be busy with the others' handshakes (it
  // turns away the silent ones first): retry, backing off, until the deadline.
  auto backoff = std::chrono::milliseconds(10);
  const auto pause_or_fail = [&](const std::string& failure) {
    if (clock::now() + backoff >= until) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: the rendezvous at {} did not complete within {}: "
                              "rank 0 does not answer ({})",
                              rank(), root_text(), seconds_text(), failure));
    }
    asio::steady_timer pause(io_, backoff);
    bool paused = false;
    pause.async_wait([&](std::error_code) { paused = true; });
    run_until([&] { return paused; }, until);
    backoff = std::min(backoff * 2, max_backoff);
  };
  while (peers_[0].state != presence::present) {
    const auto d = dial_and_wait(root, until);
    if (d->token_refused) {
      throw error(errc::authentication_failed, fmt::format("tcp: rank {}: the rendezvous at {}: {}",
                                                           rank(), root_text(), d->failure));
    }
    if (!d->socket) {
      pause_or_fail(d->failure);
      continue;
    }
    if (!acceptor_) {
      const asio::ip::address listen_address =
          cfg_.listen_address ? *cfg_.listen_address : d->socket->local_endpoint().address();
      open_acceptor({listen_address, 0}, false);
    }
    const auto joined = join_handshake(std::move(*d->socket), until);
    if (joined->failure.empty()) break;
    const std::string text =
        fmt::format("tcp: rank {}: handshake with rank 0 failed: {}", rank(), joined->failure);
    if (joined->token_refused) throw error(errc::authentication_failed, text);
    if (!joined->turned_away) throw error(errc::bootstrap_failed, text);
    pause_or_fail(joined->failure);
  }
  const auto me = encode(record_of(acceptor_->local_endpoint()));
  push_payload(0, frame_kind::address, me);

  // Rank 0 waits a whole timeout for the others; wait a little longer for its verdict.
  const clock::time_point table_until = until + table_grace;
  if (!run_until([&] { return have_table_ || have_abort_; }, table_until)) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {}: the rendezvous at {} did not complete within {}: "
                            "rank 0 sent no table (some other rank did not join)",
                            rank(), root_text(), seconds_text()));
  }
  if (have_abort_) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {}: rank 0 gave up: {}", rank(), abort_text_));
  }
  release(0);  // rank 0 closes its side when this end reaches it
}

inline std::shared_ptr<engine::dialled> engine::join_handshake(asio::ip::tcp::socket socket,
                                                               clock::time_point until) {
  handshake::hello me{handshake::purpose::join, rank(), size(), handshake::fresh_nonce()};
  me.tls = cfg_.tls.wanted(cfg_.site, cfg_.root_site);
  auto outcome = std::make_shared<dialled>();
  auto session = std::make_shared<client_session>(
      std::move(socket), cfg_.token, me, 0, until,
      [this, outcome](client_session& s, bool ok, const std::string& reason, bool token) {
        outcome->done = true;
        outcome->token_refused = token;
        outcome->turned_away = s.turned_away;
        if (ok) return adopt(0, std::move(s.socket), std::move(s.tls), true);
        outcome->failure = reason;
      },
      tls_.get());
  session->start();
  if (!run_until([&] { return outcome->done; }, until) && !outcome->done) {
    outcome->failure = "no handshake before the deadline";
  }
  return outcome;
}

// Ranks on this rank's machine share its cores (whatever COMMX_NODE or the network namespace
// says): those with its boot id, or where that is unknown, those that listen on its address.
inline void engine::choose_polling() {
  if (cfg_.poll_turns) {
    polling_ = polling::fixed(*cfg_.poll_turns);
  } else {
    const endpoint_record& mine = table_[index(rank())];
    int on_host = 0;
    for (int r = 0; r < size(); ++r) {
      const endpoint_record& e = table_[index(r)];
      const bool same_machine = mine.machine != 0 && e.machine != 0
                                    ? e.machine == mine.machine
                                    : e.v6 == mine.v6 && e.address == mine.address;
      if (same_machine) ++on_host;
    }
    polling_ = polling::for_host(on_host, polling::online_cores());
  }
  COMMX_LOG(info, log_, "waiting {}", polling_.describe());
}

}  // namespace commx::detail::tcp
