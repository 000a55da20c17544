// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One rank's UCP context and worker (transport/ucx.hpp): made with tag matching and wakeup,
/// its settings the user's own (UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_THRESH, ... as UCX reads
/// them) except one default: peers are checked every second (UCX_KEEPALIVE_INTERVAL, UCX's
/// own default 20 s), so a dead peer over shared memory is found within the deadlines commx
/// users set, as over TCP, where a closed connection tells at once. Sleeping: arm the worker,
/// then poll its event descriptor until something arrives or the deadline passes.

#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"

namespace commx::detail::ucx {

/// UCX's words for a status.
inline std::string status_text(ucs_status_t status) { return ucs_status_string(status); }

/// The lanes of endpoint `ep` as UCX describes them (`ucp_ep_print_info`), one line each:
/// which of its transports and devices carry what.
inline std::vector<std::string> lanes_of(ucp_ep_h ep) {
  std::vector<std::string> lanes;
  char* text = nullptr;
  std::size_t length = 0;
  FILE* out = ::open_memstream(&text, &length);
  if (out == nullptr) return lanes;
  ucp_ep_print_info(ep, out);
  std::fclose(out);
  std::string_view rest(text, length);
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find('\n'), rest.size());
    std::string_view line = rest.substr(0, end);
    line.remove_prefix(std::min(line.find_first_not_of("# "), line.size()));
    if (line.starts_with("lane[")) lanes.emplace_back(line);
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  std::free(text);
  return lanes;
}

class worker {
 public:
  worker() {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "reading UCX's configuration");
    if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
      ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    // RMA and atomics for windows (rma_window.hpp); UCX emulates them where a transport lacks them.
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA | UCP_FEATURE_AMO32 |
                      UCP_FEATURE_AMO64;
    const ucs_status_t made = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(made, "initialising UCX (UCX_TLS and UCX_NET_DEVICES name what it may use)");
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (const ucs_status_t s = ucp_worker_create(context_, &wparams, &worker_); s != UCS_OK) {
      ucp_cleanup(context_);
      check(s, "creating a UCX worker: no usable transport (UCX_TLS, UCX_NET_DEVICES)");
    }
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    if (const ucs_status_t s = ucp_worker_get_address(worker_, &address, &length); s != UCS_OK) {
      close();
      check(s, "reading the UCX worker's address");
    }
    const auto* bytes = reinterpret_cast<const std::byte*>(address);
    address_.assign(bytes, bytes + length);
    ucp_worker_release_address(worker_, address);
    if (const ucs_status_t s = ucp_worker_get_efd(worker_, &efd_); s != UCS_OK) {
      close();
      check(s, "reading the UCX worker's event descriptor");
    }
  }
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  ~worker() { close(); }

  [[nodiscard]] ucp_worker_h get() const { return worker_; }
  [[nodiscard]] ucp_context_h context() const { return context_; }
  /// This worker's address, as peers connect to it.
  [[nodiscard]] std::span<const std::byte> address() const { return address_; }

  /// One turn of UCX's progress; true when it found work. A wait polls with it: over tcp each
  /// turn is a system call (epoll_wait), so a turn that only finds nothing more after an
  /// arrival would sit between that arrival and the caller seeing it.
  bool progress() {
    const bool any = ucp_worker_progress(worker_) != 0;
    activity_ += any ? 1 : 0;
    return any;
  }
  /// Turns until nothing more happens (bounded: a flood cannot keep the caller here).
  void drain() {
    for (int turn = 0; turn < 64 && progress(); ++turn) {
    }
  }
  /// How many progress calls found work: a wait's polling budget starts again when it moves.
  [[nodiscard]] std::uint64_t activity() const { return activity_; }

  /// Sleeps until the worker has something to do or `until` passes. False: it had something
  /// already (arming found events), progress again.
  bool sleep_until(clock::time_point until) {
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) return false;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock::now());
    pollfd fd{efd_, POLLIN, 0};
    // At most 100 ms at a time: a peer's loss found by keepalive is progress, not an event.
    ::poll(&fd, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 100)));
    return true;
  }

 private:
  static void check(ucs_status_t status, const char* what) {
    if (status != UCS_OK) {
      throw error(errc::bootstrap_failed, fmt::format("ucx: {}: {}", what, status_text(status)));
    }
  }
  void close() {
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
    worker_ = nullptr;
    context_ = nullptr;
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<std::byte> address_;
  int efd_ = -1;
  std::uint64_t activity_ = 0;
};

}  // namespace commx::detail::ucx
