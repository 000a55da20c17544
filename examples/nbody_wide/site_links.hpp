// SPDX-License-Identifier: MIT
#pragma once
// The two levels a rank talks over, as CosmoGrid ran GreeM (seed 004, Fig. 5): a communicator
// of the ranks at its site, and, on each site's first rank (its leader), a wide communicator of
// the leaders. Whatever crosses between sites is gathered on the leader, sent over the wide
// link to the other leader (in pieces under the link's eager size), and handed out at the other
// side; nothing else crosses.
//
// The wide communicator is the wan stack of a job of leaders (each site its own job), or the
// leaders' part of one communicator with sites (shm+tcp+wan, mpi+wan). With one site there is
// none, and every operation stays in the site.
//
// Ranks are numbered site by site (global rank = the site's first rank + rank in the site).
// A lost wide link is reported by the leader to its whole site before anyone waits on it, so
// that every rank stops naming the site that was lost, not the leader that stopped.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/request.hpp"
#include "mesh_pieces.hpp"
#include "particle.hpp"
#include "step_clock.hpp"

namespace nbody {

/// Thrown on every rank of a site when its leader lost the wide link; each rank has already
/// printed why on stderr.
struct stopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A particle on its way to another site, with the global rank it is for.
struct routed_particle {
  std::int64_t dest;
  particle p;
};

template <class SiteComm, class WideComm>
class site_links {
 public:
  /// Collective over the site. `wide` is the leaders' communicator, on the leader of each site
  /// when there are several sites, else null. `problem` identifies the run (its options and
  /// initial conditions): sites that are jobs of their own must run the same one.
  site_links(SiteComm& site, WideComm* wide, step_clock& clock, std::uint64_t problem)
      : site_(site), wide_(wide), clock_(clock) {
    std::array<std::int64_t, 2> shape{0, 1};  // this site's index, the number of sites
    if (leader() && wide_ != nullptr) shape = {wide_->rank(), wide_->size()};
    site_.bcast(shape, 0, long_wait());
    site_index_ = static_cast<int>(shape[0]);
    site_count_ = static_cast<int>(shape[1]);
    first_rank_.assign(as_index(site_count_) + 1, 0);  // rank() is the site's until sizes are in
    site_sizes_.assign(as_index(site_count_), site_.size());
    if (site_count_ > 1 && leader()) {
      const std::array<std::uint64_t, 2> mine{static_cast<std::uint64_t>(site_.size()), problem};
      std::vector<std::uint64_t> all(2 * as_index(site_count_));
      report([&] { wide_->allgather(mine, all, leader_deadline()); });
      for (int s = 0; s < site_count_ && !failure_; ++s) {
        site_sizes_[as_index(s)] = static_cast<std::int64_t>(all[2 * as_index(s)]);
        if (all[2 * as_index(s) + 1] != problem) {
          fail(
              fmt::format("site {} runs another problem than site {} (their options or "
                          "initial conditions differ)",
                          s, site_index_));
        }
      }
    }
    if (site_count_ > 1) site_.bcast(site_sizes_, 0, long_wait());
    for (std::size_t s = 0; s < site_sizes_.size(); ++s) {
      first_rank_[s + 1] = first_rank_[s] + static_cast<int>(site_sizes_[s]);
    }
    if (site_count_ > 1) {
      if (leader()) {
        send_report();
      } else {
        receive_report();
      }
    }
  }

  [[nodiscard]] int rank() const { return first_rank_[as_index(site_index_)] + site_.rank(); }
  [[nodiscard]] int size() const { return first_rank_.back(); }
  [[nodiscard]] int sites() const { return site_count_; }
  [[nodiscard]] int site() const { return site_index_; }
  [[nodiscard]] bool leader() const { return site_.rank() == 0; }
  [[nodiscard]] int site_of(int global) const {
    const auto after = std::upper_bound(first_rank_.begin(), first_rank_.end(), global);
    return static_cast<int>(after - first_rank_.begin()) - 1;
  }

  // --- particles: each rank sends each other rank a list; it gets back its own lists ---------

  /// Starts the exchange: what goes to other sites is gathered on the leader and sent; what
  /// stays in the site is exchanged at once. Returns the particles from this site's ranks
  /// (this rank's own list included). `outgoing` has one list per global rank.
  std::vector<particle> begin_exchange(const std::vector<std::vector<particle>>& outgoing) {
    std::vector<routed_particle> remote;
    {
      auto timed = clock_.time(part::compute);
      for (int g = 0; g < size(); ++g) {
        if (site_of(g) == site_index_) continue;
        for (const particle& p : outgoing[as_index(g)]) remote.push_back({g, p});
      }
    }
    if (site_count_ > 1) send_remote_particles(remote);

    auto timed = clock_.time(part::local);
    const std::size_t n = as_index(site_.size());
    std::vector<std::size_t> send_counts(n), recv_counts(n);
    std::vector<particle> sending;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& list = outgoing[as_index(first_rank_[as_index(site_index_)]) + r];
      send_counts[r] = list.size();
      sending.insert(sending.end(), list.begin(), list.end());
    }
    site_.alltoall(send_counts, recv_counts);
    std::vector<particle> received(total(recv_counts));
    site_.alltoallv(sending, send_counts, received, recv_counts);
    return received;
  }

  /// Finishes the exchange: the particles other sites sent this rank.
  std::vector<particle> finish_exchange() {
    if (site_count_ == 1) return {};
    auto timed = clock_.time(part::wide);
    std::vector<routed_particle> arrived;
    std::vector<std::size_t> counts(as_index(site_.size()));
    if (leader()) {
      const auto until = leader_deadline();
      report([&] { arrived = receive_remote_particles(until); });
      // Stable: each destination gets its particles in site order, then in sending order.
      std::stable_sort(
          arrived.begin(), arrived.end(),
          [](const routed_particle& a, const routed_particle& b) { return a.dest < b.dest; });
      for (const routed_particle& r : arrived) {
        const std::size_t to = local_rank_of(r.dest);
        if (to >= counts.size()) {
          fail(fmt::format("another site routed a particle to rank {}, not at site {}", r.dest,
                           site_index_));
          break;
        }
        ++counts[to];
      }
      particle_requests_.clear();
      send_report();
    } else {
      receive_report();
    }
    std::size_t mine = 0;
    site_.scatter(counts, mine, 0, long_wait());
    std::vector<routed_particle> got(mine);
    site_.scatterv(arrived, counts, got, 0, long_wait());
    std::vector<particle> result;
    result.reserve(got.size());
    for (const routed_particle& r : got) result.push_back(r.p);
    return result;
  }

  // --- the mesh, summed over every rank, with each rank's figures of the last step ---------

  /// Starts the sum: the site's meshes are summed on the leader (integers: the order does not
  /// change the bits), which sends the planes its site touched to the other leaders, with the
  /// site's figures (`figures`, the same length on every rank).
  void begin_mesh_sum(std::span<std::int64_t> mesh, std::span<const double> figures) {
    {
      auto timed = clock_.time(part::local);
      site_.reduce(mesh, std::plus<>{}, 0);
      site_figures_.resize(leader() ? figures.size() * as_index(site_.size()) : 0);
      site_.gather(figures, site_figures_, 0);
    }
    if (site_count_ == 1 || !leader()) return;
    auto timed = clock_.time(part::wide);
    const mesh_pieces pieces(mesh.size());
    mesh_out_.clear();
    for (std::size_t k = 0; k < pieces.count(); ++k) mesh_out_.push_back(pieces.pack(mesh, k));
    mesh_in_.assign(as_index(site_count_), std::vector<std::vector<std::int64_t>>(pieces.count()));
    figures_in_.assign(as_index(site_count_), {});
    report([&] {
      for (int s = 0; s < site_count_; ++s) {
        if (s == site_index_) continue;
        for (auto& piece : mesh_out_) mesh_requests_.push_back(wide_->isend(s, tag_mesh, piece));
        mesh_requests_.push_back(wide_->isend(s, tag_figures, site_figures_));
        for (auto& piece : mesh_in_[as_index(s)]) {
          mesh_requests_.push_back(wide_->irecv(s, tag_mesh, piece));
        }
        mesh_requests_.push_back(wide_->irecv(s, tag_figures, figures_in_[as_index(s)]));
      }
    });
  }

  /// Lets the wide link move while the caller computes (the wide transports progress only
  /// inside calls): the leader tests its outstanding requests. Cheap on other ranks.
  void progress() {
    if (!leader() || mesh_requests_.empty() || failure_) return;
    auto timed = clock_.time(part::wide);
    report([&] {
      for (auto& request : mesh_requests_) {
        if (request.active()) (void)request.test();
      }
    });
  }

  /// Finishes the sum: `mesh` becomes the sum over every rank; returns every rank's figures,
  /// in global rank order.
  std::vector<double> finish_mesh_sum(std::span<std::int64_t> mesh, std::size_t figures_each) {
    auto timed = clock_.time(site_count_ > 1 ? part::wide : part::local);
    std::vector<double> all(figures_each * as_index(size()));
    if (leader()) {
      if (site_count_ > 1) {
        const auto until = leader_deadline();
        report([&] {
          commx::wait_all(mesh_requests_, until);
          mesh_requests_.clear();
          for (int s = 0; s < site_count_; ++s) {
            if (s == site_index_) continue;
            const mesh_pieces pieces(mesh.size());
            for (std::size_t k = 0; k < pieces.count(); ++k) {
              pieces.add(mesh, k, mesh_in_[as_index(s)][k], s);
            }
          }
        });
      }
      for (int s = 0; s < site_count_; ++s) {
        const auto& from = s == site_index_ ? site_figures_ : figures_in_[as_index(s)];
        const std::size_t offset = figures_each * as_index(first_rank_[as_index(s)]);
        if (from.size() != figures_each * as_index(site_sizes_[as_index(s)]) ||
            offset + from.size() > all.size()) {
          fail(fmt::format("site {} sent {} figures where {} were expected", s, from.size(),
                           figures_each * as_index(site_sizes_[as_index(s)])));
        }
        if (!failure_) std::copy(from.begin(), from.end(), all.begin() + as_signed(offset));
      }
    } else if (site_count_ > 1) {
      receive_report();
    }
    if (site_count_ > 1 && leader()) send_report();
    site_.bcast(mesh, 0, long_wait());
    site_.bcast(all, 0, long_wait());
    return all;
  }

  // --- the end of the run -----------------------------------------------------------------

  /// Every rank's particles on global rank 0 (empty elsewhere).
  std::vector<particle> gather_all(std::span<const particle> own) {
    auto timed = clock_.time(site_count_ > 1 ? part::wide : part::local);
    std::size_t mine = own.size();
    std::vector<std::size_t> counts(leader() ? as_index(site_.size()) : 0);
    site_.gather(mine, counts, 0);
    std::vector<particle> site_particles(leader() ? total(counts) : 0);
    site_.gatherv(own, site_particles, counts, 0);
    if (site_count_ == 1 || !leader()) return site_particles;
    std::vector<particle> all;
    report([&] {
      if (site_index_ != 0) {
        wide_->send(0, tag_final, site_particles, long_wait());
        return;
      }
      all = std::move(site_particles);
      for (int s = 1; s < site_count_; ++s) {
        std::vector<particle> from;
        wide_->recv(s, tag_final, from, long_wait());
        all.insert(all.end(), from.begin(), from.end());
      }
    });
    if (failure_) throw std::runtime_error(*failure_);
    return all;
  }

 private:
  static constexpr int tag_particles = 101;
  static constexpr int tag_mesh = 102;
  static constexpr int tag_figures = 103;
  static constexpr int tag_final = 104;
  static constexpr std::size_t report_bytes = 512;

  static std::size_t as_index(int i) { return static_cast<std::size_t>(i); }
  static std::size_t as_index(std::int64_t i) { return static_cast<std::size_t>(i); }
  static std::ptrdiff_t as_signed(std::size_t i) { return static_cast<std::ptrdiff_t>(i); }
  static std::size_t total(std::span<const std::size_t> counts) {
    std::size_t sum = 0;
    for (std::size_t c : counts) sum += c;
    return sum;
  }
  [[nodiscard]] std::size_t local_rank_of(std::int64_t global) const {
    return as_index(global - first_rank_[as_index(site_index_)]);
  }

  // The leader's waits on the wide link, from the start of one finish_*, end within the
  // communicator's timeout; the site's ranks, waiting on the leader, wait longer (twice that
  // and more), so that the leader's report of a stalled or lost link reaches them before
  // their own deadline passes.
  [[nodiscard]] commx::clock::time_point leader_deadline() const {
    return commx::clock::now() + site_.timeout();
  }
  [[nodiscard]] auto long_wait() const { return site_.timeout() * 2 + std::chrono::seconds(5); }

  void send_remote_particles(const std::vector<routed_particle>& remote) {
    std::vector<routed_particle> gathered;
    {
      auto timed = clock_.time(part::local);
      std::size_t mine = remote.size();
      std::vector<std::size_t> counts(leader() ? as_index(site_.size()) : 0);
      site_.gather(mine, counts, 0);
      gathered.resize(leader() ? total(counts) : 0);
      site_.gatherv(remote, gathered, counts, 0);
    }
    if (!leader()) return;
    auto timed = clock_.time(part::wide);
    particles_out_.assign(as_index(site_count_), {});
    particles_in_.assign(as_index(site_count_), {});
    std::vector<std::vector<routed_particle>> to_site(as_index(site_count_));
    for (const routed_particle& r : gathered) {
      const int s = site_of(static_cast<int>(r.dest));
      if (s < 0 || s >= site_count_ || s == site_index_) {
        fail(fmt::format("a particle was routed to rank {}, not at another site", r.dest));
        continue;
      }
      to_site[as_index(s)].push_back(r);
    }
    report([&] {
      for (int s = 0; s < site_count_; ++s) {
        if (s == site_index_) continue;
        // In pieces under the eager size, the first led by a record holding the piece count
        // (as -count in dest), so the receiver asks for the rest once the first is in.
        const auto& records = to_site[as_index(s)];
        auto& pieces = particles_out_[as_index(s)];
        const std::size_t each = mesh_pieces::piece_bytes / sizeof(routed_particle);
        const std::size_t count = (records.size() + 1 + each - 1) / each;
        pieces.assign(count, {});
        pieces[0].push_back({-static_cast<std::int64_t>(count), particle{}});
        for (std::size_t i = 0; i < records.size(); ++i) {
          pieces[(i + 1) / each].push_back(records[i]);
        }
        for (auto& piece : pieces) {
          particle_sends_.push_back(wide_->isend(s, tag_particles, piece));
        }
        particles_in_[as_index(s)].assign(1, {});
        particle_requests_.push_back(
            wide_->irecv(s, tag_particles, particles_in_[as_index(s)].front()));
      }
    });
  }

  // The pieces from every other site, once the first of each says how many there are.
  // (The sends are waited for last: a piece above the transport's eager size waits for the
  // receive that the other leader posts only once its own first piece is in.)
  std::vector<routed_particle> receive_remote_particles(commx::clock::time_point until) {
    commx::wait_all(particle_requests_, until);
    particle_requests_.clear();
    constexpr std::int64_t most_pieces = 1 << 20;
    for (int s = 0; s < site_count_; ++s) {
      if (s == site_index_) continue;
      auto& pieces = particles_in_[as_index(s)];
      const auto& first = pieces.front();
      const std::int64_t lead = first.empty() ? 0 : first.front().dest;
      if (lead >= 0 || lead < -most_pieces) {
        throw std::runtime_error(
            fmt::format("site {} sent particles without a valid piece count", s));
      }
      pieces.resize(static_cast<std::size_t>(-lead));
      for (std::size_t k = 1; k < pieces.size(); ++k) {
        particle_requests_.push_back(wide_->irecv(s, tag_particles, pieces[k]));
      }
    }
    commx::wait_all(particle_requests_, until);
    particle_requests_.clear();
    commx::wait_all(particle_sends_, until);
    particle_sends_.clear();
    std::vector<routed_particle> arrived;
    for (int s = 0; s < site_count_; ++s) {
      if (s == site_index_) continue;
      const auto& pieces = particles_in_[as_index(s)];
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        arrived.insert(arrived.end(), pieces[k].begin() + (k == 0 ? 1 : 0), pieces[k].end());
      }
    }
    return arrived;
  }

  // Runs a leader's wide-link work; a failure there is kept, to be reported to the site.
  template <class Work>
  void report(Work&& work) {
    if (failure_) return;
    try {
      work();
    } catch (const commx::error& e) {
      const bool stalled = e.code() == commx::errc::timeout;
      fail(
          fmt::format("rank {} (leader of site {}) lost the wide-area link to the other "
                      "site{} ({}): {}",
                      rank(), site_index_, site_count_ > 2 ? "s" : "",
                      stalled ? "nothing came over it within the timeout"
                              : "a leader there, or a relay on the way, is gone",
                      e.what()));
    } catch (const std::exception& e) {
      fail(fmt::format("rank {} (leader of site {}): the wide-area exchange failed: {}", rank(),
                       site_index_, e.what()));
    }
  }
  void fail(std::string why) {
    if (!failure_) failure_ = std::move(why);
  }

  // The leader tells its site whether the wide link delivered, before the site waits for data.
  void send_report() {
    std::array<char, report_bytes> text{};
    if (failure_) std::strncpy(text.data(), failure_->c_str(), report_bytes - 1);
    site_.bcast(text, 0, long_wait());
    if (failure_) stop_with(*failure_);
  }
  void receive_report() {
    std::array<char, report_bytes> text{};
    site_.bcast(text, 0, long_wait());
    if (text[0] != '\0') stop_with(std::string(text.data()));
  }
  // Every rank of the site says why it stops, and has said it before any of them exits: a
  // launcher stops the whole job when its first rank exits.
  [[noreturn]] void stop_with(const std::string& why) {
    fmt::print(stderr, "rank {}: {}\n", rank(), why);
    std::fflush(stderr);
    try {
      site_.barrier(std::chrono::seconds(5));
    } catch (const std::exception&) {  // a rank gone as well: the report stands
    }
    throw stopped(why);
  }

  SiteComm& site_;
  WideComm* wide_;
  step_clock& clock_;
  int site_index_ = 0;
  int site_count_ = 1;
  std::vector<std::int64_t> site_sizes_;
  std::vector<int> first_rank_;
  std::optional<std::string> failure_;

  std::vector<std::vector<std::vector<routed_particle>>> particles_out_, particles_in_;
  std::vector<typename WideComm::request> particle_requests_, particle_sends_;
  std::vector<std::vector<std::int64_t>> mesh_out_;
  std::vector<double> site_figures_;
  std::vector<std::vector<std::vector<std::int64_t>>> mesh_in_;  // [site][piece]
  std::vector<std::vector<double>> figures_in_;
  std::vector<typename WideComm::request> mesh_requests_;
};

}  // namespace nbody
