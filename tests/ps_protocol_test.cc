// The PS protocol over the in-process transport: BSP aggregation, sum mode,
// validation of every kind of bad message, model mismatch, and a lost PS.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <thread>

#include "common/transport/registry.h"
#include "common/wire.h"
#include "support/inproc_cluster.h"
#include "worker/worker_messages.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using testing::InProcessCluster;
using transport::Frame;
using transport::Message;

const std::vector<TensorInfo> kModel = {{"w", 10000}, {"b", 10}};

// Pushes `fill` as every chunk's gradient (or initial value).
Status PushAll(WorkerClient& w, wire::PushKind kind, uint64_t step, float fill) {
  auto buf = std::make_shared<std::vector<float>>(w.map().TotalNumel(), fill);
  std::vector<uint32_t> chunks;
  std::vector<const float*> data;
  size_t at = 0;
  for (uint32_t c = 0; c < w.map().chunks().size(); ++c) {
    chunks.push_back(c);
    data.push_back(buf->data() + at);
    at += w.map().chunks()[c].numel;
  }
  return w.Push(kind, step, chunks, data, buf);
}

// Pulls every chunk; returns all values in chunk order.
Result<std::vector<float>> PullAll(WorkerClient& w, uint64_t version, bool gradients = false) {
  std::vector<float> out;
  std::vector<std::vector<float>> by_chunk(w.map().chunks().size());
  Status s = w.Pull(version, gradients, [&](uint32_t c) {
    by_chunk[c].resize(w.map().chunks()[c].numel);
    return by_chunk[c].data();
  });
  if (!s.ok()) return s;
  for (auto& c : by_chunk) out.insert(out.end(), c.begin(), c.end());
  return out;
}

std::vector<std::unique_ptr<WorkerClient>> JoinOrDie(InProcessCluster& cluster, int workers,
                                                     const OptimizerConfig& opt) {
  std::vector<std::unique_ptr<WorkerClient>> out;
  for (auto& r : cluster.JoinAll(std::vector<std::vector<TensorInfo>>(workers, kModel), opt)) {
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) out.push_back(std::move(r).value());
  }
  return out;
}

void ExpectAll(const std::vector<float>& values, float expected) {
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_FLOAT_EQ(values[i], expected) << "element " << i;
  }
}

TEST(PsProtocol, BspStepAveragesThenAppliesTheOptimizerOnce) {
  InProcessCluster cluster(2, 2);
  auto workers = JoinOrDie(cluster, 2, OptimizerConfig::SGD(0.5));
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::INITIAL, 0, 1.0f).ok());
  for (auto& w : workers) {
    auto v = PullAll(*w, 0);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectAll(*v, 1.0f);
  }
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::GRADIENT, 0, 1.0f).ok());
  ASSERT_TRUE(PushAll(*workers[1], wire::PushKind::GRADIENT, 0, 2.0f).ok());
  for (auto& w : workers) {
    auto v = PullAll(*w, 1);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectAll(*v, 1.0f - 0.5f * 1.5f);  // mean gradient 1.5
  }
}

// bf16 on the wire: gradients are rounded as torch rounds them, the PS
// averages and applies in fp32 on its fp32 master values, and the pulled
// values are those master values rounded to bf16.
TEST(PsProtocol, Bf16WireKeepsFp32MasterValues) {
  InProcessCluster cluster(2, 2);
  cluster.set_worker_wire_type(WireType::kBF16);
  auto workers = JoinOrDie(cluster, 2, OptimizerConfig::SGD(0.5));
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::INITIAL, 0, 1.0f).ok());
  ASSERT_TRUE(PullAll(*workers[1], 0).ok());
  float master = 1.0f;
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::GRADIENT, step, 1.01f).ok());
    ASSERT_TRUE(PushAll(*workers[1], wire::PushKind::GRADIENT, step, 2.0f).ok());
    const float mean = (Bf16ToFloat(FloatToBf16(1.01f)) + 2.0f) / 2.0f;
    master = master + -0.5f * mean;
    for (auto& w : workers) {
      auto v = PullAll(*w, step + 1);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      for (float x : *v) ASSERT_EQ(x, Bf16ToFloat(FloatToBf16(master))) << "step " << step;
    }
  }
  // The master values kept fp32 precision: bf16 would have lost it.
  EXPECT_NE(master, Bf16ToFloat(FloatToBf16(master)));
}

TEST(PsProtocol, SumModeReturnsTheMeanGradient) {
  InProcessCluster cluster(2, 2);
  auto workers = JoinOrDie(cluster, 2, OptimizerConfig::Sum());
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::INITIAL, 0, 3.0f).ok());
  ASSERT_TRUE(PullAll(*workers[1], 0).ok());
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::GRADIENT, 0, 1.0f).ok());
  ASSERT_TRUE(PushAll(*workers[1], wire::PushKind::GRADIENT, 0, 4.0f).ok());
  auto g = PullAll(*workers[1], 1, /*gradients=*/true);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectAll(*g, 2.5f);
}

TEST(PsProtocol, DuplicatePushIsAppliedOnce) {
  InProcessCluster cluster(1, 2);
  auto workers = JoinOrDie(cluster, 2, OptimizerConfig::SGD(1.0));
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::INITIAL, 0, 0.0f).ok());
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::GRADIENT, 0, 2.0f).ok());
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::GRADIENT, 0, 100.0f).ok());  // retried
  ASSERT_TRUE(PushAll(*workers[1], wire::PushKind::GRADIENT, 0, 4.0f).ok());
  auto v = PullAll(*workers[1], 1);
  ASSERT_TRUE(v.ok());
  ExpectAll(*v, -3.0f);
  // A late duplicate of step 0 after the step completed changes nothing either.
  ASSERT_TRUE(PushAll(*workers[1], wire::PushKind::GRADIENT, 0, 50.0f).ok());
  auto again = PullAll(*workers[0], 1);
  ASSERT_TRUE(again.ok());
  ExpectAll(*again, -3.0f);
}

// Speaks raw bytes to PS 0 and checks the answers.
class BadMessages : public ::testing::Test {
 protected:
  void SetUp() override {
    workers_ = JoinOrDie(cluster_, 1, OptimizerConfig::SGD(1.0));
    ASSERT_EQ(workers_.size(), 1u);
    ASSERT_TRUE(PushAll(*workers_[0], wire::PushKind::INITIAL, 0, 1.0f).ok());
    const std::string address = workers_[0]->map().ps_addresses()[0];
    raw_ = (*transport::DeviceFor(address))->Connect(address).value();
    owned_ = workers_[0]->map().ChunksOwnedBy(0);
    ASSERT_FALSE(owned_.empty());
  }

  Message Push(uint64_t epoch, int worker, std::vector<uint32_t> chunks,
               std::vector<size_t> payload_bytes, wire::DType dtype = wire::DType::F32) {
    capnp::MallocMessageBuilder b;
    auto p = b.initRoot<wire::Header>().initPush();
    p.setEpoch(epoch);
    p.setWorker(worker);
    p.setStep(0);
    p.setDtype(dtype);
    auto list = p.initChunks(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) list.set(i, chunks[i]);
    Message m{{wire::Encode(b)}};
    for (size_t bytes : payload_bytes) {
      std::vector<std::byte> zeros(bytes);
      m.frames.push_back(Frame::Own(std::move(zeros)));
    }
    return m;
  }
  size_t Bytes(uint32_t chunk) { return workers_[0]->map().chunks()[chunk].numel * 4; }

  // The error code the PS answers `m` with.
  std::optional<wire::ErrorCode> Answer(Message m) {
    EXPECT_TRUE(raw_->Send(std::move(m)).ok());
    auto reply = raw_->Receive(milliseconds(3000));
    if (!reply.ok()) return std::nullopt;
    std::optional<wire::ErrorCode> code;
    EXPECT_TRUE(wire::Visit(*reply, [&](wire::Header::Reader h) {
                  if (h.isError()) code = h.getError().getCode();
                  return Status::Ok();
                }).ok());
    return code;
  }

  // After whatever was sent, a real step still computes the right values.
  void ExpectStillCorrect() {
    ASSERT_TRUE(PushAll(*workers_[0], wire::PushKind::GRADIENT, 0, 0.25f).ok());
    auto v = PullAll(*workers_[0], 1);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectAll(*v, 0.75f);
  }

  InProcessCluster cluster_{2, 1};
  std::vector<std::unique_ptr<WorkerClient>> workers_;
  std::unique_ptr<transport::Connection> raw_;
  std::vector<uint32_t> owned_;
};

TEST_F(BadMessages, EachIsRefusedWithAnErrorAndChangesNothing) {
  const uint32_t c = owned_[0];
  const uint64_t epoch = workers_[0]->map().epoch();
  EXPECT_EQ(Answer(Push(epoch - 1, 0, {c}, {Bytes(c)})), wire::ErrorCode::STALE_EPOCH);
  EXPECT_EQ(Answer(Push(epoch, 7, {c}, {Bytes(c)})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, -1, {c}, {Bytes(c)})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {c}, {Bytes(c) - 4})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {c}, {Bytes(c) + 4})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {c}, {})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {c}, {Bytes(c), 16})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {c, c}, {Bytes(c), Bytes(c)})),
            wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {999999}, {16})), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Push(epoch, 0, {c}, {Bytes(c)}, wire::DType::BF16)),
            wire::ErrorCode::INVALID_ARGUMENT);
  // A chunk held by the other PS.
  auto other = workers_[0]->map().ChunksOwnedBy(1);
  if (!other.empty()) {
    EXPECT_EQ(Answer(Push(epoch, 0, {other[0]}, {Bytes(other[0])})),
              wire::ErrorCode::INVALID_ARGUMENT);
  }
  // A valid message that is not for a PS.
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::Header>().setDone(0);
  EXPECT_EQ(Answer(Message{{wire::Encode(b)}}), wire::ErrorCode::INVALID_ARGUMENT);
  ExpectStillCorrect();
}

// A worker that heard nothing for a while asks again (worker_client.cc,
// kAskAgainAfter): a pull the PS still holds is answered once, when ready;
// one it never got (lost on the way) is answered as a new one.
TEST_F(BadMessages, APullAskedAgainIsAnsweredOnceAndALostOneIsAnswered) {
  const uint64_t epoch = workers_[0]->map().epoch();
  auto pull = [&](uint64_t id, bool again) {
    return worker_messages::Pull(
        {.epoch = epoch, .min_version = 1, .worker = 0, .request_id = id, .again = again}, owned_);
  };
  auto answered = [&](milliseconds within) -> std::optional<uint64_t> {
    auto reply = raw_->Receive(within);
    if (!reply.ok()) return std::nullopt;
    std::optional<uint64_t> id;
    EXPECT_TRUE(wire::Visit(*reply, [&](wire::Header::Reader h) {
                  EXPECT_TRUE(h.isPullReply()) << "an error or another answer";
                  if (h.isPullReply()) id = h.getPullReply().getRequestId();
                  return Status::Ok();
                }).ok());
    return id;
  };
  // Step 0 has not run: both wait; the second is the first asked again.
  ASSERT_TRUE(raw_->Send(pull(77, false)).ok());
  ASSERT_TRUE(raw_->Send(pull(77, true)).ok());
  ASSERT_TRUE(PushAll(*workers_[0], wire::PushKind::GRADIENT, 0, 0.25f).ok());
  EXPECT_EQ(answered(milliseconds(5000)), 77u);
  EXPECT_EQ(answered(milliseconds(300)), std::nullopt) << "answered twice";
  // Asked again, never received: answered at once.
  ASSERT_TRUE(raw_->Send(pull(78, true)).ok());
  EXPECT_EQ(answered(milliseconds(5000)), 78u);
}

TEST_F(BadMessages, MalformedHeadersAreRefused) {
  // Truncated: a real header cut short.
  capnp::MallocMessageBuilder b;
  auto p = b.initRoot<wire::Header>().initPush();
  p.initChunks(3);
  Frame whole = wire::Encode(b);
  Message truncated{{Frame::Copy(whole.data(), whole.size() / 2 / 8 * 8)}};
  EXPECT_EQ(Answer(std::move(truncated)), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Message{{Frame::Copy("abc", 3)}}), wire::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(Answer(Message{{Frame()}}), wire::ErrorCode::INVALID_ARGUMENT);
  ExpectStillCorrect();
}

TEST_F(BadMessages, RandomBytesNeverCrashThePs) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const size_t frames = 1 + rng() % 4;
    Message m;
    for (size_t f = 0; f < frames; ++f) {
      std::vector<std::byte> bytes((rng() % 20) * 8 + (f == 0 ? 8 : rng() % 8));
      for (auto& x : bytes) x = std::byte(rng());
      m.frames.push_back(Frame::Own(std::move(bytes)));
    }
    auto code = Answer(std::move(m));
    ASSERT_TRUE(code.has_value()) << "message " << i << " got no error answer";
  }
  ExpectStillCorrect();
}

// Metrics are for people: a heartbeat with bad ones (a NaN counter) is
// still a heartbeat, answered with the job's state (before, the whole
// heartbeat was refused: no shutdown or abort could reach that process).
TEST(Coordinator, AHeartbeatWithBadMetricsIsStillAnswered) {
  InProcessCluster cluster(1, 1);
  auto workers = JoinOrDie(cluster, 1, OptimizerConfig::SGD(0.1));
  ASSERT_EQ(workers.size(), 1u);
  const std::string address = cluster.coordinator_address();
  auto raw = (*transport::DeviceFor(address))->Connect(address).value();
  capnp::MallocMessageBuilder b;
  auto header = b.initRoot<wire::Header>();
  wire::SetSender(header, wire::Role::WORKER, 0);
  auto hb = header.initHeartbeat();
  hb.setRole(wire::Role::WORKER);
  hb.setRank(0);
  hb.setPid(getpid());
  auto m = hb.initMetrics(1);
  m[0].setName("worker.pushes");
  m[0].setValue(std::nan(""));
  m[0].setCounter(true);
  ASSERT_TRUE(raw->Send(Message{{wire::Encode(b)}}).ok());
  auto reply = raw->Receive(milliseconds(5000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  bool answered = false;
  ASSERT_TRUE(wire::Visit(*reply, [&](wire::Header::Reader h) {
                EXPECT_FALSE(h.isError()) << h.getError().getMessage().cStr();
                answered = h.isHeartbeatReply() &&
                           h.getHeartbeatReply().getState() == wire::JobState::RUNNING;
                return Status::Ok();
              }).ok());
  EXPECT_TRUE(answered);
}

// A worker that claims a batch near 2^64 (lying or broken) is refused; the
// count does not wrap back to epoch 0's batches, and dealing goes on.
TEST(Coordinator, ABatchClaimBeyondAnyDatasetIsRefusedAndDealingGoesOn) {
  InProcessCluster cluster(1, 1);
  auto workers = JoinOrDie(cluster, 1, OptimizerConfig::SGD(0.1));
  ASSERT_EQ(workers.size(), 1u);
  auto first = workers[0]->ClaimBatch(0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 0u);
  for (uint64_t lie : {UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 62}) {
    auto refused = workers[0]->ClaimBatch(1, lie);
    ASSERT_FALSE(refused.ok()) << "dealt " << *refused << " from " << lie;
    EXPECT_NE(refused.status().message().find("beyond any dataset"), std::string::npos)
        << refused.status().ToString();
  }
  auto next = workers[0]->ClaimBatch(1, 5);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 5u);
  auto after = workers[0]->ClaimBatch(2);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, 6u);
}

TEST(Coordinator, RefusesAWorkerWithADifferentModelAndEndsTheJob) {
  InProcessCluster cluster(1, 2);
  const auto start = std::chrono::steady_clock::now();
  auto results = cluster.JoinAll({kModel, {{"w", 10000}, {"b", 11}}}, OptimizerConfig::SGD(0.1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000)) << "no fast verdict";
  for (auto& r : results) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("model mismatch at tensor 1: worker 0 has parameter 'b' "
                                        "of 10 elements; worker 1 has parameter 'b' of 11 "
                                        "elements"),
              std::string::npos)
        << r.status().ToString();
  }
  auto verdict = cluster.CoordinatorResult(milliseconds(5000));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->code(), StatusCode::kAborted);
}

TEST(Coordinator, LostPsEndsTheJobWithItsName) {
  InProcessCluster cluster(2, 1, milliseconds(300));
  auto workers = JoinOrDie(cluster, 1, OptimizerConfig::SGD(0.1));
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_TRUE(PushAll(*workers[0], wire::PushKind::INITIAL, 0, 1.0f).ok());
  ASSERT_TRUE(PullAll(*workers[0], 0).ok());
  const auto start = std::chrono::steady_clock::now();
  cluster.StopPs(1);
  // The step can never complete (the push to PS 1 may already fail: nothing
  // listens there in-process); the worker must be told why.
  Status step = PushAll(*workers[0], wire::PushKind::GRADIENT, 0, 1.0f);
  if (step.ok()) step = PullAll(*workers[0], 1).status();
  EXPECT_FALSE(step.ok());
  Status job = workers[0]->JobStatus();
  for (int i = 0; i < 300 && job.ok(); ++i) {  // the abort arrives with the next heartbeat
    std::this_thread::sleep_for(milliseconds(10));
    job = workers[0]->JobStatus();
  }
  EXPECT_EQ(job.code(), StatusCode::kAborted);
  EXPECT_NE(job.message().find("ps 1"), std::string::npos) << job.ToString();
  auto verdict = cluster.CoordinatorResult(milliseconds(5000));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->code(), StatusCode::kAborted);
  EXPECT_NE(verdict->message().find("ps 1"), std::string::npos) << verdict->ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
}

}  // namespace
}  // namespace een
