// SPDX-License-Identifier: MIT
// When a wait looks for recovery (detail/recovery.hpp, recovery_state::due): not only when
// something arrived since the last look. A look takes in only the watched communicator's
// notices and answers only agreements already decided, so what it leaves queued must be looked
// at again once it can be handled, even if nothing more arrives: a wait that slept until its
// deadline instead held a late coordinator until its own deadline (recovery.sweep: the other
// survivors then agreed it lost).
// Two inproc endpoints; rank 0's waits are the library's (wait_watched), rank 1 is driven by
// hand.

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>

#include "commx/detail/recovery.hpp"
#include "commx/request.hpp"
#include "commx/transport/inproc.hpp"

namespace {

using commx::clock;
using commx::transport::inproc;
namespace detail = commx::detail;

constexpr auto patience = std::chrono::seconds(5);

struct two_ranks {
  std::shared_ptr<inproc::hub> hub = std::make_shared<inproc::hub>(2, inproc::hub_options{});
  detail::rank_state<inproc, commx::stats::none> zero{inproc(hub, 0)};
  inproc one{hub, 1};
  detail::group world{2};
};

std::array<std::byte, 1> message_of(detail::agreement_kind kind) {
  return {static_cast<std::byte>(kind)};
}

}  // namespace

TEST_CASE("a question that came before its agreement was decided is answered once it is",
          "[recovery]") {
  two_ranks job;
  constexpr std::uint32_t agreement = 7;
  const auto proposal = message_of(detail::agreement_kind::proposal);
  // A late coordinator (rank 1) proposes while rank 0 is still in agreement 7: rank 0 looks,
  // and leaves the proposal queued, having nothing to answer it with yet.
  (void)job.one.isend(0, job.world.channel(), detail::recovery_tag::down(agreement), proposal);
  detail::look_for_recovery(job.zero, &job.world, clock::now());
  REQUIRE(job.zero.endpoint.iprobe(1, job.world.channel(), detail::recovery_tag::down(agreement)));
  const auto decision = message_of(detail::agreement_kind::decision);
  job.zero.recovery.decided(job.world.channel(), agreement, decision);

  // Rank 0 then waits for rank 1, which sends only once it has rank 0's acknowledgement.
  std::thread coordinator([&] {
    std::array<std::byte, 8> ack{};
    auto acked = job.one.irecv(0, job.world.channel(), detail::recovery_tag::up(agreement),
                               commx::transport::recv_buffer(std::span<std::byte>(ack)));
    if (detail::wait_until(job.one, acked, clock::now() + patience)) {
      (void)job.one.isend(0, 0, 1, std::span<const std::byte>());
    } else {
      (void)job.one.cancel(acked);
    }
  });
  auto go = job.zero.endpoint.irecv(1, 0, 1, commx::transport::recv_buffer(std::span<std::byte>()));
  const detail::wait_end end =
      detail::wait_watched(job.zero, job.world, go, clock::now() + 2 * patience);
  coordinator.join();
  CHECK(end == detail::wait_end::completed);
  if (end != detail::wait_end::completed) (void)job.zero.endpoint.cancel(go);
}

TEST_CASE("a notice for one communicator, queued while another was watched, ends a wait on it",
          "[recovery]") {
  two_ranks job;
  const detail::group other({0, 1}, 2, commx::context_id{10});
  (void)job.one.isend(0, other.channel(), detail::recovery_tag::revocation,
                      std::span<const std::byte>());
  // A wait on the world looks and takes in the world's notices only.
  detail::look_for_recovery(job.zero, &job.world, clock::now());
  CHECK_FALSE(other.revoked());

  // Nothing more arrives; a wait on `other` must still find its notice.
  auto never = job.zero.endpoint.irecv(1, commx::context_id{10}, 5,
                                       commx::transport::recv_buffer(std::span<std::byte>()));
  const detail::wait_end end =
      detail::wait_watched(job.zero, other, never, clock::now() + patience);
  CHECK(end == detail::wait_end::revoked);
  CHECK(other.revoked());
  CHECK(job.zero.endpoint.cancel(never));
}
