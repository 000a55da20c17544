// SPDX-License-Identifier: MIT
// The instructions commx adds to a message over MPI, counted without any waiting in them (for
// callgrind, which counts instructions repeatably where timings on a loaded machine are not):
// rank 0 sends `count` 8-byte messages, then rank 1, once they have all arrived (a barrier),
// receives them; each variant in a function of its own. Besides MPI_Recv, the raw side receives
// with MPI_Mprobe + MPI_Get_count + MPI_Mrecv, which is what commx's matched receive costs in
// MPI calls alone. Run:
//   mpirun -np 2 valgrind --tool=callgrind --callgrind-out-file=cg.%p ./bench_mpi_overhead_count
//   callgrind_annotate --inclusive=yes cg.<pid>   (divide by the count printed; the
//   raw_*_all<true> pair is a warm-up)

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "commx/coll/native.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/mpi.hpp"

namespace {

using comm = commx::communicator<commx::transport::mpi, commx::coll::native>;
constexpr int count = 2000;

// noinline: each variant is one function for callgrind to attribute instructions to.
// Instantiated twice: <true> is a warm-up (first messages grow MPI's free lists), not counted.
template <bool warm_up>
[[gnu::noinline]] void raw_send_all(std::span<const double> value) {
  for (int i = 0; i < count; ++i) MPI_Send(value.data(), 1, MPI_DOUBLE, 1, 5, MPI_COMM_WORLD);
}
template <bool warm_up>
[[gnu::noinline]] void raw_receive_all(std::span<double> value) {
  for (int i = 0; i < count; ++i) {
    MPI_Recv(value.data(), 1, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}
// MPI's own price for receiving only what fits: find the message, learn its size, receive it.
[[gnu::noinline]] void raw_send_for_probe(std::span<const double> value) {
  for (int i = 0; i < count; ++i) MPI_Send(value.data(), 1, MPI_DOUBLE, 1, 5, MPI_COMM_WORLD);
}
[[gnu::noinline]] void raw_probe_receive_all(std::span<double> value) {
  for (int i = 0; i < count; ++i) {
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    MPI_Mprobe(0, 5, MPI_COMM_WORLD, &message, &status);
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    MPI_Mrecv(value.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  }
}
// One instantiation per receive path, so callgrind tells them apart.
template <commx::transport::mpi::receive_path>
[[gnu::noinline]] void commx_send_all(comm& world, std::span<const double> value) {
  for (int i = 0; i < count; ++i) world.send(1, 5, value);
}
template <commx::transport::mpi::receive_path>
[[gnu::noinline]] void commx_receive_all(comm& world, std::span<double> value) {
  for (int i = 0; i < count; ++i) world.recv(0, 5, value);
}

template <class Send, class Receive>
void measure(int rank, Send send, Receive receive) {
  std::vector<double> value(1, 1.0);
  if (rank == 0) send(std::span<const double>(value));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) receive(std::span<double>(value));
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main() {
  const commx::init mpi;
  using path = commx::transport::mpi::receive_path;
  comm matched(commx::transport::mpi{MPI_COMM_WORLD, path::matched});
  comm posted(commx::transport::mpi{MPI_COMM_WORLD, path::posted});
  const int rank = matched.rank();
  if (matched.size() != 2) {
    if (rank == 0) std::fprintf(stderr, "bench_mpi_overhead_count needs 2 ranks\n");
    return 1;
  }
  measure(rank, raw_send_all<true>, raw_receive_all<true>);
  measure(rank, raw_send_all<false>, raw_receive_all<false>);
  measure(rank, raw_send_for_probe, raw_probe_receive_all);
  measure(
      rank, [&](std::span<const double> v) { commx_send_all<path::matched>(matched, v); },
      [&](std::span<double> v) { commx_receive_all<path::matched>(matched, v); });
  measure(
      rank, [&](std::span<const double> v) { commx_send_all<path::posted>(posted, v); },
      [&](std::span<double> v) { commx_receive_all<path::posted>(posted, v); });
  if (rank == 0) {
    std::printf("%d messages per variant (raw, raw matched probe, commx matched, commx posted)\n",
                count);
  }
  return 0;
}
