// JobEnvironment: what a role reads from the EEN_* variables een-launch sets,
// including the optional tuning ones, and errors that name the variable.
#include "common/job_env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace een {
namespace {

// Sets variables for one test and takes them away after it.
class Env : public ::testing::Test {
 protected:
  void Set(const char* name, const char* value) {
    setenv(name, value, 1);
    names_.push_back(name);
  }
  void TearDown() override {
    for (const char* n : names_) unsetenv(n);
  }
  std::vector<const char*> names_;
};

TEST_F(Env, ReadsTheJobAndTheTuningVariables) {
  Set("EEN_COORDINATOR", "tcp://127.0.0.1:5555");
  Set("EEN_ROLE", "worker");
  Set("EEN_RANK", "3");
  Set("EEN_WORLD_SIZE", "4");
  Set("EEN_NUM_PS", "2");
  Set("EEN_WIRE_DTYPE", "bf16");
  Set("EEN_BUCKET_BYTES", "1048576");
  Set("EEN_MESSAGE_BYTES", "65536");
  Set("EEN_PULL_BACK", "0");
  Set("EEN_TIMELINE", "/tmp/tl");
  Set("EEN_PS_THREADS", "3");
  Set("EEN_RESOURCES_AT_STEP", "2");
  auto env = JobEnvironment::FromProcess("test");
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->num_ps, 2);
  EXPECT_EQ(env->wire_type, WireType::kBF16);
  EXPECT_EQ(env->bucket_bytes, 1048576u);
  EXPECT_EQ(env->message_bytes, 65536u);
  EXPECT_FALSE(env->pull_back);
  EXPECT_EQ(env->timeline, "/tmp/tl");
  EXPECT_EQ(env->trace_record, "");
  EXPECT_EQ(env->ps_threads, 3);
  EXPECT_EQ(env->resources_at_step, 2u);
}

TEST_F(Env, DefaultsWhenTuningIsUnset) {
  Set("EEN_COORDINATOR", "tcp://127.0.0.1:5555");
  auto env = JobEnvironment::FromProcess("test");
  ASSERT_TRUE(env.ok()) << env.status().message();
  EXPECT_EQ(env->bucket_bytes, 0u);
  EXPECT_EQ(env->message_bytes, 0u);
  EXPECT_TRUE(env->pull_back);
  EXPECT_EQ(env->ps_threads, 0);
  EXPECT_EQ(env->wire_type, WireType::kF32);
}

TEST_F(Env, ErrorsNameTheVariable) {
  EXPECT_NE(JobEnvironment::FromProcess("my-trainer")
                .status()
                .message()
                .find("my-trainer is not part of an EEN job: EEN_COORDINATOR is not set"),
            std::string::npos);
  Set("EEN_COORDINATOR", "tcp://127.0.0.1:5555");
  for (auto [name, value] : {std::pair{"EEN_BUCKET_BYTES", "0"},
                             {"EEN_PS_THREADS", "two"},
                             {"EEN_PULL_BACK", "off"},
                             {"EEN_RANK", "-1"}}) {
    Set(name, value);
    auto env = JobEnvironment::FromProcess("test");
    ASSERT_FALSE(env.ok()) << name;
    EXPECT_NE(
        env.status().message().find(std::string(name) + "='" + value + "' must be an integer"),
        std::string::npos)
        << env.status().message();
    unsetenv(name);
  }
  Set("EEN_WIRE_DTYPE", "int8");
  EXPECT_NE(JobEnvironment::FromProcess("test").status().message().find(
                "EEN_WIRE_DTYPE: wire dtype 'int8' is not one of fp32, bf16, fp16"),
            std::string::npos);
}

}  // namespace
}  // namespace een
