// Fuzz target: a snapshot folder's model layout (model-layout, what `eenctl
// export` reads first): any bytes are a layout whose shard map and
// optimizer pass their checks, or an error naming the file, never a crash
// or an exception.
#include <string>

#include "common/model_layout.h"

using namespace een;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto layout = DecodeModelLayout(bytes, "model-layout");
  if (layout.ok()) {
    // What the exporter then walks: every chunk's tensor and range.
    for (const Chunk& c : layout->map.chunks()) {
      if (c.tensor >= layout->map.tensors().size()) __builtin_trap();
    }
    for (const TensorInfo& t : layout->map.tensors()) {
      uint64_t elements = 1;
      for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
      if (!t.shape.empty() && elements != t.numel) __builtin_trap();
    }
  }
  return 0;
}
