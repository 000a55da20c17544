// SPDX-License-Identifier: MIT
// One gravitating body. Ranks exchange particles as raw bytes, so the type stays trivially
// copyable with a fixed layout (the snapshot file stores the same 64 bytes).
#pragma once

#include <array>
#include <cstdint>
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

}  // namespace nbody
