// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The simulation a process runs its simulated jobs in: SimGrid's engine, made once per process
/// (SimGrid has one engine per process), the platform it loads once, and where each rank of a
/// job runs on it. A process may run several jobs one after another (a test program runs
/// hundreds); they share the platform and the simulated clock, which goes on from one job to
/// the next.
///
/// What a job runs on, from the environment (docs/environment.md):
///
/// | variable | meaning | default |
/// |---|---|---|
/// | COMMX_SIMGRID_RANKS | the job's rank count (commx::run) | 1 |
/// | COMMX_SIMGRID_PLATFORM | a SimGrid platform file, or a shipped platform's name (`fat-tree`, `fat-tree-nodes`, `two-sites`, `this-machine-shm`, `this-machine-tcp`) | `fat-tree` |
/// | COMMX_SIMGRID_RANKS_PER_HOST | ranks placed on each host, in rank order | the hosts' core count |
/// | COMMX_SIMGRID_HOSTFILE | a file of host names, one per rank in rank order (as smpirun's -hostfile), instead | none |
/// | COMMX_SIMGRID_COMPUTE | `measured`: the program's compute between two calls into commx becomes simulated time on its host; `skip`: only communication takes time | `measured` |
/// | COMMX_SIMGRID_CONFIG | SimGrid settings, `name:value` separated by spaces (`network/model:SMPI`; `contexts/factory:thread`: a thread per rank, which AddressSanitizer follows) | none |
/// | COMMX_SIMGRID_EAGER_BYTES | the largest send that completes at the sender at once; a larger one completes when its transfer ends (job.hpp) | 0 |
///
/// Hosts are taken in the natural order of their names (`node-9` before `node-10`); rank r runs
/// on host r / ranks_per_host, or on the host its line of the host file names. A host is a node (`node_of`); the zones directly under the
/// platform's root zone are sites (`site_of`), so a platform of two clusters is two sites.

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/simgrid/compute_clock.hpp"

#ifndef COMMX_SIMGRID_PLATFORM_DIR
#define COMMX_SIMGRID_PLATFORM_DIR ""
#endif

namespace commx::detail::simgrid {

namespace s4u = ::simgrid::s4u;

/// How this process's simulated jobs run (see the file comment).
struct settings {
  std::string platform = "fat-tree";
  int ranks_per_host = 0;  // 0: the first host's core count
  std::string hostfile;
  bool measure_compute = true;
  std::vector<std::string> config;
  std::size_t eager_bytes = 0;  // every send waits for its transfer (job.hpp)

  static settings from_env() {
    settings s;
    if (const char* p = std::getenv("COMMX_SIMGRID_PLATFORM"); p != nullptr && *p != '\0') {
      s.platform = p;
    }
    if (const char* k = std::getenv("COMMX_SIMGRID_RANKS_PER_HOST"); k != nullptr && *k != '\0') {
      s.ranks_per_host = count_in("COMMX_SIMGRID_RANKS_PER_HOST", k, 1 << 16);
    }
    if (const char* f = std::getenv("COMMX_SIMGRID_HOSTFILE"); f != nullptr && *f != '\0') {
      s.hostfile = f;
    }
    if (const char* c = std::getenv("COMMX_SIMGRID_COMPUTE"); c != nullptr && *c != '\0') {
      const std::string_view mode = c;
      if (mode != "measured" && mode != "skip") {
        throw error(errc::invalid_argument,
                    fmt::format("COMMX_SIMGRID_COMPUTE='{}' is neither measured nor skip", mode));
      }
      s.measure_compute = mode == "measured";
    }
    if (const char* e = std::getenv("COMMX_SIMGRID_EAGER_BYTES"); e != nullptr && *e != '\0') {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(e, &end, 10);
      if (end == e || *end != '\0' || *e == '-' || n > (1ULL << 40)) {
        throw error(errc::invalid_argument,
                    fmt::format("COMMX_SIMGRID_EAGER_BYTES='{}' is not a byte count", e));
      }
      s.eager_bytes = static_cast<std::size_t>(n);
    }
    if (const char* c = std::getenv("COMMX_SIMGRID_CONFIG"); c != nullptr) {
      std::istringstream words(c);
      for (std::string word; words >> word;) s.config.push_back(word);
    }
    return s;
  }

  /// A rank count from the environment, in [1, limit].
  static int count_in(const char* variable, const char* text, int limit) {
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || n < 1 || n > limit) {
      throw error(errc::invalid_argument,
                  fmt::format("{}='{}' is not a count in [1, {}]", variable, text, limit));
    }
    return static_cast<int>(n);
  }
};

/// `name` as a file: itself if it names one, else the shipped platform of that name.
inline std::filesystem::path platform_file(const std::string& name) {
  const std::filesystem::path given(name);
  if (std::filesystem::is_regular_file(given)) return given;
  std::vector<std::filesystem::path> dirs;
  if (const char* d = std::getenv("COMMX_SIMGRID_PLATFORM_DIR"); d != nullptr && *d != '\0') {
    dirs.emplace_back(d);
  }
  // Compiled in: absolute for an installed commx; relative to the program's own directory in
  // commx's build tree (a compile command then holds no clone's path).
  if (const std::filesystem::path compiled_in(COMMX_SIMGRID_PLATFORM_DIR); !compiled_in.empty()) {
    dirs.push_back(compiled_in.is_absolute()
                       ? compiled_in
                       : std::filesystem::read_symlink("/proc/self/exe").parent_path() /
                             compiled_in);
  }
  // Where Debian's package and a default `cmake --install` put them, for builds that name no
  // directory (pkg-config's flags carry none).
  dirs.emplace_back("/usr/share/commx/simgrid");
  dirs.emplace_back("/usr/local/share/commx/simgrid");
  for (const auto& dir : dirs) {
    const auto shipped = dir / (name + ".xml");
    if (std::filesystem::is_regular_file(shipped)) return shipped;
  }
  throw error(errc::invalid_argument,
              fmt::format("COMMX_SIMGRID_PLATFORM='{}' is neither a file nor a shipped platform "
                          "(fat-tree, fat-tree-nodes, two-sites) in '{}'",
                          name, dirs.front().string()));
}

/// Orders names as people read them: digits compare as numbers (`node-9` < `node-10`).
inline bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) != 0 &&
        std::isdigit(static_cast<unsigned char>(b[j])) != 0) {
      const std::size_t i0 = i;
      const std::size_t j0 = j;
      while (i < a.size() && std::isdigit(static_cast<unsigned char>(a[i])) != 0) ++i;
      while (j < b.size() && std::isdigit(static_cast<unsigned char>(b[j])) != 0) ++j;
      const std::string_view x = a.substr(i0, i - i0);
      const std::string_view y = b.substr(j0, j - j0);
      if (x.size() != y.size()) return x.size() < y.size();  // no leading zeros in host names
      if (x != y) return x < y;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

/// The process's simulation: the engine, its platform, the hosts in order and their sites.
class simulation {
 public:
  /// The one simulation of this process, made on first use with `wanted`'s platform and
  /// settings; a later job that asks for another platform is an error.
  static simulation& get(const settings& wanted) {
    static simulation one(wanted);
    if (wanted.platform != one.settings_.platform) {
      throw error(errc::invalid_argument,
                  fmt::format("simgrid: this process simulates platform '{}' already; a process "
                              "runs one platform ('{}' asked for)",
                              one.settings_.platform, wanted.platform));
    }
    one.settings_.ranks_per_host = wanted.ranks_per_host;
    one.settings_.hostfile = wanted.hostfile;
    one.settings_.measure_compute = wanted.measure_compute;
    one.settings_.eager_bytes = wanted.eager_bytes;
    return one;
  }

  [[nodiscard]] const settings& config() const { return settings_; }
  [[nodiscard]] s4u::Engine& engine() { return engine_; }
  [[nodiscard]] const std::vector<s4u::Host*>& hosts() const { return hosts_; }
  /// The site of hosts()[h]: its zone directly under the root, in the order of their names.
  [[nodiscard]] int site_of_host(std::size_t h) const { return sites_[h]; }
  [[nodiscard]] std::string platform_path() const { return path_.string(); }

  /// The hosts of a job of `ranks` ranks: by `nodes` (a node id per rank: node k runs on host
  /// k) when given, else by the host file, else ranks_per_host to a host in rank order.
  [[nodiscard]] std::vector<std::size_t> place(int ranks, const std::vector<int>& nodes) const {
    std::vector<std::size_t> host_of(static_cast<std::size_t>(ranks));
    const std::vector<std::size_t> listed = nodes.empty() && !settings_.hostfile.empty()
                                                ? hosts_in_file(ranks)
                                                : std::vector<std::size_t>{};
    const int per_host = settings_.ranks_per_host > 0
                             ? settings_.ranks_per_host
                             : std::max(hosts_.front()->get_core_count(), 1);
    for (int r = 0; r < ranks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const std::size_t h = !nodes.empty()    ? static_cast<std::size_t>(nodes[i])
                            : !listed.empty() ? listed[i]
                                              : static_cast<std::size_t>(r / per_host);
      if (h >= hosts_.size()) {
        throw error(errc::invalid_argument,
                    fmt::format("simgrid: {} ranks, {} to a host, need {} hosts; platform '{}' "
                                "has {}",
                                ranks, per_host, h + 1, path_.string(), hosts_.size()));
      }
      host_of[i] = h;
    }
    return host_of;
  }

  simulation(const simulation&) = delete;
  simulation& operator=(const simulation&) = delete;

 private:
  explicit simulation(const settings& s)
      : settings_(s), path_(platform_file(s.platform)), engine_(make_engine(s)) {
    // The platforms' latencies are what a message sees: no calibration factors. SimGrid's
    // default (LV08) multiplies latency by 13 to fit TCP over Ethernet; its SMPI model fits one
    // TCP cluster. COMMX_SIMGRID_CONFIG=network/model:SMPI (or LV08) chooses otherwise.
    bool model_given = false;
    for (const std::string& item : settings_.config) {
      model_given = model_given || item.starts_with("network/model:");
    }
    if (!model_given) s4u::Engine::set_config("network/model:CM02");
    for (const std::string& item : settings_.config) {
      if (!read_as_engine_starts(item)) s4u::Engine::set_config(item);
    }
    engine_.load_platform(path_.string());
    hosts_ = engine_.get_all_hosts();
    std::sort(hosts_.begin(), hosts_.end(), [](const s4u::Host* a, const s4u::Host* b) {
      return natural_less(a->get_name(), b->get_name());
    });
    if (hosts_.empty()) {
      throw error(errc::invalid_argument,
                  fmt::format("simgrid: platform '{}' has no host", path_.string()));
    }
    const s4u::NetZone* root = engine_.get_netzone_root();
    std::map<std::string, int, bool (*)(std::string_view, std::string_view)> site_ids(
        &natural_less);
    std::vector<std::string> zone_of(hosts_.size());
    for (std::size_t h = 0; h < hosts_.size(); ++h) {
      const s4u::NetZone* zone = hosts_[h]->get_englobing_zone();
      while (zone != nullptr && zone->get_parent() != root && zone != root) {
        zone = zone->get_parent();
      }
      zone_of[h] = zone == nullptr ? std::string() : zone->get_name();
      site_ids.emplace(zone_of[h], 0);
    }
    int next = 0;
    for (auto& [name, id] : site_ids) id = next++;
    sites_.reserve(hosts_.size());
    for (const auto& zone : zone_of) sites_.push_back(site_ids.at(zone));
    // From now on commx's clock is the simulation's: deadlines and timings are simulated time.
    clock_source.store(&simulated_now, std::memory_order_relaxed);
  }

  // The host file's first `ranks` names, as indices into hosts_.
  [[nodiscard]] std::vector<std::size_t> hosts_in_file(int ranks) const {
    std::ifstream file(settings_.hostfile);
    if (!file) {
      throw error(errc::invalid_argument,
                  fmt::format("COMMX_SIMGRID_HOSTFILE='{}' cannot be read", settings_.hostfile));
    }
    std::map<std::string, std::size_t, std::less<>> index;
    for (std::size_t h = 0; h < hosts_.size(); ++h) index.emplace(hosts_[h]->get_name(), h);
    std::vector<std::size_t> listed;
    for (std::string line;
         listed.size() < static_cast<std::size_t>(ranks) && std::getline(file, line);) {
      std::istringstream words(line);
      std::string name;
      if (!(words >> name)) continue;
      const auto it = index.find(name);
      if (it == index.end()) {
        throw error(errc::invalid_argument,
                    fmt::format("COMMX_SIMGRID_HOSTFILE: no host '{}' on platform '{}'", name,
                                path_.string()));
      }
      listed.push_back(it->second);
    }
    if (listed.size() < static_cast<std::size_t>(ranks)) {
      throw error(errc::invalid_argument,
                  fmt::format("COMMX_SIMGRID_HOSTFILE='{}' names {} hosts for {} ranks",
                              settings_.hostfile, listed.size(), ranks));
    }
    return listed;
  }

  // A setting SimGrid reads only as its engine starts (make_engine), not later.
  static bool read_as_engine_starts(const std::string& item) {
    return item.starts_with("contexts/");
  }

  static s4u::Engine make_engine(const settings& s) {
    // SimGrid's own informational lines (its settings, its clock at the end) stay quiet; its
    // warnings and errors still print. The settings SimGrid reads as its engine starts (how
    // actors switch: contexts/factory:thread, which AddressSanitizer follows where it does not
    // follow the default's stack switching) must come as arguments; the rest can come later.
    static std::vector<std::string> words;
    static std::vector<char*> argv;
    words = {"commx", "--log=root.thres:warning"};
    for (const std::string& item : s.config) {
      if (read_as_engine_starts(item)) words.push_back("--cfg=" + item);
    }
    argv.clear();
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    static int argc = 0;
    argc = static_cast<int>(words.size());
    return s4u::Engine(&argc, argv.data());
  }

  // The running rank's compute up to this reading counts first (compute_clock.hpp). An
  // execution ends early only if its actor is killed, which commx never does.
  static clock::time_point simulated_now() noexcept {
    compute_clock::settle_running();
    return clock::time_point(std::chrono::duration_cast<clock::duration>(
        std::chrono::duration<double>(s4u::Engine::get_clock())));
  }

  settings settings_;
  std::filesystem::path path_;
  s4u::Engine engine_;
  std::vector<s4u::Host*> hosts_;
  std::vector<int> sites_;
};

}  // namespace commx::detail::simgrid
