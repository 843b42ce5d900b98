// stranger_client: what a process outside a job tries against it (issue 11's
// observations), for tests/security_test.cc. It connects to one address of a
// running job, with or without a secret (or with one worker's own
// credential, claiming any identity with it), and sends:
//   --to ps: gradient pushes of NaN claiming worker --as-worker R, for map
//     epochs 0..3 and chunks 0..7, and a pull;
//   --to coordinator: forged `done` for workers 0 and 1, a heartbeat of PS 0
//     with pid 0 claiming snapshot step 900, a drain and a snapshot request.
// It prints one line per answer ("answer: error ..." or "answer: ...") and
// "no answer" when nothing came back within --wait-ms. Exit 0 always once
// it ran (the test reads what it printed).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/transport/auth.h"
#include "common/transport/registry.h"
#include "common/wire.h"

using een::transport::Message;

int main(int argc, char** argv) {
  CLI::App app{"stranger_client: pokes a running job from outside"};
  std::string address, to = "ps", secret_file, identity = "stranger";
  int as_worker = 0, wait_ms = 1500;
  app.add_option("--address", address)->required();
  app.add_option("--to", to)->check(CLI::IsMember({"ps", "coordinator"}));
  app.add_option("--secret-file", secret_file, "authenticate with this secret (a member)");
  std::string credential_file;
  app.add_option("--credential-file", credential_file,
                 "authenticate with this process's own credential (a worker's), claiming "
                 "--identity with it");
  app.add_option("--identity", identity, "authenticate as this identity");
  app.add_option("--as-worker", as_worker, "the worker rank the pushes claim");
  app.add_option("--wait-ms", wait_ms);
  CLI11_PARSE(app, argc, argv);
  if (!secret_file.empty()) {
    auto secret = een::transport::ReadSecretFile(secret_file);
    if (!secret.ok()) {
      std::fprintf(stderr, "%s\n", secret.status().message().c_str());
      return 2;
    }
    een::transport::SetCredentials({*secret, identity});
  }
  if (!credential_file.empty()) {
    auto own = een::transport::ReadCredentialFile(credential_file);
    if (!own.ok()) {
      std::fprintf(stderr, "%s\n", own.status().message().c_str());
      return 2;
    }
    own->identity = identity;  // another's, or its own
    een::transport::SetCredentials(*own);
  }
  auto device = een::transport::DeviceFor(address);
  if (!device.ok()) return 2;
  auto connection = (*device)->Connect(address);
  if (!connection.ok()) return 2;

  std::vector<Message> messages;
  if (to == "ps") {
    std::vector<float> nan(262144, std::nanf(""));
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      for (uint32_t chunk = 0; chunk < 8; ++chunk) {
        capnp::MallocMessageBuilder b;
        auto push = b.initRoot<een::wire::Header>().initPush();
        push.setEpoch(epoch);
        push.setWorker(as_worker);
        push.setStep(0);
        push.setKind(een::wire::PushKind::GRADIENT);
        push.initChunks(1).set(0, chunk);
        Message m;
        m.frames.push_back(een::wire::Encode(b));
        m.frames.push_back(een::transport::Frame::Copy(nan.data(), 64 * sizeof(float)));
        messages.push_back(std::move(m));
      }
    }
    capnp::MallocMessageBuilder b;
    auto pull = b.initRoot<een::wire::Header>().initPull();
    pull.setWorker(as_worker);
    pull.setMinVersion(0);
    pull.initChunks(1).set(0, 0);
    messages.push_back(Message{{een::wire::Encode(b)}});
  } else {
    for (int w = 0; w < 2; ++w) {
      capnp::MallocMessageBuilder b;
      auto h = b.initRoot<een::wire::Header>();
      een::wire::SetSender(h, een::wire::Role::WORKER, w);
      h.setDone(1);
      messages.push_back(Message{{een::wire::Encode(b)}});
    }
    {
      capnp::MallocMessageBuilder b;
      auto h = b.initRoot<een::wire::Header>();
      een::wire::SetSender(h, een::wire::Role::PS, 0);
      auto hb = h.initHeartbeat();
      hb.setRole(een::wire::Role::PS);
      hb.setRank(0);
      hb.setPid(0);
      hb.setSnapshotStep(900);
      messages.push_back(Message{{een::wire::Encode(b)}});
    }
    {
      capnp::MallocMessageBuilder b;
      b.initRoot<een::wire::Header>().setDrain(0);
      messages.push_back(Message{{een::wire::Encode(b)}});
    }
    {
      capnp::MallocMessageBuilder b;
      b.initRoot<een::wire::Header>().setSnapshotRequest();
      messages.push_back(Message{{een::wire::Encode(b)}});
    }
  }
  for (Message& m : messages) {
    if (auto s = (*connection)->Send(std::move(m)); !s.ok()) {
      std::printf("send failed: %s\n", s.message().c_str());
      break;
    }
  }
  int answers = 0;
  while (true) {
    auto reply = (*connection)->Receive(std::chrono::milliseconds(wait_ms));
    if (!reply.ok()) {
      if (reply.status().code() != een::StatusCode::kDeadlineExceeded) {
        std::printf("receive failed: %s\n", reply.status().message().c_str());
      }
      break;
    }
    ++answers;
    (void)een::wire::Visit(*reply, [&](een::wire::Header::Reader h) {
      if (h.isError()) {
        std::printf("answer: error %s\n", h.getError().getMessage().cStr());
      } else {
        std::printf("answer: %d\n", static_cast<int>(h.which()));
      }
      return een::Status::Ok();
    });
  }
  if (answers == 0) std::printf("no answer\n");
  std::fflush(stdout);
  return 0;
}
