// train: a user's own program built against an installed EEN (the package
// test builds it with the five-line CMakeLists.txt beside it and with
// pkg-config). It fits y = 3x - 1 through the job's parameter servers and
// prints each worker's result; every worker must end with the same values.
#include <een/data_parallel.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  try {
    torch::manual_seed(1);
    torch::nn::Linear model(1, 1);
    een::DataParallel dp(*model, {.optimizer = een::OptimizerConfig::SGD(0.1)});
    torch::manual_seed(100 + dp.rank());
    for (int step = 0; step < 200; ++step) {
      auto x = torch::rand({16, 1});
      auto loss = torch::mse_loss(model->forward(x), 3 * x - 1);
      loss.backward();
      dp.Step(loss.item<double>(), 16);
    }
    std::printf("worker %d: w %.4f b %.4f after %llu steps\n", dp.rank(),
                model->weight.item<double>(), model->bias.item<double>(),
                static_cast<unsigned long long>(dp.step()));
    dp.Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
  return 0;
}
