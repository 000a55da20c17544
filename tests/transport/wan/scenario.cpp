// SPDX-License-Identifier: MIT
// One rank of a two-rank wan job (started by commxrun, or over the link emulator by
// wan_test.cpp) for what only real processes and sockets show. The first argument names the
// scenario; exit status 0 means every check held on this rank.
//
// - transfer [MiB] [rounds]: rank 0 and rank 1 exchange patterned messages, checked byte for byte
// - retune [KiB]: rank 0 retunes the path mid-run, while both ranks keep large messages in flight in
//   both directions; every message arrives whole, once, in order
// - retune_both [KiB]: both ranks retune the path at the same moment, each its own way, under
//   traffic; both calls return, the ranks agree on one of the two tunings, nothing is lost
// - autotune: under COMMX_WAN_AUTOTUNE=1, the path was measured and tuned, and works
// - break_stream: rank 1 shuts one data stream's socket down in the middle of a large transfer;
//   both ranks get errc::peer_lost, neither hangs nor sees a short message
// - patterns (any number of ranks): MPWide's exchange patterns, as between sites: a cycle (send
//   to the next rank while receiving from the previous) of messages whose size the receiver
//   does not know, into one buffer that grows and shrinks, each round closed by a barrier
// - eager (COMMX_WAN_EAGER=16M): large messages within the receiver's streamed window leave
//   without its clear-to-send: rank 0's sends of 4 x 3 MiB and one of 4 MiB complete before
//   rank 1 posts a receive, while the next 4 MiB, past the window, waits for one (rendezvous);
//   rank 1 then probes the first, fails a too-small receive on it (the message stays), and
//   takes all six in the order sent, byte for byte, through any_tag receives
// - eager_refused: the same with rank 1 offering no window (COMMX_WAN_EAGER=0 on rank 1
//   alone): rank 0's large send waits for rank 1's receive, and arrives whole
// - marker: both ranks send each other text, 100 bytes (on the path's connection) and 1 MiB (on
//   its data streams), made of one phrase repeated; relay_test.cpp looks for that phrase among
//   the bytes a relay carried (found without TLS, not with it)
// - parts: MPWide's per-stream buffers: rank 0 sends 4 parts of different sizes, part k on data
//   stream k (each stream carried exactly its part), rank 1 receives them into 4 buffers of
//   sizes it did not know

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/wan.hpp"
#include "commx/transport/wan_parts.hpp"
#include "support/check.hpp"

namespace {

using comm = commx::communicator<commx::transport::wan>;
using commx::clock;
using namespace std::chrono_literals;

/// Message `round` from `from`: a pattern no shifted, short or repeated copy matches.
std::vector<std::uint32_t> pattern(std::size_t words, int from, int round) {
  std::vector<std::uint32_t> v(words);
  std::uint32_t x = 0x9e3779b9U * static_cast<std::uint32_t>(from * 1000 + round + 1);
  for (auto& w : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    w = x;
  }
  return v;
}

void check_same(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& want,
                const char* what, int round) {
  COMMX_CHECK_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      commx::test::fail_check(
          __FILE__, __LINE__,
          fmt::format("{} round {}: word {} of {} differs", what, round, i, got.size()));
    }
  }
}

/// Both ranks send `rounds` messages of `bytes` to each other at once and check what arrives.
void exchange(comm& world, std::size_t bytes, int rounds, int tag) {
  const int other = 1 - world.rank();
  for (int round = 0; round < rounds; ++round) {
    const auto out = pattern(bytes / 4, world.rank(), round);
    std::vector<std::uint32_t> in;
    auto send = world.isend(other, tag, out);
    world.recv(other, tag, in);
    send.wait();
    check_same(in, pattern(bytes / 4, other, round), "exchange", round);
  }
}

/// For bench/wan/wan_streams.py: rank 0 sends `rounds` rounds of `window` messages of `mib` MiB
/// to rank 1, who answers each round with an empty message once it is whole (after one
/// unmeasured warm-up round), and prints the rate: bytes over the time from the first send to
/// the last answer. With a window of 1 every message pays the rendezvous and the answer's round
/// trips (MPWide's exchange); with more, as osu_bw does, the next message's rendezvous overlaps
/// this one's payload and the streams never fall idle, which is what iperf3 measures.
void bench(comm& world, int argc, char** argv) {
  const std::size_t bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64) << 20;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 2;
  const int window = argc > 4 ? std::max(1, std::atoi(argv[4])) : 1;
  // The sender may send one buffer many times; each receive gets its own.
  std::vector<std::vector<std::byte>> buffers(world.rank() == 0 ? 1 : window,
                                              std::vector<std::byte>(bytes, std::byte{0x5a}));
  std::vector<std::byte> none;
  std::vector<comm::request> requests;
  clock::duration total{};
  for (int round = -1; round < rounds; ++round) {
    const auto start = clock::now();
    requests.clear();
    if (world.rank() == 0) {
      for (int m = 0; m < window; ++m) requests.push_back(world.isend(1, 9, buffers.front()));
      commx::wait_all(requests);
      world.recv(1, 10, none);
    } else {
      for (auto& buffer : buffers) requests.push_back(world.irecv(0, 9, buffer));
      commx::wait_all(requests);
      for (const auto& buffer : buffers)
        COMMX_CHECK(buffer.front() == std::byte{0x5a} && buffer.back() == std::byte{0x5a});
      world.send(0, 10, none);
    }
    if (round >= 0) total += clock::now() - start;
    if (round == rounds - 1 && world.rank() == 0) {
      const double seconds = std::chrono::duration<double>(total).count();
      std::printf("wan_bench bytes=%zu rounds=%d window=%d seconds=%.3f mbit=%.1f streams=%d\n",
                  bytes, rounds, window, seconds,
                  static_cast<double>(bytes) * rounds * window * 8 / seconds / 1e6,
                  world.transport().path(1).open_streams);
      std::fflush(stdout);
    }
  }
}

void transfer(comm& world, int argc, char** argv) {
  const std::size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 16;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 2;
  exchange(world, mib << 20, rounds, 1);
}

/// COMMX_WAN_AUTOTUNE=1: the rank that opened the path (rank 1) measured it and says what it
/// picked; the path runs on that; a transfer then checks out byte for byte.
void autotuned(comm& world) {
  auto& t = world.transport();
  const int other = 1 - world.rank();
  if (world.rank() == 1) {
    const auto state = t.path(other);
    COMMX_CHECK(!state.autotuned.empty());
    COMMX_CHECK_EQ(state.open_streams, state.tuning.streams);
    std::fprintf(stderr, "autotuned: %s\n", state.autotuned.c_str());
  }
  exchange(world, std::size_t{8} << 20, 2, 1);
}

/// Two large messages each way in flight while `meanwhile()` runs (a retune); every one then
/// arrives whole, once, in order.
template <class Meanwhile>
void under_traffic(comm& world, std::size_t words, int round, Meanwhile&& meanwhile) {
  const int other = 1 - world.rank();
  const auto a = pattern(words, world.rank(), 2 * round);
  const auto b = pattern(words + 1, world.rank(), 2 * round + 1);
  std::vector<std::uint32_t> in_a;
  std::vector<std::uint32_t> in_b;
  auto ra = world.irecv(other, 5, in_a);
  auto rb = world.irecv(other, 5, in_b);
  auto sa = world.isend(other, 5, a);
  auto sb = world.isend(other, 5, b);
  meanwhile();
  ra.wait();
  rb.wait();
  sa.wait();
  sb.wait();
  check_same(in_a, pattern(words, other, 2 * round), "under traffic a", round);
  check_same(in_b, pattern(words + 1, other, 2 * round + 1), "under traffic b", round);
}

/// Whether both ranks come to see the same nonzero `seen()` (what a rank makes of its path),
/// within 100 tries; messages keep the transports busy between tries, so that a rank reads
/// the openings of its peer's new streams. Both ranks try equally often.
template <class Seen>
bool both_see(comm& world, Seen&& seen) {
  const int other = 1 - world.rank();
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t here = seen();
    std::uint64_t there = 0;
    world.sendrecv(other, 7, here, other, 7, there);
    if (here != 0 && here == there) return true;
    exchange(world, std::size_t{1} << 20, 1, 6);
  }
  return false;
}

void retune(comm& world, int argc, char** argv) {
  auto& t = world.transport();
  const int other = 1 - world.rank();
  const std::size_t kib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 6144;
  const std::size_t words = (kib << 10) / 4;
  const commx::transport::wan::path_config tunings[] = {
      {2, std::size_t{64} << 10, 0, 0, 0, "", 0},
      {7, std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{1} << 20, 0, "",
       std::size_t{128} << 10},
      {1, std::size_t{1} << 20, 0, 0, 0, "", 0},
  };
  constexpr int rounds = 9;
  // Every round: two large messages each way in flight, and rank 0 retunes while they are.
  for (int round = 0; round < rounds; ++round) {
    under_traffic(world, words, round, [&] {
      if (world.rank() != 0 || round % 3 == 2) return;
      const auto& tuning = tunings[static_cast<std::size_t>(round) % 3];
      const auto before = t.path(other).epoch;
      t.retune(other, tuning);
      const auto now = t.path(other);
      COMMX_CHECK(now.epoch > before);
      COMMX_CHECK_EQ(now.open_streams, tuning.streams);
      COMMX_CHECK(now.tuning == tuning);
    });
  }
  // The other side follows the tuning its peer chose, once it has read the new streams'
  // openings. The state is kept as both ranks saw it when they agreed (once the first is done
  // and leaves, its peer's path closes).
  const int expected = tunings[(rounds - 2) % 3].streams;
  auto seen = t.path(other);
  both_see(world, [&] {
    seen = t.path(other);
    return seen.open_streams == expected ? 1U : 0U;
  });
  COMMX_CHECK_EQ(seen.open_streams, expected);
  COMMX_CHECK(seen.tuning == tunings[(rounds - 2) % 3]);
  COMMX_CHECK(seen.epoch > 1);
}

/// Both ranks retune the path at the same moment, each to a tuning of its own, while large
/// messages are in flight both ways. Both calls return; the two ranks end on the same tuning,
/// one of the two (the rank that opens the path applies the requests in the order it reads
/// them, so either may be last); every message arrives whole, once.
void retune_both(comm& world, int argc, char** argv) {
  auto& t = world.transport();
  const int other = 1 - world.rank();
  const std::size_t kib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4096;
  const std::size_t words = (kib << 10) / 4;
  using tuning = commx::transport::wan::path_config;
  constexpr int rounds = 6;
  for (int round = 0; round < rounds; ++round) {
    // Different stream counts each round and for each rank, so that which one won shows.
    const tuning wanted[2] = {{2 + round % 3, std::size_t{64} << 10, 0, 0, 0, "", 0},
                              {5 + round % 2, std::size_t{128} << 10, 0, 0, 0, "", 0}};
    under_traffic(world, words, round, [&] {
      world.barrier();
      const auto before = t.path(other).epoch;
      t.retune(other, wanted[world.rank()]);
      const auto now = t.path(other);
      COMMX_CHECK(now.epoch > before);
      COMMX_CHECK(now.tuning == wanted[0] || now.tuning == wanted[1]);
    });
    // Both ranks see the same epoch, with all its streams open.
    COMMX_CHECK(both_see(world, [&]() -> std::uint64_t {
      const auto seen = t.path(other);
      if (seen.open_streams != seen.tuning.streams) return 0;
      return seen.epoch << 16 | static_cast<std::uint64_t>(seen.tuning.streams);
    }));
  }
}

void patterns(comm& world) {
  const int next = (world.rank() + 1) % world.size();
  const int previous = (world.rank() + world.size() - 1) % world.size();
  const std::size_t words[] = {1, 1000, (std::size_t{3} << 20) + 7, 64, 0, std::size_t{1} << 18};
  std::vector<std::uint32_t> in;
  int round = 0;
  for (const std::size_t n : words) {
    const auto out = pattern(n, world.rank(), round);
    world.sendrecv(next, 20 + round, out, previous, 20 + round, in);
    check_same(in, pattern(n, previous, round), "cycle", round);
    world.barrier();
    ++round;
  }
}

void parts(comm& world) {
  const std::size_t words[] = {std::size_t{1} << 18, (std::size_t{3} << 18) + 5, 16385,
                               std::size_t{1} << 19};
  constexpr std::size_t n = std::size(words);
  std::vector<std::vector<std::uint32_t>> buffers(n);
  const int other = 1 - world.rank();
  if (world.rank() == 0) {
    for (std::size_t k = 0; k < n; ++k) buffers[k] = pattern(words[k], 0, static_cast<int>(k));
    // The path opens on this first use: it has carried nothing yet.
    COMMX_CHECK_EQ(world.transport().path(other).open_streams, 0);
    auto sent = commx::wan::isend_parts(world, other, 30, std::span(buffers));
    commx::wait_all(sent);
    const auto after = world.transport().path(other).carried;
    const std::vector<std::uint64_t> before(n, 0);
    COMMX_CHECK_EQ(after.size(), n);
    for (std::size_t k = 0; k < n; ++k) {
      // Stream k carried part k, and nothing else.
      COMMX_CHECK_EQ(after[k] - before[k], words[k] * 4);
    }
  } else {
    commx::wan::recv_parts(world, other, 30, std::span(buffers));
    for (std::size_t k = 0; k < n; ++k) {
      check_same(buffers[k], pattern(words[k], 0, static_cast<int>(k)), "part",
                 static_cast<int>(k));
    }
  }
  world.barrier();
}

/// `offered`: rank 1 offers its window (else it offers none, COMMX_WAN_EAGER=0 on rank 1 only).
void eager(comm& world, bool offered) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  const std::size_t bytes[] = {3 * mib, 3 * mib, 3 * mib, 3 * mib, 4 * mib, 4 * mib};
  constexpr std::size_t n = std::size(bytes);
  constexpr int go_tag = 99;
  // Opened before the first message (else it opens on it, and that message waits for a cts);
  // rank 1's offer came on the connection its barrier message came on, so it is in.
  world.transport().open_path(1 - world.rank());
  world.barrier();
  if (world.rank() == 0 && !offered) {
    std::vector<std::uint32_t> out = pattern(bytes[0] / 4, 0, 0);
    auto sent = world.isend(1, 0, out);
    for (int i = 0; i < 100; ++i) COMMX_CHECK(!sent.test());  // waits for the cts
    world.send(1, go_tag, 1);
    sent.wait();
  } else if (!offered) {
    int go = 0;
    world.recv(0, go_tag, go);
    std::vector<std::uint32_t> in(bytes[0] / 4);
    world.recv(0, 0, std::span<std::uint32_t>(in));
    check_same(in, pattern(bytes[0] / 4, 0, 0), "not offered", 0);
  } else if (world.rank() == 0) {
    std::vector<std::vector<std::uint32_t>> out;
    std::vector<comm::request> sent;
    for (std::size_t k = 0; k < n; ++k) {
      out.push_back(pattern(bytes[k] / 4, 0, static_cast<int>(k)));
      sent.push_back(world.isend(1, static_cast<int>(k), std::span<const std::uint32_t>(out[k])));
    }
    // 16 MiB of window: the first five fit. Rank 1 posts nothing until it hears `go`, so
    // these complete only because their data left without a clear-to-send.
    for (std::size_t k = 0; k + 1 < n; ++k) sent[k].wait();
    // The sixth is past the window: it waits for rank 1's receive.
    for (int i = 0; i < 100; ++i) COMMX_CHECK(!sent[n - 1].test());
    world.send(1, go_tag, 1);
    sent[n - 1].wait();
  } else {
    int go = 0;
    world.recv(0, go_tag, go);
    const commx::status first = world.probe(0, commx::any_tag);
    COMMX_CHECK_EQ(first.tag, 0);
    COMMX_CHECK_EQ(first.bytes, bytes[0]);
    std::vector<std::uint32_t> small(bytes[0] / 8);
    COMMX_EXPECT_ERROR(commx::errc::truncated,
                       world.recv(0, commx::any_tag, std::span<std::uint32_t>(small)));
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<std::uint32_t> in(bytes[k] / 4);
      const commx::status got = world.recv(0, commx::any_tag, std::span<std::uint32_t>(in));
      COMMX_CHECK_EQ(got.tag, static_cast<int>(k));
      check_same(in, pattern(bytes[k] / 4, 0, static_cast<int>(k)), "eager", static_cast<int>(k));
    }
  }
  world.barrier();
}

void break_stream(comm& world) {
  auto& t = world.transport();
  const std::size_t words = (std::size_t{256} << 20) / 4;
  if (world.rank() == 0) {
    std::vector<std::uint32_t> out(words, 7);
    world.barrier();
    auto send = world.isend(1, 3, out);
    const auto e = COMMX_EXPECT_ERROR(commx::errc::peer_lost, send.wait());
    std::fprintf(stderr, "rank 0 got: %s\n", e.what());
  } else {
    std::vector<std::uint32_t> in(words, 0);
    auto recv = world.irecv(0, 3, std::span<std::uint32_t>(in));
    world.barrier();
    // Drive the transfer (the clear-to-send leaves from inside a call into the transport) until
    // the first chunk bytes land in `in`, then make no call into the transport: the sender
    // stalls on full socket buffers, far short of 256 MiB, and cannot finish first. Waiting
    // for bytes in stream 1's socket while still driving would not do: a reader as fast as the
    // sender can drain each stream as its bytes arrive, all the way to the last chunk (CI saw
    // that once, and the sender's send completed before the break).
    const auto until = clock::now() + 60s;
    const auto begun = [&] {
      // Chunks are cut at whole 4 KiB pages: the first read into any chunk writes one of these.
      constexpr std::size_t page_words = 1024;
      for (std::size_t i = 0; i < words; i += page_words) {
        if (in[i] != 0) return true;
      }
      return false;
    };
    // Stream 1 must be open here too: the first chunk can land on stream 0 before this rank has
    // taken stream 1's handshake (CI saw that once, on a busy machine). Opening it takes a
    // handshake's few calls, far short of the transfer.
    const auto stream_1 = [&] { return t.native_stream(0, 1); };
    while (!(begun() && stream_1() >= 0) && clock::now() < until) {
      if (!t.progress_one()) std::this_thread::yield();
    }
    COMMX_CHECK(begun());
    // Stream 1 has room or bytes already: the stalled sender fills it. Bounded in time.
    const int fd = stream_1();
    COMMX_CHECK(fd >= 0);
    int waiting = 0;
    while (clock::now() < until) {
      if (::ioctl(fd, FIONREAD, &waiting) != 0) waiting = 0;
      if (waiting > 0) break;
      pollfd readable{fd, POLLIN, 0};
      ::poll(&readable, 1, 100);
    }
    COMMX_CHECK(waiting > 0);
    ::shutdown(fd, SHUT_RDWR);
    const auto e = COMMX_EXPECT_ERROR(commx::errc::peer_lost, recv.wait());
    std::fprintf(stderr, "rank 1 got: %s\n", e.what());
  }
}

/// The text `marker` sends: a phrase no frame header or handshake contains.
std::string marked(std::size_t bytes) {
  constexpr std::string_view phrase = "commx plaintext marker; ";
  std::string text;
  while (text.size() < bytes) text += phrase;
  text.resize(bytes);
  return text;
}

void marker(comm& world) {
  const int other = 1 - world.rank();
  for (const std::size_t bytes : {std::size_t{100}, std::size_t{1} << 20}) {
    const std::string out = marked(bytes);
    std::string in(bytes, '\0');
    auto receive = world.irecv(other, 3, std::span(in.data(), in.size()));
    world.send(other, 3, std::span(out.data(), out.size()));
    receive.wait();
    COMMX_CHECK(in == out);
  }
  std::printf("marker exchanged\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view scenario = argc > 1 ? argv[1] : "";
  try {
    // eager_refused: rank 1 offers no window for data sent without its clear-to-send.
    const char* rank = std::getenv("COMMX_RANK");
    if (scenario == "eager_refused" && rank != nullptr && std::string_view(rank) == "1") {
      ::setenv("COMMX_WAN_EAGER", "0", 1);  // NOLINT(concurrency-mt-unsafe): no threads yet
    }
    comm world = comm::from_env();
    if (scenario == "patterns") {
      patterns(world);
      return 0;
    }
    if (world.size() != 2) {
      std::fprintf(stderr, "wan_scenario: needs 2 ranks\n");
      return 2;
    }
    if (scenario == "transfer") {
      transfer(world, argc, argv);
    } else if (scenario == "retune") {
      retune(world, argc, argv);
    } else if (scenario == "retune_both") {
      retune_both(world, argc, argv);
    } else if (scenario == "bench") {
      bench(world, argc, argv);
    } else if (scenario == "autotune") {
      autotuned(world);
    } else if (scenario == "eager" || scenario == "eager_refused") {
      eager(world, scenario == "eager");
    } else if (scenario == "marker") {
      marker(world);
    } else if (scenario == "parts") {
      parts(world);
    } else if (scenario == "break_stream") {
      break_stream(world);
    } else {
      std::fprintf(stderr, "wan_scenario: unknown scenario '%.*s'\n",
                   static_cast<int>(scenario.size()), scenario.data());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wan_scenario %.*s: %s\n", static_cast<int>(scenario.size()),
                 scenario.data(), e.what());
    return 1;
  }
  return 0;
}
