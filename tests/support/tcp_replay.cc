// tcp_replay: what an eavesdropper on a job's network can try, for
// tests/multi_host_test.cc. Two modes:
//
//   tcp_replay capture IFACE TO_IP SKIP_PORT BYTES OUT
//     Listens on interface IFACE (a raw packet socket: run it where it sees
//     the traffic, e.g. on a host's port of a bridge) for the first TCP
//     connection opened to TO_IP on a port other than SKIP_PORT, and writes
//     the bytes its client sent, in stream order, to OUT once it has BYTES
//     of them (or on SIGTERM/SIGINT, what it has). Prints "capturing" once
//     the socket is open, then "captured N bytes sent to port P".
//   tcp_replay send HOST PORT (FILE | random:N) WAIT_MS
//     Opens a plain TCP connection to HOST:PORT, sends FILE's bytes (or N
//     random bytes) and reads what comes back until the peer closes or
//     WAIT_MS pass. Prints "sent S bytes; received R bytes; closed by the
//     peer" (or "; still open").
//
// Exit 0 once it ran; 1 when it could not (no raw socket, no connection).
// Needs CAP_NET_RAW for capture (root).
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void Stop(int) { g_stop = 1; }

uint16_t Be16(const unsigned char* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// The client's bytes of one TCP connection, put in order by sequence number
// (segments seen twice, e.g. retransmitted, count once).
class Stream {
 public:
  void Start(uint32_t isn) { base_ = isn + 1; }
  void Add(uint32_t seq, const unsigned char* data, size_t size) {
    const uint32_t offset = seq - base_;  // modulo 2^32, as TCP's own
    if (offset > (1u << 30)) return;      // before the start (or wrapped): not ours
    std::string& piece = pieces_[offset];
    if (piece.size() < size) piece.assign(reinterpret_cast<const char*>(data), size);
  }
  // The contiguous bytes from the start.
  std::string Bytes() const {
    std::string out;
    for (const auto& [offset, piece] : pieces_) {
      if (offset > out.size()) break;  // a gap: a segment not seen (yet)
      const size_t skip = out.size() - offset;
      if (skip < piece.size()) out.append(piece, skip, std::string::npos);
    }
    return out;
  }

 private:
  uint32_t base_ = 0;
  std::map<uint32_t, std::string> pieces_;
};

int Capture(const std::string& iface, const std::string& to_ip, int skip_port, size_t want,
            const std::string& out_path) {
  in_addr to{};
  if (inet_pton(AF_INET, to_ip.c_str(), &to) != 1) {
    std::fprintf(stderr, "tcp_replay: %s is not an IPv4 address\n", to_ip.c_str());
    return 1;
  }
  // ETH_P_ALL: a bridge port hands what it sends out to such taps only.
  const int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL));
  if (fd < 0) {
    std::fprintf(stderr, "tcp_replay: cannot open a raw socket: %s\n", std::strerror(errno));
    return 1;
  }
  sockaddr_ll where{};
  where.sll_family = AF_PACKET;
  where.sll_protocol = htons(ETH_P_ALL);
  where.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
  if (where.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
    std::fprintf(stderr, "tcp_replay: cannot bind to %s: %s\n", iface.c_str(),
                 std::strerror(errno));
    return 1;
  }
  signal(SIGTERM, Stop);
  signal(SIGINT, Stop);
  std::printf("capturing\n");
  std::fflush(stdout);
  std::vector<unsigned char> buf(1 << 18);  // a GSO segment may exceed the MTU
  bool started = false;
  uint32_t client = 0;
  uint16_t client_port = 0, server_port = 0;
  Stream stream;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (!g_stop && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    sockaddr_ll from{};
    socklen_t from_size = sizeof from;
    const ssize_t n =
        recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &from_size);
    if (n < 20 || from.sll_protocol != htons(ETH_P_IP)) continue;
    const unsigned char* ip = buf.data();
    const size_t ihl = (ip[0] & 0x0f) * 4u;
    const size_t total = std::min<size_t>(Be16(ip + 2), static_cast<size_t>(n));
    if ((ip[0] >> 4) != 4 || ip[9] != IPPROTO_TCP || total < ihl + 20) continue;
    uint32_t src = 0, dst = 0;
    std::memcpy(&src, ip + 12, 4);
    std::memcpy(&dst, ip + 16, 4);
    const unsigned char* tcp = ip + ihl;
    const uint16_t sport = Be16(tcp), dport = Be16(tcp + 2);
    const uint32_t seq = Be32(tcp + 4);
    const unsigned char flags = tcp[13];
    const size_t doff = (tcp[12] >> 4) * 4u;
    if (dst != to.s_addr || dport == skip_port || ihl + doff > total) continue;
    if (!started) {
      if ((flags & 0x02) == 0 || (flags & 0x10) != 0) continue;  // a SYN opens ours
      started = true;
      client = src;
      client_port = sport;
      server_port = dport;
      stream.Start(seq);
      continue;
    }
    if (src != client || sport != client_port || dport != server_port) continue;
    stream.Add(seq, tcp + doff, total - ihl - doff);
    if (stream.Bytes().size() >= want) break;
  }
  std::string bytes = stream.Bytes();
  if (bytes.size() > want) bytes.resize(want);
  std::ofstream(out_path, std::ios::binary) << bytes;
  std::printf("captured %zu bytes sent to port %u\n", bytes.size(), server_port);
  return 0;
}

int Send(const std::string& host, int port, const std::string& what, int wait_ms) {
  std::string bytes;
  if (what.rfind("random:", 0) == 0) {
    std::mt19937 random(std::random_device{}());
    bytes.resize(std::strtoul(what.c_str() + 7, nullptr, 10));
    for (char& c : bytes) c = static_cast<char>(random());
  } else {
    std::ifstream in(what, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  signal(SIGPIPE, SIG_IGN);  // the peer may close while we still send
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &to.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    std::printf("cannot connect to %s:%d: %s\n", host.c_str(), port, std::strerror(errno));
    return 1;
  }
  size_t sent = 0, received = 0;
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  char buf[65536];
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < bytes.size() ? POLLOUT : 0)), 0};
    if (poll(&p, 1, 50) <= 0) continue;
    if (p.revents & POLLIN) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) closed = true;
      if (n > 0) received += static_cast<size_t>(n);
    }
    if (!closed && (p.revents & POLLOUT)) {
      const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN) closed = true;
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if (p.revents & (POLLHUP | POLLERR)) closed = true;
  }
  std::printf("sent %zu bytes; received %zu bytes; %s\n", sent, received,
              closed ? "closed by the peer" : "still open");
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "capture" && argc == 7) {
    return Capture(argv[2], argv[3], std::atoi(argv[4]), std::strtoul(argv[5], nullptr, 10),
                   argv[6]);
  }
  if (mode == "send" && argc == 6) {
    return Send(argv[2], std::atoi(argv[3]), argv[4], std::atoi(argv[5]));
  }
  std::fprintf(stderr,
               "usage: tcp_replay capture IFACE TO_IP SKIP_PORT BYTES OUT\n"
               "       tcp_replay send HOST PORT (FILE | random:N) WAIT_MS\n");
  return 2;
}
