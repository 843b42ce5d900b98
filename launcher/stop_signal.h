// een-launch's stop signals: SIGINT, SIGTERM and SIGHUP are recorded (not
// acted on in the handler), for the launcher's loop to stop the job it
// runs; SIGPIPE is ignored (a role's closed pipe is seen by reading).
// Every launch backend's loop (JobSupervisor, the ssh backend) uses these,
// so a Ctrl-C means the same everywhere.
// Thread safety: async-signal-safe recording; read from the launcher's loop.
#pragma once

#include <string>

namespace een {

// Installs the handlers; call once, before the loop.
void CatchStopSignals();
// The signal that asked to stop (0: none yet).
int StopSignal();
// Records `signo` as if it had come (a stop seen some other way).
void RaiseStopSignal(int signo);
// "SIGINT", for messages.
std::string StopSignalName();

}  // namespace een
