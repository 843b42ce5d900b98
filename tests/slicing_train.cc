// slicing_train: BSP (or ssp:K) training under een-launch --dynamic-slicing auto, for
// tests/slicing_test.cc, and the same steps recomputed in one process.
//   Under een-launch: a small MLP on a fixed synthetic regression set,
//   global batch live_count() * --batch, each worker taking its
//   dp.batch_slice() through DistributedSampler::Slice. Each sample costs
//   --micros-per-sample of sleep (worker --slow-rank: --slow-factor times
//   as much, for its first --slow-steps steps: a slow machine that then
//   recovers). After --steps steps, the workers go on until the shares,
//   which moved, are within 25% of equal again (every worker sees the same
//   shares at the same step, so they stop together; at most --max-steps). Each
//   worker writes its slices ("step offset count" lines) to --out.slices-R
//   and the final parameters (raw float32) to --out.rank-R (under ssp:K,
//   after a barrier, the values every worker's gradients made).
//   --reference: reads the slices of --workers workers and recomputes every
//   step in one process as BSP with those batches: each worker's mean
//   gradient over its slice, weighted by its share of the samples and
//   summed in rank order as the PS does, then plain SGD; writes --out.reference.
#include <een/data_parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace {

constexpr int64_t kDataset = 4096;
constexpr double kLr = 0.05;

struct Mlp : torch::nn::Module {
  Mlp()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

struct Data {
  torch::Tensor x, y;
};

Data MakeData() {
  torch::manual_seed(7);
  Data d;
  d.x = torch::randn({kDataset, 8});
  d.y = d.x.sum(1, true).sin() + 0.1 * torch::randn({kDataset, 1});
  return d;
}

bool g_linear = false;  // --linear

// --linear: a loss whose gradient does not depend on the parameters (each
// parameter's is a mean over the slice's samples), so a run whose
// gradients are applied on stale values in any order (ssp) still ends at
// the values of BSP with the same batches, but for float rounding.
torch::Tensor Loss(Mlp& net, const Data& data, const std::vector<size_t>& indices) {
  std::vector<int64_t> idx(indices.begin(), indices.end());
  auto at = torch::tensor(idx, torch::kLong);
  const torch::Tensor x = data.x.index_select(0, at), y = data.y.index_select(0, at);
  if (g_linear) {
    return net.fc1->forward(x).mean() + (net.fc2->weight.sum() + net.fc2->bias.sum()) * y.mean();
  }
  return torch::mse_loss(net.forward(x), y);
}

void Save(Mlp& net, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : net.parameters()) {
    auto t = p.detach().contiguous();
    out.write(reinterpret_cast<const char*>(t.data_ptr<float>()),
              static_cast<std::streamsize>(t.numel() * sizeof(float)));
  }
}

std::shared_ptr<Mlp> MakeNet() {
  torch::manual_seed(1);
  return std::make_shared<Mlp>();
}

// The sampler's position before step `step` (every step takes `global`
// positions; the dataset is a multiple of it).
een::DistributedSampler& SamplerAt(een::DistributedSampler& sampler, uint64_t step, uint64_t global,
                                   uint64_t* position) {
  const uint64_t first = step * global;
  sampler.set_epoch(first / kDataset);
  *position = first % kDataset;
  return sampler;
}

int Reference(const std::string& out, int workers, int batch) {
  // step -> rank -> (offset, count)
  std::map<uint64_t, std::map<int, std::pair<uint64_t, uint64_t>>> slices;
  for (int r = 0; r < workers; ++r) {
    std::ifstream in(out + ".slices-" + std::to_string(r));
    uint64_t step, offset, count;
    while (in >> step >> offset >> count) slices[step][r] = {offset, count};
  }
  const Data data = MakeData();
  auto net = MakeNet();
  een::DistributedSampler sampler(kDataset, 0, 1);
  const uint64_t global = static_cast<uint64_t>(workers) * batch;
  for (const auto& [step, of_step] : slices) {
    if (static_cast<int>(of_step.size()) != workers) {
      std::fprintf(stderr, "step %llu: slices of %zu workers\n",
                   static_cast<unsigned long long>(step), of_step.size());
      return 1;
    }
    uint64_t position = 0;
    SamplerAt(sampler, step, global, &position);
    std::vector<std::vector<torch::Tensor>> grads;
    std::vector<uint64_t> counts;
    for (const auto& [rank, slice] : of_step) {
      net->zero_grad();
      Loss(*net, data, sampler.Slice(position, slice.first, slice.second)).backward();
      std::vector<torch::Tensor> g;
      for (const auto& p : net->parameters()) g.push_back(p.grad().clone());
      grads.push_back(std::move(g));
      counts.push_back(slice.second);
    }
    // The PS's arithmetic: gradient k times n_k * W / B, summed in rank
    // order, divided by W; then p += -lr * mean (all in float).
    const auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      torch::NoGradGuard no_grad;
      float* p = params[i].data_ptr<float>();
      const int64_t n = params[i].numel();
      std::vector<float> mean(n);
      bool equal = true;
      for (uint64_t c : counts) equal = equal && c == counts[0];
      for (size_t k = 0; k < grads.size(); ++k) {
        const float* g = grads[k][i].data_ptr<float>();
        const float w = equal ? 1.0f
                              : static_cast<float>(static_cast<double>(counts[k]) * workers /
                                                   static_cast<double>(global));
        for (int64_t e = 0; e < n; ++e) mean[e] = k == 0 ? g[e] * w : mean[e] + g[e] * w;
      }
      const float neg_lr = -static_cast<float>(kLr), divisor = static_cast<float>(workers);
      for (int64_t e = 0; e < n; ++e) p[e] = p[e] + neg_lr * (mean[e] / divisor);
    }
  }
  Save(*net, out + ".reference");
  std::printf("reference: %zu steps\n", slices.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"slicing_train"};
  std::string out;
  int steps = 60, max_steps = 1500, batch = 16, slow_rank = -1, slow_steps = 0, workers = 4;
  double micros_per_sample = 200, slow_factor = 1;
  bool reference = false;
  app.add_option("--out", out)->required();
  app.add_option("--steps", steps);
  app.add_option("--max-steps", max_steps);
  app.add_option("--batch", batch, "per worker: the global batch is live_count() * batch");
  app.add_option("--micros-per-sample", micros_per_sample);
  app.add_option("--slow-rank", slow_rank);
  app.add_option("--slow-factor", slow_factor);
  app.add_option("--slow-steps", slow_steps);
  app.add_flag("--reference", reference);
  app.add_flag("--linear", g_linear, "a loss whose gradient does not depend on the parameters");
  app.add_option("--workers", workers, "--reference: how many workers wrote slices");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  if (reference) return Reference(out, workers, batch);
  const Data data = MakeData();
  auto net = MakeNet();
  try {
    een::DataParallelOptions options;
    options.optimizer = een::OptimizerConfig::SGD(kLr);
    een::DataParallel dp(*net, options);
    if (!dp.dynamic_slicing()) std::printf("worker %d: dynamic slicing is off\n", dp.rank());
    een::DistributedSampler sampler(kDataset, dp.rank(), dp.world_size());
    const uint64_t global = static_cast<uint64_t>(dp.live_count()) * batch;
    std::ofstream log(out + ".slices-" + std::to_string(dp.rank()));
    uint64_t smallest = global, largest = 0;
    bool moved = false;
    for (int s = 0; s < max_steps; ++s) {
      const een::DataParallel::BatchSlice slice = dp.batch_slice(batch);
      const std::vector<een::MembershipChange> changes = dp.membership_changes();
      const std::vector<uint32_t> shares =
          changes.empty() ? std::vector<uint32_t>() : changes.back().shares;
      bool near_equal = true;
      for (uint32_t n : shares) {
        moved = moved || n != static_cast<uint32_t>(batch);
        near_equal = near_equal && std::abs(static_cast<double>(n) - batch) <= 0.25 * batch;
      }
      if (s >= steps && moved && near_equal) break;  // the same step on every worker
      smallest = std::min<uint64_t>(smallest, slice.count);
      largest = std::max<uint64_t>(largest, slice.count);
      uint64_t position = 0;
      SamplerAt(sampler, dp.step(), global, &position);
      const auto indices = sampler.Slice(position, slice.offset, slice.count);
      double cost = micros_per_sample * static_cast<double>(slice.count);
      if (dp.rank() == slow_rank && s < slow_steps) cost *= slow_factor;
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(cost)));
      net->zero_grad();
      auto loss = Loss(*net, data, indices);
      loss.backward();
      log << dp.step() << " " << slice.offset << " " << slice.count << "\n";
      dp.Step(loss.item<double>(), static_cast<int64_t>(slice.count));
    }
    log.close();
    if (dp.consistency() != "bsp") {  // every worker's gradients in, then the values they made
      dp.Barrier();
      dp.PullParameters();
    }
    std::printf("worker %d: %llu steps, slices from %llu to %llu samples of %llu\n", dp.rank(),
                static_cast<unsigned long long>(dp.step()),
                static_cast<unsigned long long>(smallest), static_cast<unsigned long long>(largest),
                static_cast<unsigned long long>(global));
    Save(*net, out + ".rank-" + std::to_string(dp.rank()));
    dp.Finish();
  } catch (const een::Error& e) {
    std::fprintf(stderr, "slicing_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
