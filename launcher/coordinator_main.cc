// een-coordinator: the control plane of one job. een-launch starts it;
// it writes its address, one line, to --ready-fd once it listens.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "common/job_env.h"
#include "common/logging.h"
#include "common/version.h"
#include "launcher/coordinator.h"
#include "launcher/job_plan.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  if (een::Status s = een::InitLogging("coordinator"); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  een::CoordinatorOptions o;
  CLI::App app{"een-coordinator: the control plane of an EEN job (started by een-launch)"};
  app.set_version_flag("--version", een::kVersionLine);
  int ready_fd = -1;
  long threshold = 500, heartbeat = 100, startup = 120000, progress = 2000;
  app.add_option("--listen", o.listen_address, "address to listen on");
  app.add_option("--ps", o.job.ps,
                 "number of PS processes (0: none, the workers move their own gradients)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--workers", o.job.workers, "number of workers")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-workers", o.job.min_workers, "workers the job needs to go on (0: all)");
  app.add_option("--snapshot-every", o.job.snapshot_every,
                 "PS snapshot period: with it a lost PS rolls the job back instead of ending it");
  app.add_option("--max-restarts", o.job.max_restarts,
                 "replacement workers een-launch may start: a loss below --min-workers waits "
                 "for one instead of ending the job");
  app.add_option("--consistency", o.job.consistency, "bsp, ssp:K or async");
  app.add_option("--dynamic-slicing", o.job.dynamic_slicing, "off or auto")
      ->check(CLI::IsMember({"off", "auto"}));
  app.add_option("--replicas", o.job.replicas, "copies of each shard: 1 or 2")
      ->check(CLI::Range(1, 2));
  app.add_option("--failover-threshold-ms", threshold)->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-ms", heartbeat)->check(CLI::PositiveNumber);
  app.add_option("--liveness", o.job.liveness, "adaptive or fixed (een-launch --liveness)")
      ->check(CLI::IsMember({"adaptive", "fixed"}));
  app.add_option("--startup-timeout-ms", startup)->check(CLI::PositiveNumber);
  app.add_option("--progress-ms", progress)->check(CLI::PositiveNumber);
  app.add_option("--max-chunk-numel", o.job.sharding.max_chunk_numel)->check(CLI::PositiveNumber);
  app.add_option("--shards-per-ps", o.job.sharding.shards_per_ps)->check(CLI::PositiveNumber);
  app.add_option("--ready-fd", ready_fd, "file descriptor to write the address to");
  app.add_option(
      "--torch-store", o.torch_store,
      "per-node launch: node 0's torch.distributed store, HOST:PORT, told to every node");
  app.add_option("--attempt", o.attempt,
                 "the job's restarts before this run: a per-node launch's nodes of another run "
                 "are answered, never counted")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", o.resume, "start from the newest snapshot every PS holds intact");
  app.add_option("--snapshot-dir", o.snapshot_dir,
                 "the job's snapshot folder: the membership history is kept there too");
  app.add_option("--state-dir", o.state_path, "RocksDB for this coordinator's own state");
  app.add_option("--verdict-file", o.verdict_path, "where to write why the job was aborted");
  app.add_option("--lost-file", o.lost_path, "where to add each worker declared lost (RANK PID)");
  app.add_option("--joined-file", o.joined_path,
                 "where to add each worker that joins, replacements too (RANK PID)");
  app.add_option("--metrics-port", o.job.metrics_port,
                 "serve the job's Prometheus metrics at http://HOST:PORT/metrics (0: any port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-host", o.job.metrics_host,
                 "the address the metrics page listens on (default 127.0.0.1)");
  app.add_option("--metrics-token-file", o.job.metrics_token_file,
                 "a file with a token every scrape must send (Authorization: Bearer TOKEN)");
  app.add_flag("--restore", o.restore, "take a running job up again from --state-dir");
  std::string elastic_nodes;
  long last_call = 10000;
  app.add_option("--elastic-nodes", elastic_nodes,
                 "MIN:MAX: an elastic per-node launch (with --ps-per-node, --workers-per-node)");
  app.add_option("--ps-per-node", o.elastic.ps_per_node)->check(CLI::NonNegativeNumber);
  app.add_option("--workers-per-node", o.elastic.workers_per_node)->check(CLI::NonNegativeNumber);
  app.add_option("--last-call-ms", last_call)->check(CLI::PositiveNumber);
  app.add_option("--flight-dir", o.flight_dir,
                 "where flight records go when a step stalls or the job fails (default: a new "
                 "private folder /tmp/een-flight-XXXXXX, made at the first record)");
  app.add_option("--job-settings", o.job_settings,
                 "per-node launch: the job-wide flags every node's een-launch must share");
  CLI11_PARSE(app, argc, argv);
  if (!elastic_nodes.empty()) {
    char tail = 0;
    if (std::sscanf(elastic_nodes.c_str(), "%d:%d%c", &o.elastic.min, &o.elastic.max, &tail) != 2 ||
        o.elastic.min < 1 || o.elastic.max < o.elastic.min) {
      std::fprintf(stderr, "--elastic-nodes '%s' is not MIN:MAX\n", elastic_nodes.c_str());
      return 2;
    }
    o.elastic.last_call = std::chrono::milliseconds(last_call);
  }
  o.job.failover_threshold = std::chrono::milliseconds(threshold);
  o.job.heartbeat_interval = std::chrono::milliseconds(heartbeat);
  o.job.startup_timeout = std::chrono::milliseconds(startup);
  o.job.progress_interval = std::chrono::milliseconds(progress);
  if (auto c = een::Consistency::Parse(o.job.consistency); !c.ok()) {
    std::fprintf(stderr, "--consistency: %s\n", c.status().message().c_str());
    return 2;
  }
  if (o.job.dynamic_slicing == "auto" && o.job.consistency == "async") {
    std::fprintf(stderr, "--dynamic-slicing auto needs --consistency bsp or ssp:K\n");
    return 2;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  if (een::Status s = een::AuthenticateAs("coordinator", "een-coordinator"); !s.ok()) {
    spdlog::error("cannot start: {}", s.message());
    return 2;
  }
  een::Coordinator coordinator(o);
  if (een::Status s = coordinator.Bind(); !s.ok()) {
    spdlog::error("cannot start: {}", s.ToString());
    return 2;
  }
  if (ready_fd >= 0) {
    std::string line = coordinator.address() + "\n";
    if (write(ready_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 2;
    close(ready_fd);
  } else {
    std::printf("%s\n", coordinator.address().c_str());
    std::fflush(stdout);
  }
  een::Status s = coordinator.Run(g_stop);
  if (!s.ok()) {
    spdlog::error("job aborted: {}", s.message());
    return coordinator.wants_every_worker_restarted() ? een::kCoordinatorExitRestartEveryWorker : 3;
  }
  return 0;
}
