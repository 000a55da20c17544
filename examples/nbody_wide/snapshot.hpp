// SPDX-License-Identifier: MIT
// Snapshot files: a 48-byte header, then the particles' 64-byte records as they are in memory
// (little-endian hosts). The reader trusts nothing: every way a file can be wrong is refused with
// a message naming the file and the fault.
//
//   offset  0  char[8]   magic "NBODYSNP"
//           8  uint32    version (1)
//          12  uint32    bytes per particle (64)
//          16  double    box
//          24  double    time
//          32  uint64    particle count
//          40  uint64    FNV-1a 64 of the particle bytes
//          48  particle[count]
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "particle.hpp"

namespace nbody {

struct snapshot {
  double box;
  double time;
  std::vector<particle> particles;
};

namespace detail {

constexpr char snapshot_magic[8] = {'N', 'B', 'O', 'D', 'Y', 'S', 'N', 'P'};
constexpr std::uint32_t snapshot_version = 1;
constexpr std::size_t snapshot_header_bytes = 48;

inline std::uint64_t fnv1a(const unsigned char* bytes, std::size_t n) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

template <class T>
void put(std::vector<unsigned char>& out, const T& value) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <class T>
T get(const std::vector<unsigned char>& in, std::size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

}  // namespace detail

// Writes what it is given, valid or not (the reader is the gate); throws std::runtime_error if
// the file cannot be written.
inline void write_snapshot(const std::filesystem::path& path, double box, double time,
                           std::span<const particle> particles) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(particles.data());
  const std::size_t n_bytes = particles.size_bytes();
  std::vector<unsigned char> header;
  header.insert(header.end(), std::begin(detail::snapshot_magic), std::end(detail::snapshot_magic));
  detail::put(header, detail::snapshot_version);
  detail::put(header, static_cast<std::uint32_t>(sizeof(particle)));
  detail::put(header, box);
  detail::put(header, time);
  detail::put(header, static_cast<std::uint64_t>(particles.size()));
  detail::put(header, detail::fnv1a(bytes, n_bytes));
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(header.data()),
             static_cast<std::streamsize>(header.size()));
  file.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(n_bytes));
  file.close();
  if (!file)
    throw std::runtime_error("nbody snapshot " + path.string() + ": cannot write the file");
}

inline snapshot read_snapshot(const std::filesystem::path& path) {
  auto refuse = [&](const std::string& why) {
    throw std::runtime_error("nbody snapshot " + path.string() + ": " + why);
  };
  // The header first, and the size from the file system: a huge or endless file (a device, a
  // FIFO) is refused before anything is read or allocated for it.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) refuse("missing file (cannot open it)");
  if (!std::filesystem::is_regular_file(path, ec)) refuse("not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) refuse("cannot read its size (" + ec.message() + ")");
  std::ifstream file(path, std::ios::binary);
  if (!file) refuse("missing file (cannot open it)");
  if (size < detail::snapshot_header_bytes)
    refuse("truncated header (" + std::to_string(size) + " bytes, the header alone is " +
           std::to_string(detail::snapshot_header_bytes) + ")");
  std::vector<unsigned char> data(detail::snapshot_header_bytes);
  file.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!file) refuse("read error in the header");
  if (std::memcmp(data.data(), detail::snapshot_magic, sizeof detail::snapshot_magic) != 0)
    refuse("bad magic (not an nbody snapshot)");
  const auto version = detail::get<std::uint32_t>(data, 8);
  if (version != detail::snapshot_version)
    refuse("unknown version " + std::to_string(version) + " (this reader knows version " +
           std::to_string(detail::snapshot_version) + ")");
  const auto record = detail::get<std::uint32_t>(data, 12);
  if (record != sizeof(particle))
    refuse("particle records of " + std::to_string(record) + " bytes, expected " +
           std::to_string(sizeof(particle)));
  snapshot out;
  out.box = detail::get<double>(data, 16);
  out.time = detail::get<double>(data, 24);
  const auto count = detail::get<std::uint64_t>(data, 32);
  const auto checksum = detail::get<std::uint64_t>(data, 40);
  const std::uintmax_t body = size - detail::snapshot_header_bytes;
  if (body % sizeof(particle) != 0)
    refuse("truncated (the last particle record is cut short: " + std::to_string(body) +
           " particle bytes)");
  if (count != body / sizeof(particle))
    refuse("particle count " + std::to_string(count) + " does not match the file size (" +
           std::to_string(body / sizeof(particle)) + " records)");
  out.particles.resize(count);
  file.read(reinterpret_cast<char*>(out.particles.data()), static_cast<std::streamsize>(body));
  if (!file) refuse("read error in the particles (the file changed while it was read?)");
  const auto* records = reinterpret_cast<const unsigned char*>(out.particles.data());
  if (detail::fnv1a(records, body) != checksum)
    refuse("checksum mismatch (the particle bytes are corrupt)");
  if (!(std::isfinite(out.box) && out.box > 0)) refuse("box is not finite and positive");
  if (!std::isfinite(out.time)) refuse("time is not finite");
  for (const particle& p : out.particles) {
    if (const auto fault = fault_of(p, out.box)) {
      refuse("particle id " + std::to_string(p.id) + " " + *fault);
    }
  }
  std::vector<std::uint64_t> ids(count);
  for (std::size_t i = 0; i < count; ++i) ids[i] = out.particles[i].id;
  std::sort(ids.begin(), ids.end());
  const auto twin = std::adjacent_find(ids.begin(), ids.end());
  if (twin != ids.end()) refuse("duplicate id " + std::to_string(*twin));
  return out;
}

}  // namespace nbody
