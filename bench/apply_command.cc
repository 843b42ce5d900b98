// een-bench apply: how fast a PS turns gradients into new parameters.
//
// Builds the PS's own ChunkStore for a trace's tensors (one PS holds them
// all), and times ApplySteps() over every chunk: the workers' gradients
// summed in rank order, divided, and the optimizer applied (SGD with
// momentum, Adam), on 1..N apply threads. Bandwidth counts the bytes the
// step reads or updates once each: gradients (per worker), values and
// optimizer state; the reference is memcpy of the same number of bytes on
// one core, in the same run. Each case also runs without the PS's look for
// NaN and infinite means ("no check"), for what that look costs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "bench/commands.h"
#include "bench/report.h"
#include "bench/trace.h"
#include "ps/apply_pool.h"
#include "ps/chunk_store.h"

namespace een::bench {
namespace {

struct Measured {
  Summary time;
  double bytes = 0;  // per step
};

Result<Measured> TimeOptimizer(const ShardMap& map, const OptimizerConfig& optimizer,
                               const ApplyOptions& o, int threads, bool check_nonfinite) {
  EEN_ASSIGN_OR_RETURN(auto store, ps::ChunkStore::Create(map, 0, o.workers, optimizer));
  store->SetNonFiniteCheck(check_nonfinite);
  ps::ApplyPool pool(threads);
  store->SetApplyPool(&pool);
  const size_t total = map.TotalNumel();
  auto values = std::make_shared<std::vector<float>>(total, 0.5f);
  std::vector<std::shared_ptr<std::vector<float>>> grads;
  for (int w = 0; w < o.workers; ++w) {
    grads.push_back(std::make_shared<std::vector<float>>(total, 1e-3f * (w + 1)));
  }
  std::vector<uint32_t> all;
  std::vector<size_t> at;
  for (uint32_t c = 0, offset = 0; c < map.chunks().size(); offset += map.chunks()[c].numel, ++c) {
    all.push_back(c);
    at.push_back(offset);
    EEN_RETURN_IF_ERROR(store->SetInitial(
        c, transport::Frame::Borrow(values->data() + offset, map.chunks()[c].numel * 4, values)));
  }
  std::vector<double> micros;
  for (int step = 0; step < o.steps + 1; ++step) {  // the first is a warm-up
    for (uint32_t c : all) {
      for (int w = 0; w < o.workers; ++w) {
        EEN_ASSIGN_OR_RETURN(
            bool complete,
            store->Contribute(c, w, step,
                              transport::Frame::Borrow(grads[w]->data() + at[c],
                                                       map.chunks()[c].numel * 4, grads[w])));
        (void)complete;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    store->ApplySteps(all);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) micros.push_back(us);
  }
  EEN_ASSIGN_OR_RETURN(auto probe, ps::Optimizer::Create(optimizer));
  const int state = probe ? probe->state_slots() : 0;
  return Measured{Summarize(micros), double(total) * 4 * (o.workers + 1 + state)};
}

}  // namespace

int RunApply(const ApplyOptions& o) {
  auto trace = ReadTrace(o.trace_path);
  if (!trace.ok()) {
    std::fprintf(stderr, "een-bench: %s\n", trace.status().message().c_str());
    return 2;
  }
  auto map = ShardMap::Build(trace->Parameters(), 1, ShardingOptions{}, {"tcp://0:0"});
  if (!map.ok()) {
    std::fprintf(stderr, "een-bench: %s\n", map.status().message().c_str());
    return 2;
  }
  std::printf(
      "een-bench apply %s: %.1f M parameters in %zu chunks, %d worker gradient(s) per "
      "chunk, %d steps; bandwidth = (gradients + values + state) bytes / time\n\n",
      trace->name.c_str(), map->TotalNumel() / 1e6, map->chunks().size(), o.workers, o.steps);
  std::printf("%-22s %7s %9s %9s %9s %9s %14s\n", "", "threads", "median", "p10", "p90", "GB/s",
              "vs memcpy/core");
  struct Case {
    const char* name;
    OptimizerConfig config;
  };
  const Case cases[] = {{"sgd momentum 0.9", OptimizerConfig::SGD(0.01, 0.9)},
                        {"adam", OptimizerConfig::Adam(1e-3)}};
  for (const Case& c : cases) {
    double per_core = 0;
    for (int t = 1; t <= o.threads; ++t) {
      auto m = TimeOptimizer(*map, c.config, o, t, true);
      auto unchecked = TimeOptimizer(*map, c.config, o, t, false);
      if (!m.ok() || !unchecked.ok()) {
        std::fprintf(stderr, "een-bench: %s\n",
                     (m.ok() ? unchecked.status() : m.status()).message().c_str());
        return 1;
      }
      if (t == 1) {
        const Summary copy = Summarize(TimeMemcpy(size_t(m->bytes), 1, 1, o.steps));
        per_core = m->bytes / (copy.median / 1000) / 1e9;
        std::printf("%-22s %7d %9.2f %9.2f %9.2f %9.2f\n", "memcpy (same bytes)", 1, copy.median,
                    copy.p10, copy.p90, per_core);
      }
      const double gbs = m->bytes / (m->time.median / 1000) / 1e9;
      std::printf("%-22s %7d %9.2f %9.2f %9.2f %9.2f %13.0f%%\n", c.name, t, m->time.median,
                  m->time.p10, m->time.p90, gbs, 100 * gbs / t / per_core);
      std::printf("%-22s %7d %9.2f %9.2f %9.2f %9.2f %13s   checked / not: %.3f\n", "  no check", t,
                  unchecked->time.median, unchecked->time.p10, unchecked->time.p90,
                  m->bytes / (unchecked->time.median / 1000) / 1e9, "",
                  m->time.median / unchecked->time.median);
    }
  }
  return 0;
}

}  // namespace een::bench
