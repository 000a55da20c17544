// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The shared-memory transport's knobs and the environment variables that set them.
///
/// | variable | meaning | default |
/// |---|---|---|
/// | COMMX_SHM_LARGE | `copy`, `shape`, `auto` or `cma`: how a large message travels (`shape`: pieces through the ring one way, cma in an exchange, when the receiver has large sends of its own in flight; `auto`: the receiver takes cma or pieces, whichever has cost it less lately for that size and shape of traffic, path_choice.hpp; both take pieces when the kernel refuses cma) | cma where the kernel allows it, else copy (bench/HISTORY.md, 2026-12-03: cma at or below Open MPI's vader in most large calls at 2 and 4 ranks, copy 1.2-3x) |
/// | COMMX_SHM_SHARED_COPY | `on` or `off`: whether the sender of a large message copied by cma that goes one way writes blocks of it from the back while its receiver reads from the front, where each rank has a core (shared_copy.hpp) | on |
/// | COMMX_SHM_LARGE_THRESHOLD | bytes; larger messages take the large-message path | 32768; 131072 while ranks outnumber the cores but fewer than 8 share one (`threshold_by_load`) |
/// | COMMX_SHM_RING_BYTES | bytes per ring (a power of two, 4 KiB to 16 MiB); same on every rank | by rank count |
/// | COMMX_SHM_EAGER_WINDOW | bytes of small messages nobody asked for yet that a rank holds from one sender, each counted as its payload plus 64; beyond it they are offered and stay with the sender (credit.hpp). At least one message of the threshold | 1048576 |
/// | COMMX_SHM_STARTUP_TIMEOUT | seconds every rank waits for the others to arrive | 60 |
/// | COMMX_SHM_SPIN | `auto`: a waiting rank spins up to 50 us before it yields while its core is its own, else 8 polls; `n`: n polls (with a pause between) before it yields (waiting.hpp) | auto |
/// | COMMX_SHM_YIELD_US | microseconds a waiting rank yields before it sleeps | 2000 while its core is its own (no more of the ranks that may run on its CPUs are awake than they are, and no yield lately handed the core to another task); else 200, and from 6 ranks a core 40 per rank sharing it (waiting.hpp) |

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
  /// One process_vm_readv straight from the sender's buffer, where the kernel allows it: since
  /// a sendrecv's own offer goes out before it copies (2026-12-03), cma beats two pipelined
  /// copies through the ring in every large call measured at 2 and 4 ranks, one way and in an
  /// exchange (copy 1.2-3x vader's time, cma 0.73-1.17x; bench/HISTORY.md), as it did before
  /// where ranks crowd the cores. `copy` was the default until then (it won one way on
  /// 2026-11-26); `automatic` and `by_shape` choose per message. None: cma, else copy.
  std::optional<large_path> large;
  /// Whether the sender of a large message copied by cma writes part of it while its receiver
  /// reads the rest (shared_copy.hpp; COMMX_SHM_SHARED_COPY=off to read alone).
  bool shared_copy = true;
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
  /// How often a waiting rank checks that its peers' processes still exist (at least 4 ms per
  /// rank of a core where more crowd them: liveness_period_for, cpu_sharing.hpp).
  std::chrono::milliseconds liveness_period{20};

  /// Where messages stop going whole through the ring unless COMMX_SHM_LARGE_THRESHOLD says:
  /// 32 KiB, and 128 KiB while `ranks` outnumber `cores` but fewer than queued_core share one.
  /// There a large message waits for its sender's turn on a shared core, to offer and then for
  /// each piece or cma's acknowledgement, where an eager one is written in one turn. Against
  /// cma (bench/HISTORY.md, 2026-12-04, eighth entry), 64 KiB whole took at 4 ranks on 2 cores
  /// 0.49x the time of a broadcast, 0.50x of flat's allreduce, 0.52x of ring's allgather, and
  /// at 8 ranks 0.53x of a broadcast; from 8 to a core, eager copies cost more than cma (16
  /// ranks' 64 KiB allreduce 1.6x).
  [[nodiscard]] static std::size_t threshold_by_load(int ranks, int cores) {
    const bool crowded = ranks > cores;
    const bool queued = commx::detail::ranks_per_core(ranks, cores) >= commx::detail::queued_core;
    return crowded && !queued ? shared_core_threshold : threshold;
  }
  /// The threshold where each rank has a core, or where 8 or more share one.
  static constexpr std::size_t threshold = std::size_t{32} << 10;
  /// The threshold while 2 to 7 ranks share a core.
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
    if (auto text = get("COMMX_SHM_SHARED_COPY")) {
      if (*text != "on" && *text != "off") {
        throw error(errc::invalid_argument,
                    fmt::format("COMMX_SHM_SHARED_COPY='{}' is not on or off", *text));
      }
      opts.shared_copy = *text == "on";
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
