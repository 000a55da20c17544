// SPDX-License-Identifier: MIT
// One rank of a tcp job that joins and leaves: enough for the connection lines of COMMX_LOG.
#include "commx/transport/tcp.hpp"

int main() {
  auto tcp = commx::transport::tcp::from_env();
  return tcp.size() == 2 ? 0 : 1;
}
