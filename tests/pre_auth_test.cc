// Before a peer has proved it holds the job's credentials it can make a
// listener hold only a small, fixed amount: a ZMTP command frame declaring
// 1 GiB, streamed on three connections without the secret, leaves the
// listening process within +64 MB, each such connection is cut, and a
// member is served as before (zmq_parts.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/resource_usage.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"

namespace een::transport {
namespace {

using std::chrono::milliseconds;

// A stranger: a ZMTP 3.0 greeting asking for PLAIN, then a command frame
// declaring `declared` bytes, then up to `stream` bytes of it. True when the
// listener cut the connection (a send or the final read failed or ended).
bool StreamDeclaredCommandFrame(int port, uint64_t declared, size_t stream) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return false;
  }
  std::vector<uint8_t> head(64, 0);
  head[0] = 0xFF;
  head[9] = 0x7F;
  head[10] = 3;  // ZMTP 3.0
  std::memcpy(&head[12], "PLAIN", 5);
  head.push_back(0x06);  // a long command frame
  for (int i = 7; i >= 0; --i) head.push_back(static_cast<uint8_t>(declared >> (8 * i)));
  bool cut = send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0;
  std::vector<uint8_t> block(1 << 20, 0x41);
  for (size_t sent = 0; !cut && sent < stream; sent += block.size()) {
    cut = send(fd, block.data(), block.size(), MSG_NOSIGNAL) < 0;
  }
  if (!cut) {  // all of it went out: the listener must have closed by now
    shutdown(fd, SHUT_WR);
    char byte[4096];
    ssize_t n;
    while ((n = recv(fd, byte, sizeof byte, 0)) > 0) {
    }
    cut = n == 0 || errno != EAGAIN;
  }
  close(fd);
  return cut;
}

TEST(PreAuthentication, ADeclaredGibibyteFrameCostsAListenerNoMemoryAndAMemberIsStillServed) {
  SetCredentials({NewSecret(), "ps:0"});
  auto device = DeviceFor("tcp://127.0.0.1:0");
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto listener = (*device)->Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const std::string address = (*listener)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));

  // The listening role: answers every message it gets.
  std::atomic<bool> stop{false};
  std::thread role([&] {
    while (!stop) {
      auto e = (*listener)->Receive(milliseconds(20));
      if (!e.ok()) continue;
      Message reply;
      reply.frames.push_back(Frame::Copy("re", 2));
      (void)(*listener)->Send(e->from, std::move(reply));
    }
  });
  // A member, before and after.
  SetIdentity("worker:0");
  auto member = (*device)->Connect(address);
  ASSERT_TRUE(member.ok()) << member.status().ToString();
  auto ask = [&] {
    Message m;
    m.frames.push_back(Frame::Copy("hi", 2));
    if (!(*member)->Send(std::move(m)).ok()) return false;
    auto reply = (*member)->Receive(milliseconds(20000));
    return reply.ok() && reply->frames[0].ToString() == "re";
  };
  ASSERT_TRUE(ask());

  auto resident = [] { return static_cast<int64_t>(ResourceUsage::CurrentRssBytes()); };
  const int64_t before = resident();
  ASSERT_GT(before, 0);
  std::atomic<int64_t> peak{before};
  std::atomic<bool> attacking{true};
  std::thread sampler([&] {
    while (attacking) {
      peak = std::max<int64_t>(peak, resident());
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  constexpr int kConnections = 3;
  constexpr size_t kStreamed = size_t{48} << 20;  // per connection: 144 MiB in all
  std::vector<std::thread> strangers;
  std::atomic<int> cut{0};
  for (int i = 0; i < kConnections; ++i) {
    strangers.emplace_back([&] {
      if (StreamDeclaredCommandFrame(port, uint64_t{1} << 30, kStreamed)) ++cut;
    });
  }
  for (auto& t : strangers) t.join();
  peak = std::max<int64_t>(peak, resident());
  attacking = false;
  sampler.join();

  std::printf(
      "resident memory: +%.1f MiB while %d strangers each declared 1 GiB and streamed %zu MiB\n",
      static_cast<double>(peak - before) / (1 << 20), kConnections, kStreamed >> 20);
  EXPECT_EQ(cut.load(), kConnections) << "every stranger's connection is cut";
  EXPECT_LT(peak - before, int64_t{64} << 20)
      << "resident memory grew by " << (peak - before) / (1 << 20) << " MiB";
  EXPECT_TRUE(ask()) << "a member is served after the strangers";
  stop = true;
  role.join();
}

}  // namespace
}  // namespace een::transport
