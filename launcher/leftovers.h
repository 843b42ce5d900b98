// Leftovers of killed jobs. An een-launch killed with SIGKILL cannot clean
// up: its run folder (/tmp/een-job-*: the secret, the coordinator's state,
// ipc sockets) and the shared memory its roles made stay behind. The next
// een-launch of the same user removes them: a run folder whose launcher
// (its pid in the folder's `launcher` file) is gone, and the /dev/shm
// objects carrying that job's tag (derived from its secret; an --insecure
// job's are tagged "open") whose creator is gone (other nodes of a per-node
// launch on this host share the tag and may still run).
// Folders of live launchers, of other users, and without a `launcher` file
// are left.
#pragma once

#include <string>

namespace een {

// Records this launcher in its run folder (for a later RemoveLeftovers).
void MarkRunFolder(const std::string& run_dir);
// Removes the leftovers of this user's dead jobs; returns how many jobs.
int RemoveLeftoversOfDeadJobs();
// A new job's run folder (/tmp/een-job-XXXXXX), marked as this launcher's,
// once the leftovers of dead jobs are gone; "" when /tmp takes no folder.
std::string NewRunFolder();

}  // namespace een
