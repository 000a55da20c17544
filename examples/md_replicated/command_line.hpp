// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The program's options. Anything it cannot use is refused with a message saying why, before
/// any rank starts.

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "run_config.hpp"

namespace md {

struct command_line {
  run_config config;
  std::optional<std::string> reference;  // a thermo table to compare against
  bool reproducible = false;             // rank-order reductions: the same bits under every policy
  bool survive = false;                  // go on after ranks die (surviving.hpp)
  std::optional<std::string> collectives;  // the policy to run with, by name
  bool list_collectives = false;
  bool help = false;
};

/// Raised for options the program cannot run with; what() is the message for the user.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr int max_cells = 60;  // 864,000 atoms: about 100 MB per rank, minutes per step
inline constexpr int min_cells = 4;   // a smaller box is less than twice the list cutoff wide
inline constexpr long max_steps = 100'000'000;

[[nodiscard]] inline std::string usage(std::string_view program) {
  return fmt::format(
      "usage: {} [options]\n"
      "\n"
      "Lennard-Jones MD (LAMMPS's bench/in.lj: fcc at density 0.8442, T 1.44, cutoff 2.5,\n"
      "skin 0.3, neighbour list rebuilt every 20 steps), replicated data over a commx\n"
      "communicator. Rank 0 prints LAMMPS-style thermo, a per-rank timing report and one\n"
      "machine-readable 'RESULT key=value ...' line.\n"
      "\n"
      "options:\n"
      "  --atoms-cells L     box of L x L x L fcc cells, 4 L^3 atoms ({}..{}; default 20: 32000)\n"
      "  --steps N           time steps after step 0 (0..{}; default 100)\n"
      "  --thermo-every N    thermo every N steps, plus the first and last (default 10; 0: first\n"
      "                      and last only)\n"
      "  --reference FILE    compare the thermo with a LAMMPS thermo table (Step Temp E_pair\n"
      "                      E_mol TotEng Press ...): 1e-10 relative at step 0, 1e-8 after\n"
      "  --reproducible      sum forces in rank order whatever the collectives policy, so every\n"
      "                      policy gives the same bits (default: the policy's own allreduce,\n"
      "                      whose bits depend on the policy and rank count, not the transport)\n"
      "  --survive           go on when ranks die: the survivors shrink the communicator, go\n"
      "                      back to the last step all of them completed and share the pairs\n"
      "                      among themselves; forces are summed in fixed point, so the end\n"
      "                      state has the same bits whatever ranks were lost (stacks that tell\n"
      "                      failures: not mpi, mpi+wan; kill ranks with a faulty_ build and\n"
      "                      COMMX_FAULTS, run it with commxrun --keep-going)\n"
      "  --collectives NAME  the collectives policy to run with, of those the program was built\n"
      "                      with (default tuned)\n"
      "  --list-collectives  print those policies' names and exit\n"
      "  -h, --help          this text\n"
      "\n"
      "Ranks: COMMX_INPROC_RANKS=N for the in-process stack; commxrun -n N, mpirun -np N for the\n"
      "others.\n",
      program, min_cells, max_cells, max_steps);
}

namespace detail {

[[nodiscard]] inline long parse_integer(std::string_view option, const std::string& text, long low,
                                        long high) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    throw usage_error(fmt::format("{} '{}': not an integer", option, text));
  }
  if (errno == ERANGE || value < low || value > high) {
    throw usage_error(fmt::format("{} {}: must be in [{}, {}]", option, text, low, high));
  }
  return value;
}

}  // namespace detail

/// @throws usage_error for unknown options, missing values and values out of range.
[[nodiscard]] inline command_line parse_command_line(const std::vector<std::string>& args) {
  command_line parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& option = args[i];
    const auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw usage_error(fmt::format("{} needs a value", option));
      return args[++i];
    };
    if (option == "-h" || option == "--help") {
      parsed.help = true;
    } else if (option == "--atoms-cells") {
      parsed.config.cells =
          static_cast<int>(detail::parse_integer(option, value(), min_cells, max_cells));
    } else if (option == "--steps") {
      parsed.config.steps = detail::parse_integer(option, value(), 0, max_steps);
    } else if (option == "--thermo-every") {
      parsed.config.thermo_every = detail::parse_integer(option, value(), 0, max_steps);
    } else if (option == "--reference") {
      parsed.reference = value();
      if (parsed.reference->empty()) throw usage_error("--reference needs a file name");
    } else if (option == "--reproducible") {
      parsed.reproducible = true;
    } else if (option == "--survive") {
      parsed.survive = true;
    } else if (option == "--collectives") {
      parsed.collectives = value();
    } else if (option == "--list-collectives") {
      parsed.list_collectives = true;
    } else {
      throw usage_error(fmt::format("unknown option '{}' (try --help)", option));
    }
  }
  return parsed;
}

}  // namespace md
