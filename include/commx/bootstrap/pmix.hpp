// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Endpoints exchanged through PMIx, the process-management interface that Open MPI's mpirun,
/// PRRTE and Slurm (`srun --mpi=pmix`) serve to every process they start. A network stack
/// started by a PMIx server needs no COMMX_ROOT: each rank puts its listen endpoint, one
/// fence with data collection hands every rank everyone's, and no rank is anyone's server.
/// Component `pmix` (commx::pmix, built when libpmix-dev is present); the tcp engine uses it
/// where the macro COMMX_WITH_PMIX is defined (linking commx::pmix defines it).
///
/// | | COMMX_ROOT rendezvous | PMIx |
/// |---|---|---|
/// | who serves | rank 0 (a connection from every rank, closed once all have the table) | the launcher's daemons |
/// | messages per rank | 2 (address in, table out) | the put and the fence |
/// | rank 0's load | N - 1 handshakes and the table's N records to each | as any rank's |
/// | the job's secret | COMMX_TOKEN | COMMX_TOKEN, or one rank 0 draws and puts |
///
/// The secret drawn by rank 0 is readable by the processes the PMIx server lets in (the
/// job's own, checked by the server on the socket's user id: PMIX_SECURITY_MODE native), as
/// COMMX_TOKEN in the environment is by the user's processes.
///
/// PMIx counts its initializations: MPI_Init in the same process shares the client. The
/// client commx opens stays open until the process exits, for a PMIx client that finalizes
/// cannot be sure to initialize again.

#include <pmix.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "commx/bootstrap.hpp"
#include "commx/error.hpp"

namespace commx::bootstrap::pmix {

/// Whether a PMIx server started this process: its client reaches the server through the
/// namespace and the server's address the launcher puts in the environment.
[[nodiscard]] inline bool launched_by_pmix(const lookup& get = process_env) {
  return get("PMIX_NAMESPACE").has_value() && get("PMIX_RANK").has_value();
}

/// This process's PMIx client: its rank and the job's size as PMIx knows them, and the
/// exchange. Opened by the first `client::get()`, closed when the process exits.
class client {
 public:
  /// The process's client, initialized on first use.
  /// @throws commx::error errc::bootstrap_failed when PMIx_Init fails (no server answers).
  static client& get() {
    static client instance;  // a failed initialization throws and is tried again next time
    return instance;
  }

  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// This process's rank in its PMIx job (namespace).
  [[nodiscard]] int rank() const { return static_cast<int>(me_.rank); }
  /// The PMIx job's rank count (PMIX_JOB_SIZE).
  [[nodiscard]] int size() const { return size_; }
  /// How many of the job's ranks this process's node runs (PMIX_LOCAL_SIZE; 0 if not said).
  [[nodiscard]] int local_size() const { return local_size_; }
  /// The PMIx job's namespace, as error messages print it.
  [[nodiscard]] std::string_view job() const { return me_.nspace; }

  /// What `allgather` hands back.
  struct exchanged {
    std::vector<std::vector<std::byte>> values;  ///< every rank's value, in rank order
    std::vector<std::byte> extra;                ///< rank 0's extra; empty if it put none
  };

  /// Puts `mine` under `key` (rank 0 also `extra` under `key` + ".extra" when not empty),
  /// fences the whole job with data collection, and returns every rank's value and rank 0's
  /// extra.
  /// @throws commx::error errc::bootstrap_failed when a step fails or the fence does not end
  ///   within `timeout_seconds` (a rank that never comes, or dies: the launcher then usually
  ///   ends the job itself).
  exchanged allgather(const std::string& key, std::span<const std::byte> mine,
                      std::span<const std::byte> extra, int timeout_seconds) {
    put(key, mine);
    if (!extra.empty()) put(key + ".extra", extra);
    check(PMIx_Commit(), "PMIx_Commit");
    pmix_proc_t all = whole_job();
    pmix_info_t info[2];
    bool collect = true;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_seconds, PMIX_INT);
    const pmix_status_t fenced = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    check(fenced, fmt::format("PMIx_Fence over the {} ranks of job {} (timeout {} s)", size_, job(),
                              timeout_seconds));
    exchanged out;
    out.values.reserve(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) out.values.push_back(fetch(r, key));
    out.extra = fetch(0, key + ".extra", true);  // rank 0 put one only if it had one
    return out;
  }

 private:
  client() {
    const pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
    if (rc != PMIX_SUCCESS) {
      throw error(errc::bootstrap_failed,
                  fmt::format("PMIx: PMIx_Init failed: {} (PMIX_NAMESPACE and the server's "
                              "address come from the launcher; is it still running?)",
                              PMIx_Error_string(rc)));
    }
    size_ = static_cast<int>(job_number(PMIX_JOB_SIZE, true));
    local_size_ = static_cast<int>(job_number(PMIX_LOCAL_SIZE, false));
  }
  ~client() { PMIx_Finalize(nullptr, 0); }

  [[nodiscard]] pmix_proc_t whole_job() const {
    pmix_proc_t all;
    PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
    return all;
  }

  static void check(pmix_status_t rc, std::string_view what) {
    if (rc == PMIX_SUCCESS) return;
    throw error(errc::bootstrap_failed,
                fmt::format("PMIx: {} failed: {}", what, PMIx_Error_string(rc)));
  }

  // A job-level number (PMIX_JOB_SIZE, PMIX_LOCAL_SIZE): servers differ in the integer type.
  std::uint64_t job_number(const char* key, bool required) {
    pmix_proc_t all = whole_job();
    pmix_value_t* value = nullptr;
    const pmix_status_t rc = PMIx_Get(&all, key, nullptr, 0, &value);
    if (rc != PMIX_SUCCESS || value == nullptr) {
      if (required) check(rc == PMIX_SUCCESS ? PMIX_ERR_NOT_FOUND : rc, key);
      return 0;
    }
    std::uint64_t number = 0;
    switch (value->type) {
      case PMIX_UINT32:
        number = value->data.uint32;
        break;
      case PMIX_UINT64:
        number = value->data.uint64;
        break;
      case PMIX_INT:
        number = static_cast<std::uint64_t>(value->data.integer);
        break;
      case PMIX_UINT16:
        number = value->data.uint16;
        break;
      default:
        break;
    }
    PMIX_VALUE_RELEASE(value);
    return number;
  }

  void put(const std::string& key, std::span<const std::byte> bytes) {
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_BYTE_OBJECT;
    // PMIx_Put copies the value; the cast is the C API's (a byte object is not const).
    value.data.bo.bytes = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));
    value.data.bo.size = bytes.size();
    check(PMIx_Put(PMIX_GLOBAL, key.c_str(), &value), fmt::format("PMIx_Put('{}')", key));
  }

  std::vector<std::byte> fetch(int rank, const std::string& key, bool optional = false) {
    pmix_proc_t who;
    PMIX_LOAD_PROCID(&who, me_.nspace, static_cast<pmix_rank_t>(rank));
    pmix_value_t* value = nullptr;
    // After a collecting fence every value is here: a missing one is missing, not late
    // (without PMIX_OPTIONAL the client would ask the server and could wait for it).
    pmix_info_t here;
    bool only_here = true;
    PMIX_INFO_LOAD(&here, PMIX_OPTIONAL, &only_here, PMIX_BOOL);
    const pmix_status_t rc = PMIx_Get(&who, key.c_str(), &here, 1, &value);
    PMIX_INFO_DESTRUCT(&here);
    if (rc != PMIX_SUCCESS || value == nullptr) {
      if (optional) return {};
      check(rc == PMIX_SUCCESS ? PMIX_ERR_NOT_FOUND : rc,
            fmt::format("PMIx_Get('{}') of rank {}", key, rank));
    }
    std::vector<std::byte> out;
    if (value->type == PMIX_BYTE_OBJECT) {
      const auto* first = reinterpret_cast<const std::byte*>(value->data.bo.bytes);
      out.assign(first, first + value->data.bo.size);
    }
    PMIX_VALUE_RELEASE(value);
    if (out.empty() && !optional) {
      check(PMIX_ERR_BAD_PARAM, fmt::format("PMIx_Get('{}') of rank {}: not bytes", key, rank));
    }
    return out;
  }

  pmix_proc_t me_{};
  int size_ = 0;
  int local_size_ = 0;
};

}  // namespace commx::bootstrap::pmix
