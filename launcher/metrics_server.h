// MetricsServer: serves the job's Prometheus page at http://HOST:PORT/metrics.
// The coordinator publishes a fresh page now and then (Publish); a scrape
// gets the newest one, so it never waits for, or races with, the
// coordinator's single thread. Any other path is 404, any method but GET
// 405. With a token, a scrape must say `Authorization: Bearer TOKEN`
// (else 401).
//
// Held by nobody: one thread serves every connection without blocking on
// any (epoll), each connection must send its whole request within
// kRequestDeadline of connecting and take the answer within
// kAnswerDeadline, a request is at most kMaxRequestBytes, and at most
// kMaxConnections are open: a new one closes the oldest still sending its
// request. So 1,000 sockets that trickle a byte now and then (slowloris)
// delay a real scrape by no more than a moment. (cpp-httplib, used before,
// gives each connection a thread for as long as it sends, so they held
// every scrape.)
// Thread safety: Publish() from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace een {

class MetricsServer {
 public:
  static constexpr std::chrono::milliseconds kRequestDeadline{1000};
  static constexpr std::chrono::milliseconds kAnswerDeadline{10000};
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr size_t kMaxConnections = 256;

  // Binds HOST:PORT (PORT 0: any free one); FailedPrecondition naming the
  // address and the cause when it cannot (in use, no permission). A
  // non-empty `token` is required of every scrape.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                      std::string token = "");
  ~MetricsServer();

  int port() const { return port_; }
  void Publish(std::string page);

 private:
  MetricsServer() = default;
  void Serve();
  std::string Answer(const std::string& request);

  int listen_fd_ = -1, wake_fd_ = -1, epoll_fd_ = -1;
  int port_ = 0;
  std::string token_;
  std::mutex mu_;
  std::string page_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace een
