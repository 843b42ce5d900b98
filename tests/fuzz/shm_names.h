// The two shared-memory segments fuzz_shm_manifest creates, named as this
// job's (a job without a secret has the tag "open"), for its seeds to name.
#pragma once

#include <cstddef>

namespace een::fuzz {

constexpr const char* kBlockName = "/een-1-open-fuzz-block";
constexpr const char* kRegionName = "/een-1-open-fuzz-region";
constexpr size_t kSegmentBytes = 8192;

}  // namespace een::fuzz
