// local_optimizer: EEN in `sum` mode. The parameter servers only average the
// workers' gradients; each worker steps its own torch optimizer on the mean
// gradient, so every replica stays identical (same start, same updates).
//
//   een-launch --ps 1 --workers 2 -- build/bin/local_optimizer
#include <een/data_parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "samples/common/fashion_mnist.h"

int main(int argc, char** argv) {
  CLI::App app{"local_optimizer: an MLP on Fashion-MNIST, torch optimizer on each worker"};
  int epochs = 1, batch = 64;
  int64_t train_limit = 0, test_limit = 0;
  double lr = 0.05;
  app.add_option("--epochs", epochs)->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "samples per worker per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "torch::optim::SGD learning rate (momentum 0.9)");
  app.add_option("--train-limit", train_limit, "use only the first N training images");
  app.add_option("--test-limit", test_limit, "evaluate on the first N test images");
  CLI11_PARSE(app, argc, argv);
  try {
    torch::manual_seed(1);
    torch::nn::Sequential net(torch::nn::Flatten(), torch::nn::Linear(784, 128), torch::nn::ReLU(),
                              torch::nn::Linear(128, 10));
    een::DataParallelOptions options;
    options.optimizer = een::OptimizerConfig::Sum();
    een::DataParallel dp(*net, options);
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));

    const auto train = een::samples::LoadFashionMnist(true, train_limit);
    een::DistributedSampler sampler(train.images.size(0), dp.rank(), dp.world_size(), true, 1);
    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      auto mine = sampler.indices();
      auto order = torch::tensor(std::vector<int64_t>(mine.begin(), mine.end()), torch::kLong);
      for (int64_t i = 0; i < order.size(0); i += batch) {
        auto take = order.slice(0, i, std::min<int64_t>(order.size(0), i + batch));
        optimizer.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(
            net->forward(train.images.index_select(0, take)), train.labels.index_select(0, take));
        loss.backward();
        dp.Step(loss.item<double>(), take.size(0));  // .grad now holds the mean over workers
        optimizer.step();
      }
    }
    if (dp.rank() == 0) {
      torch::NoGradGuard no_grad;
      const auto test = een::samples::LoadFashionMnist(false, test_limit);
      auto correct = net->forward(test.images).argmax(1).eq(test.labels).sum().item<int64_t>();
      std::printf("test accuracy: %.1f%%\n", 100.0 * correct / test.images.size(0));
    }
    dp.Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "local_optimizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
