// een_fuzz_seeds DIR: writes the fuzz targets' seed corpora under
// DIR/<target>/ (tests/fuzz/corpus in the repository holds its output, plus
// every input that once crashed a target). One well-formed input per
// message kind or record kind, so fuzzing starts from inputs that get past
// the first checks. Run it again after the schema changes.
#include <capnp/message.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include "common/flight_recorder.h"
#include "common/optimizer_wire.h"
#include "common/shard_map.h"
#include "common/transport/auth.h"
#include "common/transport/shm/shm_segments.h"
#include "common/wire.h"
#include "fuzz/job_secret.h"
#include "fuzz/message_frames.h"
#include "fuzz/shm_names.h"

using namespace een;
using transport::Frame;
using transport::Message;

namespace {

std::filesystem::path g_root;

void Write(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes) {
  const auto dir = g_root / target;
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void Write(const std::string& target, const std::string& name, const std::string& text) {
  Write(target, name, std::vector<uint8_t>(text.begin(), text.end()));
}

const std::vector<TensorInfo> kModel = {
    {"w", 1000, TensorKind::kParameter, {100, 10}},
    {"b", 10, TensorKind::kParameter, {10}},
    {"bn.running_mean", 10, TensorKind::kBufferBroadcast, {10}}};

ShardMap Map() {
  return ShardMap::Build(kModel, 1, ShardingOptions{}, {"mem://cluster1/ps0"}).value();
}

std::vector<float> Floats(size_t n) { return std::vector<float>(n, 0.5f); }

Frame PayloadOf(size_t floats) {
  std::vector<std::byte> b(floats * 4);
  std::memcpy(b.data(), Floats(floats).data(), b.size());
  return Frame::Own(std::move(b));
}

// One message per kind a role receives, with the payload frames it takes.
std::vector<std::pair<std::string, Message>> Messages() {
  std::vector<std::pair<std::string, Message>> out;
  auto add = [&](const std::string& name, const std::function<void(wire::Header::Builder)>& fill,
                 std::vector<Frame> payload = {}) {
    capnp::MallocMessageBuilder b;
    auto h = b.initRoot<wire::Header>();
    wire::SetSender(h, wire::Role::WORKER, 0);
    fill(h);
    Message m{{wire::Encode(b)}};
    for (auto& f : payload) m.frames.push_back(std::move(f));
    out.emplace_back(name, std::move(m));
  };
  const ShardMap map = Map();
  add("register", [&](wire::Header::Builder h) {
    auto r = h.initRegister();
    r.setRole(wire::Role::WORKER);
    r.setRank(0);
    r.setHost("host");
    r.setPid(42);
    TensorsToWire(kModel, r.initTensors(kModel.size()));
    OptimizerToWire(OptimizerConfig::Adam(1e-3), r.initOptimizer());
  });
  add("register-ps", [&](wire::Header::Builder h) {
    auto r = h.initRegister();
    r.setRole(wire::Role::PS);
    r.setRank(1);
    r.setDataAddress("mem://cluster1/ps1");
    r.initSnapshotSteps(1).set(0, 100);
  });
  add("job-start", [&](wire::Header::Builder h) {
    auto s = h.initJobStart();
    s.setRank(0);
    s.setWorldSize(1);
    s.setNumPs(1);
    map.ToWire(s.initMap());
    OptimizerToWire(OptimizerConfig::SGD(0.1), s.initOptimizer());
  });
  add("map-change", [&](wire::Header::Builder h) { map.ToWire(h.initMapChange()); });
  add("heartbeat", [&](wire::Header::Builder h) {
    auto hb = h.initHeartbeat();
    hb.setStep(3);
    hb.setLoss(0.5);
    hb.setRole(wire::Role::WORKER);
    hb.setRank(0);
    hb.setPid(42);
  });
  add("heartbeat-observed", [&](wire::Header::Builder h) {
    // What eenctl status and the flight recorder read from a heartbeat.
    auto hb = h.initHeartbeat();
    hb.setStep(3);
    hb.setRole(wire::Role::WORKER);  // the sender's identity
    hb.setRank(0);
    hb.setPid(42);
    hb.setHasWait(true);
    auto wait = hb.initWait();
    wait.setStep(3);
    wait.setChunk(0);
    wait.initMissing(1).set(0, 0);
    wait.setWaitedMs(900);
    auto traffic = hb.initTraffic(1);
    traffic[0].setPs(0);
    traffic[0].setBytesIn(4096);
    traffic[0].setBytesOut(4096);
    hb.setClockOffsetMicros(-1500);
    auto events = hb.initEvents(2);
    FlightRecorder::ToWire({100, 150, 3, 0, 0, 1, EventKind::kPushSent}, events[0]);
    FlightRecorder::ToWire({160, 900, 3, 0, 0, 1, EventKind::kPullReceived}, events[1]);
    hb.setSentMicros(1000);
  });
  add("status-request", [&](wire::Header::Builder h) { h.setStatusRequest(); });
  add("probe-request", [&](wire::Header::Builder h) { h.setProbeRequest(); });
  add("probe",
      [&](wire::Header::Builder h) {
        auto p = h.initProbe();
        p.setRound(1);
        p.setWorker(0);
      },
      {PayloadOf(1024)});
  add("trace-request", [&](wire::Header::Builder h) {
    auto r = h.initTraceRequest();
    r.setFirstStep(1);
    r.setLastStep(3);
  });
  add("done", [&](wire::Header::Builder h) { h.setDone(10); });
  add("hello", [&](wire::Header::Builder h) { h.setHello(); });
  add("map-request", [&](wire::Header::Builder h) { h.setMapRequest(); });
  add("snapshot-request", [&](wire::Header::Builder h) { h.setSnapshotRequest(); });
  add("drain", [&](wire::Header::Builder h) { h.setDrain(0); });
  std::vector<uint32_t> chunks;
  for (uint32_t c = 0; c < map.chunks().size(); ++c) chunks.push_back(c);
  std::vector<Frame> payload;
  for (uint32_t c : chunks) payload.push_back(PayloadOf(map.chunks()[c].numel));
  for (auto kind : {wire::PushKind::GRADIENT, wire::PushKind::INITIAL}) {
    std::vector<Frame> copy = payload;
    add(
        kind == wire::PushKind::GRADIENT ? "push-gradient" : "push-initial",
        [&](wire::Header::Builder h) {
          auto p = h.initPush();
          p.setEpoch(map.epoch());
          p.setStep(0);
          p.setWorker(0);
          p.setKind(kind);
          p.setDtype(wire::DType::F32);
          auto l = p.initChunks(chunks.size());
          for (size_t i = 0; i < chunks.size(); ++i) l.set(i, chunks[i]);
          p.setPullBack(7);
        },
        std::move(copy));
  }
  add("pull", [&](wire::Header::Builder h) {
    auto p = h.initPull();
    p.setEpoch(map.epoch());
    p.setMinVersion(0);
    p.setWorker(0);
    auto l = p.initChunks(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) l.set(i, chunks[i]);
    p.setRequestId(9);
  });
  add("norm-query", [&](wire::Header::Builder h) {
    auto q = h.initNormQuery();
    (void)q;
  });
  add("clip-norm", [&](wire::Header::Builder h) { (void)h.initClipNorm(); });
  add("barrier", [&](wire::Header::Builder h) { (void)h.initBarrier(); });
  add("membership-prepare", [&](wire::Header::Builder h) { (void)h.initMembershipPrepare(); });
  add("membership-commit", [&](wire::Header::Builder h) {
    auto m = h.initMembershipCommit();
    m.setEpoch(1);
    m.setEffectiveStep(2);
    m.initLiveWorkers(1).set(0, 0);
  });
  add("rollback", [&](wire::Header::Builder h) { (void)h.initRollback(); });
  add("replicate", [&](wire::Header::Builder h) { (void)h.initReplicate(); }, {PayloadOf(16)});
  add("worker-exited", [&](wire::Header::Builder h) { (void)h.initWorkerExited(); });
  add("process-gone", [&](wire::Header::Builder h) { (void)h.initProcessGone(); });
  add("error", [&](wire::Header::Builder h) {
    auto e = h.initError();
    e.setCode(wire::ErrorCode::INVALID_ARGUMENT);
    e.setMessage("no");
  });
  add("leave", [&](wire::Header::Builder h) { h.setLeave(); });
  return out;
}

void HeaderSeeds() {
  for (auto& [name, m] : Messages()) {
    Write("fuzz_header", name, fuzz::BytesOf(m));
    std::vector<uint8_t> to_ps = {0}, to_coordinator = {1};
    auto bytes = fuzz::BytesOf(m);
    to_ps.insert(to_ps.end(), bytes.begin(), bytes.end());
    to_coordinator.insert(to_coordinator.end(), bytes.begin(), bytes.end());
    Write("fuzz_role_messages", name + "-to-ps", to_ps);
    Write("fuzz_role_messages", name + "-to-coordinator", to_coordinator);
  }
}

// A message of three frames: inline header, one in a block, one in a region.
void ManifestSeeds() {
  std::vector<uint8_t> manifest;
  auto put = [&](const void* p, size_t n) {
    manifest.insert(manifest.end(), static_cast<const uint8_t*>(p),
                    static_cast<const uint8_t*>(p) + n);
  };
  const uint32_t magic = 0x53454E45, count = 3;
  put(&magic, 4);
  put(&count, 4);
  const uint8_t inline_kind = 0, block_kind = 1, region_kind = 2;
  put(&inline_kind, 1);
  const std::string block = fuzz::kBlockName, region = fuzz::kRegionName;
  uint8_t len = static_cast<uint8_t>(block.size());
  uint64_t size = 4096, offset = 128;
  put(&block_kind, 1);
  put(&len, 1);
  put(block.data(), len);
  put(&size, 8);
  len = static_cast<uint8_t>(region.size());
  put(&region_kind, 1);
  put(&len, 1);
  put(region.data(), len);
  put(&offset, 8);
  put(&size, 8);
  Message m{{Frame::Copy("header..", 8), Frame(), Frame(), Frame::Own({})}};
  m.frames.back() = Frame::Copy(manifest.data(), manifest.size());
  Write("fuzz_shm_manifest", "block-and-region", fuzz::BytesOf(m));
}

void SnapshotSeeds() {
  // kind 3: a well-formed chunk (step 5, chunk 0 and 1, 4 floats each), then a
  // stray key and a manifest of step 7 naming a missing chunk.
  std::vector<uint8_t> in = {3, 5, 0, 0, 1, 4};
  for (int i = 0; i < 16; ++i) in.push_back(static_cast<uint8_t>(i));
  in.insert(in.end(), {3, 5, 1, 0, 1, 4});
  for (int i = 0; i < 16; ++i) in.push_back(static_cast<uint8_t>(i));
  const std::string stray = "snap/x/manifest", line = "0 24 1\n";
  in.push_back(2);
  in.push_back(static_cast<uint8_t>(stray.size()));
  in.insert(in.end(), stray.begin(), stray.end());
  in.insert(in.end(), {2, 0, 'h', 'i'});
  in.insert(in.end(), {0, 7, static_cast<uint8_t>(line.size()), 0});
  in.insert(in.end(), line.begin(), line.end());
  Write("fuzz_snapshot_store", "two-snapshots", in);
}

void StateSeeds() {
  capnp::MallocMessageBuilder b;
  auto st = b.initRoot<wire::CoordinatorState>();
  st.setState(wire::JobState::RUNNING);
  TensorsToWire(kModel, st.initTensors(kModel.size()));
  OptimizerToWire(OptimizerConfig::SGD(0.1), st.initOptimizer());
  auto nodes = st.initNodes(4);
  for (int i = 0; i < 4; ++i) {
    nodes[i].setRole(i < 2 ? wire::Role::PS : wire::Role::WORKER);
    nodes[i].setRank(i % 2);
    nodes[i].setHost("host");
    nodes[i].setPid(100 + i);
    nodes[i].setStep(12);
  }
  auto live = st.initLiveWorkers(2);
  live.set(0, 0);
  live.set(1, 1);
  st.setMapEpoch(1);
  ShardMap::Build(kModel, 2, ShardingOptions{}, {"mem://a/ps0", "mem://a/ps1"})
      ->ToWire(st.initMap());
  auto history = st.initHistory(1);
  history[0].setEpoch(0);
  history[0].setEffectiveStep(0);
  history[0].initLiveWorkers(2);
  auto words = capnp::messageToFlatArray(b);
  auto bytes = words.asBytes();
  std::vector<uint8_t> in = {0};
  in.insert(in.end(), bytes.begin(), bytes.end());
  Write("fuzz_coordinator_state", "running-job", in);
  // Found by reading the decoder: a rank of 2^31-1 resized the node list to it.
  nodes[3].setRank(2147483647);
  auto huge = capnp::messageToFlatArray(b);
  std::vector<uint8_t> huge_in = {0};
  huge_in.insert(huge_in.end(), huge.asBytes().begin(), huge.asBytes().end());
  Write("fuzz_coordinator_state", "regression-huge-rank", huge_in);
  Write("fuzz_coordinator_state", "membership-history",
        std::string("\x01") + "0 0 0,1,2,3\n1 40 0,1,3\n2 90 0,1,2,3\n");
}

void ConfigSeeds() {
  Write("fuzz_job_config", "every-field",
        "ps: 2\nworkers: 4\nmin_workers: 3\nfailover_threshold: 500ms\nheartbeat_interval: 100\n"
        "startup_timeout: 2m\nprogress_interval: 1.5s\nstep_timeout: 30s\ntransport: shm\n"
        "host: 127.0.0.1\nmax_chunk_numel: 262144\nshards_per_ps: 16\nsnapshot_every: 100\n"
        "snapshot_dir: snaps\nreplicas: 2\nmax_restarts: 1\nspare_ps: 1\nwire_dtype: bf16\n"
        "insecure: false\n");
  Write("fuzz_job_config", "flow-style", "{ps: 1, workers: [1, 2], replicas: 2s}\n");
}

void TraceSeeds() {
  Write("fuzz_trace", "small",
        "# a model\nfc2.bias\t10\nfc2.weight\t1280\nfc1.bias\t128\nfc1.weight\t100352\n");
}

// An admitted PLAIN and CURVE request, a proving routing id, a whole
// credential file, all of the fuzz target's job (job_secret.h).
void CredentialSeeds() {
  const std::string secret = fuzz::kJobSecret;
  auto request = [](std::vector<std::string> frames) {
    Message m;
    for (const auto& f : frames) m.frames.push_back(Frame::Copy(f.data(), f.size()));
    return fuzz::BytesOf(m);
  };
  Write("fuzz_credentials", "plain-request",
        request({"1.0", "1", "een", "127.0.0.1", "", "PLAIN", "worker:1",
                 transport::PasswordFor(secret, "worker:1")}));
  Write("fuzz_credentials", "curve-request",
        request({"1.0", "2", "een", "10.0.0.5", "", "CURVE",
                 transport::CurveKeysOf(secret).member_public}));
  const transport::Credentials own = transport::OwnCredential(secret, "worker:1");
  Write("fuzz_credentials", "routing-id", transport::ProvingRoutingId(own));
  const std::filesystem::path file = g_root / "fuzz_credentials" / "credential-file";
  std::filesystem::remove(file);
  std::filesystem::create_directories(file.parent_path());
  if (!transport::WriteCredentialFile(file.string(), own).ok()) {
    std::cerr << "cannot write " << file << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: een_fuzz_seeds DIR (tests/fuzz/corpus)\n";
    return 2;
  }
  g_root = argv[1];
  HeaderSeeds();
  ManifestSeeds();
  SnapshotSeeds();
  StateSeeds();
  ConfigSeeds();
  TraceSeeds();
  CredentialSeeds();
  return 0;
}
