// LocalHost: the ProcessHost of the launcher's own machine (the `local`
// launch backend's only host, and the one through which a remote backend
// starts its ssh or srun agents).
//
// Start() forks a ChildProcess (its own process group, killed if the
// launcher dies, output through a pipe or a pseudo-terminal). Watch() polls
// every child's output, forwards complete lines with the child's label and
// reaps every child that ended (waitpid on any pid: no other code of the
// launcher may reap). A reaped child's transport leftovers (shm blocks) are
// removed then. Processes stay known until the host is destroyed, so a
// replaced role's last lines are never lost.
// Thread safety: single-threaded (the launcher's loop).
#pragma once

#include <memory>
#include <vector>

#include "launcher/child_process.h"
#include "launcher/process_host.h"

namespace een {

class LocalHost : public ProcessHost {
 public:
  Result<std::shared_ptr<RoleProcess>> Start(ProcessSpec spec) override;
  void Watch(std::chrono::milliseconds timeout) override;
  void StopAll(std::chrono::milliseconds grace) override;

 private:
  void Reap();

  std::vector<std::shared_ptr<ChildProcess>> children_;
};

}  // namespace een
