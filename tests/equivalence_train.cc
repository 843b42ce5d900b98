// equivalence_train: the same 20 training steps two ways, for the
// equivalence test.
//   under een-launch: W workers, batch b each, server optimizer (or, sum, the
//   mean gradient and torch::optim::SGD on each worker);
//   with --reference: one process, batch W*b over the same samples,
//   torch::optim. Under een-launch --resume it continues from the
//   snapshot's step. Both write the final parameters (raw float32, in
//   named_parameters order) to --out.
//   --join-after FILE: a worker joins the job only once FILE exists (a test
//   acts on the job's start-up meanwhile).
//   --checkpoint PREFIX --save-at K: under een-launch, before step K, rank 0
//   writes DataParallel::CopyStateTo's torch optimizer and the module with torch::save to
//   PREFIX.optimizer and PREFIX.model; with --reference, training starts
//   there instead, at step K, from torch::load of both files.
//   --load PREFIX: under een-launch, the job starts from such a checkpoint
//   (torch::load of both, then DataParallel::LoadStateFrom).
#include <een/data_parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

namespace {

struct Mlp : torch::nn::Module {
  Mlp()
      : fc1(register_module("fc1", torch::nn::Linear(20, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 32))),
        fc3(register_module("fc3", torch::nn::Linear(32, 4))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc3->forward(torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};

void Save(Mlp& net, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : net.parameters()) {
    auto t = p.detach().to(torch::kCPU, torch::kFloat).contiguous();
    out.write(reinterpret_cast<const char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"equivalence_train"};
  std::string optimizer = "sgd", out;
  bool reference = false;
  int workers = 4, batch = 8, steps = 20;
  app.add_option("--optimizer", optimizer, "sum: the PS only averages, torch's SGD steps here")
      ->check(CLI::IsMember({"sgd", "adam", "sum"}));
  app.add_option("--out", out)->required();
  app.add_flag("--reference", reference, "single process, global batch, torch::optim");
  app.add_option("--workers", workers, "workers the reference stands for");
  app.add_option("--batch", batch, "per-worker batch");
  app.add_option("--steps", steps);
  int stall_rank = -1, stall_step = -1, stall_ms = 0;  // a slow worker, for the stall report
  app.add_option("--stall-rank", stall_rank);
  app.add_option("--stall-step", stall_step);
  app.add_option("--stall-ms", stall_ms);
  std::string stall_until;  // the stall lasts until this file exists (a test's gate)
  app.add_option("--stall-until", stall_until);
  int slow_rank = -1, slow_ms = 0;  // a straggler: this worker sleeps before every step
  app.add_option("--slow-rank", slow_rank);
  app.add_option("--slow-ms", slow_ms);
  std::string device = "cpu";  // "cuda": the model and data on the GPU (bench/gpu/run.sh)
  app.add_option("--device", device, "where the model trains (cpu, cuda, cuda:1, ...)");
  std::string join_after;
  app.add_option("--join-after", join_after, "create DataParallel once this file exists");
  std::string checkpoint;
  int save_at = 0;
  app.add_option("--checkpoint", checkpoint, "PREFIX of a checkpoint to write (job) or read");
  app.add_option("--save-at", save_at, "the step the checkpoint holds");
  std::string load;
  app.add_option("--load", load,
                 "under een-launch: PREFIX of a checkpoint the job starts from (LoadStateFrom)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);

  // Synthetic, fixed data: the same on every process.
  torch::manual_seed(1234);
  const int64_t n = 4096;
  const torch::Device dev(device);
  auto x = torch::randn({n, 20}).to(dev);
  auto y = torch::randint(0, 4, {n}, torch::kLong).to(dev);
  torch::manual_seed(7);
  auto net = std::make_shared<Mlp>();
  net->to(dev);
  const auto config = optimizer == "sgd"   ? een::OptimizerConfig::SGD(0.1, 0.9)
                      : optimizer == "sum" ? een::OptimizerConfig::Sum()
                                           : een::OptimizerConfig::Adam(1e-2);
  // torch's optimizer of that kind; `lr` < 0: the config's.
  auto torch_optimizer = [&](double lr) -> std::unique_ptr<torch::optim::Optimizer> {
    if (optimizer == "sgd" || optimizer == "sum") {
      return std::make_unique<torch::optim::SGD>(
          net->parameters(), torch::optim::SGDOptions(lr < 0 ? 0.1 : lr).momentum(0.9));
    }
    return std::make_unique<torch::optim::Adam>(net->parameters(),
                                                torch::optim::AdamOptions(lr < 0 ? 1e-2 : lr));
  };
  try {
    if (reference) {
      een::DistributedSampler all(n, 0, 1, true, 3);
      std::unique_ptr<torch::optim::Optimizer> opt = torch_optimizer(-1);
      int64_t first = 0;
      if (!checkpoint.empty()) {  // plain LibTorch, on from the job's checkpoint
        // LibTorch's load restores the state, not the options (as of 1.13):
        // the program makes its optimizer with its hyper-parameters.
        opt = torch_optimizer(-1);
        torch::load(net, checkpoint + ".model");
        torch::load(*opt, checkpoint + ".optimizer");
        first = save_at;
      }
      const int64_t global = int64_t{workers} * batch;
      const int64_t per_epoch = n / global;
      std::vector<size_t> order;
      for (int64_t s = first; s < steps; ++s) {
        if (order.empty() || s % per_epoch == 0) {
          all.set_epoch(s / per_epoch);
          order = all.permutation();
        }
        const int64_t at = (s % per_epoch) * global;
        std::vector<int64_t> idx(order.begin() + at, order.begin() + at + global);
        auto take = torch::tensor(idx, torch::kLong).to(dev);
        opt->zero_grad();
        torch::nn::functional::cross_entropy(net->forward(x.index_select(0, take)),
                                             y.index_select(0, take))
            .backward();
        opt->step();
      }
    } else {
      een::DataParallelOptions options;
      options.optimizer = config;
      options.bucket_bytes = 4096;  // several buckets, pushed during backward
      while (!join_after.empty() && !std::filesystem::exists(join_after)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the test's gate
      }
      een::DataParallel dp(*net, options);
      if (!load.empty()) {  // as a LibTorch program resumes: module and optimizer from files
        auto state = torch_optimizer(-1);
        torch::load(net, load + ".model");
        torch::load(*state, load + ".optimizer");
        const bool loaded = dp.LoadStateFrom(*state);
        std::printf("checkpoint loaded: %s, at step %llu\n", loaded ? "true" : "false",
                    static_cast<unsigned long long>(dp.step()));
      }
      std::unique_ptr<torch::optim::SGD> own;  // sum mode: .grad holds the mean after Step()
      if (optimizer == "sum") {
        own = std::make_unique<torch::optim::SGD>(net->parameters(),
                                                  torch::optim::SGDOptions(0.1).momentum(0.9));
      }
      een::DistributedSampler sampler(n, dp.rank(), dp.world_size(), true, 3);
      const int64_t per_epoch = static_cast<int64_t>(sampler.num_samples()) / batch;
      std::vector<size_t> mine;
      // Starts at dp.step(): 0, or the snapshot's step after `een-launch --resume`
      // or after a lost PS rolled the job back.
      while (true) {
        try {
          for (int64_t s = dp.step(); s < steps; ++s) {
            if (mine.empty() || s % per_epoch == 0) {
              sampler.set_epoch(s / per_epoch);
              mine = sampler.indices();
            }
            if (dp.rank() == stall_rank && s == stall_step) {
              std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
              if (!stall_until.empty()) {
                std::cout << "worker " << dp.rank() << " holds at step " << s << " until "
                          << stall_until << " exists" << std::endl;
                const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
                while (!std::filesystem::exists(stall_until) &&
                       std::chrono::steady_clock::now() < give_up) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(10));
                }
              }
            }
            if (dp.rank() == slow_rank) {
              std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
            }
            if (!checkpoint.empty() && s == save_at) {
              auto state = torch_optimizer(5.0);  // CopyStateTo sets the job's learning rate
              dp.CopyStateTo(*state);
              if (dp.rank() == 0) {
                torch::save(net, checkpoint + ".model");
                torch::save(*state, checkpoint + ".optimizer");
                std::printf("checkpoint of step %lld written\n", static_cast<long long>(s));
              }
            }
            const int64_t at = (s % per_epoch) * batch;
            std::vector<int64_t> idx(mine.begin() + at, mine.begin() + at + batch);
            auto take = torch::tensor(idx, torch::kLong).to(dev);
            net->zero_grad();
            auto loss = torch::nn::functional::cross_entropy(net->forward(x.index_select(0, take)),
                                                             y.index_select(0, take));
            loss.backward();
            dp.Step(loss.item<double>(), batch);
            if (own) own->step();
          }
          break;
        } catch (const een::RolledBack& back) {
          std::printf("rolled back to step %llu\n", static_cast<unsigned long long>(back.step()));
          mine.clear();
        }
      }
      dp.Barrier();
      if (dp.rank() == 0) Save(*net, out);
      dp.Finish();
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "equivalence_train: %s\n", e.what());
    return 1;
  }
  Save(*net, out);
  return 0;
}
