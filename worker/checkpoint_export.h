// ExportCheckpoint: a job's snapshot folder (een-launch --snapshot-dir) as
// the checkpoint DataParallel's state_dict() gives, for `eenctl export`:
// {"model": {name: float32 tensor}, "optimizer": torch.optim's state_dict()
// of the job's optimizer kind over module.parameters() (state by parameter
// index: exp_avg, exp_avg_sq and step for Adam and AdamW, momentum_buffer
// and step for SGD, sum and step for Adagrad; param_groups with the job's
// hyper-parameters and its starting learning rate), or None in sum mode}.
//
// It reads the model layout the coordinator wrote there
// (common/model_layout.h) and each PS's snapshot store (ps-N/), read-only,
// beside a PS that may still run. The step taken is the newest (or the one
// asked for) at which every chunk has an intact snapshot on some PS.
// Parameters are numbered as module.parameters() numbers them, frozen ones
// included (a parameter with no elements, which EEN does not register,
// would shift the numbers after it).
// The checkpoint comes back as the bytes torch.save writes (pickled here,
// so that this header needs no LibTorch headers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace een {

struct ExportedCheckpoint {
  std::vector<char> bytes;  // what torch.save / torch::pickle_save writes
  uint64_t step = 0;
  size_t tensors = 0;  // in "model"
};

Result<ExportedCheckpoint> ExportCheckpoint(const std::string& snapshot_dir,
                                            std::optional<uint64_t> step);

}  // namespace een
