// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How a C++ value becomes a message. The path is chosen at compile time and can be asserted:
///
/// | type | `transfer_mode_of<T>` | on the wire |
/// |---|---|---|
/// | trivially copyable value (int, double, a POD struct, std::array<double, 3>) | `raw` | its bytes, no copy |
/// | contiguous range of such values (std::vector<double>, std::span<int>, std::string) | `raw` | its elements' bytes, no copy |
/// | anything cereal can serialize (std::vector<std::string>, a struct with `serialize`) | `serialized` | a fingerprint of the type, then cereal's portable binary archive |
/// | pointers, and anything else | does not compile, with a message naming the requirements |
///
/// A trivially copyable type that must nonetheless go through cereal (it holds a pointer, say)
/// opts out of the raw path with `template <> inline constexpr bool commx::enable_raw_transfer<T> = false;`.
///
/// On receipt, a resizable contiguous container (std::vector, std::string) is resized to the
/// message; a span or array is a fixed buffer that takes any whole number of its elements; a
/// single value takes exactly its own size (`recv_mode_of`).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <typeinfo>
#include <memory>
#include <new>
#include <stdexcept>
#include <ranges>
#include <span>
#include <streambuf>
#include <istream>
#include <ostream>
#include <type_traits>
#include <vector>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>

#include "commx/error.hpp"

namespace commx {

/// Whether a trivially copyable type may travel as its own bytes. Specialise to false to force
/// a type through cereal.
template <class T>
inline constexpr bool enable_raw_transfer =
    std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !std::is_member_pointer_v<T>;

/// A value that travels as its own bytes.
template <class T>
concept raw_value = enable_raw_transfer<std::remove_cvref_t<T>>;

/// A contiguous range whose elements travel as their bytes.
template <class R>
concept raw_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    raw_value<std::ranges::range_value_t<R>>;

namespace detail {
// cereal's traits accept raw pointers (and then fails deep inside); an address is meaningless
// in another process, so commx refuses them up front, also as elements of a container.
template <class T>
constexpr bool holds_pointer() {
  if constexpr (std::is_pointer_v<T> || std::is_member_pointer_v<T>)
    return true;
  else if constexpr (std::ranges::range<T>)
    return holds_pointer<std::ranges::range_value_t<T>>();
  else
    return false;
}
}  // namespace detail

/// A single raw value that is not also a range (an int, a struct; not a std::array).
template <class T>
concept raw_scalar = raw_value<T> && !raw_range<T>;

/// A type cereal can write and read with its portable binary archive.
template <class T>
concept cereal_serializable =
    !detail::holds_pointer<std::remove_cvref_t<T>>() &&
    cereal::traits::is_output_serializable<std::remove_cvref_t<T>,
                                           cereal::PortableBinaryOutputArchive>::value &&
    cereal::traits::is_input_serializable<std::remove_cvref_t<T>,
                                          cereal::PortableBinaryInputArchive>::value;

/// A type that can be sent at all.
template <class T>
concept transferable = raw_range<T> || raw_value<T> || cereal_serializable<T>;

/// How a value travels: as its own bytes (`raw`) or encoded by cereal (`serialized`).
enum class transfer_mode { raw, serialized };

namespace detail {
template <class T>
consteval transfer_mode transfer_mode_for() {
  static_assert(transferable<T>,
                "commx: this type cannot be sent: it is neither trivially copyable, nor a "
                "contiguous range of trivially copyable elements, nor serializable by cereal "
                "(give it a serialize() function, see serialize.hpp)");
  return raw_range<T> || raw_value<T> ? transfer_mode::raw : transfer_mode::serialized;
}
}  // namespace detail

/// The path a value of type T takes: raw bytes or cereal.
template <class T>
inline constexpr transfer_mode transfer_mode_of =
    detail::transfer_mode_for<std::remove_cvref_t<T>>();

/// How a receive fills an object of type T.
enum class recv_mode {
  fixed,       ///< a buffer of fixed size: the object's bytes or a span's elements
  resize,      ///< a container resized to the incoming message
  serialized,  ///< decoded by cereal
};

template <class T>
concept resizable_raw_container = raw_range<T> && requires(T& container, std::size_t n) {
  container.resize(n);
};

namespace detail {
template <class T>
consteval recv_mode recv_mode_for() {
  static_assert(transferable<T>,
                "commx: this type cannot be received: it is neither trivially copyable, nor a "
                "contiguous range of trivially copyable elements, nor serializable by cereal");
  if constexpr (resizable_raw_container<T>)
    return recv_mode::resize;
  else if constexpr (raw_range<T> || raw_value<T>)
    return recv_mode::fixed;
  else
    return recv_mode::serialized;
}
}  // namespace detail

/// How a receive fills an object of type T (see recv_mode).
template <class T>
inline constexpr recv_mode recv_mode_of = detail::recv_mode_for<std::remove_cvref_t<T>>();

namespace detail {

/// A view of the elements of a raw value or range: what collectives move, and what a message
/// of it is made of.
template <class M>
auto elements_of(M& message) {
  if constexpr (raw_range<M>) {
    return std::span(std::ranges::data(message), std::ranges::size(message));
  } else {
    static_assert(raw_value<M>,
                  "commx: collectives take trivially copyable values or contiguous "
                  "ranges of them");
    return std::span<M, 1>(std::addressof(message), 1);
  }
}

/// The bytes of a raw value or range, without copying.
template <class M>
std::span<const std::byte> bytes_of(const M& message) {
  return std::as_bytes(elements_of(message));
}

template <class M>
std::span<std::byte> writable_bytes_of(M& message) {
  return std::as_writable_bytes(elements_of(message));
}

/// Size of one element of what a fixed receive fills: the value itself or a range's element.
template <class M>
constexpr std::size_t element_size() {
  if constexpr (raw_range<M>)
    return sizeof(std::ranges::range_value_t<M>);
  else
    return sizeof(M);
}

// cereal speaks iostreams; these stream buffers let it write into and read from our byte
// vectors and spans directly, so a message is encoded once and never copied again.
class vector_sink final : public std::streambuf {
 public:
  explicit vector_sink(std::vector<std::byte>& out) : out_(out) {}

 protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    out_.push_back(static_cast<std::byte>(ch));
    return ch;
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    const auto* first = reinterpret_cast<const std::byte*>(data);
    out_.insert(out_.end(), first, first + n);
    return n;
  }

 private:
  std::vector<std::byte>& out_;
};

class span_source final : public std::streambuf {
 public:
  explicit span_source(std::span<const std::byte> in) {
    // streambuf's get area is char*; nothing is ever written through it.
    char* first = const_cast<char*>(reinterpret_cast<const char*>(in.data()));
    setg(first, first, first + in.size());
  }
  [[nodiscard]] std::size_t remaining() const { return static_cast<std::size_t>(egptr() - gptr()); }
};

/// A fingerprint of T's name, sent ahead of every serialized message. Decoding the bytes of
/// one type as another could make cereal read a length out of a string and allocate without
/// bound; the fingerprint turns that mistake into a clear error before any byte is decoded.
/// (FNV-1a over the Itanium-ABI mangled name: the same for every build on a Linux site.)
template <class T>
std::uint64_t type_fingerprint() {
  static const std::uint64_t fingerprint = [] {
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    for (const char* c = typeid(T).name(); *c != '\0'; ++c) {
      hash = (hash ^ static_cast<unsigned char>(*c)) * 0x100000001b3ULL;
    }
    return hash;
  }();
  return fingerprint;
}

inline constexpr std::size_t fingerprint_bytes = sizeof(std::uint64_t);

/// Encodes `value`: its type's fingerprint (little-endian), then cereal's portable binary.
template <class T>
std::vector<std::byte> serialize(const T& value) {
  std::vector<std::byte> bytes(fingerprint_bytes);
  const std::uint64_t fingerprint = type_fingerprint<T>();
  for (std::size_t i = 0; i < fingerprint_bytes; ++i) {
    bytes[i] = static_cast<std::byte>(fingerprint >> (8 * i));
  }
  vector_sink sink(bytes);
  std::ostream stream(&sink);
  {
    cereal::PortableBinaryOutputArchive archive(stream);
    archive(value);
  }
  return bytes;
}

/// Decodes `value` from `bytes`. A message of another type, one that does not decode, or one
/// that leaves bytes over raises errc::serialization_failed.
template <class T>
void deserialize(std::span<const std::byte> bytes, T& value, const error_context& where) {
  std::uint64_t fingerprint = 0;
  for (std::size_t i = 0; i < fingerprint_bytes && i < bytes.size(); ++i) {
    fingerprint |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  }
  if (bytes.size() < fingerprint_bytes || fingerprint != type_fingerprint<T>()) {
    throw_error(
        errc::serialization_failed, where,
        fmt::format("the message holds another type than {} (or raw bytes)", typeid(T).name()));
  }
  span_source source(bytes.subspan(fingerprint_bytes));
  std::istream stream(&source);
  try {
    cereal::PortableBinaryInputArchive archive(stream);
    archive(value);
  } catch (const cereal::Exception& e) {
    throw_error(errc::serialization_failed, where, e.what());
  } catch (const std::bad_alloc&) {
    throw_error(errc::serialization_failed, where, "the message decodes to an impossible size");
  } catch (const std::length_error&) {
    throw_error(errc::serialization_failed, where, "the message decodes to an impossible size");
  }
  if (source.remaining() != 0) {
    throw_error(errc::serialization_failed, where,
                fmt::format("{} bytes left over after decoding: the message was not of this type",
                            source.remaining()));
  }
}

}  // namespace detail
}  // namespace commx
