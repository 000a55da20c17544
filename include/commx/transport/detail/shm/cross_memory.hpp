// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Cross-memory attach: copying a large message straight out of the sender's address space with
/// process_vm_readv(2), one copy instead of two through the ring. The kernel allows it when this
/// process may ptrace the sender (same user, and no Yama or seccomp policy forbidding it); the
/// endpoint checks that at start-up by reading a word a peer published, and falls back to the
/// ring when it is refused, at start-up or later.

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace commx::detail::shm {

enum class cross_copy { done, process_gone, refused, bad_address };

/// Under Yama's restricted mode (kernel.yama.ptrace_scope = 1, Ubuntu's default) a process may
/// read only its descendants' memory, and a job's ranks are siblings: this lets any process of
/// this user read this one's, as Open MPI's vader does for its cma. The usual checks stay (same
/// user, or CAP_SYS_PTRACE); without Yama the call fails (EINVAL) and changes nothing.
inline void let_same_user_read_this_process() {
#if defined(PR_SET_PTRACER) && defined(PR_SET_PTRACER_ANY)
  (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

using cross_call = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                               unsigned long);

/// Copies `bytes` between `local` here and `address` in process `pid` with `call`
/// (process_vm_readv or process_vm_writev: the same arguments, the same errors).
inline cross_copy copy_across(cross_call call, pid_t pid, std::uint64_t address, std::byte* local,
                              std::size_t bytes) {
  std::size_t copied = 0;
  while (copied < bytes) {
    iovec here{local + copied, bytes - copied};
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address in another process
    iovec there{reinterpret_cast<void*>(address + copied), bytes - copied};
    const ssize_t n = call(pid, &here, 1, &there, 1, 0);
    if (n > 0) {
      copied += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) return cross_copy::process_gone;
    if (n < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES)) return cross_copy::refused;
    return cross_copy::bad_address;  // EFAULT, or a call that made no progress
  }
  return cross_copy::done;
}

/// Copies `bytes` from `address` in process `pid` to `target`.
inline cross_copy read_from_process(pid_t pid, std::uint64_t address, std::byte* target,
                                    std::size_t bytes) {
  return copy_across(&::process_vm_readv, pid, address, target, bytes);
}

/// Copies `bytes` from `source` to `address` in process `pid`.
inline cross_copy write_to_process(pid_t pid, std::uint64_t address, const std::byte* source,
                                   std::size_t bytes) {
  // process_vm_writev only reads the local iovec's memory.
  return copy_across(&::process_vm_writev, pid, address, const_cast<std::byte*>(source), bytes);
}

}  // namespace commx::detail::shm
