// One transport suite, run over every backend: ZeroMQ tcp, ZeroMQ ipc,
// shared memory and the in-process backend; then what only shared memory does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>

#include "common/transport/registry.h"
#include "common/transport/shm/shm_device.h"
#include "common/transport/shm/shm_manifest.h"
#include "common/transport/shm/shm_memory.h"
#include "common/transport/zmq/zmq_parts.h"
#include "support/subprocess.h"

namespace een::transport {
namespace {

using std::chrono::milliseconds;

std::string TestAddress(const std::string& scheme) {
  static int n = 0;
  const std::string unique = std::to_string(getpid()) + "-" + std::to_string(++n);
  if (scheme == "tcp") return "tcp://127.0.0.1:0";
  if (scheme == "ipc") return "ipc:///tmp/een-transport-test-" + unique + ".sock";
  if (scheme == "shm") return "shm:///tmp/een-transport-test-" + unique + ".sock";
  return "mem://transport-test-" + unique;
}

Message Make(const std::string& header, std::vector<Frame> payloads = {}) {
  Message m;
  m.frames.push_back(Frame::Copy(header.data(), header.size()));
  for (auto& p : payloads) m.frames.push_back(std::move(p));
  return m;
}

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto d = DeviceFor(TestAddress(GetParam()));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = *d;
    auto l = device_->Listen(TestAddress(GetParam()));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
  }
  std::unique_ptr<Connection> Connect() {
    auto c = device_->Connect(listener_->address());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  }

  Device* device_ = nullptr;
  std::unique_ptr<Listener> listener_;
};

TEST_P(TransportTest, RequestAndReplyKeepFramesApart) {
  auto conn = Connect();
  std::string payload(1000, 'x');
  ASSERT_TRUE(
      conn->Send(Make("hello", {Frame::Copy(payload.data(), payload.size()), Frame::Copy("", 0)}))
          .ok());
  auto got = listener_->Receive(milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->message.frames.size(), 3u);
  EXPECT_EQ(got->message.frames[0].ToString(), "hello");
  EXPECT_EQ(got->message.frames[1].ToString(), payload);
  EXPECT_EQ(got->message.frames[2].size(), 0u);
  ASSERT_TRUE(listener_->Send(got->from, Make("world")).ok());
  auto reply = conn->Receive(milliseconds(5000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->frames[0].ToString(), "world");
}

TEST_P(TransportTest, LargeBorrowedPayloadArrivesIntact) {
  auto conn = Connect();
  auto data = std::make_shared<std::vector<float>>(4 << 20);  // 16 MiB
  std::iota(data->begin(), data->end(), 0.0f);
  ASSERT_TRUE(conn->Send(Make("big", {Frame::Borrow(data->data(), data->size() * 4, data)})).ok());
  auto got = listener_->Receive(milliseconds(10000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->message.payload_count(), 1u);
  const Frame& f = got->message.payload(0);
  ASSERT_EQ(f.size(), data->size() * 4);
  EXPECT_EQ(0, std::memcmp(f.data(), data->data(), f.size()));
}

// ZeroMQ moves a frame of kMaxPart bytes or more as parts (zmq_parts.h):
// each size around a part's edge arrives whole, in its place, on every backend.
TEST_P(TransportTest, FramesOnEitherSideOfAPartsEdgeArriveIntact) {
  auto conn = Connect();
  const std::vector<size_t> sizes = {0, kMaxPart - 1,     kMaxPart, kMaxPart + 1, 7, 2 * kMaxPart,
                                     0, 3 * kMaxPart + 5, kMaxPart, 256};
  std::vector<Frame> payloads;
  for (size_t k = 0; k < sizes.size(); ++k) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(sizes[k]);
    for (size_t i = 0; i < bytes->size(); ++i) bytes->at(i) = static_cast<uint8_t>(i * 31 + k);
    payloads.push_back(Frame::Borrow(bytes->data(), bytes->size(), bytes));
  }
  ASSERT_TRUE(conn->Send(Make("edges", payloads)).ok());
  auto got = listener_->Receive(milliseconds(10000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->message.payload_count(), sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    const Frame& f = got->message.payload(k);
    ASSERT_EQ(f.size(), sizes[k]) << "frame " << k;
    EXPECT_EQ(0, f.size() == 0 ? 0 : std::memcmp(f.data(), payloads[k].data(), f.size()))
        << "frame " << k;
  }
  // And back, from the listener.
  ASSERT_TRUE(listener_->Send(got->from, Make("back", {payloads[3], payloads[5]})).ok());
  auto reply = conn->Receive(milliseconds(10000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(reply->payload_count(), 2u);
  EXPECT_EQ(reply->payload(0).size(), kMaxPart + 1);
  EXPECT_EQ(0, std::memcmp(reply->payload(1).data(), payloads[5].data(), 2 * kMaxPart));
}

TEST_P(TransportTest, RepliesReachTheRightPeer) {
  std::vector<std::unique_ptr<Connection>> conns;
  for (int i = 0; i < 5; ++i) {
    conns.push_back(Connect());
    ASSERT_TRUE(conns.back()->Send(Make(std::to_string(i))).ok());
  }
  for (int i = 0; i < 5; ++i) {
    auto got = listener_->Receive(milliseconds(5000));
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(listener_->Send(got->from, Make("re:" + got->message.frames[0].ToString())).ok());
  }
  for (int i = 0; i < 5; ++i) {
    auto reply = conns[i]->Receive(milliseconds(5000));
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->frames[0].ToString(), "re:" + std::to_string(i));
  }
}

TEST_P(TransportTest, ReceiveTimesOutWithDeadlineExceeded) {
  auto conn = Connect();
  auto start = std::chrono::steady_clock::now();
  auto got = listener_->Receive(milliseconds(50));
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(40));
  EXPECT_EQ(conn->Receive(milliseconds(10)).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_P(TransportTest, SendToUnknownPeerIsUnavailable) {
  Status s = listener_->Send("no-such-peer", Make("x"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST_P(TransportTest, ManyMessagesInOrderFromOnePeer) {
  auto conn = Connect();
  std::thread sender([&] {
    for (int i = 0; i < 2000; ++i) ASSERT_TRUE(conn->Send(Make(std::to_string(i))).ok());
  });
  for (int i = 0; i < 2000; ++i) {
    auto got = listener_->Receive(milliseconds(5000));
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->message.frames[0].ToString(), std::to_string(i));
  }
  sender.join();
}

TEST_P(TransportTest, MemoryRegistrationCoversTheRange) {
  std::vector<char> buf(1 << 16);
  auto region = device_->RegisterMemory(buf.data(), buf.size());
  ASSERT_TRUE(region.ok());
  EXPECT_TRUE(region->contains(buf.data() + 100, 1000));
  EXPECT_FALSE(region->contains(buf.data() + buf.size() - 10, 100));
}

// Device::Allocate: whole pages, zero-filled, registered; frames from it
// arrive intact on every backend.
TEST_P(TransportTest, AllocatedMemoryIsZeroedWholePagesAndSentIntact) {
  auto memory = device_->Allocate(100000, "test");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GE(memory->size(), 100000u);
  EXPECT_EQ(memory->size() % page, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory->data()) % page, 0u);
  EXPECT_TRUE(memory->region().contains(memory->data(), memory->size()));
  auto* bytes = static_cast<unsigned char*>(memory->data());
  EXPECT_EQ(std::count(bytes, bytes + memory->size(), 0), static_cast<long>(memory->size()));
  std::iota(bytes, bytes + 100000, 0);
  auto conn = Connect();
  ASSERT_TRUE(conn->Send(Make("a", {Frame::Borrow(bytes, 100000, nullptr)})).ok());
  auto got = listener_->Receive(milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->message.payload(0).size(), 100000u);
  EXPECT_EQ(std::memcmp(got->message.payload(0).data(), bytes, 100000), 0);
  EXPECT_EQ(device_->Allocate(SIZE_MAX - 1, "test").status().code(),
            StatusCode::kResourceExhausted);
}

// The registry alone names the backends: which a user may choose, and
// where a process of each listens.
TEST(TransportRegistry, NamesTheBackendsAndWhereEachListens) {
  EXPECT_TRUE(CheckTransport("shm", "transport", false).ok());
  const Status udp = CheckTransport("udp", "transport", false);
  EXPECT_EQ(udp.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(udp.message(), "transport 'udp' is not one of tcp, ipc, shm, auto");
  EXPECT_TRUE(CheckTransport("auto", "transport", false).ok());
  EXPECT_EQ(ListenAddresses("auto", "10.0.0.2", "/run/j", "ps-1-7"),
            (std::vector<std::string>{"tcp://10.0.0.2:0", "shm:///run/j/een-ps-1-7.sock"}));
  EXPECT_EQ(ListenAddresses("ipc", "h", "/run/j", "ps-1-7"),
            (std::vector<std::string>{"ipc:///run/j/een-ps-1-7.sock"}));
  EXPECT_FALSE(CheckTransport("mem", "transport", false).ok());  // in-process: tests only
  EXPECT_TRUE(CheckTransport("mem", "EEN_DATA_TRANSPORT", true).ok());
  EXPECT_EQ(ListenAddress("tcp", "10.0.0.2", "/run/j", "ps-1-7"), "tcp://10.0.0.2:0");
  EXPECT_EQ(ListenAddress("ipc", "h", "/run/j", "ps-1-7"), "ipc:///run/j/een-ps-1-7.sock");
  EXPECT_EQ(ListenAddress("shm", "h", "/run/j", "ps-1-7"), "shm:///run/j/een-ps-1-7.sock");
  EXPECT_EQ(ListenAddress("mem", "h", "run", "ps-1-7"), "mem://run/ps-1-7");
  EXPECT_NE(DescribeHardware().find("RDMA"), std::string::npos);
}

// A PS listening per pair ("auto"): peers of other hosts on tcp, of its own
// host on shm; each is answered the way it came, and a shm peer's large
// frame still arrives through shared memory (read in place, not copied
// through the socket) while a tcp peer's arrives whole.
TEST(TransportListenerSet, EachPeerIsAnsweredTheWayItCame) {
  auto set = ListenOnAll({TestAddress("tcp"), TestAddress("shm")});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  Listener& listener = **set;
  EXPECT_EQ(listener.address().rfind("tcp://127.0.0.1:", 0), 0u) << listener.address();
  auto tcp = (*DeviceFor(listener.address()))->Connect(listener.address());
  ASSERT_TRUE(tcp.ok());
  std::vector<float> big(1 << 18, 2.5f);  // 1 MiB: shm sends it through a block
  ASSERT_TRUE(
      (*tcp)->Send(Make("from tcp", {Frame::Borrow(big.data(), big.size() * 4, nullptr)})).ok());
  auto got = listener.Receive(milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->message.frames[0].ToString(), "from tcp");
  ASSERT_EQ(got->message.payload(0).size(), big.size() * 4);
  EXPECT_EQ(reinterpret_cast<const float*>(got->message.payload(0).data())[1000], 2.5f);
  ASSERT_TRUE(listener.Send(got->from, Make("to tcp")).ok());
  auto reply = (*tcp)->Receive(milliseconds(5000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->frames[0].ToString(), "to tcp");
  // Nothing waits: a receive times out as a single listener's does.
  EXPECT_EQ(listener.Receive(milliseconds(50)).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(TransportListenerSet, SharedMemoryPeersOfTheSetAreServedToo) {
  const std::string tcp_address = TestAddress("tcp");
  const std::string shm_address = TestAddress("shm");
  auto set = ListenOnAll({tcp_address, shm_address});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  auto shm = (*DeviceFor(shm_address))->Connect(shm_address);
  auto tcp = (*DeviceFor((*set)->address()))->Connect((*set)->address());
  ASSERT_TRUE(shm.ok() && tcp.ok());
  // Interleaved, from both: every message arrives, answered to its sender.
  for (int i = 0; i < 20; ++i) {
    Connection& c = i % 2 ? **shm : **tcp;
    ASSERT_TRUE(c.Send(Make(std::to_string(i))).ok());
  }
  for (int i = 0; i < 20; ++i) {
    auto got = (*set)->Receive(milliseconds(5000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE((*set)->Send(got->from, Make("re " + got->message.frames[0].ToString())).ok());
  }
  std::vector<int> via_shm, via_tcp;
  for (int i = 0; i < 10; ++i) {
    for (auto* c : {&*shm, &*tcp}) {
      auto r = (**c).Receive(milliseconds(5000));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      (c == &*shm ? via_shm : via_tcp).push_back(std::stoi(r->frames[0].ToString().substr(3)));
    }
  }
  std::sort(via_shm.begin(), via_shm.end());
  std::sort(via_tcp.begin(), via_tcp.end());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(via_shm[i], 2 * i + 1);
    EXPECT_EQ(via_tcp[i], 2 * i);
  }
  EXPECT_FALSE((*set)->Send("\x07nobody", Make("x")).ok());
  EXPECT_EQ(ListenOnAll({TestAddress("tcp"), TestAddress("mem")}).status().code(),
            StatusCode::kInvalidArgument);
}

// What a peer's parts can make of a message (zmq_parts.h): whole frames,
// or a refusal, never a frame cut short or one over kMaxFrame.
TEST(FrameParts, APeersPartsMakeWholeFramesOrTheMessageIsRefused) {
  auto big = std::make_shared<std::vector<uint8_t>>(kMaxPart, 7);
  const Frame full = Frame::Borrow(big->data(), big->size(), big);
  const Frame small = Frame::Copy("abc", 3);
  {
    FrameAssembler a;
    std::vector<Frame> frames;
    for (const Frame& f : {small, full, full, small, Frame::Copy("", 0)}) a.Add(f, &frames);
    ASSERT_TRUE(a.Finish().ok());
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].ToString(), "abc");
    EXPECT_EQ(frames[1].size(), 2 * kMaxPart + 3);
    EXPECT_EQ(frames[1].ToString().substr(2 * kMaxPart), "abc");
    EXPECT_EQ(frames[2].size(), 0u);
  }
  {  // the message ends inside a frame
    FrameAssembler a;
    std::vector<Frame> frames;
    a.Add(small, &frames);
    a.Add(full, &frames);
    Status s = a.Finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ended inside a frame"), std::string::npos) << s.ToString();
  }
  {  // parts that would make a frame over kMaxFrame: refused at once, the rest only consumed
    FrameAssembler a;
    std::vector<Frame> frames;
    const size_t parts = kMaxFrame / kMaxPart + 2;
    for (size_t i = 0; i < parts; ++i) a.Add(full, &frames);
    a.Add(small, &frames);
    Status s = a.Finish();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("frame of over"), std::string::npos) << s.ToString();
    EXPECT_TRUE(frames.empty());
  }
  EXPECT_EQ(PartsOf(0), 1u);
  EXPECT_EQ(PartsOf(kMaxPart - 1), 1u);
  EXPECT_EQ(PartsOf(kMaxPart), 2u);
  EXPECT_EQ(PartsOf(2 * kMaxPart + 1), 3u);
}

TEST(TransportAddress, UnknownSchemeIsRejected) {
  auto d = DeviceFor("udp://127.0.0.1:5");
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("tcp://"), std::string::npos);
}

// A shm listener and a connection to it: what the shared-memory tests below send over.
struct ShmLink {
  Device* device = nullptr;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> conn;
};

void OpenShmLink(ShmLink* link) {
  auto device = DeviceFor("shm:///x");
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  link->device = *device;
  auto listener = link->device->Listen(TestAddress("shm"));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  link->listener = std::move(listener).value();
  auto conn = link->device->Connect(link->listener->address());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  link->conn = std::move(conn).value();
}

// This process's shared-memory blocks (the sender's), as files in /dev/shm.
int OwnBlocks() {
  const std::string prefix = "een-" + std::to_string(getpid()) + "-";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  }
  return n;
}

// A block goes back to its sender when the receiver drops the frame: a
// steady exchange reuses the same blocks instead of making new ones.
TEST(SharedMemory, BlocksAreReusedOnceTheReceiverDropsTheFrame) {
  ShmLink link;
  ASSERT_NO_FATAL_FAILURE(OpenShmLink(&link));
  const int before = OwnBlocks();
  auto data = std::make_shared<std::vector<float>>(1 << 18, 2.5f);  // 1 MiB
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(link.conn->Send(Make("g", {Frame::Borrow(data->data(), 1 << 20, data)})).ok());
    auto got = link.listener->Receive(milliseconds(5000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->message.payload(0).size(), 1u << 20);
    EXPECT_EQ(reinterpret_cast<const float*>(got->message.payload(0).data())[1000], 2.5f);
  }
  EXPECT_EQ(OwnBlocks() - before, 1);
  // A frame still held keeps its block: the next send takes another.
  ASSERT_TRUE(link.conn->Send(Make("g", {Frame::Borrow(data->data(), 1 << 20, data)})).ok());
  auto held = link.listener->Receive(milliseconds(5000));
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(link.conn->Send(Make("g", {Frame::Borrow(data->data(), 1 << 20, data)})).ok());
  ASSERT_TRUE(link.listener->Receive(milliseconds(5000)).ok());
  EXPECT_EQ(OwnBlocks() - before, 2);
}

// Registered shared memory (a PS arena, a worker's gradient buckets) is
// sent in place: the receiver reads the sender's bytes, and no block is made.
TEST(SharedMemory, RegisteredSharedMemoryIsSentWithoutACopy) {
  ShmLink link;
  ASSERT_NO_FATAL_FAILURE(OpenShmLink(&link));
  auto memory = SharedMemory::Create(4 << 20, "test");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  auto region = link.device->RegisterMemory((*memory)->data(), (*memory)->size());
  ASSERT_TRUE(region.ok());
  float* values = static_cast<float*>((*memory)->data());
  std::iota(values, values + (1 << 20), 0.0f);
  const int before = OwnBlocks();
  // 1 MiB from 256 KiB into the region.
  ASSERT_TRUE(
      link.conn->Send(Make("v", {Frame::Borrow(values + (1 << 16), 1 << 20, nullptr)})).ok());
  auto got = link.listener->Receive(milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Frame& f = got->message.payload(0);
  ASSERT_EQ(f.size(), 1u << 20);
  EXPECT_EQ(reinterpret_cast<const float*>(f.data())[0], float(1 << 16));
  values[(1 << 16) + 5] = -1.0f;  // in place: the receiver sees the sender's memory
  EXPECT_EQ(reinterpret_cast<const float*>(f.data())[5], -1.0f);
  EXPECT_EQ(OwnBlocks(), before);
}

// What Device::Allocate gives on shared memory (PS arenas, gradient
// buckets) is a /dev/shm block sent in place, with no block made per send.
TEST(SharedMemory, AllocatedMemoryIsSentWithoutACopy) {
  ShmLink link;
  ASSERT_NO_FATAL_FAILURE(OpenShmLink(&link));
  const int before = OwnBlocks();
  auto memory = link.device->Allocate(4 << 20, "test");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_EQ(OwnBlocks(), before + 1);  // the allocation itself is a /dev/shm file
  float* values = static_cast<float*>(memory->data());
  std::iota(values, values + (1 << 20), 0.0f);
  ASSERT_TRUE(link.conn->Send(Make("v", {Frame::Borrow(values, 1 << 20, nullptr)})).ok());
  auto got = link.listener->Receive(milliseconds(5000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  values[7] = -1.0f;  // in place: the receiver sees the sender's memory
  EXPECT_EQ(reinterpret_cast<const float*>(got->message.payload(0).data())[7], -1.0f);
  EXPECT_EQ(OwnBlocks(), before + 1);
  *memory = RegisteredMemory();  // unlinked with the memory
  EXPECT_EQ(OwnBlocks(), before);
}

// A frame the listener makes (a PS's collective result) lies in one of its
// blocks: it goes to every peer without a copy and without a block per
// send, and its block is free again once the maker and every receiver let go.
TEST(SharedMemory, AListenersNewFrameGoesToEveryPeerInOneBlock) {
  ShmDevice device;  // its own blocks: none of the other tests' is free for it
  ShmLink link;
  link.device = &device;
  auto listener = device.Listen(TestAddress("shm"));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  link.listener = std::move(listener).value();
  auto first = device.Connect(link.listener->address());
  auto second = device.Connect(link.listener->address());
  ASSERT_TRUE(first.ok() && second.ok());
  link.conn = std::move(first).value();
  std::vector<PeerId> peers;
  for (Connection* c : {link.conn.get(), second->get()}) {
    ASSERT_TRUE(c->Send(Make("hello")).ok());
    auto got = link.listener->Receive(milliseconds(5000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    peers.push_back(got->from);
  }
  EXPECT_TRUE(link.listener->sends_new_frames_in_place());
  const int before = OwnBlocks();
  constexpr size_t kBytes = 1 << 20;
  auto made = link.listener->NewFrame(kBytes);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::iota(reinterpret_cast<float*>(made->data), reinterpret_cast<float*>(made->data) + kBytes / 4,
            0.0f);
  for (const PeerId& to : peers) {
    ASSERT_TRUE(link.listener->Send(to, Make("sum", {made->frame})).ok());
  }
  EXPECT_EQ(OwnBlocks(), before + 1);  // the one block the frame was made in
  std::vector<Frame> received;
  for (Connection* c : {link.conn.get(), second->get()}) {
    auto got = c->Receive(milliseconds(5000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->payload(0).size(), kBytes);
    EXPECT_EQ(reinterpret_cast<const float*>(got->payload(0).data())[12345], 12345.0f);
    received.push_back(got->payload(0));
  }
  EXPECT_EQ(received[0].data(), received[1].data());  // both read the one block in place
  // The maker let go and one receiver still holds it: a new frame needs a new block.
  *made = WritableFrame();
  received.pop_back();
  auto other = link.listener->NewFrame(kBytes);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(OwnBlocks(), before + 2);
  // No one holds the first block now: the next frame is made in it.
  received.clear();
  auto third = link.listener->NewFrame(kBytes);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(OwnBlocks(), before + 2);
}

// Found by fuzz_shm_manifest: a sender naming its registered region (mapped
// read-only) as a block made the receiver write the block's in-use flag
// through the read-only mapping (SIGSEGV). Refused now, either way round.
TEST(SharedMemory, ASegmentNamedAsARegionAndThenAsABlockIsRefused) {
  auto memory = SharedMemory::Create(1 << 16, "test");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  const std::string name = (*memory)->name();
  auto manifest = [&](uint8_t kind) {
    std::vector<std::byte> m;
    auto put = [&](const void* p, size_t n) {
      m.insert(m.end(), static_cast<const std::byte*>(p), static_cast<const std::byte*>(p) + n);
    };
    const uint32_t magic = 0x53454E45, count = 2;
    const uint8_t inline_kind = 0, len = static_cast<uint8_t>(name.size());
    const uint64_t offset = 0, size = 128;
    put(&magic, 4);
    put(&count, 4);
    put(&inline_kind, 1);
    put(&kind, 1);
    put(&len, 1);
    put(name.data(), len);
    if (kind == 2) put(&offset, 8);
    put(&size, 8);
    return std::vector<Frame>{Frame::Copy("header..", 8), Frame(), Frame::Own(std::move(m))};
  };
  shm::Mappings mappings;
  auto as_region = manifest(2);
  ASSERT_TRUE(shm::Unpack(mappings, as_region).ok());
  auto as_block = manifest(1);
  Status s = shm::Unpack(mappings, as_block);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("named as a region before and now as a block"), std::string::npos)
      << s.ToString();
}

// Found by fuzz_shm_manifest: a name with a NUL after a real segment's name
// opened that segment (shm_open stops at the NUL) but was kept as a new
// mapping, one per such name, until mmap failed. Refused now.
TEST(SharedMemory, ANameWithANulIsRefusedNotMappedAgain) {
  auto memory = SharedMemory::Create(1 << 16, "test");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  const std::string name = (*memory)->name();
  shm::Mappings mappings;
  auto first = mappings.Get(name, false);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  for (const std::string& alias : {name + std::string(1, '\0') + "x", name + "/x", name + "\n"}) {
    auto again = mappings.Get(alias, false);
    EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument) << again.status().ToString();
    EXPECT_NE(again.status().message().find("was not made by this job"), std::string::npos)
        << again.status().ToString();
  }
  auto same = mappings.Get(name, false);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->get(), first->get());
}

// A full /dev/shm is an error with a message at allocation (never a SIGBUS
// later): checked in a mount namespace of this test's own with a 2 MiB
// /dev/shm (needs root for unshare/mount; skipped otherwise).
TEST(SharedMemory, FullShmFailsWithAMessage) {
  if (std::getenv("EEN_TEST_IN_SMALL_SHM")) {
    auto big = SharedMemory::Create(8 << 20, "test");
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(big.status().message().find("/dev/shm full"), std::string::npos)
        << big.status().ToString();
    auto device = DeviceFor("shm:///x");
    auto listener = (*device)->Listen(TestAddress("shm"));
    ASSERT_TRUE(listener.ok());
    auto conn = (*device)->Connect((*listener)->address());
    auto data = std::make_shared<std::vector<float>>(1 << 20);  // 4 MiB: no block fits
    Status s = (*conn)->Send(Make("g", {Frame::Borrow(data->data(), 4 << 20, data)}));
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    return;
  }
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  auto r =
      testing::Run({"unshare", "-m", "sh", "-c",
                    "mount -t tmpfs -o size=2m tmpfs /dev/shm && exec " + std::string(self, n) +
                        " --gtest_filter=SharedMemory.FullShmFailsWithAMessage"},
                   std::chrono::seconds(30), {{"EEN_TEST_IN_SMALL_SHM", "1"}});
  if (r.output.find("unshare failed") != std::string::npos ||
      r.output.find("mount:") != std::string::npos) {
    GTEST_SKIP() << "no mount namespace here: " << r.output;
  }
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
}

// A peer that is not a shared-memory endpoint (plain ipc on the same path)
// is refused with a message, not misread.
TEST(SharedMemory, MessageWithoutManifestIsRefused) {
  const std::string address = TestAddress("shm");
  auto listener = (*DeviceFor(address))->Listen(address);
  ASSERT_TRUE(listener.ok());
  const std::string ipc = "ipc://" + address.substr(6);
  auto plain = (*DeviceFor(ipc))->Connect(ipc);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE((*plain)->Send(Make("hello")).ok());
  auto got = (*listener)->Receive(milliseconds(5000));
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << got.status().ToString();
  EXPECT_NE(got.status().message().find("manifest"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest, ::testing::Values("tcp", "ipc", "shm", "mem"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace een::transport
