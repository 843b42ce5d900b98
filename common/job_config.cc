#include "common/job_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>

#include "common/consistency.h"
#include "common/input_file.h"
#include "common/transport/registry.h"
#include "common/wire_dtype.h"

namespace een {

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return InvalidArgument("'" + text + "' is not a duration (write 500ms or 2s)");
  }
  std::string unit = text.substr(used);
  double ms;
  if (unit.empty()) {
    return InvalidArgument("'" + text + "' has no unit: write " + text + "s or " + text + "ms");
  }
  if (unit == "ms") {
    ms = value;
  } else if (unit == "s") {
    ms = value * 1000;
  } else {
    return InvalidArgument("'" + text + "' has unknown unit '" + unit + "' (use ms or s)");
  }
  if (!(ms > 0)) return InvalidArgument("'" + text + "' must be a positive duration");
  constexpr double kMaxMs = 7.0 * 24 * 3600 * 1000;  // a week: any sane timeout, and no overflow
  if (!(ms <= kMaxMs)) return InvalidArgument("'" + text + "' is longer than a week (604800s)");
  return std::chrono::milliseconds(static_cast<long>(ms));
}

Status JobConfig::LoadYaml(const std::string& path) {
  YAML::Node root;
  EEN_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "the config", size_t{1} << 20));
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("config " + path + ": " + e.what());
  }
  if (!root.IsMap()) return InvalidArgument("config " + path + ": top level must be a mapping");
  static const std::set<std::string> kFields = {"ps",
                                                "workers",
                                                "min_workers",
                                                "failover_threshold",
                                                "heartbeat_interval",
                                                "startup_timeout",
                                                "progress_interval",
                                                "step_timeout",
                                                "transport",
                                                "host",
                                                "max_chunk_numel",
                                                "shards_per_ps",
                                                "snapshot_every",
                                                "snapshot_dir",
                                                "replicas",
                                                "max_restarts",
                                                "spare_ps",
                                                "wire_dtype",
                                                "consistency",
                                                "dynamic_slicing",
                                                "insecure",
                                                "metrics_port",
                                                "metrics_host",
                                                "metrics_token_file",
                                                "flight_dir",
                                                "liveness",
                                                "c10d_store",
                                                "master_port"};
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {  // e.g. `[a, b]: 1` or `{x: 1}: 2`
      return InvalidArgument("config " + path + ": line " +
                             std::to_string(kv.first.Mark().line + 1) +
                             ": a field name must be a plain word, like 'ps'");
    }
    const std::string key = kv.first.Scalar();
    // A name that is no plain word is not quoted: the file may be no config
    // at all (one the user may not read, named by mistake or on purpose).
    const bool plain = !key.empty() && key.size() <= 64 &&
                       std::all_of(key.begin(), key.end(), [](unsigned char c) {
                         return std::isalnum(c) || c == '_' || c == '-';
                       });
    const std::string where = "config " + path + " line " +
                              std::to_string(kv.first.Mark().line + 1) + ": field " +
                              (plain ? "'" + key + "'" : "(not a plain word)");
    if (!seen.insert(key).second) return InvalidArgument(where + " appears twice");
    if (!kFields.count(key)) {
      std::string known;
      for (const auto& f : kFields) known += (known.empty() ? "" : ", ") + f;
      return InvalidArgument(where + " is unknown; known fields: " + known);
    }
    try {
      const YAML::Node& v = kv.second;
      auto positive_int = [&](int* out) -> Status {
        int n = v.as<int>();
        if (n < 1)
          return InvalidArgument(where + " must be an integer >= 1, got " + std::to_string(n));
        *out = n;
        return Status::Ok();
      };
      auto duration = [&](std::chrono::milliseconds* out) -> Status {
        auto d = ParseDuration(v.as<std::string>());
        if (!d.ok()) return InvalidArgument(where + ": " + d.status().message());
        *out = *d;
        return Status::Ok();
      };
      if (key == "ps") {  // 0: no parameter servers (a program with its own gradients' path)
        ps = v.as<int>();
        if (ps < 0)
          return InvalidArgument(where + " must be an integer >= 0, got " + std::to_string(ps));
      }
      if (key == "workers") EEN_RETURN_IF_ERROR(positive_int(&workers));
      if (key == "min_workers") EEN_RETURN_IF_ERROR(positive_int(&min_workers));
      if (key == "failover_threshold") EEN_RETURN_IF_ERROR(duration(&failover_threshold));
      if (key == "heartbeat_interval") EEN_RETURN_IF_ERROR(duration(&heartbeat_interval));
      if (key == "startup_timeout") EEN_RETURN_IF_ERROR(duration(&startup_timeout));
      if (key == "progress_interval") EEN_RETURN_IF_ERROR(duration(&progress_interval));
      if (key == "step_timeout") EEN_RETURN_IF_ERROR(duration(&step_timeout));
      if (key == "transport") {
        transport = v.as<std::string>();
        transport_set = true;
      }
      if (key == "host") host = v.as<std::string>();
      if (key == "wire_dtype") wire_dtype = v.as<std::string>();
      if (key == "consistency") consistency = v.as<std::string>();
      if (key == "dynamic_slicing") dynamic_slicing = v.as<std::string>();
      if (key == "insecure") insecure = v.as<bool>();
      if (key == "flight_dir") flight_dir = v.as<std::string>();
      if (key == "metrics_host") metrics_host = v.as<std::string>();
      if (key == "metrics_token_file") metrics_token_file = v.as<std::string>();
      if (key == "c10d_store") c10d_store = v.as<bool>();
      if (key == "master_port") {
        master_port = v.as<int>();
        if (master_port < 0 || master_port > 65535) {
          return InvalidArgument(where + " must be a port, 0 (any free one) to 65535, got " +
                                 std::to_string(master_port));
        }
      }
      if (key == "metrics_port") {
        metrics_port = v.as<int>();
        if (metrics_port < 0 || metrics_port > 65535) {
          return InvalidArgument(where + " must be a port, 0..65535 (0: any free one)");
        }
      }
      if (key == "liveness") liveness = v.as<std::string>();
      if (key == "max_chunk_numel") {
        int n = 0;
        EEN_RETURN_IF_ERROR(positive_int(&n));
        sharding.max_chunk_numel = static_cast<uint32_t>(n);
      }
      if (key == "snapshot_every") {
        int n = 0;
        EEN_RETURN_IF_ERROR(positive_int(&n));
        snapshot_every = static_cast<uint64_t>(n);
      }
      if (key == "snapshot_dir") snapshot_dir = v.as<std::string>();
      if (key == "replicas") EEN_RETURN_IF_ERROR(positive_int(&replicas));
      if (key == "spare_ps") {
        spare_ps = v.as<int>();
        if (spare_ps < 0) return InvalidArgument(where + " must be >= 0");
      }
      if (key == "max_restarts") {
        max_restarts = v.as<int>();
        if (max_restarts < 0) return InvalidArgument(where + " must be >= 0");
      }
      if (key == "shards_per_ps") {
        int n = 0;
        EEN_RETURN_IF_ERROR(positive_int(&n));
        sharding.shards_per_ps = static_cast<uint32_t>(n);
      }
    } catch (const YAML::Exception& e) {
      return InvalidArgument(where + " has the wrong type: " + e.what());
    }
  }
  return Validate();
}

Status JobConfig::Validate() const {
  // Every number in one place, with its range (the launcher's flags and the
  // YAML fields both end here), before anything multiplies them.
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v >= lo && v <= hi) return Status::Ok();
    return InvalidArgument(std::string(name) + " must be between " + std::to_string(lo) + " and " +
                           std::to_string(hi) + " (got " + std::to_string(v) + ")");
  };
  EEN_RETURN_IF_ERROR(range("ps", ps, 0, 1024));
  EEN_RETURN_IF_ERROR(range("workers", workers, 1, 65536));
  EEN_RETURN_IF_ERROR(range("min_workers", min_workers, 0, workers));
  EEN_RETURN_IF_ERROR(range("max_restarts", max_restarts, 0, 100000));
  EEN_RETURN_IF_ERROR(range("spare_ps", spare_ps, 0, 64));
  EEN_RETURN_IF_ERROR(range("max_chunk_numel", sharding.max_chunk_numel, 1, int64_t{1} << 26));
  EEN_RETURN_IF_ERROR(range("shards_per_ps", sharding.shards_per_ps, 1, 4096));
  EEN_RETURN_IF_ERROR(range("snapshot_every",
                            static_cast<int64_t>(std::min<uint64_t>(snapshot_every, INT64_MAX)), 0,
                            int64_t{1} << 40));
  if (Result<WireType> t = ParseWireType(wire_dtype); !t.ok()) {
    return InvalidArgument("wire_dtype: " + t.status().message());
  }
  if (Result<Consistency> c = Consistency::Parse(consistency); !c.ok()) {
    return c.status();
  }
  if (dynamic_slicing != "off" && dynamic_slicing != "auto") {
    return InvalidArgument("dynamic_slicing: '" + dynamic_slicing + "' is not off or auto");
  }
  if (dynamic_slicing == "auto" && consistency == "async") {
    return InvalidArgument(
        "dynamic_slicing: auto slices each step's global batch, under bsp or ssp:K; under "
        "async a fast worker already takes more batches (DataParallel::NextBatch): use one or "
        "the other");
  }
  if (replicas != 1 && replicas != 2) {
    return InvalidArgument("replicas: " + std::to_string(replicas) +
                           " is not available; use 1 "
                           "(a lost PS rolls the job back to its last snapshot, with "
                           "snapshot_every N) or 2 (a lost PS's shards fail over to backups)");
  }
  if (spare_ps > 0 && replicas < 2 && snapshot_every == 0) {
    return InvalidArgument(
        "spare_ps: a spare takes over a lost PS's shards from a backup "
        "(replicas 2) or a snapshot (snapshot_every N); with neither, a lost "
        "PS ends the job");
  }
  if (replicas == 2 && ps < 2) {
    return InvalidArgument("replicas 2 needs at least 2 PS (--ps 2): a backup lives on another PS");
  }
  if (ps == 0) {
    // No parameter servers: een-launch supervises the workers and hosts the
    // c10d store; the program moves its own gradients (gloo, nccl).
    const char* needs_ps = min_workers > 0 && min_workers < workers ? "min_workers"
                           : replicas > 1                           ? "replicas"
                           : snapshot_every > 0                     ? "snapshot_every"
                           : spare_ps > 0                           ? "spare_ps"
                           : resume                                 ? "resume"
                           : dynamic_slicing != "off"               ? "dynamic_slicing"
                                                                    : nullptr;
    if (needs_ps) {
      std::string flag = std::string("--") + needs_ps;
      std::replace(flag.begin(), flag.end(), '_', '-');
      return InvalidArgument(
          "--ps 0 runs the program without parameter servers (it moves its own gradients, as "
          "a gloo DDP script does), and " +
          flag + " (" + needs_ps +
          ") needs them: give --ps N (N >= 1) with een.DataParallel or "
          "init_process_group(\"een\"), or drop " +
          flag);
    }
  }
  if (min_workers > workers) {
    return InvalidArgument("min_workers (" + std::to_string(min_workers) +
                           ") cannot exceed workers (" + std::to_string(workers) + ")");
  }
  EEN_RETURN_IF_ERROR(transport::CheckTransport(transport, "transport", /*tests_too=*/false));
  if (liveness != "adaptive" && liveness != "fixed") {
    return InvalidArgument("liveness '" + liveness + "' is not one of adaptive, fixed");
  }
  if (heartbeat_interval >= failover_threshold) {
    return InvalidArgument("heartbeat_interval (" + std::to_string(heartbeat_interval.count()) +
                           " ms) must be shorter than failover_threshold (" +
                           std::to_string(failover_threshold.count()) + " ms)");
  }
  return Status::Ok();
}

}  // namespace een
