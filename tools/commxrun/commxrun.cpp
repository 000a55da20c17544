// SPDX-License-Identifier: MIT
//
// commxrun: the commx local launcher.
//
//   commxrun -n N [--nodes K] [--sites S] [--bind-to core|none] [--timeout S] [--]
//            program [args...]
//
// Starts N local processes ("ranks") of a program, each in its own process group, with
//   COMMX_RANK=i, COMMX_SIZE=N, COMMX_LOCAL_SIZE=N, COMMX_ROOT=127.0.0.1:PORT,
//   COMMX_TOKEN=<64 hex chars>
// (and with --nodes, COMMX_NODE=node<k>: K simulated nodes, in blocks of ranks; with --sites,
// COMMX_SITE=site<j> likewise)
// in the environment and stdin from /dev/null; with --bind-to core, rank i runs on the i-th
// CPU commxrun may use (as mpirun --bind-to core; none, the default, as mpiexec.hydra). Every
// line a rank writes to stdout or stderr is copied, prefixed with "[i] ", to commxrun's stdout
// or stderr, one whole line at a time.
// If a rank fails (non-zero exit or killed by a signal), on --timeout, or when commxrun gets
// SIGINT/SIGTERM/SIGHUP, all remaining ranks' process groups get SIGTERM, then SIGKILL after a
// 2 s grace period (a rank that a signal commxrun did not send ends meanwhile is named too);
// commxrun reaps them all, drains their output and exits with:
//   0                  all ranks exited 0
//   status / 128+sig   the first failing rank's exit status / killing signal
//   124                timeout
//   128+sig            commxrun itself was interrupted by signal sig
//   2                  bad usage
//   1                  commxrun could not set up or start the ranks
//
// After the ranks have ended, commxrun removes the job's shared-memory segment name
// (transport::shm), in case a rank was killed while the job was starting and left it behind.
//
// The event loop is a single poll() over the ranks' output pipes and a signalfd that carries
// SIGCHLD, SIGINT, SIGTERM and SIGHUP; all waiting is done by poll's timeout.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commx/transport/detail/shm/segment_name.hpp"

#ifndef COMMXRUN_VERSION
#define COMMXRUN_VERSION "0.1.0"
#endif

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kGrace = std::chrono::seconds(2);  // SIGTERM -> SIGKILL, and other waits
constexpr int kMaxRanks = 65536;
constexpr std::size_t kMaxLine = 64 * 1024;  // a longer line without '\n' is split
constexpr double kMaxTimeout = 1e9;          // seconds; more is treated as this

constexpr std::string_view kUsage =
    "usage: commxrun -n N [--nodes K] [--sites S] [--bind-to core|none] [--timeout S]\n"
    "                [--keep-going] [--] program [args...]\n"
    "\n"
    "Start N local ranks of program with COMMX_RANK, COMMX_SIZE, COMMX_ROOT and COMMX_TOKEN\n"
    "set, and copy their output line by line, prefixed with \"[rank] \".\n"
    "\n"
    "options:\n"
    "  -n, --np N     number of ranks to start (at least 1)\n"
    "  --nodes K      place the ranks on K simulated nodes of this machine, in blocks as\n"
    "                 srun does (rank i on node i*K/N): COMMX_NODE=node0 ... node<K-1>\n"
    "  --sites S      place them at S simulated sites likewise: COMMX_SITE=site0 ...\n"
    "                 (S must divide K, so that each node is at one site)\n"
    "  --bind-to core|none\n"
    "                 core: rank i runs on the i-th CPU commxrun may use (round the CPUs\n"
    "                 again when there are more ranks), as mpirun --bind-to core; none (the\n"
    "                 default): ranks run wherever the kernel puts them\n"
    "  --timeout S    stop all ranks after S seconds (may be fractional) and exit 124\n"
    "  --keep-going   when a rank fails, say so and let the others run on (to see how they\n"
    "                handle its loss); exit with the first failing rank's status\n"
    "  -h, --help     show this help and exit\n"
    "  --version      show the version and exit\n"
    "\n"
    "If a rank exits non-zero or is killed, the other ranks are stopped (SIGTERM, then SIGKILL\n"
    "after 2 s; not with --keep-going) and commxrun exits with that rank's status (128+signal\n"
    "if it was killed).\n"
    "Exit status: 0 if all ranks exit 0; 124 on timeout; 128+signal if commxrun is\n"
    "interrupted; 2 on bad usage; 1 if the ranks could not be started.\n";

// ---------------------------------------------------------------------------------------------
// output

// A file descriptor we write whole chunks to. After a write error (EPIPE: the reader went
// away) the sink is marked broken and further output to it is dropped; the ranks' output is
// still drained so that they never block on a full pipe.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}

  void write(std::string_view s) {
    while (!s.empty() && !broken_) {
      const ssize_t n = ::write(fd_, s.data(), s.size());
      if (n > 0) {
        s.remove_prefix(static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // Someone made our stdout non-blocking; wait until it takes data again.
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, -1) < 0 && errno != EINTR) broken_ = true;
      } else {
        broken_ = true;
      }
    }
  }

 private:
  int fd_;
  bool broken_ = false;
};

Sink g_stdout{STDOUT_FILENO};
Sink g_stderr{STDERR_FILENO};

void note(std::string_view msg) { g_stderr.write(fmt::format("commxrun: {}\n", msg)); }

[[noreturn]] void die(std::string_view msg) {
  note(msg);
  std::exit(1);
}

std::string errno_text(int e) { return std::strerror(e); }

// "1 rank" / "3 ranks"
std::string count_ranks(std::size_t n) {
  return fmt::format("{} {}", n, n == 1 ? "rank" : "ranks");
}

// Sorted rank numbers as "0-2, 5, 7-8".
std::string rank_ranges(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += j == i ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[j]);
    i = j + 1;
  }
  return s;
}

// "rank 2" / "ranks 0-2, 5"
std::string name_ranks(const std::vector<int>& ids) {
  return fmt::format("{} {}", ids.size() == 1 ? "rank" : "ranks", rank_ranges(ids));
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return fmt::format("signal {}", sig);
  }
}

// ---------------------------------------------------------------------------------------------
// command line

struct Options {
  int nranks = 0;
  int nodes = 0;                  // 0: not placed (COMMX_NODE as inherited)
  int sites = 0;                  // 0: not placed (COMMX_SITE as inherited)
  std::optional<double> timeout;  // seconds
  bool keep_going = false;        // a failing rank does not stop the others
  bool bind_cores = false;        // --bind-to core: each rank on one CPU
  std::vector<char*> command;     // program and its arguments, null-terminated
};

[[noreturn]] void usage_error(std::string_view msg) {
  g_stderr.write(fmt::format("commxrun: {}\n{}", msg, kUsage));
  std::exit(2);
}

int parse_nranks(std::string_view text) {
  const std::string s(text);
  if (s.empty() || s[0] < '0' || s[0] > '9')
    usage_error(fmt::format("invalid number of ranks '{}'", s));
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0') usage_error(fmt::format("invalid number of ranks '{}'", s));
  if (v < 1) usage_error(fmt::format("the number of ranks must be at least 1 (got {})", s));
  if (errno == ERANGE || v > kMaxRanks)
    usage_error(fmt::format("too many ranks: {} (at most {})", s, kMaxRanks));
  return static_cast<int>(v);
}

int parse_places(std::string_view text, std::string_view what) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long v = s.empty() || s[0] < '0' || s[0] > '9' ? 0 : std::strtol(s.c_str(), &end, 10);
  if (v < 1 || *end != '\0' || errno == ERANGE || v > kMaxRanks)
    usage_error(
        fmt::format("invalid number of {} '{}' (expected 1 to the number of ranks)", what, s));
  return static_cast<int>(v);
}

double parse_timeout(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v) || v <= 0.0 ||
      !(s[0] == '.' || (s[0] >= '0' && s[0] <= '9')))
    usage_error(fmt::format("invalid timeout '{}' (expected a positive number of seconds)", s));
  return std::min(v, kMaxTimeout);
}

Options parse_args(int argc, char** argv) {
  Options opt;
  bool have_n = false;
  int i = 1;
  auto value = [&](std::string_view name) -> std::string_view {
    if (i + 1 >= argc) usage_error(fmt::format("option '{}' needs a value", name));
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      g_stdout.write(kUsage);
      std::exit(0);
    }
    if (a == "--version") {
      g_stdout.write("commxrun " COMMXRUN_VERSION "\n");
      std::exit(0);
    }
    if (a == "-n" || a == "--np" || a == "-np") {
      opt.nranks = parse_nranks(value(a));
      have_n = true;
    } else if (a.starts_with("--np=")) {
      opt.nranks = parse_nranks(a.substr(5));
      have_n = true;
    } else if (a.starts_with("-n") && !a.starts_with("-np")) {  // -n4
      opt.nranks = parse_nranks(a.substr(2));
      have_n = true;
    } else if (a == "--nodes") {
      opt.nodes = parse_places(value(a), "nodes");
    } else if (a.starts_with("--nodes=")) {
      opt.nodes = parse_places(a.substr(8), "nodes");
    } else if (a == "--sites") {
      opt.sites = parse_places(value(a), "sites");
    } else if (a.starts_with("--sites=")) {
      opt.sites = parse_places(a.substr(8), "sites");
    } else if (a == "--bind-to" || a.starts_with("--bind-to=")) {
      const std::string_view how = a == "--bind-to" ? value(a) : a.substr(10);
      if (how != "core" && how != "none")
        usage_error(fmt::format("--bind-to {}: must be core or none", how));
      opt.bind_cores = how == "core";
    } else if (a == "--keep-going") {
      opt.keep_going = true;
    } else if (a == "--timeout") {
      opt.timeout = parse_timeout(value(a));
    } else if (a.starts_with("--timeout=")) {
      opt.timeout = parse_timeout(a.substr(10));
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error(fmt::format("unknown option '{}'", a));
    } else {
      break;  // the program; everything from here on belongs to it
    }
  }
  if (!have_n) usage_error("missing the number of ranks (-n N)");
  if (opt.nodes > opt.nranks)
    usage_error(
        fmt::format("{} nodes for {} ranks: a node would hold none", opt.nodes, opt.nranks));
  if (opt.sites > opt.nranks)
    usage_error(
        fmt::format("{} sites for {} ranks: a site would hold none", opt.sites, opt.nranks));
  if (opt.sites > 0 && opt.nodes > 0 && opt.nodes % opt.sites != 0)
    usage_error(fmt::format("{} nodes at {} sites: a node would be at two sites (S must divide K)",
                            opt.nodes, opt.sites));
  if (i >= argc) usage_error("no program given");
  for (; i < argc; ++i) opt.command.push_back(argv[i]);
  opt.command.push_back(nullptr);
  return opt;
}

// ---------------------------------------------------------------------------------------------
// setup helpers

// Make sure fds 0, 1 and 2 are open so that pipes we create never land on them.
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int n = ::open("/dev/null", O_RDWR);
      if (n < 0) std::exit(1);
      if (n != fd) {  // cannot happen: open returns the lowest free fd
        ::dup2(n, fd);
        ::close(n);
      }
    }
  }
}

// A loopback port that was free a moment ago: bind to 127.0.0.1:0, read it back, close.
int choose_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) die(fmt::format("cannot create a socket to choose a port: {}", errno_text(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    die(fmt::format("cannot bind to 127.0.0.1 to choose a port: {}", errno_text(errno)));
  socklen_t len = sizeof addr;
  if (::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die(fmt::format("getsockname failed: {}", errno_text(errno)));
  ::close(s);
  return ntohs(addr.sin_port);
}

// 32 fresh random bytes from getrandom(2) as 64 lowercase hex characters.
std::string make_token() {
  std::array<unsigned char, 32> bytes{};
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      die(fmt::format("getrandom failed: {}", errno_text(errno)));
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(64);
  for (const unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 0xf];
  }
  return token;
}

// The parent's environment without any COMMX_RANK/SIZE/LOCAL_SIZE/ROOT/TOKEN it may carry (and without
// COMMX_NODE or COMMX_SITE when commxrun places the ranks itself).
std::vector<std::string> inherited_environment(bool placing_nodes, bool placing_sites) {
  static constexpr std::string_view kOurs[] = {
      "COMMX_RANK=", "COMMX_SIZE=", "COMMX_LOCAL_SIZE=", "COMMX_ROOT=", "COMMX_TOKEN="};
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view v = *e;
    if (placing_nodes && v.starts_with("COMMX_NODE=")) continue;
    if (placing_sites && v.starts_with("COMMX_SITE=")) continue;
    if (std::none_of(std::begin(kOurs), std::end(kOurs),
                     [&](std::string_view p) { return v.starts_with(p); }))
      env.emplace_back(v);
  }
  return env;
}

void set_nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void close_fd(int& fd) {
  if (fd >= 0) {
    ::close(fd);  // no retry on EINTR: on Linux the fd is closed regardless
    fd = -1;
  }
}

// What the forked child restores before exec: signal mask, SIGPIPE disposition, fd limit.
struct ChildContext {
  sigset_t orig_mask;
  struct sigaction orig_sigpipe;
  rlimit orig_nofile;
  bool restore_nofile;
  pid_t parent;
  int devnull;
  std::string exec_error_prefix;  // "commxrun: cannot execute 'prog': "
};

// The forked child could not become the rank: `prefix` and errno's text on stderr, then exit.
[[noreturn]] void child_fail(std::string_view prefix, int e, int status) {
  const char* what = std::strerror(e);
  iovec iov[3] = {
      {const_cast<char*>(prefix.data()), prefix.size()},
      {const_cast<char*>(what), std::strlen(what)},
      {const_cast<char*>("\n"), 1},
  };
  [[maybe_unused]] const ssize_t n = ::writev(STDERR_FILENO, iov, 3);
  ::_exit(status);
}

[[noreturn]] void exec_rank(const ChildContext& cx, int out_w, int err_w, char* const* argv,
                            char* const* envp, int cpu) {
  // Own process group, so that stopping the rank also stops whatever it started.
  ::setpgid(0, 0);
  // Die with commxrun if it is SIGKILLed and cannot stop us itself.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != cx.parent) ::_exit(1);
  ::sigaction(SIGPIPE, &cx.orig_sigpipe, nullptr);
  if (cx.restore_nofile) ::setrlimit(RLIMIT_NOFILE, &cx.orig_nofile);
  if (::dup2(cx.devnull, STDIN_FILENO) < 0 || ::dup2(out_w, STDOUT_FILENO) < 0 ||
      ::dup2(err_w, STDERR_FILENO) < 0)
    ::_exit(127);
  if (cpu >= 0) {  // --bind-to core
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0)
      child_fail("commxrun: cannot bind the rank to its CPU: ", errno, 127);
  }
  // All other descriptors of ours are close-on-exec. Unblock signals last: a SIGTERM that
  // commxrun already sent to our group is delivered here.
  ::sigprocmask(SIG_SETMASK, &cx.orig_mask, nullptr);
  ::execvpe(argv[0], argv, envp);
  const int e = errno;
  child_fail(cx.exec_error_prefix, e, e == ENOENT ? 127 : 126);
}

// ---------------------------------------------------------------------------------------------
// the launcher

struct Stream {
  int fd = -1;  // read end of the rank's stdout or stderr pipe; -1 once closed
  std::string partial;
  Sink* sink = nullptr;
};

struct Rank {
  pid_t pid = -1;  // also its process group id
  bool running = false;
  Stream out;
  Stream err;
};

class Launcher {
 public:
  explicit Launcher(Options opt) : opt_(std::move(opt)), ranks_(opt_.nranks) {}

  ~Launcher() {
    for (Rank& r : ranks_) {
      close_fd(r.out.fd);
      close_fd(r.err.fd);
    }
    close_fd(sigfd_);
    close_fd(cx_.devnull);
  }

  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run() {
    setup();
    launch();
    event_loop();
    // The shm transport removes its segment's name once all ranks have arrived; only a job
    // stopped during start-up leaves it. No rank runs any more, so nobody can still need it.
    ::shm_unlink(commx::detail::shm::segment_name("commx:" + token_).c_str());
    return exit_code_;
  }

 private:
  // --- setup and launch ------------------------------------------------------------------

  void setup() {
    start_ = Clock::now();
    if (opt_.timeout) {
      timeout_deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(*opt_.timeout));
    }

    // Enough descriptors for two pipes per rank; the ranks get the original limit back.
    const rlim_t need = static_cast<rlim_t>(opt_.nranks) * 2 + 32;
    if (::getrlimit(RLIMIT_NOFILE, &cx_.orig_nofile) == 0 &&
        cx_.orig_nofile.rlim_cur != RLIM_INFINITY && cx_.orig_nofile.rlim_cur < need) {
      rlimit raised = cx_.orig_nofile;
      raised.rlim_cur = cx_.orig_nofile.rlim_max;
      cx_.restore_nofile = ::setrlimit(RLIMIT_NOFILE, &raised) == 0;
    }

    // Signals: writes to a closed stdout must not kill us; SIGCHLD must not be ignored
    // (that would auto-reap); SIGCHLD, SIGINT, SIGTERM, SIGHUP are read from a signalfd.
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(SIGPIPE, &ign, &cx_.orig_sigpipe);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGCHLD, &dfl, nullptr);

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
      // A signal we were started with ignored (e.g. SIGINT for a background job) stays so.
      struct sigaction cur {};
      if (::sigaction(sig, nullptr, &cur) == 0 && cur.sa_handler == SIG_IGN) continue;
      sigaddset(&mask, sig);
    }
    if (::sigprocmask(SIG_BLOCK, &mask, &cx_.orig_mask) != 0)
      die(fmt::format("sigprocmask failed: {}", errno_text(errno)));
    sigfd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd_ < 0) die(fmt::format("signalfd failed: {}", errno_text(errno)));

    cx_.parent = ::getpid();
    cx_.devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (cx_.devnull < 0) die(fmt::format("cannot open /dev/null: {}", errno_text(errno)));
    cx_.exec_error_prefix = fmt::format("commxrun: cannot execute '{}': ", opt_.command[0]);
  }

  void launch() {
    const std::string root = fmt::format("127.0.0.1:{}", choose_port());
    token_ = make_token();
    const std::string& token = token_;
    std::vector<std::string> env = inherited_environment(opt_.nodes > 0, opt_.sites > 0);
    env.push_back(fmt::format("COMMX_SIZE={}", opt_.nranks));
    // Every rank is on this machine (--nodes only names simulated nodes): coll::tuned tells
    // from it whether the ranks take turns on the cores (coll/detail/node_load.hpp).
    env.push_back(fmt::format("COMMX_LOCAL_SIZE={}", opt_.nranks));
    env.push_back("COMMX_ROOT=" + root);
    env.push_back("COMMX_TOKEN=" + token);
    // Set per rank, at these indices: COMMX_NODE and COMMX_SITE when placing, then COMMX_RANK.
    const std::size_t node_at = env.size();
    if (opt_.nodes > 0) env.emplace_back();
    const std::size_t site_at = env.size();
    if (opt_.sites > 0) env.emplace_back();
    env.emplace_back();
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    // --bind-to core: the CPUs this process may use, in order; rank i gets the i-th.
    std::vector<int> cpus;
    if (opt_.bind_cores) {
      cpu_set_t allowed;
      CPU_ZERO(&allowed);
      if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        die(fmt::format("--bind-to core: cannot read the CPUs allowed: {}", errno_text(errno)));
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
      }
      if (cpus.empty()) die("--bind-to core: no CPU allowed");
    }

    // Create every pipe first, so that running out of descriptors fails before any rank runs.
    // All are close-on-exec; only the read ends are non-blocking.
    std::vector<std::array<int, 4>> pipes(ranks_.size());  // out_r, out_w, err_r, err_w
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      int po[2];
      int pe[2];
      if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0)
        die(fmt::format("cannot create pipes for {}: {}", count_ranks(ranks_.size()),
                        errno_text(errno)));  // exiting closes them
      set_nonblocking(po[0]);
      set_nonblocking(pe[0]);
      pipes[i] = {po[0], po[1], pe[0], pe[1]};
    }

    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      auto& [out_r, out_w, err_r, err_w] = pipes[i];
      Rank& r = ranks_[i];
      if (stopping_) {  // an earlier fork failed: start no more ranks
        for (int* fd : {&out_r, &out_w, &err_r, &err_w}) close_fd(*fd);
        continue;
      }
      env.back() = fmt::format("COMMX_RANK={}", i);
      envp[env.size() - 1] = env.back().data();
      // Blocks, as srun places ranks: rank i on node i*K/N and at site i*S/N (S divides K, so
      // the nodes of one site are whole).
      const auto place = [&](std::size_t at, int count, std::string_view var,
                             std::string_view stem) {
        env[at] =
            fmt::format("{}={}{}", var, stem, i * static_cast<std::size_t>(count) / ranks_.size());
        envp[at] = env[at].data();
      };
      if (opt_.nodes > 0) place(node_at, opt_.nodes, "COMMX_NODE", "node");
      if (opt_.sites > 0) place(site_at, opt_.sites, "COMMX_SITE", "site");

      const int cpu = cpus.empty() ? -1 : cpus[i % cpus.size()];
      const pid_t pid = ::fork();
      if (pid == 0) exec_rank(cx_, out_w, err_w, opt_.command.data(), envp.data(), cpu);
      close_fd(out_w);
      close_fd(err_w);
      if (pid < 0) {
        close_fd(out_r);
        close_fd(err_r);
        note(fmt::format("cannot start rank {}: fork failed: {}", i, errno_text(errno)));
        if (running_ > 0)
          note(fmt::format("stopping the {} already started", count_ranks(running_)));
        begin_stop(1);
        continue;
      }
      ::setpgid(pid, pid);  // also in the child; whichever runs first wins, both are fine
      r.pid = pid;
      r.running = true;
      ++running_;
      by_pid_.emplace(pid, static_cast<int>(i));
      r.out = Stream{out_r, {}, &g_stdout};
      r.err = Stream{err_r, {}, &g_stderr};
      open_streams_ += 2;
    }
  }

  // --- the loop ------------------------------------------------------------------------------

  void event_loop() {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, Stream*>> who;  // fds[k + 1] belongs to who[k]
    for (;;) {
      check_deadlines(Clock::now());
      if (running_ == 0 && open_streams_ == 0) break;

      fds.clear();
      who.clear();
      fds.push_back({sigfd_, POLLIN, 0});
      for (std::size_t i = 0; i < ranks_.size(); ++i) {
        for (Stream* s : {&ranks_[i].out, &ranks_[i].err}) {
          if (s->fd < 0) continue;
          fds.push_back({s->fd, POLLIN, 0});
          who.emplace_back(static_cast<int>(i), s);
        }
      }

      const int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
      if (rc < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        emergency_exit(fmt::format("poll failed: {}", errno_text(errno)));
      }
      for (std::size_t k = 0; k < who.size(); ++k) {
        if (fds[k + 1].revents != 0) pump(who[k].first, *who[k].second);
      }
      if (fds[0].revents != 0) handle_signals();
    }
  }

  // Milliseconds until the next deadline that matters now, rounded up; -1 for none.
  int poll_timeout_ms(Clock::time_point now) const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
      if (!next || t < *next) next = t;
    };
    if (!stopping_ && timeout_deadline_) consider(*timeout_deadline_);
    if (stopping_ && !killed_) consider(kill_deadline_);
    if (killed_ && running_ == 0 && open_streams_ > 0) consider(abandon_deadline_);
    if (!stopping_ && running_ == 0 && linger_deadline_) consider(*linger_deadline_);
    if (!next) return -1;
    if (*next <= now) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
    return static_cast<int>(std::min<decltype(ms)>(ms, INT_MAX));
  }

  void check_deadlines(Clock::time_point now) {
    if (!stopping_ && timeout_deadline_ && now >= *timeout_deadline_) {
      note(fmt::format("timeout after {:g} s; stopping {}", *opt_.timeout, describe_targets()));
      begin_stop(124);
    }
    if (stopping_ && !killed_ && now >= kill_deadline_) escalate();
    if (killed_ && running_ == 0 && open_streams_ > 0 && now >= abandon_deadline_) {
      note(fmt::format(
          "the output of {} is still open 2 s after SIGKILL (held by processes outside their "
          "process groups?); no longer reading it",
          name_ranks(targets())));
      for (Rank& r : ranks_) {
        close_stream(static_cast<int>(&r - ranks_.data()), r.out);
        close_stream(static_cast<int>(&r - ranks_.data()), r.err);
      }
    }
    // Every rank has exited but something they started still holds their output open.
    if (!stopping_ && running_ == 0 && open_streams_ > 0) {
      if (!linger_deadline_) linger_deadline_ = now + kGrace;
      if (now >= *linger_deadline_) {
        note(
            fmt::format("all ranks have exited, but processes they started still hold the "
                        "output of {} open; stopping them",
                        name_ranks(targets())));
        begin_stop(exit_code_);
      }
    }
  }

  // --- output ----------------------------------------------------------------------------

  // Read once from a ready stream. Returns false if nothing more is available right now.
  bool pump(int rank, Stream& s) {
    static std::array<char, 64 * 1024> buf;
    for (;;) {
      const ssize_t n = ::read(s.fd, buf.data(), buf.size());
      if (n > 0) {
        emit(rank, s, std::string_view(buf.data(), static_cast<std::size_t>(n)));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      close_stream(rank, s);  // EOF or a read error
      return false;
    }
  }

  // Everything a rank that has exited left in its pipes, before we talk about it.
  void drain(int rank) {
    Rank& r = ranks_[rank];
    for (Stream* s : {&r.out, &r.err}) {
      while (s->fd >= 0 && pump(rank, *s)) {
      }
    }
  }

  // Append data to the stream's partial line and write out every complete line, prefixed.
  void emit(int rank, Stream& s, std::string_view data) {
    const std::string prefix = fmt::format("[{}] ", rank);
    std::string out;
    std::size_t begin = 0;
    std::size_t from = s.partial.size();
    s.partial.append(data);
    for (std::size_t nl; (nl = s.partial.find('\n', from)) != std::string::npos; from = begin) {
      out += prefix;
      out.append(s.partial, begin, nl + 1 - begin);
      begin = nl + 1;
    }
    s.partial.erase(0, begin);
    // An endless line: pass it on in pieces of kMaxLine bytes.
    for (begin = 0; s.partial.size() - begin >= kMaxLine; begin += kMaxLine) {
      out += prefix;
      out.append(s.partial, begin, kMaxLine);
      out += '\n';
    }
    s.partial.erase(0, begin);
    if (!out.empty()) s.sink->write(out);
  }

  void close_stream(int rank, Stream& s) {
    if (s.fd < 0) return;
    if (!s.partial.empty()) {  // a last line without '\n'
      s.sink->write(fmt::format("[{}] {}\n", rank, s.partial));
      s.partial.clear();
    }
    close_fd(s.fd);
    --open_streams_;
  }

  // --- children and signals ------------------------------------------------------------

  void handle_signals() {
    std::array<signalfd_siginfo, 16> info{};
    for (;;) {
      const ssize_t n = ::read(sigfd_, info.data(), sizeof info);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const std::size_t count = static_cast<std::size_t>(n) / sizeof(signalfd_siginfo);
      for (std::size_t k = 0; k < count; ++k) {
        const int sig = static_cast<int>(info[k].ssi_signo);
        if (sig != SIGCHLD) on_signal(sig);
      }
    }
    reap();  // SIGCHLDs coalesce, so always collect every exited child
  }

  // Every exited child is collected before any is reported, and those a signal killed are
  // reported first: a rank killed by a signal is the likelier cause of its peers' failures
  // (they exit once they see it gone, often before this process wakes), and waitpid(-1) hands
  // children back in the order they were started, not the order they ended.
  void reap() {
    std::vector<std::pair<int, int>> ended;  // (rank, wait status)
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) break;
      const auto it = by_pid_.find(pid);
      if (it != by_pid_.end()) ended.emplace_back(it->second, status);
    }
    std::stable_partition(ended.begin(), ended.end(),
                          [](const auto& e) { return WIFSIGNALED(e.second); });
    for (const auto& [rank, status] : ended) on_exit(rank, status);
  }

  void on_exit(int rank, int status) {
    Rank& r = ranks_[rank];
    if (!r.running) return;
    r.running = false;
    --running_;
    const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed) return;
    if (stopping_) {
      // Exits while stopping are the ones we asked for, unless a signal we did not send ended
      // the rank: a rank killed from outside can be reaped after a peer that saw it go first
      // (the peer notices once the dying process has let go of its memory, before the kernel
      // hands its status to us), and it is the one a reader of the log looks for.
      const bool ours = WIFSIGNALED(status) &&
                        (WTERMSIG(status) == SIGTERM || (killed_ && WTERMSIG(status) == SIGKILL));
      if (WIFSIGNALED(status) && !ours) {
        drain(rank);
        note(fmt::format("rank {} {}, a signal commxrun did not send", rank, describe_end(status)));
      }
      return;
    }

    drain(rank);
    const std::string what = describe_end(status);
    const int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                     : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                           : 1;
    if (opt_.keep_going) {
      note(fmt::format("rank {} {}", rank, what));
      if (exit_code_ == 0) exit_code_ = code;
      return;
    }
    const std::string rest =
        running_ > 0 ? fmt::format("; stopping the other {}", count_ranks(running_)) : "";
    note(fmt::format("rank {} {}{}", rank, what, rest));
    begin_stop(code);
  }

  static std::string describe_end(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      const char* desc = ::strsignal(sig);
      return fmt::format("was killed by signal {} ({}{})", sig, desc != nullptr ? desc : "?",
                         WCOREDUMP(status) ? ", core dumped" : "");
    }
    return fmt::format("ended with wait status {:#x}", status);
  }

  void on_signal(int sig) {
    if (!stopping_) {
      note(fmt::format("received {}; stopping {}", signal_name(sig), describe_targets()));
      begin_stop(128 + sig);
    } else if (!killed_) {
      note(fmt::format("received {} again; sending SIGKILL", signal_name(sig)));
      escalate();
    }
  }

  // --- stopping --------------------------------------------------------------------------

  // Ranks whose process groups we signal: those still running, and those that have exited
  // but whose output is still open (something in their process group still holds it).
  std::vector<int> targets() const {
    std::vector<int> ids;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const Rank& r = ranks_[i];
      if (r.pid > 0 && (r.running || r.out.fd >= 0 || r.err.fd >= 0))
        ids.push_back(static_cast<int>(i));
    }
    return ids;
  }

  // "3 ranks (0-2)", or for leftovers only "the processes left by rank 1".
  std::string describe_targets() const {
    std::vector<int> running;
    for (std::size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i].running) running.push_back(static_cast<int>(i));
    if (!running.empty())
      return fmt::format("{} ({})", count_ranks(running.size()), rank_ranges(running));
    const std::vector<int> left = targets();
    if (!left.empty()) return fmt::format("the processes left by {}", name_ranks(left));
    return "nothing (no rank is running)";
  }

  void signal_groups(int sig) {
    for (const int i : targets()) {
      const pid_t pid = ranks_[i].pid;
      if (::kill(-pid, sig) != 0 && errno == ESRCH && ranks_[i].running) ::kill(pid, sig);
    }
  }

  void begin_stop(int code) {
    if (stopping_) return;
    stopping_ = true;
    exit_code_ = code;
    signal_groups(SIGTERM);
    kill_deadline_ = Clock::now() + kGrace;
  }

  void escalate() {
    killed_ = true;
    abandon_deadline_ = Clock::now() + kGrace;
    const std::vector<int> ids = targets();
    if (ids.empty()) return;
    if (Clock::now() >= kill_deadline_)
      note(fmt::format("{} did not stop within 2 s of SIGTERM; sending SIGKILL", name_ranks(ids)));
    signal_groups(SIGKILL);
  }

  [[noreturn]] void emergency_exit(std::string_view why) {
    note(fmt::format("{}; killing all ranks", why));
    signal_groups(SIGKILL);
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    std::exit(1);
  }

  Options opt_;
  std::string token_;  // COMMX_TOKEN of this job
  std::vector<Rank> ranks_;
  std::unordered_map<pid_t, int> by_pid_;
  ChildContext cx_{};
  int sigfd_ = -1;
  std::size_t running_ = 0;
  std::size_t open_streams_ = 0;

  bool stopping_ = false;  // SIGTERM has been sent
  bool killed_ = false;    // SIGKILL has been sent
  int exit_code_ = 0;
  Clock::time_point start_{};
  std::optional<Clock::time_point> timeout_deadline_;
  Clock::time_point kill_deadline_{};
  Clock::time_point abandon_deadline_{};
  std::optional<Clock::time_point> linger_deadline_;
};

}  // namespace

int main(int argc, char** argv) {
  ensure_std_fds();
  Options opt = parse_args(argc, argv);
  Launcher launcher(std::move(opt));
  return launcher.run();
}
