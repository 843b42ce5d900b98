// een-bench: measures the runtime against references in the same run, so
// every figure is also a ratio (these machines are shared and noisy).
//
//   een-bench replay TRACE --ps S --workers W [--steps N] [--warmup K]
//                          [--dtype fp32|bf16|fp16] [--transport tcp|ipc|shm]
//                          [--bucket-bytes B] [--no-references] [--rounds R]
//   een-bench apply TRACE [--workers W] [--threads T] [--steps N]
//
// replay:
// 1. een: een-launch starts S PS and W een-bench-worker processes, exactly
//    as a job; each worker pushes a whole step of the trace's gradients in
//    B-byte buckets (25 MB, as DDP) and pulls the new parameters, N
//    measured steps.
// 2. raw ZeroMQ: the same bytes, split between S servers the same way,
//    through plain DEALER/ROUTER sockets with zero-copy frames (raw_exchange.h).
// 3. memcpy: the bytes one worker moves per step (pushed + pulled), copied.
// 4. gloo: torch.distributed all_reduce of the same tensors with S + W
//    processes in 25 MB buckets, when Debian's python3-torch is installed
//    (bench/gloo_allreduce.py); skipped with a line saying so otherwise.
// With --rounds R, 1-4 run R times in turn; the table pools every round's
// steps and the ratios are the median of each round's ratio of medians.
// Prints the median, p10 and p90 sync time per step, GB/s, bytes per step,
// and the CPU seconds, page faults and peak RSS of a worker and of each PS
// over the measured steps.
// apply: the PS's aggregation and optimizer step (apply_command.cc).
#include <CLI/CLI.hpp>

#include "bench/commands.h"
#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{"een-bench: replay real models' communication against references"};
  app.set_version_flag("--version", een::kVersionLine);
  app.require_subcommand(1);

  een::bench::ReplayOptions r;
  auto* replay = app.add_subcommand("replay", "replay a trace (samples/traces/*.trace)");
  replay->add_option("trace", r.trace_path, "trace file")->required()->check(CLI::ExistingFile);
  replay->add_option("--ps", r.ps, "parameter servers")->check(CLI::PositiveNumber);
  replay->add_option("--workers", r.workers, "workers")->check(CLI::PositiveNumber);
  replay->add_option("--steps", r.steps, "measured steps")->check(CLI::PositiveNumber);
  replay->add_option("--warmup", r.warmup, "steps not measured")->check(CLI::NonNegativeNumber);
  replay->add_option("--dtype", r.dtype, "wire dtype")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  replay->add_option("--transport", r.transport, "tcp, ipc or shm (raw ZeroMQ then uses ipc)")
      ->check(CLI::IsMember({"tcp", "ipc", "shm"}));
  replay
      ->add_option("--bucket-bytes", r.bucket_bytes,
                   "gradient bucket size (1: every chunk pushed alone)")
      ->check(CLI::PositiveNumber);
  bool no_references = false;
  replay->add_flag("--no-references", no_references, "run only the runtime");
  replay->add_flag("--compare-insecure", r.compare_insecure,
                   "also run the job with --insecure (no job secret) and print the cost of "
                   "authentication");
  replay->add_flag("--compare-encrypted", r.compare_encrypted,
                   "also run the job with EEN_ENCRYPT=1 (CURVE encryption, what a job beyond "
                   "loopback uses) and print its cost against the default");
  replay->add_flag("--compare-flight-recorder", r.compare_flight_recorder,
                   "also run the job with EEN_FLIGHT_RECORDER=off and print what the flight "
                   "recorder (eenctl debug --trace full) costs");
  replay->add_option("--buffer-floats", r.buffer_floats,
                     "also run with this many buffer floats broadcast each step (ResNet-50's "
                     "BatchNorm statistics: 53173) and print the cost");
  replay->add_option("--rounds", r.rounds, "runtime + references, this many times in turn")
      ->check(CLI::PositiveNumber);

  een::bench::ApplyOptions a;
  auto* apply = app.add_subcommand("apply", "time the PS's aggregation + optimizer step");
  apply->add_option("trace", a.trace_path, "trace file")->required()->check(CLI::ExistingFile);
  apply->add_option("--workers", a.workers, "gradients per chunk")->check(CLI::PositiveNumber);
  apply->add_option("--threads", a.threads, "up to this many apply threads")
      ->check(CLI::PositiveNumber);
  apply->add_option("--steps", a.steps, "measured steps")->check(CLI::PositiveNumber);

  CLI11_PARSE(app, argc, argv);
  if (replay->parsed()) {
    r.references = !no_references;
    return een::bench::RunReplay(r);
  }
  return een::bench::RunApply(a);
}
