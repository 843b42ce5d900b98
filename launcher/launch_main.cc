// een-launch: start a whole EEN job with one command.
//
//   een-launch --ps 2 --workers 4 [--config job.yaml] [flags] -- PROGRAM ARGS...
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "common/job_config.h"
#include "common/logging.h"
#include "common/private_folder.h"
#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/version.h"
#include "launcher/forwarded_environment.h"
#include "launcher/local_job.h"
#include "launcher/node_launch.h"
#include "launcher/slurm_step.h"
#include "launcher/ssh_job.h"
#include "launcher/torchrun_flags.h"

namespace {

std::string BinaryDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return std::filesystem::path(buf).parent_path().string();
}

// One line, so that whoever reports only the last (the ssh backend, a
// node's verdict) reports the reason.
int Usage(const std::string& message) {
  std::fprintf(stderr, "een-launch: %s (`een-launch --help` lists the options)\n", message.c_str());
  return 2;
}

// Why folder `dir` does not take files ("" when it does), for `what`
// (which `flag` names).
std::string WritableFolderProblem(const std::filesystem::path& dir, const std::string& what,
                                  const std::string& flag) {
  std::error_code ec;
  een::MakePrivateFolder(dir, ec);  // snapshots hold the model
  const std::filesystem::path probe = dir / (".een-write-check-" + std::to_string(getpid()));
  FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (!f) {
    return what + " " + dir.string() + " is not writable (" +
           (ec ? ec.message() : std::string(std::strerror(errno))) +
           "): fix its permissions or free space, or give another one with " + flag;
  }
  std::fclose(f);
  std::filesystem::remove(probe, ec);
  return "";
}

// --snapshot-dir alone keeps no snapshots: said, as a user who gives a folder expects some.
void WarnOfSnapshotFolderAlone(const een::JobConfig& config, const std::string& flag) {
  if (flag.empty() || config.snapshot_every > 0 || config.resume) return;
  std::fprintf(stderr,
               "[een-launch] warning: --snapshot-dir %s without --snapshot-every N: the job keeps "
               "no snapshots there (no rollback after a lost PS, no `eenctl snapshot` or "
               "export); add --snapshot-every N\n",
               flag.c_str());
}

// Snapshots need a folder that takes files: said before anything starts,
// not by every PS once the job runs; so do flight records, not at the
// first stall. Empty when they do.
std::string FolderProblem(const een::JobConfig& config) {
  if (std::string problem =
          config.flight_dir.empty()
              ? ""
              : WritableFolderProblem(config.flight_dir, "flight-record folder", "--flight-dir");
      !problem.empty()) {
    return problem;
  }
  if (config.snapshot_every == 0 && !config.resume) return "";
  return WritableFolderProblem(config.snapshot_dir, "snapshot folder", "--snapshot-dir");
}

// A new job (not --resume) whose snapshot folder holds an earlier run's
// snapshots would mix its own with them: refused before anything starts.
std::string EarlierSnapshotsProblem(const een::JobConfig& config) {
  if (config.snapshot_every == 0 || config.resume) return "";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(config.snapshot_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ps-", 0) != 0 || !entry.is_directory(ec)) continue;
    if (std::filesystem::is_empty(entry.path(), ec)) continue;
    return "snapshot folder " + config.snapshot_dir + " holds the snapshots of an earlier run (" +
           entry.path().string() + "): go on from them with --resume " + config.snapshot_dir +
           ", give this job another folder with --snapshot-dir, or delete them first";
  }
  return "";
}

// A job over many hosts: auto (shared memory within a host, tcp between
// hosts) unless tcp was asked for; ipc and shm reach one host only.
std::string ManyHostsTransportProblem(een::JobConfig* config) {
  if (!config->transport_set) config->transport = "auto";
  if (config->transport == "auto" || config->transport == "tcp") return "";
  if (een::Status s = een::transport::CheckTransport(config->transport, "--transport", false);
      !s.ok()) {
    return s.message();
  }
  return "--transport " + config->transport +
         " reaches roles of one host only; a job over many hosts uses auto (the default: shared "
         "memory between roles of one host, tcp between hosts) or tcp";
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after "--" is the worker command, untouched.
  std::vector<std::string> command;
  int own_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      own_argc = i;
      command.assign(argv + i + 1, argv + argc);
      break;
    }
  }

  // torchrun's spellings become een-launch's (or are refused, saying what to write).
  std::vector<std::string> own_args(argv + 1, argv + own_argc);
  if (een::Status s = een::TranslateTorchrunFlags(&own_args); !s.ok()) return Usage(s.message());
  if (!command.empty()) {
    if (std::string problem = een::ProgramProblem(command[0]); !problem.empty()) {
      return Usage(problem);
    }
  }

  CLI::App app{
      "een-launch: start an EEN job (coordinator, parameter servers, workers).\n"
      "Usage: een-launch --ps N --workers M [options] -- PROGRAM ARGS..."};
  app.allow_extras();  // what is left is explained below (a typo, a forgotten --)
  app.set_version_flag("--version", een::kVersionLine);
  std::string config_path, threshold, heartbeat, startup, progress, step_timeout, transport, host;
  std::string backend = "auto";
  int ps = 0, workers = 0;
  // Counts are checked after parsing, so each error says "--ps must be at least 1".
  auto* ps_opt = app.add_option("--ps", ps,
                                "number of parameter-server processes (>= 1; 0: none, for a "
                                "program that moves its own gradients, like a gloo DDP script)");
  auto* workers_opt = app.add_option("--workers", workers, "number of worker processes (>= 1)");
  int nproc_per_node = 0;
  auto* nproc_opt = app.add_option(
      "--nproc-per-node", nproc_per_node,
      "torchrun's spelling (also --nproc_per_node): --workers on one host, --workers-per-node "
      "with --nnodes");
  std::string master_addr, c10d_store;
  int master_port = -1;
  auto* master_addr_opt = app.add_option(
      "--master-addr", master_addr,
      "torchrun's spelling: with --nnodes, node 0's address where the nodes meet (--rdzv "
      "ADDR:PORT with --master-port, default 29500); on one host, --host");
  auto* master_port_opt =
      app.add_option("--master-port", master_port,
                     "with --nnodes: the port where the nodes meet (see --master-addr); on one "
                     "host: the port of the workers' torch.distributed store (MASTER_PORT; "
                     "default: any free port)")
          ->check(CLI::Range(0, 65535));
  app.add_option("--c10d-store", c10d_store,
                 "on (default): een-launch hosts the c10d store that torch.distributed's "
                 "init_process_group meets at (the workers' MASTER_ADDR:MASTER_PORT, "
                 "unauthenticated, as torchrun's); off: none")
      ->check(CLI::IsMember({"on", "off"}));
  int min_workers = 0;
  auto* min_opt = app.add_option("--min-workers", min_workers,
                                 "go on without lost workers while this many live (default: all)");
  app.add_option("--config", config_path, "job spec (YAML); flags override its fields")
      ->check(CLI::ExistingFile);
  std::vector<std::string> env_flags;
  app.add_option("--env", env_flags,
                 "NAME=VALUE, or NAME (its value here): set in every role's environment, on "
                 "every host (as mpirun -x); repeat for more")
      ->allow_extra_args(false);
  app.add_option("--failover-threshold", threshold,
                 "silence after which a process is lost (default 500ms)");
  std::string liveness;
  app.add_option("--liveness", liveness,
                 "adaptive: a process whose heartbeats come irregularly (a busy machine) is "
                 "allowed up to 3x the failover threshold; fixed: exactly the threshold "
                 "(default adaptive)");
  app.add_option("--heartbeat-interval", heartbeat, "heartbeat period (default 100ms)");
  app.add_option("--startup-timeout", startup, "time for every role to register (default 120s)");
  app.add_option("--progress-interval", progress, "progress line period (default 2s)");
  app.add_option("--step-timeout", step_timeout,
                 "a step waiting this long for a worker's gradients ends the job, naming the "
                 "worker (default 30min)");
  app.add_option(
      "--transport", transport,
      "data plane: auto (the default: shared memory between roles of one host, tcp between "
      "hosts, per pair), tcp, ipc or shm (one host only: payloads through shared memory)");
  std::string wire_dtype;
  app.add_option("--wire-dtype", wire_dtype,
                 "gradients and parameters on the wire: fp32, bf16 or fp16 (default fp32; the "
                 "PS keep fp32 master values)");
  std::string consistency;
  app.add_option("--consistency", consistency,
                 "bsp (default: every step waits for every worker), ssp:K (a worker may start "
                 "step t once every worker completed step t-K; gradients applied as they "
                 "arrive) or async (no waiting)");
  std::string dynamic_slicing;
  app.add_option("--dynamic-slicing", dynamic_slicing,
                 "off (default) or auto (bsp or ssp:K): each step's global batch is shared out "
                 "in proportion to each worker's measured speed (DataParallel::batch_slice)");
  app.add_option("--host", host, "address the roles listen on (default 127.0.0.1)");
  app.add_option("--backend", backend,
                 "where roles run: auto (slurm inside an srun step, else local), local (every role "
                 "on this machine), slurm (one een-launch per node of the srun step)");
  // Per-node launch (torchrun style): one een-launch on each host.
  std::string nnodes_text, new_secret;
  een::NodeLaunchFlags node_flags;
  auto* nnodes_opt = app.add_option(
      "--nnodes", nnodes_text,
      "per-node launch: the job spans N hosts, one een-launch on each (with --node-rank, "
      "--rdzv, --ps-per-node, --workers-per-node); MIN:MAX for an elastic job (it starts with "
      "MIN to MAX nodes, later ones join it while it runs)");
  std::string last_call;
  app.add_option("--rdzv-last-call", last_call,
                 "--nnodes MIN:MAX: once MIN nodes met, the job starts when this passes without "
                 "another node (default 10s)");
  auto* node_rank_opt = app.add_option("--node-rank", node_flags.node_rank,
                                       "this host's node rank, 0..N-1 (node 0 runs the "
                                       "coordinator; ranks are node-rank-major)");
  app.add_option("--rdzv", node_flags.rdzv,
                 "HOST:PORT where the launchers meet: node 0's address and a free port");
  auto* ps_per_node_opt =
      app.add_option("--ps-per-node", node_flags.ps_per_node, "PS processes on each node");
  auto* workers_per_node_opt = app.add_option("--workers-per-node", node_flags.workers_per_node,
                                              "worker processes on each node");
  app.add_option("--secret-file", node_flags.secret_file,
                 "the job secret every node shares (mode 0600; or EEN_JOB_SECRET=TEXT)");
  app.add_option("--node-ps", node_flags.ps_share,
                 "per-node launch: this node's PS ranks, FIRST:COUNT of --ps (the ssh backend's)");
  app.add_option("--node-workers", node_flags.workers_share,
                 "per-node launch: this node's worker ranks, FIRST:COUNT of --workers");
  app.add_flag("--stdin-secret", node_flags.stdin_secret,
               "per-node launch started over ssh: the job secret is stdin's first line, and "
               "stdin closing ends the job (the ssh backend's)");
  app.add_flag("--stdin-env", node_flags.stdin_env,
               "per-node launch started over ssh: the launching host's environment follows on "
               "stdin (the ssh backend's)");
  std::string hostfile, ssh_args;
  int rdzv_port = 29500;
  auto* hostfile_opt = app.add_option(
      "--hostfile", hostfile,
      "ssh backend: start the job on these hosts (`HOST [slots=N]` per line; the first runs the "
      "coordinator) over OpenSSH, with --ps and --workers for the whole job");
  app.add_option("--ssh-args", ssh_args,
                 "ssh backend: more ssh options, split on spaces (e.g. \"-i KEY -p 2222\")");
  app.add_option("--rdzv-port", rdzv_port, "ssh backend: the port node 0 listens on (29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--new-secret", new_secret,
                 "write a new job secret to FILE (mode 0600) and exit: copy it to every node");
  bool insecure = false;
  app.add_flag("--insecure", insecure,
               "no job secret: every role accepts any local connection (default: only the job's "
               "own processes, authenticated with a secret een-launch creates)");
  int max_restarts = 0;
  auto* restarts_opt = app.add_option("--max-restarts", max_restarts,
                                      "replacements to start for lost workers; each joins the "
                                      "running job at the next agreed step (default 0). With "
                                      "--ps 0 or torch.distributed's een backend, times the "
                                      "whole job starts again, every worker, as torchrun does");
  int spare_ps = 0;
  auto* spare_opt = app.add_option("--spare-ps", spare_ps,
                                   "standby PS processes that take over a lost PS first "
                                   "(needs --replicas 2 or --snapshot-every)");
  int metrics_port = -1;
  auto* metrics_opt =
      app.add_option("--metrics-port", metrics_port,
                     "the coordinator serves Prometheus metrics of the whole job at "
                     "http://HOST:PORT/metrics (0: any free port, logged)")
          ->check(CLI::Range(0, 65535));
  std::string metrics_host, metrics_token_file;
  app.add_option("--metrics-host", metrics_host,
                 "the address the metrics page listens on (default 127.0.0.1: this machine "
                 "only; 0.0.0.0 for every interface)");
  app.add_option("--metrics-token-file", metrics_token_file,
                 "a file holding a token every scrape must send (Authorization: Bearer TOKEN; "
                 "Prometheus: authorization.credentials_file)");
  std::string flight_dir;
  app.add_option("--flight-dir", flight_dir,
                 "where flight records go: every process's last steps, written when a step "
                 "stalls past the failover threshold or the job fails (default: a new private "
                 "folder /tmp/een-flight-XXXXXX, made at the first record; each file is new and "
                 "the user's only)")
      ->envname("EEN_FLIGHT_DIR");
  int replicas = 0;
  auto* replicas_opt = app.add_option(
      "--replicas", replicas,
      "copies of each shard: 1 (a lost PS rolls back to a snapshot) or 2 (its backups take over)");
  int64_t snapshot_every = 0;  // signed: -1 is an error, not 2^64 - 1
  std::string snapshot_dir, resume_dir;
  auto* every_opt = app.add_option("--snapshot-every", snapshot_every,
                                   "write a snapshot every N steps (default: never)");
  app.add_option("--snapshot-dir", snapshot_dir, "where snapshots go (default: een-snapshots)");
  app.add_option("--resume", resume_dir,
                 "restart from the newest complete snapshot in DIR (keeps snapshotting there)")
      ->check(CLI::ExistingDirectory);
  try {
    std::vector<char*> parsed = {argv[0]};
    for (std::string& a : own_args) parsed.push_back(a.data());
    app.parse(static_cast<int>(parsed.size()), parsed.data());
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; any bad flag is exit 2, as documented.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!app.remaining().empty()) {
    std::vector<std::string> known;
    for (const CLI::Option* opt : app.get_options()) {
      for (const std::string& name : opt->get_lnames()) known.push_back("--" + name);
    }
    return Usage(een::ExplainUnparsed(app.remaining(), known));
  }
  // Every role reads it: a typo fails here once, not in each of them.
  if (auto level = een::LogLevelFromEnvironment(); !level.ok()) {
    return Usage(level.status().message());
  }

  using Count = std::tuple<CLI::Option*, int, int>;  // option, value, least allowed
  for (const auto& [opt, value, least] : std::initializer_list<Count>{
           {ps_opt, ps, 0},
           {workers_opt, workers, 1},
           {min_opt, min_workers, 1},
           {replicas_opt, replicas, 1},
           {restarts_opt, max_restarts, 0},
           {spare_opt, spare_ps, 0},
           {every_opt, static_cast<int>(std::clamp<int64_t>(snapshot_every, -1000000, 0)), 0}}) {
    if (*opt && value < least) {
      return Usage(opt->get_name() + " must be at least " + std::to_string(least) + " (got " +
                   std::to_string(value) + ")");
    }
  }
  std::set<std::string> env_names;  // --env: every role's, on every host
  for (const std::string& text : env_flags) {
    auto entry = een::ParseEnvFlag(text);
    if (!entry.ok()) return Usage(entry.status().message());
    if (entry->second) setenv(entry->first.c_str(), entry->second->c_str(), 1);
    env_names.insert(entry->first);
  }
  een::JobConfig config;
  if (!config_path.empty()) {
    if (een::Status s = config.LoadYaml(config_path); !s.ok()) return Usage(s.message());
  }
  if (*ps_opt) config.ps = ps;
  if (*workers_opt) config.workers = workers;
  if (*min_opt) config.min_workers = min_workers;
  auto duration = [&](const std::string& flag, const std::string& text,
                      std::chrono::milliseconds* out) -> bool {
    if (text.empty()) return true;
    auto d = een::ParseDuration(text);
    if (!d.ok()) {
      Usage(flag + ": " + d.status().message());
      return false;
    }
    *out = *d;
    return true;
  };
  if (!duration("--failover-threshold", threshold, &config.failover_threshold) ||
      !duration("--heartbeat-interval", heartbeat, &config.heartbeat_interval) ||
      !duration("--startup-timeout", startup, &config.startup_timeout) ||
      !duration("--progress-interval", progress, &config.progress_interval) ||
      !duration("--step-timeout", step_timeout, &config.step_timeout) ||
      !duration("--rdzv-last-call", last_call, &node_flags.last_call)) {
    return 2;
  }
  if (*every_opt) config.snapshot_every = static_cast<uint64_t>(snapshot_every);
  if (!wire_dtype.empty()) config.wire_dtype = wire_dtype;
  if (!consistency.empty()) config.consistency = consistency;
  if (!dynamic_slicing.empty()) config.dynamic_slicing = dynamic_slicing;
  if (*replicas_opt) config.replicas = replicas;
  if (*metrics_opt) config.metrics_port = metrics_port;
  if (!metrics_host.empty()) config.metrics_host = metrics_host;
  if (!metrics_token_file.empty()) config.metrics_token_file = metrics_token_file;
  if (!flight_dir.empty()) config.flight_dir = flight_dir;
  if (*restarts_opt) config.max_restarts = max_restarts;
  if (*spare_opt) config.spare_ps = spare_ps;
  if (!snapshot_dir.empty()) config.snapshot_dir = snapshot_dir;
  if (!resume_dir.empty()) {
    if (!snapshot_dir.empty() && snapshot_dir != resume_dir) {
      return Usage("--resume " + resume_dir + " and --snapshot-dir " + snapshot_dir +
                   " differ: a resumed job keeps its snapshots where they are");
    }
    config.snapshot_dir = resume_dir;
    config.resume = true;
  }
  if (!transport.empty()) {
    config.transport = transport;
    config.transport_set = true;
  }
  if (!host.empty()) config.host = host;
  if (!liveness.empty()) config.liveness = liveness;
  if (insecure) config.insecure = true;
  if (!new_secret.empty()) {
    const std::string secret = een::transport::NewSecret();
    if (new_secret ==
        "-") {  // for a batch script: export EEN_JOB_SECRET=$(een-launch --new-secret -)
      std::printf("%s\n", secret.c_str());
      return 0;
    }
    if (een::Status s = een::transport::WriteSecretFile(new_secret, secret); !s.ok()) {
      return Usage(s.message());
    }
    std::printf(
        "new job secret in %s: copy it to every node (mode 0600) and give each "
        "een-launch --secret-file %s\n",
        new_secret.c_str(), new_secret.c_str());
    return 0;
  }
  if (backend != "auto" && backend != "local" && backend != "slurm") {
    return Usage("--backend " + backend +
                 " is not available; auto (Slurm inside srun, else local), local (every role on "
                 "this machine) or slurm");
  }
  // Inside an srun step: one een-launch per node, a per-node launch.
  std::optional<een::SlurmStep> slurm;
  if (backend == "slurm" || (backend == "auto" && !*nnodes_opt)) {
    auto step = een::SlurmStepOfThisProcess(node_flags.rdzv.empty());
    if (!step.ok()) return Usage("Slurm: " + step.status().message());
    slurm = *step;
    if (backend == "slurm" && !slurm) {
      return Usage(
          "--backend slurm: not a task of an srun step (SLURM_PROCID is not set): run "
          "`srun --ntasks-per-node=1 een-launch ...` inside an allocation");
    }
  }
  // torchrun's --nproc-per-node and --master-addr/--master-port.
  const bool many_nodes = *nnodes_opt || slurm.has_value();
  if (*nproc_opt && *hostfile_opt) {
    return Usage(
        "--nproc-per-node with --hostfile: give the job's --workers instead (each "
        "host's slots=N shares them out)");
  }
  if (*nproc_opt) {
    if (nproc_per_node < 1) return Usage("--nproc-per-node must be at least 1");
    if (many_nodes) {
      if (*workers_per_node_opt && node_flags.workers_per_node != nproc_per_node) {
        return Usage("--nproc-per-node and --workers-per-node say different counts: give one");
      }
      node_flags.workers_per_node = nproc_per_node;
    } else {
      if (*workers_opt && workers != nproc_per_node) {
        return Usage("--nproc-per-node " + std::to_string(nproc_per_node) + " and --workers " +
                     std::to_string(workers) +
                     " differ: on one host they are the same count; "
                     "give one");
      }
      config.workers = workers = nproc_per_node;
    }
  }
  if (many_nodes && (*master_addr_opt || *master_port_opt)) {
    if (!node_flags.rdzv.empty()) {
      return Usage(
          "--master-addr/--master-port and --rdzv both say where the nodes meet: "
          "give one");
    }
    if (!*master_addr_opt) {
      return Usage("--master-port needs --master-addr (node 0's address) with --nnodes");
    }
    node_flags.rdzv = master_addr + ":" + std::to_string(*master_port_opt ? master_port : 29500);
  } else {
    if (*master_addr_opt && !host.empty() && host != master_addr) {
      return Usage("--master-addr and --host differ: on one host they are the same address");
    }
    if (*master_addr_opt) config.host = master_addr;
    if (*master_port_opt) config.master_port = master_port;
  }
  if (!c10d_store.empty()) config.c10d_store = c10d_store == "on";
  if (*hostfile_opt) {
    if (*nnodes_opt || slurm) return Usage("--hostfile and --nnodes (or srun) do not mix");
    if (config_path.empty() && (!*ps_opt || !*workers_opt)) {
      return Usage("--hostfile needs --ps N and --workers M (the whole job's)");
    }
    auto hosts = een::ReadHostfile(hostfile);
    if (!hosts.ok()) return Usage(hosts.status().message());
    if (een::Status s = config.Validate(); !s.ok()) return Usage(s.message());
    if (config.spare_ps > 0) return Usage("--spare-ps is not supported with --hostfile yet");
    if (std::string problem = ManyHostsTransportProblem(&config); !problem.empty()) {
      return Usage(problem);
    }
    if (command.empty()) return Usage("no program to run: put the worker command after --");
    een::SshJob job;
    job.hosts = *hosts;
    job.rdzv_port = rdzv_port;
    std::istringstream words(ssh_args);
    for (std::string w; words >> w;) job.ssh_args.push_back(w);
    // Every flag of the job but those the ssh backend sets per node.
    // (--env's values travel with the environment, on ssh's stdin.)
    const std::set<std::string> per_node = {"--hostfile", "--ssh-args", "--rdzv-port", "--ps",
                                            "--workers",  "--backend",  "--host",      "--env"};
    for (size_t i = 0; i < own_args.size(); ++i) {
      const std::string arg = own_args[i];
      const std::string name = arg.substr(0, arg.find('='));
      if (name == "--insecure") continue;  // the ssh backend passes it on itself
      if (per_node.count(name)) {
        if (arg.find('=') == std::string::npos) ++i;  // its value too
        continue;
      }
      job.job_flags.push_back(arg);
    }
    job.env_names = env_names;
    return een::RunSshJob(config, job, command, BinaryDir());
  }
  if (!*nnodes_opt && !slurm) {
    for (CLI::Option* opt : {node_rank_opt, ps_per_node_opt, workers_per_node_opt}) {
      if (*opt) return Usage(opt->get_name() + " needs --nnodes N (a per-node launch)");
    }
  }
  if (*nnodes_opt || slurm) {
    if (slurm) {
      node_flags.nnodes = slurm->nnodes;
      node_flags.node_rank = slurm->node_rank;
      if (node_flags.rdzv.empty()) {
        node_flags.rdzv = slurm->first_host + ":" + std::to_string(slurm->rdzv_port);
      }
    } else {
      // N, or MIN:MAX (elastic).
      const size_t colon = nnodes_text.find(':');
      long counts[2] = {0, 0};
      const std::string parts[2] = {
          colon == std::string::npos ? "" : nnodes_text.substr(0, colon),
          colon == std::string::npos ? nnodes_text : nnodes_text.substr(colon + 1)};
      for (int i = colon == std::string::npos ? 1 : 0; i < 2; ++i) {
        char* end = nullptr;
        counts[i] = std::strtol(parts[i].c_str(), &end, 10);
        if (parts[i].empty() || *end != '\0' || counts[i] < 1 || counts[i] > 65536) {
          return Usage("--nnodes '" + nnodes_text +
                       "' must be a number of hosts, 1 to 65536, or MIN:MAX of them");
        }
      }
      if (counts[0] > counts[1]) {
        return Usage("--nnodes " + nnodes_text + ": MIN is more than MAX");
      }
      node_flags.nnodes = static_cast<int>(counts[1]);
      node_flags.min_nodes = static_cast<int>(counts[0]);
    }
    if (config.spare_ps > 0) return Usage("--spare-ps with --nnodes is not supported yet");
    if (std::string problem = ManyHostsTransportProblem(&config); !problem.empty()) {
      return Usage(problem);
    }
    if (*ps_opt || !config_path.empty()) node_flags.ps = config.ps;
    if (*workers_opt || !config_path.empty()) node_flags.workers = config.workers;
    node_flags.host = config.host == "127.0.0.1" && host.empty() ? "" : config.host;
    node_flags.insecure = config.insecure;
    node_flags.resolve_timeout = config.startup_timeout;
    auto node = een::MakeNodeLaunch(node_flags);
    if (!node.ok()) return Usage(node.status().message());
    config.ps = node->ps;  // checked: at most 65536 each
    config.workers = node->workers;
    config.host = node->address;
    if (een::Status s = config.Validate(); !s.ok()) return Usage(s.message());
    if (std::string problem = FolderProblem(config); !problem.empty()) {
      return Usage(problem);
    }
    WarnOfSnapshotFolderAlone(config, snapshot_dir);
    if (command.empty()) return Usage("no program to run: put the worker command after --");
    return een::RunNodeJob(config, *node, command, BinaryDir());
  }

  if (config_path.empty() && !*ps_opt) return Usage("--ps N is required (or a --config with ps:)");
  if (config_path.empty() && !*workers_opt && !*nproc_opt) {
    return Usage("--workers M is required (or a --config with workers:)");
  }
  if (een::Status s = config.Validate(); !s.ok()) return Usage(s.message());
  if (std::string problem = FolderProblem(config); !problem.empty()) return Usage(problem);
  WarnOfSnapshotFolderAlone(config, snapshot_dir);
  if (std::string problem = EarlierSnapshotsProblem(config); !problem.empty()) {
    return Usage(problem);
  }
  if (command.empty()) {
    return Usage(
        "no program to run: put the worker command after --, e.g. "
        "`een-launch --ps 2 --workers 4 -- ./train --epochs 3`");
  }
  return een::RunLocalJob(config, command, BinaryDir());
}
