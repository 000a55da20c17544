// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A fiber: a function run on a stack of its own that can hand control back to whoever
/// resumed it and later go on where it stopped. Nonblocking collectives run a policy's
/// blocking code on a fiber (detail/collective_task.hpp), so no policy is written twice.
///
/// Built on POSIX ucontext from the C library, with AddressSanitizer's and ThreadSanitizer's
/// fiber annotations so that both follow the switches. A fiber is resumed only by the thread
/// that made it, never from inside itself. Its body must not let an exception escape (the
/// owner catches). Stacks are mapped with a guard page below them, so an overflow faults
/// instead of corrupting memory, and a thread keeps a few freed stacks for its next fibers.

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <exception>
#include <new>
#include <utility>
#include <vector>

#include "commx/detail/sanitizers.hpp"
#if defined(COMMX_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(COMMX_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace commx::detail {

/// A fiber's stack: `bytes` usable bytes above a guard page, all from one mapping.
struct fiber_stack {
  void* mapping = nullptr;
  std::size_t mapped = 0;

  [[nodiscard]] void* bottom() const { return static_cast<std::byte*>(mapping) + page(); }
  [[nodiscard]] std::size_t bytes() const { return mapped - page(); }

  static std::size_t page() {
    static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return size;
  }
};

/// The stacks a thread has freed, kept for its next fibers: mapping a stack costs two system
/// calls, as much as a small collective.
class fiber_stack_pool {
 public:
  // Policies keep their buffers on the heap; a sanitizer build's frames are several times
  // larger than a release build's, so the stack leaves room for both.
  static constexpr std::size_t usable_bytes = std::size_t{256} << 10;
  static constexpr std::size_t kept = 8;

  static fiber_stack take() {
    auto& pool = local();
    if (!pool.free_.empty()) {
      const fiber_stack stack = pool.free_.back();
      pool.free_.pop_back();
      return stack;
    }
    fiber_stack stack;
    stack.mapped = usable_bytes + fiber_stack::page();
    stack.mapping = ::mmap(nullptr, stack.mapped, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack.mapping == MAP_FAILED) throw std::bad_alloc();
    if (::mprotect(stack.mapping, fiber_stack::page(), PROT_NONE) != 0) {
      ::munmap(stack.mapping, stack.mapped);
      throw std::bad_alloc();
    }
    return stack;
  }

  static void give_back(fiber_stack stack) noexcept {
    auto& pool = local();
    if (pool.free_.size() < kept) {
      try {
        pool.free_.push_back(stack);
        return;
      } catch (...) {  // no room to keep it: unmap it
      }
    }
    ::munmap(stack.mapping, stack.mapped);
  }

  fiber_stack_pool() = default;
  fiber_stack_pool(const fiber_stack_pool&) = delete;
  fiber_stack_pool& operator=(const fiber_stack_pool&) = delete;
  ~fiber_stack_pool() {
    for (const fiber_stack& stack : free_) ::munmap(stack.mapping, stack.mapped);
  }

 private:
  static fiber_stack_pool& local() {
    thread_local fiber_stack_pool pool;
    return pool;
  }
  std::vector<fiber_stack> free_;
};

/// A body run on a stack of its own; see the file comment.
/// @tparam Body a callable `void()` that does not throw.
template <class Body>
class fiber {
 public:
  explicit fiber(Body body) : body_(std::move(body)), stack_(fiber_stack_pool::take()) {
    ::getcontext(&self_);
    self_.uc_stack.ss_sp = stack_.bottom();
    self_.uc_stack.ss_size = stack_.bytes();
    self_.uc_link = nullptr;
    ::makecontext(&self_, &fiber::entry, 0);
#ifdef COMMX_TSAN
    tsan_self_ = __tsan_create_fiber(0);
#endif
  }
  fiber(const fiber&) = delete;
  fiber& operator=(const fiber&) = delete;
  fiber(fiber&&) = delete;
  fiber& operator=(fiber&&) = delete;

  /// A fiber is destroyed finished or never started; a suspended one keeps its stack (its
  /// frames may still be referred to), which its owner prevents by running it to the end.
  ~fiber() {
#ifdef COMMX_TSAN
    __tsan_destroy_fiber(tsan_self_);
#endif
    if (finished_ || !started_) fiber_stack_pool::give_back(stack_);
  }

  /// Runs the body until it suspends or ends.
  void resume() {
    if (finished_) return;
    if (!started_) {
      started_ = true;
      starting() = this;
    }
    resuming_ = true;
#ifdef COMMX_TSAN
    tsan_caller_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_self_, 0);
#endif
#ifdef COMMX_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, stack_.bottom(), stack_.bytes());
#endif
    ::swapcontext(&caller_, &self_);
#ifdef COMMX_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    resuming_ = false;
  }

  /// Hands control back to the caller of `resume`; called only by the body, on this fiber.
  void suspend() { switch_to_caller(/*for_good=*/false); }

  /// True once the body has returned.
  [[nodiscard]] bool finished() const { return finished_; }
  /// True while the body runs (between a `resume` and the next `suspend` or the end).
  [[nodiscard]] bool running() const { return resuming_; }

 private:
  static fiber*& starting() {
    thread_local fiber* self = nullptr;
    return self;
  }

  static void entry() {
    fiber* self = std::exchange(starting(), nullptr);
    self->arrived();
    self->body_();
    self->finished_ = true;
    self->switch_to_caller(/*for_good=*/true);
  }

  // What every arrival on this fiber's stack does first: tell ASan where we came from.
  void arrived() {
#ifdef COMMX_ASAN
    __sanitizer_finish_switch_fiber(fake_stack_, &caller_bottom_, &caller_bytes_);
#endif
  }

  void switch_to_caller(bool for_good) {
#ifdef COMMX_TSAN
    __tsan_switch_to_fiber(tsan_caller_, 0);
#endif
#ifdef COMMX_ASAN
    // A fiber leaving for good passes no fake-stack slot, so ASan frees its fake frames.
    __sanitizer_start_switch_fiber(for_good ? nullptr : &fake_stack_, caller_bottom_,
                                   caller_bytes_);
#else
    (void)for_good;
#endif
    ::swapcontext(&self_, &caller_);
    arrived();
  }

  Body body_;
  fiber_stack stack_;
  ucontext_t self_{};
  ucontext_t caller_{};
  bool started_ = false;
  bool finished_ = false;
  bool resuming_ = false;
#ifdef COMMX_ASAN
  void* fake_stack_ = nullptr;
  const void* caller_bottom_ = nullptr;
  std::size_t caller_bytes_ = 0;
#endif
#ifdef COMMX_TSAN
  void* tsan_self_ = nullptr;
  void* tsan_caller_ = nullptr;
#endif
};

}  // namespace commx::detail
