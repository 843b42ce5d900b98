// LocalHost, the launch backends' seam on this machine: what a supervisor
// sees of the processes it starts (output lines with their label, the last
// line, how each ended) and that StopAll leaves nothing running.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>

#include "launcher/local_host.h"

namespace een {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

ProcessSpec Shell(const std::string& label, const std::string& script, bool terminal = false) {
  return ProcessSpec{label, {"/bin/sh", "-c", script}, {{"EEN_TEST_VALUE", "42"}}, {}, terminal};
}

// Whether `pid` runs (a zombie left for init to reap does not).
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Watches until `p` ended (at most 30 s).
bool WatchUntilExit(LocalHost& host, const RoleProcess& p) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(30);
  while (!p.exited() && steady_clock::now() < deadline) host.Watch(milliseconds(50));
  return p.exited();
}

TEST(LocalHost, ForwardsLabelledLinesAndSaysHowAProcessEnded) {
  LocalHost host;
  testing::internal::CaptureStdout();
  auto p = host.Start(Shell("ps 7", "echo first; echo \"value $EEN_TEST_VALUE\"; echo; exit 3"));
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(WatchUntilExit(host, **p));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("[ps 7] first\n[ps 7] value 42\n"), std::string::npos) << out;
  EXPECT_FALSE((*p)->succeeded());
  EXPECT_FALSE((*p)->killed_by_signal());
  EXPECT_EQ((*p)->ExitDescription(), "exited with status 3");
  EXPECT_EQ((*p)->last_line(), "value 42");  // the empty line does not count
}

TEST(LocalHost, ALineWithoutItsEndIsForwardedWhenTheProcessEnds) {
  LocalHost host;
  testing::internal::CaptureStdout();
  auto p = host.Start(Shell("worker 0", "printf 'no newline'"));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WatchUntilExit(host, **p));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("[worker 0] no newline\n"), std::string::npos) << out;
  EXPECT_TRUE((*p)->succeeded());
}

TEST(LocalHost, AKilledProcessIsNamedWithItsSignal) {
  LocalHost host;
  auto p = host.Start(Shell("ps 0", "kill -9 $$"));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WatchUntilExit(host, **p));
  EXPECT_TRUE((*p)->killed_by_signal());
  EXPECT_EQ((*p)->term_signal(), SIGKILL);
  EXPECT_EQ((*p)->ExitDescription(), "was killed by SIGKILL");
}

TEST(LocalHost, AProgramThatCannotRunSaysSo) {
  LocalHost host;
  testing::internal::CaptureStdout();
  auto p = host.Start(ProcessSpec{"worker 1", {"/nonexistent/train"}, {}, {}, true});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WatchUntilExit(host, **p));
  testing::internal::GetCapturedStdout();
  EXPECT_EQ((*p)->ExitDescription(), "exited with status 127");
  EXPECT_NE((*p)->last_line().find("cannot run '/nonexistent/train'"), std::string::npos)
      << (*p)->last_line();
}

TEST(LocalHost, ATerminalMakesTheProgramSeeOne) {
  LocalHost host;
  testing::internal::CaptureStdout();
  auto p = host.Start(Shell("worker 2", "if [ -t 1 ]; then echo tty; else echo pipe; fi", true));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WatchUntilExit(host, **p));
  testing::internal::GetCapturedStdout();
  EXPECT_EQ((*p)->last_line(), "tty");
}

TEST(LocalHost, StopAllEndsEveryProcessAndWhatItStarted) {
  LocalHost host;
  testing::internal::CaptureStdout();
  // One stops on SIGTERM; one ignores it and has a child of its own.
  auto polite = host.Start(Shell("ps 0", "echo up; exec sleep 600"));
  auto stubborn = host.Start(
      Shell("worker 0", "trap '' TERM; sleep 600 & echo \"child $!\"; while :; do sleep 1; done"));
  ASSERT_TRUE(polite.ok() && stubborn.ok());
  const auto deadline = steady_clock::now() + std::chrono::seconds(30);
  while (((*stubborn)->last_line().rfind("child ", 0) != 0 || (*polite)->last_line() != "up") &&
         steady_clock::now() < deadline) {
    host.Watch(milliseconds(50));
  }
  ASSERT_EQ((*stubborn)->last_line().rfind("child ", 0), 0u) << (*stubborn)->last_line();
  const pid_t grandchild = std::stoi((*stubborn)->last_line().substr(6));
  host.StopAll(milliseconds(300));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE((*polite)->exited());
  EXPECT_EQ((*polite)->term_signal(), SIGTERM);
  EXPECT_TRUE((*stubborn)->exited());
  EXPECT_EQ((*stubborn)->term_signal(), SIGKILL);
  EXPECT_NE(out.find("worker 0 did not stop on SIGTERM; sending SIGKILL"), std::string::npos)
      << out;
  // The grandchild was in the stubborn one's group: killed too.
  const auto gone_by = steady_clock::now() + std::chrono::seconds(30);
  while (Alive(grandchild) && steady_clock::now() < gone_by) host.Watch(milliseconds(20));
  EXPECT_FALSE(Alive(grandchild)) << "pid " << grandchild << " outlived StopAll";
}

}  // namespace
}  // namespace een
