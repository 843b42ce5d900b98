#include "launcher/liveness.h"

#include <algorithm>
#include <cmath>

namespace een {

using std::chrono::duration;
using std::chrono::milliseconds;

void Liveness::Restart(Clock::time_point now) {
  last_ = now;
  counting_ = false;
}

void Liveness::Heard(Clock::time_point now) {
  if (counting_) {
    gaps_ms_[gaps_ % kWindow] = std::max(0.0, duration<double, std::milli>(now - last_).count());
    ++gaps_;
  }
  last_ = now;
  counting_ = true;
}

long Liveness::SilentMs(Clock::time_point now) const {
  return static_cast<long>(std::chrono::duration_cast<milliseconds>(now - last_).count());
}

long Liveness::AllowanceMs(milliseconds threshold) const {
  const long floor = static_cast<long>(threshold.count());
  const size_t n = std::min(gaps_, kWindow);
  if (n < 2) return floor;
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += gaps_ms_[i];
  mean /= static_cast<double>(n);
  double var = 0;
  for (size_t i = 0; i < n; ++i) var += (gaps_ms_[i] - mean) * (gaps_ms_[i] - mean);
  var /= static_cast<double>(n - 1);
  const double adaptive = mean + kSigmas * std::sqrt(var);
  return std::clamp(static_cast<long>(std::ceil(adaptive)), floor, kMaxFactor * floor);
}

}  // namespace een
