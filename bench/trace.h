// Trace: one training step's gradient tensors, in the order backward makes
// them ready (samples/traces/README.md has the file format).
// Thread safety: a plain value.
#pragma once

#include <string>
#include <vector>

#include "common/shard_map.h"
#include "common/status.h"

namespace een::bench {

struct Trace {
  std::string name;                  // the file's stem: "resnet50"
  std::vector<TensorInfo> backward;  // first ready first
  uint64_t TotalNumel() const;
  // In model.parameters() order (reverse of backward): what a worker registers,
  // so that its buckets fill in backward order.
  std::vector<TensorInfo> Parameters() const;
};

// InvalidArgument naming the line for anything that is not `NAME<TAB>NUMEL`.
Result<Trace> ReadTrace(const std::string& path);

}  // namespace een::bench
