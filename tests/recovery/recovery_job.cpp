// SPDX-License-Identifier: MIT
// Recovery as a user meets it (sweep.py runs it under every kill a fault plan can place): each
// surviving rank agrees twice, shrinks, and runs an allreduce on what shrink returned, printing
// one line per step. Every survivor must print the same lines; a rank killed by the plan prints
// nothing more (a process) or "killed" (a thread). `revoke` mode: rank 0 revokes while the
// others wait on it in a receive, a barrier, an iallreduce and a window fence; every rank must
// see errc::revoked in each and in a later call (window puts and active messages included),
// while a communicator duplicated before still works. `suicides:SEED` mode: ULFM's barrier
// loop, ranks killing themselves until one is left (barrier_loop.py checks it). `wildcard`
// mode: any_source after a loss, before and after acknowledge_failures. `silence:SECONDS`
// mode: ranks that stall or are partitioned off are declared lost (silence.py checks it).
// `half_after_agreeing` mode: ranks lost between shrink's two agreements (silence.py too).
// `cost:K[:P]` mode: the bytes and messages one agreement sends to each rank, against the
// documented cost.
// Exit status: 0 every step done, 1 a revocation case went wrong, 2 a typed error.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commx/active_messages.hpp"
#include "commx/recovery.hpp"
#include "commx/transport/faulty.hpp"
#include "commx/variant.hpp"
#include "commx/window.hpp"

namespace {

using comm = commx::variant::communicator;

void say(int rank, std::string_view line) {
  fmt::print("outcome rank={} {}\n", rank, line);
  std::fflush(stdout);
}

// The recovery loop a user writes: shrink, run the step, agree on whether it went well
// everywhere; on a loss or a revocation, revoke and go round again with the survivors.
int agree_and_shrink(comm& world) {
  const int me = world.rank();
  // Beyond 64 ranks, ranks share bits: rank r sets bit r % 64 (sweep.py checks it so).
  const auto first = world.agree(std::uint64_t{1} << (me % 64), std::bit_or<>{});
  say(me, fmt::format("agreed 1 value={:#x} lost={}", first.value, first.lost));
  const auto second = world.agree(me, commx::op::min{});
  say(me, fmt::format("agreed 2 value={} lost={}", second.value, second.lost));
  comm current = world;
  for (int round = 0; round < 8; ++round) {
    comm small = current.shrink(commx::shrink_quorum::any);
    long sum = 0;
    int ok = 1;
    try {
      sum = small.allreduce_value(static_cast<long>(world.rank()) + 1, std::plus<>{});
    } catch (const commx::error& e) {
      if (!commx::calls_for_recovery(e)) throw;
      ok = 0;
      small.revoke();
    }
    const auto verdict = small.agree(ok, std::bit_and<>{});
    if (verdict.value == 1 && verdict.lost.empty()) {
      std::vector<int> members;
      for (int r = 0; r < small.size(); ++r) members.push_back(small.world_rank_of(r));
      say(me, fmt::format("shrunk size={} members={} sum={}", small.size(), members, sum));
      return 0;
    }
    current = small;
  }
  say(me, "error (still losing ranks after 8 rounds)");
  return 2;
}

// Whether T's ranks are threads of one process (inproc, faulty over it: "faulty+inproc"): they
// die by throwing.
template <class T>
constexpr bool ranks_are_threads() {
  return std::string_view(T::name).ends_with("inproc");
}

// A rank dying as a process does (SIGKILL) or a thread can (injected_kill: its peers see it
// failed).
void die(int me) {
  if constexpr (ranks_are_threads<comm::transport_type>()) {
    throw commx::transport::injected_kill(fmt::format("rank {} kills itself", me));
  } else {
    std::raise(SIGKILL);
  }
}

// ULFM's barrier loop: each round the ranks a seeded draw names (one, or two every third round
// while four or more remain) kill themselves between two barriers; the others see the loss in
// the second, revoke, shrink (any quorum: the loop goes down to one rank) and go on, until one
// rank is left. Every survivor prints the members after each round; the last prints "alone".
int suicides(comm& world, unsigned seed) {
  const int me = world.rank();
  comm team = world;
  for (int round = 0; team.size() > 1; ++round) {
    if (round == 64) {
      say(me, "error (still more than one rank after 64 rounds)");
      return 2;
    }
    // The same draw at every member: a hash of the seed and the round.
    std::uint64_t draw =
        (seed + 1) * 0x9E3779B97F4A7C15ULL ^ (static_cast<std::uint64_t>(round) << 32);
    draw ^= draw >> 29;
    draw *= 0xBF58476D1CE4E5B9ULL;
    draw ^= draw >> 32;
    const int size = team.size();
    const int at = static_cast<int>(draw % static_cast<std::uint64_t>(size));
    const int first = team.world_rank_of(at);
    int second = -1;
    if (size >= 4 && round % 3 == 2) {
      const int offset = 1 + static_cast<int>((draw >> 20) % static_cast<std::uint64_t>(size - 1));
      second = team.world_rank_of((at + offset) % size);
    }
    try {
      team.barrier();
      if (me == first || me == second) die(me);
      team.barrier();  // the others see the loss here, or in the next round's first barrier
    } catch (const commx::error& e) {
      if (!commx::calls_for_recovery(e)) throw;
      team.revoke();
    }
    team = team.shrink(commx::shrink_quorum::any);
    std::vector<int> members;
    for (int r = 0; r < team.size(); ++r) members.push_back(team.world_rank_of(r));
    say(me, fmt::format("round {} members={}", round, members));
  }
  say(me, "alone");
  return 0;
}

// Whether `call` ends with errc::revoked; says what it did instead otherwise.
template <class Call>
bool ends_revoked(int me, std::string_view what, Call call) {
  try {
    call();
    say(me, fmt::format("WRONG: {} returned on a revoked communicator", what));
    return false;
  } catch (const commx::error& e) {
    if (e.code() == commx::errc::revoked) return true;
    say(me, fmt::format("WRONG: {} ended with {}", what, e.what()));
    return false;
  }
}

// Rank 0 revokes `victim` once every other rank is about to call `block` on it; true when
// each of them ended with errc::revoked.
template <class Block>
bool revoked_while_blocked(comm& world, comm& victim, std::string_view what, Block block) {
  const int me = world.rank();
  if (me != 0) {
    world.send(0, 9, std::span<const int>());
    return ends_revoked(me, what, block);
  }
  for (int r = 1; r < world.size(); ++r) world.recv(r, 9, std::span<int>());
  victim.revoke();
  return true;
}

// Rank 0 revokes a fresh duplicate of the world while every other rank is blocked on it in
// `block`; each must end with errc::revoked, and so must a later call. True when all did.
template <class Block>
bool interrupted_by_revoke(comm& world, std::string_view what, Block block) {
  const int me = world.rank();
  comm victim = world.dup();
  comm spare = world.dup();
  bool right = revoked_while_blocked(world, victim, what, [&] { block(victim); });
  right =
      ends_revoked(me, fmt::format("a barrier after {}", what), [&] { victim.barrier(); }) && right;
  right = right && victim.is_revoked();
  // A communicator split from the revoked one's parent is untouched; the revoked one agrees.
  right = right && spare.allreduce_value(1, std::plus<>{}) == world.size();
  right = right && victim.agree(1, commx::op::max{}).value == 1;
  return right;
}

// Window and active-message traffic over a revoked communicator ends too, although both work
// on their own duplicate of it: made over `victim`, then ranks 1.. block in a window fence that
// rank 0 never joins while rank 0 revokes `victim`; at every rank a later put and a later call
// end with errc::revoked as well. True when all did.
bool window_and_am_revoked(comm& world) {
  const int me = world.rank();
  const int next = (me + 1) % world.size();
  comm victim = world.dup();
  commx::window<int, comm> win(victim, 4);
  commx::handler_table table;
  table.on<int>("echo", [](int /*source*/, int v) { return v; });
  commx::active_messages<comm> am(victim, std::move(table));
  bool right = am.call<int>(next, "echo", me).get() == me;  // working before
  win.fence();
  right = revoked_while_blocked(world, victim, "a window fence", [&] { win.fence(); }) && right;
  right = ends_revoked(me, "a window put", [&] { win.put(1, next, 0); }) && right;
  right = ends_revoked(me, "an active-message call",
                       [&] { (void)am.call<int>(next, "echo", 1).get(); }) &&
          right;
  return right;
}

int revoke_interrupts(comm& world) {
  const int me = world.rank();
  int wrong = 0;
  wrong += !interrupted_by_revoke(world, "a receive", [](comm& c) {
    int never = 0;
    c.recv(0, 5, never);
  });
  wrong += !interrupted_by_revoke(world, "a barrier", [](comm& c) { c.barrier(); });
  wrong += !interrupted_by_revoke(world, "an iallreduce", [](comm& c) {
    long total = 1;
    auto pending = c.iallreduce(total, std::plus<>{});
    pending.wait();
  });
  wrong += !window_and_am_revoked(world);
  world.barrier();
  say(me, fmt::format("revoke: {} of 4 cases right", 4 - wrong));
  return wrong == 0 ? 0 : 1;
}

// `any_source` after a loss (ULFM's "failure pending"), at 4 ranks: rank 0 checks, rank 1 sends
// when told, ranks 3 then 2 die when told. Rank 0's wildcards on the world end with peer_lost
// while a loss is unacknowledged (a pending one, a blocking one, a probe), unless a queued
// message matches; acknowledged, they receive again; on a communicator without the dead rank
// (split before, shrunk after) they never fail. Prints how many of its checks held.
int wildcard_after_loss(comm& world) {
  const int me = world.rank();
  comm pair = world.split(me < 2 ? 0 : 1, me);  // {0, 1} and {2, 3}, made before anyone died
  const int go = 1;
  int got = 0;
  if (me == 3) {
    world.recv(0, 9, got);
    die(me);
  } else if (me == 2) {
    world.send(0, 6, 26);
    world.recv(0, 9, got);
    die(me);
  } else if (me == 1) {
    world.recv(0, 10, got);
    world.send(0, 5, 15);
    pair.send(0, 11, 21);
    comm team = world.shrink(commx::shrink_quorum::any);
    team.send(0, 12, 32);
    return 0;
  }
  if (me != 0) return 0;
  std::vector<std::string> wrong;
  const auto check = [&](bool right, std::string_view what) {
    if (!right) wrong.emplace_back(what);
  };
  // Whether `call` ends with peer_lost for an unacknowledged loss of `peer`.
  const auto ends_with_loss_of = [](int peer, auto call) {
    try {
      call();
    } catch (const commx::error& e) {
      return e.code() == commx::errc::peer_lost &&
             std::string_view(e.what()).find(fmt::format("peer {} failed", peer)) !=
                 std::string_view::npos;
    }
    return false;
  };
  world.probe(2, 6);  // queued before any loss
  int early_value = 0;
  int pair_value = 0;
  auto early = world.irecv(commx::any_source, 5, early_value);
  auto pair_early = pair.irecv(commx::any_source, 11, pair_value);
  world.send(3, 9, go);
  check(ends_with_loss_of(3, [&] { early.wait(); }), "a pending world wildcard ends with rank 3");
  check(world.known_lost() == std::vector<int>{3}, "known_lost is {3}");
  world.recv(commx::any_source, 6, got);
  check(got == 26, "a queued message still matches a wildcard while a loss is unacknowledged");
  check(ends_with_loss_of(3, [&] { world.recv(commx::any_source, 5, got); }),
        "a blocking wildcard fails at once while unacknowledged");
  check(ends_with_loss_of(3, [&] { (void)world.iprobe(commx::any_source, 5); }),
        "an iprobe wildcard fails while unacknowledged");
  check(pair_early.active() && !pair_early.test(), "the pair's wildcard, without rank 3, waits on");
  check(world.acknowledge_failures() == std::vector<int>{3}, "acknowledged {3}");
  check(!world.iprobe(commx::any_source, 5), "after the acknowledgement an iprobe finds nothing");
  world.send(1, 10, go);
  world.recv(commx::any_source, 5, got);
  check(got == 15, "after the acknowledgement a wildcard receives rank 1's message");
  pair_early.wait();
  check(pair_value == 21, "the pair's wildcard receives rank 1's message");
  world.send(2, 9, go);
  check(ends_with_loss_of(2, [&] { world.recv(commx::any_source, 8, got); }),
        "a new loss after the acknowledgement ends a waiting wildcard");
  check(world.known_lost() == std::vector<int>{3, 2}, "known_lost is {3, 2}");
  comm team = world.shrink(commx::shrink_quorum::any);
  check(team.size() == 2, "the shrunk communicator holds ranks 0 and 1");
  team.recv(commx::any_source, 12, got);
  check(got == 32, "a wildcard on the shrunk communicator receives, unacknowledged losses aside");
  for (const std::string& w : wrong) say(me, "WRONG: " + w);
  say(me, fmt::format("wildcard: {} checks wrong", wrong.size()));
  return wrong.empty() ? 0 : 1;
}

// What one agreement without failures sends, against its file comment's cost: radix k > 0,
// `phases` of dissemination (two; one at 2 ranks that memory joins), to each rank m k^j after
// this one (m < k) a report of the value alone (4 bytes) in phase one and an empty confirmation
// in phase two; radix 0, the coordinator's report (16 + p/8 bytes) and acknowledgement (1) from
// each participant, its proposal and decision (16 + p/8 each) to each. Bytes are counted where
// the stack counts them (inproc, tcp, ...), messages where it does (faulty<T>). Rank 0 prints
// "cost: as documented" or what differed.
template <class Comm>
int counted_cost(Comm& world, int radix, int phases) {
  using transport_type = typename Comm::transport_type;
  constexpr bool counts_bytes = requires(const transport_type& t) { t.bytes_sent_to(0); };
  constexpr bool counts_messages = requires(const transport_type& t) { t.messages_sent_to(0); };
  const int me = world.rank();
  const int p = world.size();
  const auto at = [](int r) { return static_cast<std::size_t>(r); };
  // Bytes, then messages, sent to each rank so far.
  const auto sent = [&] {
    std::vector<std::uint64_t> counts(2 * at(p));
    for (int r = 0; r < p; ++r) {
      if constexpr (counts_bytes) counts[at(r)] = world.transport().bytes_sent_to(r);
      if constexpr (counts_messages) counts[at(p + r)] = world.transport().messages_sent_to(r);
    }
    return counts;
  };
  world.barrier();  // its sends are handed over when it returns
  const std::vector<std::uint64_t> before = sent();
  (void)world.agree(me, commx::op::min{});
  std::vector<std::uint64_t> counts = sent();
  std::vector<std::uint64_t> expected(2 * at(p));
  const std::uint64_t whole = 16 + (static_cast<std::uint64_t>(p) + 7) / 8;
  const auto expect = [&](int r, std::uint64_t bytes, std::uint64_t messages) {
    if constexpr (counts_bytes) expected[at(r)] = bytes;
    if constexpr (counts_messages) expected[at(p + r)] = messages;
  };
  for (int r = 0; r < p; ++r) {
    counts[at(r)] -= before[at(r)];
    counts[at(p + r)] -= before[at(p + r)];
    if (r == me) continue;
    if (radix == 0) {
      if (me == 0) expect(r, 2 * whole, 2);
      if (r == 0) expect(r, whole + 1, 2);
      continue;
    }
    for (int step = 1; step < p; step *= radix) {
      for (int o = step; o < p && o < step * radix; o += step) {
        if ((me + o) % p == r) expect(r, sizeof(int), static_cast<std::uint64_t>(phases));
      }
    }
  }
  const int wrong = world.allreduce_value(counts == expected ? 0 : 1, std::plus<>{});
  if (counts != expected) {
    const std::span<const std::uint64_t> got(counts);
    const std::span<const std::uint64_t> want(expected);
    say(me,
        fmt::format("cost: sent {} bytes and {} messages to each rank where {} and {} were "
                    "expected",
                    got.first(at(p)), got.subspan(at(p)), want.first(at(p)), want.subspan(at(p))));
  }
  if (me == 0 && wrong == 0) say(me, "cost: as documented");
  return wrong == 0 ? 0 : 1;
}

// `cost:K` or `cost:K:P`: radix K (0: the coordinator's), P phases (2 if not given).
template <class Comm>
int message_cost(Comm& world, const std::string& how) {
  using transport_type = typename Comm::transport_type;
  if constexpr (
      !requires(const transport_type& t) { t.bytes_sent_to(0); } &&
      !requires(const transport_type& t) { t.messages_sent_to(0); }) {
    say(world.rank(), "cost: this stack counts neither bytes nor messages sent");
    return 1;
  } else {
    const std::size_t colon = how.find(':');
    const int radix = std::atoi(how.substr(0, colon).c_str());
    const int phases = colon == std::string::npos ? 2 : std::atoi(how.c_str() + colon + 1);
    return counted_cost(world, radix, phases);
  }
}

// Shrinks `team` with the majority rule and prints its members as round `round`; or prints
// "refused: ..." and returns false where the survivors are no majority or the others agreed
// rank `me` lost.
bool shrink_and_say(comm& team, int me, long round) {
  try {
    team = team.shrink();
  } catch (const commx::error& e) {
    if (e.code() != commx::errc::no_majority && e.code() != commx::errc::excluded) throw;
    say(me, fmt::format("refused: {}", e.what()));
    return false;
  }
  std::vector<int> members;
  for (int r = 0; r < team.size(); ++r) members.push_back(team.world_rank_of(r));
  say(me, fmt::format("round {} members={}", round, members));
  return true;
}

// Silent ranks (faulty's stall or partition, COMMX_SUSPECT_AFTER set): rounds of an allreduce
// bounded by a short deadline; a timeout, a loss or a revocation sends the ranks to revoke and
// shrink, whose agreement declares the silent ones lost. Each shrink's members are printed,
// "refused: ..." where the survivors are no majority or the others agreed this rank lost,
// "finished" after `seconds` (all stop at one round: the allreduce carries whether anyone's
// time is up). silence.py checks the lines.
int silence(comm& world, double seconds) {
  const int me = world.rank();
  const auto end = commx::clock::now() + std::chrono::duration_cast<commx::clock::duration>(
                                             std::chrono::duration<double>(seconds));
  comm team = world;
  for (long round = 0; round < 1000000; ++round) {
    try {
      const int late = commx::clock::now() >= end ? 1 : 0;
      if (team.allreduce_value(late, commx::op::max{},
                               commx::deadline(std::chrono::milliseconds(500))) == 1)
        break;
      // A pause between rounds leaves the CPUs to the runs silence.py starts beside this one;
      // the ranks still talk hundreds of times a second, far more often than they suspect.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    } catch (const commx::error& e) {
      if (!commx::calls_for_recovery(e) && e.code() != commx::errc::timeout) throw;
    }
    team.revoke();
    if (!shrink_and_say(team, me, round)) return 0;
  }
  say(me, "finished");
  return 0;
}

// A shrink whose second agreement loses ranks: with COMMX_FAULTS=kill@2:after=4;kill@3:after=4
// at 4 ranks where a network joins them (an agreement there sends 4 messages a rank, as
// recovery.cost.tcp checks), ranks 2 and 3 take part in the first agreement and die at their
// first send in the second. The shrink that follows keeps the majority rule: of the
// communicator all four agreed on, 0 and 1 are half, and end "refused" rather than going on
// as two (silence.py checks it).
int shrink_loses_half_after_agreeing(comm& world) {
  comm team = world;
  if (shrink_and_say(team, world.rank(), 0)) say(world.rank(), "finished");
  return 0;
}

int work(comm& world, std::string_view mode) {
  try {
    if (mode == "revoke") return revoke_interrupts(world);
    if (mode == "wildcard") return wildcard_after_loss(world);
    if (mode == "half_after_agreeing") return shrink_loses_half_after_agreeing(world);
    if (mode.starts_with("silence")) {
      return silence(world, std::atof(mode.data() + mode.find(':') + 1));
    }
    if (mode.starts_with("cost:")) return message_cost(world, std::string(mode.substr(5)));
    if (mode.starts_with("suicides")) {
      return suicides(world, static_cast<unsigned>(std::atoi(mode.data() + mode.find(':') + 1)));
    }
    return agree_and_shrink(world);
  } catch (const commx::error& e) {
    say(world.rank(), fmt::format("error ({})", e.what()));
    return 2;
  } catch (const commx::transport::injected_kill&) {
    say(world.rank(), "killed");
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "agree";
  std::atomic<int> worst{0};
  try {
    commx::run<comm>([&](comm& world) {
      const int status = work(world, mode);
      int seen = worst.load();
      while (status > seen && !worst.compare_exchange_weak(seen, status)) {
      }
    });
  } catch (const commx::transport::injected_kill&) {  // in-process: a rank was killed
  } catch (const commx::error&) {                     // reported by the rank itself
  }
  return worst.load();
}
