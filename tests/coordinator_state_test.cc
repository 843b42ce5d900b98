// What a restarted coordinator reads back from its own disk, damaged: the
// saved state is taken up or refused with a reason, never trusted into a
// crash or an allocation of everything (cases found by fuzz_coordinator_state
// and by reading its decoder).
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "common/optimizer_wire.h"
#include "launcher/coordinator.h"
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

}  // namespace
}  // namespace een
