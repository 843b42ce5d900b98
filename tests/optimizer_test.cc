// Each server optimizer against torch::optim on the same inputs.
#include "ps/optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

namespace een {
namespace {

constexpr int64_t kN = 4096;
constexpr int kSteps = 25;

std::unique_ptr<torch::optim::Optimizer> TorchOptimizer(const OptimizerConfig& c, torch::Tensor p) {
  switch (c.kind) {
    case OptimizerConfig::Kind::kSgd:
      return std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{p},
                                                 torch::optim::SGDOptions(c.lr)
                                                     .momentum(c.momentum)
                                                     .dampening(c.dampening)
                                                     .nesterov(c.nesterov)
                                                     .weight_decay(c.weight_decay));
    case OptimizerConfig::Kind::kAdam:
      return std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{p},
                                                  torch::optim::AdamOptions(c.lr)
                                                      .betas({c.beta1, c.beta2})
                                                      .eps(c.eps)
                                                      .weight_decay(c.weight_decay));
    case OptimizerConfig::Kind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{p},
                                                   torch::optim::AdamWOptions(c.lr)
                                                       .betas({c.beta1, c.beta2})
                                                       .eps(c.eps)
                                                       .weight_decay(c.weight_decay));
    case OptimizerConfig::Kind::kAdagrad:
      return std::make_unique<torch::optim::Adagrad>(
          std::vector<torch::Tensor>{p}, torch::optim::AdagradOptions(c.lr)
                                             .lr_decay(c.lr_decay)
                                             .weight_decay(c.weight_decay)
                                             .initial_accumulator_value(c.initial_accumulator)
                                             .eps(c.eps));
    default:
      return nullptr;
  }
}

// Largest |ours - torch| / max(|torch|, 1) over every element and step:
// relative for values of magnitude >= 1, absolute below (where a value is
// the difference of two larger ones, one rounding step of those operands --
// torch fuses multiply-adds, we do not -- would otherwise look huge).
double MaxRelativeDifference(const OptimizerConfig& config) {
  torch::manual_seed(11);
  torch::Tensor start = torch::randn({kN});
  torch::Tensor reference = start.clone().set_requires_grad(true);
  auto torch_opt = TorchOptimizer(config, reference);
  auto ours = ps::Optimizer::Create(config);
  EXPECT_TRUE(ours.ok()) << ours.status().ToString();
  std::vector<float> values(start.data_ptr<float>(), start.data_ptr<float>() + kN);
  const int slots = (*ours)->state_slots();
  std::vector<std::vector<float>> state(slots, std::vector<float>(kN, 0.0f));
  std::vector<float*> state_ptrs;
  for (auto& s : state) state_ptrs.push_back(s.data());
  (*ours)->InitState(state_ptrs.data(), kN);
  double worst = 0;
  for (int step = 1; step <= kSteps; ++step) {
    torch::Tensor grad = torch::randn({kN}) * 0.5;
    reference.mutable_grad() = grad.clone();
    torch_opt->step();
    (*ours)->Apply(values.data(), grad.data_ptr<float>(), state_ptrs.data(), kN, step,
                   (*ours)->configured_lr());
    const float* expect = reference.data_ptr<float>();
    for (int64_t i = 0; i < kN; ++i) {
      const double diff =
          std::abs(double(values[i]) - expect[i]) / std::max(1.0, std::abs(double(expect[i])));
      worst = std::max(worst, diff);
    }
  }
  return worst;
}

struct Case {
  const char* name;
  OptimizerConfig config;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class MatchesTorch : public ::testing::TestWithParam<Case> {};

TEST_P(MatchesTorch, WithinOneInAMillion) {
  const double diff = MaxRelativeDifference(GetParam().config);
  std::ostringstream figure;
  figure << std::scientific << diff;
  RecordProperty("max_relative_difference", figure.str());
  EXPECT_LE(diff, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, MatchesTorch,
    ::testing::Values(Case{"sgd", OptimizerConfig::SGD(0.1)},
                      Case{"sgd_momentum", OptimizerConfig::SGD(0.05, 0.9)},
                      Case{"sgd_nesterov_wd", OptimizerConfig::SGD(0.05, 0.9, 1e-4, true)},
                      Case{"sgd_dampening", OptimizerConfig::SGD(0.05, 0.9, 0.0, false, 0.1)},
                      Case{"adam", OptimizerConfig::Adam(1e-2)},
                      Case{"adam_wd", OptimizerConfig::Adam(1e-2, 0.8, 0.99, 1e-6, 1e-2)},
                      Case{"adamw", OptimizerConfig::AdamW(1e-2)},
                      Case{"adagrad", OptimizerConfig::Adagrad(0.1, 0.01, 1e-3, 0.1)}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Optimizer, BadConfigsAreRefusedWithTheField) {
  auto bad_lr = ps::Optimizer::Create(OptimizerConfig::SGD(-1));
  EXPECT_NE(bad_lr.status().message().find("lr"), std::string::npos);
  auto bad_beta = ps::Optimizer::Create(OptimizerConfig::Adam(1e-3, 1.5));
  EXPECT_NE(bad_beta.status().message().find("beta1"), std::string::npos);
  auto bad_nesterov = ps::Optimizer::Create(OptimizerConfig::SGD(0.1, 0.0, 0.0, true));
  EXPECT_NE(bad_nesterov.status().message().find("nesterov"), std::string::npos);
  auto sum = ps::Optimizer::Create(OptimizerConfig::Sum());
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->get(), nullptr);
}

}  // namespace
}  // namespace een
