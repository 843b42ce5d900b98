// een-bench replay: see een_bench.cc for what it runs and prints.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "bench/commands.h"
#include "bench/raw_exchange.h"
#include "bench/report.h"
#include "bench/trace.h"
#include "common/wire_dtype.h"

namespace een::bench {
namespace {

struct RoleUsage {
  std::vector<double> step_micros;
  double cpu_per_step = 0, faults_per_step = 0, peak_rss_kb = 0;  // mean over workers; max RSS
};

// The job's workers' reports: "step MICROS" lines and one "resources" line.
RoleUsage ReadWorkerReports(const std::string& dir, int workers, int steps) {
  RoleUsage u;
  for (int w = 0; w < workers; ++w) {
    std::ifstream in(dir + "/worker-" + std::to_string(w) + ".txt");
    std::string kind;
    while (in >> kind) {
      if (kind == "step") {
        double t;
        in >> t;
        u.step_micros.push_back(t);
      } else if (kind == "resources") {
        double c, f, r;
        in >> c >> f >> r;
        u.cpu_per_step += c / workers / steps;
        u.faults_per_step += f / workers / steps;
        u.peak_rss_kb = std::max(u.peak_rss_kb, r);
      }
    }
  }
  return u;
}

// gloo_allreduce.py: installed beside the binaries (PREFIX/share/een/bench),
// else in this source tree.
std::string GlooScript() {
  const auto installed =
      std::filesystem::path(BinDir()).parent_path() / "share/een/bench/gloo_allreduce.py";
  if (std::filesystem::exists(installed)) return installed.string();
  return std::string(EEN_BENCH_SOURCE_DIR) + "/gloo_allreduce.py";
}

// gloo all_reduce of the trace's tensors with `processes` processes: its
// step times, or none (and a line saying why) when torch is missing or it failed.
std::vector<double> RunGloo(const ReplayOptions& o, int processes, const std::string& work) {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) {
    std::printf(
        "gloo all_reduce: skipped (needs /usr/bin/python3 with torch: apt-get install "
        "python3-torch)\n");
    return {};
  }
  std::ostringstream g;
  g << "/usr/bin/python3 " << GlooScript() << ' ' << o.trace_path << ' ' << processes << ' '
    << o.steps << ' ' << o.warmup << " > " << work << "/gloo.txt 2>&1";
  if (std::system(g.str().c_str()) != 0) {
    std::printf("gloo all_reduce: failed (see %s/gloo.txt)\n", work.c_str());
    return {};
  }
  std::vector<double> times;
  std::ifstream in(work + "/gloo.txt");
  std::string kind;
  for (double t; in >> kind >> t;) times.push_back(t);
  return times;
}

// Each PS's resource use over the measured steps: the difference between
// its exit line and the line it logs on reaching the first measured step
// (EEN_RESOURCES_AT_STEP), so start-up is not counted.
void PrintPsUsage(const std::string& log_path, int steps) {
  std::ifstream log(log_path);
  const std::regex line_re(
      "\\[(ps [0-9]+)\\](.*)resources: cpu ([0-9.]+) s, ([0-9]+) page faults, "
      "peak RSS ([0-9.]+) MB");
  std::map<std::string, std::array<double, 3>> mark;
  for (std::string line; std::getline(log, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, line_re)) continue;
    const std::array<double, 3> now{std::stod(m[3]), std::stod(m[4]), std::stod(m[5])};
    if (m[2].str().find("at step") != std::string::npos) {
      mark[m[1]] = now;
      continue;
    }
    const auto base = mark.count(m[1]) ? mark[m[1]] : std::array<double, 3>{0, 0, 0};
    std::printf("%s: %.3f CPU s/step, %.0f page faults/step%s, peak RSS %.1f MB\n",
                m[1].str().c_str(), (now[0] - base[0]) / steps, (now[1] - base[1]) / steps,
                mark.count(m[1]) ? "" : " (start-up included)", now[2]);
  }
}

// One round: the job, then the references, each with its step times.
struct Round {
  RoleUsage worker;
  std::vector<double> zmq, copy, gloo, buffers, insecure, encrypted, unrecorded;
  Summary een_s, zmq_s, copy_s, gloo_s, buffers_s, insecure_s, encrypted_s, unrecorded_s;
};

// What a job of a round differs in from the default one.
struct Variant {
  size_t buffer_floats = 0;
  bool insecure = false;    // een-launch --insecure
  bool encrypted = false;   // EEN_ENCRYPT=1: CURVE on loopback too
  bool unrecorded = false;  // EEN_FLIGHT_RECORDER=off
};

// Runs the job as een-launch would; false (and its output printed) if it failed.
bool RunJob(const ReplayOptions& o, const std::string& bin, const std::string& work,
            const Variant& v = {}) {
  std::filesystem::remove_all(work + "/een");
  std::filesystem::create_directories(work + "/een");
  std::ostringstream cmd;
  cmd << "EEN_BUCKET_BYTES=" << o.bucket_bytes << " EEN_RESOURCES_AT_STEP=" << o.warmup
      << (v.encrypted ? " EEN_ENCRYPT=1 " : " ") << (v.unrecorded ? "EEN_FLIGHT_RECORDER=off " : "")
      << bin << "/een-launch --ps " << o.ps << " --workers " << o.workers << " --transport "
      << o.transport << " --wire-dtype " << o.dtype << (v.insecure ? " --insecure" : "")
      << " --progress-interval 3600s -- " << bin << "/een-bench-worker " << o.trace_path
      << " --steps " << o.steps << " --warmup " << o.warmup << " --buffer-floats "
      << v.buffer_floats << " --report " << work << "/een > " << work << "/job.log 2>&1";
  if (std::system(cmd.str().c_str()) == 0) return true;
  std::fprintf(stderr, "een-bench: the replay job failed; its output:\n");
  std::ifstream log(work + "/job.log");
  std::fprintf(stderr, "%s", std::string(std::istreambuf_iterator<char>(log), {}).c_str());
  return false;
}

double Ratio(const Summary& a, const Summary& b) { return b.median > 0 ? a.median / b.median : 0; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int RunReplay(const ReplayOptions& o) {
  auto wire = ParseWireType(o.dtype);
  if (!wire.ok()) {
    std::fprintf(stderr, "een-bench: %s\n", wire.status().message().c_str());
    return 2;
  }
  auto trace = ReadTrace(o.trace_path);
  if (!trace.ok()) {
    std::fprintf(stderr, "een-bench: %s\n", trace.status().message().c_str());
    return 2;
  }
  char tmpl[] = "/tmp/een-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 2;
  const std::string work = tmpl;
  const std::string bin = BinDir();
  // The bytes on the wire: the references move the same (gloo: fp32 always).
  const double model_bytes = trace->TotalNumel() * double(WireBytes(*wire));
  const double step_bytes = 2 * model_bytes;  // per worker: push + pull
  std::printf(
      "een-bench replay %s: %zu tensors, %.1f MB as %s; %d PS, %d worker(s), %s, "
      "buckets of %zu bytes, %d steps (+%d warm-up)%s\n",
      trace->name.c_str(), trace->backward.size(), model_bytes / 1e6, o.dtype.c_str(), o.ps,
      o.workers, o.transport.c_str(), o.bucket_bytes, o.steps, o.warmup,
      o.rounds > 1 ? fmt::format(", {} rounds", o.rounds).c_str() : "");
  const int gloo_processes = o.ps + o.workers;  // as many processes as the PS job has
  RawExchangeOptions raw;
  if (o.references) {
    std::vector<std::string> addresses(o.ps, "tcp://0:0");
    auto map = ShardMap::Build(trace->Parameters(), o.ps, ShardingOptions{}, addresses);
    if (!map.ok()) return 2;
    raw.chunk_bytes.resize(o.ps);
    for (uint32_t c = 0; c < map->chunks().size(); ++c) {
      raw.chunk_bytes[map->OwnerOfChunk(c)].push_back(map->chunks()[c].numel * WireBytes(*wire));
    }
    raw.workers = o.workers;
    raw.bucket_bytes = o.bucket_bytes;
    raw.steps = o.steps;
    raw.warmup = o.warmup;
    raw.transport = o.transport == "shm" ? "ipc" : o.transport;  // ZeroMQ has no shm
    raw.work_dir = work;
  }

  // Rounds, each the runtime and then every reference, so a noisy moment
  // of the machine falls on all of them alike.
  std::vector<Round> rounds(o.rounds);
  std::vector<double> een_all, zmq_all, copy_all, gloo_all, buffers_all, insecure_all,
      encrypted_all, unrecorded_all;
  for (Round& r : rounds) {
    // 1. The runtime, launched as a job.
    if (!RunJob(o, bin, work)) return 1;
    r.worker = ReadWorkerReports(work + "/een", o.workers, o.steps);
    r.een_s = Summarize(r.worker.step_micros);
    een_all.insert(een_all.end(), r.worker.step_micros.begin(), r.worker.step_micros.end());
    if (o.compare_insecure) {  // the same job without authentication
      if (!RunJob(o, bin, work, {.insecure = true})) return 1;
      r.insecure = ReadWorkerReports(work + "/een", o.workers, o.steps).step_micros;
      r.insecure_s = Summarize(r.insecure);
      insecure_all.insert(insecure_all.end(), r.insecure.begin(), r.insecure.end());
    }
    if (o.compare_encrypted) {  // the same job encrypted (CURVE), as beyond loopback
      if (!RunJob(o, bin, work, {.encrypted = true})) return 1;
      r.encrypted = ReadWorkerReports(work + "/een", o.workers, o.steps).step_micros;
      r.encrypted_s = Summarize(r.encrypted);
      encrypted_all.insert(encrypted_all.end(), r.encrypted.begin(), r.encrypted.end());
    }
    if (o.compare_flight_recorder) {  // the same job with the flight recorder off
      if (!RunJob(o, bin, work, {.unrecorded = true})) return 1;
      r.unrecorded = ReadWorkerReports(work + "/een", o.workers, o.steps).step_micros;
      r.unrecorded_s = Summarize(r.unrecorded);
      unrecorded_all.insert(unrecorded_all.end(), r.unrecorded.begin(), r.unrecorded.end());
    }
    if (o.buffer_floats > 0) {  // the same job with rank 0's buffers broadcast each step
      if (!RunJob(o, bin, work, {.buffer_floats = o.buffer_floats})) return 1;
      r.buffers = ReadWorkerReports(work + "/een", o.workers, o.steps).step_micros;
      r.buffers_s = Summarize(r.buffers);
      buffers_all.insert(buffers_all.end(), r.buffers.begin(), r.buffers.end());
    }
    if (!o.references) continue;
    // 2. Raw ZeroMQ with the same sharding.
    auto raw_times = RunRawExchange(raw);
    if (!raw_times.ok()) {
      std::fprintf(stderr, "een-bench: %s\n", raw_times.status().message().c_str());
      return 1;
    }
    r.zmq = *raw_times;
    // 3. memcpy of the bytes one worker moves per step (push + pull).
    r.copy = TimeMemcpy(size_t(model_bytes), 2, o.warmup, o.steps);
    // 4. gloo, when torch is there.
    r.gloo = RunGloo(o, gloo_processes, work);
    r.zmq_s = Summarize(r.zmq), r.copy_s = Summarize(r.copy), r.gloo_s = Summarize(r.gloo);
    zmq_all.insert(zmq_all.end(), r.zmq.begin(), r.zmq.end());
    copy_all.insert(copy_all.end(), r.copy.begin(), r.copy.end());
    gloo_all.insert(gloo_all.end(), r.gloo.begin(), r.gloo.end());
  }

  std::printf("\n%-24s %9s %9s %9s %9s\n", "sync time per step", "median", "p10", "p90", "GB/s");
  std::printf("%-24s %9s %9s %9s %9s\n", "", "ms", "ms", "ms", "");
  Row("een push+pull", Summarize(een_all), step_bytes);
  if (o.compare_insecure) {
    Row("een --insecure", Summarize(insecure_all), step_bytes);
    std::vector<double> cost;
    for (const Round& r : rounds) cost.push_back(Ratio(r.een_s, r.insecure_s));
    std::printf("authenticated (the default) / --insecure = %.3fx (%s)\n", Median(cost),
                o.rounds > 1 ? fmt::format("median of {} rounds", o.rounds).c_str() : "median");
  }
  if (o.compare_encrypted) {
    Row("een encrypted (CURVE)", Summarize(encrypted_all), step_bytes);
    std::vector<double> cost;
    for (const Round& r : rounds) cost.push_back(Ratio(r.encrypted_s, r.een_s));
    std::printf(
        "encrypted (CURVE, as beyond loopback) / authenticated (PLAIN, loopback) = %.3fx "
        "(%s)\n",
        Median(cost),
        o.rounds > 1 ? fmt::format("median of {} rounds", o.rounds).c_str() : "median");
  }
  if (o.compare_flight_recorder) {
    Row("een, recorder off", Summarize(unrecorded_all), step_bytes);
    std::vector<double> cost;
    for (const Round& r : rounds) cost.push_back(Ratio(r.een_s, r.unrecorded_s));
    std::printf("flight recorder on (the default) / off = %.3fx (%s)\n", Median(cost),
                o.rounds > 1 ? fmt::format("median of {} rounds", o.rounds).c_str() : "median");
  }
  if (o.buffer_floats > 0) {
    const double buffer_bytes = 2.0 * o.buffer_floats * sizeof(float);
    Row("een + buffers broadcast", Summarize(buffers_all), step_bytes + buffer_bytes);
    std::vector<double> cost;
    for (const Round& r : rounds) cost.push_back(Ratio(r.buffers_s, r.een_s));
    std::printf(
        "buffers broadcast each step (%zu floats, %.2f MB pushed + pulled per worker): "
        "%.3fx the step without them (%s), %+.2f ms\n",
        o.buffer_floats, buffer_bytes / 1e6, Median(cost),
        o.rounds > 1 ? fmt::format("median of {} rounds", o.rounds).c_str() : "median",
        Summarize(buffers_all).median - Summarize(een_all).median);
  }
  if (o.references) {
    Row(o.transport == "shm" ? "raw ZeroMQ (ipc)" : "raw ZeroMQ", Summarize(zmq_all), step_bytes);
    Row("memcpy", Summarize(copy_all), step_bytes);
    char label[64];
    std::snprintf(label, sizeof label, "gloo all_reduce x%d%s", gloo_processes,
                  *wire == WireType::kF32 ? "" : " fp32");
    if (!gloo_all.empty()) Row(label, Summarize(gloo_all), 2.0 * trace->TotalNumel() * 4);
    // Each round's ratio of medians; with several rounds, their median.
    std::vector<double> to_zmq, to_copy, to_gloo;
    for (const Round& r : rounds) {
      to_zmq.push_back(Ratio(r.een_s, r.zmq_s));
      to_copy.push_back(Ratio(r.een_s, r.copy_s));
      if (r.gloo_s.median > 0) to_gloo.push_back(Ratio(r.een_s, r.gloo_s));
    }
    if (o.rounds > 1) {
      std::printf("\nratios of each round's medians:\n");
      auto list = [](const char* what, const std::vector<double>& v) {
        if (v.empty()) return;
        std::printf("  %-20s", what);
        for (double x : v) std::printf(" %.2fx", x);
        std::printf("\n");
      };
      list("een / raw ZeroMQ", to_zmq);
      list("een / memcpy", to_copy);
      list(fmt::format("een / gloo x{}", gloo_processes).c_str(), to_gloo);
    }
    std::printf("\nratios (%s): een / raw ZeroMQ = %.2fx, een / memcpy = %.1fx",
                o.rounds > 1 ? fmt::format("median of {} rounds", o.rounds).c_str() : "median",
                Median(to_zmq), Median(to_copy));
    if (!to_gloo.empty()) {
      std::printf(", een / gloo x%d = %.2fx", gloo_processes, Median(to_gloo));
    }
    std::printf("\n");
  }
  std::printf("bytes on the wire per step per worker: %.1f MB (push %.1f MB + pull %.1f MB)\n",
              step_bytes / 1e6, model_bytes / 1e6, model_bytes / 1e6);
  const RoleUsage& worker = rounds.back().worker;
  std::printf(
      "%s: %.3f CPU s/step, %.0f page faults/step (%.2f%% of the %.0f pages moved), "
      "peak RSS %.1f MB\n",
      o.rounds > 1 ? "worker (last round)" : "worker", worker.cpu_per_step, worker.faults_per_step,
      100.0 * worker.faults_per_step / (step_bytes / 4096), step_bytes / 4096,
      worker.peak_rss_kb / 1024);
  PrintPsUsage(work + "/job.log", o.steps);
  std::filesystem::remove_all(work);
  return 0;
}

}  // namespace een::bench
