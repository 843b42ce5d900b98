#include "bench/report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace een::bench {

Summary Summarize(std::vector<double> micros) {
  Summary s;
  if (micros.empty()) return s;
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) {
    return micros[std::min(micros.size() - 1, size_t(q * micros.size()))] / 1000;
  };
  s.median = at(0.5);
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  return s;
}

void Row(const char* what, const Summary& s, double bytes) {
  std::printf("%-24s %9.2f %9.2f %9.2f %9.2f\n", what, s.median, s.p10, s.p90,
              s.median > 0 ? bytes / (s.median / 1000) / 1e9 : 0.0);
}

std::vector<double> TimeMemcpy(size_t bytes, int copies, int warmup, int steps) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> micros;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < copies; ++k) {
      std::memcpy(dst.data(), src.data(), bytes);
      std::swap(src, dst);
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) micros.push_back(us);
  }
  return micros;
}

std::string BinDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, n)).parent_path().string();
}

}  // namespace een::bench
