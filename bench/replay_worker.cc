// een-bench-worker: one worker of `een-bench replay`, started by een-launch
// like any training program. It registers the trace's tensors, then every
// step pushes a whole step of gradients, bucket by bucket in backward order
// (EEN_BUCKET_BYTES, 25 MB by default, as DataParallel does), and pulls the
// new parameters into its own buffers: the runtime's work with no model.
// It writes to --report DIR/worker-RANK.txt one line per measured step
// ("step MICROS") and one line of resources over the measured steps
// ("resources CPU_SECONDS PAGE_FAULTS PEAK_RSS_KB"). --compute-ms N spends
// N ms before each step's pushes, as a model's forward and backward would.
// In a resumed job (een-launch --resume), and as a worker joining a
// running one, it goes on from the step it is given, up to the same last
// step. Every worker pushes the same gradients (a fixed pattern), so the
// parameters do not depend on who trained which step: --params-out PREFIX
// writes them (raw float32, chunk order) to PREFIX.rank-R at the end, for
// tests that lose processes and compare.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "bench/trace.h"
#include "common/logging.h"
#include "common/resource_usage.h"
#include "common/transport/auth.h"
#include "common/version.h"
#include "worker/bucket_layout.h"
#include "worker/worker_client.h"

int main(int argc, char** argv) {
  CLI::App app{"een-bench-worker: replays a trace as one worker (started by een-bench)"};
  app.set_version_flag("--version", een::kVersionLine);
  std::string trace_path, report;
  int steps = 20, warmup = 3;
  size_t buffer_floats = 0;
  int compute_ms = 0;
  std::string params_out;
  app.add_option("trace", trace_path)->required();
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--report", report)->required();
  app.add_option("--buffer-floats", buffer_floats,
                 "also a buffer of this many floats, broadcast from rank 0 each step");
  app.add_option("--compute-ms", compute_ms, "milliseconds of simulated compute per step")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--params-out", params_out, "write the final parameters to PREFIX.rank-R");
  CLI11_PARSE(app, argc, argv);

  auto env = een::JobEnvironment::FromProcess("een-bench-worker");
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().message().c_str());
    return 2;
  }
  if (een::Status s = een::InitLogging("worker " + std::to_string(env->rank)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  if (auto s = een::AuthenticateAs(een::transport::WorkerIdentity(env->rank), "een-bench-worker");
      !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  auto trace = een::bench::ReadTrace(trace_path);
  if (!trace.ok()) {
    spdlog::error("{}", trace.status().message());
    return 2;
  }
  std::vector<een::TensorInfo> tensors = trace->Parameters();
  if (buffer_floats > 0) {  // as DataParallel registers BatchNorm statistics, after the parameters
    tensors.push_back({"bench.buffers",
                       buffer_floats,
                       een::TensorKind::kBufferBroadcast,
                       {static_cast<int64_t>(buffer_floats)}});
  }
  auto client = een::WorkerClient::Join(*env, tensors, een::OptimizerConfig::SGD(0.01));
  if (!client.ok()) {
    spdlog::error("cannot join: {}", client.status().message());
    return 3;
  }
  const een::ShardMap& map = (*client)->map();
  const size_t bucket_bytes = env->bucket_bytes > 0 ? env->bucket_bytes : 25u << 20;
  const een::BucketLayout layout(map, bucket_bytes);
  // Gradients: one buffer per bucket (as DataParallel keeps them); parameters: one buffer.
  auto fail = [&](const een::Status& s, const char* what) {
    spdlog::error("{}: {}", what, s.message());
    (*client)->Abandon();  // not finished: the exit status tells
    return 3;
  };
  std::vector<std::shared_ptr<float>> grads;
  for (const auto& b : layout.buckets()) {
    auto buffer = (*client)->GradientBuffer(b.numel);  // shared memory on the shm transport
    if (!buffer.ok()) return fail(buffer.status(), "gradient buffers");
    for (size_t i = 0; i < b.numel; ++i) buffer->get()[i] = 1e-3f * static_cast<float>(1 + i % 7);
    grads.push_back(*buffer);
  }
  std::vector<float> params(map.TotalNumel(), 0.5f);
  std::vector<size_t> chunk_at(map.chunks().size());
  for (size_t c = 0, at = 0; c < map.chunks().size(); at += map.chunks()[c].numel, ++c)
    chunk_at[c] = at;
  auto sink = [&](uint32_t c) { return params.data() + chunk_at[c]; };
  const bool resumed = (*client)->resumed();
  int first_step = resumed ? static_cast<int>((*client)->start_step()) : 0;
  if ((*client)->sends_initial_values()) {
    // A copy the client may keep until step 1 (pulls overwrite `params`).
    auto initial = std::make_shared<const std::vector<float>>(params);
    std::vector<uint32_t> all;
    std::vector<const float*> data;
    for (uint32_t c = 0; c < map.chunks().size(); ++c) {
      all.push_back(c);
      data.push_back(initial->data() + chunk_at[c]);
    }
    if (auto s = (*client)->Push(een::wire::PushKind::INITIAL, 0, all, data, initial); !s.ok()) {
      return fail(s, "initial values");
    }
  }
  // A replacement that joins as the others finish may be given a step past
  // the last one: nothing is left to train, and the last values are final.
  const int last_version = warmup + steps;
  const int first_pull = std::min(first_step, last_version);
  auto pulled = (*client)->PullRecovering(first_pull, sink, /*frozen_too=*/false);
  if (!pulled.ok()) return fail(pulled.status(), "first pull");
  if (static_cast<int>(*pulled) != first_pull)
    first_step = static_cast<int>(*pulled);  // rolled back

  // The buffer's chunks: each step its values are gathered into a staging
  // copy and pushed, and pulled back (DataParallel's PushValues and StoreBuffers).
  std::vector<uint32_t> buffer_chunks;
  for (uint32_t c = 0; c < map.chunks().size(); ++c) {
    if (een::IsBuffer(map.KindOfChunk(c))) buffer_chunks.push_back(c);
  }
  std::vector<float> module_buffer(buffer_floats, 0.25f);
  auto staging = std::make_shared<std::vector<float>>(buffer_floats);

  std::ofstream out(report + "/worker-" + std::to_string((*client)->rank()) + ".txt");
  een::ResourceUsage start;
  // One step: every bucket's gradients and the buffer pushed, then the next
  // parameters pulled.
  auto run_step = [&](int step) -> een::Status {
    if (compute_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const auto& bucket = layout.buckets()[b];
      std::vector<const float*> data;
      for (size_t off : bucket.chunk_offsets) data.push_back(grads[b].get() + off);
      EEN_RETURN_IF_ERROR(
          (*client)->Push(een::wire::PushKind::GRADIENT, step, bucket.chunks, data, grads[b]));
    }
    if (!buffer_chunks.empty()) {
      if (staging.use_count() > 1) staging = std::make_shared<std::vector<float>>(buffer_floats);
      std::memcpy(staging->data(), module_buffer.data(), buffer_floats * sizeof(float));
      std::vector<const float*> data;
      for (uint32_t c : buffer_chunks) data.push_back(staging->data() + map.chunks()[c].offset);
      EEN_RETURN_IF_ERROR(
          (*client)->Push(een::wire::PushKind::GRADIENT, step, buffer_chunks, data, staging));
    }
    EEN_RETURN_IF_ERROR((*client)->Pull(step + 1, false, sink));
    if (!buffer_chunks.empty()) {
      std::memcpy(module_buffer.data(), params.data() + chunk_at[buffer_chunks[0]],
                  buffer_floats * sizeof(float));
    }
    return een::Status::Ok();
  };
  int recoveries = 0;
  for (int step = first_step; step < warmup + steps; ++step) {
    if (step == std::max(warmup, first_step)) start = een::ResourceUsage::Now();
    const auto t0 = std::chrono::steady_clock::now();
    een::Status s = run_step(step);
    // A lost PS moved the shard map on, as DataParallel recovers: after a
    // failover the same step again (PS drop what they counted already),
    // after a rollback from the snapshot's step.
    while (!s.ok() && (*client)->NeedsRecovery() && recoveries++ < 10) {
      auto r = (*client)->Recover();
      if (!r.ok()) return fail(r.status(), "recovering after a PS was lost");
      if (r->rolled_back) {
        if (auto p = (*client)->Pull(r->step, false, sink); !p.ok()) {
          return fail(p, "pulling after the rollback");
        }
        step = static_cast<int>(r->step);
      }
      s = run_step(step);
    }
    if (!s.ok()) return fail(s, "step");
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    (*client)->ReportProgress(step + 1, std::nullopt, 0, micros, 0);
    if (step >= warmup) out << "step " << micros << '\n';
  }
  const een::ResourceUsage end = een::ResourceUsage::Now();
  out << "resources " << end.cpu_seconds - start.cpu_seconds << ' '
      << end.page_faults - start.page_faults << ' ' << end.peak_rss_mb * 1024 << '\n';
  out.close();
  if (!params_out.empty()) {
    std::ofstream p(params_out + ".rank-" + std::to_string((*client)->rank()), std::ios::binary);
    p.write(reinterpret_cast<const char*>(params.data()),
            static_cast<std::streamsize>(params.size() * sizeof(float)));
    if (!p) return fail(een::Unavailable("cannot write " + params_out), "writing the parameters");
  }
  return (*client)->Finish().ok() ? 0 : 3;
}
