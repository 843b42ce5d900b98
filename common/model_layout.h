// ModelLayout: what a job's snapshots are snapshots of. The coordinator
// writes it into the snapshot folder (kModelLayoutFile) when the job starts:
// the shard map (the tensors by name, kind and shape, and the chunks they
// are cut into, whose numbers key each PS's snapshot records) and the
// server optimizer (whose state slots follow each chunk's values). An
// exporter reads it to turn the PS's snapshots back into named tensors.
#pragma once

#include <string>

#include "common/shard_map.h"
#include "common/status.h"
#include "een/optimizer.h"

namespace een {

inline constexpr const char* kModelLayoutFile = "model-layout";

struct ModelLayout {
  ShardMap map;
  OptimizerConfig optimizer;
};

std::string EncodeModelLayout(const ModelLayout& layout);
// DataLoss naming `what` for bytes that are no model layout (a tensor whose
// shape does not hold its elements included).
Result<ModelLayout> DecodeModelLayout(const std::string& bytes, const std::string& what);

}  // namespace een
