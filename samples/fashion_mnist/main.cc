// fashion_mnist: a small CNN trained data-parallel through EEN.
//
//   een-launch --ps 2 --workers 4 -- build/bin/fashion_mnist
//
// With no arguments it uses the README job's settings (3 epochs, batch 32 per
// worker, Adam on the parameter servers). Rank 0 evaluates on the test set at
// the end and prints `test accuracy: NN.N%` on a line of its own, and the
// mean step time. `fashion_mnist --local` trains the same way in one process
// with torch's optimizer and no EEN: the reference for EEN's cost per step.
// Under `een-launch --consistency ssp:K` or `async` the workers deal the
// batches out with DataParallel::NextBatch() (a fast worker takes more of
// them), and rank 0 evaluates after a barrier and PullParameters().
// Under `een-launch --dynamic-slicing auto` (bsp or ssp:K) each worker
// takes its dp.batch_slice() of every step's global batch (a slow worker a
// smaller one) instead. `--slow-rank R --slow-ms X` makes worker R sleep X ms before each
// step (a straggler, for bench/README's figures), `--slow-rank R
// --slow-ms-per-sample X` makes each of its samples cost X ms more (it
// sleeps X times the samples of its batch after backward: a slower machine,
// whose cost follows its share of the batch); `--device-ms-per-sample Y`
// makes every worker's samples cost Y ms more (as if each worker computed on
// an accelerator of its own: a sleep takes no core from the others, so
// workers on one host behave as on separate machines); `--jitter-ms X` makes every worker
// sleep X ms before a random quarter of its steps (stragglers that come and
// go).
#include <een/data_parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "samples/common/fashion_mnist.h"

namespace {

struct Net : torch::nn::Module {
  Net()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5)))),
        fc1(register_module("fc1", torch::nn::Linear(512, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};

double Evaluate(Net& net, const een::samples::LabelledImages& test) {
  torch::NoGradGuard no_grad;
  net.eval();
  int64_t correct = 0;
  const int64_t n = test.images.size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    auto x = test.images.slice(0, i, std::min(n, i + 1000));
    auto y = test.labels.slice(0, i, std::min(n, i + 1000));
    correct += net.forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  net.train();
  return 100.0 * correct / n;
}

// The training loss of one batch: the images at `indices`.
torch::Tensor BatchLoss(Net& net, const een::samples::LabelledImages& train,
                        const std::vector<size_t>& indices) {
  auto take = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kLong);
  return torch::nn::functional::cross_entropy(net.forward(train.images.index_select(0, take)),
                                              train.labels.index_select(0, take));
}

// --local: the same training in this one process with torch's own optimizer
// and no EEN at all: the reference for EEN's overhead per step.
int RunLocal(const std::shared_ptr<Net>& net, const std::string& optimizer, double lr,
             double momentum, int epochs, int batch, int64_t train_limit, int64_t test_limit,
             uint64_t seed) {
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (optimizer == "adam") {
    opt = std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(lr));
  } else {
    opt = std::make_unique<torch::optim::SGD>(net->parameters(),
                                              torch::optim::SGDOptions(lr).momentum(momentum));
  }
  const auto train = een::samples::LoadFashionMnist(true, train_limit);
  een::DistributedSampler sampler(train.images.size(0), 0, 1, true, seed);
  const int64_t n = train.images.size(0);
  int64_t steps = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    for (int64_t position = 0; position < n; position += batch, ++steps) {
      opt->zero_grad();
      BatchLoss(*net, train, sampler.Batch(position, 0, 1, batch)).backward();
      opt->step();
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("mean step time: %.3f ms over %lld steps (local, no EEN)\n", 1000 * secs / steps,
              static_cast<long long>(steps));
  const auto test = een::samples::LoadFashionMnist(false, test_limit);
  std::printf("test accuracy: %.1f%%\n", Evaluate(*net, test));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fashion_mnist: train a small CNN on Fashion-MNIST through EEN"};
  int epochs = 3, batch = 32, log_every = 100;
  int64_t train_limit = 0, test_limit = 0;
  double lr = 2e-3, momentum = 0.9;
  std::string optimizer = "adam", save;
  uint64_t seed = 1;
  app.add_option("--epochs", epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "samples per worker per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", optimizer, "server optimizer")
      ->check(CLI::IsMember({"adam", "sgd"}));
  app.add_option("--momentum", momentum, "SGD momentum");
  app.add_option("--train-limit", train_limit, "use only the first N training images");
  app.add_option("--test-limit", test_limit, "evaluate on the first N test images");
  app.add_option("--seed", seed, "seed of the initial model (rank 0) and the shuffle");
  app.add_option("--log-every", log_every, "steps between loss lines on rank 0");
  bool local = false;
  app.add_flag("--local", local, "train in this process alone, without EEN (the reference)");
  int slow_rank = -1, slow_ms = 0;
  app.add_option("--slow-rank", slow_rank, "this worker sleeps --slow-ms before each step");
  app.add_option("--slow-ms", slow_ms, "the slowed worker's sleep per step");
  double slow_ms_per_sample = 0;
  app.add_option("--slow-ms-per-sample", slow_ms_per_sample,
                 "the slowed worker sleeps this per sample of its batch")
      ->check(CLI::Range(0.0, 1000.0));
  double device_ms_per_sample = 0;
  app.add_option("--device-ms-per-sample", device_ms_per_sample,
                 "every worker sleeps this per sample of its batch (an accelerator of its own)")
      ->check(CLI::Range(0.0, 1000.0));
  int jitter_ms = 0;
  app.add_option("--jitter-ms", jitter_ms, "every worker sleeps this before a random 1 in 4 steps");
  CLI11_PARSE(app, argc, argv);

  try {
    torch::manual_seed(seed);
    auto net = std::make_shared<Net>();
    if (local)
      return RunLocal(net, optimizer, lr, momentum, epochs, batch, train_limit, test_limit, seed);
    een::DataParallelOptions options;
    options.optimizer = optimizer == "adam" ? een::OptimizerConfig::Adam(lr)
                                            : een::OptimizerConfig::SGD(lr, momentum);
    een::DataParallel dp(*net, options);
    const auto train = een::samples::LoadFashionMnist(true, train_limit);
    een::DistributedSampler sampler(train.images.size(0), dp.rank(), dp.world_size(), true, seed);
    if (dp.rank() == 0) {
      std::printf(
          "training on %lld images, %d workers x batch %d, %d epochs, %s lr %g, "
          "%d torch thread(s) per worker\n",
          static_cast<long long>(train.images.size(0)), dp.world_size(), batch, epochs,
          optimizer.c_str(), lr, torch::get_num_threads());
    }
    const auto start = std::chrono::steady_clock::now();
    // Each step the live workers together take the next live_count * batch
    // positions of the epoch's permutation; if a worker is lost, the others
    // share the rest of the epoch. A worker that starts mid-job (after
    // `een-launch --resume`, a replacement under --max-restarts, a rollback)
    // finds its epoch and position from dp.step() and the membership changes.
    const int64_t n = train.images.size(0);
    const uint64_t first_step = dp.step();  // after --resume: the snapshot's (this worker's)
    std::mt19937 jitter(static_cast<uint32_t>(seed * 1000 + dp.rank()));
    auto straggle = [&] {
      if (dp.rank() == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      if (jitter_ms > 0 && jitter() % 4 == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(jitter_ms));
      }
    };
    // Each worker's samples cost --device-ms-per-sample more (the time of an
    // accelerator of its own, which takes no core from the others), worker
    // `slow_rank`'s --slow-ms-per-sample more again (a slower machine).
    auto slow_machine = [&](size_t samples) {
      const double ms = device_ms_per_sample + (dp.rank() == slow_rank ? slow_ms_per_sample : 0);
      if (ms > 0) {
        std::this_thread::sleep_for(
            std::chrono::duration<double, std::milli>(ms * static_cast<double>(samples)));
      }
    };
    // ssp/async: batch k of the job is batch k % B of epoch k / B, of one
    // permutation per epoch that every worker draws the same.
    // Under ssp with --dynamic-slicing the steps are sliced as under bsp.
    const bool dealt = dp.consistency() != "bsp" && !dp.dynamic_slicing();
    if (dealt) {
      een::DistributedSampler order(n, 0, 1, true, seed);
      const uint64_t per_epoch = static_cast<uint64_t>((n + batch - 1) / batch);
      int64_t current = -1;
      // A lost PS (with snapshots on) rolls the job back, from Step() or the
      // barrier: NextBatch() deals on from the snapshot.
      for (bool done = false; !done;) {
        try {
          for (uint64_t k; (k = dp.NextBatch()) < uint64_t(epochs) * per_epoch;) {
            const int64_t epoch = static_cast<int64_t>(k / per_epoch);
            if (epoch != current) order.set_epoch(current = epoch);
            straggle();
            const std::vector<size_t> mine =
                order.Batch(static_cast<int64_t>(k % per_epoch) * batch, 0, 1, batch);
            auto loss = BatchLoss(*net, train, mine);
            loss.backward();
            slow_machine(mine.size());
            const double l = loss.item<double>();
            dp.Step(l, static_cast<int64_t>(mine.size()));
            if (dp.rank() == 0 && log_every > 0 && dp.step() % log_every == 0) {
              std::printf("epoch %lld step %llu loss %.4f (staleness %llu)\n",
                          static_cast<long long>(epoch + 1),
                          static_cast<unsigned long long>(dp.step()), l,
                          static_cast<unsigned long long>(dp.staleness()));
              std::fflush(stdout);
            }
          }
          dp.Barrier();  // every worker's gradients are in
          if (dp.rank() == 0) dp.PullParameters();
          done = true;
        } catch (const een::RolledBack& back) {
          if (dp.rank() == 0) std::printf("%s\n", back.what());
        }
      }
    }
    // A lost PS (with snapshots on) rolls the job back: Step() throws
    // een::RolledBack and the loop starts again from dp.step().
    for (bool done = dealt; !done;) {
      try {
        const een::DataPosition at =
            een::PositionAfter(dp.step(), dp.world_size(), dp.membership_changes(), n, batch);
        const int first_epoch = static_cast<int>(at.epoch);
        for (int epoch = first_epoch; epoch < epochs; ++epoch) {
          sampler.set_epoch(epoch);
          int64_t position = epoch == first_epoch ? static_cast<int64_t>(at.position) : 0;
          double epoch_loss = 0;
          int64_t steps = 0;
          const auto epoch_start = std::chrono::steady_clock::now();
          while (position < n) {
            straggle();
            const int live = dp.live_count();
            std::vector<size_t> mine;
            if (dp.dynamic_slicing()) {
              const een::DataParallel::BatchSlice slice = dp.batch_slice(batch);
              mine = sampler.Slice(position, slice.offset, slice.count);
            } else {
              mine = sampler.Batch(position, dp.live_index(), live, batch);
            }
            auto loss = BatchLoss(*net, train, mine);
            loss.backward();
            slow_machine(mine.size());
            const double l = loss.item<double>();
            dp.Step(l, static_cast<int64_t>(mine.size()));
            position += int64_t{live} * batch;
            epoch_loss += l;
            ++steps;
            if (dp.rank() == 0 && log_every > 0 && dp.step() % log_every == 0) {
              std::printf("epoch %d step %llu loss %.4f\n", epoch + 1,
                          static_cast<unsigned long long>(dp.step()), l);
              std::fflush(stdout);
            }
          }
          if (dp.rank() == 0) {
            const auto now = std::chrono::steady_clock::now();
            const double secs = std::chrono::duration<double>(now - start).count();
            const double epoch_ms =
                std::chrono::duration<double, std::milli>(now - epoch_start).count();
            std::printf("epoch %d done: mean loss %.4f, %.1f s elapsed, %.3f ms a step\n",
                        epoch + 1, epoch_loss / std::max<int64_t>(steps, 1), secs,
                        epoch_ms / static_cast<double>(std::max<int64_t>(steps, 1)));
            std::fflush(stdout);
          }
        }
        if (dp.consistency() != "bsp") {  // ssp with slicing: every worker's gradients in
          dp.Barrier();
          if (dp.rank() == 0) dp.PullParameters();
        }
        done = true;
      } catch (const een::RolledBack& back) {
        if (dp.rank() == 0) std::printf("%s\n", back.what());
      }
    }
    if (dp.rank() == 0) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const uint64_t steps_here = dp.step() - std::min(first_step, dp.step());
      std::printf("mean step time: %.3f ms over %llu steps\n",
                  1000 * secs / std::max<uint64_t>(steps_here, 1),
                  static_cast<unsigned long long>(steps_here));
      if (first_step == 0) {
        std::printf("trained %d epochs of %lld images in %.2f s: %.0f samples/s (%s)\n", epochs,
                    static_cast<long long>(n), secs, epochs * n / secs, dp.consistency().c_str());
      } else {  // resumed: this run trained only the rest
        std::printf("trained the rest of %d epochs of %lld images from step %llu in %.2f s (%s)\n",
                    epochs, static_cast<long long>(n), static_cast<unsigned long long>(first_step),
                    secs, dp.consistency().c_str());
      }
      const auto test = een::samples::LoadFashionMnist(false, test_limit);
      std::printf("test accuracy: %.1f%%\n", Evaluate(*net, test));
      std::fflush(stdout);
    }
    dp.Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
