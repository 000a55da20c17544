// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Which MPI communicator carries which commx context, and how tags fit MPI's tag space.
///
/// Every commx communicator owns two contexts (point-to-point, collectives); on MPI each is an
/// MPI communicator of its own (MPI_Comm_dup or MPI_Comm_split), so messages of different
/// contexts never match, as MPI guarantees, and the collectives policy's traffic never meets a
/// user's receive. The world's contexts 0 and 1 are duplicates of the communicator the endpoint
/// wraps, which commx never uses (nor frees) itself: the application's own messages on it never
/// meet commx's.
///
/// Tags: commx's tags go up to max_tag (2^30 - 1, collectives use all of it). Open MPI's
/// MPI_TAG_UB is 2^31 - 1, MPICH's 2^28 - 1 (4.0, ch4) and the standard only promises 32767. A
/// context therefore has `banks` MPI communicators: tag t travels as MPI tag t % (MPI_TAG_UB + 1)
/// on bank t / (MPI_TAG_UB + 1). One bank on Open MPI, four on MPICH. Messages with one tag
/// stay on one bank, so they keep MPI's order; an any_tag receive looks at every bank.

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "commx/error.hpp"
#include "commx/transport/detail/mpi/call.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::mpi {

/// One commx context on MPI: its communicator (one per tag bank), the communicator that carries
/// the bytes of announced messages (announcement.hpp), and its rank maps.
struct context {
  std::vector<MPI_Comm> banks;  // banks[0] is the context's communicator
  MPI_Comm bulk = MPI_COMM_NULL;
  // World rank -> rank in banks[0] (-1 outside it) and back; empty when they are the same.
  std::vector<int> local_of_world;
  std::vector<int> world_of_local;

  [[nodiscard]] int local_of(int world) const {
    if (world < 0 || local_of_world.empty()) return world;  // any_source passes as it is
    return static_cast<std::size_t>(world) < local_of_world.size()
               ? local_of_world[static_cast<std::size_t>(world)]
               : world;  // out of range: MPI itself reports MPI_ERR_RANK
  }
  [[nodiscard]] int world_of(int local) const {
    if (local < 0 || world_of_local.empty()) return local;
    return world_of_local[static_cast<std::size_t>(local)];
  }
};

/// The tag space: MPI_TAG_UB and the number of banks commx's tags need.
struct tag_space {
  int upper = 32767;  // MPI_TAG_UB
  int banks = 1;

  // MPI_TAG_UB is an attribute of MPI_COMM_WORLD only (a split communicator may lack it),
  // and the same for every communicator of the process.
  tag_space() {
    int* value = nullptr;
    int found = 0;
    check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, static_cast<void*>(&value), &found),
          "MPI_Comm_get_attr(MPI_TAG_UB)");
    if (found != 0 && value != nullptr) upper = *value;
    banks = max_tag / (upper + 1) + 1;
    constexpr int most_banks = 64;
    if (banks > most_banks) {
      throw error(errc::bootstrap_failed,
                  fmt::format("MPI_TAG_UB is {}: commx's tags (up to {}) would need {} "
                              "communicators per context",
                              upper, max_tag, banks));
    }
  }

  [[nodiscard]] int bank_of(int tag) const { return banks == 1 ? 0 : tag / (upper + 1); }
  [[nodiscard]] int mpi_tag(int tag) const { return banks == 1 ? tag : tag % (upper + 1); }
  [[nodiscard]] int commx_tag(int bank, int mpi) const { return bank * (upper + 1) + mpi; }
};

/// The contexts of one endpoint, indexed by context id (ids are small and grow by two per new
/// communicator).
class context_table {
 public:
  context_table() = default;
  context_table(const context_table&) = delete;
  context_table& operator=(const context_table&) = delete;
  ~context_table() { clear(); }

  /// The context, or nullptr when `ctx` names none (never made, or released).
  [[nodiscard]] context* find(context_id ctx) const {
    return ctx < table_.size() ? table_[static_cast<std::size_t>(ctx)].get() : nullptr;
  }

  /// Makes `ctx` the communicator `comm` (which the table now owns and frees), with `banks` - 1
  /// duplicates for the higher tag banks and one for announced messages' bytes, and `world`
  /// (the endpoint's world communicator) for the rank maps. Collective over `comm`.
  void adopt(context_id ctx, MPI_Comm comm, int banks, MPI_Comm world) {
    auto made = std::make_unique<context>();
    made->banks.push_back(comm);
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    for (int b = 1; b < banks; ++b) {
      MPI_Comm bank = MPI_COMM_NULL;
      check(MPI_Comm_dup(comm, &bank), "MPI_Comm_dup");
      made->banks.push_back(bank);
    }
    check(MPI_Comm_dup(comm, &made->bulk), "MPI_Comm_dup");
    map_ranks(*made, world);
    if (ctx >= table_.size()) table_.resize(static_cast<std::size_t>(ctx) + 1);
    table_[static_cast<std::size_t>(ctx)] = std::move(made);
  }

  /// Frees the context's communicators. Never throws: it runs as communicators are destroyed.
  void release(context_id ctx) noexcept {
    if (ctx >= table_.size() || !table_[static_cast<std::size_t>(ctx)]) return;
    free(*table_[static_cast<std::size_t>(ctx)]);
    table_[static_cast<std::size_t>(ctx)].reset();
  }

  void clear() noexcept {
    for (auto& entry : table_) {
      if (entry) free(*entry);
    }
    table_.clear();
  }

 private:
  static void free(context& entry) noexcept {
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0) return;
    for (MPI_Comm& comm : entry.banks) (void)MPI_Comm_free(&comm);
    if (entry.bulk != MPI_COMM_NULL) (void)MPI_Comm_free(&entry.bulk);
  }

  // Ranks of a communicator made from the world one differ from world ranks; the transport's
  // callers speak world ranks.
  static void map_ranks(context& entry, MPI_Comm world) {
    int result = MPI_UNEQUAL;
    check(MPI_Comm_compare(entry.banks[0], world, &result), "MPI_Comm_compare");
    if (result == MPI_CONGRUENT || result == MPI_IDENT) return;
    MPI_Group mine = MPI_GROUP_NULL;
    MPI_Group whole = MPI_GROUP_NULL;
    check(MPI_Comm_group(entry.banks[0], &mine), "MPI_Comm_group");
    check(MPI_Comm_group(world, &whole), "MPI_Comm_group");
    int size = 0;
    int world_size = 0;
    check(MPI_Group_size(mine, &size), "MPI_Group_size");
    check(MPI_Group_size(whole, &world_size), "MPI_Group_size");
    std::vector<int> locals(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) locals[static_cast<std::size_t>(r)] = r;
    entry.world_of_local.resize(locals.size());
    check(MPI_Group_translate_ranks(mine, size, locals.data(), whole, entry.world_of_local.data()),
          "MPI_Group_translate_ranks");
    entry.local_of_world.assign(static_cast<std::size_t>(world_size), -1);
    for (int r = 0; r < size; ++r) {
      entry.local_of_world[static_cast<std::size_t>(
          entry.world_of_local[static_cast<std::size_t>(r)])] = r;
    }
    check(MPI_Group_free(&mine), "MPI_Group_free");
    check(MPI_Group_free(&whole), "MPI_Group_free");
  }

  std::vector<std::unique_ptr<context>> table_;
};

}  // namespace commx::detail::mpi
