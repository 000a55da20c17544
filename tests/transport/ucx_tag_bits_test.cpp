// SPDX-License-Identifier: MIT
// How an envelope fits UCP's 64-bit tag (transport/detail/ucx/tag_bits.hpp): every envelope a
// job may send comes back whole, the context ids that do not fit are the ones the file comment
// says, and control messages are never taken for a user's.

#include <catch2/catch.hpp>

#include "commx/transport/detail/ucx/tag_bits.hpp"

using commx::context_id;
using commx::detail::ucx::control;
using commx::detail::ucx::tag_bits;

TEST_CASE("an envelope comes back whole from UCP's tag at every job size") {
  constexpr context_id highest = ~context_id{0};
  for (const int size : {1, 2, 3, 64, 4096, 1 << 20}) {
    const tag_bits bits(size);
    const context_id field_top = (context_id{1} << bits.context_width()) - 1;
    // Counting up from 0, and the 16 highest ids (the layered stacks' own).
    for (const context_id ctx :
         {context_id{0}, context_id{1}, field_top - 16, highest, highest - 1, highest - 15}) {
      CAPTURE(size, ctx);
      REQUIRE(bits.fits(ctx));
      for (const int source : {0, size - 1}) {
        for (const int tag : {0, 7, commx::max_tag}) {
          const tag_bits::envelope e = bits.unpack(bits.pack(ctx, source, tag));
          CHECK(e.ctx == ctx);
          CHECK(e.source == source);
          CHECK(e.tag == tag);
          CHECK(!e.control_message);
        }
      }
    }
    // The field's top 16 values are the high ids', so the ids just below them do not fit.
    CHECK(!bits.fits(field_top - 15));
    CHECK(!bits.fits(highest - 16));
    const tag_bits::envelope bye = bits.unpack(bits.pack(control::bye, size - 1));
    REQUIRE(bye.control_message);
    CHECK(*bye.control_message == control::bye);
    CHECK(bye.source == size - 1);
  }
  CHECK(tag_bits(2).context_width() == 32);
  CHECK(tag_bits(4096).context_width() == 21);
  CHECK(tag_bits(1 << 20).context_width() == 13);
}
