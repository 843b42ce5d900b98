// coverage_train: a small model trained under een-launch that records which
// samples each worker process trains on, for the worker-restart test. Each
// step, before Step(), it appends "EPOCH STEP i1 i2 ..." to
// --record DIR/worker-RANK-PID.txt. The data position comes from
// een::PositionAfter, so a replacement that joins mid-epoch (een-launch
// --max-restarts) and the workers that lost or regained a peer all agree on
// where each step's global batch starts. With --job-sampler the loop is a
// plain one over een::JobSampler, which follows the job by itself (a lost
// worker's unfinished steps included); EPOCH is then the epoch of the data
// the step trains (StepDataAt).
#include <een/data_parallel.h>
#include <een/job_sampler.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>

int main(int argc, char** argv) {
  CLI::App app{"coverage_train"};
  std::string record;
  int epochs = 2, batch = 4;
  int64_t n = 20000;
  app.add_option("--record", record)->required();
  app.add_option("--epochs", epochs);
  app.add_option("--batch", batch);
  app.add_option("--samples", n);
  bool job_sampler = false;
  app.add_flag("--job-sampler", job_sampler, "a plain loop over een::JobSampler");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  torch::manual_seed(1234);
  auto x = torch::randn({n, 8});
  auto y = torch::randint(0, 2, {n}, torch::kLong);
  torch::manual_seed(7);
  auto net = torch::nn::Linear(8, 2);
  try {
    een::DataParallelOptions options;
    options.optimizer = een::OptimizerConfig::SGD(0.05);
    een::DataParallel dp(*net, options);
    std::ofstream out(record + "/worker-" + std::to_string(dp.rank()) + "-" +
                      std::to_string(getpid()) + ".txt");
    auto train = [&](int epoch, const std::vector<size_t>& mine) {
      out << epoch << ' ' << dp.step();
      for (size_t i : mine) out << ' ' << i;
      out << '\n' << std::flush;
      auto take = torch::tensor(std::vector<int64_t>(mine.begin(), mine.end()), torch::kLong);
      net->zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net->forward(x.index_select(0, take)),
                                                       y.index_select(0, take));
      loss.backward();
      dp.Step(loss.item<double>(), batch);
    };
    if (job_sampler) {
      een::JobSampler follower(dp, n, true, 5, batch);
      for (int epoch = 0; epoch < epochs; ++epoch) {
        follower.Begin(epoch);
        for (std::vector<size_t> mine; !(mine = follower.NextBatch()).empty();) {
          const een::StepData at =
              een::StepDataAt(dp.step(), dp.world_size(), dp.membership_changes(), n, batch);
          train(static_cast<int>(at.epoch), mine);
        }
      }
      dp.Finish();
      return 0;
    }
    een::DistributedSampler sampler(n, dp.rank(), dp.world_size(), true, 5);
    const een::DataPosition at =
        een::PositionAfter(dp.step(), dp.world_size(), dp.membership_changes(), n, batch);
    if (dp.step() > 0) {
      std::printf("starting at step %llu: epoch %llu, position %llu\n",
                  static_cast<unsigned long long>(dp.step()),
                  static_cast<unsigned long long>(at.epoch),
                  static_cast<unsigned long long>(at.position));
      std::fflush(stdout);
    }
    for (int epoch = static_cast<int>(at.epoch); epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      int64_t position =
          epoch == static_cast<int>(at.epoch) ? static_cast<int64_t>(at.position) : 0;
      while (position < n) {
        const int live = dp.live_count();
        train(epoch, sampler.Batch(position, dp.live_index(), live, batch));
        position += int64_t{live} * batch;
      }
    }
    dp.Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coverage_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
