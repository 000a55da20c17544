// SPDX-License-Identifier: MIT
// coll::native hands collectives to MPI: over any transport but transport::mpi the collectives
// concept rejects it.
#include "commx/coll/native.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"

#ifdef COMMX_COMPILE_FAIL_CONTROL
using stack = commx::communicator<commx::transport::mpi, commx::coll::native>;
#else
using stack = commx::communicator<commx::transport::inproc, commx::coll::native>;
#endif

int main() { return sizeof(stack) > 0 ? 0 : 1; }
