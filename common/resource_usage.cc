#include "common/resource_usage.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace een {

ResourceUsage ResourceUsage::Now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  ResourceUsage r;
  r.cpu_seconds =
      u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  r.page_faults = u.ru_minflt + u.ru_majflt;
  r.peak_rss_mb = u.ru_maxrss / 1024.0;
  return r;
}

uint64_t ResourceUsage::CurrentRssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string ResourceUsage::ToString() const {
  return fmt::format("resources: cpu {:.3f} s, {} page faults, peak RSS {:.1f} MB", cpu_seconds,
                     page_faults, peak_rss_mb);
}

}  // namespace een
