// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One authenticated TCP connection to a peer rank: its non-blocking socket, the frames
/// waiting to be written, and the reader's place in the incoming byte stream. It moves bytes;
/// what the frames mean is the engine's business (engine.hpp).
///
/// Writing: frames go out in order. A frame is its 40-byte header plus a payload that is either
/// the user's own buffer (rendezvous data: no copy, the header and the buffer leave in one
/// gathered write) or a copy the frame owns (an eager message the socket did not take at once).
///
/// Reading: bytes come into a staging buffer, headers are decoded from it, and payloads are
/// copied from it to wherever the engine says. A large payload still to come when the staging
/// buffer is empty is read straight into its destination, with no copy; while a rendezvous
/// payload may come next, the engine reads no more than the next header into the staging
/// buffer, so that all of such a payload is read in place.
///
/// Encrypted (tls.hpp): the same, through the connection's `tls` channel. Frames are
/// encrypted as they are written, and their ciphertext waits in the channel until the socket
/// takes it; `idle()` says when nothing at all waits to be written.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <asio.hpp>

#include "commx/transport/detail/tcp/tls.hpp"
#include "commx/transport/detail/tcp/wire.hpp"

namespace commx::detail::tcp {

struct operation;

/// One frame waiting to be written, or being written.
struct out_frame {
  header_bytes header{};
  std::vector<std::byte> owned;          ///< the payload, when the frame owns a copy
  std::span<const std::byte> payload;    ///< what follows the header (owned or the user's)
  std::size_t written = 0;               ///< bytes of header + payload already written
  std::shared_ptr<operation> completes;  ///< a rendezvous send, done when this frame is out
  std::uint64_t cookie = 0;              ///< the rendezvous id, for rts and data frames

  [[nodiscard]] std::size_t total() const { return header_size + payload.size(); }
};

class connection {
 public:
  /// `secure`: the TLS session the handshake set up over `s`, if any.
  /// `staging_bytes`: the staging buffer's first size (the rendezvous's connections, which
  /// carry one small frame each way, start smaller).
  explicit connection(asio::ip::tcp::socket s, std::unique_ptr<tls_channel> secure = nullptr,
                      std::size_t staging_bytes = first_staging_size)
      : socket(std::move(s)), tls(std::move(secure)) {
    if (tls) tls->rebind(socket);
    socket.non_blocking(true);
    socket.set_option(asio::ip::tcp::no_delay(true));
    staging.resize(staging_bytes);
  }
  /// A connection still being made (the engine dials on first use): frames queue in `out`
  /// until attach() gives it its socket.
  explicit connection(asio::io_context& io) : socket(io), open(false) {}
  /// Gives a connection made before its socket the authenticated socket: the frames queued
  /// meanwhile go out on it.
  void attach(asio::ip::tcp::socket s, std::unique_ptr<tls_channel> secure) {
    reattach(std::move(s), std::move(secure));
    socket.non_blocking(true);
    socket.set_option(asio::ip::tcp::no_delay(true));
    staging.resize(first_staging_size);
    open = true;
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  connection(connection&&) = delete;
  ~connection() = default;

  /// Closes the connection and lets its buffers go, leaving a connection not yet made in the
  /// same object: whoever still holds it (a read that processed the frame which ended it, a
  /// flush whose write found the end) sees it closed, not freed.
  void forget(asio::io_context& io) {
    close();
    *this = connection(io);
  }

  asio::ip::tcp::socket socket;
  std::unique_ptr<tls_channel> tls;  ///< set when the connection is encrypted
  /// Takes over a socket (and its TLS session) that a handshake on this connection's behalf
  /// moved away.
  void reattach(asio::ip::tcp::socket s, std::unique_ptr<tls_channel> secure) {
    socket = std::move(s);
    tls = std::move(secure);
    if (tls) tls->rebind(socket);
  }
  bool open = true;
  bool read_armed = false;
  bool write_armed = false;

  // --- writing ---------------------------------------------------------------------------
  std::deque<out_frame> out;
  /// Bytes the socket has taken, ever: less what it still holds (SIOCOUTQ), what the peer
  /// acknowledged (wan's autotune measures paths so).
  std::uint64_t bytes_written = 0;

  /// Writes as much of the queue as the socket takes now. Completed frames are popped and
  /// handed to `done(frame)`. Returns the error that broke the connection, if any;
  /// would_block is not an error (the caller arms a wait when `out` is not empty).
  template <class Done>
  std::error_code flush(Done&& done) {
    constexpr std::size_t max_frames = 16;
    if (tls && tls->ciphertext_waiting() > 0) {
      std::error_code ec;
      bytes_written += tls->flush_ciphertext(ec);
      if (ec || tls->ciphertext_waiting() > 0) return ec;
    }
    while (!out.empty()) {
      std::array<asio::const_buffer, 2 * max_frames> buffers;
      std::size_t count = 0;
      for (std::size_t i = 0; i < out.size() && i < max_frames; ++i) {
        const out_frame& f = out[i];
        if (f.written < header_size) {
          buffers[count++] = asio::buffer(f.header.data() + f.written, header_size - f.written);
        }
        const std::size_t payload_done = f.written > header_size ? f.written - header_size : 0;
        if (payload_done < f.payload.size()) {
          buffers[count++] =
              asio::buffer(f.payload.data() + payload_done, f.payload.size() - payload_done);
        }
      }
      std::error_code ec;
      std::size_t n = 0;
      std::size_t offered = 0;
      for (std::size_t i = 0; i < count; ++i) offered += buffers[i].size();
      if (count > 0) {
        n = write_some(std::span(buffers.data(), count), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) return {};
        if (ec) return ec;
      }
      const bool full = n < offered || (tls && tls->ciphertext_waiting() > 0);
      while (!out.empty()) {
        out_frame& f = out.front();
        const std::size_t take = std::min(n, f.total() - f.written);
        f.written += take;
        n -= take;
        if (f.written < f.total()) break;
        out_frame finished = std::move(f);
        out.pop_front();
        done(finished);
      }
      // A TCP socket takes less than it was offered only when its send buffer is full: asking
      // again at once would be a system call that fails with would_block. The write wait the
      // caller arms resumes the queue (arming re-polls the socket, so no wake-up is missed).
      if (full) return {};
    }
    return {};
  }

  /// Writes header + payload now if nothing is queued before it; returns the bytes written
  /// (all, some or none), or sets `ec` when the connection broke.
  std::size_t write_now(const header_bytes& header, std::span<const std::byte> payload,
                        std::error_code& ec) {
    if (!idle()) return 0;
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(header),
                                                    asio::buffer(payload.data(), payload.size())};
    const std::size_t n = write_some(buffers, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
    return n;
  }

  /// Nothing waits to be written: no frame, and no ciphertext.
  [[nodiscard]] bool idle() const {
    return out.empty() && (!tls || tls->ciphertext_waiting() == 0);
  }

  /// Writes what the socket takes now of ciphertext that waited, and of `buffers` when none
  /// waits any more; returns the bytes of `buffers` taken (plaintext, when encrypted).
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers& buffers, std::error_code& ec) {
    if (!tls) {
      const std::size_t n = socket.write_some(buffers, ec);
      bytes_written += n;
      return n;
    }
    bytes_written += tls->flush_ciphertext(ec);
    if (ec || tls->ciphertext_waiting() > 0) return 0;
    const std::size_t n = tls->write_some(buffers, ec);
    if (ec) return n;
    bytes_written += tls->flush_ciphertext(ec);
    return n;
  }

  /// Reads what is there now into `into`: would_block when nothing is, eof at the end of the
  /// stream. Encrypted, a read returns at most a record's plaintext: only would_block says the
  /// socket is empty.
  std::size_t read_some(asio::mutable_buffer into, std::error_code& ec) {
    return tls ? tls->read_some(into, ec) : socket.read_some(into, ec);
  }
  /// A read can stop short of what the socket holds (encrypted: a record at a time).
  [[nodiscard]] bool short_read_empties() const { return !tls; }

  // --- reading ---------------------------------------------------------------------------
  /// The staging buffer starts small and doubles each time a read fills it, up to
  /// staging_size: a connection that carries a message now and then costs 16 KiB, a busy one
  /// reads up to 256 KiB per system call. The rendezvous's (rank 0 takes one from every rank
  /// at once) start at a frame header and an endpoint record.
  static constexpr std::size_t first_staging_size = std::size_t{16} << 10;
  static constexpr std::size_t rendezvous_staging_size = 256;
  static constexpr std::size_t staging_size = std::size_t{256} << 10;
  /// After a read that filled the buffer: twice the room, up to staging_size.
  void grow_staging() {
    if (staging.size() < staging_size) staging.resize(std::min(2 * staging.size(), staging_size));
  }
  /// A payload at least this large and not yet in the staging buffer is read in place.
  static constexpr std::size_t direct_read = std::size_t{32} << 10;

  std::vector<std::byte> staging;
  std::size_t begin = 0;  ///< first unprocessed byte in staging
  std::size_t end = 0;    ///< one past the last byte read into staging

  /// The payload being received: where it goes (null: discarded) and how much is left.
  bool in_payload = false;
  frame_header current{};
  std::byte* destination = nullptr;
  std::uint64_t remaining = 0;
  std::shared_ptr<operation> receiving;  ///< the receive the payload goes to, if any
  std::vector<std::byte> holding;        ///< an eager or bootstrap payload nobody has asked for
  bool into_holding = false;             ///< the payload goes to `holding`

  [[nodiscard]] std::size_t available() const { return end - begin; }

  /// Room for at least a header at the end of the staging buffer.
  void compact() {
    if (begin == end) {
      begin = end = 0;
    } else if (staging.size() - end < header_size) {
      std::memmove(staging.data(), staging.data() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
  }

  /// Lets the kernel notice a peer whose host vanished (no FIN, no reset) within about
  /// `timeout`: keepalive probes on an idle connection, and a bound on unacknowledged data.
  /// A stopped process's kernel still answers both, so a hung peer is not taken for a dead one.
  void detect_dead_host(std::chrono::seconds timeout) {
    const int seconds = static_cast<int>(std::clamp<long long>(timeout.count(), 6, 32767));
    const int idle = seconds / 3;
    const int interval = seconds / 6;
    const int probes = 3;
    const unsigned int user_timeout_ms = static_cast<unsigned int>(seconds) * 1000U;
    const int fd = socket.native_handle();
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
  }

  void close() {
    if (!open) return;
    tls.reset();
    open = false;
    std::error_code ignored;
    socket.shutdown(asio::socket_base::shutdown_both, ignored);
    socket.close(ignored);
  }

 private:
  connection& operator=(connection&&) = default;  // forget()'s: a link's object stays put
};

}  // namespace commx::detail::tcp
