// SPDX-License-Identifier: MIT
// A job of many ranks (64, 128) that starts, passes one message around a ring, and reports to
// rank 0: every rank talks to two peers (its neighbours) before it counts, and to rank 0 after.
// Built for each stack by commx_add_variants; run by commxrun (tests/CMakeLists.txt) and by
// stranger_flood.py.
//   scale_job [descriptors=K] [megabytes=M] [large=BYTES] [all_pairs] [allreduce] [window]
//             [start_tree]
// With `descriptors=K`, each rank, rank 0 as well (the rendezvous's connections through it are
// closed once every rank has the table), checks that joining and talking to its peers opened
// at most K descriptors; with `megabytes=M`, that its resident memory grew by at most M MiB.
// Both hold only where a rank's state for peers it never talks to is small and holds no
// descriptor. With `start_tree`, the stack's own start-up talks along the start-up tree (the
// layered stacks' meeting, ucx's address exchange: transport/detail/start_tree.hpp), and each
// rank may hold a connection more per peer it has there (about log2 n at most). With
// `all_pairs`, after those checks every rank sends to and hears from every other (each peer's
// endpoint is right), then the token goes round the ring twice more (where a rank that heard
// from every rank polls most of them less often: shm's cold senders).
// With `large=BYTES`, a message of that size goes around the ring too, before the counting
// (wan opens a path's data streams on its first large message). With `allreduce`, after the
// checks every rank sums 64 KiB of doubles with all others and checks every element (where
// ranks crowd the cores, binomial's two waves and shm's reads by cma). With `window`, after
// the checks every rank opens a window of n + 1 elements (whose table of members, keys on ucx,
// grows with n), puts into its right neighbour's, adds one to a counter at rank 0 and fetches
// from its left neighbour's, through two fences. Exits 0 when every rank's check passed, as
// rank 0 saw.

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <commx/transport/detail/start_tree.hpp>
#include <commx/variant.hpp>
#include <commx/window.hpp>

#include "../../bench/scale_probe.hpp"

namespace {

using comm = commx::variant::communicator;

struct limits {
  int descriptors = -1;  // none
  double megabytes = -1.0;
  bool all_pairs = false;
  bool allreduce = false;
  bool window = false;
  std::size_t large = 0;  // bytes; none
  bool start_tree = false;
};

limits parse(int argc, char** argv) {
  limits l;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("descriptors=")) l.descriptors = std::atoi(argv[i] + 12);
    if (arg.starts_with("megabytes=")) l.megabytes = std::atof(argv[i] + 10);
    if (arg == "all_pairs") l.all_pairs = true;
    if (arg == "allreduce") l.allreduce = true;
    if (arg == "window") l.window = true;
    if (arg.starts_with("large=")) l.large = std::strtoull(argv[i] + 6, nullptr, 10);
    if (arg == "start_tree") l.start_tree = true;
  }
  return l;
}

// Puts, adds and gets among all ranks of one window (see the file comment); what went wrong.
std::string window_checks(comm& world) {
  const int n = world.size();
  const int me = world.rank();
  const int right = (me + 1) % n;
  const int left = (me + n - 1) % n;
  const auto slot = [](int r) { return static_cast<std::size_t>(r); };
  std::string verdict;
  commx::window<std::uint64_t, comm> w(world, slot(n) + 1);
  w.fence();
  w.put(std::uint64_t(me) + 1, right, slot(me));
  w.accumulate(std::uint64_t{1}, 0, slot(n), std::plus<>{});
  w.fence();
  if (const std::uint64_t put = w.local()[slot(left)]; put != std::uint64_t(left) + 1) {
    verdict += fmt::format(" the window's slot {} holds {}, not rank {}'s put;", left, put, left);
  }
  if (me == 0 && w.local()[slot(n)] != std::uint64_t(n)) {
    verdict += fmt::format(" the counter holds {}, not {};", w.local()[slot(n)], n);
  }
  // The left neighbour's slot of its own left neighbour holds what that rank put there.
  const int second_left = (left + n - 1) % n;
  std::uint64_t got = 0;
  w.get(std::span(&got, 1), left, slot(second_left));
  w.fence();
  if (got != std::uint64_t(second_left) + 1) {
    verdict += fmt::format(" got {} from rank {}'s window, not {};", got, left, second_left + 1);
  }
  w.free();
  return verdict;
}

}  // namespace

int main(int argc, char** argv) {
  const limits bound = parse(argc, argv);
  const int fds_before = scale_probe::open_descriptors();
  const double rss_before = scale_probe::resident_megabytes();
  auto world = comm::from_env();
  const int n = world.size();
  const int me = world.rank();
  const int right = (me + 1) % n;
  const int left = (me + n - 1) % n;

  int from_left = -1;
  auto sent = world.isend(right, 1, me);
  world.recv(left, 1, from_left);
  sent.wait();
  bool large_intact = true;
  if (bound.large > 0) {
    std::vector<std::byte> out(bound.large, std::byte(me & 0xff));
    std::vector<std::byte> in(bound.large);
    auto big = world.isend(right, 3, std::span<const std::byte>(out));
    world.recv(left, 3, std::span(in));
    big.wait();
    large_intact = in.front() == std::byte(left & 0xff) && in.back() == std::byte(left & 0xff);
  }

  const int opened = scale_probe::open_descriptors() - fds_before;
  const double grown = scale_probe::resident_megabytes() - rss_before;
  std::string verdict;
  if (from_left != left) verdict += fmt::format(" received {} from rank {};", from_left, left);
  if (!large_intact) verdict += fmt::format(" the large message from rank {} arrived wrong;", left);
  const commx::detail::start_tree tree = commx::detail::start_tree_of(me, n);
  const int tree_peers = static_cast<int>(tree.children.size()) + (tree.parent >= 0 ? 1 : 0);
  const int allowed = bound.descriptors + (bound.start_tree ? tree_peers : 0);
  if (bound.descriptors >= 0 && opened > allowed) {
    verdict += fmt::format(" {} descriptors opened, bound {};", opened, allowed);
  }
  if (bound.megabytes >= 0 && grown > bound.megabytes) {
    verdict +=
        fmt::format(" resident memory grew {:.1f} MiB, bound {:.1f} MiB;", grown, bound.megabytes);
  }

  // No rank dials a new peer (the checks below, the reports to rank 0 at the end) before every
  // rank has counted its descriptors: a token goes twice round the ring, over the connections
  // the ring made. (A barrier alone let a rank that counted early dial one that had not
  // counted yet.)
  const auto pass_token_twice = [&] {
    for (int lap = 0; lap < 2 && n > 1; ++lap) {
      int token = me == 0 ? lap : -1;
      if (me == 0) world.send(right, 5, token);
      world.recv(left, 5, token);
      if (me != 0) world.send(right, 5, token);
      if (token != lap) verdict += fmt::format(" the token came back as {}, not {};", token, lap);
    }
  };
  pass_token_twice();
  if (bound.allreduce) {
    constexpr std::size_t count = 8192;  // 64 KiB
    std::vector<double> sum(count);
    for (std::size_t i = 0; i < count; ++i) sum[i] = me + static_cast<double>(i % 7);
    world.allreduce(sum, std::plus<>{});
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      wrong += sum[i] != n * (n - 1) / 2.0 + n * static_cast<double>(i % 7);
    }
    if (wrong != 0) verdict += fmt::format(" {} of the allreduce's sums wrong;", wrong);
  }
  if (bound.window) verdict += window_checks(world);
  if (bound.all_pairs) {
    world.barrier();
    std::vector<int> heard(static_cast<std::size_t>(n), -1);
    std::vector<commx::variant::communicator::request> sends;
    for (int r = 0; r < n; ++r) {
      if (r != me) sends.push_back(world.isend(r, 4, me));
    }
    for (int r = 0; r < n; ++r) {
      if (r != me) world.recv(r, 4, heard[static_cast<std::size_t>(r)]);
    }
    for (auto& s : sends) s.wait();
    for (int r = 0; r < n; ++r) {
      if (r != me && heard[static_cast<std::size_t>(r)] != r) {
        verdict += fmt::format(" heard {} from rank {};", heard[static_cast<std::size_t>(r)], r);
      }
    }
    pass_token_twice();
  }

  // Rank 0 hears every rank's verdict; the others hear back that everyone is done, so no
  // rank leaves while another still needs it.
  if (me == 0) {
    int failed = verdict.empty() ? 0 : 1;
    if (!verdict.empty()) fmt::print("rank 0:{}\n", verdict);
    int most_opened = 0;
    for (int r = 1; r < n; ++r) {
      int report[2] = {0, 0};
      const auto st = world.recv(commx::any_source, 2, std::span(report));
      if (report[0] != 0) {
        ++failed;
        fmt::print("rank {} failed its checks (see its output)\n", st.source);
      }
      most_opened = std::max(most_opened, report[1]);
    }
    fmt::print(
        "{}: {} ranks started and passed a message around the ring{}{}; {} of them failed "
        "a check; most descriptors opened by a rank but 0: {}, by rank 0: {} (memory "
        "{:.1f} MiB)\n",
        commx::variant::target_name, n, bound.all_pairs ? " and between every pair" : "",
        bound.window ? ", and through one window" : "", failed, most_opened, opened, grown);
    std::fflush(stdout);  // a failing rank ends the job: say it first
    for (int r = 1; r < n; ++r) world.send(r, 3, failed);
    return failed == 0 ? 0 : 1;
  }
  if (!verdict.empty()) fmt::print("rank {}:{}\n", me, verdict);
  std::fflush(stdout);
  const int report[2] = {verdict.empty() ? 0 : 1, opened};
  world.send(0, 2, std::span(report));
  int failed = 0;
  world.recv(0, 3, failed);
  return failed == 0 ? 0 : 1;
}
