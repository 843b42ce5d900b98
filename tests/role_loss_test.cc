// Any role lost at any moment: a seeded sequence of jobs (2 PS with
// replicas 2, 2 workers with replacements, the coordinator restartable),
// each losing one process, picked at random among the PS, the workers and
// the coordinator, at a random moment of the whole job's life: while it
// starts (before or during registration), while it trains, while it ends.
// Each must end with exit 0 and parameters bitwise those of an undisturbed
// run (every worker pushes the same gradients, so who trained which step
// does not matter), with no process of it left and no shared memory of it
// left. A PS lost before its shards' first copies were built (the first
// moments after the start, no snapshot to fall back on) is one of them:
// worker 0 sends the initial values again to the new primaries; a second
// test makes that moment happen every time.
// EEN_ROLE_LOSS_SEED and EEN_ROLE_LOSS_RUNS change the sequence (a
// failing run prints its seed, victim and moment).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "support/files.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;
constexpr int kSteps = 150;

// The role a child of een-launch plays ("ps 1", "worker 0", "coordinator"), from its environment.
std::string RoleOf(pid_t pid) {
  const std::string env = testing::ReadBytes("/proc/" + std::to_string(pid) + "/environ");
  std::string role, rank;
  for (size_t at = 0; at < env.size();) {
    const size_t end = std::min(env.find('\0', at), env.size());
    const std::string var = env.substr(at, end - at);
    if (var.rfind("EEN_ROLE=", 0) == 0) role = var.substr(9);
    if (var.rfind("EEN_RANK=", 0) == 0) rank = var.substr(9);
    at = end + 1;
  }
  if (role.empty()) {
    const std::string cmd = testing::ReadBytes("/proc/" + std::to_string(pid) + "/cmdline");
    return cmd.find("een-coordinator") != std::string::npos ? "coordinator" : "";
  }
  return role + " " + rank;
}

// Where the job stood when the kill came, from its output so far.
std::string Phase(const std::string& out) {
  if (out.find("job finished") != std::string::npos) return "after the end";
  if (out.find("finished at step") != std::string::npos) return "while it ends";
  if (out.find("job starts:") == std::string::npos) {
    return out.find("registered") == std::string::npos ? "before registration"
                                                       : "during registration";
  }
  if (out.find("progress: step") == std::string::npos) return "before the first step";
  return "while it trains";
}

// The child of een-launch `launcher` that plays `role` ("ps 1"), or -1.
pid_t PidOfRole(pid_t launcher, const std::string& role) {
  for (pid_t p : testing::ChildrenOf(launcher)) {
    if (RoleOf(p) == role) return p;
  }
  return -1;
}

// Whether the job's output says `text` within `timeout`.
bool Says(testing::Subprocess& job, const std::string& text, milliseconds timeout) {
  return job.WaitUntil([&](const std::string& o) { return o.find(text) != std::string::npos; },
                       timeout);
}

bool Alive(pid_t pid) {
  const std::string stat = testing::ReadBytes("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

class RoleLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream trace(base_ / "small.trace");
    trace << "# een trace v1: small\n";
    for (int i = 4; i >= 0; --i)
      trace << "layer" << i << ".weight\t" << (i % 2 + 1) * 100000 << "\n";
  }
  std::vector<std::string> Job(const std::string& transport, const std::string& out) const {
    return {kBin + "/een-launch",
            "--ps",
            "2",
            "--workers",
            "2",
            "--replicas",
            "2",
            "--max-restarts",
            "2",
            "--transport",
            transport,
            "--progress-interval",
            "200ms",
            "--",
            kBin + "/een-bench-worker",
            base_ / "small.trace",
            "--steps",
            std::to_string(kSteps),
            "--warmup",
            "0",
            "--compute-ms",
            "8",
            "--report",
            base_.path(),
            "--params-out",
            out};
  }
  // Worker 0's parameters after an undisturbed run over tcp ("" when it failed).
  std::string UndisturbedParameters() const {
    auto whole = testing::Run(Job("tcp", base_ / "whole"), seconds(120));
    EXPECT_EQ(whole.exit_code, 0) << whole.output;
    return whole.exit_code == 0 ? testing::ReadBytes(base_ / "whole.rank-0") : "";
  }
  testing::ScratchFolder base_{"role-loss-test"};
};

TEST_F(RoleLoss, ARandomRoleKilledAtARandomMomentOfTheJobsLifeChangesNothing) {
  const char* seed_env = std::getenv("EEN_ROLE_LOSS_SEED");
  const char* runs_env = std::getenv("EEN_ROLE_LOSS_RUNS");
  const uint64_t seed = seed_env ? std::stoull(seed_env) : 20261202;
  const int runs = runs_env ? std::stoi(runs_env) : 16;
  std::mt19937_64 rng(seed);

  // Two undisturbed runs: the reference parameters (equal in both), and how
  // long a job lives here (the shorter: the first one starts cold).
  milliseconds life{0};
  std::string reference;
  for (const char* name : {"whole", "again"}) {
    const auto start = std::chrono::steady_clock::now();
    auto whole = testing::Run(Job("tcp", base_ / name), seconds(120));
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    const auto took =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    life = life.count() == 0 ? took : std::min(life, took);
    const std::string params = testing::ReadBytes(base_ / (std::string(name) + ".rank-0"));
    ASSERT_FALSE(params.empty());
    ASSERT_EQ(testing::ReadBytes(base_ / (std::string(name) + ".rank-1")), params);
    if (!reference.empty()) {
      ASSERT_EQ(params, reference) << "two undisturbed runs differ";
    }
    reference = params;
  }

  const std::vector<std::string> victims = {"ps 0", "ps 1", "worker 0", "worker 1", "coordinator"};
  std::map<std::string, int> phases;
  for (int run = 0; run < runs; ++run) {
    const std::string victim = victims[rng() % victims.size()];
    // A third of the moments in the start-up (the first 300 ms: launch,
    // registration, the first values), a third around the end (the last
    // fifth of an undisturbed job's life), a third anywhere in between.
    const int64_t span = life.count();
    const int mode = static_cast<int>(rng() % 3);
    const milliseconds at(mode == 0   ? int64_t(rng() % 300)
                          : mode == 1 ? span * 4 / 5 + int64_t(rng() % (span / 5 + 1))
                                      : int64_t(rng() % (span + 1)));
    const std::string transport = run % 2 ? "shm" : "tcp";
    const std::string out = base_ / ("run" + std::to_string(run));
    const std::string what = "run " + std::to_string(run) +
                             " (EEN_ROLE_LOSS_SEED=" + std::to_string(seed) + "): " + victim +
                             " killed at " + std::to_string(at.count()) + " ms over " + transport;
    testing::Subprocess job(Job(transport, out));
    std::set<pid_t> seen;
    const auto launched = std::chrono::steady_clock::now();
    pid_t target = -1;
    // Watch the job's processes until the moment comes (a process may live
    // shorter than a poll: its replacement is seen instead).
    while (true) {
      for (pid_t p : testing::ChildrenOf(job.pid())) {
        seen.insert(p);
        if (RoleOf(p) == victim && Alive(p)) target = p;
      }
      if (std::chrono::steady_clock::now() - launched >= at || job.Wait(milliseconds(0))) break;
      // Reads the job's output meanwhile (for the phase); the moment is the
      // test's input, not a state to wait for.
      job.WaitUntil([](const std::string&) { return false; }, milliseconds(5));
    }
    // Not started yet (the first moments): the first moment it runs.
    const auto until = std::chrono::steady_clock::now() + seconds(3);
    while (!(target > 0 && Alive(target)) && !job.Wait(milliseconds(0)) &&
           std::chrono::steady_clock::now() < until) {
      for (pid_t p : testing::ChildrenOf(job.pid())) {
        seen.insert(p);
        if (RoleOf(p) == victim && Alive(p)) target = p;
      }
      if (!(target > 0)) job.WaitUntil([](const std::string&) { return false; }, milliseconds(2));
    }
    std::string phase = Phase(job.output());
    if (target > 0 && Alive(target) && kill(target, SIGKILL) == 0) {
      phases[phase]++;
    } else {
      phase = "no kill (" + victim + " not running then)";
      phases["not running"]++;
    }
    auto code = job.Wait(seconds(120));
    ASSERT_TRUE(code.has_value()) << what << " during '" << phase << "': the job did not end\n"
                                  << job.output();
    EXPECT_EQ(*code, 0) << what << " during '" << phase << "'\n" << job.output();
    for (int r = 0; r < 2; ++r) {
      const std::string params = testing::ReadBytes(out + ".rank-" + std::to_string(r));
      // A worker killed between its last step and writing its file: the
      // job had nothing left for a replacement (one that came was no longer
      // needed, een-launch says); the other worker's file holds the values.
      if (params.empty() && victim == "worker " + std::to_string(r) &&
          (job.output().find("was no longer needed by it, nothing was lost") != std::string::npos ||
           job.output().find("goes on without a replacement") != std::string::npos)) {
        std::printf(
            "[ role loss ] %s: killed after its last step, before it wrote its "
            "parameters; no replacement was needed\n",
            what.c_str());
        continue;
      }
      EXPECT_TRUE(params == reference)  // not EXPECT_EQ: it would print megabytes of floats
          << what << " during '" << phase << "': worker " << r << "'s parameters differ ("
          << params.size() << " bytes, the undisturbed run's " << reference.size() << ")\n"
          << job.output();
    }
    for (pid_t p : seen) EXPECT_FALSE(Alive(p)) << what << ": pid " << p << " is left behind";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string name = e.path().filename();
      for (pid_t p : seen) {
        EXPECT_NE(name.rfind("een-" + std::to_string(p) + "-", 0), 0u)
            << what << ": shared memory " << name << " is left behind";
      }
    }
    std::printf("[ role loss ] %s during '%s': exit %d\n", what.c_str(), phase.c_str(), *code);
    if (::testing::Test::HasFailure()) break;
  }
  std::string summary;
  for (const auto& [phase, n] : phases) summary += " " + phase + ": " + std::to_string(n) + ";";
  std::printf("[ role loss ] %d runs, phases:%s\n", runs, summary.c_str());
}

// The moment the test above hits only now and then: a PS lost while the
// other still waits for the images of its backups (held back by a SIGSTOP
// of a few hundred ms from the job's start), so no copy of the lost PS's
// shards exists anywhere but in worker 0, which sends its initial values
// again. Every time: exit 0, the undisturbed parameters.
TEST_F(RoleLoss, APsLostBeforeItsBackupsHeldTheFirstValuesChangesNothing) {
  const std::string reference = UndisturbedParameters();
  ASSERT_FALSE(reference.empty());
  int again = 0;
  for (int run = 0; run < 4; ++run) {
    const std::string transport = run % 2 ? "shm" : "tcp";
    const std::string out = base_ / ("early" + std::to_string(run));
    const std::string what = "run " + std::to_string(run) + " over " + transport;
    testing::Subprocess job(Job(transport, out));
    ASSERT_TRUE(Says(job, "job starts:", seconds(60))) << job.output();
    const pid_t backup = PidOfRole(job.pid(), "ps 0"), victim = PidOfRole(job.pid(), "ps 1");
    ASSERT_GT(backup, 0);
    ASSERT_GT(victim, 0);
    ASSERT_EQ(kill(backup, SIGSTOP), 0);
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    // Held until the coordinator failed over (well inside the threshold).
    Says(job, "failing over", milliseconds(300));
    ASSERT_EQ(kill(backup, SIGCONT), 0);
    auto code = job.Wait(seconds(120));
    ASSERT_TRUE(code.has_value()) << what << ": the job did not end\n" << job.output();
    EXPECT_EQ(*code, 0) << what << "\n" << job.output();
    for (int r = 0; r < 2; ++r) {
      const std::string params = testing::ReadBytes(out + ".rank-" + std::to_string(r));
      EXPECT_TRUE(params == reference)
          << what << ": worker " << r << "'s parameters differ (" << params.size()
          << " bytes, the undisturbed run's " << reference.size() << ")\n"
          << job.output();
    }
    const bool hit = job.output().find("get the initial values again") != std::string::npos;
    again += hit ? 1 : 0;
    std::printf("[ role loss ] %s: ps 1 lost %s its backups held the first values; exit %d\n",
                what.c_str(), hit ? "before" : "after", *code);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(again, 0) << "the PS was never lost before its backups were built: the test "
                         "did not reach the moment it is for";
}

// Worker 0 lost after the job started but before it sent the initial
// values (found by the random test above, rarely): its replacement joins
// the running job and sends its own (the PS keep any they hold), and the
// job trains on. Before, every worker waited for values no one would send.
// The first incarnation of worker 0 is tests/first_values_loser.cc.
TEST_F(RoleLoss, AWorker0LostBeforeItSentTheFirstValuesIsReplacedAndTheJobTrains) {
  const std::string out = base_ / "params.bin", mark = base_ / "worker-0-lost";
  const std::string program = kBin + "/equivalence_train --optimizer adam --steps 200 --out " + out;
  auto job =
      testing::Run({kBin + "/een-launch", "--ps", "2", "--workers", "2", "--max-restarts", "1",
                    "--progress-interval", "200ms", "--", "/bin/sh", "-c",
                    "if [ \"$EEN_RANK\" = 0 ] && mkdir " + mark + " 2>/dev/null; then exec " +
                        kBin + "/first_values_loser; fi; exec " + program},
                   seconds(120));
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("worker 0 joined and dies before sending the initial values"),
            std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("worker 0 (host"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("joins the running job"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("job finished: 2 of 2 workers succeeded"), std::string::npos)
      << job.output;
  EXPECT_GT(testing::ReadBytes(out).size(), 4000u) << "worker 0's replacement saved no values";
}

// A worker killed after its last step, once the coordinator had finished
// the job and left (found by the random test above, rarely: the kill came
// while worker 0 was tearing down after Finish()). Worker 0 is stopped
// once the coordinator heard it finish, killed once the coordinator has
// exited: the job lost nothing, exit 0, both workers' parameters are the
// undisturbed run's. Before, een-launch failed the job naming the kill.
TEST_F(RoleLoss, AWorkerKilledAfterTheCoordinatorFinishedTheJobLosesNothing) {
  const std::string reference = UndisturbedParameters();
  ASSERT_FALSE(reference.empty());
  const std::string out = base_ / "late";
  testing::Subprocess job(Job("tcp", out));
  ASSERT_TRUE(Says(job, "job starts:", seconds(60))) << job.output();
  const pid_t coordinator = PidOfRole(job.pid(), "coordinator");
  const pid_t worker0 = PidOfRole(job.pid(), "worker 0");
  ASSERT_GT(coordinator, 0);
  ASSERT_GT(worker0, 0);
  ASSERT_TRUE(Says(job, "worker 0 finished at step", seconds(120))) << job.output();
  ASSERT_EQ(kill(worker0, SIGSTOP), 0);
  ASSERT_TRUE(Says(job, "job finished: every worker done", seconds(60))) << job.output();
  ASSERT_TRUE(job.WaitUntil([&](const std::string&) { return !Alive(coordinator); }, seconds(30)))
      << "the coordinator did not exit\n"
      << job.output();
  ASSERT_EQ(kill(worker0, SIGKILL), 0);
  auto code = job.Wait(seconds(60));
  ASSERT_TRUE(code.has_value()) << "the job did not end\n" << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  EXPECT_NE(job.output().find("after the coordinator had finished the job: the job lost nothing"),
            std::string::npos)
      << job.output();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(testing::ReadBytes(out + ".rank-" + std::to_string(r)) == reference)
        << "worker " << r << "'s parameters differ\n"
        << job.output();
  }
}

// A PS lost while a membership round waits for its answer: worker 1 is
// killed (a round begins: every PS is asked for its newest version), ps 0
// answers and holds every answer beyond that version until the commit,
// ps 1 is stopped so that it never answers, and is then killed. The round
// can never complete as it was begun; the coordinator begins it again for
// the PS alive now (before, the job hung there until --step-timeout).
// Exit 0, the undisturbed parameters.
TEST_F(RoleLoss, APsLostWhileAMembershipRoundWaitsForItChangesNothing) {
  const std::string reference = UndisturbedParameters();
  ASSERT_FALSE(reference.empty());
  const std::string out = base_ / "round";
  testing::Subprocess job(Job("tcp", out));
  ASSERT_TRUE(Says(job, "progress: step", seconds(60))) << job.output();
  const pid_t ps1 = PidOfRole(job.pid(), "ps 1"), worker1 = PidOfRole(job.pid(), "worker 1");
  ASSERT_GT(ps1, 0);
  ASSERT_GT(worker1, 0);
  ASSERT_EQ(kill(ps1, SIGSTOP), 0);
  ASSERT_EQ(kill(worker1, SIGKILL), 0);
  const bool answered = Says(job, "worker 1 left the job", seconds(30));
  ASSERT_EQ(kill(ps1, SIGKILL), 0);
  ASSERT_TRUE(answered) << "ps 0 never answered the round\n" << job.output();
  auto code = job.Wait(seconds(120));
  ASSERT_TRUE(code.has_value()) << "the job did not end\n" << job.output();
  EXPECT_EQ(*code, 0) << job.output();
  // ps 1 declared lost (by its silence) before the round began would be an
  // ordinary loss: said, not failed (a busy machine may make it so).
  std::printf("[ role loss ] the round %s\n",
              job.output().find("began again") != std::string::npos
                  ? "began again after ps 1 was lost"
                  : "began after ps 1 was lost (the moment was missed)");
  for (int r = 0; r < 2; ++r) {
    const std::string params = testing::ReadBytes(out + ".rank-" + std::to_string(r));
    EXPECT_TRUE(params == reference)
        << "worker " << r << "'s parameters differ (" << params.size()
        << " bytes, the undisturbed run's " << reference.size() << ")\n"
        << job.output();
  }
}

}  // namespace
}  // namespace een
