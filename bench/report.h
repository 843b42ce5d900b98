// Report helpers shared by een-bench's commands: medians and percentiles of
// timings, aligned table rows, and where the een binaries are.
#pragma once

#include <string>
#include <vector>

namespace een::bench {

struct Summary {
  double median = 0, p10 = 0, p90 = 0;  // milliseconds
};

// Timings in microseconds -> median, p10, p90 in milliseconds.
Summary Summarize(std::vector<double> micros);

// One table row: median, p10, p90 (ms) and GB/s for `bytes` per step.
void Row(const char* what, const Summary& s, double bytes);

// Microseconds per step of `copies` memcpy's of `bytes` (back and forth
// between two buffers), after `warmup` steps not counted.
std::vector<double> TimeMemcpy(size_t bytes, int copies, int warmup, int steps);

// The directory of the running executable (een-bench's siblings live there).
std::string BinDir();

}  // namespace een::bench
