// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::variant::communicator`: the communicator type commx_add_variants() chose for this
/// build target, so one source file becomes app_inproc, app_shm, app_tcp, ... without an `#ifdef`.

#include <string_view>

#if !defined(COMMX_VARIANT_TRANSPORT) || !defined(COMMX_VARIANT_COLLECTIVES) ||  \
    !defined(COMMX_VARIANT_STATS) || !defined(COMMX_VARIANT_TRANSPORT_HEADER) || \
    !defined(COMMX_VARIANT_COLLECTIVES_HEADER)
#error "commx/variant.hpp is for targets made by commx_add_variants() (cmake/CommxVariants.cmake)"
#endif

#include "commx/communicator.hpp"
#include "commx/launch.hpp"
#include "commx/stats.hpp"
#include COMMX_VARIANT_TRANSPORT_HEADER
#include COMMX_VARIANT_COLLECTIVES_HEADER
#if defined(COMMX_VARIANT_FAULTY)
#include "commx/transport/faulty.hpp"
#endif

namespace commx::variant {

/// The transport the target's variant names: `faulty_tcp` is tcp with the faults of
/// COMMX_FAULTS (transport/faulty.hpp).
#if defined(COMMX_VARIANT_FAULTY)
using transport = commx::transport::faulty<commx::transport::COMMX_VARIANT_TRANSPORT>;
#else
using transport = commx::transport::COMMX_VARIANT_TRANSPORT;
#endif

/// `communicator<transport, collectives, stats>` as the target's variant names them.
using communicator = commx::communicator<transport, commx::coll::COMMX_VARIANT_COLLECTIVES,
                                         commx::stats::COMMX_VARIANT_STATS>;

/// The build target's name, e.g. "md_replicated_shm".
inline constexpr std::string_view target_name = COMMX_VARIANT_NAME;

}  // namespace commx::variant
