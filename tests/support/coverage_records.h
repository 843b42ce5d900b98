// Reading coverage_train's records (which samples each worker process
// trained on at each step) in tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace een::testing {

// epoch -> step -> indices, over every process's record in `dir`.
using Record = std::map<int, std::map<uint64_t, std::vector<int>>>;
inline Record ReadRecords(const std::string& dir, int* files) {
  Record steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++*files;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      int epoch;
      uint64_t step;
      f >> epoch >> step;
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
