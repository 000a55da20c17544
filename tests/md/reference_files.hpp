// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Readers for the reference data in examples/md_replicated/reference/: LAMMPS dumps and the
/// NIST sample configurations. Test-only: the program itself reads thermo tables only.

#include <cstddef>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/beside_this_program.hpp"

namespace md::test {

[[nodiscard]] inline std::string reference_path(const std::string& name) {
  return commx::test::beside_this_program(MD_REFERENCE_DIR) + "/" + name;
}

/// One atom of a LAMMPS dump with columns id x y z ix iy iz vx vy vz fx fy fz pe.
struct dump_atom {
  long id = 0;
  double x[3] = {};
  int image[3] = {};
  double v[3] = {};
  double f[3] = {};
  double pe = 0;
};

struct dump {
  double box_length = 0;
  std::vector<dump_atom> atoms;  // ordered by id
};

[[nodiscard]] inline dump read_dump(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  dump d;
  std::string line;
  std::size_t count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("ITEM: NUMBER OF ATOMS", 0) == 0) {
      in >> count;
    } else if (line.rfind("ITEM: BOX BOUNDS", 0) == 0) {
      double lo = 0, hi = 0;
      in >> lo >> hi;
      d.box_length = hi - lo;
    } else if (line.rfind("ITEM: ATOMS", 0) == 0) {
      d.atoms.resize(count);
      for (std::size_t k = 0; k < count; ++k) {
        dump_atom a;
        in >> a.id >> a.x[0] >> a.x[1] >> a.x[2] >> a.image[0] >> a.image[1] >> a.image[2] >>
            a.v[0] >> a.v[1] >> a.v[2] >> a.f[0] >> a.f[1] >> a.f[2] >> a.pe;
        if (!in || a.id < 1 || static_cast<std::size_t>(a.id) > count) {
          throw std::runtime_error("bad atom line in " + path);
        }
        d.atoms[static_cast<std::size_t>(a.id - 1)] = a;
      }
    }
  }
  if (d.atoms.empty()) throw std::runtime_error("no atoms in " + path);
  return d;
}

/// A NIST "Lennard-Jones Fluid Reference Calculations" sample configuration.
struct nist_config {
  double box_length = 0;
  std::vector<double> x;  // 3 per atom, as in the file (not wrapped)
};

[[nodiscard]] inline nist_config read_nist(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  nist_config c;
  double ly = 0, lz = 0;
  std::size_t n = 0;
  in >> c.box_length >> ly >> lz >> n;
  if (!in || ly != c.box_length || lz != c.box_length) {
    throw std::runtime_error("not a cubic NIST configuration: " + path);
  }
  c.x.resize(3 * n);
  for (std::size_t i = 0; i < n; ++i) {
    long id = 0;
    in >> id >> c.x[3 * i] >> c.x[3 * i + 1] >> c.x[3 * i + 2];
  }
  if (!in) throw std::runtime_error("truncated NIST configuration: " + path);
  return c;
}

}  // namespace md::test
