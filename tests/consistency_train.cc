// consistency_train: a model whose gradient never depends on its values,
// trained under een-launch --consistency ssp:K or async, for
// tests/consistency_test.cc. Every parameter's gradient is exactly 1 each
// step, and with SGD(lr) and N workers each applied gradient moves every
// value by exactly lr/N (powers of two: no rounding). So after each of the
// N workers ran --steps steps, every value is exactly -steps * lr whatever
// order the gradients came in: one lost or applied twice shows.
// --slow-rank R --slow-ms X sleeps X ms before each of worker R's steps;
// --short-rank R --short-by D makes worker R stop D steps early (it then
// waits at the barrier while the others still step: under ssp it must not
// hold them back).
// Each step checks dp.staleness() against --max-staleness (exit 3 when a
// pull broke the bound) and the largest seen is printed. At the end every
// worker waits at a barrier (all gradients are in), takes one step of zero
// gradients (changes nothing) to pull the final values, and writes them to
// --out.rank-R (raw floats) with "final values: V" when all are equal.
// --dealt N: steps while dp.NextBatch() deals batches below N, then
// "worker R dealt D batches" (a coordinator restart must not deal them all
// again).
// It starts at dp.step() (after --resume, each worker's own step) and goes
// on from dp.step() after een::RolledBack (a lost PS with one replica),
// from Step() or from the barrier.
#include <een/data_parallel.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

int main(int argc, char** argv) {
  CLI::App app{"consistency_train"};
  std::string out;
  int steps = 100, slow_rank = -1, slow_ms = 0, numel = 70000, short_rank = -1, short_by = 0;
  uint64_t dealt = 0;
  long max_staleness = -1;
  double lr = 1.0 / 64;
  app.add_option("--out", out)->required();
  app.add_option("--steps", steps);
  app.add_option("--numel", numel, "values per parameter (two parameters)");
  app.add_option("--lr", lr);
  app.add_option("--slow-rank", slow_rank);
  app.add_option("--slow-ms", slow_ms);
  app.add_option("--short-rank", short_rank);
  app.add_option("--short-by", short_by);
  app.add_option("--max-staleness", max_staleness, "exit 3 when a step's staleness exceeds it");
  app.add_option("--dealt", dealt,
                 "instead of --steps: one step per batch dp.NextBatch() deals below this");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  struct Net : torch::nn::Module {
    explicit Net(int n) {
      a = register_parameter("a", torch::zeros({n}));
      b = register_parameter("b", torch::zeros({n / 7 + 1}));
    }
    torch::Tensor a, b;
  };
  auto net = std::make_shared<Net>(numel);
  try {
    een::DataParallelOptions options;
    options.optimizer = een::OptimizerConfig::SGD(lr);
    options.bucket_bytes = 64 << 10;  // several buckets, several chunks
    een::DataParallel dp(*net, options);
    uint64_t largest = 0;
    if (dealt > 0) {  // every worker takes batches until they are all dealt
      uint64_t taken = 0;
      for (uint64_t k; (k = dp.NextBatch()) < dealt; ++taken) {
        net->zero_grad();
        (net->a.sum() + net->b.sum()).backward();
        dp.Step(0.0, 1);
      }
      std::printf("worker %d dealt %llu batches\n", dp.rank(),
                  static_cast<unsigned long long>(taken));
      std::fflush(stdout);
      dp.Finish();
      return 0;
    }
    const uint64_t mine = dp.rank() == short_rank ? steps - short_by : steps;
    // From dp.step(): after --resume each worker takes up at its own step.
    if (dp.step() > 0) {
      std::printf("worker %d takes up at step %llu\n", dp.rank(),
                  static_cast<unsigned long long>(dp.step()));
    }
    // A lost PS with one replica rolls the job back (een::RolledBack from
    // Step() or Barrier()): on again from dp.step().
    for (bool done = false; !done;) {
      try {
        while (dp.step() < mine) {
          if (dp.rank() == slow_rank) {
            std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
          }
          net->zero_grad();
          (net->a.sum() + net->b.sum()).backward();
          dp.Step(0.0, 1);
          largest = std::max(largest, dp.staleness());
          if (max_staleness >= 0 && dp.staleness() > static_cast<uint64_t>(max_staleness)) {
            std::fprintf(stderr, "worker %d: step %llu started %llu steps ahead of the slowest\n",
                         dp.rank(), static_cast<unsigned long long>(dp.step()),
                         static_cast<unsigned long long>(dp.staleness()));
            return 3;
          }
        }
        std::printf("worker %d: %s, largest staleness %llu\n", dp.rank(), dp.consistency().c_str(),
                    static_cast<unsigned long long>(largest));
        std::fflush(stdout);
        dp.Barrier();
        net->zero_grad();
        ((net->a.sum() + net->b.sum()) * 0).backward();
        dp.Step(0.0, 0);
        done = true;
      } catch (const een::RolledBack& back) {
        std::printf("worker %d rolled back to step %llu\n", dp.rank(),
                    static_cast<unsigned long long>(back.step()));
        std::fflush(stdout);
      }
    }
    torch::Tensor all = torch::cat({net->a.detach(), net->b.detach()});
    std::ofstream file(out + ".rank-" + std::to_string(dp.rank()), std::ios::binary);
    file.write(reinterpret_cast<const char*>(all.data_ptr<float>()),
               static_cast<std::streamsize>(all.numel() * sizeof(float)));
    const float first = all[0].item<float>();
    if (torch::all(all == first).item<bool>()) {
      std::printf("worker %d final values: %.9g\n", dp.rank(), first);
    } else {
      std::printf("worker %d final values differ: min %.9g max %.9g\n", dp.rank(),
                  all.min().item<float>(), all.max().item<float>());
    }
    std::fflush(stdout);
    dp.Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consistency_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
