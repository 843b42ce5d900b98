// eenctl: operate a running job from outside.
//
//   eenctl drain --coordinator ADDRESS --ps K
//     moves every shard PS K owns to the other PS while training goes on
//     (they back the shards up first, then take them over), after which
//     PS K leaves.
//   eenctl snapshot --coordinator ADDRESS
//     every PS snapshots one step, agreed with all of them (the job must
//     keep snapshots: --snapshot-every N), besides the periodic ones.
//   eenctl metrics --coordinator ADDRESS
//     every process's counters and gauges from its newest heartbeat, a line
//     per process (common/metrics.h lists what each role measures).
// eenctl authenticates with the job's secret: --secret-file, else
// EEN_JOB_SECRET_FILE, else the secret een-launch keeps beside the address
// in its run folder on this machine (/tmp/een-job-*/{coordinator,secret}).
// Each prints the coordinator's answer. Exit 0 when the coordinator took
// the request, 1 when it refused it (with its reason), 2 on a usage error
// or when the coordinator did not answer.
// (A PS or worker is added by starting it with the job's EEN_* environment
// and the next rank; see README.)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>

#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/version.h"
#include "common/wire.h"

namespace {

// The job secret for `coordinator`: from `secret_file`, EEN_JOB_SECRET_FILE,
// or the run folder of the job on this machine that listens there. An
// empty path with an ok status: a job started with --insecure.
een::Result<std::string> FindSecretFile(const std::string& coordinator, std::string secret_file) {
  if (secret_file.empty()) {
    if (const char* f = std::getenv("EEN_JOB_SECRET_FILE"); f && *f) secret_file = f;
  }
  if (!secret_file.empty()) return secret_file;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/tmp", ec)) {
    if (entry.path().filename().string().rfind("een-job-", 0) != 0) continue;
    std::ifstream in(entry.path() / "coordinator");
    std::string address;
    if (!(in >> address) || address != coordinator) continue;
    const auto secret = entry.path() / "secret";
    return std::filesystem::exists(secret, ec) ? secret.string() : std::string();
  }
  return een::FailedPrecondition(
      "cannot find the secret of the job at " + coordinator +
      " (no een-launch run folder on this machine names it): pass --secret-file PATH, the path "
      "een-launch printed ('job secret in ...')");
}

// Sends one request to the coordinator and prints its answer.
int Ask(const std::string& coordinator, const std::string& secret_file,
        const std::function<void(een::wire::Header::Builder)>& build,
        const std::function<std::optional<std::string>(een::wire::Header::Reader)>& answer_text) {
  auto path = FindSecretFile(coordinator, secret_file);
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
  auto reply = (*connection)->Receive(std::chrono::seconds(10));
  if (!reply.ok() && reply.status().code() == een::StatusCode::kPermissionDenied) {
    std::fprintf(stderr, "eenctl: %s\n", reply.status().message().c_str());
    return 2;
  }
  if (!reply.ok()) {
    std::fprintf(stderr,
                 "eenctl: no answer from the coordinator at %s within 10 s (is the job "
                 "running, and is this its secret?)\n",
                 coordinator.c_str());
    return 2;
  }
  int code = 2;
  een::Status s = een::wire::Visit(*reply, [&](een::wire::Header::Reader h) -> een::Status {
    if (h.isError()) {
      std::fprintf(stderr, "eenctl: %s\n", h.getError().getMessage().cStr());
      code = 1;
    } else if (std::optional<std::string> text = answer_text(h)) {
      std::printf("%s\n", text->c_str());
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
                             : fmt::format(" {}={:g}", m.getName().cStr(), m.getValue());
    }
  }
  return text.empty() ? "no process has registered yet" : text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"eenctl: operate a running EEN job"};
  app.set_version_flag("--version", een::kVersionLine);
  app.require_subcommand(1);
  std::string coordinator, secret_file;
  app.add_option("--secret-file", secret_file, "the job's secret (een-launch prints its path)");
  int ps = -1;
  auto* drain = app.add_subcommand("drain", "move every shard off a PS, then let it leave");
  drain
      ->add_option("--coordinator", coordinator,
                   "the job's coordinator address (een-launch prints it)")
      ->required();
  drain->add_option("--ps", ps, "the PS to drain")->required()->check(CLI::NonNegativeNumber);
  auto* snapshot = app.add_subcommand("snapshot", "every PS snapshots one agreed step now");
  snapshot->add_option("--coordinator", coordinator, "the job's coordinator address")->required();
  auto* metrics = app.add_subcommand("metrics", "every process's counters and gauges");
  metrics->add_option("--coordinator", coordinator, "the job's coordinator address")->required();
  CLI11_PARSE(app, argc, argv);

  if (*metrics) {
    return Ask(
        coordinator, secret_file, [](een::wire::Header::Builder h) { h.setMetricsRequest(); },
        [](een::wire::Header::Reader h) -> std::optional<std::string> {
          if (!h.isMetricsReply()) return std::nullopt;
          return MetricsText(h.getMetricsReply());
        });
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
        if (!h.isSnapshotReply()) return std::nullopt;
        return std::string(h.getSnapshotReply().cStr());
      });
}
