// ResourceUsage: this process's CPU time, page faults and peak RSS so far
// (getrusage), its resident set now, and the one log line format een-bench reads back:
//   "resources: cpu 1.234 s, 567 page faults, peak RSS 89.0 MB"
#pragma once

#include <cstdint>
#include <string>

namespace een {

struct ResourceUsage {
  double cpu_seconds = 0;
  long page_faults = 0;
  double peak_rss_mb = 0;

  static ResourceUsage Now();
  // The resident set now, in bytes (/proc/self/statm; 0 where unreadable).
  static uint64_t CurrentRssBytes();
  std::string ToString() const;
};

}  // namespace een
