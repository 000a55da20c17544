// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The one-sided part of the conformance suite: active messages (commx/active_messages.hpp)
/// and windows (commx/window.hpp), as checks that every rank of a job runs, on any stack (the
/// same `named_check` list as conformance.hpp's).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "commx/active_messages.hpp"
#include "commx/communicator.hpp"
#include "commx/window.hpp"
#include "support/check.hpp"
#include "transport/conformance.hpp"

namespace commx::test::onesided {

using namespace std::chrono_literals;
using conformance::named_check;

inline double pattern(int rank, std::size_t i, int epoch = 0) {
  return static_cast<double>(rank) * 1e6 + static_cast<double>(i) + epoch * 0.5;
}

/// Posts, calls with every kind of argument and answer, a handler that throws (the caller gets
/// the error, the target goes on), and misuse refused at the origin.
template <class Comm>
void active_message_calls(Comm& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  std::int64_t total = 0;
  handler_table handlers;
  handlers.on<std::int64_t>("add", [&](int, std::int64_t v) { total += v; });
  handlers.on<int>("square", [](int, int v) { return v * v; });
  handlers.on<std::vector<double>>("reverse", [](int, std::vector<double> v) {
    std::reverse(v.begin(), v.end());
    return v;
  });
  handlers.on<std::vector<std::string>>("join", [](int source, std::vector<std::string> words) {
    std::string joined = std::to_string(source);
    for (const auto& w : words) joined += "," + w;
    return joined;
  });
  handlers.on<int>("fail", [](int, int v) -> int {
    throw std::runtime_error("handler refuses " + std::to_string(v));
  });
  handlers.on<int>("fail_typed", [](int, int) -> int {
    throw error(errc::collective_mismatch, "typed failure");
  });
  active_messages am(comm, std::move(handlers));

  for (int target = 0; target < n; ++target) {
    for (int i = 0; i < 10; ++i) am.post(target, "add", std::int64_t{me + 1});
    COMMX_CHECK_EQ(am.template call<int>(target, "square", me + target).get(),
                   (me + target) * (me + target));
    std::vector<double> values(static_cast<std::size_t>(target + 1) * 3000);
    std::iota(values.begin(), values.end(), static_cast<double>(me));
    auto reversed = am.template call<std::vector<double>>(target, "reverse", values).get();
    std::reverse(values.begin(), values.end());
    COMMX_CHECK(reversed == values);
    const std::vector<std::string> words{"a", std::string(100, 'b')};
    COMMX_CHECK_EQ(am.template call<std::string>(target, "join", words).get(),
                   std::to_string(me) + ",a," + std::string(100, 'b'));
    const error failed =
        COMMX_EXPECT_ERROR(errc::handler_failed, am.template call<int>(target, "fail", 7).get());
    COMMX_CHECK(std::string(failed.what()).find("handler refuses 7") != std::string::npos);
    COMMX_EXPECT_ERROR(errc::collective_mismatch,
                       am.template call<int>(target, "fail_typed", 1).get());
    // The target went on.
    COMMX_CHECK_EQ(am.template call<int>(target, "square", 3).get(), 9);
  }
  COMMX_EXPECT_ERROR(errc::invalid_argument, am.post(0, "nobody", 1));
  COMMX_EXPECT_ERROR(errc::invalid_argument, am.post(n, "add", std::int64_t{1}));
  COMMX_EXPECT_ERROR(errc::type_mismatch, am.template call<int>(0, "square", 'x').get());
  am.flush();
  comm.barrier();  // serves the others' posts to this rank while it waits
  COMMX_CHECK_EQ(total, 10 * static_cast<std::int64_t>(n) * (n + 1) / 2);

  // A failed post is raised by the next flush.
  am.post((me + 1) % n, "fail", 1);
  COMMX_EXPECT_ERROR(errc::handler_failed, am.flush());
  comm.barrier();
}

/// Ranks that register different handlers are told so, every one of them.
template <class Comm>
void active_message_mismatch(Comm& comm) {
  handler_table handlers;
  handlers.on<int>("common", [](int, int) {});
  if (comm.rank() == comm.size() - 1 && comm.size() > 1) {
    handlers.on<int>("extra", [](int, int) {});
  }
  if (comm.size() > 1) {
    COMMX_EXPECT_ERROR(errc::invalid_argument, active_messages(comm, std::move(handlers)));
  }
  handler_table twice;
  twice.on<int>("x", [](int, int) {});
  COMMX_EXPECT_ERROR(errc::invalid_argument, twice.on<int>("x", [](int, int) {}));
}

/// put and get of every size class, over three fence epochs, into a span the rank owns and into
/// memory the window allocates (which some transports reach by other means: shm maps it, UCX
/// allocates it).
template <class Comm>
void window_put_get(Comm& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  const int next = (me + 1) % n;
  const int previous = (me + n - 1) % n;
  for (const std::size_t count :
       {std::size_t{1}, std::size_t{16}, std::size_t{1024}, std::size_t{32768}})
    for (const bool allocated : {false, true}) {
      std::vector<double> owned(count + 3, -1.0);
      window<double, Comm> win = allocated ? window<double, Comm>(comm, count + 3)
                                           : window<double, Comm>(comm, std::span<double>(owned));
      const std::span<double> exposed = win.local();
      std::fill(exposed.begin(), exposed.end(), -1.0);
      COMMX_CHECK_EQ(win.size_at(next), count + 3);
      win.fence();  // the first epoch (MPI's rule: operations belong in an epoch)
      for (int epoch = 0; epoch < 3; ++epoch) {
        std::vector<double> data(count);
        for (std::size_t i = 0; i < count; ++i) data[i] = pattern(me, i, epoch);
        win.put(std::span<const double>(data), next, 2);
        std::fill(data.begin(), data.end(), 0.0);  // copied at the call: reusable at once
        win.fence();
        for (std::size_t i = 0; i < count; ++i)
          COMMX_CHECK_EQ(exposed[i + 2], pattern(previous, i, epoch));
        COMMX_CHECK_EQ(exposed[0], -1.0);
        COMMX_CHECK_EQ(exposed[count + 2], -1.0);
        std::vector<double> back(count);
        win.get(std::span<double>(back), next, 2);  // where this rank put its data
        win.fence();
        for (std::size_t i = 0; i < count; ++i) COMMX_CHECK_EQ(back[i], pattern(me, i, epoch));
      }
      win.free();
    }
}

/// Every rank accumulates into one element of rank 0 at once: no update is lost; fetch_and_op
/// hands out unique tickets; exactly one compare_and_swap wins.
template <class Comm>
void window_atomics(Comm& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  constexpr int rounds = 50;
  window<std::int64_t, Comm> win(comm, 4);
  // Memory the window allocates is mapped wherever the stack lets a node's ranks map each
  // other's and the whole communicator is on one node.
  constexpr bool maps = requires { requires Comm::transport_type::shares_node_memory; };
  COMMX_CHECK_EQ(win.mapped(), maps && comm.split_by_node().size() == n);
  // And on mpi (over Open MPI) and ucx the transport's own remote memory access carries it.
  constexpr bool rma = requires { typename Comm::transport_type::template rma_window<int>; };
  COMMX_CHECK_EQ(win.carried_by_transport(), rma);
  win.fence();
  std::vector<std::int64_t> tickets;
  for (int i = 0; i < rounds; ++i) {
    win.accumulate(std::int64_t{1}, 0, 0, std::plus<>{});
    win.accumulate(std::int64_t{me}, 0, 1, op::max{});
    if (i % 5 == 0) tickets.push_back(win.fetch_and_op(std::int64_t{1}, 0, 2, std::plus<>{}));
  }
  const std::int64_t old = win.compare_and_swap(0, me + 1, 0, 3);
  win.fence();
  if (me == 0) {
    COMMX_CHECK_EQ(win.local()[0], std::int64_t{rounds} * n);
    COMMX_CHECK_EQ(win.local()[1], std::int64_t{n - 1});
    COMMX_CHECK_EQ(win.local()[2], std::int64_t{rounds / 5} * n);
    COMMX_CHECK(win.local()[3] >= 1 && win.local()[3] <= n);
  }
  std::vector<std::int64_t> all(tickets.size() * static_cast<std::size_t>(n));
  comm.allgather(tickets, all);
  COMMX_CHECK_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), all.size());
  COMMX_CHECK_EQ(*std::max_element(all.begin(), all.end()),
                 static_cast<std::int64_t>(all.size()) - 1);
  COMMX_CHECK_EQ(comm.allreduce_value(old == 0 ? 1 : 0, std::plus<>{}), 1);
  win.free();
}

/// A read-modify-write under an exclusive lock loses no update; shared locks read together.
template <class Comm>
void window_locks(Comm& comm) {
  const int n = comm.size();
  const int owner = n - 1;
  constexpr int rounds = 20;
  window<std::int64_t, Comm> win(comm, 1);
  for (int i = 0; i < rounds; ++i) {
    win.lock(owner, lock_type::exclusive);
    std::int64_t value = -1;
    win.get(std::span<std::int64_t>(&value, 1), owner, 0);
    win.flush(owner);
    win.put(value + 1, owner, 0);
    win.unlock(owner);
  }
  win.lock_all();
  std::int64_t seen = -1;
  win.get(std::span<std::int64_t>(&seen, 1), owner, 0);
  win.flush_all();
  win.unlock_all();
  COMMX_CHECK(seen >= rounds && seen <= std::int64_t{rounds} * n);
  win.fence();
  if (comm.rank() == owner) COMMX_CHECK_EQ(win.local()[0], std::int64_t{rounds} * n);
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.unlock(owner));
  win.free();
}

/// While rank 0 holds a target exclusively, rank 1's locks there, shared or exclusive, are not
/// granted (they time out); once it is released they are, and a lock that timed out holds
/// nothing: every rank can take the target exclusively afterwards.
template <class Comm>
void window_lock_exclusion(Comm& comm) {
  const int n = comm.size();
  if (n < 2) return;
  const int owner = n - 1;
  constexpr int held = 31;
  constexpr int refused = 32;
  window<std::int64_t, Comm> win(comm, 1);
  if (comm.rank() == 0) {
    win.lock(owner, lock_type::exclusive);
    win.put(7, owner, 0);
    comm.send(1, held, 1);
    int done = 0;
    comm.recv(1, refused, done);
    win.unlock(owner);
  } else if (comm.rank() == 1) {
    int go = 0;
    comm.recv(0, held, go);
    for (const lock_type type : {lock_type::shared, lock_type::exclusive}) {
      COMMX_EXPECT_ERROR(errc::timeout, win.lock(owner, type, std::chrono::milliseconds(50)));
    }
    comm.send(0, refused, 1);
    win.lock(owner, lock_type::shared);
    std::int64_t seen = -1;
    win.get(std::span<std::int64_t>(&seen, 1), owner, 0);
    win.unlock(owner);
    COMMX_CHECK_EQ(seen, 7);
  }
  comm.barrier();
  win.lock(owner, lock_type::exclusive);
  win.accumulate(1, owner, 0, std::plus<>{});
  win.unlock(owner);
  win.fence();
  if (comm.rank() == owner) COMMX_CHECK_EQ(win.local()[0], std::int64_t{7} + n);
  win.free();
}

/// A put flushed before a message is visible to the target when the message arrives.
template <class Comm>
void window_flush_visibility(Comm& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  window<int, Comm> win(comm, static_cast<std::size_t>(n));
  const int next = (me + 1) % n;
  const int previous = (me + n - 1) % n;
  win.lock_all();
  win.put(1000 + me, next, static_cast<std::size_t>(me));
  win.flush(next);
  comm.send(next, 5, me);
  int from = -1;
  comm.recv(previous, 5, from);
  COMMX_CHECK_EQ(win.local()[static_cast<std::size_t>(previous)], 1000 + previous);
  win.unlock_all();
  win.free();
}

/// Access outside a target's window is refused at the origin and writes nothing.
template <class Comm>
void window_out_of_range(Comm& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  window<int, Comm> win(comm, 8);
  const int next = (me + 1) % n;
  const std::vector<int> three{7, 7, 7};
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.put(std::span<const int>(three), next, 6));
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.put(1, next, 8));
  std::vector<int> out(9);
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.get(std::span<int>(out), next, 0));
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.accumulate(1, next, 99, std::plus<>{}));
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.fetch_and_op(1, n, 0, std::plus<>{}));
  win.fence();
  COMMX_CHECK(std::ranges::all_of(win.local(), [](int v) { return v == 0; }));
  win.free();
  // A freed window refuses every call, and stops listening: nothing of it is left among the
  // rank's running work for later calls to poll.
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.put(1, next, 0));
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.fence());
  COMMX_EXPECT_ERROR(errc::invalid_argument, win.free());
  COMMX_CHECK(detail::communicator_access::state(comm).running.empty());
  COMMX_CHECK(comm.allreduce_value(1, std::plus<>{}) == n);
}

template <class Comm>
std::vector<named_check<Comm>> job_checks() {
  return {
      {"active_message_calls", &active_message_calls<Comm>},
      {"active_message_mismatch", &active_message_mismatch<Comm>},
      {"window_put_get", &window_put_get<Comm>},
      {"window_atomics", &window_atomics<Comm>},
      {"window_locks", &window_locks<Comm>},
      {"window_lock_exclusion", &window_lock_exclusion<Comm>},
      {"window_flush_visibility", &window_flush_visibility<Comm>},
      {"window_out_of_range", &window_out_of_range<Comm>},
  };
}

/// A window and active messages made while every rank is there; then every rank but 0 leaves
/// (conformance::peer_gone), and rank 0's operations to a rank that left fail with
/// errc::peer_lost, without waiting out a deadline.
template <class Comm, class Leave>
void target_gone(Comm& world, Leave&& leave) {
  window<int, Comm> win(world, 4);
  handler_table handlers;
  handlers.on<int>("echo", [](int, int v) { return v; });
  active_messages am(world, std::move(handlers));
  win.fence();
  const int last = world.size() - 1;
  leave(world);
  if (world.rank() != 0) return;
  const auto start = clock::now();
  win.lock(0);  // this rank's own window goes on working
  win.put(5, 0, 0);
  win.unlock(0);
  COMMX_CHECK_EQ(win.local()[0], 5);
  COMMX_EXPECT_ERROR(errc::peer_lost, {
    win.put(1, last, 0);
    win.flush(last, 30s);
  });
  COMMX_EXPECT_ERROR(errc::peer_lost, win.fetch_and_op(1, last, 1, std::plus<>{}, 30s));
  COMMX_EXPECT_ERROR(errc::peer_lost, am.template call<int>(last, "echo", 1).get(30s));
  COMMX_CHECK(clock::now() - start < 30s);
}

}  // namespace commx::test::onesided
