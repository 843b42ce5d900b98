// The Kubernetes manifests (launcher/kubernetes/een-job.yaml), checked as far
// as they can be without a cluster: the documents parse; the Indexed Job
// gives each pod its node rank from JOB_COMPLETION_INDEX; the rendezvous
// name is pod 0's name under the headless Service the pods' subdomain
// names; the node count is the same in its three places; the secret comes
// from a Secret; and the ConfigMap's job.yaml is a valid EEN job spec.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/job_config.h"
#include "support/scratch_folder.h"

namespace een {
namespace {

const std::string kManifest = std::string(EEN_SOURCE_DIR) + "/launcher/kubernetes/een-job.yaml";

std::map<std::string, YAML::Node> DocumentsByKind() {
  std::map<std::string, YAML::Node> kinds;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(kManifest)) {
    kinds[doc["kind"].as<std::string>()] = doc;
  }
  return kinds;
}

// The value after `flag` in the container's args ("" if absent).
std::string ArgAfter(const YAML::Node& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i].as<std::string>() == flag) return args[i + 1].as<std::string>();
  }
  return "";
}

TEST(KubernetesManifest, AnIndexedJobOfPerNodeLaunchersMeetingAtPodZero) {
  auto kinds = DocumentsByKind();
  ASSERT_EQ(kinds.size(), 3u) << "a ConfigMap, a Service and a Job";
  const YAML::Node job = kinds["Job"], service = kinds["Service"];
  ASSERT_TRUE(job && service && kinds["ConfigMap"]);
  const YAML::Node spec = job["spec"];
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  const YAML::Node pod = spec["template"]["spec"];
  ASSERT_EQ(pod["containers"].size(), 1u);
  const YAML::Node container = pod["containers"][0];
  EXPECT_EQ(container["command"][0].as<std::string>(), "een-launch");
  const YAML::Node args = container["args"];
  // Node count: the same in its three places.
  const std::string nnodes = ArgAfter(args, "--nnodes");
  EXPECT_EQ(spec["completions"].as<std::string>(), nnodes);
  EXPECT_EQ(spec["parallelism"].as<std::string>(), nnodes);
  EXPECT_EQ(ArgAfter(args, "--node-rank"), "$(JOB_COMPLETION_INDEX)");
  // een-0.een:PORT: pod 0 of Job "een" under the headless Service the
  // subdomain names, on the port the Service and the container expose.
  const std::string job_name = job["metadata"]["name"].as<std::string>();
  const std::string service_name = service["metadata"]["name"].as<std::string>();
  EXPECT_EQ(pod["subdomain"].as<std::string>(), service_name);
  EXPECT_EQ(service["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_TRUE(service["spec"]["publishNotReadyAddresses"].as<bool>());
  EXPECT_EQ(service["spec"]["selector"]["job-name"].as<std::string>(), job_name);
  const std::string port = service["spec"]["ports"][0]["port"].as<std::string>();
  EXPECT_EQ(ArgAfter(args, "--rdzv"), job_name + "-0." + service_name + ":" + port);
  EXPECT_EQ(container["ports"][0]["containerPort"].as<std::string>(), port);
  // The secret from a Secret, never in the manifest.
  bool secret = false;
  for (const YAML::Node& env : container["env"]) {
    if (env["name"].as<std::string>() == "EEN_JOB_SECRET") {
      secret = env["valueFrom"]["secretKeyRef"].IsDefined() && !env["value"].IsDefined();
    }
  }
  EXPECT_TRUE(secret) << "EEN_JOB_SECRET must come from a secretKeyRef";
  // The config file the args name is where the ConfigMap is mounted.
  const std::string config = ArgAfter(args, "--config");
  const std::string mount = container["volumeMounts"][0]["mountPath"].as<std::string>();
  EXPECT_EQ(config.rfind(mount + "/", 0), 0u) << config << " is not under " << mount;
  EXPECT_EQ(pod["volumes"][0]["configMap"]["name"].as<std::string>(),
            kinds["ConfigMap"]["metadata"]["name"].as<std::string>());
  EXPECT_TRUE(kinds["ConfigMap"]["data"][config.substr(mount.size() + 1)].IsDefined());
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");
}

TEST(KubernetesManifest, TheConfigMapHoldsAValidJobSpec) {
  auto kinds = DocumentsByKind();
  testing::ScratchFolder dir("kubernetes-manifest-test");
  const std::string path = dir / "job.yaml";
  std::ofstream(path) << kinds["ConfigMap"]["data"]["job.yaml"].as<std::string>();
  JobConfig config;
  ASSERT_TRUE(config.LoadYaml(path).ok()) << config.LoadYaml(path).message();
  EXPECT_TRUE(config.Validate().ok()) << config.Validate().message();
  EXPECT_GE(config.ps, 1);
  EXPECT_GE(config.workers, 1);
}

}  // namespace
}  // namespace een
