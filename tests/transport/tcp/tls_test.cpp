// SPDX-License-Identifier: MIT
// TLS on tcp connections (tls.hpp). On loopback sockets in this process: the handshake with a
// key from the token, both ways and refused with another key; 8 MiB each way through
// non-blocking sockets, byte for byte, with the ciphertext waiting for the socket held to its
// limit; certificates (made here with the openssl tool) accepted from the job's authority and
// refused from another. Then jobs of real processes (tcp_scenario): a job on certificates, a
// rank with a stranger's certificate, a rank that does not ask for TLS where it is required
// and one that asks where it is off all fail with a clear error on both sides, and COMMX_TLS* mistakes are named at start-up.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <fmt/format.h>

#include "support/beside_this_program.hpp"
#include "commx/transport/detail/tcp/config.hpp"
#include "commx/transport/detail/tcp/tls.hpp"
#include "transport/tcp/processes.hpp"

namespace {

using commx::test::child;
using commx::test::free_port;
using clock_type = child::clock;
using namespace std::chrono_literals;
namespace tcp = commx::detail::tcp;

const std::string token(64, 't');

tcp::tls_key key_of(char c) {
  tcp::tls_key k{};
  k.fill(std::byte(c));
  return k;
}

/// Two ends of one loopback connection.
struct socket_pair {
  asio::io_context io;
  asio::ip::tcp::socket client{io};
  asio::ip::tcp::socket server{io};

  socket_pair() {
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
    client.connect(acceptor.local_endpoint());
    acceptor.accept(server);
  }
};

/// Both sides' handshakes, run to their end (bounded): each side's error.
std::pair<std::error_code, std::error_code> handshake(socket_pair& pair, tcp::tls_channel& client,
                                                      tcp::tls_channel& server) {
  std::optional<std::error_code> c;
  std::optional<std::error_code> s;
  client.async_handshake(true, [&](std::error_code ec) {
    c = ec;
    // A refused side hangs up, as the sessions do, so the other one is not left waiting.
    if (ec) pair.client.close();
  });
  server.async_handshake(false, [&](std::error_code ec) {
    s = ec;
    if (ec) pair.server.close();
  });
  const auto until = clock_type::now() + 20s;
  while ((!c || !s) && clock_type::now() < until) pair.io.run_one_for(100ms);
  REQUIRE(c);
  REQUIRE(s);
  return {*c, *s};
}

/// Runs `cmd` (the openssl tool) and requires it to succeed.
void shell(const std::string& cmd) {
  INFO(cmd);
  REQUIRE(std::system((cmd + " >/dev/null 2>&1").c_str()) == 0);
}

/// A self-signed certificate and its key, in `dir`: a job's authority and its one credential.
struct credential {
  std::string certificate;
  std::string key;
};
credential make_credential(const std::filesystem::path& dir, const std::string& name) {
  credential c{(dir / (name + ".pem")).string(), (dir / (name + ".key")).string()};
  shell(
      fmt::format("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                  "-keyout {} -out {} -subj /CN={} -days 2",
                  c.key, c.certificate, name));
  return c;
}

struct temporary_directory {
  std::filesystem::path path;
  temporary_directory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "commx-tls-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~temporary_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

TEST_CASE("TLS with a key from the token: both sides agree, another key is refused", "[tcp][tls]") {
  tcp::tls_context context(tcp::tls_settings{tcp::tls_mode::on, {}, {}, {}});
  {
    socket_pair pair;
    tcp::tls_channel client(context, pair.client, key_of('a'));
    tcp::tls_channel server(context, pair.server, key_of('a'));
    const auto [c, s] = handshake(pair, client, server);
    CHECK(!c);
    CHECK(!s);
  }
  {
    socket_pair pair;
    tcp::tls_channel client(context, pair.client, key_of('a'));
    tcp::tls_channel server(context, pair.server, key_of('b'));
    const auto [c, s] = handshake(pair, client, server);
    CHECK(c);
    CHECK(s);
    CHECK(tcp::tls_channel::failure_text(s).find("TLS handshake failed") != std::string::npos);
  }
}

TEST_CASE("TLS carries 8 MiB each way through non-blocking sockets, byte for byte", "[tcp][tls]") {
  tcp::tls_context context(tcp::tls_settings{tcp::tls_mode::on, {}, {}, {}});
  socket_pair pair;
  tcp::tls_channel a(context, pair.client, key_of('k'));
  tcp::tls_channel b(context, pair.server, key_of('k'));
  const auto [ca, cb] = handshake(pair, a, b);
  REQUIRE(!ca);
  REQUIRE(!cb);
  pair.client.non_blocking(true);
  pair.server.non_blocking(true);

  constexpr std::size_t total = std::size_t{8} << 20;
  std::vector<std::byte> out_a(total);
  std::vector<std::byte> out_b(total);
  for (std::size_t i = 0; i < total; ++i) {
    out_a[i] = std::byte(static_cast<unsigned char>(i * 7 + 1));
    out_b[i] = std::byte(static_cast<unsigned char>(i * 13 + 5));
  }
  std::vector<std::byte> in_a(total);
  std::vector<std::byte> in_b(total);

  // Nobody reads yet: the writer is held at the limit, not let to buffer all 8 MiB.
  std::error_code ec;
  const std::size_t first = a.write_some(asio::buffer(out_a.data(), total), ec);
  REQUIRE(!ec);
  a.flush_ciphertext(ec);
  REQUIRE(!ec);
  CHECK(first < total);
  CHECK(a.ciphertext_waiting() <= tcp::tls_channel::backlog_limit + (std::size_t{32} << 10));

  std::size_t sent_a = first;
  std::size_t sent_b = 0;
  std::size_t got_a = 0;
  std::size_t got_b = 0;
  const auto until = clock_type::now() + 60s;
  while ((got_a < total || got_b < total || a.ciphertext_waiting() > 0 ||
          b.ciphertext_waiting() > 0) &&
         clock_type::now() < until) {
    const auto step = [&](tcp::tls_channel& ch, std::vector<std::byte>& out, std::size_t& sent,
                          std::vector<std::byte>& in, std::size_t& got) {
      ch.flush_ciphertext(ec);
      REQUIRE(!ec);
      if (sent < total && ch.ciphertext_waiting() == 0) {
        sent += ch.write_some(asio::buffer(out.data() + sent, total - sent), ec);
        REQUIRE(!ec);
        ch.flush_ciphertext(ec);
        REQUIRE(!ec);
      }
      for (;;) {
        if (got == total) break;
        const std::size_t n = ch.read_some(asio::buffer(in.data() + got, total - got), ec);
        if (ec == asio::error::would_block) {
          ec = {};
          break;
        }
        REQUIRE(!ec);
        got += n;
      }
    };
    step(a, out_a, sent_a, in_a, got_a);
    step(b, out_b, sent_b, in_b, got_b);
  }
  REQUIRE(got_a == total);
  REQUIRE(got_b == total);
  CHECK(in_b == out_a);
  CHECK(in_a == out_b);
}

TEST_CASE("TLS with certificates: the job's authority is trusted, another one is not",
          "[tcp][tls]") {
  temporary_directory dir;
  const credential job = make_credential(dir.path, "commx-job");
  const credential stranger = make_credential(dir.path, "someone-else");
  tcp::tls_context ours(
      tcp::tls_settings{tcp::tls_mode::on, job.certificate, job.key, job.certificate});
  tcp::tls_context theirs(
      tcp::tls_settings{tcp::tls_mode::on, stranger.certificate, stranger.key, job.certificate});
  CHECK(ours.certificates());
  {
    socket_pair pair;
    tcp::tls_channel client(ours, pair.client, key_of('x'));
    tcp::tls_channel server(ours, pair.server, key_of('y'));  // keys do not serve here
    const auto [c, s] = handshake(pair, client, server);
    CHECK(!c);
    CHECK(!s);
  }
  for (const bool stranger_connects : {true, false}) {
    socket_pair pair;
    tcp::tls_channel client(stranger_connects ? theirs : ours, pair.client, key_of('x'));
    tcp::tls_channel server(stranger_connects ? ours : theirs, pair.server, key_of('x'));
    const auto [c, s] = handshake(pair, client, server);
    CHECK(c);
    CHECK(s);
  }
  const auto refused = [&](const tcp::tls_settings& s) {
    try {
      tcp::tls_context context(s);
    } catch (const commx::error& e) {
      CHECK(e.code() == commx::errc::bootstrap_failed);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused({tcp::tls_mode::on, (dir.path / "missing.pem").string(), job.key, job.certificate})
            .find("missing.pem") != std::string::npos);
  CHECK(refused({tcp::tls_mode::on, job.certificate, stranger.key, job.certificate})
            .find("COMMX_TLS_KEY") != std::string::npos);
}

TEST_CASE("COMMX_TLS and its credentials are checked at start-up", "[tcp][tls]") {
  const auto read = [](std::vector<std::pair<std::string, std::string>> vars) {
    vars.emplace_back("COMMX_RANK", "0");
    vars.emplace_back("COMMX_SIZE", "1");
    return tcp::config_from_env([vars](const char* name) -> std::optional<std::string> {
      for (const auto& [k, v] : vars) {
        if (k == name) return v;
      }
      return std::nullopt;
    });
  };
  CHECK(read({}).tls.mode == tcp::tls_mode::off);
  CHECK(read({{"COMMX_TLS", "sites"}}).tls.mode == tcp::tls_mode::sites);
  CHECK(read({{"COMMX_TLS", "on"}}).tls.mode == tcp::tls_mode::on);
  CHECK_THROWS_WITH(read({{"COMMX_TLS", "yes"}}), Catch::Contains("COMMX_TLS='yes'"));
  CHECK_THROWS_WITH(read({{"COMMX_TLS", "on"}, {"COMMX_TLS_CERT", "a.pem"}}),
                    Catch::Contains("go together"));
  const tcp::tls_settings sites{tcp::tls_mode::sites, {}, {}, {}};
  CHECK(sites.wanted("A", "B"));
  CHECK(!sites.wanted("A", "A"));
  CHECK(!tcp::tls_settings{}.wanted("A", "B"));
}

namespace {

/// A 2-rank job of tcp_scenario's `nodes` (an allreduce), rank r with `env[r]` besides the
/// job's variables, waited for (rank 1 first: rank 0 outlives a rank that fails); each rank's
/// exit status and output.
struct finished_job {
  std::optional<int> status[2];
  std::string output[2];
};
finished_job run_job(const std::vector<std::string> (&env)[2]) {
  const std::uint16_t port = free_port();
  std::unique_ptr<child> ranks[2];
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> vars = env[r];
    vars.push_back(fmt::format("COMMX_RANK={}", r));
    vars.push_back("COMMX_SIZE=2");
    vars.push_back(fmt::format("COMMX_ROOT=127.0.0.1:{}", port));
    vars.push_back("COMMX_TOKEN=" + token);
    vars.push_back("COMMX_TIMEOUT=5");
    ranks[r] = std::make_unique<child>(
        std::vector<std::string>{"timeout", "-s", "KILL", "60",
                                 commx::test::beside_this_program(COMMX_TCP_SCENARIO), "nodes",
                                 "0 0"},
        vars);
  }
  finished_job job;
  for (const int r : {1, 0}) {
    job.status[r] = ranks[r]->finish(clock_type::now() + 50s);
    job.output[r] = ranks[r]->transcript();
  }
  return job;
}

}  // namespace

TEST_CASE(
    "jobs on TLS: certificates work, a stranger's certificate and a rank without TLS "
    "fail clearly on both sides",
    "[tcp][tls][process]") {
  temporary_directory dir;
  const credential job = make_credential(dir.path, "commx-job");
  const credential stranger = make_credential(dir.path, "someone-else");
  const auto with = [&](const credential& c) {
    return std::vector<std::string>{"COMMX_TLS=on", "COMMX_LOG=info",
                                    "COMMX_TLS_CERT=" + c.certificate, "COMMX_TLS_KEY=" + c.key,
                                    "COMMX_TLS_CA=" + job.certificate};
  };
  const auto says = [](const finished_job& j, int r, const char* text) {
    return j.output[r].find(text) != std::string::npos;
  };
  {
    const auto j = run_job({with(job), with(job)});
    INFO("rank 0:\n" << j.output[0] << "rank 1:\n" << j.output[1]);
    CHECK(j.status[0] == 0);
    CHECK(j.status[1] == 0);
    CHECK(says(j, 1, "connected to rank 0 (127.0.0.1"));
    CHECK(says(j, 1, ", TLS)"));
    CHECK(says(j, 0, "hierarchical sum 1"));
  }
  {
    const auto j = run_job({with(job), with(stranger)});
    INFO("rank 0:\n" << j.output[0] << "rank 1:\n" << j.output[1]);
    CHECK(j.status[1] == 3);
    CHECK(says(j, 1, "authentication failed"));
    CHECK(says(j, 1, "TLS handshake failed"));
    CHECK(j.status[0] == 3);  // no rank 1 within the timeout, and it says why it refused the one
    CHECK(says(j, 0, "TLS handshake failed"));
    CHECK(says(j, 0, "rank 1 of 2 did not join"));
  }
  // Ranks that disagree on COMMX_TLS, both ways round: each fails and says why.
  struct disagreement {
    const char* tls[2];   // rank 0's setting, rank 1's
    const char* says[2];  // what each then says
  };
  for (const disagreement& d :
       {disagreement{{"on", "off"}, {"did not ask for TLS", "COMMX_TLS=on there"}},
        disagreement{{"off", "on"}, {"asked for TLS, which is off here", "COMMX_TLS=off there"}}}) {
    const auto j =
        run_job({{fmt::format("COMMX_TLS={}", d.tls[0])}, {fmt::format("COMMX_TLS={}", d.tls[1])}});
    INFO("rank 0 COMMX_TLS=" << d.tls[0] << ":\n" << j.output[0] << "rank 1:\n" << j.output[1]);
    CHECK(j.status[1] == 3);
    CHECK(says(j, 1, d.says[1]));
    CHECK(j.status[0] == 3);
    CHECK(says(j, 0, d.says[0]));
  }
}
