// resnet_step: ResNet-50 training steps on synthetic data, for the GPU
// figures (bench/gpu/run.sh): under een-launch each worker trains through
// EEN with Adam on the parameter servers; with --local the process trains
// alone with torch::optim::Adam on the device (no communication: the
// compute-only baseline, and the optimizer state on the GPU).
//   een-launch --ps 2 --workers 4 -- resnet_step --device cuda --steps 30
// Prints, per process, the median step time (host, the device synchronised
// at each step's end), the median time inside Step() (EEN), and the peak
// GPU memory the caching allocator handed out (CUDA builds).
#include <een/data_parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#if EEN_CUDA_ALLOCATOR_STATS
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;

struct BottleneckImpl : torch::nn::Module {
  BottleneckImpl(int64_t in, int64_t width, int64_t stride)
      : conv1(register_module("conv1", Conv2d(Conv2dOptions(in, width, 1).bias(false)))),
        bn1(register_module("bn1", BatchNorm2d(width))),
        conv2(register_module(
            "conv2", Conv2d(Conv2dOptions(width, width, 3).stride(stride).padding(1).bias(false)))),
        bn2(register_module("bn2", BatchNorm2d(width))),
        conv3(register_module("conv3", Conv2d(Conv2dOptions(width, width * 4, 1).bias(false)))),
        bn3(register_module("bn3", BatchNorm2d(width * 4))) {
    if (stride != 1 || in != width * 4) {
      downsample = register_module(
          "downsample",
          torch::nn::Sequential(Conv2d(Conv2dOptions(in, width * 4, 1).stride(stride).bias(false)),
                                BatchNorm2d(width * 4)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + (downsample ? downsample->forward(x) : x));
  }
  Conv2d conv1;
  BatchNorm2d bn1;
  Conv2d conv2;
  BatchNorm2d bn2;
  Conv2d conv3;
  BatchNorm2d bn3;
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

// torchvision's resnet50 (the same layers and shapes; 25.6 M parameters).
struct ResNet50Impl : torch::nn::Module {
  ResNet50Impl()
      : conv1(register_module("conv1",
                              Conv2d(Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)))),
        bn1(register_module("bn1", BatchNorm2d(64))),
        fc(register_module("fc", torch::nn::Linear(2048, 1000))) {
    int64_t in = 64;
    const int64_t blocks[4] = {3, 4, 6, 3};
    for (int l = 0; l < 4; ++l) {
      torch::nn::Sequential layer;
      const int64_t width = 64 << l;
      for (int64_t b = 0; b < blocks[l]; ++b) {
        layer->push_back(Bottleneck(in, width, b == 0 && l > 0 ? 2 : 1));
        in = width * 4;
      }
      layers.push_back(register_module("layer" + std::to_string(l + 1), layer));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 3, 2, 1);
    for (auto& layer : layers) x = layer->forward(x);
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  Conv2d conv1;
  BatchNorm2d bn1;
  torch::nn::Linear fc;
  std::vector<torch::nn::Sequential> layers;
};
TORCH_MODULE(ResNet50);

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double PeakAllocatedMb(const torch::Device& device) {
#if EEN_CUDA_ALLOCATOR_STATS
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak / 1e6;  // [0]: every pool together
  }
#endif
  (void)device;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"resnet_step: ResNet-50 training steps through EEN (or --local), for bench/gpu"};
  std::string device_name = "cuda", dtype_name = "float32", label = "een";
  int batch = 32, steps = 30, warmup = 5;
  bool local = false;
  app.add_option("--device", device_name);
  app.add_option("--dtype", dtype_name, "parameters' dtype")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "measured steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "steps before measuring");
  app.add_option("--label", label, "the name printed with the figures");
  app.add_flag("--local", local, "train alone with torch::optim::Adam on the device");
  CLI11_PARSE(app, argc, argv);
  try {
    const torch::Device device(device_name);
    const auto dtype = dtype_name == "bfloat16"  ? torch::kBFloat16
                       : dtype_name == "float16" ? torch::kHalf
                                                 : torch::kFloat;
    torch::manual_seed(0);
    ResNet50 net;
    net->to(device, dtype);
    auto x = torch::randn({batch, 3, 224, 224}, torch::TensorOptions(device).dtype(dtype));
    auto y = torch::randint(0, 1000, {batch}, torch::TensorOptions(device).dtype(torch::kLong));
    auto sync = [&] {
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
    };
    std::unique_ptr<een::DataParallel> dp;
    std::unique_ptr<torch::optim::Adam> adam;
    if (local) {
      adam =
          std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-4));
    } else {
      dp = std::make_unique<een::DataParallel>(
          *net, een::DataParallelOptions{.optimizer = een::OptimizerConfig::Adam(1e-4)});
    }
    std::vector<double> step_ms, in_step_ms;
    double first_loss = 0, last_loss = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      sync();
      const auto t0 = std::chrono::steady_clock::now();
      if (adam) adam->zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net->forward(x).to(torch::kFloat), y);
      loss.backward();
      const double l = loss.item<double>();
      const auto t1 = std::chrono::steady_clock::now();
      if (dp) {
        dp->Step(l, batch);
      } else {
        adam->step();
      }
      const auto t2 = std::chrono::steady_clock::now();
      sync();
      const auto t3 = std::chrono::steady_clock::now();
      if (s == 0) first_loss = l;
      last_loss = l;
      if (s < warmup) continue;
      step_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t0).count());
      in_step_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    std::printf(
        "resnet50 %s rank %d of %d: step %.1f ms, in Step() %.1f ms (medians of %d), peak GPU "
        "memory allocated %.0f MB, %s parameters, batch %d, loss %.3f -> %.3f\n",
        label.c_str(), dp ? dp->rank() : 0, dp ? dp->world_size() : 1, Median(step_ms),
        Median(in_step_ms), steps, PeakAllocatedMb(device), dtype_name.c_str(), batch, first_loss,
        last_loss);
    std::fflush(stdout);
    if (dp) dp->Finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resnet_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
