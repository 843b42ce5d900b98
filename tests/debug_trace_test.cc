// `eenctl debug --trace full` and the flight records, as a user would check
// them: one trace of every process for the steps asked, loadable in
// Perfetto (Chrome trace-event JSON), with flow arrows from each push to its
// apply to its pull; a picture of the step breakdown; a flight record when
// a step stalls and when the job fails, the launcher naming it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "support/job_output.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using nlohmann::json;
using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

testing::Subprocess StartJob(const std::vector<std::string>& launch,
                             const std::vector<std::string>& train) {
  std::vector<std::string> argv = {kBin + "/een-launch",  "--ps", "2", "--workers", "3",
                                   "--progress-interval", "200ms"};
  argv.insert(argv.end(), launch.begin(), launch.end());
  argv.push_back("--");
  argv.push_back(kBin + "/equivalence_train");
  argv.insert(argv.end(), train.begin(), train.end());
  return testing::Subprocess(argv);
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// pid -> "worker 0" / "ps 1", from the trace's metadata.
std::map<int, std::string> ProcessNames(const json& trace) {
  std::map<int, std::string> names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      const std::string name = e["args"]["name"];
      names[e["pid"].get<int>()] = name.substr(0, name.find(" ("));
    }
  }
  return names;
}

TEST(DebugTrace, OneTraceOfEveryProcessWithFlowsFromPushToApplyToPull) {
  testing::ScratchFolder base("debug-trace");
  const std::string dir = base.path();
  testing::Subprocess job =
      StartJob({"--replicas", "2"}, {"--steps", "1000000", "--out", dir + "/params.bin"});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  auto status = testing::Run({kBin + "/eenctl", "status", "--json", "--coordinator", coordinator},
                             seconds(30));
  ASSERT_EQ(status.exit_code, 0) << status.output;
  const uint64_t now = json::parse(status.output)["job"]["step"];
  const uint64_t first = now + 2, last = now + 4;

  auto r = testing::Run({kBin + "/eenctl", "debug", "--trace", "full", "--coordinator", coordinator,
                         "--steps", std::to_string(first) + ":" + std::to_string(last), "-o",
                         dir + "/trace.json", "--plot", dir + "/steps.png"},
                        seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trace written to " + dir + "/trace.json"), std::string::npos)
      << r.output;
  const json trace = ReadJson(dir + "/trace.json");
  const auto names = ProcessNames(trace);
  std::set<std::string> who;
  for (const auto& [pid, name] : names) who.insert(name);
  EXPECT_EQ(who, (std::set<std::string>{"ps 0", "ps 1", "worker 0", "worker 1", "worker 2"}));

  // Every process has its events for every step of the window.
  std::map<std::pair<std::string, uint64_t>, std::set<std::string>> seen;  // (who, step) -> names
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;  // (pid, tid)
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const uint64_t step = e["args"]["step"];
    EXPECT_GE(e["ts"].get<double>(), 0) << e;
    seen[{names.at(e["pid"].get<int>()), step}].insert(e["name"].get<std::string>());
    slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
        {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  for (uint64_t step = first; step <= last; ++step) {
    for (const char* w : {"worker 0", "worker 1", "worker 2"}) {
      for (const char* kind : {"backward", "push", "pull answer", "sync (Step)"}) {
        EXPECT_TRUE((seen[{w, step}].count(kind))) << w << " step " << step << ": no " << kind;
      }
    }
    for (const char* ps : {"ps 0", "ps 1"}) {
      for (const char* kind : {"push received", "applied", "pull answered", "backup confirmed"}) {
        EXPECT_TRUE((seen[{ps, step}].count(kind))) << ps << " step " << step << ": no " << kind;
      }
    }
  }

  // Flow arrows: each starts and ends once, inside a slice of its track,
  // pushes go from a worker to a PS, pulls from a PS to a worker.
  std::map<uint64_t, std::vector<json>> flows;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "s" || e["ph"] == "f") flows[e["id"].get<uint64_t>()].push_back(e);
  }
  std::map<std::string, int> links;
  auto inside = [&](const json& e) {
    for (const auto& [begin, end] : slices[{e["pid"].get<int>(), e["tid"].get<int>()}]) {
      if (begin <= e["ts"].get<double>() && e["ts"].get<double>() <= end) return true;
    }
    return false;
  };
  for (const auto& [id, ends] : flows) {
    ASSERT_EQ(ends.size(), 2u) << id;
    const json& from = ends[0]["ph"] == "s" ? ends[0] : ends[1];
    const json& to = ends[0]["ph"] == "s" ? ends[1] : ends[0];
    ASSERT_EQ(from["ph"], "s");
    ASSERT_EQ(to["ph"], "f");
    EXPECT_TRUE(inside(from)) << from;
    EXPECT_TRUE(inside(to)) << to;
    // Each process's clock is aligned to the coordinator's from heartbeat
    // round trips: on a busy machine that is off by a few ms (CI once saw
    // an arrow 1.14 ms backwards), so an arrow may point back up to 5 ms.
    EXPECT_LE(from["ts"].get<double>(), to["ts"].get<double>() + 5000) << from << to;
    const std::string name = from["name"];
    links[name]++;
    const std::string a = names.at(from["pid"].get<int>()), b = names.at(to["pid"].get<int>());
    if (name == "push") {
      EXPECT_TRUE(a.rfind("worker", 0) == 0 && b.rfind("ps", 0) == 0) << a << " -> " << b;
    } else if (name == "pull") {
      EXPECT_TRUE(a.rfind("ps", 0) == 0 && b.rfind("worker", 0) == 0) << a << " -> " << b;
    } else {
      EXPECT_EQ(a, b) << name;
    }
  }
  for (const char* link : {"push", "apply", "answer", "pull"}) {
    // 3 workers x 3 steps x at least one chunk each way.
    EXPECT_GE(links[link], 9) << link;
  }

  // The picture: a PNG file.
  std::ifstream png(dir + "/steps.png", std::ios::binary);
  char magic[4] = {};
  png.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");

  // Steps out of range are refused with the reason.
  auto bad = testing::Run({kBin + "/eenctl", "debug", "--trace", "full", "--coordinator",
                           coordinator, "--steps", "5:1"},
                          seconds(30));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  auto wide = testing::Run({kBin + "/eenctl", "debug", "--trace", "full", "--coordinator",
                            coordinator, "--steps", "1:1000"},
                           seconds(30));
  EXPECT_EQ(wide.exit_code, 2) << wide.output;
  EXPECT_NE(wide.output.find("at most 100 at a time"), std::string::npos) << wide.output;
  // Steps the job has not reached when --wait runs out: said so (it answers).
  auto early =
      testing::Run({kBin + "/eenctl", "debug", "--trace", "full", "--coordinator", coordinator,
                    "--steps", "900000:900001", "--wait", "2", "-o", dir + "/never.json"},
                   seconds(60));
  EXPECT_EQ(early.exit_code, 2) << early.output;
  EXPECT_NE(early.output.find("step 900001 not reached yet after 2 s"), std::string::npos)
      << early.output;
  job.Signal(SIGINT);
  EXPECT_TRUE(job.Wait(seconds(30)).has_value());
}

std::vector<std::string> FlightRecords(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("een-flight-", 0) == 0) found.push_back(e.path());
  }
  return found;
}

TEST(FlightRecorder, AStepHeldByTheProgramsOwnCodeIsSaidWithoutAFlightRecord) {
  testing::ScratchFolder base("flight-stall");
  const std::string dir = base.path();
  // Worker 1 sleeps 1.5 s before each step (as rank 0 evaluating would):
  // each step waits for it longer than the failover threshold (its
  // heartbeats go on: it is not lost), in the program, not in EEN: said,
  // with no record of EEN's steps.
  testing::Subprocess job = StartJob({"--flight-dir", dir, "--failover-threshold", "800ms"},
                                     {"--steps", "1000000", "--slow-rank", "1", "--slow-ms", "1500",
                                      "--out", dir + "/params.bin"});
  ASSERT_TRUE(job.WaitUntil(
      [](const std::string& out) {
        return std::regex_search(out, std::regex("step [0-9]+ waits for worker\\(s\\) 1, busy in "
                                                 "the program's own code for [0-9]+ ms"));
      },
      seconds(90)))
      << job.output();
  EXPECT_EQ(job.output().find("flight record of steps"), std::string::npos) << job.output();
  EXPECT_TRUE(FlightRecords(dir).empty());
  job.Signal(SIGINT);
  EXPECT_TRUE(job.Wait(seconds(30)).has_value());
}

TEST(FlightRecorder, AFailedJobWritesItsFlightRecordAndTheLauncherNamesIt) {
  testing::ScratchFolder base("flight-failed");
  const std::string dir = base.path();
  testing::Subprocess job =
      StartJob({"--flight-dir", dir}, {"--steps", "1000000", "--out", dir + "/params.bin"});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  // Worker 2 stopped: silent past the failover threshold, lost; the job
  // needs every worker, so it fails.
  const std::string coordinator = testing::CoordinatorAddress(job.output());
  auto status = testing::Run({kBin + "/eenctl", "status", "--json", "--coordinator", coordinator},
                             seconds(30));
  ASSERT_EQ(status.exit_code, 0) << status.output;
  int pid = 0;
  const json processes = json::parse(status.output)["processes"];
  for (const auto& p : processes) {
    if (p["role"] == "worker" && p["rank"] == 2) pid = p["pid"];
  }
  ASSERT_GT(pid, 0) << status.output;
  kill(pid, SIGSTOP);
  const auto code = job.Wait(seconds(60));
  kill(pid, SIGCONT);
  ASSERT_TRUE(code.has_value()) << job.output();
  EXPECT_NE(*code, 0);
  std::smatch m;
  const std::string out = job.output();
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex("job failed: [^\n]*\\(flight record of the last steps: ([^)]+)\\)")))
      << out;
  const json trace = ReadJson(m[1]);
  EXPECT_EQ(ProcessNames(trace).size(), 5u);
  EXPECT_NE(trace["otherData"]["reason"].get<std::string>().find("worker 2"), std::string::npos)
      << trace["otherData"];
}

}  // namespace
}  // namespace een
