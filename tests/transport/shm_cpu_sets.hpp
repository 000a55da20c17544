// SPDX-License-Identifier: MIT
#pragma once
// CPU sets as shm ranks publish them, for the tests of who crowds whose core
// (detail/shm/cpu_sharing.hpp).
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "commx/transport/detail/shm/cpu_sharing.hpp"

namespace commx::test {

inline detail::shm::cpu_words cpu_set_of(std::initializer_list<int> cpus) {
  detail::shm::cpu_words set;
  for (const int cpu : cpus) set.add(cpu);
  return set;
}

/// The sharing of rank `rank`'s set among `sets`, one per rank.
inline detail::shm::cpu_sharing sharing_among(const std::vector<detail::shm::cpu_words>& sets,
                                              int rank) {
  return detail::shm::sharing_of(
      sets[static_cast<std::size_t>(rank)], static_cast<int>(sets.size()),
      [&](int r) -> const detail::shm::cpu_words& { return sets[static_cast<std::size_t>(r)]; });
}

}  // namespace commx::test
