// MembershipRound in process: the step a change takes effect at, which
// answers count, what becomes history, resuming and restarting.
#include "launcher/membership_round.h"

#include <gtest/gtest.h>

namespace een {
namespace {

MembershipRound StartedWith(std::vector<int> live) {
  MembershipRound round;
  round.StartJob({}, 0, std::move(live));
  return round;
}

TEST(MembershipRound, CommitsAtTheStepAfterTheNewestVersionOnceEveryLivePsAnswered) {
  MembershipRound round = StartedWith({0, 1, 2});
  const MembershipRound::Prepare prepare = round.Begin({0, 2});  // worker 1 lost
  EXPECT_EQ(prepare.epoch, 1u);
  EXPECT_EQ(prepare.live, (std::vector<int>{0, 2}));
  EXPECT_TRUE(round.pending());
  EXPECT_FALSE(round.Prepared(0, 1, 10, {0, 1}).has_value()) << "one of two PS answered";
  auto commit = round.Prepared(1, 1, 12, {0, 1});
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 13u) << "the step after the newest version any PS holds";
  EXPECT_EQ(commit->epoch, 1u);
  EXPECT_EQ(commit->live, (std::vector<int>{0, 2}));
  EXPECT_TRUE(commit->changed);
  EXPECT_TRUE(round.pending()) << "pending until the commit reached every PS";
  round.Committed(*commit);
  EXPECT_FALSE(round.pending());
  ASSERT_EQ(round.history().size(), 2u);
  EXPECT_EQ(round.history()[0].step, 0u);
  EXPECT_EQ(round.history()[0].live, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(round.history()[1].step, 13u);
  EXPECT_EQ(round.history()[1].live, (std::vector<int>{0, 2}));
  EXPECT_EQ(round.history()[1].epoch, 1u);
}

TEST(MembershipRound, OnlyThisRoundsAnswersCountEachPsOnce) {
  MembershipRound round = StartedWith({0, 1});
  EXPECT_FALSE(round.Prepared(0, 0, 5, {0}).has_value()) << "no round pending";
  round.Begin({0});
  EXPECT_FALSE(round.Prepared(0, 7, 5, {0, 1}).has_value()) << "another round's answer";
  EXPECT_FALSE(round.Prepared(0, 1, 5, {0, 1}).has_value());
  EXPECT_FALSE(round.Prepared(0, 1, 9, {0, 1}).has_value()) << "the same PS twice is one answer";
  auto commit = round.Prepared(1, 1, 3, {0, 1});
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 10u) << "ps 0's second answer (version 9) replaced its first";
}

// A round waiting for a PS that is lost never completes; begun again
// (the coordinator's PsChanged()), it counts only its own answers, and
// only from the PS serving now.
TEST(MembershipRound, ARoundBegunAgainCountsOnlyItsOwnAnswersFromServingPs) {
  MembershipRound round = StartedWith({0, 1});
  round.Begin({0});
  EXPECT_FALSE(round.Prepared(1, 1, 30, {0, 1}).has_value()) << "ps 0 has not answered";
  // ps 0 is lost before it answers; the round begins again for ps 1 and
  // ps 2 (a replacement that never heard of the first round).
  const MembershipRound::Prepare again = round.Begin({0});
  EXPECT_EQ(again.epoch, 2u);
  EXPECT_FALSE(round.Prepared(0, 2, 99, {1, 2}).has_value()) << "ps 0 is not serving";
  EXPECT_FALSE(round.Prepared(2, 2, 21, {1, 2}).has_value())
      << "ps 1's answer to the first round counted for the second";
  auto commit = round.Prepared(1, 2, 20, {1, 2});
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 22u) << "not 100: the lost ps 0's answer does not count";
  EXPECT_EQ(commit->epoch, 2u);
}

// A drained PS that left still counted would hold every later round.
TEST(MembershipRound, APsThatLeftIsNotWaitedFor) {
  MembershipRound round = StartedWith({0, 1});
  round.Begin({0});
  auto commit = round.Prepared(1, 1, 7, {1, 2});  // ps 0 was drained and left
  EXPECT_FALSE(commit.has_value());
  commit = round.Prepared(2, 1, 7, {1, 2});
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 8u);
}

TEST(MembershipRound, AnUnchangedLiveSetIsNoHistory) {
  MembershipRound round = StartedWith({0, 1});
  round.Begin({0, 1});  // a round that only serves a snapshot request
  auto commit = round.Prepared(0, 1, 4, {0});
  ASSERT_TRUE(commit.has_value());
  EXPECT_FALSE(commit->changed);
  round.Committed(*commit);
  EXPECT_EQ(round.history().size(), 1u);
  EXPECT_FALSE(round.Outdated({0, 1}));
  EXPECT_TRUE(round.Outdated({0})) << "a worker lost while the round was pending";
}

TEST(MembershipRound, ResumingContinuesTheSavedHistorysEpochs) {
  MembershipRound round;
  round.StartJob({{0, {0, 1}, 0}, {50, {0}, 1}}, 80, {0, 1});
  ASSERT_EQ(round.history().size(), 3u);
  EXPECT_EQ(round.history().back().step, 80u);
  EXPECT_EQ(round.history().back().epoch, 2u);
  EXPECT_EQ(round.Begin({0}).epoch, 3u);
}

TEST(MembershipRound, ARestartedCoordinatorBeginsTheInterruptedRoundAgain) {
  MembershipRound round;
  round.Restore(4, {{0, {0, 1}, 0}, {30, {1}, 4}}, /*interrupted=*/true);
  EXPECT_TRUE(round.interrupted());
  EXPECT_FALSE(round.pending());
  EXPECT_EQ(round.epoch(), 4u);
  EXPECT_FALSE(round.Outdated({1}));
  EXPECT_EQ(round.Begin({1}).epoch, 5u);
  EXPECT_FALSE(round.interrupted());
}

// Each PS says the first step a lost worker's gradients are missing from
// its chunks; the commit owes the earliest, over rounds begun again too,
// and only for a worker that is gone.
TEST(MembershipRound, ACommitOwesALostWorkersEarliestUnfinishedStep) {
  MembershipRound round = StartedWith({0, 1, 2});
  round.Begin({0, 2});  // worker 1 lost
  EXPECT_FALSE(round.Prepared(0, 1, 10, {0, 1, 2}, {{1, 10}}).has_value());
  round.Begin({0, 2});  // begun again: PS 0's report of the first round still counts
  EXPECT_FALSE(round.Prepared(1, 2, 10, {0, 1, 2}, {{1, 9}}).has_value());
  EXPECT_FALSE(round.Prepared(0, 2, 10, {0, 1, 2}).has_value()) << "it told its news already";
  auto commit = round.Prepared(2, 2, 10, {0, 1, 2});
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 11u);
  ASSERT_EQ(commit->unfinished.size(), 1u);
  EXPECT_EQ(commit->unfinished[0], (UnfinishedSteps{1, 9})) << "the earliest of the reports";
  round.Committed(*commit);
  ASSERT_EQ(round.history().back().unfinished.size(), 1u);
  EXPECT_EQ(round.history().back().unfinished[0].from_step, 9u);

  // The next round owes nothing it was not told; a worker back in the live
  // set (replaced) and a step not before the change are not owed.
  round.Begin({0, 1, 2});
  commit = round.Prepared(0, 3, 20, {0, 1, 2}, {{1, 19}});
  ASSERT_FALSE(commit.has_value());
  commit = round.Prepared(1, 3, 20, {0, 1, 2});
  ASSERT_FALSE(commit.has_value());
  commit = round.Prepared(2, 3, 20, {0, 1, 2});
  ASSERT_TRUE(commit.has_value());
  EXPECT_TRUE(commit->unfinished.empty());
  round.Committed(*commit);
  round.Begin({0, 1});
  commit = round.Prepared(0, 4, 30, {0, 1, 2}, {{2, 31}});
  ASSERT_FALSE(commit.has_value());
  round.Prepared(1, 4, 30, {0, 1, 2});
  commit = round.Prepared(2, 4, 30, {0, 1, 2});
  ASSERT_TRUE(commit.has_value());
  EXPECT_TRUE(commit->unfinished.empty()) << "step 31 is not before the change at 31";
}

// Loops that draw their data 3 steps ahead (bsp): a loss takes effect at
// once and its data 3 steps later, every worker that left owing its share
// of the steps between; a join or new shares take effect 3 steps later (no
// worker drew for those steps yet); a round that both loses and adds
// workers commits the loss alone; no change takes effect before the last.
TEST(MembershipRound, WithDataDrawnAheadALossesDataAndAJoinFollowPastIt) {
  MembershipRound round = StartedWith({0, 1, 2});
  round.Begin({0, 2});  // worker 1 lost, its gradients of step 10 missing
  auto commit = round.Prepared(0, 1, 10, {0}, {{1, 10}}, 3);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 11u) << "the loss at once: nobody waits for the lost worker";
  EXPECT_EQ(commit->data_step, 14u);
  EXPECT_EQ(commit->frozen_at, 11u);
  ASSERT_EQ(commit->unfinished.size(), 1u);
  EXPECT_EQ(commit->unfinished[0], (UnfinishedSteps{1, 10}));
  round.Committed(*commit);
  EXPECT_EQ(round.history().back().layout_step(), 14u);

  round.Begin({0});  // worker 2 left with no step missing: still owes steps 21-23
  commit = round.Prepared(0, 2, 20, {0}, {}, 3);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 21u);
  EXPECT_EQ(commit->data_step, 24u);
  ASSERT_EQ(commit->unfinished.size(), 1u);
  EXPECT_EQ(commit->unfinished[0], (UnfinishedSteps{2, 21}));
  round.Committed(*commit);

  round.Begin({0, 1});  // a replacement joins
  commit = round.Prepared(0, 3, 30, {0}, {}, 3);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 34u) << "the join 3 steps later";
  EXPECT_EQ(commit->data_step, 0u);
  EXPECT_EQ(commit->frozen_at, 31u) << "an on-demand snapshot is of the step the PS stopped at";
  EXPECT_TRUE(commit->unfinished.empty());
  round.Committed(*commit);

  round.Begin({1, 2});  // worker 0 lost before step 34, worker 2 joins: the loss alone
  commit = round.Prepared(0, 4, 31, {0}, {{0, 31}}, 3);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->live, (std::vector<int>{1})) << "worker 2 waits for the next round";
  EXPECT_EQ(commit->step, 34u) << "not before the join it follows";
  EXPECT_EQ(commit->data_step, 35u);
  round.Committed(*commit);
  EXPECT_TRUE(round.Outdated({1, 2})) << "a round for the joiner is due";
}

TEST(MembershipRound, WithoutDataDrawnAheadNothingMoves) {
  MembershipRound round = StartedWith({0, 1, 2});
  round.Begin({0, 1, 2, 3});
  auto commit = round.Prepared(0, 1, 10, {0}, {}, 0);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 11u);
  EXPECT_EQ(commit->data_step, 0u);
  round.Committed(*commit);
  round.Begin({0, 2, 3});
  commit = round.Prepared(0, 2, 20, {0}, {}, 0);
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->step, 21u);
  EXPECT_TRUE(commit->unfinished.empty()) << "no step of the lost worker's is owed";
}

}  // namespace
}  // namespace een
