// eenctl: operate a running job from outside.
//
//   eenctl debug --trace full [--steps A:B] [-o FILE] [--plot FILE.png]
//     every worker's and PS's data-path events of steps A:B (by default the
//     next three; answered once every worker passed B) as one Chrome/Perfetto
//     trace with flow arrows from each push to its apply to its pull
//     (chrome_trace.h), and with --plot each worker's step breakdown drawn.
//
//   eenctl status [--json] [--watch [SECONDS]] [--probe]
//     the job (step, samples/s, sync, map epoch, uptime), what its step
//     waits for, every process (host, state, step, heartbeat age, CPU, RSS,
//     bytes in/out per second, compute, straggler score), every PS's shards
//     and the traffic between hosts; --json for scripts, --watch to refresh
//     like top; --probe first has every worker measure its link to every PS
//     (4 x 4 MB each), and shows the median per host pair.
//   eenctl drain --ps K
//     moves every shard PS K owns to the other PS while training goes on
//     (they back the shards up first, then take them over), after which
//     PS K leaves.
//   eenctl snapshot
//     every PS snapshots one step, agreed with all of them (the job must
//     keep snapshots: --snapshot-every N), besides the periodic ones.
//   eenctl metrics
//     every process's counters and gauges from its newest heartbeat, a line
//     per process (common/metrics.h lists what each role measures).
//   eenctl export -o FILE [--snapshot-dir DIR [--step N]]
//     a checkpoint plain PyTorch loads (een-export): from DIR's snapshots,
//     or, without DIR, from a snapshot the running job takes now (as
//     `eenctl snapshot`), once every PS has written it (up to --wait s).
// Each takes --coordinator ADDRESS; without it eenctl finds the job on this
// machine (launcher/job_discovery.h). It authenticates with the job's
// secret: --secret-file, else EEN_JOB_SECRET_FILE, else the secret
// een-launch keeps beside the address in its run folder on this machine.
// Each prints the coordinator's answer. Exit 0 when the coordinator took
// the request, 1 when it refused it (with its reason), 2 on a usage error
// or when the coordinator did not answer.
// (A PS or worker is added by starting it with the job's EEN_* environment
// and the next rank; see docs/reference.md.)
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/version.h"
#include "common/wire.h"
#include "launcher/chrome_trace.h"
#include "launcher/job_discovery.h"
#include "launcher/status_text.h"
#include "launcher/step_plot.h"

namespace {

// Whether the coordinator at `coordinator` answers a status request within
// 10 s (credentials already set).
bool Answers(const std::string& coordinator) {
  auto device = een::transport::DeviceFor(coordinator);
  if (!device.ok()) return false;
  auto connection = (*device)->Connect(coordinator);
  if (!connection.ok()) return false;
  een::wire::Outgoing b;
  b.header().setStatusRequest();
  if (!(*connection)->Send(b.Take()).ok()) return false;
  return (*connection)->Receive(std::chrono::seconds(10)).ok();
}

// Sends one request to the coordinator and prints its answer (after
// `before_answer`: the screen clearing of --watch). It waits `wait` for the
// answer, checking with `still_there` every 5 s if given; when it is still
// there once `wait` ran out, says `still_waiting` (if given).
int Ask(const std::string& coordinator, const std::string& secret_file,
        const std::function<void(een::wire::Header::Builder)>& build,
        const std::function<std::optional<std::string>(een::wire::Header::Reader)>& answer_text,
        const std::string& before_answer = "", std::chrono::seconds wait = std::chrono::seconds(10),
        const std::function<bool()>& still_there = nullptr, const std::string& still_waiting = "") {
  auto path = een::FindSecretFile(coordinator, secret_file);
  if (!path.ok()) {
    std::fprintf(stderr, "eenctl: %s\n", path.status().message().c_str());
    return 2;
  }
  if (!path->empty()) {
    auto secret = een::transport::ReadSecretFile(*path);
    if (!secret.ok()) {
      std::fprintf(stderr, "eenctl: %s\n", secret.status().message().c_str());
      return 2;
    }
    een::transport::SetCredentials({*secret, "eenctl"});
  }
  auto device = een::transport::DeviceFor(coordinator);
  if (!device.ok()) {
    std::fprintf(stderr, "eenctl: %s\n", device.status().message().c_str());
    return 2;
  }
  auto connection = (*device)->Connect(coordinator);
  if (!connection.ok()) {
    std::fprintf(stderr, "eenctl: %s\n", connection.status().message().c_str());
    return 2;
  }
  een::wire::Outgoing b;
  build(b.header());
  if (een::Status s = (*connection)->Send(b.Take()); !s.ok()) {
    std::fprintf(stderr, "eenctl: %s\n", s.message().c_str());
    return 2;
  }
  // A long wait listens in slices and, between them, makes sure the
  // coordinator is still there (`still_there`): a job that died is said at once.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  auto reply = (*connection)->Receive(still_there ? std::min(wait, std::chrono::seconds(5)) : wait);
  while (still_there && !reply.ok() &&
         reply.status().code() != een::StatusCode::kPermissionDenied &&
         std::chrono::steady_clock::now() < deadline) {
    if (!still_there()) {
      std::fprintf(stderr,
                   "eenctl: the coordinator at %s stopped answering while this waited (the job "
                   "ended, or its coordinator is gone)\n",
                   coordinator.c_str());
      return 2;
    }
    reply = (*connection)->Receive(std::chrono::seconds(5));
  }
  if (!reply.ok() && reply.status().code() == een::StatusCode::kPermissionDenied) {
    std::fprintf(stderr, "eenctl: %s\n", reply.status().message().c_str());
    return 2;
  }
  if (!reply.ok() && still_there && !still_waiting.empty() && still_there()) {
    std::fprintf(stderr, "eenctl: %s\n", still_waiting.c_str());  // it answers, but not yet this
    return 2;
  }
  if (!reply.ok()) {
    std::fprintf(stderr,
                 "eenctl: no answer from the coordinator at %s within %lld s (is the job "
                 "running, and is this its secret?)\n",
                 coordinator.c_str(), static_cast<long long>(wait.count()));
    return 2;
  }
  int code = 2;
  een::Status s = een::wire::Visit(*reply, [&](een::wire::Header::Reader h) -> een::Status {
    if (h.isError()) {
      std::fprintf(stderr, "eenctl: %s\n", h.getError().getMessage().cStr());
      code = 1;
    } else if (std::optional<std::string> text = answer_text(h)) {
      std::printf("%s%s\n", before_answer.c_str(), text->c_str());
      code = 0;
    }
    return een::Status::Ok();
  });
  if (!s.ok()) std::fprintf(stderr, "eenctl: bad answer: %s\n", s.message().c_str());
  return code;
}

// One line per process: "ps 0 (pid 4242 on host, heard 20 ms ago): ps.pushes=12 ...".
std::string MetricsText(een::wire::MetricsReport::Reader report) {
  std::string text;
  for (auto p : report.getProcesses()) {
    if (!text.empty()) text += "\n";
    text += fmt::format("{} {} (pid {} on {}, heard {} ms ago{}{}):",
                        p.getRole() == een::wire::Role::PS ? "ps" : "worker", p.getRank(),
                        p.getPid(), p.getHost().cStr(), p.getHeardMsAgo(),
                        p.getLost() ? ", lost" : "", p.getDone() ? ", finished" : "");
    if (p.getMetrics().size() == 0) text += " (no metrics yet)";
    for (auto m : p.getMetrics()) {
      // Counters print as integers (the coordinator checked they are in range).
      text += m.getCounter() ? fmt::format(" {}={:.0f}", m.getName().cStr(), m.getValue())
                             : fmt::format(" {}={}", m.getName().cStr(), m.getValue());
    }
  }
  return text.empty() ? "no process has registered yet" : text;
}

// Why `path` cannot be written ("" when it can, or when it is empty); a
// file it did not find is not left behind.
std::string CannotWrite(const std::string& path) {
  if (path.empty()) return "";
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  std::ofstream probe(path, std::ios::app);
  if (!probe) return "cannot write " + path + ": " + std::strerror(errno);
  probe.close();
  if (!existed) std::filesystem::remove(path, ec);
  return "";
}

// eenctl debug: the trace of steps A:B (by default the next three), written
// as one Chrome/Perfetto file and, with --plot, drawn.
int Debug(const std::string& coordinator, const std::string& secret_file, const std::string& level,
          const std::string& steps_text, std::string trace_out, const std::string& plot_out,
          std::chrono::seconds wait) {
  if (level.empty() && plot_out.empty()) {
    std::fprintf(stderr, "eenctl debug: say what to make: --trace full and/or --plot FILE.png\n");
    return 2;
  }
  uint64_t first = 0, last = 0;
  if (!steps_text.empty()) {
    char tail = 0;
    unsigned long long a = 0, b = 0;
    if (std::sscanf(steps_text.c_str(), "%llu:%llu%c", &a, &b, &tail) != 2 || a > b) {
      std::fprintf(stderr, "eenctl debug: --steps '%s' is not A:B with A <= B\n",
                   steps_text.c_str());
      return 2;
    }
    first = a;
    last = b;
    if (last - first >= 100) {
      std::fprintf(stderr, "eenctl debug: --steps %s spans %llu steps; at most 100 at a time\n",
                   steps_text.c_str(), static_cast<unsigned long long>(last - first + 1));
      return 2;
    }
  } else {  // the next three steps
    const int code = Ask(
        coordinator, secret_file, [](een::wire::Header::Builder h) { h.setStatusRequest(); },
        [&](een::wire::Header::Reader h) -> std::optional<std::string> {
          if (!h.isStatusReply()) return std::nullopt;
          first = h.getStatusReply().getStep() + 1;
          last = first + 2;
          return fmt::format("tracing steps {}:{}", first, last);
        });
    if (code != 0) return code;
  }
  if (trace_out.empty() && !level.empty()) {
    trace_out = fmt::format("een-trace-steps-{}-{}.json", first, last);
  }
  // Found now, not after waiting for the steps.
  for (const std::string& path : {trace_out, plot_out}) {
    if (std::string why = CannotWrite(path); !why.empty()) {
      std::fprintf(stderr, "eenctl debug: %s\n", why.c_str());
      return 2;
    }
  }
  // The plot's first step needs the end of the one before (its compute).
  const uint64_t ask_first = !plot_out.empty() && first > 0 ? first - 1 : first;
  std::string written;
  const int code = Ask(
      coordinator, secret_file,
      [&](een::wire::Header::Builder h) {
        auto r = h.initTraceRequest();
        r.setFirstStep(ask_first);
        r.setLastStep(last);
      },
      [&](een::wire::Header::Reader h) -> std::optional<std::string> {
        if (!h.isTraceReply()) return std::nullopt;
        const een::TraceData asked = een::TraceData::FromWire(h.getTraceReply());
        een::TraceData trace = asked;  // the steps asked for only
        trace.first_step = first;
        for (auto& p : trace.processes) {
          std::erase_if(p.events, [&](const een::RecordedEvent& e) { return e.step < first; });
        }
        size_t events = 0;
        for (const auto& p : trace.processes) events += p.events.size();
        std::string text = fmt::format("steps {}:{}: {} events of {} processes", first, last,
                                       events, trace.processes.size());
        if (!trace.note.empty()) text += " (" + trace.note + ")";
        if (!trace_out.empty()) {
          std::ofstream out(trace_out, std::ios::trunc);
          out << een::ChromeTraceJson(trace);
          out.close();
          if (!out) {
            written = "cannot write " + trace_out;
            return std::nullopt;
          }
          text += "\ntrace written to " + trace_out + " (open it in ui.perfetto.dev)";
        }
        if (!plot_out.empty()) {
          std::vector<een::StepTimes> steps = een::StepBreakdown(asked);
          std::erase_if(steps, [&](const een::StepTimes& s) { return s.step < first; });
          if (een::Status s = een::PlotSteps(steps, plot_out); !s.ok()) {
            written = s.message();
            return std::nullopt;
          }
          text += "\nstep breakdown drawn to " + plot_out;
        }
        return text;
      },
      "", wait, [&] { return Answers(coordinator); },
      fmt::format("debug: step {} not reached yet after {} s (give it longer with --wait, or "
                  "ask for steps the job has passed: `eenctl status` shows where it is)",
                  last, wait.count()));
  if (!written.empty()) std::fprintf(stderr, "eenctl debug: %s\n", written.c_str());
  return written.empty() ? code : 1;
}

}  // namespace

// `eenctl export`: een-export, beside this program, does it (it loads
// LibTorch, which eenctl does not); `wait`: for the step to be written.
int Export(const std::string& dir, const std::string& out, const std::string& step, int wait) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string program = (self.parent_path() / "een-export").string();
  if (ec || access(program.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "eenctl: export needs een-export beside eenctl (%s), which this build lacks "
                 "(a sanitizer build has none)\n",
                 program.c_str());
    return 2;
  }
  std::vector<std::string> args = {program, "--snapshot-dir", dir, "--out", out};
  if (!step.empty()) args.insert(args.end(), {"--step", step});
  if (wait > 0) args.insert(args.end(), {"--wait", std::to_string(wait)});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(program.c_str(), argv.data());
  std::fprintf(stderr, "eenctl: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
  return 2;
}

int main(int argc, char** argv) {
  CLI::App app{"eenctl: operate a running EEN job"};
  app.fallthrough();  // --secret-file before or after the subcommand
  app.set_version_flag("--version", een::kVersionLine);
  app.require_subcommand(1);
  std::string coordinator, secret_file;
  app.add_option("--secret-file", secret_file, "the job's secret (een-launch prints its path)");
  const std::string coordinator_help =
      "the job's coordinator address (een-launch prints it; default: the job running on this "
      "machine)";
  int ps = -1;
  auto* status = app.add_subcommand("status", "how the job stands, and what its step waits for");
  status->add_option("--coordinator", coordinator, coordinator_help);
  bool json = false;
  double watch = 0;
  status->add_flag("--json", json, "print JSON for scripts");
  bool probe = false;
  status->add_flag("--probe", probe,
                   "first measure every worker's link to every PS (a few MB each, while "
                   "training goes on)");
  status->add_option("--watch", watch, "refresh every SECONDS (default 2), like top")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::Range(0.1, 3600.0));
  auto* debug = app.add_subcommand(
      "debug", "every process's data path over some steps: one Perfetto trace, a picture");
  debug->add_option("--coordinator", coordinator, coordinator_help);
  std::string trace_level, steps_text, trace_out, plot_out;
  debug->add_option("--trace", trace_level, "full: every worker's and PS's events in one trace")
      ->check(CLI::IsMember({"full"}));
  debug->add_option("--steps", steps_text, "A:B, the steps to trace (default: the next 3)");
  debug->add_option("-o,--output", trace_out,
                    "the trace file (default een-trace-steps-A-B.json); open it in "
                    "ui.perfetto.dev");
  debug->add_option("--plot", plot_out,
                    "draw each worker's step breakdown (compute, push, wait, pull) to FILE.png");
  int debug_wait = 300;
  debug->add_option("--wait", debug_wait, "seconds to wait for the steps to pass (default 300)")
      ->check(CLI::PositiveNumber);
  auto* drain = app.add_subcommand("drain", "move every shard off a PS, then let it leave");
  drain->add_option("--coordinator", coordinator, coordinator_help);
  drain->add_option("--ps", ps, "the PS to drain")->required()->check(CLI::NonNegativeNumber);
  auto* snapshot = app.add_subcommand("snapshot", "every PS snapshots one agreed step now");
  snapshot->add_option("--coordinator", coordinator, coordinator_help);
  auto* metrics = app.add_subcommand("metrics", "every process's counters and gauges");
  metrics->add_option("--coordinator", coordinator, coordinator_help);
  auto* export_ = app.add_subcommand(
      "export",
      "a job's snapshots as a checkpoint plain PyTorch loads ({\"model\", \"optimizer\"}, as "
      "DataParallel's state_dict() gives): from --snapshot-dir, or from a snapshot the running "
      "job takes now");
  std::string export_dir, export_out, export_step;
  int export_wait = 300;
  export_->add_option("--snapshot-dir", export_dir,
                      "a job's --snapshot-dir (default: the running job's, from a snapshot it "
                      "takes now)");
  export_->add_option("-o,--out", export_out, "the checkpoint file to write")->required();
  export_->add_option("--step", export_step, "the snapshot's step (default: the newest whole one)");
  export_->add_option("--coordinator", coordinator, coordinator_help);
  export_
      ->add_option("--wait", export_wait,
                   "a running job's export: seconds to wait for every PS to write the "
                   "snapshot (default 300)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (*export_ && !export_dir.empty()) return Export(export_dir, export_out, export_step, 0);
  if (*export_ && !export_step.empty()) {
    std::fprintf(stderr,
                 "eenctl: export --step N reads the snapshots of --snapshot-dir DIR; a running "
                 "job's export takes a new snapshot, of a step the job agrees on\n");
    return 2;
  }
  if (auto found = een::FindCoordinator(coordinator); found.ok()) {
    coordinator = *found;
  } else {
    std::fprintf(stderr, "eenctl: %s\n", found.status().message().c_str());
    return 2;
  }

  if (*status) {
    const bool watching = status->count("--watch") > 0;
    if (watching && watch <= 0) watch = 2;
    bool answered = false;
    while (true) {
      if (answered && !Answers(coordinator)) {  // it was there a moment ago
        std::printf(
            "the coordinator at %s no longer answers: the job has ended (or its "
            "coordinator is gone)\n",
            coordinator.c_str());
        return 0;
      }
      bool ended = false;
      std::string screen;
      const int code = Ask(
          coordinator, secret_file,
          [&](een::wire::Header::Builder h) {
            if (probe) {
              h.setProbeRequest();
            } else {
              h.setStatusRequest();
            }
          },
          [&](een::wire::Header::Reader h) -> std::optional<std::string> {
            if (!h.isStatusReply()) return std::nullopt;
            const auto reply = h.getStatusReply();
            ended = reply.getState() == een::wire::JobState::SHUTDOWN ||
                    reply.getState() == een::wire::JobState::ABORTED;
            // Watching as JSON: one object per line, for a script reading along.
            return json ? een::StatusJson(reply, watching ? -1 : 2) : een::StatusText(reply);
          },
          // Refreshing: the screen is cleared just before the new one shows.
          watching && !json ? "\033[H\033[2J" : "", std::chrono::seconds(probe ? 40 : 10));
      if (!watching || code != 0 || ended) return code;
      answered = true;
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    }
  }

  if (*debug)
    return Debug(coordinator, secret_file, trace_level, steps_text, trace_out, plot_out,
                 std::chrono::seconds(debug_wait));

  if (*metrics) {
    return Ask(
        coordinator, secret_file, [](een::wire::Header::Builder h) { h.setMetricsRequest(); },
        [](een::wire::Header::Reader h) -> std::optional<std::string> {
          if (!h.isMetricsReply()) return std::nullopt;
          return MetricsText(h.getMetricsReply());
        });
  }

  if (*export_) {
    uint64_t step = 0;
    std::string folder;
    const int code = Ask(
        coordinator, secret_file, [](een::wire::Header::Builder h) { h.setSnapshotRequest(); },
        [&](een::wire::Header::Reader h) -> std::optional<std::string> {
          if (!h.isSnapshotTaken()) return std::nullopt;
          step = h.getSnapshotTaken().getStep();
          folder = h.getSnapshotTaken().getFolder();
          return std::string(h.getSnapshotTaken().getText().cStr());
        });
    if (code != 0) return code;
    std::fflush(stdout);
    return Export(folder, export_out, std::to_string(step), export_wait);
  }

  if (*drain) {
    return Ask(
        coordinator, secret_file, [&](een::wire::Header::Builder h) { h.setDrain(ps); },
        [](een::wire::Header::Reader h) -> std::optional<std::string> {
          if (!h.isDrainReply()) return std::nullopt;
          return std::string(h.getDrainReply().cStr());
        });
  }
  return Ask(
      coordinator, secret_file, [](een::wire::Header::Builder h) { h.setSnapshotRequest(); },
      [](een::wire::Header::Reader h) -> std::optional<std::string> {
        if (!h.isSnapshotTaken()) return std::nullopt;
        return std::string(h.getSnapshotTaken().getText().cStr());
      });
}
