// Reading coverage_train's records (which samples each worker process
// trained on at each step) in tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace een::testing {

// epoch -> step -> indices, over every process's record in `dir`.
using Record = std::map<int, std::map<uint64_t, std::vector<int>>>;
// `lost_pid`, `lost_from`: the process killed, and the first of its steps
// the job says were not trained (its records from there on are left out).
inline Record ReadRecords(const std::string& dir, int* files, int lost_pid = 0,
                          uint64_t lost_from = UINT64_MAX) {
  Record steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++*files;
    const std::string name = entry.path().filename().string();
    const bool lost = lost_pid > 0 && name.size() > 4 &&
                      name.substr(0, name.size() - 4).ends_with("-" + std::to_string(lost_pid));
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      int epoch;
      uint64_t step;
      f >> epoch >> step;
      if (lost && step >= lost_from) continue;  // killed before its gradients arrived
      for (int i; f >> i;) steps[epoch][step].push_back(i);
    }
  }
  return steps;
}

// Distinct samples of an epoch; fails the test if one is trained twice
// (outside the epoch's last step, which may wrap around to its start).
inline int DistinctSamples(const std::map<uint64_t, std::vector<int>>& by_step, int epoch) {
  std::map<int, int> seen;
  const uint64_t last = by_step.rbegin()->first;
  for (const auto& [step, indices] : by_step) {
    for (int i : indices) {
      if (++seen[i] > 1 && step != last) {
        ADD_FAILURE() << "sample " << i << " twice in epoch " << epoch << " (step " << step << ")";
      }
    }
  }
  return static_cast<int>(seen.size());
}

}  // namespace een::testing
