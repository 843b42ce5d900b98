#include "launcher/metrics_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace een {
namespace {

using Clock = std::chrono::steady_clock;

// One open connection: its request as it comes, then the answer as it goes.
struct Connection {
  Clock::time_point deadline;  // still sending its request: its accept time + kRequestDeadline
  std::string in, out;
  size_t sent = 0;
  bool answering = false;
};

std::string Response(int code, const char* reason, const std::string& body,
                     const char* extra = "") {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason +
         "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n" + extra + "\r\n" + body;
}

// Equal in time whatever the bytes: a token is not found out byte by byte.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char differ = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    differ |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return differ == 0;
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port,
                                                            std::string token) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->page_ = "# the job has not been measured yet\n";
  m->token_ = std::move(token);
  auto fail = [&](const std::string& why) {
    return FailedPrecondition("cannot serve metrics on " + host + ":" + std::to_string(port) +
                              ": " + why +
                              " (is the port in use? pick another with --metrics-port)");
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0) {
    return fail(gai_strerror(e));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a && m->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second job listen on the
    // same port and take half the scrapes.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
      m->listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (m->listen_fd_ < 0) return fail(why);
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(m->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  m->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  m->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  m->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (m->wake_fd_ < 0 || m->epoll_fd_ < 0) return fail(std::strerror(errno));
  for (int fd : {m->listen_fd_, m->wake_fd_}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    epoll_ctl(m->epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }
  MetricsServer* self = m.get();
  m->thread_ = std::thread([self] { self->Serve(); });
  return m;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fd_, epoll_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void MetricsServer::Publish(std::string page) {
  std::lock_guard<std::mutex> lock(mu_);
  page_ = std::move(page);
}

std::string MetricsServer::Answer(const std::string& request) {
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  if (line.rfind("GET ", 0) != 0) return Response(405, "Method Not Allowed", "GET only\n");
  const size_t path_end = line.find(' ', 4);
  const std::string path = line.substr(4, path_end == std::string::npos ? path_end : path_end - 4);
  if (path != "/metrics" && path.rfind("/metrics?", 0) != 0) {
    return Response(404, "Not Found", "the page is /metrics\n");
  }
  if (!token_.empty()) {
    std::string given;
    for (size_t at = line_end; at != std::string::npos && at + 2 < request.size();) {
      const size_t next = request.find("\r\n", at + 2);
      const std::string header = request.substr(at + 2, next - at - 2);
      constexpr char kName[] = "authorization:";
      if (header.size() > sizeof kName - 1 &&
          strncasecmp(header.c_str(), kName, sizeof kName - 1) == 0) {
        std::string value = header.substr(sizeof kName - 1);
        value.erase(0, value.find_first_not_of(" \t"));
        if (value.rfind("Bearer ", 0) == 0) given = value.substr(7);
      }
      at = next;
    }
    if (!SameSecret(given, token_)) {
      return Response(401, "Unauthorized",
                      "this job's metrics need `Authorization: Bearer TOKEN` (the token of "
                      "een-launch --metrics-token-file)\n",
                      "WWW-Authenticate: Bearer\r\n");
    }
  }
  std::string page;
  {
    std::lock_guard<std::mutex> lock(mu_);
    page = page_;
  }
  return Response(200, "OK", page);
}

void MetricsServer::Serve() {
  std::map<int, Connection> open;
  auto drop = [&](int fd) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    open.erase(fd);
  };
  auto send_some = [&](int fd, Connection& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) break;
      c.sent += static_cast<size_t>(n);
    }
    drop(fd);  // all sent, or the peer is gone
  };
  epoll_event events[64];
  while (true) {
    const int n = epoll_wait(epoll_fd_, events, 64, 100);
    const auto now = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        for (auto& [f, c] : open) close(f);
        return;
      }
      if (fd == listen_fd_) {
        while (true) {
          const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (client < 0) break;
          // Full: the oldest connection still sending its request (the
          // earliest deadline of those) makes room.
          if (open.size() >= kMaxConnections) {
            auto oldest = open.end();
            for (auto it = open.begin(); it != open.end(); ++it) {
              if (!it->second.answering &&
                  (oldest == open.end() || it->second.deadline < oldest->second.deadline)) {
                oldest = it;
              }
            }
            if (oldest != open.end()) drop(oldest->first);
          }
          open[client] = Connection{now + kRequestDeadline, {}, {}, 0, false};
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.fd = client;
          epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, client, &e);
        }
        continue;
      }
      auto it = open.find(fd);
      if (it == open.end()) continue;
      Connection& c = it->second;
      if (c.answering) {
        send_some(fd, c);
        continue;
      }
      char buffer[4096];
      const ssize_t got = recv(fd, buffer, sizeof buffer, 0);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        drop(fd);
        continue;
      }
      if (got < 0) continue;
      c.in.append(buffer, static_cast<size_t>(got));
      if (c.in.find("\r\n\r\n") == std::string::npos) {
        if (c.in.size() > kMaxRequestBytes) drop(fd);  // no request is that long
        continue;
      }
      c.answering = true;
      c.out = Answer(c.in);
      c.deadline = now + kAnswerDeadline;
      epoll_event e{};
      e.events = EPOLLOUT;
      e.data.fd = fd;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &e);
      send_some(fd, c);
    }
    // Past their deadline: closed.
    for (auto it = open.begin(); it != open.end();) {
      const int fd = it->first;
      const bool late = it->second.deadline < now;
      ++it;
      if (late) drop(fd);
    }
  }
}

}  // namespace een
