// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The shared-memory transport's knobs and the environment variables that set them.
///
/// | variable | meaning | default |
/// |---|---|---|
/// | COMMX_SHM_LARGE | `copy`, `shape`, `auto` or `cma`: how a large message travels (`shape`: pieces through the ring one way, cma in an exchange, when the receiver has large sends of its own in flight; `auto`: the receiver takes cma or pieces, whichever has cost it less lately for that size and shape of traffic, path_choice.hpp; both take pieces when the kernel refuses cma) | copy; cma (where the kernel allows it) while 8 or more ranks share a core (bench/HISTORY.md: auto measured within a few percent of copy, better or worse by collective) |
/// | COMMX_SHM_LARGE_THRESHOLD | bytes; larger messages take the large-message path | 32768; 131072 while ranks outnumber the cores but fewer than 8 share one (`threshold_by_load`) |
/// | COMMX_SHM_RING_BYTES | bytes per ring (a power of two, 4 KiB to 16 MiB); same on every rank | by rank count |
/// | COMMX_SHM_EAGER_WINDOW | bytes of small messages nobody asked for yet that a rank holds from one sender, each counted as its payload plus 64; beyond it they are offered and stay with the sender (credit.hpp). At least one message of the threshold | 1048576 |
/// | COMMX_SHM_STARTUP_TIMEOUT | seconds every rank waits for the others to arrive | 60 |
/// | COMMX_SHM_SPIN | `auto`: a waiting rank spins up to 50 us before it yields while its core is its own, else 8 polls; `n`: n polls (with a pause between) before it yields (waiting.hpp) | auto |
/// | COMMX_SHM_YIELD_US | microseconds a waiting rank yields before it sleeps | 200; while more than 16 ranks share a core, 40 per rank sharing it (waiting.hpp) |

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "commx/bootstrap.hpp"
#include "commx/detail/shared_core.hpp"
#include "commx/error.hpp"

namespace commx::detail::shm {

/// How a message above the threshold travels.
enum class large_path {
  automatic,  ///< per message, the cheaper lately of cma and chunks (chunks when cma is refused)
  cma,        ///< cross-memory attach only; start-up fails if the kernel refuses it
  copy,       ///< pipelined chunks through the ring, always
  by_shape,   ///< chunks one way, cma in an exchange (chunks when cma is refused)
};

/// Whether the way depends on the shape of the traffic (one way, or an exchange: the receiver
/// has large sends of its own in flight), so that the endpoint must note its own large offers.
[[nodiscard]] constexpr bool follows_shape(large_path path) {
  return path == large_path::automatic || path == large_path::by_shape;
}

struct options {
  /// Two pipelined copies through the ring beat one process_vm_readv one way (2026-11-26: 16-59
  /// GB/s against 9-15 GB/s from 64 KiB to 4 MiB) and in most collectives; cma's one copy per
  /// core wins exchanges of buffers nobody just wrote when a cache line crosses slowly
  /// (2026-11-28: Allgather 1 MiB 97 against 115 us). `automatic` measures and chooses
  /// (path_choice.hpp): it finds cma for those exchanges (2026-11-29: 0.84-0.86x copy's time at
  /// 1 MiB in the slow mode), but its retries cost 2-8% elsewhere and it misses the 4 MiB ones,
  /// so it is not the default (bench/HISTORY.md). None: `by_load`'s choice.
  std::optional<large_path> large;
  /// Messages up to this size go through the ring whole ("eager"); larger ones wait for their
  /// receive and then travel by cross-memory attach or in chunks. Measured: see bench/HISTORY.md.
  /// None: `threshold_by_load`'s.
  std::optional<std::size_t> large_threshold;
  /// Bytes per ring; 0 picks by rank count (segment.hpp: default_ring_bytes).
  std::size_t ring_bytes = 0;
  /// What a rank holds of one sender's small messages that nobody has asked for yet, at most
  /// (credit.hpp); raised to one message of the eager limit when smaller.
  std::size_t eager_window = std::size_t{1} << 20;
  /// How long start-up waits for every rank to arrive.
  std::chrono::milliseconds startup_timeout{60'000};
  /// How many times a waiting rank polls its rings, with a pause instruction between, before it
  /// starts yielding its core; none: decided at run time (waiting.hpp).
  std::optional<int> spin_rounds;
  /// How long a waiting rank that has a core of its own spins before it yields (when
  /// spin_rounds is none).
  std::chrono::microseconds spin_budget{50};
  /// How long a waiting rank yields its core, turn after turn, before it sleeps on its futex;
  /// none: decided by how many ranks share a core (waiting.hpp).
  std::optional<std::chrono::microseconds> yield_period;
  /// How often a waiting rank checks that its peers' processes still exist.
  std::chrono::milliseconds liveness_period{20};

  /// How large messages travel unless COMMX_SHM_LARGE says: copied through the ring, or read by
  /// cma while `ranks` crowd `cores` (commx/detail/shared_core.hpp's queued_core or more to a
  /// core). There a copy waits for its sender's turn to stream each piece, a turn of a run queue
  /// of 8 or more, where cma needs nothing of the sender but its offer.
  [[nodiscard]] static large_path by_load(int ranks, int cores) {
    return commx::detail::ranks_per_core(ranks, cores) >= commx::detail::queued_core
               ? large_path::cma
               : large_path::copy;
  }

  /// Where messages stop going whole through the ring unless COMMX_SHM_LARGE_THRESHOLD says:
  /// 32 KiB, and 128 KiB while `ranks` outnumber `cores` but large messages are still copied
  /// (fewer than queued_core to a core). There a large message's pieces wait for its sender's
  /// turn on a shared core, once to offer and again for each piece, where an eager one is
  /// written in one turn (bench/HISTORY.md, 2026-12-02, seventh entry: a 64 KiB broadcast at 4
  /// ranks on 2 cores 0.41x the time, allreduce 0.76x, allgather 0.74x, 8 ranks' allreduce
  /// 0.75x); where cma reads them (8 or more to a core), eager copies cost more (16 ranks'
  /// 64 KiB allreduce 1.6x).
  [[nodiscard]] static std::size_t threshold_by_load(int ranks, int cores) {
    const bool crowded = ranks > cores;
    const bool copied = commx::detail::ranks_per_core(ranks, cores) < commx::detail::queued_core;
    return crowded && copied ? shared_core_threshold : threshold;
  }
  /// The threshold where each rank has a core, or where cma reads large messages.
  static constexpr std::size_t threshold = std::size_t{32} << 10;
  /// The threshold while ranks share cores that still copy large messages.
  static constexpr std::size_t shared_core_threshold = std::size_t{128} << 10;

  /// The defaults, overridden by the COMMX_SHM_* variables `get` finds.
  static options from_env(const bootstrap::lookup& get = bootstrap::process_env) {
    options opts;
    if (auto text = get("COMMX_SHM_LARGE")) {
      if (*text == "auto") {
        opts.large = large_path::automatic;
      } else if (*text == "cma") {
        opts.large = large_path::cma;
      } else if (*text == "copy") {
        opts.large = large_path::copy;
      } else if (*text == "shape") {
        opts.large = large_path::by_shape;
      } else {
        throw error(errc::invalid_argument,
                    fmt::format("COMMX_SHM_LARGE='{}' is not copy, shape, auto or cma", *text));
      }
    }
    if (auto text = get("COMMX_SHM_LARGE_THRESHOLD")) {
      opts.large_threshold = parse_bytes(*text, "COMMX_SHM_LARGE_THRESHOLD");
    }
    if (auto text = get("COMMX_SHM_RING_BYTES")) {
      opts.ring_bytes = parse_bytes(*text, "COMMX_SHM_RING_BYTES");
    }
    if (auto text = get("COMMX_SHM_EAGER_WINDOW")) {
      opts.eager_window = parse_bytes(*text, "COMMX_SHM_EAGER_WINDOW");
    }
    if (auto text = get("COMMX_SHM_SPIN"); text && *text != "auto") {
      opts.spin_rounds = static_cast<int>(
          std::min<std::size_t>(parse_bytes(*text, "COMMX_SHM_SPIN"), std::size_t{1} << 20));
    }
    if (auto text = get("COMMX_SHM_YIELD_US")) {
      opts.yield_period = std::chrono::microseconds(parse_bytes(*text, "COMMX_SHM_YIELD_US"));
    }
    if (auto text = get("COMMX_SHM_STARTUP_TIMEOUT")) {
      char* end = nullptr;
      const double seconds = std::strtod(text->c_str(), &end);
      if (text->empty() || *end != '\0' || !(seconds > 0) || seconds > 1e6) {
        throw error(
            errc::invalid_argument,
            fmt::format("COMMX_SHM_STARTUP_TIMEOUT='{}' is not a number of seconds", *text));
      }
      opts.startup_timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    }
    return opts;
  }

 private:
  static std::size_t parse_bytes(const std::string& text, const char* variable) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE ||
        value > (std::size_t{1} << 40)) {
      throw error(errc::invalid_argument,
                  fmt::format("{}='{}' is not a number of bytes", variable, text));
    }
    return static_cast<std::size_t>(value);
  }
};

}  // namespace commx::detail::shm
