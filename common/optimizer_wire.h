// Conversion of een::OptimizerConfig to and from its wire form, with the
// range checks a PS needs before it trusts a config (lr >= 0, betas in [0,1),
// eps > 0, ...). Free functions; no shared state.
#pragma once

#include "common/status.h"
#include "een/optimizer.h"
#include "schema/een.capnp.h"

namespace een {

void OptimizerToWire(const OptimizerConfig& config, wire::OptimizerConfig::Builder b);
Result<OptimizerConfig> OptimizerFromWire(wire::OptimizerConfig::Reader r);
Status ValidateOptimizer(const OptimizerConfig& c);
const char* OptimizerName(OptimizerConfig::Kind kind);

}  // namespace een
