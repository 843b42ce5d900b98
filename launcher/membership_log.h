// MembershipLog: the job's worker-membership history, kept next to the
// snapshots (DIR/membership-history) so that `een-launch --resume` can tell
// every worker where the data stood at the snapshot's step, even when
// workers had been lost or had joined before it (een::PositionAfter).
// One line per change, oldest first: "EPOCH EFFECTIVE_STEP RANK,RANK,..."
// and, for a change that lost workers with steps unfinished,
// " WORKER@FROM_STEP,..." (een/membership.h UnfinishedSteps), and, for one
// whose data follow later (loaders drew ahead), " data=DATA_STEP".
// Written whole to a temporary file and renamed over the old one, so a
// crash leaves the previous or the new history, never a torn one.
// Beside it, DIR/data-batch: the batch size the samplers draw (JobSampler),
// and DIR/model-layout: what the snapshots are of (common/model_layout.h).
// Thread safety: a plain value; functions touch only the file they name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_layout.h"
#include "common/status.h"
#include "een/membership.h"

namespace een {

Status WriteMembershipLog(const std::string& dir, const std::vector<MembershipChange>& history);
// NotFound when there is none (a job that never wrote one).
Result<std::vector<MembershipChange>> ReadMembershipLog(const std::string& dir);

// The batch size the job's samplers draw per worker and step
// (DIR/data-batch, one number), for the samplers of a --resume'd job.
Status WriteDataBatch(const std::string& dir, uint64_t batch);
Result<uint64_t> ReadDataBatch(const std::string& dir);  // NotFound when none

// DIR/model-layout (kModelLayoutFile), for `eenctl export`.
Status WriteModelLayout(const std::string& dir, const ModelLayout& layout);

}  // namespace een
