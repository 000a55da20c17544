// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How a commx envelope (context, source, tag) fits UCP's 64-bit tag (transport/ucx.hpp).
///
/// | bits, high to low | what |
/// |---|---|
/// | 33 - s | the context id |
/// | s = bit width of size - 1 (at least 1) | the sending world rank |
/// | 1 | control: the message is the transport's own (hello, bye), never a user's |
/// | 30 | the tag, in [0, max_tag] |
///
/// The source is in the tag because a probe tells only the tag and the length. The context
/// takes what the job's size leaves: 32 bits at 2 ranks, 21 at 4,096, 13 at a million. commx
/// numbers communicators upward from 0, two ids each (world: 0 and 1) and never reuses one,
/// so a job runs out only after about 2^(32 - s) communicators (a million at 4,096 ranks). One
/// beyond is refused where it is used: the operation ends with errc::invalid_argument, saying
/// how many bits this job's size leaves. The 16 highest ids (~0 down: the layered stacks' own
/// messages, detail/layered/on_network.hpp) take the field's 16 highest values.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>

#include "commx/transport/message.hpp"

namespace commx::detail::ucx {

/// What a control message says (tag bits when the control bit is set).
enum class control : std::uint32_t {
  hello = 1,  ///< the sender made an endpoint to us: we make one back, so a bye reaches it
  bye = 2,    ///< the sender's endpoint is closing after everything it sent before
};

/// An envelope as the bits of a UCP tag, for a job of a given size.
class tag_bits {
 public:
  static constexpr int tag_width = 30;
  static constexpr int control_bit = tag_width;

  explicit tag_bits(int size)
      : source_width_(std::max(1, static_cast<int>(std::bit_width(
                                      static_cast<std::uint32_t>(size > 1 ? size - 1 : 1))))),
        context_width_(64 - tag_width - 1 - source_width_) {}

  /// Bits left for context ids at this size.
  [[nodiscard]] int context_width() const { return context_width_; }
  /// Whether context `ctx` fits.
  [[nodiscard]] bool fits(context_id ctx) const {
    return ctx <= field_max() - reserved_high || ctx > ~context_id{0} - reserved_high;
  }

  /// The tag of a user message (ctx must fit, tag in [0, max_tag]).
  [[nodiscard]] std::uint64_t pack(context_id ctx, int source, int tag) const {
    const context_id field = ctx <= field_max() ? ctx : field_max() - (~context_id{0} - ctx);
    return (field << (source_width_ + tag_width + 1)) |
           (static_cast<std::uint64_t>(source) << (tag_width + 1)) |
           static_cast<std::uint64_t>(static_cast<std::uint32_t>(tag));
  }
  /// The tag of a control message.
  [[nodiscard]] std::uint64_t pack(control what, int source) const {
    return (static_cast<std::uint64_t>(source) << (tag_width + 1)) |
           (std::uint64_t{1} << control_bit) | static_cast<std::uint64_t>(what);
  }

  /// An envelope read back.
  struct envelope {
    context_id ctx;
    int source;
    int tag;
    std::optional<control> control_message;
  };
  [[nodiscard]] envelope unpack(std::uint64_t bits) const {
    envelope e{};
    e.ctx = bits >> (source_width_ + tag_width + 1);
    if (e.ctx > field_max() - reserved_high) e.ctx = ~context_id{0} - (field_max() - e.ctx);
    e.source =
        static_cast<int>((bits >> (tag_width + 1)) & ((std::uint64_t{1} << source_width_) - 1));
    e.tag = static_cast<int>(bits & max_tag);
    if ((bits >> control_bit) & 1U) e.control_message = static_cast<control>(e.tag);
    return e;
  }

 private:
  static constexpr context_id reserved_high = 16;
  [[nodiscard]] context_id field_max() const { return (context_id{1} << context_width_) - 1; }

  int source_width_;
  int context_width_;
};

static_assert(max_tag == (1 << tag_bits::tag_width) - 1, "a tag takes tag_width bits");

}  // namespace commx::detail::ucx
