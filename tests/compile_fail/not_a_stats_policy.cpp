// SPDX-License-Identifier: MIT
// A stats type without the hooks is rejected by the stats policy concept.
#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"

struct no_hooks {
  static constexpr bool enabled = true;
};

#ifdef COMMX_COMPILE_FAIL_CONTROL
using stack =
    commx::communicator<commx::transport::inproc, commx::coll::flat, commx::stats::counting>;
#else
using stack = commx::communicator<commx::transport::inproc, commx::coll::flat, no_hooks>;
#endif

int main() { return sizeof(stack) > 0 ? 0 : 1; }
