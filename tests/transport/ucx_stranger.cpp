// SPDX-License-Identifier: MIT
// Strangers at a ucx job's ports: each rank finds the TCP ports its own process listens on
// (commx's bootstrap and UCX's TCP transport, UCX_NET_DEVICES=lo keeping that on loopback),
// opens at each a connection that sends 4 KiB of garbage and closes, and one that stays open
// and silent; then the ranks exchange 200 messages around a ring and allreduce. The job must
// finish with every value right: a stranger's connection is UCX's to refuse, and must neither
// crash a rank nor disturb its messages. Rank 0 prints the verdict the test looks for.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/ucx.hpp"

namespace {

// The IPv4 address and port of every socket this process listens on.
std::vector<std::pair<std::uint32_t, int>> own_listeners() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::pair<std::uint32_t, int>> found;
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (state != "0A" || !inodes.contains(inode)) continue;  // 0A: listening
    const auto colon = local.find(':');
    found.emplace_back(static_cast<std::uint32_t>(std::stoul(local.substr(0, colon), nullptr, 16)),
                       std::stoi(local.substr(colon + 1), nullptr, 16));
  }
  return found;
}

// A connection to `address`:`port` (the address as /proc shows it: network order); -1 if none.
int dial(std::uint32_t address, int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = address == 0 ? htonl(INADDR_LOOPBACK) : address;
  if (::connect(s, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

}  // namespace

int main() {
  auto world = commx::communicator<commx::transport::ucx>::from_env();
  const int n = world.size();
  const int me = world.rank();
  std::mt19937 random(static_cast<unsigned>(me) + 1);
  std::vector<char> garbage(4096);
  for (char& c : garbage) c = static_cast<char>(random());
  const auto listeners = own_listeners();
  std::vector<int> silent;
  for (const auto& [address, port] : listeners) {
    if (const int s = dial(address, port); s >= 0) {
      (void)::send(s, garbage.data(), garbage.size(), MSG_NOSIGNAL);
      ::close(s);
    }
    if (const int s = dial(address, port); s >= 0) silent.push_back(s);
  }
  int right = 0;
  const int next = (me + 1) % n;
  const int previous = (me + n - 1) % n;
  for (int i = 0; i < 200; ++i) {
    const int mine = me * 1000 + i;
    auto sent = world.isend(next, 1, mine);
    int got = -1;
    world.recv(previous, 1, got);
    sent.wait();
    right += got == previous * 1000 + i ? 1 : 0;
  }
  const int sum = world.allreduce_value(right, std::plus<>{});
  const int ports = world.allreduce_value(static_cast<int>(listeners.size()), std::plus<>{});
  for (const int s : silent) ::close(s);
  if (me == 0) {
    fmt::print("{} ranks, strangers at {} ports: {} of {} messages right\n", n, ports, sum,
               200 * n);
    if (sum == 200 * n && ports >= 2 * n) fmt::print("the strangers disturbed nothing\n");
  }
  std::fflush(stdout);
  world.barrier();
  return sum == 200 * n ? 0 : 1;
}
