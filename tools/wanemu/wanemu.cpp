// SPDX-License-Identifier: MIT
//
// wanemu: a user-space wide-area link emulator between two network namespaces.
//
//   wanemu [--delay-ms D] [--rate-mbit R] [--queue-bytes N] [--loss P] [--seed S] ...
//
// This kernel has no netem qdisc, so the link is emulated in user space: wanemu creates two
// network namespaces (`ip netns add`), a TUN device in each (opened from inside the namespace,
// so the device lives there), gives them addresses on one subnet, and moves every IP packet read
// from one TUN to the other through link_model.hpp's model: random loss, a bottleneck queue with
// tail drop, serialisation at the link rate, and a fixed one-way delay. Both directions get the
// same parameters. Programs run in the namespaces (`ip netns exec NAME prog`) talk real TCP to
// each other, so windows, slow start, congestion control and retransmission are the kernel's own.
//
// When everything is set up, wanemu prints one line starting with "wanemu: ready" on stdout.
// It runs until SIGINT, SIGTERM or SIGHUP, then prints its counters ("wanemu: stats ..." per
// direction and "wanemu: cpu ..."), removes the devices and the namespaces it created and exits
// 0. If setup fails, whatever was created is removed and it exits 1 (2 for bad usage).
//
// Each direction is pumped by an event loop over epoll: the input TUN's fd and a timerfd armed
// at the next delivery time. With --threads 2 (the default) each direction has its own thread;
// with --threads 1 one loop serves both.

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "link_model.hpp"

extern char** environ;

namespace {

constexpr std::string_view kUsage =
    "usage: wanemu [options]\n"
    "\n"
    "Emulate a wide-area link between two network namespaces that wanemu creates, each with a\n"
    "TUN device; run programs in them with `ip netns exec NAME prog`. Prints a line starting\n"
    "with \"wanemu: ready\" when set up; runs until SIGINT/SIGTERM/SIGHUP, then prints its\n"
    "counters and removes the namespaces. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).\n"
    "\n"
    "link (both directions):\n"
    "  --delay-ms D       one-way propagation delay in ms (default 25: 50 ms RTT)\n"
    "  --rate-mbit R      bottleneck rate in Mbit/s, of IP bytes; 0: unlimited (default 1000)\n"
    "  --queue-bytes N    bottleneck queue limit, tail drop (default: rate x 2 x delay, at\n"
    "                     least 64 KiB)\n"
    "  --loss P           random loss probability per packet, a fraction (0.001) or a\n"
    "                     percentage (0.1%) (default 0)\n"
    "  --seed S           seed of the loss process (default 1)\n"
    "  --mtu M            MTU of the TUN devices (default 1500)\n"
    "\n"
    "setup:\n"
    "  --ns-a NAME        first namespace (default wanemu-a)\n"
    "  --ns-b NAME        second namespace (default wanemu-b)\n"
    "  --addr-a CIDR      address of the device in ns-a (default 10.77.0.1/24)\n"
    "  --addr-b CIDR      address of the device in ns-b (default 10.77.0.2/24)\n"
    "  --dev NAME         name of the TUN device in both namespaces (default wan0)\n"
    "  --txqueuelen N     the devices' transmit queue, in packets (default 10000)\n"
    "  --threads 1|2      one event loop for both directions, or one thread each (default 2)\n"
    "  -h, --help         show this help and exit\n";

struct options {
  double delay_ms = 25;
  double rate_mbit = 1000;
  std::optional<std::uint64_t> queue_bytes;
  double loss = 0;
  std::uint64_t seed = 1;
  unsigned mtu = 1500;
  std::string ns_a = "wanemu-a";
  std::string ns_b = "wanemu-b";
  std::string addr_a = "10.77.0.1/24";
  std::string addr_b = "10.77.0.2/24";
  std::string dev = "wan0";
  unsigned txqueuelen = 10000;
  unsigned threads = 2;
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail_errno(std::string_view what) {
  throw std::system_error(errno, std::generic_category(), std::string(what));
}

template <typename T>
T parse_number(std::string_view option, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size())
    throw usage_error(fmt::format("{}: '{}' is not a valid number", option, text));
  return value;
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      fmt::print("{}", kUsage);
      std::exit(0);
    }
    if (i + 1 >= argc) throw usage_error(fmt::format("unknown option or missing value: {}", arg));
    const std::string_view value = argv[++i];
    if (arg == "--delay-ms") {
      o.delay_ms = parse_number<double>(arg, value);
      if (!(o.delay_ms >= 0 && o.delay_ms <= 10000))
        throw usage_error("--delay-ms must be in [0, 10000]");
    } else if (arg == "--rate-mbit") {
      o.rate_mbit = parse_number<double>(arg, value);
      if (!(o.rate_mbit >= 0 && o.rate_mbit <= 1e6))
        throw usage_error("--rate-mbit must be in [0, 1e6]");
    } else if (arg == "--queue-bytes") {
      o.queue_bytes = parse_number<std::uint64_t>(arg, value);
    } else if (arg == "--loss") {
      const bool percent = value.ends_with('%');
      o.loss = parse_number<double>(arg, percent ? value.substr(0, value.size() - 1) : value);
      if (percent) o.loss /= 100;
      if (!(o.loss >= 0 && o.loss <= 1)) throw usage_error("--loss must be in [0, 1] (or 0%-100%)");
    } else if (arg == "--seed") {
      o.seed = parse_number<std::uint64_t>(arg, value);
    } else if (arg == "--mtu") {
      o.mtu = parse_number<unsigned>(arg, value);
      if (o.mtu < 576 || o.mtu > 65535) throw usage_error("--mtu must be in [576, 65535]");
    } else if (arg == "--ns-a") {
      o.ns_a = value;
    } else if (arg == "--ns-b") {
      o.ns_b = value;
    } else if (arg == "--addr-a") {
      o.addr_a = value;
    } else if (arg == "--addr-b") {
      o.addr_b = value;
    } else if (arg == "--dev") {
      o.dev = value;
      if (o.dev.empty() || o.dev.size() >= IFNAMSIZ)
        throw usage_error(
            fmt::format("--dev: the name must have 1 to {} characters", IFNAMSIZ - 1));
    } else if (arg == "--txqueuelen") {
      o.txqueuelen = parse_number<unsigned>(arg, value);
    } else if (arg == "--threads") {
      o.threads = parse_number<unsigned>(arg, value);
      if (o.threads != 1 && o.threads != 2) throw usage_error("--threads must be 1 or 2");
    } else {
      throw usage_error(fmt::format("unknown option: {}", arg));
    }
  }
  if (o.ns_a == o.ns_b) throw usage_error("--ns-a and --ns-b must differ");
  for (const std::string& ns : {o.ns_a, o.ns_b})
    if (ns.empty() || ns.find('/') != std::string::npos || ns == "." || ns == "..")
      throw usage_error(fmt::format("'{}' is not a valid namespace name", ns));
  return o;
}

/// An owned file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~unique_fd() { reset(); }
  [[nodiscard]] int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

/// Runs a command (no shell) and waits for it; returns its exit status (128+signal if killed).
int run_command(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); rc != 0)
    throw std::system_error(rc, std::generic_category(), fmt::format("cannot run {}", args[0]));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail_errno("waitpid");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

void run_checked(const std::vector<std::string>& args) {
  if (const int status = run_command(args); status != 0) {
    std::string line;
    for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
    throw std::runtime_error(fmt::format("'{}' failed with status {}", line, status));
  }
}

std::string netns_path(const std::string& name) { return "/run/netns/" + name; }

/// A network namespace that this process created and removes when it goes.
class owned_netns {
 public:
  explicit owned_netns(std::string name) : name_(std::move(name)) {
    struct stat st {};
    if (::stat(netns_path(name_).c_str(), &st) == 0)
      throw std::runtime_error(fmt::format(
          "network namespace '{}' already exists (left over from an earlier run? remove it with "
          "`ip netns del {}`)",
          name_, name_));
    run_checked({"ip", "netns", "add", name_});
  }
  owned_netns(const owned_netns&) = delete;
  owned_netns& operator=(const owned_netns&) = delete;
  ~owned_netns() {
    try {
      if (run_command({"ip", "netns", "del", name_}) != 0)
        fmt::print(stderr, "wanemu: warning: could not remove network namespace '{}'\n", name_);
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanemu: warning: could not remove network namespace '{}': {}\n", name_,
                 e.what());
    }
  }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  std::string name_;
};

/// Creates a TUN device (IFF_TUN | IFF_NO_PI, non-blocking) inside the named namespace: the
/// device is created in the namespace of the thread that opens /dev/net/tun, so this thread
/// enters the namespace for the open and returns to its own namespace before returning.
unique_fd open_tun_in(const std::string& ns, const std::string& dev) {
  unique_fd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (home.get() < 0) fail_errno("open /proc/thread-self/ns/net");
  unique_fd target(::open(netns_path(ns).c_str(), O_RDONLY | O_CLOEXEC));
  if (target.get() < 0) fail_errno(fmt::format("open {}", netns_path(ns)));
  if (::setns(target.get(), CLONE_NEWNET) != 0) fail_errno(fmt::format("setns into '{}'", ns));
  unique_fd tun(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  const int open_errno = errno;
  int ioctl_errno = 0;
  if (tun.get() >= 0) {
    ifreq request{};
    request.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::memcpy(request.ifr_name, dev.c_str(), dev.size() + 1);
    if (::ioctl(tun.get(), TUNSETIFF, &request) != 0) ioctl_errno = errno;
  }
  if (::setns(home.get(), CLONE_NEWNET) != 0) fail_errno("setns back to the initial namespace");
  if (tun.get() < 0) {
    errno = open_errno;
    fail_errno("open /dev/net/tun");
  }
  if (ioctl_errno != 0) {
    errno = ioctl_errno;
    fail_errno(fmt::format("TUNSETIFF {} in '{}'", dev, ns));
  }
  return tun;
}

void configure_device(const options& o, const std::string& ns, const std::string& addr) {
  run_checked({"ip", "-n", ns, "link", "set", "lo", "up"});
  run_checked({"ip", "-n", ns, "link", "set", o.dev, "mtu", std::to_string(o.mtu), "txqueuelen",
               std::to_string(o.txqueuelen), "up"});
  run_checked({"ip", "-n", ns, "addr", "add", addr, "dev", o.dev});
}

wanemu::nanoseconds now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<wanemu::nanoseconds>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// One direction: packets read from `in` go through the link model and are written to `out`
/// when due.
struct pump {
  std::string name;  // "a->b"
  int in = -1;
  int out = -1;
  wanemu::link_direction link;
  unique_fd timer{::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)};
  wanemu::nanoseconds armed_at = -1;
  std::uint64_t write_errors = 0;  // packets the far device refused (counted, not fatal)
  std::vector<std::byte> scratch;  // where a packet goes when the delay line is full

  pump(std::string name_, int in_, int out_, const wanemu::link_params& params, std::size_t mtu)
      : name(std::move(name_)), in(in_), out(out_), link(params, mtu), scratch(mtu) {
    if (timer.get() < 0) fail_errno("timerfd_create");
  }

  /// Reads what the input device has (at most `budget` packets, so that the other work of the
  /// loop is not starved).
  void read_packets(int budget) {
    for (int i = 0; i < budget; ++i) {
      std::byte* slot = link.prepare();
      const bool full = slot == nullptr;
      if (full) slot = scratch.data();
      const ssize_t n = ::read(in, slot, link.ring().max_packet());
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        fail_errno(fmt::format("read from the TUN device ({})", name));
      }
      if (full)
        link.drop_full(static_cast<std::size_t>(n));
      else
        link.arrive(static_cast<std::size_t>(n), now_ns());
    }
  }

  /// Writes every packet that is due.
  void deliver_due() {
    if (!link.has_packets()) return;
    const wanemu::nanoseconds now = now_ns();
    while (link.has_packets() && link.next_delivery() <= now) {
      const std::span<const std::byte> packet = link.next_packet();
      if (::write(out, packet.data(), packet.size()) < 0) {
        if (errno != EAGAIN && errno != ENOBUFS && errno != ENOMEM && errno != EINTR)
          fail_errno(fmt::format("write to the TUN device ({})", name));
        ++write_errors;
      }
      link.delivered();
    }
  }

  /// Arms the timer at the next delivery time, if that changed.
  void arm_timer() {
    if (!link.has_packets()) return;  // a stale expiry only causes one empty pass
    const wanemu::nanoseconds at = link.next_delivery();
    if (at == armed_at) return;
    itimerspec spec{};
    spec.it_value.tv_sec = at / 1'000'000'000;
    spec.it_value.tv_nsec = at % 1'000'000'000;
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    if (::timerfd_settime(timer.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0)
      fail_errno("timerfd_settime");
    armed_at = at;
  }
};

/// The event loop over some pumps; returns when `stop_fd` becomes readable.
void run_loop(std::span<pump* const> pumps, int stop_fd) {
  unique_fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (epoll.get() < 0) fail_errno("epoll_create1");
  auto watch = [&](int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) fail_errno("epoll_ctl");
  };
  // Tags: 2i = pump i's device, 2i+1 = pump i's timer, all ones = stop.
  constexpr std::uint64_t stop_tag = ~std::uint64_t{0};
  for (std::size_t i = 0; i < pumps.size(); ++i) {
    watch(pumps[i]->in, 2 * i);
    watch(pumps[i]->timer.get(), 2 * i + 1);
  }
  watch(stop_fd, stop_tag);
  constexpr int read_budget = 64;
  std::array<epoll_event, 8> events{};
  for (;;) {
    const int n = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("epoll_wait");
    }
    for (int e = 0; e < n; ++e) {
      const std::uint64_t tag = events[static_cast<std::size_t>(e)].data.u64;
      if (tag == stop_tag) return;
      pump& p = *pumps[tag / 2];
      if (tag % 2 == 0) {
        p.read_packets(read_budget);
      } else {
        std::uint64_t expirations = 0;
        if (::read(p.timer.get(), &expirations, sizeof expirations) < 0 && errno != EAGAIN)
          fail_errno("read timerfd");
        p.armed_at = -1;
      }
    }
    for (pump* p : pumps) {
      p->deliver_due();
      p->arm_timer();
    }
  }
}

std::string format_loss(double loss) { return fmt::format("{:g}%", loss * 100); }

void print_stats(const pump& p) {
  const wanemu::link_counters& c = p.link.counters();
  fmt::print(
      "wanemu: stats {} packets_in={} bytes_in={} dropped_loss={} dropped_queue={} "
      "dropped_ring={} write_errors={} packets_out={} bytes_out={} max_queue_bytes={} "
      "undelivered={}\n",
      p.name, c.packets_in, c.bytes_in, c.dropped_loss, c.dropped_queue, c.dropped_ring,
      p.write_errors, c.packets_out, c.bytes_out, c.max_queue_bytes, p.link.ring().packets());
}

int run(const options& o) {
  // Signals are taken from a signalfd; blocked from the start, so that one arriving during setup
  // waits and ends the run cleanly right after it.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) fail_errno("pthread_sigmask");
  unique_fd signal_fd(::signalfd(-1, &signals, SFD_CLOEXEC));
  if (signal_fd.get() < 0) fail_errno("signalfd");

  wanemu::link_params params;
  params.delay_ns = static_cast<wanemu::nanoseconds>(std::llround(o.delay_ms * 1e6));
  params.rate_bps = o.rate_mbit * 1e6;
  params.queue_bytes = o.queue_bytes.value_or(std::max<std::uint64_t>(
      64 * 1024, static_cast<std::uint64_t>(params.rate_bps / 8 * 2 * o.delay_ms / 1e3)));
  params.loss = o.loss;

  const owned_netns ns_a(o.ns_a);
  const owned_netns ns_b(o.ns_b);
  const unique_fd tun_a = open_tun_in(o.ns_a, o.dev);
  const unique_fd tun_b = open_tun_in(o.ns_b, o.dev);
  configure_device(o, o.ns_a, o.addr_a);
  configure_device(o, o.ns_b, o.addr_b);

  wanemu::link_params params_ab = params;
  wanemu::link_params params_ba = params;
  params_ab.seed = o.seed;
  params_ba.seed = o.seed ^ 0x9e3779b97f4a7c15ull;  // an independent loss pattern per direction
  pump ab("a->b", tun_a.get(), tun_b.get(), params_ab, o.mtu);
  pump ba("b->a", tun_b.get(), tun_a.get(), params_ba, o.mtu);

  fmt::print(
      "wanemu: ready ns_a={} ns_b={} dev={} addr_a={} addr_b={} delay_ms={:g} rate_mbit={:g} "
      "queue_bytes={} loss={} seed={} mtu={} threads={}\n",
      o.ns_a, o.ns_b, o.dev, o.addr_a, o.addr_b, o.delay_ms, o.rate_mbit, params.queue_bytes,
      format_loss(o.loss), o.seed, o.mtu, o.threads);
  std::fflush(stdout);

  const wanemu::nanoseconds started = now_ns();
  if (o.threads == 1) {
    const std::array<pump*, 2> both{&ab, &ba};
    run_loop(both, signal_fd.get());
  } else {
    // The direction threads stop on an eventfd that this thread sets when a signal arrives (or
    // when a direction fails: the other must stop too).
    unique_fd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (stop.get() < 0) fail_errno("eventfd");
    auto set_stop = [&] {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t ignored = ::write(stop.get(), &one, sizeof one);
    };
    std::array<std::exception_ptr, 2> failures{};
    std::array<pump*, 2> pumps{&ab, &ba};
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        try {
          run_loop(std::span<pump* const>(&pumps[i], 1), stop.get());
        } catch (...) {
          failures[i] = std::current_exception();
          // Wake the main thread: it waits on the signalfd, so raise a signal at this process.
          ::kill(::getpid(), SIGTERM);
        }
      });
    }
    signalfd_siginfo info{};
    while (::read(signal_fd.get(), &info, sizeof info) < 0 && errno == EINTR) {
    }
    set_stop();
    threads.clear();  // joins
    for (const std::exception_ptr& f : failures)
      if (f) std::rethrow_exception(f);
  }
  const double wall_s = static_cast<double>(now_ns() - started) / 1e9;

  print_stats(ab);
  print_stats(ba);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  fmt::print("wanemu: cpu user_s={:.3f} sys_s={:.3f} wall_s={:.3f}\n", seconds(usage.ru_utime),
             seconds(usage.ru_stime), wall_s);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_options(argc, argv));
  } catch (const usage_error& e) {
    fmt::print(stderr, "wanemu: {}\n\n{}", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanemu: error: {}\n", e.what());
    return 1;
  }
}
