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
//   --mismatch-rank R: rank R builds another model (fc1 33 wide, not 32).
// Worker r's batch at step s is samples (s*W + r)*b ... +b (mod n): the
// reference can take the union of the live workers' batches.
#include <een/data_parallel.h>

#include <CLI/CLI.hpp>
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
  bool reference = false, rank_seed = false, no_bn = false, no_dropout = false;
  int workers = 4, steps = 30, short_rank = -1, short_steps = -1, skip_backward_at = -1;
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
  int mismatch_rank = -1;
  app.add_option("--mismatch-rank", mismatch_rank, "this rank builds a wider fc1 (a bug)");
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
      torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr));
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<torch::Tensor> parts;
        for (int r = 0; r < workers; ++r) {
          if (r == short_rank && s >= short_steps) continue;  // it left the job
          parts.push_back(data.Batch(s, r, workers, batch));
        }
        opt.zero_grad();
        Loss(*net, data, torch::cat(parts)).backward();
        opt.step();
      }
      Save(*net, out + ".reference.bin");
      return 0;
    }
    een::DataParallelOptions options;
    options.optimizer = een::OptimizerConfig::SGD(lr);
    options.bucket_bytes = 2048;  // several buckets
    options.buffers = buffers == "broadcast" ? een::BufferSync::kBroadcast
                      : buffers == "average" ? een::BufferSync::kAverage
                                             : een::BufferSync::kLocal;
    een::DataParallel dp(*net, options);
    const int mine = dp.rank() == short_rank ? short_steps : steps;
    while (true) {
      try {
        for (int64_t s = dp.step(); s < mine; ++s) {
          net->zero_grad();
          auto loss = Loss(*net, data, data.Batch(s, dp.rank(), dp.world_size(), batch));
          if (s != skip_backward_at) loss.backward();
          dp.Step(loss.item<double>(), batch);
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
    std::fflush(stdout);
    dp.Finish();
    Save(*net, out + ".rank-" + std::to_string(dp.rank()) + ".bin");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "semantics_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
