#include "bench/trace.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/input_file.h"

namespace een::bench {

uint64_t Trace::TotalNumel() const {
  uint64_t n = 0;
  for (const TensorInfo& t : backward) n += t.numel;
  return n;
}

std::vector<TensorInfo> Trace::Parameters() const {
  return std::vector<TensorInfo>(backward.rbegin(), backward.rend());
}

Result<Trace> ReadTrace(const std::string& path) {
  EEN_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "the trace", size_t{64} << 20));
  std::istringstream in(text);
  Trace trace;
  trace.name = std::filesystem::path(path).stem().string();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    TensorInfo t;
    long long numel = 0;
    if (!(fields >> t.name >> numel) || numel <= 0) {
      return InvalidArgument(path + " line " + std::to_string(n) +
                             ": expected NAME<TAB>NUMEL with NUMEL > 0");
    }
    t.numel = static_cast<uint64_t>(numel);
    trace.backward.push_back(t);
  }
  if (trace.backward.empty()) return InvalidArgument(path + " lists no tensors");
  return trace;
}

}  // namespace een::bench
