// What een-launch makes of the habits of torchrun users and of typos,
// before its own flags are parsed (launch_main.cc):
//  - torchrun's flags that map onto een-launch's are rewritten to them
//    (--nproc_per_node -> --nproc-per-node, --rdzv_endpoint -> --rdzv, ...);
//  - the torchrun flags that do not map are refused, naming what to write;
//  - an unknown flag near a known one gets "did you mean ...";
//  - a program given without `--`, or a Python file given as the program,
//    is explained with the command to type.
// Pure functions over argument lists: no state, safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace een {

// Rewrites torchrun's spellings in `args` (een-launch's own arguments, the
// program's excluded) to een-launch's, in place, `--flag=value` forms too.
// InvalidArgument naming EEN's way for a torchrun flag with no equivalent.
Status TranslateTorchrunFlags(std::vector<std::string>* args);

// Why `unparsed` (what the flag parser could not place) is wrong, with the
// fix: a flag near one of `known` ("did you mean --workers?"), or a program
// given without `--` before it. `known`: every flag een-launch has.
std::string ExplainUnparsed(const std::vector<std::string>& unparsed,
                            const std::vector<std::string>& known);

// "" or why `program` (the first word after `--`) cannot run as given: a
// Python file that is not executable ("run it as `python3 train.py`").
std::string ProgramProblem(const std::string& program);

// The known flag nearest to `flag` (a typo: at most 2 edits, or a prefix),
// "" if none is near.
std::string NearestFlag(const std::string& flag, const std::vector<std::string>& known);

}  // namespace een
