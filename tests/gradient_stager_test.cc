// The GPU worker path's staging logic on CPU tensors, through the fake
// stream/event seam (worker/device/fake_device_copies.h): a bucket is pushed
// only once every copy into it has completed, copies complete in stream
// order, each copy holds its gradient until it has run, bf16/fp16
// gradients arrive as float32, Drain() waits for everything staged and
// rethrows a push's error; parameters go back to the "device" only when
// their copies have run and the fence waits for them.
#include "worker/device/gradient_stager.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <mutex>

#include "worker/device/fake_device_copies.h"

namespace een {
namespace {

ShardMap MakeMap(std::vector<TensorInfo> tensors, uint32_t max_chunk) {
  ShardingOptions options;
  options.max_chunk_numel = max_chunk;
  return ShardMap::Build(std::move(tensors), 2, options, {"mem://ps0", "mem://ps1"}).value();
}

// Buckets of a layout, and which were pushed (in order).
struct Buckets {
  explicit Buckets(const BucketLayout& layout) : layout(layout) {
    for (const auto& b : layout.buckets()) storage.emplace_back(b.numel, -1.0f);
    for (auto& s : storage) pointers.push_back(s.data());
    pending.resize(layout.buckets().size());
    for (size_t b = 0; b < pending.size(); ++b) pending[b] = layout.buckets()[b].tensors.size();
  }
  void Arrived(uint32_t t) {  // as DataParallel::Impl::Arrived: push what t completes
    std::lock_guard<std::mutex> lock(mu);
    arrivals.push_back(t);
    uint32_t last = UINT32_MAX;
    for (const auto& s : layout.segments(t)) {
      if (s.bucket == last) continue;
      last = s.bucket;
      if (--pending[s.bucket] == 0) pushed.push_back(s.bucket);
    }
  }
  std::vector<uint32_t> Pushed() {
    std::lock_guard<std::mutex> lock(mu);
    return pushed;
  }
  const BucketLayout& layout;
  std::vector<std::vector<float>> storage;
  std::vector<float*> pointers;
  std::vector<size_t> pending;
  std::mutex mu;
  std::vector<uint32_t> pushed, arrivals;
};

// Polls `done` for up to 10 s (the completer thread acts on its own time).
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 10000 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

TEST(GradientStager, ABucketIsPushedOnlyWhenEveryCopyIntoItHasCompleted) {
  // Tensors 0..2; reverse order fills buckets: "c" (2) and "b" (1) share one.
  ShardMap map = MakeMap({{"a", 3000}, {"b", 500}, {"c", 500}}, 1 << 20);
  BucketLayout layout(map, 4500);
  ASSERT_EQ(layout.buckets().size(), 2u);
  Buckets buckets(layout);
  FakeDeviceCopies copies(FakeDeviceCopies::Mode::kManual);
  GradientStager stager(layout, buckets.pointers, copies, [&](uint32_t t) { buckets.Arrived(t); });

  torch::Tensor gc = torch::full({500}, 3.0f), gb = torch::full({500}, 2.0f);
  stager.Stage(2, gc);
  stager.Stage(1, gb);
  EXPECT_EQ(copies.queued(), 2u);
  EXPECT_EQ(stager.in_flight(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(buckets.Pushed().empty()) << "pushed before its copies ran";
  EXPECT_EQ(buckets.storage[0][0], -1.0f) << "the bucket was written before the copy ran";

  ASSERT_TRUE(copies.RunNext());  // c's copy: the bucket still waits for b
  ASSERT_TRUE(Eventually([&] { return stager.in_flight() == 1; }));
  EXPECT_TRUE(buckets.Pushed().empty());
  ASSERT_TRUE(copies.RunNext());  // b's: now the bucket is complete
  ASSERT_TRUE(Eventually([&] { return buckets.Pushed().size() == 1; }));
  EXPECT_EQ(buckets.Pushed()[0], 0u);
  for (const auto& s : layout.segments(2)) {
    EXPECT_EQ(buckets.storage[s.bucket][s.bucket_offset], 3.0f);
  }
  for (const auto& s : layout.segments(1)) {
    EXPECT_EQ(buckets.storage[s.bucket][s.bucket_offset + s.numel - 1], 2.0f);
  }
  stager.Stage(0, torch::ones({3000}));
  std::thread runner([&] { copies.RunAll(); });  // "the device" runs on its own
  stager.Drain();
  runner.join();
  EXPECT_EQ(buckets.Pushed(), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(buckets.arrivals, (std::vector<uint32_t>{2, 1, 0}));
}

TEST(GradientStager, EachCopyHoldsItsGradientUntilItHasRun) {
  ShardMap map = MakeMap({{"w", 4096}}, 1000);  // five chunks: five copies
  BucketLayout layout(map, 1 << 20);
  Buckets buckets(layout);
  FakeDeviceCopies copies(FakeDeviceCopies::Mode::kManual);
  GradientStager stager(layout, buckets.pointers, copies, [&](uint32_t t) { buckets.Arrived(t); });
  torch::Tensor grad = torch::arange(4096, torch::kFloat);
  const c10::Storage memory = grad.storage();  // what the allocator would hand out again
  stager.Stage(0, grad);
  EXPECT_EQ(copies.queued(), map.ChunkCountOf(0));
  grad = torch::Tensor();  // the program dropped .grad (Step() resets it)
  EXPECT_GT(memory.use_count(), 1u) << "nothing holds the gradient while its copies wait";
  copies.RunAll();
  stager.Drain();
  EXPECT_EQ(memory.use_count(), 1u) << "the gradient is still held after its copies ran";
  std::vector<float> unpacked(4096);
  std::vector<const float*> in(buckets.pointers.begin(), buckets.pointers.end());
  layout.Unpack(0, in, unpacked.data());
  for (int i = 0; i < 4096; i += 511) EXPECT_EQ(unpacked[i], float(i));
}

TEST(GradientStager, HalfPrecisionGradientsArriveAsFloat32) {
  ShardMap map = MakeMap({{"h", 64}, {"b", 64}}, 1 << 20);
  BucketLayout layout(map, 1 << 20);
  Buckets buckets(layout);
  FakeDeviceCopies copies(FakeDeviceCopies::Mode::kThread);
  GradientStager stager(layout, buckets.pointers, copies, [&](uint32_t t) { buckets.Arrived(t); });
  stager.Stage(0, torch::full({8, 8}, 1.5, torch::kHalf));
  stager.Stage(1, torch::full({64}, -0.25, torch::kBFloat16));
  stager.Drain();
  ASSERT_EQ(buckets.Pushed().size(), 1u);
  for (uint32_t t : {0u, 1u}) {
    for (const auto& s : layout.segments(t)) {
      EXPECT_EQ(buckets.storage[s.bucket][s.bucket_offset], t == 0 ? 1.5f : -0.25f);
    }
  }
}

TEST(GradientStager, DrainRethrowsWhatAPushThrewAndStillDrains) {
  ShardMap map = MakeMap({{"a", 10}, {"b", 10}}, 1 << 20);
  BucketLayout layout(map, 40);  // a bucket each
  Buckets buckets(layout);
  FakeDeviceCopies copies(FakeDeviceCopies::Mode::kThread);
  std::atomic<int> calls{0};
  GradientStager stager(layout, buckets.pointers, copies, [&](uint32_t) {
    calls++;
    throw std::runtime_error("push refused");
  });
  stager.Stage(1, torch::ones({10}));
  stager.Stage(0, torch::ones({10}));
  EXPECT_THROW(stager.Drain(), std::runtime_error);
  EXPECT_EQ(stager.in_flight(), 0u);
  EXPECT_EQ(calls.load(), 1) << "after a failure the rest is drained, not pushed";
  stager.Drain();  // the error was taken
}

TEST(FakeDeviceCopies, ParametersGoBackOnlyAsTheCopiesRunAndTheFenceWaitsForThem) {
  FakeDeviceCopies copies(FakeDeviceCopies::Mode::kManual);
  torch::Tensor param = torch::zeros({4}, torch::kBFloat16);
  std::vector<float> pulled = {1, 2, 3, 4};
  copies.ToDevice(pulled.data(), param);
  EXPECT_EQ(param[3].item<float>(), 0.0f) << "written before the copy ran";
  std::thread device([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    copies.RunAll();
  });
  copies.FenceCurrentStream();  // the host fake: the "next forward" waits here
  EXPECT_EQ(param[3].item<float>(), 4.0f);
  device.join();
  EXPECT_EQ(copies.runs(), 1u);
}

}  // namespace
}  // namespace een
