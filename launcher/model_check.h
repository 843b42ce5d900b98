// Checking that every worker trains the same model, and saying where not.
//
// DescribeModelMismatch() takes each party's model (labelled "worker 0",
// "the running job", ...), finds the first tensor on which they disagree
// (name, kind, shape; a missing tensor counts) and groups the parties by
// what they have there:
//   "model mismatch at tensor 1: worker 0 and worker 2 have parameter
//    'fc1.weight' of shape [32, 20]; worker 1 has parameter 'fc1.weight' of
//    shape [33, 20]"
// It returns "" when they all agree. A pure function.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/shard_map.h"

namespace een {

std::string DescribeModelMismatch(const std::map<std::string, std::vector<TensorInfo>>& models);

}  // namespace een
