// What a restarted coordinator reads back from its own disk, damaged: the
// saved state is taken up or refused with a reason, never trusted into a
// crash or an allocation of everything (cases found by fuzz_coordinator_state
// and by reading its decoder).
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "common/optimizer_wire.h"
#include "common/transport/registry.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/membership_log.h"
#include "launcher/state_store.h"
#include "schema/een.capnp.h"
#include "support/scratch_folder.h"

namespace een {
namespace {

Status TakeUp(const std::string& path, capnp::MallocMessageBuilder& saved) {
  {
    auto store = StateStore::Open(path);
    EXPECT_TRUE(store.ok());
    auto words = capnp::messageToFlatArray(saved);
    auto bytes = words.asBytes();
    EXPECT_TRUE((*store)->Put(std::string(bytes.begin(), bytes.end())).ok());
  }
  static int jobs = 0;
  CoordinatorOptions o;
  o.listen_address = "mem://state-test-" + std::to_string(++jobs) + "/coordinator";
  o.job.ps = 1;
  o.job.workers = 2;
  o.state_path = path;
  o.restore = true;
  Coordinator coordinator(o);
  return coordinator.Bind();
}

TEST(CoordinatorState, ARankBeyondItsRoleIsDamageNotAJobOfBillionsOfWorkers) {
  testing::ScratchFolder base("coordinator-state-test");
  for (int rank : {2, 1 << 30, 2147483647, -1}) {
    capnp::MallocMessageBuilder b;
    auto st = b.initRoot<wire::CoordinatorState>();
    st.setState(wire::JobState::RUNNING);
    OptimizerToWire(OptimizerConfig::SGD(0.1), st.initOptimizer());
    auto nodes = st.initNodes(2);
    nodes[0].setRole(wire::Role::WORKER);
    nodes[0].setRank(0);
    nodes[1].setRole(wire::Role::WORKER);
    nodes[1].setRank(rank);
    Status s = TakeUp(base / ("state-" + std::to_string(rank)), b);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << rank << ": " << s.ToString();
    EXPECT_NE(s.message().find("the saved state lists worker rank " + std::to_string(rank)),
              std::string::npos)
        << s.ToString();
  }
}

TEST(CoordinatorState, AJobThatGrewIsTakenUpWithEveryRank) {
  testing::ScratchFolder base("coordinator-state-test");
  capnp::MallocMessageBuilder b;
  auto st = b.initRoot<wire::CoordinatorState>();
  st.setState(wire::JobState::RUNNING);
  OptimizerToWire(OptimizerConfig::SGD(0.1), st.initOptimizer());
  auto nodes = st.initNodes(4);  // 2 workers started, a third joined live, one PS
  for (int r = 0; r < 3; ++r) {
    nodes[r].setRole(wire::Role::WORKER);
    nodes[r].setRank(2 - r);
  }
  nodes[3].setRole(wire::Role::PS);
  nodes[3].setRank(0);
  Status s = TakeUp(base / "state", b);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A coordinator restarted after a rollback tells a PS that asks again (its
// JobStart crossed the restart) where the rollback went: the step was not
// saved before, and such a PS was told step 0.
TEST(CoordinatorState, ARestartAfterARollbackStillTellsItsStep) {
  testing::ScratchFolder base("coordinator-state-test");
  capnp::MallocMessageBuilder b;
  auto st = b.initRoot<wire::CoordinatorState>();
  st.setState(wire::JobState::RUNNING);
  TensorsToWire({{"w", 1000}}, st.initTensors(1));
  OptimizerToWire(OptimizerConfig::SGD(0.1), st.initOptimizer());
  auto nodes = st.initNodes(2);
  nodes[0].setRole(wire::Role::PS);
  nodes[0].setRank(0);
  nodes[0].setPid(4242);
  nodes[0].setDataAddress("mem://rolled-back/ps-0");
  nodes[1].setRole(wire::Role::WORKER);
  nodes[1].setRank(0);
  nodes[1].setPid(4343);
  st.setMapEpoch(3);
  st.setRollbackEpoch(3);
  st.setRollbackStep(100);
  {
    auto store = StateStore::Open(base / "state");
    ASSERT_TRUE(store.ok());
    auto words = capnp::messageToFlatArray(b);
    auto bytes = words.asBytes();
    ASSERT_TRUE((*store)->Put(std::string(bytes.begin(), bytes.end())).ok());
  }
  CoordinatorOptions o;
  o.listen_address = "mem://state-test-rollback/coordinator";
  o.job.ps = 1;
  o.job.workers = 1;
  o.job.failover_threshold = std::chrono::milliseconds(60000);  // nobody here heartbeats
  o.state_path = base / "state";
  o.restore = true;
  Coordinator coordinator(o);
  ASSERT_TRUE(coordinator.Bind().ok());
  std::atomic<bool> stop{false};
  std::thread run([&] { (void)coordinator.Run(stop); });
  auto ps = (*transport::DeviceFor(coordinator.address()))->Connect(coordinator.address());
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  wire::Outgoing out(wire::Role::PS, 0);
  auto reg = out.header().initRegister();
  reg.setRole(wire::Role::PS);
  reg.setRank(0);
  reg.setPid(4242);
  reg.setDataAddress("mem://rolled-back/ps-0");
  ASSERT_TRUE((*ps)->Send(out.Take()).ok());
  auto reply = (*ps)->Receive(std::chrono::milliseconds(10000));
  stop = true;
  run.join();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  bool started = false;
  ASSERT_TRUE(wire::Visit(*reply, [&](wire::Header::Reader h) {
                EXPECT_FALSE(h.isError()) << h.getError().getMessage().cStr();
                if (!h.isJobStart()) return Status::Ok();
                started = true;
                EXPECT_TRUE(h.getJobStart().getResume());
                EXPECT_EQ(h.getJobStart().getRollbackEpoch(), 3u);
                EXPECT_EQ(h.getJobStart().getStartStep(), 100u) << "the rollback's step";
                return Status::Ok();
              }).ok());
  EXPECT_TRUE(started);
}

// The membership history next to the snapshots keeps a lost worker's
// unfinished steps, reads an older file without them, and refuses a
// damaged list with the line that holds it.
TEST(MembershipLog, KeepsUnfinishedStepsAndReadsTheOlderForm) {
  testing::ScratchFolder dir("membership-log");
  const std::vector<MembershipChange> history = {
      {0, {0, 1, 2}, 0}, {13, {0, 2}, 1, {}, {{1, 11}}}, {20, {0, 1, 2}, 2}};
  ASSERT_TRUE(WriteMembershipLog(dir.path(), history).ok());
  Result<std::vector<MembershipChange>> back = ReadMembershipLog(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[1].live, (std::vector<int>{0, 2}));
  ASSERT_EQ((*back)[1].unfinished.size(), 1u);
  EXPECT_EQ((*back)[1].unfinished[0], (UnfinishedSteps{1, 11}));
  EXPECT_TRUE((*back)[2].unfinished.empty());

  {
    std::ofstream old(dir.path() + "/membership-history", std::ios::trunc);
    old << "0 0 0,1,2\n1 13 0,2\n";
  }
  back = ReadMembershipLog(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->size(), 2u);
  {
    std::ofstream bad(dir.path() + "/membership-history", std::ios::trunc);
    bad << "0 0 0,1,2\n1 13 0,2 1@13\n";
  }
  back = ReadMembershipLog(dir.path());
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("line 2"), std::string::npos) << back.status().message();
}

// A change whose data follow later (the workers' loaders drew ahead) keeps
// its data step, with or without unfinished steps; a data step that is not
// after the change's step, or too far after it, is refused.
TEST(MembershipLog, KeepsADataStepAndRefusesOneThatDoesNotFitItsChange) {
  testing::ScratchFolder dir("membership-log-data");
  std::vector<MembershipChange> history = {{0, {0, 1, 2}, 0},
                                           {13, {0, 2}, 1, {}, {{1, 11}}, 16},
                                           {20, {0}, 2, {}, {{2, 20}}, 23},
                                           {30, {0, 1}, 3}};
  ASSERT_TRUE(WriteMembershipLog(dir.path(), history).ok());
  Result<std::vector<MembershipChange>> back = ReadMembershipLog(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 4u);
  EXPECT_EQ((*back)[1].data_step, 16u);
  EXPECT_EQ((*back)[1].unfinished[0], (UnfinishedSteps{1, 11}));
  EXPECT_EQ((*back)[2].data_step, 23u);
  EXPECT_EQ((*back)[2].unfinished[0], (UnfinishedSteps{2, 20})) << "from the change's own step";
  EXPECT_EQ((*back)[3].layout_step(), 30u);
  for (const char* line : {"1 13 0,2 data=13\n", "1 13 0,2 1@11 data=900\n", "1 13 0,2 data=x\n",
                           "1 13 0,2 2@16 data=15\n"}) {
    {
      std::ofstream bad(dir.path() + "/membership-history", std::ios::trunc);
      bad << "0 0 0,1,2\n" << line;
    }
    back = ReadMembershipLog(dir.path());
    EXPECT_FALSE(back.ok()) << line;
  }
}

}  // namespace
}  // namespace een
