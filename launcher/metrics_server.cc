#include "launcher/metrics_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>

namespace een {

MetricsServer::MetricsServer() : server_(std::make_unique<httplib::Server>()) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  MetricsServer* self = m.get();
  m->page_ = "# the job has not been measured yet\n";
  m->server_->Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    std::string page;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      page = self->page_;
    }
    response.set_content(page, "text/plain; version=0.0.4; charset=utf-8");
  });
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which lets
  // a second job listen on the same port and take half the scrapes.
  m->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (port == 0) {
    m->port_ = m->server_->bind_to_any_port(host);
  } else if (m->server_->bind_to_port(host, port)) {
    m->port_ = port;
  }
  if (m->port_ <= 0) {
    return FailedPrecondition("cannot serve metrics on " + host + ":" + std::to_string(port) +
                              ": " + std::strerror(errno) +
                              " (is the port in use? pick another with --metrics-port)");
  }
  m->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  return m;
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void MetricsServer::Publish(std::string page) {
  std::lock_guard<std::mutex> lock(mu_);
  page_ = std::move(page);
}

}  // namespace een
