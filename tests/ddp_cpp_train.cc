// ddp_cpp_train: DDP's way in a C++ LibTorch program, in an een-launch job,
// on the een process group (een/process_group.h) or on gloo. DDP's own core,
// c10d::Reducer, cannot be built against Debian's libtorch-dev (its header
// needs torch/csrc/distributed/autograd/, which the package does not ship),
// so this program does what the Reducer does: rank 0's parameters broadcast
// (c10d::broadcast_coalesced, as DDP's constructor), then each step the
// gradients gathered into buckets in reverse parameter order (as DDP's
// first buckets), each bucket allreduced asynchronously as soon as backward
// filled it (gradient hooks), all waited for through their futures, divided
// by the world size and copied back. Rank 0 writes the final parameters
// (float32, in order) to --out.
//   ddp_cpp_train --backend een|gloo [--optimizer sgd|adam] [--steps N] --out PATH
// It reads torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), which een-launch sets, and the c10d store een-launch hosts.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include "een/process_group.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "ddp_cpp_train: %s is not set (run it under een-launch)\n", name);
    std::exit(2);
  }
  return v;
}

c10::intrusive_ptr<c10d::ProcessGroup> Group(const std::string& backend, int rank, int world) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(std::stoi(Env("MASTER_PORT")));
  options.isServer = false;
  options.numWorkers = world;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(120);
  auto store = c10::make_intrusive<c10d::PrefixStore>(
      "ddp_cpp_train", c10::make_intrusive<c10d::TCPStore>(Env("MASTER_ADDR"), options));
  if (backend == "een") return een::ProcessGroup::Create(store, rank, world, options.timeout);
  auto gloo = c10d::ProcessGroupGloo::Options::create();
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo);
}

// DDP's gradient synchronisation for `params`: buckets of at most
// `bucket_bytes`, in reverse parameter order, each allreduced once backward
// produced all of its gradients; Finish() waits for them and sets every
// parameter's gradient to the mean.
class GradientBuckets {
 public:
  GradientBuckets(std::vector<at::Tensor> params, c10::intrusive_ptr<c10d::ProcessGroup> group,
                  int64_t bucket_bytes)
      : params_(std::move(params)), group_(std::move(group)), bucket_of_(params_.size()) {
    int64_t bytes = 0;
    for (size_t i = params_.size(); i-- > 0;) {
      const int64_t size = params_[i].numel() * params_[i].element_size();
      if (buckets_.empty() || (bytes + size > bucket_bytes && !buckets_.back().members.empty())) {
        buckets_.emplace_back();
        bytes = 0;
      }
      buckets_.back().members.push_back(i);
      bucket_of_[i] = buckets_.size() - 1;
      bytes += size;
    }
    grads_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].register_hook([this, i](const at::Tensor& grad) {
        Ready(i, grad);
        return grad;
      });
    }
  }
  size_t size() const { return buckets_.size(); }

  void Finish() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bucket = buckets_[b];
      if (!bucket.work) throw std::runtime_error("a bucket never filled");
      bucket.work->getFuture()->wait();  // the way DDP's comm hooks wait
      bucket.flat.div_(group_->getSize());
      int64_t at = 0;
      for (size_t i : bucket.members) {
        const int64_t n = params_[i].numel();
        params_[i].mutable_grad() = bucket.flat.narrow(0, at, n).view_as(params_[i]).clone();
        at += n;
      }
      bucket.work.reset();
      bucket.arrived = 0;
    }
  }

 private:
  struct Bucket {
    std::vector<size_t> members;
    size_t arrived = 0;
    at::Tensor flat;
    c10::intrusive_ptr<c10d::Work> work;
  };

  void Ready(size_t i, const at::Tensor& grad) {
    grads_[i] = grad.detach();
    Bucket& bucket = buckets_[bucket_of_[i]];
    if (++bucket.arrived < bucket.members.size()) return;
    std::vector<at::Tensor> parts;
    for (size_t k : bucket.members) parts.push_back(grads_[k].reshape({-1}));
    std::vector<at::Tensor> flat = {torch::cat(parts)};
    bucket.flat = flat[0];
    bucket.work = group_->allreduce(flat);
  }

  std::vector<at::Tensor> params_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<at::Tensor> grads_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DDP's gradient synchronisation from C++ on the een or gloo process group"};
  std::string backend = "een", optimizer_name = "sgd", out;
  int steps = 30;
  app.add_option("--backend", backend)->check(CLI::IsMember({"een", "gloo"}));
  app.add_option("--optimizer", optimizer_name)->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);

  const int rank = std::stoi(Env("RANK")), world = std::stoi(Env("WORLD_SIZE"));
  const c10::intrusive_ptr<c10d::ProcessGroup> group = Group(backend, rank, world);

  // Different on every rank: the constructor's broadcast makes them rank 0's.
  torch::manual_seed(1 + rank);
  torch::nn::Sequential model(torch::nn::Linear(8, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 1));
  std::vector<at::Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p);
  {
    torch::NoGradGuard no_grad;  // written in place, as DDP's constructor does
    c10d::broadcast_coalesced(group, params, size_t{250} << 20, 0);
  }
  GradientBuckets buckets(params, group, 16384);

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_name == "adam") {
    optimizer = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-2));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  }
  // Each rank's own data: y = the sum of x's features, with noise.
  torch::manual_seed(100 + rank);
  const at::Tensor x = torch::randn({32, 8});
  const at::Tensor y = x.sum(1, true) + 0.1 * torch::randn({32, 1});
  double loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    optimizer->zero_grad();
    at::Tensor loss = torch::mse_loss(model->forward(x), y);
    loss.backward();  // each full bucket's allreduce starts inside
    buckets.Finish();
    optimizer->step();
    loss_value = loss.item<double>();
  }
  std::printf("rank %d of %d (%s, %zu buckets): final loss %.6f\n", rank, world, backend.c_str(),
              buckets.size(), loss_value);
  if (rank == 0) {
    std::ofstream file(out, std::ios::binary);
    for (const at::Tensor& p : params) {
      const at::Tensor flat = p.detach().contiguous();
      file.write(reinterpret_cast<const char*>(flat.data_ptr<float>()),
                 static_cast<std::streamsize>(flat.numel() * sizeof(float)));
    }
    if (!file) {
      std::fprintf(stderr, "ddp_cpp_train: cannot write %s\n", out.c_str());
      return 1;
    }
  }
  return 0;
}
