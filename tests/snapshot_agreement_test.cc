// SnapshotAgreement in process: complete steps, the resume step, and
// snapshot requests served by membership rounds.
#include "launcher/snapshot_agreement.h"

#include <gtest/gtest.h>

namespace een {
namespace {

TEST(SnapshotAgreement, AStepIsCompleteOnceEveryLivePsWroteIt) {
  SnapshotAgreement agreement;
  EXPECT_EQ(agreement.complete(), 0u);
  EXPECT_FALSE(agreement.Note({100, 0}).has_value()) << "ps 1 has written nothing yet";
  EXPECT_EQ(agreement.Note({100, 100}), std::optional<uint64_t>(100));
  EXPECT_FALSE(agreement.Note({200, 100}).has_value()) << "nothing new is complete";
  EXPECT_EQ(agreement.Note({200, 200}), std::optional<uint64_t>(200));
  EXPECT_FALSE(agreement.Note({}).has_value()) << "no live PS: nothing is complete";
  EXPECT_EQ(agreement.complete(), 200u);
}

TEST(SnapshotAgreement, ResumesFromTheNewestStepEveryPsHoldsIntact) {
  auto step = SnapshotAgreement::PickResumeStep(
      {{{100, 200, 300}, ""}, {{100, 200}, ""}, {{200, 300}, ""}});
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 200u) << "300 is torn on ps 1";
  auto none = SnapshotAgreement::PickResumeStep({{{100}, ""}, {{200}, ""}});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("no snapshot is complete and intact on every one of the "
                                         "2 PS"),
            std::string::npos)
      << none.status().ToString();
  EXPECT_FALSE(SnapshotAgreement::PickResumeStep({}).ok());
}

// A PS past those that hold snapshots holds none at all (its own field
// says so, whatever its text): the run was likely started with fewer PS.
// One whose snapshots are damaged is no such hint.
TEST(SnapshotAgreement, PsThatHoldNothingAfterThoseThatHoldSnapshotsHintAtTheCount) {
  auto fewer = SnapshotAgreement::PickResumeStep(
      {{{100, 200}, ""}, {{100, 200}, ""}, {{}, "D/ps-2: nothing here", true}});
  ASSERT_FALSE(fewer.ok());
  EXPECT_NE(fewer.status().message().find("ps 2 none: D/ps-2: nothing here"), std::string::npos)
      << fewer.status().message();
  EXPECT_NE(fewer.status().message().find("only ps 0..1 hold snapshots there: was the run "
                                          "started with --ps 2?"),
            std::string::npos)
      << fewer.status().message();
  auto damaged = SnapshotAgreement::PickResumeStep(
      {{{100, 200}, ""}, {{}, "D/ps-1 holds no snapshot it can read: Corruption", false}});
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().message().find("was the run started with"), std::string::npos)
      << damaged.status().message();
}

TEST(SnapshotAgreement, ARoundServesTheRequestsWaitingWhenItBegan) {
  SnapshotAgreement agreement;
  EXPECT_EQ(agreement.StepFor(40), 0u) << "nobody asked: the round snapshots nothing";
  agreement.Ask("eenctl-1");
  EXPECT_TRUE(agreement.asked());
  agreement.BeginRound();
  EXPECT_FALSE(agreement.asked());
  agreement.Ask("eenctl-2");  // during the round: for the next one
  EXPECT_EQ(agreement.StepFor(40), 40u);
  EXPECT_EQ(agreement.Served(), (std::vector<transport::PeerId>{"eenctl-1"}));
  EXPECT_EQ(agreement.StepFor(41), 0u);
  EXPECT_TRUE(agreement.asked());
}

TEST(SnapshotAgreement, ARoundBegunAgainStillServesItsRequests) {
  SnapshotAgreement agreement;
  agreement.Ask("eenctl-1");
  agreement.BeginRound();
  agreement.Ask("eenctl-2");
  agreement.BeginRound();  // the PS changed under the round
  EXPECT_EQ(agreement.Served(), (std::vector<transport::PeerId>{"eenctl-1", "eenctl-2"}));
}

}  // namespace
}  // namespace een
