// een-ps: a parameter-server process. Started by een-launch (or any
// scheduler that sets the EEN_* environment); see parameter_server.h.
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/logging.h"
#include "common/receive_heap.h"
#include "common/resource_usage.h"
#include "common/transport/auth.h"
#include "common/version.h"
#include "ps/parameter_server.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  // Its job comes from EEN_* variables (een-launch sets them), not arguments.
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", een::kVersionLine);
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr,
                 "een-ps takes no arguments: its job comes from the EEN_* variables een-launch "
                 "sets (start it with een-launch); --version prints its version\n");
    return 2;
  }
  een::KeepFreedReceiveBuffers();
  een::ShareOneHeap();
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto env = een::JobEnvironment::FromProcess("een-ps");
  const een::Status logging = een::InitLogging(!env.ok()    ? "ps"
                                               : env->spare ? "spare"
                                                            : "ps " + std::to_string(env->rank));
  if (!logging.ok()) {
    spdlog::error("{}", logging.message());
    return 2;
  }
  if (!env.ok()) {
    spdlog::error("{}", env.status().message());
    return 2;
  }
  env->role = "ps";
  const std::string identity = env->spare ? "ps:spare" : een::transport::PsIdentity(env->rank);
  if (een::Status s = een::AuthenticateAs(identity, "een-ps"); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  een::ps::ParameterServer server(*env);
  een::Status s = server.Join(g_stop);
  if (!s.ok()) server.ReportJoinFailure(s);
  if (s.ok() && server.not_needed()) {
    spdlog::info("the job ended; this spare was not needed");
    return 0;
  }
  if (s.ok()) s = server.Serve(g_stop);
  // For een-bench and the curious: what this PS cost.
  spdlog::info("{}", een::ResourceUsage::Now().ToString());
  if (!s.ok()) {
    spdlog::error("stopping: {}", s.ToString());
    return 3;
  }
  return 0;
}
