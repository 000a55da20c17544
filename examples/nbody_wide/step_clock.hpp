// SPDX-License-Identifier: MIT
#pragma once
// Where a rank's step time goes, in the three parts of the seed's Fig. 4: calculation, the
// communication inside a site, and the wide-area communication between sites (for ranks other
// than the leader, the time they wait for what the leader brings over the wide link).

#include <chrono>

#include "commx/deadline.hpp"

namespace nbody {

struct step_split {
  double compute = 0;
  double local = 0;
  double wide = 0;
};

enum class part { compute, local, wide };

class step_clock {
 public:
  /// Adds the time from its construction to its destruction to one part.
  class scope {
   public:
    scope(step_clock& clock, part p) : clock_(clock), part_(p), start_(commx::clock::now()) {}
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() {
      const double seconds = std::chrono::duration<double>(commx::clock::now() - start_).count();
      clock_.add(part_, seconds);
    }

   private:
    step_clock& clock_;
    part part_;
    std::chrono::steady_clock::time_point start_;
  };

  [[nodiscard]] scope time(part p) { return scope(*this, p); }

  void add(part p, double seconds) {
    switch (p) {
      case part::compute:
        split_.compute += seconds;
        break;
      case part::local:
        split_.local += seconds;
        break;
      case part::wide:
        split_.wide += seconds;
        break;
    }
  }

  /// This step's split, and a fresh start for the next.
  step_split take() {
    const step_split done = split_;
    split_ = {};
    return done;
  }

 private:
  step_split split_;
};

}  // namespace nbody
