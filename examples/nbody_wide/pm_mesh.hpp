// SPDX-License-Identifier: MIT
// The long-range (particle-mesh) force: triangular-shaped-cloud mass on a replicated mesh, Poisson's
// equation by FFT with the Gaussian long-range filter, and interpolation back to particles.
#pragma once

#include <fftw3.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "force_params.hpp"
#include "particle.hpp"

namespace nbody {

namespace detail {

// The triangular-shaped-cloud (TSC) stencil of one position: mesh points sit at i * h, and a
// position touches its nearest point and that point's two neighbours on each axis, with weights
// (1/2 - x)^2 / 2, 3/4 - x^2, (1/2 + x)^2 / 2 at offset x in [-1/2, 1/2] from the nearest point.
// Cloud-in-cell's aliasing left ~1.1e-3 rms force error on the test clump at mesh 64 (r_s = 2
// cells), above the 1e-3 target by itself; TSC's window (sinc^3 per axis) leaves 1.7e-4.
struct tsc_stencil {
  std::array<std::array<int, 3>, 3> index;  // [axis][nearest - 1, nearest, nearest + 1], wrapped
  std::array<std::array<double, 3>, 3> weight;
};

inline tsc_stencil tsc_of(const vec3& pos, double cells_per_length, int mesh) {
  tsc_stencil s{};
  for (int d = 0; d < 3; ++d) {
    const double u = pos[d] * cells_per_length;
    const double nearest = std::floor(u + 0.5);
    const double x = u - nearest;
    s.weight[d] = {0.5 * (0.5 - x) * (0.5 - x), 0.75 - x * x, 0.5 * (0.5 + x) * (0.5 + x)};
    // Positions lie in [0, box), but nearest may be mesh; wrapping keeps the index valid (and
    // fmod first keeps any other value within an int).
    const double wrapped = std::fmod(nearest, static_cast<double>(mesh));
    int i = std::isfinite(wrapped) ? static_cast<int>(wrapped) : 0;
    if (i < 0) i += mesh;
    s.index[d] = {i == 0 ? mesh - 1 : i - 1, i, i + 1 == mesh ? 0 : i + 1};
  }
  return s;
}

inline std::size_t mesh_index(int ix, int iy, int iz, int mesh) {
  return (static_cast<std::size_t>(ix) * mesh + iy) * mesh + iz;
}

}  // namespace detail

// Mass per mesh point in fixed point: integer sums are associative, so the meshes of all ranks
// add to the same bits in any order, and every rank then solves the same Poisson problem.
class mass_mesh {
 public:
  mass_mesh(const force_params& params, double total_mass)
      : mesh_((params.validate(), params.mesh)), cells_per_length_(params.mesh / params.box) {
    if (!(std::isfinite(total_mass) && total_mass > 0))
      throw std::invalid_argument("nbody::mass_mesh: total mass must be finite and positive");
    // 2^52 quanta for the whole mass leaves 2^11 of headroom below int64's limit for the
    // rounding of every weight, and resolves a particle of 1e-6 of the mass to 1e-10.
    quantum_ = std::ldexp(total_mass, -52);
    if (!std::isnormal(quantum_))
      throw std::invalid_argument("nbody::mass_mesh: total mass too small to count in quanta");
    total_mass_ = total_mass;
    cells_.assign(static_cast<std::size_t>(mesh_) * mesh_ * mesh_, 0);
  }

  void clear() { std::fill(cells_.begin(), cells_.end(), 0); }

  void deposit(std::span<const particle> particles) {
    for (const particle& p : particles) {
      // A mass above the total would overflow the fixed point's headroom.
      if (!(p.mass > 0 && p.mass <= total_mass_))
        throw std::invalid_argument("nbody::mass_mesh: particle " + std::to_string(p.id) +
                                    " has a mass outside (0, total mass]");
      const detail::tsc_stencil s = detail::tsc_of(p.pos, cells_per_length_, mesh_);
      const double scaled = p.mass / quantum_;
      for (int corner = 0; corner < 27; ++corner) {
        const int cx = corner / 9, cy = (corner / 3) % 3, cz = corner % 3;
        const double w = s.weight[0][cx] * s.weight[1][cy] * s.weight[2][cz];
        const std::size_t at =
            detail::mesh_index(s.index[0][cx], s.index[1][cy], s.index[2][cz], mesh_);
        cells_[at] += std::llround(scaled * w);
      }
    }
  }

  std::span<std::int64_t> cells() { return cells_; }
  std::span<const std::int64_t> cells() const { return cells_; }
  double quantum() const { return quantum_; }
  int mesh() const { return mesh_; }

 private:
  int mesh_;
  double cells_per_length_;
  double quantum_;
  double total_mass_ = 0;
  std::vector<std::int64_t> cells_;
};

namespace detail {

// FFTW's planner is not thread-safe and ranks may be threads of one process.
inline std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

struct fftw_free_deleter {
  void operator()(void* p) const { fftw_free(p); }
};
struct fftw_plan_deleter {
  void operator()(fftw_plan plan) const {
    std::lock_guard lock(fftw_planner_mutex());
    fftw_destroy_plan(plan);
  }
};
using fftw_plan_ptr = std::unique_ptr<std::remove_pointer_t<fftw_plan>, fftw_plan_deleter>;

// fftw_malloc gives every rank the same alignment, so FFTW picks the same codelets everywhere.
template <class T>
std::unique_ptr<T[], fftw_free_deleter> fftw_array(std::size_t n) {
  auto* p = static_cast<T*>(fftw_malloc(sizeof(T) * n));
  if (p == nullptr) throw std::bad_alloc();
  return std::unique_ptr<T[], fftw_free_deleter>(p);
}

}  // namespace detail

class pm_solver {
 public:
  explicit pm_solver(const force_params& params)
      : mesh_((params.validate(), params.mesh)),
        box_(params.box),
        split_radius_(params.split_radius()),
        real_(detail::fftw_array<double>(real_size())),
        density_k_(detail::fftw_array<fftw_complex>(complex_size())),
        work_k_(detail::fftw_array<fftw_complex>(complex_size())) {
    for (auto& m : fields_) m.assign(real_size(), 0.0);
    green_tables();
    // FFTW_ESTIMATE, never MEASURE: plans chosen by timing could differ between ranks, and then
    // so would the bits of the forces.
    std::lock_guard lock(detail::fftw_planner_mutex());
    forward_.reset(
        fftw_plan_dft_r2c_3d(mesh_, mesh_, mesh_, real_.get(), density_k_.get(), FFTW_ESTIMATE));
    backward_.reset(
        fftw_plan_dft_c2r_3d(mesh_, mesh_, mesh_, work_k_.get(), real_.get(), FFTW_ESTIMATE));
    if (!forward_ || !backward_) throw std::runtime_error("nbody::pm_solver: FFTW planning failed");
  }

  // The potential and the three acceleration components on the mesh, from the mass of all ranks.
  void solve(const mass_mesh& summed_over_all_ranks) {
    if (summed_over_all_ranks.mesh() != mesh_)
      throw std::invalid_argument("nbody::pm_solver::solve: mass mesh has a different size");
    const auto cells = summed_over_all_ranks.cells();
    const double quantum = summed_over_all_ranks.quantum();
    for (std::size_t i = 0; i < cells.size(); ++i)
      real_[i] = static_cast<double>(cells[i]) * quantum;
    fftw_execute(forward_.get());

    // The potential, green * rho, then a = -grad phi = -i k phi_k per axis (component 3 last).
    // Raw pointers: these loops run every step, and unoptimised builds do not inline accessors.
    const std::size_t n = complex_size();
    const double* green = green_.data();
    const fftw_complex* rho = density_k_.get();
    double* potential = potential_k_.data();
    fftw_complex* work = work_k_.get();
    const double* gradient_k = gradient_k_.data();
    for (std::size_t at = 0; at < n; ++at) {
      potential[2 * at] = green[at] * rho[at][0];
      potential[2 * at + 1] = green[at] * rho[at][1];
    }
    const int nz = mesh_ / 2 + 1;
    for (int field = 0; field < 4; ++field) {
      for (int ix = 0; ix < mesh_; ++ix) {
        for (int iy = 0; iy < mesh_; ++iy) {
          for (int iz = 0; iz < nz; ++iz) {
            const std::size_t at = (static_cast<std::size_t>(ix) * mesh_ + iy) * nz + iz;
            const double re = potential[2 * at], im = potential[2 * at + 1];
            if (field < 3) {
              const double k = gradient_k[field == 0 ? ix : field == 1 ? iy : iz];
              work[at][0] = k * im;  // (re + i im) (-i k)
              work[at][1] = -k * re;
            } else {
              work[at][0] = re;
              work[at][1] = im;
            }
          }
        }
      }
      fftw_execute(backward_.get());  // destroys work_k_, which is refilled for every field
      std::copy(real_.get(), real_.get() + real_size(), fields_[field].begin());
    }
  }

  // ADDS each particle's long-range acceleration and potential. The mesh potential holds the
  // particle's own smooth cloud, -m / (sqrt(pi) r_s) at its centre; that is taken out, so the
  // potential follows the Ewald convention (a particle does not pull on itself).
  void interpolate(std::span<const particle> particles, std::span<vec3> acc,
                   std::span<double> pot) const {
    if (acc.size() != particles.size() || pot.size() != particles.size())
      throw std::invalid_argument("nbody::pm_solver::interpolate: spans of different sizes");
    const double cells_per_length = mesh_ / box_;
    const double self_potential_factor = 1.0 / (std::sqrt(std::numbers::pi) * split_radius_);
    for (std::size_t n = 0; n < particles.size(); ++n) {
      const detail::tsc_stencil s = detail::tsc_of(particles[n].pos, cells_per_length, mesh_);
      double sum[4] = {0, 0, 0, 0};
      for (int corner = 0; corner < 27; ++corner) {
        const int cx = corner / 9, cy = (corner / 3) % 3, cz = corner % 3;
        const double w = s.weight[0][cx] * s.weight[1][cy] * s.weight[2][cz];
        const std::size_t at =
            detail::mesh_index(s.index[0][cx], s.index[1][cy], s.index[2][cz], mesh_);
        for (int field = 0; field < 4; ++field) sum[field] += w * fields_[field][at];
      }
      for (int d = 0; d < 3; ++d) acc[n][d] += sum[d];
      pot[n] += sum[3] + particles[n].mass * self_potential_factor;
    }
  }

 private:
  // The Green's function and wave numbers depend on the parameters alone: computed once.
  void green_tables() {
    constexpr double pi = std::numbers::pi;
    const int nz = mesh_ / 2 + 1;
    const double k_unit = 2 * pi / box_;
    const double volume = box_ * box_ * box_;
    const double rs2 = split_radius_ * split_radius_;
    // Per-axis tables: signed wave number, and the TSC window sinc(pi i / n)^3 squared for the
    // interpolation (deconvolving both assignment and interpolation).
    std::vector<double> k_axis(mesh_), window_axis(mesh_);
    gradient_k_.assign(mesh_, 0.0);
    for (int i = 0; i < mesh_; ++i) {
      const int signed_i = i <= mesh_ / 2 ? i : i - mesh_;
      k_axis[i] = k_unit * signed_i;
      // The spectral gradient of the Nyquist mode has no real counterpart: it is dropped.
      gradient_k_[i] = 2 * i == mesh_ ? 0.0 : k_axis[i];
      const double x = pi * signed_i / mesh_;
      const double sinc = signed_i == 0 ? 1.0 : std::sin(x) / x;
      window_axis[i] = sinc * sinc * sinc * sinc * sinc * sinc;
    }
    green_.assign(complex_size(), 0.0);
    potential_k_.assign(2 * complex_size(), 0.0);
    for (int ix = 0; ix < mesh_; ++ix) {
      for (int iy = 0; iy < mesh_; ++iy) {
        for (int iz = 0; iz < nz; ++iz) {
          const std::size_t at = (static_cast<std::size_t>(ix) * mesh_ + iy) * nz + iz;
          const double k2 =
              k_axis[ix] * k_axis[ix] + k_axis[iy] * k_axis[iy] + k_axis[iz] * k_axis[iz];
          if (k2 == 0) {
            // Periodic gravity with a neutralising background has no k = 0 force. The potential
            // keeps the k -> 0 limit of the long-range kernel, -4 pi (exp(-k^2 r_s^2) - 1) / k^2
            // = 4 pi r_s^2: with it the total potential of every source averages to zero over
            // the box, the convention of the Ewald reference, whatever r_s.
            green_[at] = 4 * pi * rs2 / volume;
          } else {
            const double window = window_axis[ix] * window_axis[iy] * window_axis[iz];
            green_[at] = -4 * pi / (k2 * volume) * std::exp(-k2 * rs2) / window;
          }
        }
      }
    }
  }

  std::size_t real_size() const { return static_cast<std::size_t>(mesh_) * mesh_ * mesh_; }
  std::size_t complex_size() const {
    return static_cast<std::size_t>(mesh_) * mesh_ * (mesh_ / 2 + 1);
  }

  int mesh_;
  double box_;
  double split_radius_;
  std::unique_ptr<double[], detail::fftw_free_deleter> real_;
  std::unique_ptr<fftw_complex[], detail::fftw_free_deleter> density_k_;
  std::unique_ptr<fftw_complex[], detail::fftw_free_deleter> work_k_;
  detail::fftw_plan_ptr forward_;
  detail::fftw_plan_ptr backward_;
  std::array<std::vector<double>, 4> fields_;  // acceleration x, y, z and potential
  std::vector<double> green_;                  // per k: potential_k = green * rho_k
  std::vector<double> gradient_k_;             // per axis index: signed wave number
  std::vector<double> potential_k_;            // re, im per k
};

}  // namespace nbody
