// semantics_train: a user's own model, for the training-semantics test: an
// embedding, BatchNorm, dropout, a frozen layer and a layer the forward pass
// never uses. Each worker writes every parameter and buffer it ends with
// (raw float32, named_parameters then named_buffers order) to OUT.rank-R.bin.
//   --reference: one process, the global batch of the live workers, torch's
//     SGD (needs --no-bn and --no-dropout: the maths then allows equality).
//   --rank-seed: every rank builds its model from another seed (rank 0's
//     values must win, frozen ones included).
//   --short-rank R --short-steps N: rank R runs only N steps, then Finish()es
//     (uneven data); the reference drops it from step N on.
//   --buffers broadcast|average|local.
//   --skip-backward-at S: a buggy loop that calls Step() without backward().
//   --short-exits: the short rank exits 0 without Finish() instead.
//   --schedule: the learning rate halves every 10 steps (torch's StepLR in the
//     reference, DataParallel::set_learning_rate in the job); --momentum M.
//   --accumulate K: each step is K micro-batches (K-1 backward passes inside
//     no_sync(), loss / K each); the reference takes the K micro-batches at once.
//   --clip-after-backward: a loop that clips .grad between backward() and Step().
//   --clip MAX: the mean gradient clipped to global norm MAX before each step
//     (torch::nn::utils::clip_grad_norm_ in the reference, the servers'
//     OptimizerConfig::WithClipGradNorm in the job); each rank prints how
//     many steps were clipped.
//   --nan-at S: rank 0's loss is NaN at step S (a diverging model).
//   --report-nan-loss: Step() is given a NaN loss (the gradients are fine).
//   --stall-rank R --stall-at S: rank R stops at step S in the program's own
//     code (a hung data loader): its heartbeats go on, its gradients never come.
//     With --stall-until F it goes on once file F exists (a test's gate).
//   --mismatch-rank R: rank R builds another model (fc1 33 wide, not 32).
// Worker r's batch at step s is samples (s*W + r)*b ... +b (mod n): the
// reference can take the union of the live workers' batches.
#include <een/data_parallel.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

namespace {

constexpr int64_t kSamples = 2048, kTokens = 4, kVocab = 50, kFeatures = 12;

struct Net : torch::nn::Module {
  Net(bool bn, double dropout, int hidden = 32)
      : embed(register_module("embed", torch::nn::Embedding(kVocab, 8))),
        fc1(register_module("fc1", torch::nn::Linear(8 + kFeatures, hidden))),
        frozen(register_module("frozen", torch::nn::Linear(hidden, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 4))),
        unused(register_module("unused", torch::nn::Linear(4, 4))),
        drop(register_module("drop", torch::nn::Dropout(dropout))) {
    if (bn) norm = register_module("norm", torch::nn::BatchNorm1d(hidden));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor tokens, torch::Tensor features) {
    auto x = torch::cat({embed->forward(tokens).mean(1), features}, 1);
    x = fc1->forward(x);
    if (norm) x = norm->forward(x);
    x = drop->forward(torch::relu(x));
    return fc2->forward(torch::tanh(frozen->forward(x)));
  }
  torch::nn::Embedding embed;
  torch::nn::Linear fc1, frozen, fc2, unused;
  torch::nn::Dropout drop;
  torch::nn::BatchNorm1d norm{nullptr};
};

void Save(Net& net, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  auto write = [&](const torch::Tensor& t) {
    auto f = t.detach().to(torch::kFloat).contiguous();
    out.write(reinterpret_cast<const char*>(f.data_ptr<float>()), f.numel() * sizeof(float));
  };
  for (const auto& p : net.parameters()) write(p);
  for (const auto& b : net.buffers()) write(b);
}

struct Data {
  torch::Tensor tokens, features, labels;
  // Worker `rank`'s batch of step `step` among `workers`.
  torch::Tensor Batch(int64_t step, int rank, int workers, int64_t batch) const {
    const int64_t first = (step * workers + rank) * batch;
    return torch::arange(first, first + batch, torch::kLong).remainder(kSamples);
  }
};

torch::Tensor Loss(Net& net, const Data& d, const torch::Tensor& idx) {
  return torch::nn::functional::cross_entropy(
      net.forward(d.tokens.index_select(0, idx), d.features.index_select(0, idx)),
      d.labels.index_select(0, idx));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"semantics_train"};
  std::string out, buffers = "broadcast";
  bool reference = false, rank_seed = false, no_bn = false, no_dropout = false,
       report_nan_loss = false;
  int workers = 4, steps = 30, short_rank = -1, short_steps = -1, skip_backward_at = -1;
  int stall_rank = -1, stall_at = -1;
  int64_t batch = 16;
  double lr = 0.1;
  app.add_option("--out", out)->required();
  app.add_flag("--reference", reference);
  app.add_flag("--rank-seed", rank_seed);
  app.add_flag("--no-bn", no_bn);
  app.add_flag("--no-dropout", no_dropout);
  app.add_option("--buffers", buffers)->check(CLI::IsMember({"broadcast", "average", "local"}));
  app.add_option("--workers", workers, "workers the reference stands for");
  app.add_option("--steps", steps);
  app.add_option("--batch", batch);
  app.add_option("--lr", lr);
  app.add_option("--short-rank", short_rank);
  app.add_option("--short-steps", short_steps);
  bool print_and_wait = false, short_exits = false;
  app.add_flag("--short-exits", short_exits,
               "the short rank exits 0 at once, without Finish() (std::_Exit)");
  app.add_flag("--print-and-wait", print_and_wait,
               "print 'epoch 2' with stdio (no flush) and wait a minute: does the line show?");
  int mismatch_rank = -1, accumulate = 1, nan_at = -1;
  app.add_option("--nan-at", nan_at, "rank 0's loss is NaN at this step");
  app.add_flag("--report-nan-loss", report_nan_loss, "Step() is told the loss is NaN");
  bool schedule = false, clip_after_backward = false;
  double momentum = 0, clip = 0;
  app.add_option("--clip", clip, "max global norm of the mean gradient");
  app.add_flag("--schedule", schedule, "halve the learning rate every 10 steps");
  app.add_option("--momentum", momentum);
  app.add_option("--accumulate", accumulate, "micro-batches per step")->check(CLI::PositiveNumber);
  app.add_flag("--clip-after-backward", clip_after_backward);
  app.add_option("--mismatch-rank", mismatch_rank, "this rank builds a wider fc1 (a bug)");
  app.add_option("--stall-rank", stall_rank, "this rank hangs in its own code...");
  app.add_option("--stall-at", stall_at, "...at this step");
  std::string stall_until;
  app.add_option("--stall-until", stall_until, "...until this file exists (default: for ever)");
  app.add_option("--skip-backward-at", skip_backward_at,
                 "a buggy loop: no backward() at this step");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  if (print_and_wait) {
    std::printf("epoch 2\n");
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }

  torch::manual_seed(1234);  // the data: the same everywhere
  Data data{torch::randint(0, kVocab, {kSamples, kTokens}, torch::kLong),
            torch::randn({kSamples, kFeatures}), torch::randint(0, 4, {kSamples}, torch::kLong)};
  const char* rank_env = std::getenv("EEN_RANK");
  const int env_rank = rank_env ? std::atoi(rank_env) : 0;
  torch::manual_seed(rank_seed ? 7 + env_rank : 7);
  auto net =
      std::make_shared<Net>(!no_bn, no_dropout ? 0.0 : 0.2, env_rank == mismatch_rank ? 33 : 32);
  try {
    if (reference) {
      torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
      torch::optim::StepLR scheduler(opt, 10, 0.5);
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<torch::Tensor> parts;
        for (int r = 0; r < workers; ++r) {
          if (r == short_rank && s >= short_steps) continue;  // it left the job
          parts.push_back(data.Batch(s, r, workers, batch * accumulate));
        }
        opt.zero_grad();
        Loss(*net, data, torch::cat(parts)).backward();
        if (clip > 0) torch::nn::utils::clip_grad_norm_(net->parameters(), clip);
        opt.step();
        if (schedule) scheduler.step();
      }
      Save(*net, out + ".reference.bin");
      return 0;
    }
    een::DataParallelOptions options;
    options.optimizer = een::OptimizerConfig::SGD(lr, momentum).WithClipGradNorm(clip);
    options.bucket_bytes = 2048;  // several buckets
    options.buffers = buffers == "broadcast" ? een::BufferSync::kBroadcast
                      : buffers == "average" ? een::BufferSync::kAverage
                                             : een::BufferSync::kLocal;
    een::DataParallel dp(*net, options);
    // A torch scheduler drives the PS's learning rate: it steps a stand-in
    // optimizer, and each step's value goes to set_learning_rate().
    torch::optim::SGD stand_in(
        std::vector<torch::Tensor>{torch::zeros({1}, torch::requires_grad())},
        torch::optim::SGDOptions(lr));
    torch::optim::StepLR scheduler(stand_in, 10, 0.5);
    const int mine = dp.rank() == short_rank ? short_steps : steps;
    int clipped = 0;
    while (true) {
      try {
        for (int64_t s = dp.step(); s < mine; ++s) {
          if (dp.rank() == stall_rank && s == stall_at) {
            std::printf("rank %d hangs at step %lld\n", stall_rank, static_cast<long long>(s));
            std::fflush(stdout);
            if (stall_until.empty()) {
              while (true) pause();  // until een-launch stops it
            }
            while (!std::filesystem::exists(stall_until)) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
          }
          if (schedule) dp.set_learning_rate(stand_in.param_groups()[0].options().get_lr());
          net->zero_grad();
          const auto all = data.Batch(s, dp.rank(), dp.world_size(), batch * accumulate);
          {
            auto guard = dp.no_sync();  // micro-batches 0..K-2 stay in .grad
            for (int k = 0; k + 1 < accumulate; ++k) {
              (Loss(*net, data, all.slice(0, k * batch, (k + 1) * batch)) / accumulate).backward();
            }
          }
          auto loss = Loss(*net, data, all.slice(0, (accumulate - 1) * batch, accumulate * batch)) /
                      accumulate;
          if (s == nan_at && dp.rank() == 0) loss = loss * std::nan("");
          if (s != skip_backward_at) loss.backward();
          if (clip_after_backward) torch::nn::utils::clip_grad_norm_(net->parameters(), 0.01);
          dp.Step(report_nan_loss ? std::nan("") : loss.item<double>(), batch * accumulate);
          if (clip > 0 && dp.grad_norm() > clip) clipped++;
          if (clip > 0 && dp.rank() == 0 && s % 10 == 0)
            std::printf("step %lld grad norm %.4f\n", (long long)s, dp.grad_norm());
          if (schedule) scheduler.step();
        }
        if (short_exits && dp.rank() == short_rank) {
          std::printf("rank %d exits after step %llu without Finish()\n", dp.rank(),
                      static_cast<unsigned long long>(dp.step()));
          std::fflush(stdout);
          std::_Exit(0);
        }
        break;
      } catch (const een::RolledBack& back) {
        std::printf("rolled back to step %llu\n", static_cast<unsigned long long>(back.step()));
      }
    }
    std::printf("rank %d done after step %llu\n", dp.rank(),
                static_cast<unsigned long long>(dp.step()));
    if (clip > 0) std::printf("rank %d clipped %d steps\n", dp.rank(), clipped);
    std::fflush(stdout);
    dp.Finish();
    Save(*net, out + ".rank-" + std::to_string(dp.rank()) + ".bin");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "semantics_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
