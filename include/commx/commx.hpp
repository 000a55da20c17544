// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Everything commx offers that needs no optional dependency: the communicator, the in-process
/// transport, the collectives policies, stats, errors, serialization and bootstrap. Transports
/// with dependencies of their own (tcp, mpi, ...) are included by their own headers.

#include "commx/active_messages.hpp"
#include "commx/bootstrap.hpp"
#include "commx/coll/concept.hpp"
#include "commx/coll/binomial.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "commx/communicator.hpp"
#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/launch.hpp"
#include "commx/ops.hpp"
#include "commx/options.hpp"
#include "commx/request.hpp"
#include "commx/serialize.hpp"
#include "commx/stats.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/inproc.hpp"
#include "commx/window.hpp"
