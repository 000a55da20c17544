// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The transport conformance suite: the requirements table of commx/transport/concept.hpp as
/// checks that run inside every rank of a job, on any transport. Each check is collective
/// (every rank calls it) and throws check_failed or commx::error when the transport breaks a
/// requirement. `job_checks` run one after the other in one job; `ending_checks` end the job
/// for some rank and run in a job of their own.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <set>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "commx/communicator.hpp"
#include "commx/ops.hpp"
#include "support/check.hpp"

namespace commx::test::conformance {

using namespace std::chrono_literals;

template <class Comm>
using check_fn = void (*)(Comm&);

template <class Comm>
struct named_check {
  std::string_view name;
  check_fn<Comm> run;
};

/// rank(), size(), node_of(): in range, and every rank sees the same node map.
template <class Comm>
void ranks_and_locality(Comm& world) {
  auto& t = world.transport();
  COMMX_CHECK(t.size() == world.size());
  COMMX_CHECK(t.rank() >= 0 && t.rank() < t.size());
  std::vector<int> mine(static_cast<std::size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    mine[static_cast<std::size_t>(r)] = t.node_of(r);
    COMMX_CHECK(mine[static_cast<std::size_t>(r)] >= 0);
  }
  std::vector<int> roots = mine;
  world.bcast(roots, 0);
  COMMX_CHECK(roots == mine);
}

/// Every rank sends each other rank (and itself) one message per tag; receivers take the tags
/// in reverse order, so matching is by tag, not by arrival.
template <class Comm>
void tagged_out_of_order(Comm& world) {
  constexpr int tags = 5;
  std::vector<typename Comm::request> sends;
  std::vector<std::array<int, 2>> payload(static_cast<std::size_t>(world.size() * tags));
  for (int dest = 0; dest < world.size(); ++dest) {
    for (int tag = 0; tag < tags; ++tag) {
      auto& p = payload[static_cast<std::size_t>(dest * tags + tag)];
      p = {world.rank(), tag};
      sends.push_back(world.isend(dest, tag, p));
    }
  }
  for (int source = 0; source < world.size(); ++source) {
    for (int tag = tags - 1; tag >= 0; --tag) {
      std::array<int, 2> got{-1, -1};
      const status st = world.recv(source, tag, got);
      COMMX_CHECK_EQ(st.source, source);
      COMMX_CHECK_EQ(st.tag, tag);
      COMMX_CHECK_EQ(st.bytes, sizeof(got));
      COMMX_CHECK_EQ(got[0], source);
      COMMX_CHECK_EQ(got[1], tag);
    }
  }
  commx::wait_all(sends);
}

/// Messages from one source with one tag arrive in send order, also through any_source and
/// any_tag receives, and also when small and large (not buffered) messages alternate.
template <class Comm>
void non_overtaking(Comm& world) {
  constexpr int count = 200;
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<std::vector<std::uint32_t>> out(count);
  std::vector<typename Comm::request> sends;
  for (int i = 0; i < count; ++i) {
    // Every 50th message is 256 KiB: above any sane eager threshold.
    const std::size_t n = i % 50 == 0 ? (std::size_t{256} << 10) / 4 : 3;
    out[static_cast<std::size_t>(i)].assign(n, static_cast<std::uint32_t>(i));
    sends.push_back(world.isend(next, 7, out[static_cast<std::size_t>(i)]));
  }
  const bool wildcard = world.size() == 1 || world.rank() % 2 == 0;
  for (int i = 0; i < count; ++i) {
    std::vector<std::uint32_t> got;
    const status st = wildcard ? world.recv(any_source, any_tag, got) : world.recv(prev, 7, got);
    COMMX_CHECK_EQ(st.source, prev);
    COMMX_CHECK_EQ(st.tag, 7);
    COMMX_CHECK(!got.empty());
    COMMX_CHECK_EQ(got.front(), static_cast<std::uint32_t>(i));
  }
  commx::wait_all(sends);
}

/// A zero-size message is a message: it matches, completes, and reports 0 bytes.
template <class Comm>
void zero_size(Comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<double> nothing;
  auto send = world.isend(next, 3, nothing);
  std::vector<double> got(4, 1.0);
  const status st = world.recv(prev, 3, std::span<double>(got));
  COMMX_CHECK_EQ(st.bytes, std::size_t{0});
  COMMX_CHECK_EQ(st.source, prev);
  COMMX_CHECK(got == std::vector<double>(4, 1.0));
  send.wait();
  // And at the transport: an empty span goes and arrives. Context 0 (the world's) is one every
  // endpoint has; a transport that makes communicators itself (MPI) knows no others unasked.
  auto& t = world.transport();
  auto raw_send = t.isend(t.rank(), 0, 1, {});
  auto raw_recv = t.irecv(t.rank(), 0, 1, transport::recv_buffer(std::span<std::byte>{}));
  COMMX_CHECK(detail::wait_until(t, raw_recv, clock::now() + 10s));
  COMMX_CHECK(!t.result(raw_recv).error);
  COMMX_CHECK_EQ(t.result(raw_recv).bytes, std::size_t{0});
  COMMX_CHECK(detail::wait_until(t, raw_send, clock::now() + 10s));
}

/// Messages sent before their receive is posted are kept, small and large alike.
template <class Comm>
void unexpected_messages(Comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<int> small(16, world.rank());
  std::vector<int> large((std::size_t{1} << 20) / sizeof(int), world.rank());
  auto s1 = world.isend(next, 1, small);
  auto s2 = world.isend(next, 2, large);
  world.barrier();  // every send above was posted before any receive below
  std::vector<int> got_large;
  std::vector<int> got_small;
  world.recv(prev, 2, got_large);
  world.recv(prev, 1, got_small);
  COMMX_CHECK(got_small == std::vector<int>(16, prev));
  COMMX_CHECK(got_large == std::vector<int>(large.size(), prev));
  s1.wait();
  s2.wait();
}

/// Posted receives complete in any order the caller waits for them.
template <class Comm>
void nonblocking_any_order(Comm& world) {
  constexpr int count = 8;
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<std::uint64_t> got(count, 0);
  std::vector<typename Comm::request> recvs;
  for (int i = 0; i < count; ++i)
    recvs.push_back(world.irecv(prev, i, got[static_cast<std::size_t>(i)]));
  std::vector<std::uint64_t> out(count);
  std::vector<typename Comm::request> sends;
  for (int i = count - 1; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(1000 * world.rank() + i);
    sends.push_back(world.isend(next, i, out[static_cast<std::size_t>(i)]));
  }
  // Complete the receives through wait_any, then check that each got its own message.
  std::set<std::size_t> done;
  for (int i = 0; i < count; ++i) {
    const std::size_t index = commx::wait_any(recvs);
    COMMX_CHECK(index < recvs.size());
    COMMX_CHECK(done.insert(index).second);
  }
  COMMX_CHECK_EQ(commx::wait_any(recvs), recvs.size());  // none left active
  for (int i = 0; i < count; ++i) {
    COMMX_CHECK_EQ(got[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(1000 * prev + i));
  }
  commx::wait_all(sends);
}

/// Nonblocking collectives among point-to-point requests: wait_any and wait_all take both
/// kinds, a collective in flight does not take a user's message (its own context), and two
/// collectives in flight at once each get their own data.
template <class Comm>
void collectives_among_requests(Comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<std::uint64_t> sum(64, static_cast<std::uint64_t>(world.rank() + 1));
  std::uint64_t root_value = world.rank() == 0 ? 99 : 0;
  std::uint64_t from_prev = 0;
  const auto mine = static_cast<std::uint64_t>(world.rank());
  std::vector<typename Comm::request> requests;
  requests.push_back(world.iallreduce(sum, std::plus<>{}));
  requests.push_back(world.irecv(prev, 3, from_prev));
  requests.push_back(world.ibcast(root_value, 0));
  requests.push_back(world.isend(next, 3, mine));
  std::set<std::size_t> done;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::size_t index = commx::wait_any(requests, 30s);
    COMMX_CHECK(index < requests.size());
    COMMX_CHECK(done.insert(index).second);
  }
  COMMX_CHECK_EQ(commx::wait_any(requests), requests.size());
  const auto p = static_cast<std::uint64_t>(world.size());
  for (std::uint64_t x : sum) COMMX_CHECK_EQ(x, p * (p + 1) / 2);
  COMMX_CHECK_EQ(root_value, std::uint64_t{99});
  COMMX_CHECK_EQ(from_prev, static_cast<std::uint64_t>(prev));

  std::vector<typename Comm::request> both;
  std::uint64_t low = mine;
  std::uint64_t high = mine;
  both.push_back(world.iallreduce(low, commx::op::min{}));
  both.push_back(world.iallreduce(high, commx::op::max{}));
  commx::wait_all(both, 30s);
  COMMX_CHECK_EQ(low, std::uint64_t{0});
  COMMX_CHECK_EQ(high, p - 1);
}

/// Receives that several peers (on a layered stack, several levels) could satisfy, named and
/// wildcard, posted before and after the messages come: receives are matched in the order they
/// were posted, so each takes a message known in advance, and every message is received once.
template <class Comm>
void wildcards_from_every_peer(Comm& world) {
  constexpr int per_peer = 16;         // message i goes with tag 1 + i % 2
  constexpr int named = 4;             // the first messages of each peer go to named receives
  using message = std::array<int, 2>;  // {sender, i}
  if (world.rank() != 0) {
    std::vector<message> out(per_peer);
    std::vector<typename Comm::request> sends;
    for (int i = 0; i < per_peer; ++i) {
      out[static_cast<std::size_t>(i)] = {world.rank(), i};
      sends.push_back(world.isend(0, 1 + i % 2, out[static_cast<std::size_t>(i)]));
    }
    const std::array<message, 2> late{{{world.rank(), 100}, {world.rank(), 101}}};
    if (world.rank() == 1) {
      for (const message& m : late) sends.push_back(world.isend(0, 3, m));
    }
    commx::wait_all(sends);
    return;
  }
  const int peers = world.size() - 1;
  const int each_tag = (per_peer - named) / 2;
  std::vector<message> by_name(static_cast<std::size_t>(peers * named));
  std::vector<message> tag_two(static_cast<std::size_t>(peers * each_tag));
  std::vector<message> any(static_cast<std::size_t>(peers * each_tag));
  std::vector<typename Comm::request> recvs;
  // A wildcard posted before a named receive that could take the same message takes it first.
  message first_late{};
  message second_late{};
  if (peers > 0) {
    recvs.push_back(world.irecv(any_source, 3, first_late));
    recvs.push_back(world.irecv(1, 3, second_late));
  }
  for (int p = 1; p <= peers; ++p) {
    for (int j = 0; j < named; ++j) {
      recvs.push_back(
          world.irecv(p, any_tag, by_name[static_cast<std::size_t>((p - 1) * named + j)]));
    }
  }
  if (peers > 0) (void)world.probe(any_source, any_tag);  // some have come, others have not
  // Posted before the (any, any) receives, these take every tag-2 message left.
  for (auto& m : tag_two) recvs.push_back(world.irecv(any_source, 2, m));
  for (auto& m : any) recvs.push_back(world.irecv(any_source, any_tag, m));
  commx::wait_all(recvs);
  if (peers > 0) {
    COMMX_CHECK(first_late == (message{1, 100}));
    COMMX_CHECK(second_late == (message{1, 101}));
  }
  for (int p = 1; p <= peers; ++p) {
    for (int j = 0; j < named; ++j) {
      COMMX_CHECK(by_name[static_cast<std::size_t>((p - 1) * named + j)] == (message{p, j}));
    }
  }
  // Each class of receives got its messages, each sender's in the order sent.
  const auto check_class = [&](const std::vector<message>& got, int first) {
    std::vector<int> next(static_cast<std::size_t>(peers + 1), first);
    for (const message& m : got) {
      COMMX_CHECK(m[0] >= 1 && m[0] <= peers);
      if (m[0] < 1 || m[0] > peers) continue;
      COMMX_CHECK_EQ(m[1], next[static_cast<std::size_t>(m[0])]);
      next[static_cast<std::size_t>(m[0])] += 2;
    }
    for (int p = 1; p <= peers; ++p) {
      COMMX_CHECK_EQ(next[static_cast<std::size_t>(p)], first + 2 * each_tag);
    }
  };
  check_class(tag_two, named + 1);
  check_class(any, named);
}

/// probe and iprobe report a queued message without taking it.
template <class Comm>
void probe_leaves_message(Comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<short> out(11, static_cast<short>(world.rank()));
  auto send = world.isend(next, 4, out);
  const status seen = world.probe(any_source, 4);
  COMMX_CHECK_EQ(seen.source, prev);
  COMMX_CHECK_EQ(seen.bytes, 11 * sizeof(short));
  const auto again = world.iprobe(prev, any_tag);
  COMMX_CHECK(again.has_value());
  COMMX_CHECK_EQ(again->tag, 4);
  std::vector<short> got(seen.count<short>());
  world.recv(prev, 4, std::span<short>(got));
  COMMX_CHECK(got == std::vector<short>(11, static_cast<short>(prev)));
  COMMX_CHECK(!world.iprobe(prev, 4).has_value());
  send.wait();
  world.barrier();  // prev may not leave the job while the iprobe above can still ask for it
}

/// A too-small buffer fails with errc::truncated, nothing is written past (or into) it, and
/// the message stays queued for a receive that fits; a large one too (sent by a rendezvous
/// where the transport has one, its data still at the sender when it is refused).
template <class Comm>
void truncation_keeps_message(Comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::vector<int> out(10, 42);
  auto send = world.isend(next, 6, out);
  std::vector<int> storage(8, -1);  // a 4-element buffer with guards on either side
  const auto e = COMMX_EXPECT_ERROR(errc::truncated,
                                    world.recv(prev, 6, std::span<int>(storage).subspan(2, 4)));
  COMMX_CHECK(std::string_view(e.what()).find("40 bytes") != std::string_view::npos);
  COMMX_CHECK(storage == std::vector<int>(8, -1));
  std::vector<int> got(10);
  world.recv(prev, 6, std::span<int>(got));
  COMMX_CHECK(got == out);
  send.wait();

  const auto large_of = [](int rank) {  // 1 MiB that says who sent it
    std::vector<int> v(std::size_t{1} << 18);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i) ^ rank;
    return v;
  };
  const std::vector<int> large = large_of(world.rank());
  auto large_send = world.isend(next, 6, large);
  std::vector<int> half(large.size() / 2, -1);
  COMMX_EXPECT_ERROR(errc::truncated, world.recv(prev, 6, std::span<int>(half)));
  COMMX_CHECK(half == std::vector<int>(large.size() / 2, -1));
  std::vector<int> whole(large.size());
  world.recv(prev, 6, std::span<int>(whole));
  COMMX_CHECK(whole == large_of(prev));
  large_send.wait();
}

/// A posted receive too small for the message fails with errc::truncated; the message goes on
/// to the next posted receive that matches, so order per (source, tag) still holds.
template <class Comm>
void truncation_passes_message_on(Comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  std::array<int, 1> small{-1};
  std::array<int, 4> fits{};
  std::vector<int> later;
  auto too_small = world.irecv(prev, 8, std::span<int>(small));
  auto big_enough = world.irecv(prev, 8, std::span<int>(fits));
  world.barrier();  // both receives are posted before anything is sent
  const std::array<int, 4> first{1, 2, 3, 4};
  const std::array<int, 4> second{5, 6, 7, 8};
  world.send(next, 8, first);
  world.send(next, 8, second);
  COMMX_EXPECT_ERROR(errc::truncated, too_small.wait());
  COMMX_CHECK_EQ(small[0], -1);
  big_enough.wait();
  COMMX_CHECK(fits == first);
  world.recv(prev, 8, later);
  COMMX_CHECK((later == std::vector<int>{5, 6, 7, 8}));
}

/// A receive nobody answers raises errc::timeout no earlier than its deadline and leaves
/// nothing behind: the message sent later goes to the next receive.
template <class Comm>
void deadline_withdraws(Comm& world) {
  const int prev = (world.rank() + world.size() - 1) % world.size();
  const int next = (world.rank() + 1) % world.size();
  int got = -1;
  const auto start = clock::now();
  COMMX_EXPECT_ERROR(errc::timeout, world.recv(prev, 9, got, 50ms));
  COMMX_CHECK(clock::now() - start >= 50ms);
  COMMX_CHECK_EQ(got, -1);
  world.barrier();  // every rank's timed-out receive is gone before anyone sends
  const int value = world.rank();
  world.send(next, 9, value);
  world.recv(prev, 9, got);
  COMMX_CHECK_EQ(got, prev);
}

/// cancel() withdraws an unmatched receive and reports whether it did.
template <class Comm>
void cancel_unmatched(Comm& world) {
  int got = -1;
  auto req = world.irecv(any_source, 11, got);
  COMMX_CHECK(req.cancel());
  COMMX_CHECK(!req.active());
  COMMX_CHECK(!req.cancel());
  world.barrier();
  const int next = (world.rank() + 1) % world.size();
  const int value = 5;
  world.send(next, 11, value);
  int fresh = -1;
  world.recv(any_source, 11, fresh);
  COMMX_CHECK_EQ(fresh, 5);
  COMMX_CHECK_EQ(got, -1);
}

/// wait_for_event() returns when a message arrives, and at its deadline when none does.
template <class Comm>
void events_and_waiting(Comm& world) {
  auto& t = world.transport();
  const auto start = clock::now();
  t.wait_for_event(t.event_count() + 1000, start + 10s);  // already "changed": returns at once
  // With nothing to wake it, a wait ends at its deadline (a stray event may end it sooner).
  const auto until = clock::now() + 20ms;
  while (clock::now() < until) t.wait_for_event(t.event_count(), until);
  COMMX_CHECK(clock::now() - start < 10s);
  if (world.size() == 1) return;
  world.barrier();
  if (world.rank() == 1) world.send(0, 12, 1);
  if (world.rank() != 0) return;
  for (;;) {
    const std::uint64_t seen = t.event_count();
    if (world.iprobe(1, 12)) break;
    t.wait_for_event(seen, start + 10s);
    COMMX_CHECK(clock::now() - start < 10s);  // woken by the arrival, not by the deadline
  }
  int one = 0;
  world.recv(1, 12, one);
}

/// Messages of one communicator never match receives of another.
template <class Comm>
void contexts_isolated(Comm& world) {
  Comm other = world.dup();
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  const int on_other = 2;
  const int on_world = 1;
  auto s1 = other.isend(next, 5, on_other);
  auto s2 = world.isend(next, 5, on_world);
  int got = 0;
  world.recv(prev, 5, got);
  COMMX_CHECK_EQ(got, on_world);
  other.recv(prev, 5, got);
  COMMX_CHECK_EQ(got, on_other);
  s1.wait();
  s2.wait();
}

template <class Comm>
std::vector<named_check<Comm>> job_checks() {
  return {
      {"ranks_and_locality", &ranks_and_locality<Comm>},
      {"tagged_out_of_order", &tagged_out_of_order<Comm>},
      {"non_overtaking", &non_overtaking<Comm>},
      {"zero_size", &zero_size<Comm>},
      {"unexpected_messages", &unexpected_messages<Comm>},
      {"nonblocking_any_order", &nonblocking_any_order<Comm>},
      {"wildcards_from_every_peer", &wildcards_from_every_peer<Comm>},
      {"probe_leaves_message", &probe_leaves_message<Comm>},
      {"truncation_keeps_message", &truncation_keeps_message<Comm>},
      {"truncation_passes_message_on", &truncation_passes_message_on<Comm>},
      {"deadline_withdraws", &deadline_withdraws<Comm>},
      {"cancel_unmatched", &cancel_unmatched<Comm>},
      {"events_and_waiting", &events_and_waiting<Comm>},
      {"contexts_isolated", &contexts_isolated<Comm>},
      {"collectives_among_requests", &collectives_among_requests<Comm>},
  };
}

/// The last rank leaves at once, having sent one message to rank 0. Rank 0 still receives that
/// message, then a receive from the gone rank and a send to it raise errc::peer_lost; nobody
/// waits for the deadline. Needs 2 ranks or more.
template <class Comm>
void peer_gone(Comm& world) {
  const int last = world.size() - 1;
  if (world.rank() == last) {
    world.send(0, 1, 17);
    return;  // leaves the job
  }
  if (world.rank() != 0) return;
  int got = 0;
  world.recv(last, 1, got);
  COMMX_CHECK_EQ(got, 17);
  const auto start = clock::now();
  COMMX_EXPECT_ERROR(errc::peer_lost, world.recv(last, 2, got, 30s));
  COMMX_EXPECT_ERROR(errc::peer_lost, world.send(last, 2, got, 30s));
  COMMX_CHECK(world.known_lost().empty());  // it finished: gone, but not failed
  // A nonblocking collective that needs the lost peer ends with it too.
  std::uint64_t value = 1;
  auto reduction = world.iallreduce(value, std::plus<>{});
  COMMX_EXPECT_ERROR(errc::peer_lost, reduction.wait(30s));
  COMMX_CHECK(clock::now() - start < 30s);
}

}  // namespace commx::test::conformance
