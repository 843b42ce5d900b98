// Fuzz target: a job's YAML configuration (een-launch --config FILE), read
// and validated as een-launch does: any file is a config or an error
// naming the field, never a crash or an exception.
#include "common/job_config.h"
#include "fuzz/scratch_path.h"

using namespace een;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchPath file("job.yaml");
  fuzz::WriteInput(file.path(), data, size);
  JobConfig config;
  if (config.LoadYaml(file.string()).ok()) (void)config.Validate();
  (void)ParseDuration(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
