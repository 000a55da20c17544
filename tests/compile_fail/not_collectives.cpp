// SPDX-License-Identifier: MIT
// A collectives policy that lacks most collectives is rejected by the collectives concept.
#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"

struct only_barrier {
  static constexpr std::string_view name = "only-barrier";
  static constexpr std::string_view description = "has a barrier and nothing else";
  template <class T>
  static constexpr bool supports = true;
  template <class Port>
  static void barrier(Port&) {}
};

#ifdef COMMX_COMPILE_FAIL_CONTROL
using stack = commx::communicator<commx::transport::inproc, commx::coll::flat>;
#else
using stack = commx::communicator<commx::transport::inproc, only_barrier>;
#endif

int main() { return sizeof(stack) > 0 ? 0 : 1; }
