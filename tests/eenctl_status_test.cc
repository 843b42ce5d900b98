// `eenctl status` and the /metrics page on a running job, as a user would
// read them: 2 PS + 3 workers, worker 2 slowed down on purpose (it sleeps
// before every step), so each step waits for it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "support/job_output.h"
#include "support/scratch_folder.h"
#include "support/subprocess.h"

namespace een {
namespace {

using std::chrono::seconds;
const std::string kBin = EEN_BIN_DIR;

testing::Subprocess StartSlowedJob(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {kBin + "/een-launch",  "--ps", "2", "--workers", "3",
                                   "--progress-interval", "200ms"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const std::string& a :
       {std::string("--"), kBin + "/equivalence_train", std::string("--steps"),
        std::string("1000000"), std::string("--slow-rank"), std::string("2"),
        std::string("--slow-ms"), std::string("700"), std::string("--out"), dir + "/params.bin"}) {
    argv.push_back(a);
  }
  return testing::Subprocess(argv);
}

TEST(EenctlStatus, ShowsEveryProcessAndWhatTheStepWaitsFor) {
  testing::ScratchFolder base("eenctl-status");
  testing::Subprocess job = StartSlowedJob(base.path(), {});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();

  // With no argument eenctl finds the job on this machine (this test runs
  // alone: one een-launch of ours). Poll until the rates and the wait are in.
  nlohmann::json status;
  std::string last;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  auto ready = [&] {
    if (!status.contains("processes") || status["processes"].size() != 5) return false;
    for (const auto& p : status["processes"]) {
      if (p["cpuPercent"].get<double>() <= 0) return false;
    }
    return !status["waits"].empty() && status["waits"][0]["waitedMs"].get<uint64_t>() >= 300 &&
           !status["links"].empty();
  };
  while (!ready() && std::chrono::steady_clock::now() < deadline) {
    auto r = testing::Run({kBin + "/eenctl", "status", "--json"}, seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    last = r.output;
    status = nlohmann::json::parse(r.output);
    if (!ready()) job.WaitForOutput("progress: step", seconds(2), job.output().size());
  }
  ASSERT_TRUE(ready()) << last;

  const auto& j = status["job"];
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["numPs"], 2);
  EXPECT_EQ(j["numWorkers"], 3);
  EXPECT_EQ(j["consistency"], "bsp");
  EXPECT_GE(j["mapEpoch"].get<uint64_t>(), 1u);
  EXPECT_GT(j["uptimeMs"].get<uint64_t>(), 0u);
  EXPECT_GT(j["step"].get<uint64_t>(), 0u);

  std::set<std::string> who;
  for (const auto& p : status["processes"]) {
    who.insert(p["role"].get<std::string>() + std::to_string(p["rank"].get<int>()));
    EXPECT_EQ(p["state"], "running") << p;
    EXPECT_GT(p["pid"].get<int>(), 0) << p;
    EXPECT_FALSE(p["host"].get<std::string>().empty()) << p;
    EXPECT_GT(p["rssBytes"].get<uint64_t>(), 1'000'000u) << p;
    EXPECT_LT(p["heardMsAgo"].get<uint64_t>(), 10'000u) << p;
    EXPECT_GT(p["bytesInPerSec"].get<double>() + p["bytesOutPerSec"].get<double>(), 0) << p;
  }
  EXPECT_EQ(who, (std::set<std::string>{"ps0", "ps1", "worker0", "worker1", "worker2"}));
  // Worker 2 computes for 700 ms more than the others each step: its
  // straggler score (compute over the median) stands out.
  double slowed = 0;
  for (const auto& p : status["processes"]) {
    if (p["role"] == "worker" && p["rank"] == 2) {
      slowed = p["stragglerScore"].get<double>();
      EXPECT_GE(p["computeMs"].get<double>(), 700) << p;
    }
  }
  EXPECT_GT(slowed, 2.0);
  for (const auto& p : status["processes"]) {
    if (p["role"] == "worker" && p["rank"] != 2) {
      EXPECT_LT(p["stragglerScore"].get<double>(), slowed / 4) << p;
    }
  }

  // Every chunk has one primary; no replicas, so no backups.
  ASSERT_EQ(status["shards"].size(), 2u);
  uint64_t primaries = 0;
  for (const auto& s : status["shards"]) {
    EXPECT_GT(s["primaryChunks"].get<uint64_t>(), 0u) << s;
    EXPECT_GT(s["primaryBytes"].get<uint64_t>(), 0u) << s;
    EXPECT_EQ(s["backupChunks"].get<uint64_t>(), 0u) << s;
    primaries += s["primaryChunks"].get<uint64_t>();
  }
  EXPECT_GT(primaries, 2u);

  // The step waits for worker 2, and only for it.
  const auto& wait = status["waits"][0];
  EXPECT_EQ(wait["missing"], nlohmann::json::array({2})) << wait;
  EXPECT_FALSE(wait["tensor"].get<std::string>().empty()) << wait;
  EXPECT_LT(wait["begin"].get<uint64_t>(), wait["end"].get<uint64_t>()) << wait;

  // One host: the traffic is this host's to itself.
  ASSERT_EQ(status["links"].size(), 1u) << status["links"];
  EXPECT_EQ(status["links"][0]["from"], status["links"][0]["to"]);
  EXPECT_GT(status["links"][0]["bytesPerSec"].get<double>(), 0);

  // --probe: every worker measures its link to every PS, while training
  // goes on; loopback carries far more than 10 MB/s.
  auto probed = testing::Run({kBin + "/eenctl", "status", "--json", "--probe"}, seconds(60));
  ASSERT_EQ(probed.exit_code, 0) << probed.output;
  const nlohmann::json with_probe = nlohmann::json::parse(probed.output);
  ASSERT_EQ(with_probe["links"].size(), 1u) << probed.output;
  EXPECT_GT(with_probe["links"][0]["probedBytesPerSec"].get<double>(), 1e7) << probed.output;

  // The screen for people says the same, in a line a person reads.
  std::string text;
  const std::regex waits_line(
      "waits: step [0-9]+ waits for worker 2: chunk [^\\[]+\\[[0-9]+:[0-9]+\\] on ps [01], "
      "[0-9.]+ m?s");
  for (int i = 0; i < 40; ++i) {  // the wait shows while the step waits (most of each step)
    auto r = testing::Run({kBin + "/eenctl", "status"}, seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    text = r.output;
    if (std::regex_search(text, waits_line)) break;
  }
  EXPECT_TRUE(std::regex_search(text, waits_line)) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("job: running \\| step [0-9]+"))) << text;
  for (const char* row : {"\nps 0 ", "\nps 1 ", "\nworker 0 ", "\nworker 1 ", "\nworker 2 "}) {
    EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  }
  EXPECT_NE(text.find("SHARDS"), std::string::npos) << text;

  // --watch refreshes until stopped.
  testing::Subprocess watch({kBin + "/eenctl", "status", "--watch", "0.2"});
  EXPECT_TRUE(watch.WaitForOutput("job: running", seconds(30))) << watch.output();
  const size_t first = watch.output().find("job: running");
  EXPECT_TRUE(watch.WaitForOutput("job: running", seconds(30), first + 1)) << watch.output();
  watch.Signal(SIGTERM);
  watch.Wait(seconds(10));

  job.Signal(SIGINT);
  EXPECT_TRUE(job.Wait(seconds(30)).has_value());
}

// The number after `name{labels}` on the /metrics page (-1: absent).
double Sample(const std::string& page, const std::string& name_and_labels) {
  const size_t at = page.find("\n" + name_and_labels + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + name_and_labels.size() + 2));
}

TEST(MetricsPage, ServesTheWholeJobToPrometheus) {
  testing::ScratchFolder base("metrics-page");
  testing::Subprocess job =
      StartSlowedJob(base.path(), {"--metrics-port", "0", "--snapshot-every", "2", "--snapshot-dir",
                                   base.path() + "/snapshots"});
  ASSERT_TRUE(job.WaitForOutput("progress: step", seconds(60))) << job.output();
  std::smatch m;
  const std::string out = job.output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("metrics of the whole job at (http://[^ \n]+)")))
      << out;
  const std::string url = m[1];

  // Two scrapes a few heartbeats apart: counters grow, the page is valid.
  auto scrape = [&] {
    auto r = testing::Run({"curl", "-sf", "--max-time", "10", url}, seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string kPush = "een_ps_push_bytes_total{role=\"ps\",rank=\"0\",host=\"";
  std::string first = scrape();
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (first.find(kPush) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    job.WaitForOutput("progress: step", seconds(2), job.output().size());
    first = scrape();
  }
  ASSERT_NE(first.find(kPush), std::string::npos) << first;
  auto push_bytes = [&](const std::string& page) {
    const size_t at = page.find(kPush);
    const size_t value = page.find("} ", at);
    return std::stod(page.substr(value + 2));
  };
  std::string second = scrape();
  const std::string kSnapshots = "een_ps_snapshots_written_total{role=\"ps\",rank=\"1\"";
  // Traffic per host pair is a rate over about 2 s of heartbeats: on a
  // busy machine it appears later than the rest.
  const std::string kTraffic = "# TYPE een_link_bytes_per_second ";
  while ((push_bytes(second) <= push_bytes(first) || Sample(second, "een_sync_seconds_count") < 1 ||
          second.find(kSnapshots) == std::string::npos ||
          second.find(kTraffic) == std::string::npos) &&
         std::chrono::steady_clock::now() < deadline) {
    job.WaitForOutput("progress: step", seconds(2), job.output().size());
    second = scrape();
  }
  EXPECT_GT(push_bytes(second), push_bytes(first)) << second;
  EXPECT_GE(Sample(second, "een_sync_seconds_count"), 1) << second;
  EXPECT_EQ(Sample(second, "een_failovers_total"), 0) << second;
  for (const char* family :
       {"# TYPE een_sync_seconds histogram", "# TYPE een_worker_straggler_score gauge",
        "# TYPE een_process_cpu_ratio gauge", "# TYPE een_process_resident_bytes gauge",
        "# TYPE een_ps_messages_refused_total counter",
        "# TYPE een_membership_changes_total "
        "counter"}) {
    EXPECT_NE(second.find(family), std::string::npos) << family << "\n" << second;
  }

  // promtool (Debian's prometheus package) agrees it is a valid page.
  const std::string page = base.path() + "/metrics.txt";
  { std::ofstream(page) << second; }
  auto check = testing::Run({"sh", "-c", "promtool check metrics < " + page}, seconds(60));
  EXPECT_EQ(check.exit_code, 0) << check.output;

  // Every metric the Grafana dashboard plots is on the page.
  std::ifstream dashboard_file(std::string(EEN_SOURCE_DIR) +
                               "/launcher/monitoring/grafana_dashboard.json");
  ASSERT_TRUE(dashboard_file.good());
  const nlohmann::json dashboard = nlohmann::json::parse(dashboard_file);
  int plotted = 0;
  const std::regex metric_name("een_[a-z_]+");
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric_name), end; it != end; ++it) {
        std::string family = it->str();
        if (family.size() > 7 && family.compare(family.size() - 7, 7, "_bucket") == 0) {
          family.resize(family.size() - 7);
        }
        plotted++;
        EXPECT_NE(second.find("# TYPE " + family + " "), std::string::npos)
            << panel["title"] << ": " << family;
      }
    }
  }
  EXPECT_GT(plotted, 10);

  // A second job asking for the same port is refused, naming the cause
  // (it never shares the port and half the scrapes).
  const std::string port = url.substr(url.rfind(':') + 1, url.rfind('/') - url.rfind(':') - 1);
  auto second_job = testing::Run(
      {kBin + "/een-launch", "--ps", "1", "--workers", "1", "--metrics-port", port, "--",
       kBin + "/equivalence_train", "--steps", "3", "--out", base.path() + "/second.bin"},
      seconds(60));
  EXPECT_NE(second_job.exit_code, 0) << second_job.output;
  EXPECT_NE(second_job.output.find("cannot serve metrics on 127.0.0.1:" + port +
                                   ": Address already in use"),
            std::string::npos)
      << second_job.output;

  // Anything but /metrics is not found.
  auto other = testing::Run({"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time",
                             "10", url.substr(0, url.rfind('/')) + "/other"},
                            seconds(30));
  EXPECT_EQ(other.output, "404");

  job.Signal(SIGINT);
  EXPECT_TRUE(job.Wait(seconds(30)).has_value());
}

}  // namespace
}  // namespace een
