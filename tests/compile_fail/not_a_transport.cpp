// SPDX-License-Identifier: MIT
// A transport without test(), result(), ... is rejected by the transport concept.
#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"

struct half_a_transport {
  using request = int;
  static constexpr std::string_view name = "half";
  int rank() const { return 0; }
  int size() const { return 1; }
};

#ifdef COMMX_COMPILE_FAIL_CONTROL
using stack = commx::communicator<commx::transport::inproc>;
#else
using stack = commx::communicator<half_a_transport>;
#endif

int main() { return sizeof(stack) > 0 ? 0 : 1; }
