// The Slurm backend: inside an allocation, `srun een-launch --ps N --workers
// M -- PROGRAM ...` starts one een-launch per node (a per-node launch,
// node_launch.h) and needs no other flag. Each reads its step from Slurm's
// variables: SLURM_NODEID (its node rank), SLURM_NNODES (the node count),
// SLURM_STEP_NODELIST or SLURM_JOB_NODELIST (node 0 is its first host, as
// `scontrol show hostnames` expands it) and SLURM_JOB_ID (the rendezvous
// port, 29500 + job id % 2000, unless --rdzv is given). The job secret comes
// from the environment srun passes to every node (EEN_JOB_SECRET, set in
// the batch script: see launcher/slurm/een.sbatch).
// A plain value type and one reader.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace een {

struct SlurmStep {
  int nnodes = 1;
  int node_rank = 0;
  std::string first_host;  // node 0
  int rdzv_port = 29500;
};

// nullopt: not a task of an srun step (SLURM_PROCID unset). An error when
// the step is not one task per node, or its variables are unreadable.
// `find_first_host`: expand the node list (not needed when --rdzv is given).
Result<std::optional<SlurmStep>> SlurmStepOfThisProcess(bool find_first_host);

}  // namespace een
