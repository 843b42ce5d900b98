// The job spec: YAML fields, durations, and errors that name the field.
#include "common/job_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace een {
namespace {

std::string WriteYaml(const std::string& text) {
  static int n = 0;
  std::string path =
      "/tmp/een-config-test-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(JobConfig, ReadsEveryField) {
  JobConfig c;
  ASSERT_TRUE(c.LoadYaml(WriteYaml("ps: 3\nworkers: 5\nfailover_threshold: 750ms\n"
                                   "heartbeat_interval: 0.05s\ntransport: ipc\n"
                                   "max_chunk_numel: 1000\nshards_per_ps: 4\nreplicas: 2\n"
                                   "spare_ps: 1\nmax_restarts: 2\ndynamic_slicing: auto\n"))
                  .ok());
  EXPECT_EQ(c.ps, 3);
  EXPECT_EQ(c.workers, 5);
  EXPECT_EQ(c.failover_threshold.count(), 750);
  EXPECT_EQ(c.heartbeat_interval.count(), 50);
  EXPECT_EQ(c.transport, "ipc");
  EXPECT_EQ(c.sharding.max_chunk_numel, 1000u);
  EXPECT_EQ(c.sharding.shards_per_ps, 4u);
  EXPECT_EQ(c.replicas, 2);
  EXPECT_EQ(c.spare_ps, 1);
  EXPECT_EQ(c.max_restarts, 2);
  EXPECT_EQ(c.dynamic_slicing, "auto");
}

TEST(JobConfig, ErrorsNameTheField) {
  struct Case {
    std::string yaml, expect;
  };
  for (const Case& k : std::vector<Case>{
           {"pss: 2\n", "field 'pss' is unknown"},
           {"workers: many\n", "field 'workers' has the wrong type"},
           {"failover_threshold: soon\n", "field 'failover_threshold'"},
           {"transport: udp\n", "transport 'udp' is not one of tcp, ipc"},
           {"heartbeat_interval: 1s\nfailover_threshold: 500ms\n", "must be shorter than"},
           {"- a\n- b\n", "top level must be a mapping"},
           {"ps: [\n", "config"},
           {"ps: 2\nreplicas: 3\n", "replicas: 3 is not available"},
           {"ps: 1\nreplicas: 2\n", "replicas 2 needs at least 2 PS"},
           {"ps: 2\nspare_ps: 1\n", "spare_ps: a spare takes over"},
           {"max_restarts: -1\n", "field 'max_restarts' must be >= 0"},
           {"dynamic_slicing: sometimes\n", "'sometimes' is not off or auto"},
           {"consistency: async\ndynamic_slicing: auto\n",
            "under async a fast worker already takes"},
           // Numbers that once wrapped or crashed the coordinator: every one has a range.
           {"shards_per_ps: 1073741824\n", "shards_per_ps must be between 1 and 4096"},
           {"shards_per_ps: 2000000000\n", "shards_per_ps must be between 1 and 4096"},
           {"max_chunk_numel: 2000000000\n", "max_chunk_numel must be between 1 and 67108864"},
           {"ps: 100000\n", "ps must be between 0 and 1024"},
           {"ps: -1\n", "field 'ps' must be an integer >= 0"},
           // --ps 0: no parameter servers, so nothing that needs them.
           {"ps: 0\nworkers: 4\nmin_workers: 2\n", "--min-workers (min_workers) needs them"},
           {"ps: 0\ndynamic_slicing: auto\n", "--dynamic-slicing (dynamic_slicing) needs them"},
           {"ps: 0\nsnapshot_every: 10\nsnapshot_dir: /tmp\n", "--snapshot-every"},
           {"failover_threshold: 1e300s\n", "longer than a week"},
           {"ps: 2\nps: 3\n", "field 'ps' appears twice"},
           {"insecure: maybe\n", "field 'insecure' has the wrong type"},
           // Found by fuzz_job_config: a field name that is a list or a map threw.
           {"[a, b]: 1\n", "line 1: a field name must be a plain word"},
           {"ps: 1\n{x: 1}: 2\n", "line 2: a field name must be a plain word"},
       }) {
    JobConfig c;
    Status s = c.LoadYaml(WriteYaml(k.yaml));
    EXPECT_FALSE(s.ok()) << k.yaml;
    EXPECT_NE(s.message().find(k.expect), std::string::npos) << s.message();
  }
}

// Not a config at all, named by mistake or on purpose: refused, and its
// content is never quoted; special files never block or fill the memory.
TEST(JobConfig, AFileThatIsNoConfigIsRefusedWithoutQuotingIt) {
  JobConfig c;
  Status s = c.LoadYaml(WriteYaml("root:$6$SECRETHASH:19000:0:99999:7:::\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("line 1: field (not a plain word) is unknown"), std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("SECRETHASH"), std::string::npos) << s.message();
  s = c.LoadYaml("/dev/zero");
  EXPECT_NE(s.message().find("the config /dev/zero is a character device, not a regular file"),
            std::string::npos)
      << s.message();
  EXPECT_NE(c.LoadYaml("/tmp").message().find("is a folder"), std::string::npos);
  const std::string fifo = "/tmp/een-config-fifo-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(c.LoadYaml(fifo).message().find("is a FIFO"), std::string::npos);  // returns at once
  unlink(fifo.c_str());
  const std::string big = WriteYaml(std::string(size_t{2} << 20, '#'));
  EXPECT_NE(c.LoadYaml(big).message().find("at most 1048576 are read"), std::string::npos);
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(ParseDuration("500ms")->count(), 500);
  EXPECT_EQ(ParseDuration("2s")->count(), 2000);
  // A bare number says neither: refused, naming both.
  ASSERT_FALSE(ParseDuration("2").ok());
  EXPECT_EQ(ParseDuration("2").status().message(), "'2' has no unit: write 2s or 2ms");
  EXPECT_FALSE(ParseDuration("5 parsecs").ok());
  EXPECT_FALSE(ParseDuration("-1s").ok());
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("1e300").ok());
  EXPECT_EQ(ParseDuration("7d").ok(), false);  // no such unit: ms or s
}

}  // namespace
}  // namespace een
