// SPDX-License-Identifier: MIT
// isend sends from the caller's buffer: a temporary would be gone before the send completes.
#include <vector>

#include "commx/launch.hpp"

int main() {
  commx::run_inproc(1, [](auto& world) {
    std::vector<char> kept(16);
#ifdef COMMX_COMPILE_FAIL_CONTROL
    auto req = world.isend(0, 0, kept);
#else
    auto req = world.isend(0, 0, std::vector<char>(16));
#endif
    world.recv(0, 0, kept);
    req.wait();
  });
}
