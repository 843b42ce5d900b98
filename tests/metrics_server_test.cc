// The /metrics page (launcher/metrics_server.h) as Prometheus and an
// attacker see it: a scrape is answered beside 1,000 slowloris sockets,
// a token is asked for when set, and only GET /metrics is served.
#include "launcher/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace een {
namespace {

using Clock = std::chrono::steady_clock;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// Sends `request` and reads the answer until the server closes, for at
// most `limit`; "" when nothing came.
std::string Ask(int port, const std::string& request, std::chrono::milliseconds limit) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

std::string Get(const std::string& path, const std::string& headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + headers + "\r\n";
}

TEST(MetricsServer, AScrapeIsAnsweredBesideAThousandSlowlorisSockets) {
  // 1,000 sockets here and up to kMaxConnections in the server: both in
  // this process.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4096);
  setrlimit(RLIMIT_NOFILE, &files);
  const int sockets = static_cast<int>(std::min<rlim_t>(1000, files.rlim_cur - 400));
  ASSERT_GT(sockets, 500) << "too few file descriptors allowed: " << files.rlim_cur;

  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  (*server)->Publish("een_up 1\n");
  const int port = (*server)->port();

  // Each opens, sends half a request line and then a byte now and then,
  // connecting again whenever the server closes it.
  std::atomic<bool> stop{false};
  std::thread slowloris([&] {
    std::vector<int> fds(sockets, -1);
    while (!stop) {
      for (int& fd : fds) {
        if (stop) break;
        if (fd < 0) {
          fd = Connect(port);
          if (fd >= 0) send(fd, "GET /metr", 9, MSG_NOSIGNAL);
          continue;
        }
        if (send(fd, "i", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN) {
          close(fd);
          fd = -1;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // every socket open, most held

  std::vector<double> took;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    const std::string answer = Ask(port, Get("/metrics"), std::chrono::seconds(10));
    took.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    EXPECT_NE(answer.find("HTTP/1.1 200 OK"), std::string::npos) << "scrape " << i;
    EXPECT_NE(answer.find("een_up 1\n"), std::string::npos) << answer;
  }
  stop = true;
  slowloris.join();
  std::sort(took.begin(), took.end());
  std::printf("[ metrics ] 5 scrapes beside %d slowloris sockets: median %.3f s, worst %.3f s\n",
              sockets, took[2], took[4]);
  // The promise is under 1 s; a very busy machine gets some slack.
  EXPECT_LT(took[2], 3.0);
}

TEST(MetricsServer, ATokenIsAskedForWhenSet) {
  auto server = MetricsServer::Start("127.0.0.1", 0, "s3cret-token");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  (*server)->Publish("een_up 1\n");
  const int port = (*server)->port();
  const auto limit = std::chrono::seconds(10);
  const std::string none = Ask(port, Get("/metrics"), limit);
  EXPECT_NE(none.find("HTTP/1.1 401 Unauthorized"), std::string::npos) << none;
  EXPECT_EQ(none.find("een_up"), std::string::npos) << none;
  const std::string wrong =
      Ask(port, Get("/metrics", "Authorization: Bearer s3cret-tokem\r\n"), limit);
  EXPECT_NE(wrong.find("HTTP/1.1 401 Unauthorized"), std::string::npos) << wrong;
  const std::string right =
      Ask(port, Get("/metrics", "authorization: Bearer s3cret-token\r\n"), limit);
  EXPECT_NE(right.find("HTTP/1.1 200 OK"), std::string::npos) << right;
  EXPECT_NE(right.find("een_up 1\n"), std::string::npos) << right;
}

TEST(MetricsServer, OnlyGetMetricsIsServed) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  const auto limit = std::chrono::seconds(10);
  EXPECT_NE(Ask(port, Get("/other"), limit).find("HTTP/1.1 404"), std::string::npos);
  EXPECT_NE(Ask(port, "POST /metrics HTTP/1.1\r\n\r\n", limit).find("HTTP/1.1 405"),
            std::string::npos);
  // A request longer than any real one is cut off, not kept.
  EXPECT_EQ(Ask(port, std::string(MetricsServer::kMaxRequestBytes + 4096, 'x'), limit), "");
  EXPECT_NE(Ask(port, Get("/metrics"), limit).find("# the job has not been measured yet"),
            std::string::npos);
}

}  // namespace
}  // namespace een
