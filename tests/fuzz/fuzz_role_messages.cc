// Fuzz target: any message, sent to a live PS or to the coordinator of a
// running job (both in this process, over the in-process transport). The
// first input byte picks the receiver (even: PS 0, odd: the coordinator);
// the rest is a message (message_frames.h): a header of any kind and any
// payload frames. Neither may crash or corrupt memory; a message that ends
// the job (a forged `done`, say) is allowed, and the next input meets a new
// job. Logging is off: the roles log every refusal.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

#include "common/transport/registry.h"
#include "fuzz/message_frames.h"
#include "support/inproc_cluster.h"

using namespace een;
using std::chrono::milliseconds;

namespace {

const std::vector<TensorInfo> kModel = {{"w", 1000}, {"b", 10}};

// One PS, one worker that pushed its initial values: the PS is serving.
struct Job {
  testing::InProcessCluster cluster{1, 1};
  std::unique_ptr<WorkerClient> worker;
  std::unique_ptr<transport::Connection> to_ps, to_coordinator;

  bool Start() {
    auto joined = cluster.JoinAll({kModel}, OptimizerConfig::SGD(0.1));
    if (joined.size() != 1 || !joined[0].ok()) return false;
    worker = std::move(joined[0]).value();
    const ShardMap& map = worker->map();
    auto values = std::make_shared<std::vector<float>>(map.TotalNumel(), 1.0f);
    std::vector<uint32_t> chunks;
    std::vector<const float*> data;
    size_t at = 0;
    for (uint32_t c = 0; c < map.chunks().size(); ++c) {
      chunks.push_back(c);
      data.push_back(values->data() + at);
      at += map.chunks()[c].numel;
    }
    if (!worker->Push(wire::PushKind::INITIAL, 0, chunks, data, values).ok()) return false;
    auto connect = [](const std::string& address) -> std::unique_ptr<transport::Connection> {
      auto device = transport::DeviceFor(address);
      if (!device.ok()) return nullptr;
      auto c = (*device)->Connect(address);
      return c.ok() ? std::move(c).value() : nullptr;
    };
    to_ps = connect(map.ps_addresses()[0]);
    to_coordinator = connect(cluster.coordinator_address());
    return to_ps && to_coordinator;
  }
};

std::unique_ptr<Job> g_job;

Job& CurrentJob() {
  while (!g_job || g_job->cluster.CoordinatorEnded()) {
    g_job.reset();
    g_job = std::make_unique<Job>();
    if (!g_job->Start()) g_job.reset();
  }
  return *g_job;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  // The job's threads log: stop them before spdlog's registry goes at exit.
  std::atexit([] { g_job.reset(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Job& job = CurrentJob();
  transport::Connection& to = (data[0] % 2 == 0) ? *job.to_ps : *job.to_coordinator;
  if (!to.Send(fuzz::MessageOf(data + 1, size - 1)).ok()) {
    g_job.reset();  // the receiver is gone (the job ended): the next input gets a new one
    return 0;
  }
  // Most messages are answered (an error for a bad one) at once; a valid
  // pull of a later version waits, and is dropped with the job.
  auto reply = to.Receive(milliseconds(20));
  while (reply.ok()) reply = to.Receive(milliseconds(0));
  return 0;
}
