// SPDX-License-Identifier: MIT
// The smallest commx application, built by the packaging tests once per stack.
#include <cstdio>
#include <cstdlib>

#include "commx/variant.hpp"

int main() {
  int sum = -1;
  commx::run_inproc<commx::variant::communicator>(4, [&](auto& world) {
    const int total = world.allreduce_value(world.rank(), std::plus<>{});
    if (world.rank() == 0) sum = total;
  });
  std::printf("%.*s: sum of ranks 0..3 = %d\n",
              static_cast<int>(commx::variant::target_name.size()),
              commx::variant::target_name.data(), sum);
  return sum == 6 ? EXIT_SUCCESS : EXIT_FAILURE;
}
