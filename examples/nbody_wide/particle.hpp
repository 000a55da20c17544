// SPDX-License-Identifier: MIT
// One gravitating body. Ranks exchange particles as raw bytes, so the type stays trivially
// copyable with a fixed layout (the snapshot file stores the same 64 bytes).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

namespace nbody {

using vec3 = std::array<double, 3>;

struct particle {
  std::uint64_t id;
  double mass;
  vec3 pos;
  vec3 vel;
};

static_assert(std::is_trivially_copyable_v<particle>);
static_assert(sizeof(particle) == 64, "particle is sent and stored as 64 bytes without padding");

/// What makes `p` unfit for a run in a box of side `box`, or nothing: the one check that a file,
/// a message and a step apply alike.
inline std::optional<std::string> fault_of(const particle& p, double box) {
  bool finite = std::isfinite(p.mass);
  for (int d = 0; d < 3; ++d) finite = finite && std::isfinite(p.pos[d]) && std::isfinite(p.vel[d]);
  if (!finite) return "has a non-finite value";
  if (!(p.mass > 0)) return "has a non-positive mass";
  for (int d = 0; d < 3; ++d) {
    if (!(p.pos[d] >= 0 && p.pos[d] < box)) return "has a position outside [0, box)";
  }
  return std::nullopt;
}

inline double total_mass(std::span<const particle> particles) {
  double m = 0;
  for (const particle& p : particles) m += p.mass;
  return m;
}

}  // namespace nbody
