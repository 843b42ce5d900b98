// first_values_loser: worker 0 of tests/equivalence_train.cc's model that
// joins the job and dies (SIGKILL) before it sends the initial values, for
// tests/role_loss_test.cc: a job whose worker 0 was lost at that moment
// must still start, from its replacement's values. It registers the same
// tensors and optimizer as equivalence_train --optimizer adam (its Mlp:
// Linear 20-64, 64-32, 32-4), with the environment een-launch gives a worker.
#include <csignal>
#include <cstdio>
#include <vector>

#include "common/job_env.h"
#include "common/shard_map.h"
#include "common/transport/auth.h"
#include "een/optimizer.h"
#include "worker/worker_client.h"

int main() {
  auto env = een::JobEnvironment::FromProcess("first_values_loser");
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().message().c_str());
    return 2;
  }
  if (auto s = een::AuthenticateAs(een::transport::WorkerIdentity(env->rank), "first_values_loser");
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  std::vector<een::TensorInfo> tensors;
  const int64_t widths[] = {20, 64, 32, 4};
  for (int layer = 0; layer < 3; ++layer) {
    const int64_t in = widths[layer], out = widths[layer + 1];
    const std::string name = "fc" + std::to_string(layer + 1);
    tensors.push_back({name + ".weight",
                       static_cast<uint64_t>(in * out),
                       een::TensorKind::kParameter,
                       {out, in}});
    tensors.push_back(
        {name + ".bias", static_cast<uint64_t>(out), een::TensorKind::kParameter, {out}});
  }
  auto joined = een::WorkerClient::Join(*env, tensors, een::OptimizerConfig::Adam(1e-2));
  if (!joined.ok()) {
    std::fprintf(stderr, "%s\n", joined.status().message().c_str());
    return 2;
  }
  std::printf("worker %d joined and dies before sending the initial values\n", env->rank);
  std::fflush(stdout);
  std::raise(SIGKILL);
  return 1;
}
