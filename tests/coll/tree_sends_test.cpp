// SPDX-License-Identifier: MIT
// A tree's sends to its children (coll/detail/tree_sends.hpp), seen through a port that records
// what it is asked: large messages to children on other nodes go one after another (a blocking
// send each), everything else is posted at once and waited for together.

#include <catch2/catch.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "commx/coll/detail/tree_sends.hpp"

namespace {

struct recording_port {
  struct pending {
    int peer = -1;
  };
  std::vector<int> nodes;
  int me = 0;
  std::vector<std::string> calls;

  [[nodiscard]] int rank() const { return me; }
  [[nodiscard]] int node_of(int peer) const { return nodes.at(static_cast<std::size_t>(peer)); }
  template <class E>
  pending isend(int peer, std::span<const E> /*data*/) {
    calls.push_back("isend " + std::to_string(peer));
    return {peer};
  }
  template <class E>
  void send(int peer, std::span<const E> /*data*/) {
    calls.push_back("send " + std::to_string(peer));
  }
  void wait_all(std::span<pending> sent) {
    std::string waited = "wait";
    for (const pending& p : sent) {
      waited += ' ';
      waited += std::to_string(p.peer);  // appended: g++ 12 -O3 misreads " " + s as overlapping
    }
    calls.push_back(waited);
  }
};

// Rank 0 on node 0 serves children 4, 2 and 1 (largest subtree first); 1 shares its node.
std::vector<std::string> serve(std::size_t bytes) {
  recording_port port{{0, 0, 1, 1, 2}, 0, {}};
  const std::vector<std::byte> data(bytes);
  commx::coll::detail::tree_sends<recording_port> sends(port);
  for (int child : {4, 2, 1}) sends.send(child, std::span<const std::byte>(data));
  sends.finish();
  return port.calls;
}

}  // namespace

TEST_CASE("a tree sends large messages off its node one child at a time", "[pattern]") {
  using calls = std::vector<std::string>;
  const std::size_t large = commx::coll::detail::one_at_a_time_bytes;
  CHECK(serve(large) == calls{"send 4", "send 2", "isend 1", "wait 1"});
  CHECK(serve(large - 1) == calls{"isend 4", "isend 2", "isend 1", "wait 4 2 1"});
  CHECK(serve(8) == calls{"isend 4", "isend 2", "isend 1", "wait 4 2 1"});
}
