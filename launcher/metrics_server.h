// MetricsServer: serves the job's Prometheus page at http://HOST:PORT/metrics
// (cpp-httplib, on its own threads). The coordinator publishes a fresh page
// now and then (Publish); a scrape gets the newest one, so it never waits
// for, or races with, the coordinator's single thread. Any other path is
// 404. The page holds no secret and changes nothing: it needs no key.
// Thread safety: Publish() from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace een {

class MetricsServer {
 public:
  // Binds HOST:PORT (PORT 0: any free one); FailedPrecondition naming the
  // address and the cause when it cannot (in use, no permission).
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port);
  ~MetricsServer();

  int port() const { return port_; }
  void Publish(std::string page);

 private:
  MetricsServer();
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::string page_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace een
