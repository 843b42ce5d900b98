// een-bench: replays the communication of a real model through the real
// runtime and, in the same run, through the references, so every figure is
// also a ratio.
//
//   een-bench replay TRACE --ps S --workers W [--steps N] [--warmup K]
//                          [--dtype fp32] [--transport tcp|ipc]
//
// 1. een: een-launch starts S PS and W een-bench-worker processes, exactly
//    as a job; each worker pushes a whole step of the trace's gradients in
//    25 MB buckets and pulls the new parameters, N measured steps.
// 2. raw ZeroMQ: the same bytes, split between S servers the same way,
//    through plain DEALER/ROUTER sockets with zero-copy frames (raw_exchange.h).
// 3. memcpy: the bytes one worker moves per step (pushed + pulled), copied.
// 4. gloo: torch.distributed all_reduce of the same tensors with W processes
//    in 25 MB buckets, when Debian's python3-torch is installed
//    (bench/gloo_allreduce.py); skipped with a line saying so otherwise.
// Prints the median, p10 and p90 sync time per step, GB/s, bytes per step,
// and the CPU seconds, page faults and peak RSS of a worker and of each PS.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "bench/raw_exchange.h"
#include "bench/trace.h"

namespace {

struct Summary {
  double median = 0, p10 = 0, p90 = 0;  // milliseconds
};

Summary Summarize(std::vector<double> micros) {
  Summary s;
  if (micros.empty()) return s;
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[std::min(micros.size() - 1, size_t(q * micros.size()))] / 1000; };
  s.median = at(0.5);
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  return s;
}

std::string BinDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, n)).parent_path().string();
}

void Row(const char* what, const Summary& s, double bytes) {
  std::printf("%-22s %9.2f %9.2f %9.2f %9.2f\n", what, s.median, s.p10, s.p90,
              s.median > 0 ? bytes / (s.median / 1000) / 1e9 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"een-bench: replay real models' communication against references"};
  app.require_subcommand(1);
  auto* replay = app.add_subcommand("replay", "replay a trace (samples/traces/*.trace)");
  std::string trace_path, dtype = "fp32", transport = "tcp";
  int ps = 1, workers = 1, steps = 20, warmup = 3;
  replay->add_option("trace", trace_path, "trace file")->required()->check(CLI::ExistingFile);
  replay->add_option("--ps", ps, "parameter servers")->check(CLI::PositiveNumber);
  replay->add_option("--workers", workers, "workers")->check(CLI::PositiveNumber);
  replay->add_option("--steps", steps, "measured steps")->check(CLI::PositiveNumber);
  replay->add_option("--warmup", warmup, "steps not measured")->check(CLI::NonNegativeNumber);
  replay->add_option("--dtype", dtype, "wire dtype")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  replay->add_option("--transport", transport, "tcp or ipc")->check(CLI::IsMember({"tcp", "ipc"}));
  CLI11_PARSE(app, argc, argv);
  if (dtype != "fp32") {
    std::fprintf(stderr, "een-bench: --dtype %s is not available yet (the wire carries fp32 only)\n",
                 dtype.c_str());
    return 2;
  }
  auto trace = een::bench::ReadTrace(trace_path);
  if (!trace.ok()) {
    std::fprintf(stderr, "een-bench: %s\n", trace.status().message().c_str());
    return 2;
  }
  char tmpl[] = "/tmp/een-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 2;
  const std::string work = tmpl;
  const std::string bin = BinDir();
  const double model_bytes = trace->TotalNumel() * 4.0;
  const double step_bytes = 2 * model_bytes;  // per worker: push + pull
  std::printf("een-bench replay %s: %zu tensors, %.1f MB fp32; %d PS, %d worker(s), %s, %d steps "
              "(+%d warm-up)\n",
              trace->name.c_str(), trace->backward.size(), model_bytes / 1e6, ps, workers,
              transport.c_str(), steps, warmup);

  // 1. The runtime, launched as a job.
  std::filesystem::create_directories(work + "/een");
  std::ostringstream cmd;
  cmd << bin << "/een-launch --ps " << ps << " --workers " << workers << " --transport "
      << transport << " --progress-interval 3600s -- " << bin << "/een-bench-worker " << trace_path
      << " --steps " << steps << " --warmup " << warmup << " --report " << work << "/een > "
      << work << "/job.log 2>&1";
  const auto job_start = std::chrono::steady_clock::now();
  if (std::system(cmd.str().c_str()) != 0) {
    std::fprintf(stderr, "een-bench: the replay job failed; its output:\n");
    std::ifstream log(work + "/job.log");
    std::fprintf(stderr, "%s", std::string(std::istreambuf_iterator<char>(log), {}).c_str());
    return 1;
  }
  (void)job_start;
  std::vector<double> een_times;
  double cpu = 0, faults = 0, rss_kb = 0;
  for (int w = 0; w < workers; ++w) {
    std::ifstream in(work + "/een/worker-" + std::to_string(w) + ".txt");
    std::string kind;
    while (in >> kind) {
      if (kind == "step") {
        double t;
        in >> t;
        een_times.push_back(t);
      } else if (kind == "resources") {
        double c, f, r;
        in >> c >> f >> r;
        cpu += c / workers;
        faults += f / workers;
        rss_kb = std::max(rss_kb, r);
      }
    }
  }
  // 2. Raw ZeroMQ with the same sharding.
  een::ShardingOptions sharding;
  std::vector<std::string> addresses(ps, "tcp://0:0");
  auto map = een::ShardMap::Build(trace->Parameters(), ps, sharding, addresses);
  if (!map.ok()) return 2;
  een::bench::RawExchangeOptions raw;
  raw.chunk_bytes.resize(ps);
  for (const een::Chunk& c : map->chunks()) {
    raw.chunk_bytes[map->OwnerOfChunk(&c - map->chunks().data())].push_back(c.numel * 4ull);
  }
  raw.workers = workers;
  raw.steps = steps;
  raw.warmup = warmup;
  raw.transport = transport;
  raw.work_dir = work;
  auto raw_times = een::bench::RunRawExchange(raw);
  if (!raw_times.ok()) {
    std::fprintf(stderr, "een-bench: %s\n", raw_times.status().message().c_str());
    return 1;
  }
  // 3. memcpy of the bytes one worker moves per step.
  std::vector<char> src(size_t(model_bytes), 1), dst(size_t(model_bytes), 0);
  std::vector<double> copy_times;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), src.size());  // push
    std::memcpy(src.data(), dst.data(), dst.size());  // pull
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) copy_times.push_back(us);
  }

  const Summary een = Summarize(een_times), zmq = Summarize(*raw_times),
                copy = Summarize(copy_times);
  std::printf("\n%-22s %9s %9s %9s %9s\n", "sync time per step", "median", "p10", "p90", "GB/s");
  std::printf("%-22s %9s %9s %9s %9s\n", "", "ms", "ms", "ms", "");
  Row("een push+pull", een, step_bytes);
  Row("raw ZeroMQ", zmq, step_bytes);
  Row("memcpy", copy, step_bytes);
  // 4. gloo, when torch is there: as many processes as the PS job has.
  Summary gloo;
  const int gloo_processes = ps + workers;
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0) {
    std::ostringstream g;
    g << "/usr/bin/python3 " << EEN_BENCH_SOURCE_DIR << "/gloo_allreduce.py " << trace_path << ' '
      << gloo_processes << ' ' << steps << ' ' << warmup << " > " << work << "/gloo.txt 2>&1";
    std::vector<double> gloo_times;
    if (std::system(g.str().c_str()) == 0) {
      std::ifstream in(work + "/gloo.txt");
      std::string kind;
      for (double t; in >> kind >> t;) gloo_times.push_back(t);
      gloo = Summarize(gloo_times);
      char label[64];
      std::snprintf(label, sizeof label, "gloo all_reduce x%d", gloo_processes);
      Row(label, gloo, step_bytes);
    } else {
      std::printf("gloo all_reduce: failed (see %s/gloo.txt)\n", work.c_str());
    }
  } else {
    std::printf("gloo all_reduce: skipped (needs /usr/bin/python3 with torch: apt-get install "
                "python3-torch)\n");
  }
  std::printf("\nratios (median): een / raw ZeroMQ = %.2fx, een / memcpy = %.1fx", 
              zmq.median > 0 ? een.median / zmq.median : 0.0,
              copy.median > 0 ? een.median / copy.median : 0.0);
  if (gloo.median > 0) std::printf(", een / gloo x%d = %.2fx", gloo_processes, een.median / gloo.median);
  std::printf("\n");
  std::printf("bytes per step per worker: %.1f MB (push %.1f MB + pull %.1f MB)\n",
              step_bytes / 1e6, model_bytes / 1e6, model_bytes / 1e6);
  std::printf("worker: %.3f CPU s/step, %.0f page faults/step (%.2f%% of the %.0f pages moved), "
              "peak RSS %.1f MB\n",
              cpu / steps, faults / steps, 100.0 * (faults / steps) / (step_bytes / 4096),
              step_bytes / 4096, rss_kb / 1024);
  std::ifstream log(work + "/job.log");
  const std::regex ps_line("\\[(ps [0-9]+)\\].*resources: cpu ([0-9.]+) s, ([0-9]+) page faults, "
                           "peak RSS ([0-9.]+) MB");
  for (std::string line; std::getline(log, line);) {
    std::smatch m;
    if (std::regex_search(line, m, ps_line)) {
      std::printf("%s: %.3f CPU s/step, %.0f page faults/step (whole run incl. start-up / %d "
                  "steps), peak RSS %s MB\n",
                  m[1].str().c_str(), std::stod(m[2]) / (steps + warmup),
                  std::stod(m[3]) / (steps + warmup), steps + warmup, m[4].str().c_str());
    }
  }
  std::filesystem::remove_all(work);
  return 0;
}
