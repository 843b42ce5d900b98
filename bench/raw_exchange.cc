#include "bench/raw_exchange.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/receive_heap.h"

namespace een::bench {

namespace {

void NoFree(void*, void*) {}

std::string EndpointFile(const RawExchangeOptions& o, size_t server) {
  return o.work_dir + "/raw-server-" + std::to_string(server) + ".endpoint";
}

// A server's chunks cut into pieces of at most bucket_bytes: [first, end) chunk indices.
std::vector<std::pair<size_t, size_t>> Pieces(const RawExchangeOptions& o, size_t s) {
  std::vector<std::pair<size_t, size_t>> pieces;
  const auto& sizes = o.chunk_bytes[s];
  size_t first = 0, bytes = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    bytes += sizes[k];
    if ((o.bucket_bytes > 0 && bytes >= o.bucket_bytes) || k + 1 == sizes.size()) {
      pieces.emplace_back(first, k + 1);
      first = k + 1;
      bytes = 0;
    }
  }
  if (pieces.empty()) pieces.emplace_back(0, 0);  // a server without chunks still answers
  return pieces;
}

// As EEN's sockets (common/transport/zmq): no high-water marks. (EEN's
// never linger, as its roles say goodbye in their protocol; here the
// server's last answers must still go out as it exits.)
void SetUp(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
}

// As EEN's processes: freed receive buffers stay for the next step.
void SetUpHeap() {
  KeepFreedReceiveBuffers();
  ShareOneHeap();
}

// Sends the header (the piece's index) and the chunks [first, end) of `data`.
void SendPiece(zmq::socket_t& socket, uint32_t piece, const char* data,
               const std::vector<size_t>& sizes, std::pair<size_t, size_t> range) {
  size_t at = 0;
  for (size_t k = 0; k < range.first; ++k) at += sizes[k];
  const bool more = range.second > range.first;
  socket.send(zmq::buffer(&piece, sizeof piece),
              more ? zmq::send_flags::sndmore : zmq::send_flags::none);
  for (size_t k = range.first; k < range.second; ++k) {
    zmq::message_t frame(const_cast<char*>(data) + at, sizes[k], NoFree, nullptr);
    at += sizes[k];
    socket.send(frame, k + 1 < range.second ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

int Server(const RawExchangeOptions& o, size_t s) {
  SetUpHeap();
  size_t total = 0;
  for (size_t b : o.chunk_bytes[s]) total += b;
  std::vector<char> values(total, 1);  // before the context: frames lent from it outlive sends
  const auto pieces = Pieces(o, s);
  zmq::context_t ctx;
  zmq::socket_t socket(ctx, zmq::socket_type::router);
  SetUp(socket);
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
    // Each piece is answered once every client sent it (clients run ahead
    // of each other: pieces of one step arrive in any order between them).
    std::map<uint32_t, std::vector<zmq::message_t>> waiting;
    size_t answered = 0;
    while (answered < pieces.size()) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(socket, std::back_inserter(parts)) || parts.size() < 2 ||
          parts[1].size() != sizeof(uint32_t)) {
        return 1;
      }
      uint32_t piece = 0;
      std::memcpy(&piece, parts[1].data(), sizeof piece);
      if (piece >= pieces.size()) return 1;
      auto& ids = waiting[piece];
      ids.push_back(std::move(parts[0]));
      if (ids.size() < static_cast<size_t>(o.workers)) continue;
      for (zmq::message_t& id : ids) {
        socket.send(id, zmq::send_flags::sndmore);
        SendPiece(socket, piece, values.data(), o.chunk_bytes[s], pieces[piece]);
      }
      waiting.erase(piece);
      ++answered;
    }
  }
  return 0;
}

int Client(const RawExchangeOptions& o, int w) {
  SetUpHeap();
  size_t total = 0;
  std::vector<size_t> server_at;  // where each server's bytes start in the buffers
  for (const auto& sizes : o.chunk_bytes) {
    server_at.push_back(total);
    for (size_t b : sizes) total += b;
  }
  std::vector<char> grads(total, 2), params(total, 0);  // before the context, as in Server
  std::vector<std::vector<std::pair<size_t, size_t>>> pieces;
  for (size_t s = 0; s < o.chunk_bytes.size(); ++s) pieces.push_back(Pieces(o, s));
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
    SetUp(servers.back());
    servers.back().connect(endpoint);
  }
  std::ofstream out(o.work_dir + "/raw-worker-" + std::to_string(w) + ".txt");
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t most = 0;
    for (const auto& p : pieces) most = std::max(most, p.size());
    for (size_t k = 0; k < most; ++k) {  // piece by piece, every server in turn
      for (size_t s = 0; s < servers.size(); ++s) {
        if (k < pieces[s].size()) {
          SendPiece(servers[s], static_cast<uint32_t>(k), grads.data() + server_at[s],
                    o.chunk_bytes[s], pieces[s][k]);
        }
      }
    }
    for (size_t s = 0; s < servers.size(); ++s) {
      for (size_t k = 0; k < pieces[s].size(); ++k) {
        std::vector<zmq::message_t> parts;
        if (!zmq::recv_multipart(servers[s], std::back_inserter(parts)) || parts.empty() ||
            parts[0].size() != sizeof(uint32_t)) {
          return 1;
        }
        uint32_t piece = 0;
        std::memcpy(&piece, parts[0].data(), sizeof piece);
        if (piece >= pieces[s].size()) return 1;
        size_t at = server_at[s];
        for (size_t c = 0; c < pieces[s][piece].first; ++c) at += o.chunk_bytes[s][c];
        for (size_t f = 1; f < parts.size(); ++f) {
          std::memcpy(params.data() + at, parts[f].data(), parts[f].size());
          at += parts[f].size();
        }
      }
    }
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
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
