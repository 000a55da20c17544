// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Every collectives policy of a target that commx_add_variants(... ANY_COLLECTIVES) made: one
/// program per stack holds each policy as its own communicator type, and picks one by name at
/// run time. The policies stay compile-time types (each call is as inlined as in a program built
/// for one policy); what is shared is the compiler's work on the transport, most of a build. A
/// target built for one policy has that one here, so a program names policies the same way
/// whichever kind of target it is.
///
///     return *commx::variant::with_collectives(name, [&]<class Collectives>() {
///       return run<commx::variant::communicator_with<Collectives>>(options);
///     });

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "commx/coll/binomial.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "commx/variant.hpp"
#if defined(COMMX_VARIANT_NATIVE)
#include "commx/coll/native.hpp"
#endif

namespace commx::variant {

/// The communicator over this target's transport with `Collectives`.
template <class Collectives>
using communicator_with =
    commx::communicator<transport, Collectives, commx::stats::COMMX_VARIANT_STATS>;

namespace detail {
template <class... Policies>
struct policy_list {
  /// The policies' names, space-separated, for messages.
  static std::string names() {
    std::string out;
    ((out += (out.empty() ? "" : " "), out += Policies::name), ...);
    return out;
  }

  template <class Run>
  static auto dispatch(std::string_view name, Run& run) {
    using first = std::tuple_element_t<0, std::tuple<Policies...>>;
    std::optional<decltype(run.template operator()<first>())> out;
    ((!out && name == Policies::name ? (void)out.emplace(run.template operator()<Policies>())
                                     : void()),
     ...);
    return out;
  }
};
}  // namespace detail

/// The policies this target was built with, in the order COLLECTIVES named them.
#if defined(COMMX_VARIANT_COLLECTIVES_LIST)
using collectives_built = detail::policy_list<COMMX_VARIANT_COLLECTIVES_LIST>;
#else
using collectives_built = detail::policy_list<commx::coll::COMMX_VARIANT_COLLECTIVES>;
#endif

/// The names of the policies built, space-separated ("flat binomial ring ...").
inline std::string collectives_names() { return collectives_built::names(); }

/// Calls `run.template operator()<Collectives>()` for the policy called `name` (its `name`
/// member: "flat", "tuned", ...) and returns what it returns (not void); nullopt when this
/// target has no policy of that name.
template <class Run>
auto with_collectives(std::string_view name, Run&& run) {
  return collectives_built::dispatch(name, run);
}

}  // namespace commx::variant
