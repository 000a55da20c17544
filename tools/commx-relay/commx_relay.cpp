// SPDX-License-Identifier: MIT
//
// commx-relay: a user-space forwarder for the gateway node of a site, so that ranks at two
// sites whose compute nodes cannot reach each other still form one tcp or wan job (MPWide's
// Forwarder, CosmoGrid's communication nodes). Needs no administrator rights: one open port.
//
//   COMMX_TOKEN=<job token> commx-relay --site NAME --listen HOST:PORT
//       [--route SITE=HOST:PORT]... [--timeout SECONDS] [--max-links N] [--verbose]
//
// A rank started with COMMX_SITE=<its site> and COMMX_RELAY=<this relay> connects to every
// rank at another site through the relay (and to rank 0's rendezvous when COMMX_ROOT_SITE
// names another site). Each connection: the caller authenticates with the job token both ways
// (the tcp handshake, purpose relay: the relay has no rank and answers as the caller's), then
// names its target, an endpoint at some site (detail/tcp/route.hpp). If a --route names the
// target's site, the relay dials that site's relay the same way, on the caller's behalf;
// otherwise it connects to the endpoint itself. Then it answers `connected` and copies bytes
// both ways without reading them; the two ranks authenticate each other end to end. An end
// closed is passed on as a shutdown of the other side's sending half; a reset, as a close.
//
// A stranger (not a commx hello, a wrong token, a silent connection past --timeout) is refused
// and logged on stderr (COMMX_LOG `warn`; --verbose adds `info` lines for links opened and
// closed), and costs the links in flight nothing. Prints one line on stdout,
// "commx-relay: site NAME listening on ADDRESS:PORT", once it accepts connections (PORT 0 asks
// the kernel for one). Exits 0 on SIGINT or SIGTERM, 2 on bad usage, 1 when it cannot listen.

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pthread.h>
#include <signal.h>

#include <asio.hpp>
#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/log.hpp"
#include "commx/transport/detail/tcp/config.hpp"
#include "commx/transport/detail/tcp/dial.hpp"
#include "commx/transport/detail/tcp/handshake.hpp"
#include "commx/transport/detail/tcp/route.hpp"
#include "commx/transport/detail/tcp/session.hpp"
#include "commx/transport/detail/tcp/wire.hpp"

namespace {

namespace tcp = commx::detail::tcp;
using clock_type = std::chrono::steady_clock;

/// The relay's log lines (COMMX_LOG, or at least `info` with --verbose): `commx[relay] ...`.
const commx::log::context relay_log{"relay"};

struct options {
  std::string site;
  std::string listen_host;
  std::uint16_t listen_port = 0;
  std::map<std::string, std::pair<std::string, std::uint16_t>> routes;  ///< site -> its relay
  std::chrono::seconds timeout{10};
  std::size_t max_links = 4096;
  bool verbose = false;
  std::string token;
};

[[noreturn]] void usage(const std::string& why) {
  fmt::print(stderr,
             "commx-relay: {}\n"
             "usage: COMMX_TOKEN=<token> commx-relay --site NAME --listen HOST:PORT\n"
             "           [--route SITE=HOST:PORT]... [--timeout SECONDS] [--max-links N] "
             "[--verbose]\n",
             why);
  std::exit(2);
}

std::pair<std::string, std::uint16_t> host_port(const std::string& text, const char* what) {
  try {
    return tcp::split_host_port(text, what);
  } catch (const commx::error& e) {
    usage(e.what());
  }
}

std::size_t number(const std::string& text, const char* what, std::size_t low, std::size_t high) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < low || value > high) {
    usage(fmt::format("{} '{}' is not a number in [{}, {}]", what, text, low, high));
  }
  return static_cast<std::size_t>(value);
}

options parse(int argc, char** argv) {
  options o;
  bool listening = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    if (arg == "--site") {
      o.site = value();
    } else if (arg == "--listen") {
      const std::string text = value();
      // Port 0 asks the kernel for one (split_host_port wants 1-65535).
      const bool any_port = text.size() > 2 && text.ends_with(":0");
      o.listen_host =
          host_port(any_port ? text.substr(0, text.size() - 2) + ":1" : text, "--listen").first;
      o.listen_port = any_port ? 0 : host_port(text, "--listen").second;
      listening = true;
    } else if (arg == "--route") {
      const std::string text = value();
      const auto eq = text.find('=');
      if (eq == std::string::npos) usage(fmt::format("--route '{}' is not SITE=HOST:PORT", text));
      const std::string site = text.substr(0, eq);
      if (site.empty() || !tcp::valid_site_name(site)) {
        usage(fmt::format("--route '{}': '{}' is not a site name", text, site));
      }
      o.routes[site] = host_port(text.substr(eq + 1), "--route");
    } else if (arg == "--timeout") {
      o.timeout = std::chrono::seconds(number(value(), "--timeout", 1, 3600));
    } else if (arg == "--max-links") {
      o.max_links = number(value(), "--max-links", 1, 1 << 20);
    } else if (arg == "--verbose") {
      o.verbose = true;
    } else {
      usage(fmt::format("unknown argument '{}'", arg));
    }
  }
  if (o.site.empty() || !tcp::valid_site_name(o.site)) {
    usage(fmt::format("--site '{}' is not a site name (1 to {} letters, digits, '.', '_' or '-')",
                      o.site, tcp::max_site_name));
  }
  if (!listening) usage("--listen HOST:PORT is required");
  if (o.routes.count(o.site) != 0) usage("--route names this relay's own site");
  const char* token = std::getenv("COMMX_TOKEN");
  if (token == nullptr || *token == '\0') {
    usage("COMMX_TOKEN is not set: the relay admits only callers that hold the job's token");
  }
  o.token = token;
  return o;
}

/// Two connected sockets and the bytes between them, copied both ways as they come.
class link : public std::enable_shared_from_this<link> {
 public:
  link(asio::ip::tcp::socket caller, asio::ip::tcp::socket target, std::string name)
      : ends_{std::move(caller), std::move(target)}, name_(std::move(name)) {}

  void start() {
    for (auto& end : ends_) {
      std::error_code ignored;
      end.set_option(asio::ip::tcp::no_delay(true), ignored);
    }
    pump(0);
    pump(1);
  }

  ~link() {
    COMMX_LOG(info, relay_log, "link {} closed after {} bytes out, {} bytes back", name_, moved_[0],
              moved_[1]);
  }

 private:
  static constexpr std::size_t buffer_size = std::size_t{256} << 10;

  // Direction `d` reads ends_[d] and writes ends_[1 - d].
  void pump(int d) {
    const auto from = static_cast<std::size_t>(d);
    ends_[from].async_read_some(
        asio::buffer(buffers_[from]),
        [self = shared_from_this(), d, from](std::error_code ec, std::size_t n) {
          auto& to = self->ends_[1 - from];
          if (ec == asio::error::eof) {
            // The sender finished: pass its end on, and keep the other direction going.
            std::error_code ignored;
            to.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
            return;
          }
          if (ec) return self->close();
          asio::async_write(to, asio::buffer(self->buffers_[from].data(), n),
                            [self, d, from](std::error_code wec, std::size_t written) {
                              if (wec) return self->close();
                              self->moved_[from] += written;
                              self->pump(d);
                            });
        });
  }

  // A reset or an error on either end: both go, so each side sees its connection end.
  void close() {
    for (auto& end : ends_) {
      std::error_code ignored;
      end.close(ignored);
    }
  }

  std::array<asio::ip::tcp::socket, 2> ends_;
  std::array<std::array<std::byte, buffer_size>, 2> buffers_{};
  std::array<std::uint64_t, 2> moved_{};
  std::string name_;
};

class relay {
 public:
  relay(asio::io_context& io, options o) : io_(io), opts_(std::move(o)), acceptor_(io) {
    for (const auto& [site, where] : opts_.routes) {
      asio::ip::tcp::resolver resolver(io_);
      std::error_code ec;
      auto results = resolver.resolve(where.first, std::to_string(where.second), ec);
      if (ec || results.empty()) {
        throw commx::error(commx::errc::bootstrap_failed,
                           fmt::format("cannot resolve the relay of site {} at '{}': {}", site,
                                       where.first, ec ? ec.message() : "no address"));
      }
      routes_[site] = results.begin()->endpoint();
    }
    asio::ip::tcp::resolver resolver(io_);
    std::error_code ec;
    auto here = resolver.resolve(opts_.listen_host, std::to_string(opts_.listen_port), ec);
    if (!ec && !here.empty()) {
      const auto where = here.begin()->endpoint();
      acceptor_.open(where.protocol(), ec);
      if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) acceptor_.bind(where, ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec || here.empty()) {
      throw commx::error(commx::errc::bootstrap_failed,
                         fmt::format("cannot listen on {}:{}: {}", opts_.listen_host,
                                     opts_.listen_port, ec ? ec.message() : "no address"));
    }
    fmt::print("commx-relay: site {} listening on {}\n", opts_.site,
               tcp::text_of(acceptor_.local_endpoint()));
    std::fflush(stdout);
    accept_next();
  }

 private:
  static constexpr std::size_t max_pending_handshakes = 64;

  /// A caller past the handshake: what it asked for, and the socket it asked on.
  struct call {
    asio::ip::tcp::socket socket;
    asio::ip::tcp::endpoint remote;
    tcp::handshake::hello caller;
    tcp::route::request_bytes request{};
    tcp::route::reply_bytes reply{};
    asio::steady_timer timer;
    std::optional<tcp::endpoint_record> target;

    call(asio::ip::tcp::socket s, asio::ip::tcp::endpoint r, tcp::handshake::hello h)
        : socket(std::move(s)), remote(r), caller(h), timer(socket.get_executor()) {}
  };

  void accept_next() {
    acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) on_accepted(std::move(socket));
      accept_next();
    });
  }

  /// A connection the relay refused or could not route: always worth a line (`warn`).
  void log(const asio::ip::tcp::endpoint& from, const std::string& what) const {
    COMMX_LOG(warn, relay_log, "{}: {}", tcp::text_of(from), what);
  }

  void on_accepted(asio::ip::tcp::socket socket) {
    std::error_code ignored;
    const auto from = socket.remote_endpoint(ignored);
    if (pending_ >= max_pending_handshakes || *links_ >= opts_.max_links) {
      return log(from, "refused: too many connections in progress");
    }
    ++pending_;
    auto session = std::make_shared<tcp::server_session>(
        std::move(socket), opts_.token, -1, 0, clock_type::now() + opts_.timeout,
        [](const tcp::handshake::hello& h) {
          return h.why == tcp::handshake::purpose::relay ? tcp::handshake::verdict_code::accepted
                                                         : tcp::handshake::verdict_code::unexpected;
        },
        [this](tcp::server_session& s, bool ok, const std::string& why) {
          if (!ok) {
            --pending_;
            return log(s.remote, fmt::format("refused: {}", why));
          }
          read_request(std::make_shared<call>(std::move(s.socket), s.remote, s.peer));
        });
    session->start();
  }

  void read_request(const std::shared_ptr<call>& c) {
    c->timer.expires_after(opts_.timeout);
    c->timer.async_wait([c](std::error_code ec) {
      std::error_code ignored;
      if (!ec) c->socket.close(ignored);
    });
    asio::async_read(c->socket, asio::buffer(c->request),
                     [this, c](std::error_code ec, std::size_t) {
                       if (ec) {
                         --pending_;
                         c->timer.cancel();
                         return log(c->remote, "refused: closed before naming its target");
                       }
                       c->target = tcp::route::decode_request(c->request);
                       if (!c->target) {
                         log(c->remote, "refused: a malformed route request");
                         return answer(c, tcp::route::route_code::malformed, {});
                       }
                       forward(c);
                     });
  }

  void forward(const std::shared_ptr<call>& c) {
    tcp::dial_identity who{opts_.token, c->caller.rank, c->caller.size, std::nullopt, "relay"};
    // A route names the relay of the target's site; with none, the target is reachable here.
    if (const auto r = routes_.find(c->target->site); r != routes_.end()) who.relay = r->second;
    tcp::dialer::start(
        io_, who, *c->target, clock_type::now() + opts_.timeout,
        [this, c](const std::string& failure, asio::ip::tcp::socket onward, bool token) {
          if (failure.empty()) {
            return answer(c, tcp::route::route_code::connected, std::move(onward));
          }
          log(c->remote, fmt::format("rank {}: cannot reach {}: {}", c->caller.rank,
                                     tcp::text_of(*c->target), failure));
          answer(c, token ? tcp::route::route_code::refused : tcp::route::route_code::unreachable,
                 {});
        });
  }

  void answer(const std::shared_ptr<call>& c, tcp::route::route_code code,
              std::optional<asio::ip::tcp::socket> onward) {
    c->reply = tcp::route::encode_reply(code);
    asio::async_write(
        c->socket, asio::buffer(c->reply),
        [this, c, code,
         onward = std::make_shared<std::optional<asio::ip::tcp::socket>>(std::move(onward))](
            std::error_code ec, std::size_t) {
          --pending_;
          c->timer.cancel();
          if (ec || code != tcp::route::route_code::connected || !*onward) {
            std::error_code ignored;
            c->socket.close(ignored);
            return;
          }
          const std::string name = fmt::format("rank {} at {} -> {}", c->caller.rank,
                                               tcp::text_of(c->remote), tcp::text_of(*c->target));
          COMMX_LOG(info, relay_log, "link {} open", name);
          ++*links_;
          auto l = std::shared_ptr<link>(
              new link(std::move(c->socket), std::move(**onward), name),
              // Links still open at exit die with the io_context, after the relay: the count
              // they give back must outlive both.
              [count = links_](link* gone) {
                --*count;
                delete gone;
              });
          l->start();
        });
  }

  asio::io_context& io_;
  options opts_;
  asio::ip::tcp::acceptor acceptor_;
  std::map<std::string, asio::ip::tcp::endpoint> routes_;
  std::size_t pending_ = 0;
  std::shared_ptr<std::size_t> links_ = std::make_shared<std::size_t>(0);
};

}  // namespace

int main(int argc, char** argv) {
  const options opts = parse(argc, argv);
  if (opts.verbose && commx::log::threshold() < commx::log::level::info) {
    commx::log::set_threshold(commx::log::level::info);
  }
  std::signal(SIGPIPE, SIG_IGN);
  asio::io_context io;
  asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](std::error_code, int) {
    // A second signal (timeout(1) signals the child, then its whole group) must not kill the
    // exit this one began: once the signal set is gone, its default action would.
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &both, nullptr);
    io.stop();
  });
  try {
    relay r(io, opts);
    io.run();
  } catch (const std::exception& e) {
    COMMX_LOG(error, relay_log, "{}", e.what());
    return 1;
  }
  return 0;
}
