// SPDX-License-Identifier: MIT
#pragma once
// The cells of the simulated scale study (bench/sim_scale.py) and how one is timed, shared by
// sim_collectives.cpp (commx on transport::simgrid) and smpi_collectives.cpp (the same calls in
// MPI, run by SMPI), so both sides run the same cells alike.
//
// A cell is a collective, a size and the job's rank count. Size is what cost_model.hpp calls n:
// the bytes a rank passes (allreduce, bcast), a rank's block (allgather: it receives p blocks),
// one block between two ranks (alltoall: it sends and receives p). A cell runs if the whole
// job's buffers fit the memory budget, and an alltoall if its p (p - 1) concurrent flows fit
// the flow budget (SimGrid's bandwidth sharing is solved over every flow at once: 1,024 ranks'
// million flows take minutes a call); the others are reported as not run, with the reason.
//
// Timing: every rank lines up (scale_probe::start_line) and makes `calls` calls (bcast's root
// turns); the cell's time is the span from the first rank's start to the last rank's end, over
// the calls, in simulated microseconds. The simulated clock is one for all ranks, so the span is
// the job's, not a rank's own: a rank that leaves the start line a latency before another (a
// dissemination barrier releases them that far apart) does not hide that latency from a
// rooted collective's time, as each rank's own duration would.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scale_probe.hpp"

namespace sim_study {

enum class collective { barrier, bcast, allreduce, allgather, alltoall };

inline constexpr std::string_view names[] = {"barrier", "bcast", "allreduce", "allgather",
                                             "alltoall"};

inline std::optional<collective> parse(std::string_view name) {
  for (std::size_t i = 0; i < std::size(names); ++i) {
    if (names[i] == name) return static_cast<collective>(i);
  }
  return std::nullopt;
}

inline std::string_view name(collective c) { return names[static_cast<std::size_t>(c)]; }

/// What the study runs: the collectives and sizes, calls per cell and the budgets.
struct plan {
  std::vector<collective> collectives{collective::barrier, collective::bcast, collective::allreduce,
                                      collective::allgather, collective::alltoall};
  std::vector<std::size_t> sizes{8, 1024, 65536, 1048576, 16777216};
  int calls = 3;
  double memory_bytes = 4.0 * (1ULL << 30);
  double flows = 65536;
};

inline std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  std::stringstream words{std::string(text)};
  for (std::string word; std::getline(words, word, ',');) out.push_back(word);
  return out;
}

/// `--collectives a,b --sizes 8,1024 --calls 3 --memory-gib 4 --flows 65536`; exits with a
/// message on anything else.
inline plan parse_args(int argc, char** argv, int first) {
  plan p;
  const auto fail = [](const std::string& what) {
    std::fprintf(stderr, "%s\n", what.c_str());
    std::exit(2);
  };
  for (int i = first; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) fail("missing a value after " + std::string(flag));
    const std::string_view value = argv[++i];
    if (flag == "--collectives") {
      p.collectives.clear();
      for (const std::string& word : split(value)) {
        const auto c = parse(word);
        if (!c) fail("no collective called " + word);
        p.collectives.push_back(*c);
      }
    } else if (flag == "--sizes") {
      p.sizes.clear();
      for (const std::string& word : split(value)) p.sizes.push_back(std::stoull(word));
    } else if (flag == "--calls") {
      p.calls = std::stoi(std::string(value));
    } else if (flag == "--memory-gib") {
      p.memory_bytes = std::stod(std::string(value)) * double(1ULL << 30);
    } else if (flag == "--flows") {
      p.flows = std::stod(std::string(value));
    } else {
      fail("unknown option " + std::string(flag));
    }
  }
  if (p.calls < 1) fail("--calls must be at least 1");
  return p;
}

/// The plan's cells in order: each collective at every size, the barrier once (size 0).
inline std::vector<std::pair<collective, std::size_t>> cells(const plan& p) {
  std::vector<std::pair<collective, std::size_t>> out;
  for (collective c : p.collectives) {
    if (c == collective::barrier) {
      out.emplace_back(c, 0);
      continue;
    }
    for (std::size_t bytes : p.sizes) out.emplace_back(c, bytes);
  }
  return out;
}

/// A rank's buffer bytes for `c` at n bytes on p ranks (its input and output, and the scratch
/// a reduction folds from).
inline double rank_bytes(collective c, double n, double p) {
  switch (c) {
    case collective::barrier:
      return 0;
    case collective::bcast:
      return n;
    case collective::allreduce:
      return 2 * n;
    case collective::allgather:
      return n + p * n;
    case collective::alltoall:
      return 2 * p * n;
  }
  return 0;
}

/// Why the cell is not run, or empty when it is.
inline std::string skipped(const plan& p, collective c, std::size_t bytes, int ranks) {
  const double job_bytes = rank_bytes(c, double(bytes), ranks) * ranks;
  if (job_bytes > p.memory_bytes) {
    return "memory:" + std::to_string(static_cast<long long>(job_bytes / double(1ULL << 20))) +
           "MiB";
  }
  if (c == collective::alltoall && double(ranks) * (ranks - 1) > p.flows) {
    return "flows:" + std::to_string(static_cast<long long>(double(ranks) * (ranks - 1)));
  }
  return {};
}

/// Times one cell: `line_up(to, from)` is the start line's exchange, `now()` the simulated
/// clock in seconds, `call(i)` one call, `least(x)` and `most(x)` the minimum and maximum of x
/// over the ranks.
template <class LineUp, class Now, class Call, class Least, class Most>
double time_cell(int rank, int size, int calls, LineUp&& line_up, Now&& now, Call&& call,
                 Least&& least, Most&& most) {
  call(-1);  // a first call outside the timing: connections, first-touch of buffers
  scale_probe::start_line(rank, size, line_up);
  const double start = now();
  for (int i = 0; i < calls; ++i) call(i);
  const double end = now();
  return (most(end) - least(start)) / calls * 1e6;
}

/// One result line, read by bench/sim_scale.py.
inline void print_cell(std::string_view side, collective c, std::size_t bytes, int ranks, double us,
                       std::string_view algorithm, std::string_view skip) {
  if (!skip.empty()) {
    std::printf("cell side=%.*s collective=%.*s bytes=%zu ranks=%d skipped=%.*s\n",
                int(side.size()), side.data(), int(name(c).size()), name(c).data(), bytes, ranks,
                int(skip.size()), skip.data());
  } else {
    std::printf("cell side=%.*s collective=%.*s bytes=%zu ranks=%d us=%.3f algorithm=%.*s\n",
                int(side.size()), side.data(), int(name(c).size()), name(c).data(), bytes, ranks,
                us, int(algorithm.size()), algorithm.data());
  }
  std::fflush(stdout);
}

}  // namespace sim_study
