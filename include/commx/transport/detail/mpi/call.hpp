// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Every MPI return code checked: `check(code, "MPI_Isend", where)` turns a failure into a
/// commx::error that names the call and carries MPI_Error_string's text. And byte counts of any
/// size as (count, datatype) pairs: MPI counts are ints, so a buffer of 2 GiB or more travels
/// as a derived datatype of 1 GiB blocks.

#include <mpi.h>

#include <array>
#include <climits>
#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "commx/error.hpp"

namespace commx::detail::mpi {

/// MPI's error class, mapped onto commx's: wrong arguments are the caller's, a message longer
/// than its buffer is truncation, anything else is the library failing underneath us.
inline errc errc_of(int code) {
  int error_class = MPI_ERR_OTHER;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) return errc::protocol_violation;
  switch (error_class) {
    case MPI_ERR_TRUNCATE:
      return errc::truncated;
    case MPI_ERR_RANK:
    case MPI_ERR_TAG:
    case MPI_ERR_COMM:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_BUFFER:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_GROUP:
      return errc::invalid_argument;
    default:
      return errc::protocol_violation;
  }
}

/// "MPI_ERR_RANK: invalid rank", as the library words it.
inline std::string describe(int code) {
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  if (MPI_Error_string(code, text.data(), &length) != MPI_SUCCESS) {
    return fmt::format("MPI error {}", code);
  }
  return std::string(text.data(), static_cast<std::size_t>(length));
}

[[noreturn]] inline void fail(int code, const char* call, const error_context& where) {
  throw_error(errc_of(code), where, fmt::format("{} failed: {}", call, describe(code)));
}

/// Throws commx::error unless `code` is MPI_SUCCESS.
inline void check(int code, const char* call, const error_context& where) {
  if (code != MPI_SUCCESS) [[unlikely]]
    fail(code, call, where);
}

/// For calls outside any rank's operation (setting up, splitting).
inline void check(int code, const char* call) { check(code, call, error_context{}); }

/// `bytes` bytes as something MPI can count: (bytes, MPI_BYTE) below 2 GiB, else one element of
/// a committed derived datatype that this object frees (MPI keeps it alive for operations that
/// were posted with it).
class byte_layout {
 public:
  explicit byte_layout(std::size_t bytes) {
    if (bytes <= static_cast<std::size_t>(INT_MAX)) [[likely]] {
      count_ = static_cast<int>(bytes);
      return;
    }
    make_type(bytes);
  }
  byte_layout(const byte_layout&) = delete;
  byte_layout& operator=(const byte_layout&) = delete;
  ~byte_layout() {
    if (owned_) [[unlikely]]
      (void)MPI_Type_free(&type_);
  }

  [[nodiscard]] int count() const { return count_; }
  [[nodiscard]] MPI_Datatype type() const { return type_; }

 private:
  // Out of line, so that the constructor stays small enough to inline on every message's path.
  [[gnu::noinline]] void make_type(std::size_t bytes) {
    constexpr std::size_t block = std::size_t{1} << 30;
    MPI_Datatype blocks = MPI_DATATYPE_NULL;
    check(MPI_Type_contiguous(static_cast<int>(block), MPI_BYTE, &blocks), "MPI_Type_contiguous");
    const auto whole = static_cast<int>(bytes / block);
    const auto rest = static_cast<int>(bytes % block);
    const std::array<int, 2> lengths{whole, rest};
    const std::array<MPI_Aint, 2> offsets{0, static_cast<MPI_Aint>(bytes - bytes % block)};
    const std::array<MPI_Datatype, 2> types{blocks, MPI_BYTE};
    check(MPI_Type_create_struct(2, lengths.data(), offsets.data(), types.data(), &type_),
          "MPI_Type_create_struct");
    check(MPI_Type_free(&blocks), "MPI_Type_free");
    check(MPI_Type_commit(&type_), "MPI_Type_commit");
    count_ = 1;
    owned_ = true;
  }

  int count_ = 0;
  MPI_Datatype type_ = MPI_BYTE;
  bool owned_ = false;
};

/// The byte count a receive status describes: MPI_Get_count, which costs half what
/// MPI_Get_elements_x does in Open MPI, unless the message is 2 GiB or more.
inline std::size_t bytes_of(const MPI_Status& status) {
  int count = MPI_UNDEFINED;
  check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  if (count != MPI_UNDEFINED) [[likely]]
    return static_cast<std::size_t>(count);
  MPI_Count bytes = 0;
  check(MPI_Get_elements_x(&status, MPI_BYTE, &bytes), "MPI_Get_elements_x");
  return static_cast<std::size_t>(bytes);
}

}  // namespace commx::detail::mpi
