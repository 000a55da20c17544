// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Reference thermo tables (as LAMMPS writes them, one row per printed step: Step Temp E_pair
/// E_mol TotEng Press, further columns ignored) and the comparison of a run against one.

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "thermo.hpp"

namespace md {

/// Reads a table: blank lines, '#' comments and a "Step ..." header line are skipped; every
/// other line must start with an integer step and five finite numbers.
/// @throws std::runtime_error naming the file and line if it cannot be read or parsed.
[[nodiscard]] inline std::vector<thermo_row> read_thermo_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot open reference file '{}'", path));
  std::vector<thermo_row> rows;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#' || line.compare(start, 4, "Step") == 0) {
      continue;
    }
    std::istringstream fields(line);
    std::vector<double> values;
    for (std::string field; fields >> field;) {
      char* end = nullptr;
      errno = 0;
      const double value = std::strtod(field.c_str(), &end);
      if (*end != '\0' || errno == ERANGE || !std::isfinite(value)) {
        throw std::runtime_error(
            fmt::format("{}:{}: '{}' is not a number (expected a LAMMPS thermo table: Step Temp "
                        "E_pair E_mol TotEng Press ...)",
                        path, number, field));
      }
      values.push_back(value);
    }
    if (values.size() < 6) {
      throw std::runtime_error(fmt::format(
          "{}:{}: {} columns where a thermo row has at least 6 (Step Temp E_pair E_mol TotEng "
          "Press)",
          path, number, values.size()));
    }
    if (values[0] < 0 || values[0] != std::floor(values[0]) || values[0] > 1e15) {
      throw std::runtime_error(
          fmt::format("{}:{}: step '{}' is not a step number", path, number, values[0]));
    }
    rows.push_back(
        {static_cast<long>(values[0]), values[1], values[2], values[3], values[4], values[5]});
  }
  if (in.bad()) throw std::runtime_error(fmt::format("error reading reference file '{}'", path));
  if (rows.empty()) {
    throw std::runtime_error(fmt::format("reference file '{}' holds no thermo rows", path));
  }
  return rows;
}

/// Relative difference, with exact zeros (E_mol) comparing equal to zero.
[[nodiscard]] inline double relative_error(double value, double reference) {
  if (value == reference) return 0;
  return std::abs(value - reference) / std::max(std::abs(reference), 1e-300);
}

struct thermo_comparison {
  int steps_compared = 0;
  double max_error_step0 = 0;  // largest relative error over the columns at step 0
  double max_error = 0;        // over every compared step
  long worst_step = -1;
  bool matches = false;
};

/// Compares the rows of `run` whose step the reference has: within `tolerance_step0` relative
/// at step 0 and `tolerance` elsewhere, on Temp, E_pair, E_mol, TotEng and Press. No common
/// step is a mismatch.
[[nodiscard]] inline thermo_comparison compare_thermo(const std::vector<thermo_row>& run,
                                                      const std::vector<thermo_row>& reference,
                                                      double tolerance_step0 = 1e-10,
                                                      double tolerance = 1e-8) {
  thermo_comparison result;
  bool within = true;
  for (const thermo_row& row : run) {
    const auto ref = std::find_if(reference.begin(), reference.end(),
                                  [&](const thermo_row& r) { return r.step == row.step; });
    if (ref == reference.end()) continue;
    const double errors[] = {
        relative_error(row.temp, ref->temp), relative_error(row.e_pair, ref->e_pair),
        relative_error(row.e_mol, ref->e_mol), relative_error(row.tot_eng, ref->tot_eng),
        relative_error(row.press, ref->press)};
    const double worst = *std::max_element(std::begin(errors), std::end(errors));
    ++result.steps_compared;
    if (row.step == 0) result.max_error_step0 = worst;
    if (worst >= result.max_error) {
      result.max_error = worst;
      result.worst_step = row.step;
    }
    // Written so that a NaN fails.
    if (!(worst <= (row.step == 0 ? tolerance_step0 : tolerance))) within = false;
  }
  result.matches = within && result.steps_compared > 0;
  return result;
}

}  // namespace md
