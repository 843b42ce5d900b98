// The picture of `eenctl debug --plot FILE.png`: each worker's steps as
// stacked bars (compute, push, wait, pull: chrome_trace.h's StepBreakdown),
// one row per worker on a shared axis, so a straggler stands out at a
// glance. Drawn by gnuplot (Debian: gnuplot-nox), fed through a pipe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/chrome_trace.h"

namespace een {

// FailedPrecondition naming the package when gnuplot is missing; Internal
// when it fails.
Status PlotSteps(const std::vector<StepTimes>& steps, const std::string& png_path);

}  // namespace een
