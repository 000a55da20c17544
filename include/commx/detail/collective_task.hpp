// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A nonblocking collective in flight: the policy's own blocking code, run on a fiber
/// (detail/fiber.hpp) and driven by the request that holds it.
///
/// The port (detail/coll_port.hpp) asks the collective's driver at every point where the
/// policy would block:
///
/// | mode | set by | what a blocking point does |
/// |---|---|---|
/// | `poll` | `test`, any other wait of the rank | tests once; if not done, hands control back |
/// | `block` | `wait` on the collective's request | blocks as a blocking collective does, until the wait's deadline |
/// | `abandon` | a request dropped unfinished | throws collective_abandoned, so the policy's frames unwind and withdraw what they posted |
///
/// Every nonblocking collective of a rank is listed in its running_collectives, and every
/// blocking wait of that rank moves them all on: a rank blocked in a receive may be the one a
/// collective needs to forward data (MPI's progress rule). Nothing runs on another thread.

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/detail/fiber.hpp"

namespace commx::detail {

/// How a nonblocking collective's blocking points behave (see the table above).
enum class drive_mode { poll, block, abandon };

/// Thrown at a blocking point of an abandoned collective; never reaches a user.
struct collective_abandoned {};

/// What a collective's port sees of the request that drives it.
class collective_driver {
 public:
  [[nodiscard]] drive_mode mode() const { return mode_; }
  /// The deadline of the `wait` that runs the collective in block mode.
  [[nodiscard]] clock::time_point deadline() const { return when_; }
  /// Hands control back to whoever drives the collective (poll mode).
  virtual void yield() = 0;

 protected:
  collective_driver() = default;
  ~collective_driver() = default;
  drive_mode mode_ = drive_mode::poll;
  clock::time_point when_{};
};

/// A nonblocking collective as a request holds it.
class collective_task : public collective_driver {
 public:
  collective_task() = default;
  collective_task(const collective_task&) = delete;
  collective_task& operator=(const collective_task&) = delete;
  virtual ~collective_task() = default;

  /// Moves the collective on without blocking; true once it has ended, well or not.
  virtual bool advance() = 0;
  /// Runs the collective to its end, blocking until `when` at most.
  virtual void finish(clock::time_point when) = 0;
  /// True once the collective has ended.
  [[nodiscard]] virtual bool done() const = 0;
  /// True while its code runs (it is the one driving the rank's waits).
  [[nodiscard]] virtual bool running() const = 0;

  /// Rethrows the error the collective ended with, if it ended with one.
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 protected:
  std::exception_ptr error_;
};

/// The nonblocking collectives a rank has in flight; see the file comment. A collective leaves
/// the list as soon as its code ends, so that a rank with none in flight waits on the
/// transports' fast paths again even before its requests are waited for.
class running_collectives {
 public:
  void add(collective_task* task) { tasks_.push_back(task); }
  void remove(collective_task* task) { std::erase(tasks_, task); }
  [[nodiscard]] bool empty() const { return tasks_.empty(); }

  /// Moves on every collective that is neither ended nor the one running now. A collective
  /// that fails keeps its error for its own request; nothing is thrown here.
  void advance_all() {
    // By index: a collective that ends removes itself, and the next one takes its place.
    for (std::size_t i = 0; i < tasks_.size();) {
      collective_task* task = tasks_[i];
      if (!task->running()) (void)task->advance();
      if (i < tasks_.size() && tasks_[i] == task) ++i;
    }
  }

 private:
  std::vector<collective_task*> tasks_;
};

/// A collective whose code is `Body`, a callable `void(collective_driver&)`, run on a fiber.
/// It is listed in `running` from construction until its code ends.
template <class Body>
class fiber_collective final : public collective_task {
 public:
  fiber_collective(Body body, running_collectives& running)
      : body_(std::move(body)), running_(running), fiber_(runner{this}) {
    running_.add(this);
  }
  fiber_collective(const fiber_collective&) = delete;
  fiber_collective& operator=(const fiber_collective&) = delete;

  ~fiber_collective() override {
    if (!fiber_.finished()) {
      mode_ = drive_mode::abandon;
      fiber_.resume();  // its code unwinds, and leaves `running` as it ends
    }
  }

  bool advance() override {
    if (!fiber_.finished()) {
      mode_ = drive_mode::poll;
      fiber_.resume();
    }
    return fiber_.finished();
  }

  void finish(clock::time_point when) override {
    if (fiber_.finished()) return;
    mode_ = drive_mode::block;
    when_ = when;
    fiber_.resume();
  }

  [[nodiscard]] bool done() const override { return fiber_.finished(); }
  [[nodiscard]] bool running() const override { return fiber_.running(); }
  void yield() override { fiber_.suspend(); }

 private:
  struct runner {
    fiber_collective* self;
    void operator()() const noexcept {
      try {
        self->body_(static_cast<collective_driver&>(*self));
      } catch (const collective_abandoned&) {  // unwound on purpose: nobody waits for it
      } catch (...) {
        self->error_ = std::current_exception();
      }
      self->running_.remove(self);
    }
  };

  Body body_;
  running_collectives& running_;
  fiber<runner> fiber_;
};

}  // namespace commx::detail
