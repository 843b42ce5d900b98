#include "bench/raw_exchange.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace een::bench {

namespace {

void NoFree(void*, void*) {}

std::string EndpointFile(const RawExchangeOptions& o, size_t server) {
  return o.work_dir + "/raw-server-" + std::to_string(server) + ".endpoint";
}

int Server(const RawExchangeOptions& o, size_t s) {
  size_t total = 0;
  for (size_t b : o.chunk_bytes[s]) total += b;
  std::vector<char> values(total, 1);  // before the context: frames lent from it outlive sends
  zmq::context_t ctx;
  zmq::socket_t socket(ctx, zmq::socket_type::router);
  const std::string bind = o.transport == "ipc"
                               ? "ipc://" + o.work_dir + "/raw-" + std::to_string(s) + ".sock"
                               : "tcp://127.0.0.1:*";
  socket.bind(bind);
  {
    std::ofstream out(EndpointFile(o, s) + ".tmp");
    out << socket.get(zmq::sockopt::last_endpoint) << '\n';
  }
  std::rename((EndpointFile(o, s) + ".tmp").c_str(), EndpointFile(o, s).c_str());
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    std::vector<zmq::message_t> identities;
    for (int w = 0; w < o.workers; ++w) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(socket, std::back_inserter(parts))) return 1;
      identities.push_back(std::move(parts[0]));
    }
    for (zmq::message_t& id : identities) {
      socket.send(id, zmq::send_flags::sndmore);
      socket.send(zmq::buffer("h", 1), o.chunk_bytes[s].empty() ? zmq::send_flags::none
                                                                : zmq::send_flags::sndmore);
      size_t at = 0;
      for (size_t k = 0; k < o.chunk_bytes[s].size(); ++k) {
        zmq::message_t frame(values.data() + at, o.chunk_bytes[s][k], NoFree, nullptr);
        at += o.chunk_bytes[s][k];
        socket.send(frame, k + 1 < o.chunk_bytes[s].size() ? zmq::send_flags::sndmore
                                                          : zmq::send_flags::none);
      }
    }
  }
  return 0;
}

int Client(const RawExchangeOptions& o, int w) {
  size_t total = 0;
  for (const auto& sizes : o.chunk_bytes) {
    for (size_t b : sizes) total += b;
  }
  std::vector<char> grads(total, 2), params(total, 0);  // before the context, as in Server
  zmq::context_t ctx;
  std::vector<zmq::socket_t> servers;
  for (size_t s = 0; s < o.chunk_bytes.size(); ++s) {
    std::string endpoint;
    for (int i = 0; i < 3000 && endpoint.empty(); ++i) {
      std::ifstream in(EndpointFile(o, s));
      if (!(in >> endpoint)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (endpoint.empty()) return 1;
    servers.emplace_back(ctx, zmq::socket_type::dealer);
    servers.back().connect(endpoint);
  }
  std::ofstream out(o.work_dir + "/raw-worker-" + std::to_string(w) + ".txt");
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t at = 0;
    for (size_t s = 0; s < servers.size(); ++s) {
      const auto& sizes = o.chunk_bytes[s];
      servers[s].send(zmq::buffer("h", 1), sizes.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
      for (size_t k = 0; k < sizes.size(); ++k) {
        zmq::message_t frame(grads.data() + at, sizes[k], NoFree, nullptr);
        at += sizes[k];
        servers[s].send(frame, k + 1 < sizes.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
    at = 0;
    for (size_t s = 0; s < servers.size(); ++s) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(servers[s], std::back_inserter(parts))) return 1;
      for (size_t k = 1; k < parts.size(); ++k) {
        std::memcpy(params.data() + at, parts[k].data(), parts[k].size());
        at += parts[k].size();
      }
    }
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - t0).count();
    if (step >= o.warmup) out << micros << '\n';
  }
  return 0;
}

}  // namespace

Result<std::vector<double>> RunRawExchange(const RawExchangeOptions& o) {
  std::vector<pid_t> children;
  auto spawn = [&](auto body) -> Status {
    const pid_t pid = fork();
    if (pid < 0) return Internal("fork failed");
    if (pid == 0) _exit(body());
    children.push_back(pid);
    return Status::Ok();
  };
  for (size_t s = 0; s < o.chunk_bytes.size(); ++s) {
    EEN_RETURN_IF_ERROR(spawn([&] { return Server(o, s); }));
  }
  for (int w = 0; w < o.workers; ++w) EEN_RETURN_IF_ERROR(spawn([&] { return Client(o, w); }));
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) return Internal("a raw ZeroMQ exchange process failed");
  std::vector<double> times;
  for (int w = 0; w < o.workers; ++w) {
    std::ifstream in(o.work_dir + "/raw-worker-" + std::to_string(w) + ".txt");
    for (double t; in >> t;) times.push_back(t);
  }
  return times;
}

}  // namespace een::bench
