// loopback_sniffer: counts the packets on the loopback interface of the
// network namespace it runs in that carry a given text, so a test can tell
// whether a job's traffic is in clear. Prints "capturing" once its raw socket
// is open, then on SIGTERM/SIGINT (or after --seconds) "packets N matching M".
// Needs CAP_NET_RAW (root).
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {
volatile sig_atomic_t g_stop = 0;
void Stop(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loopback_sniffer TEXT [SECONDS]\n");
    return 2;
  }
  const std::string text = argv[1];
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 120;
  const int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) {
    std::fprintf(stderr, "loopback_sniffer: cannot open a raw socket: %s\n", std::strerror(errno));
    return 1;
  }
  sockaddr_ll where{};
  where.sll_family = AF_PACKET;
  where.sll_protocol = htons(ETH_P_ALL);
  where.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  if (where.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) {
    std::fprintf(stderr, "loopback_sniffer: cannot bind to lo: %s\n", std::strerror(errno));
    return 1;
  }
  signal(SIGTERM, Stop);
  signal(SIGINT, Stop);
  std::printf("capturing\n");
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  static char buf[1 << 16];
  long packets = 0, matching = 0;
  while (!g_stop && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) continue;
    ++packets;
    if (std::string_view(buf, static_cast<size_t>(n)).find(text) != std::string_view::npos) {
      ++matching;
    }
  }
  std::printf("packets %ld matching %ld\n", packets, matching);
  return 0;
}
