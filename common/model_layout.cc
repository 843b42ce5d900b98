#include "common/model_layout.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>
#include <vector>

#include "common/optimizer_wire.h"
#include "schema/een.capnp.h"

namespace een {

std::string EncodeModelLayout(const ModelLayout& layout) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::ModelLayout>();
  layout.map.ToWire(root.initMap());
  OptimizerToWire(layout.optimizer, root.initOptimizer());
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  return std::string(bytes.begin(), bytes.end());
}

Result<ModelLayout> DecodeModelLayout(const std::string& bytes, const std::string& what) {
  if (bytes.size() % sizeof(capnp::word) != 0 || bytes.empty()) {
    return DataLoss(what + " is not a model layout (its size is not whole words)");
  }
  // Copied into words: Cap'n Proto reads aligned memory.
  std::vector<capnp::word> words(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 2;  // its own size, not the default 64 MiB
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()), options);
    auto root = reader.getRoot<wire::ModelLayout>();
    ModelLayout layout;
    auto map = ShardMap::FromWire(root.getMap());
    if (!map.ok()) return DataLoss(what + ": " + map.status().message());
    layout.map = *std::move(map);
    for (const TensorInfo& t : layout.map.tensors()) {  // the exporter shapes them so
      uint64_t elements = 1;
      bool fits = true;
      for (int64_t d : t.shape) {
        fits = fits && d >= 0 &&
               !__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements);
      }
      if (!t.shape.empty() && (!fits || elements != t.numel)) {
        return DataLoss(what + ": tensor " + t.name + "'s shape does not hold its " +
                        std::to_string(t.numel) + " elements");
      }
    }
    auto optimizer = OptimizerFromWire(root.getOptimizer());
    if (!optimizer.ok()) return DataLoss(what + ": " + optimizer.status().message());
    layout.optimizer = *optimizer;
    return layout;
  } catch (const kj::Exception& e) {
    return DataLoss(what + " is not a model layout: " + e.getDescription().cStr());
  }
}

}  // namespace een
