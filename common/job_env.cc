#include "common/job_env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/job_config.h"
#include "common/logging.h"
#include "common/transport/auth.h"
#include "common/transport/peer_text.h"
#include "common/transport/registry.h"

namespace een {
namespace {

const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

Status ReadInt(const char* name, long min, long* out) {
  const char* v = Get(name);
  if (!v) return Status::Ok();
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < min) {
    return InvalidArgument(std::string(name) + "='" + v +
                           "' must be an integer >= " + std::to_string(min));
  }
  *out = n;
  return Status::Ok();
}

}  // namespace

Status AuthenticateAs(const std::string& identity, const std::string& program) {
  long insecure = 0;
  EEN_RETURN_IF_ERROR(ReadInt("EEN_INSECURE", 0, &insecure));
  const char* credential_file = Get("EEN_JOB_CREDENTIAL_FILE");
  const char* file = Get("EEN_JOB_SECRET_FILE");
  if (insecure == 1) {
    spdlog::warn(
        "EEN_INSECURE=1 (een-launch --insecure): no job secret; any process on this "
        "host may connect to this job and disturb it");
    transport::SetCredentials({"", identity});
    return Status::Ok();
  }
  if (credential_file) {  // its own credential only (a worker een-launch started)
    EEN_ASSIGN_OR_RETURN(transport::Credentials own,
                         transport::ReadCredentialFile(credential_file));
    if (own.identity != identity) {
      return FailedPrecondition(program + " is '" + identity + "' but its credential file " +
                                credential_file + " is '" + Shown(own.identity) +
                                "'s: een-launch gives each process the file of its own rank "
                                "(EEN_RANK); a process may not take another's");
    }
    transport::SetCredentials(std::move(own));
    return Status::Ok();
  }
  if (!file) {
    return FailedPrecondition(
        program + " has no job secret: EEN_JOB_SECRET_FILE is not set" +
        (identity.rfind("worker:", 0) == 0
             ? std::string(", nor EEN_JOB_CREDENTIAL_FILE (the worker's own credential)")
             : std::string()) +
        ". een-launch sets it for the processes it starts and prints the secret file's path; a "
        "process added by hand needs EEN_JOB_SECRET_FILE=PATH too (or EEN_INSECURE=1 for a job "
        "started with --insecure)");
  }
  EEN_ASSIGN_OR_RETURN(std::string secret, transport::ReadSecretFile(file));
  transport::SetCredentials({std::move(secret), identity});
  return Status::Ok();
}

Result<bool> LocalModeRequested() {
  long local = 0;
  EEN_RETURN_IF_ERROR(ReadInt("EEN_LOCAL", 0, &local));
  if (local > 1) return InvalidArgument("EEN_LOCAL='" + std::to_string(local) + "' must be 0 or 1");
  return local == 1;
}

std::string HostName() {
  if (const char* node = Get("EEN_NODE")) return node;  // per-node launch: hosts may share a name
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

Result<JobEnvironment> JobEnvironment::FromProcess(const std::string& program) {
  JobEnvironment env;
  const char* coordinator = Get("EEN_COORDINATOR");
  if (!coordinator) {
    return FailedPrecondition(
        program +
        " is not part of an EEN job: EEN_COORDINATOR is not set. Start it with "
        "`een-launch --ps N --workers M -- " +
        program +
        " ARGS...`, or set EEN_COORDINATOR, "
        "EEN_ROLE, EEN_RANK, EEN_WORLD_SIZE and EEN_NUM_PS as een-launch does (or, to debug "
        "one process alone, EEN_LOCAL=1).");
  }
  env.coordinator = coordinator;
  if (const char* r = Get("EEN_ROLE")) env.role = r;
  if (const char* h = Get("EEN_HOST")) env.host = h;
  if (const char* t = Get("EEN_DATA_TRANSPORT")) env.data_transport = t;
  if (const char* d = Get("EEN_RUN_DIR")) env.run_dir = d;
  if (const char* d = Get("EEN_SNAPSHOT_DIR")) env.snapshot_dir = d;
  if (const char* t = Get("EEN_WIRE_DTYPE")) {
    Result<WireType> type = ParseWireType(t);
    if (!type.ok()) return InvalidArgument("EEN_WIRE_DTYPE: " + type.status().message());
    env.wire_type = *type;
  }
  long rank = -1, world = 0, ps = 0, threshold = 500, heartbeat = 100, startup = 120000;
  long step_timeout = 1800000;
  long snapshot_every = 0, resume = 0, spare = 0;
  EEN_RETURN_IF_ERROR(ReadInt("EEN_SPARE", 0, &spare));
  env.spare = spare != 0;
  EEN_RETURN_IF_ERROR(ReadInt("EEN_SNAPSHOT_EVERY", 0, &snapshot_every));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_RESUME", 0, &resume));
  env.snapshot_every = static_cast<uint64_t>(snapshot_every);
  env.resume = resume != 0;
  if ((env.snapshot_every > 0 || env.resume) && env.snapshot_dir.empty()) {
    return InvalidArgument("EEN_SNAPSHOT_EVERY or EEN_RESUME is set but EEN_SNAPSHOT_DIR is not");
  }
  EEN_RETURN_IF_ERROR(ReadInt("EEN_RANK", 0, &rank));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_WORLD_SIZE", 1, &world));
  if (const char* n = std::getenv("EEN_NUM_PS"); n && std::string(n) == "0") {
    return FailedPrecondition(kWithoutPsRefusal);
  }
  EEN_RETURN_IF_ERROR(ReadInt("EEN_NUM_PS", 1, &ps));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_FAILOVER_THRESHOLD_MS", 1, &threshold));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_HEARTBEAT_MS", 1, &heartbeat));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_STARTUP_TIMEOUT_MS", 1, &startup));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_STEP_TIMEOUT_MS", 1, &step_timeout));
  env.rank = static_cast<int>(rank);
  env.world_size = static_cast<int>(world);
  env.num_ps = static_cast<int>(ps);
  env.failover_threshold = std::chrono::milliseconds(threshold);
  env.heartbeat_interval = std::chrono::milliseconds(heartbeat);
  env.startup_timeout = std::chrono::milliseconds(startup);
  env.step_timeout = std::chrono::milliseconds(step_timeout);
  long bucket_bytes = 0, message_bytes = 0, pull_back = 1, ps_threads = 0, resources_at_step = 0;
  EEN_RETURN_IF_ERROR(ReadInt("EEN_BUCKET_BYTES", 1, &bucket_bytes));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_MESSAGE_BYTES", 0, &message_bytes));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_PULL_BACK", 0, &pull_back));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_PS_THREADS", 1, &ps_threads));
  EEN_RETURN_IF_ERROR(ReadInt("EEN_RESOURCES_AT_STEP", 0, &resources_at_step));
  env.bucket_bytes = static_cast<uint64_t>(bucket_bytes);
  env.message_bytes = static_cast<uint64_t>(message_bytes);
  env.pull_back = pull_back != 0;
  env.ps_threads = static_cast<int>(std::min(ps_threads, 256L));
  env.resources_at_step = static_cast<uint64_t>(resources_at_step);
  if (const char* t = Get("EEN_TIMELINE")) env.timeline = t;
  if (const char* t = Get("EEN_TRACE_RECORD")) env.trace_record = t;
  EEN_RETURN_IF_ERROR(transport::CheckTransport(env.data_transport, "EEN_DATA_TRANSPORT",
                                                /*tests_too=*/true));
  return env;
}

std::vector<std::string> JobEnvironment::DataListenAddresses() const {
  return transport::ListenAddresses(
      data_transport, host, run_dir,
      role + "-" + std::to_string(rank) + "-" + std::to_string(getpid()));
}

}  // namespace een
