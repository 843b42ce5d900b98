// ProcessSighting: what this machine's /proc says of a job's process, for
// the coordinator's liveness. A process that went silent but is still here
// and running (a busy machine starves it of CPU) is slow, not lost; one that
// is gone, stopped (SIGSTOP) or hung (nothing of it runnable, no CPU time
// since its silence began) is lost at the threshold, as is any process this
// machine cannot see: another host, or another network namespace (a
// simulated host), whose heartbeats cross a network that may be cut.
// Thread safety: free functions of no state.
#pragma once

#include <cstdint>
#include <string>

namespace een {

struct ProcessSighting {
  enum class State {
    kElsewhere,  // not a process of this machine's network and pid namespaces (or
                 // the caller itself: a role run in its process)
    kGone,       // no such process, or a zombie
    kStopped,    // stopped by a signal (SIGSTOP) or a tracer
    kRunnable,   // some thread runs or waits for a CPU (or for the disk)
    kIdle,       // alive, every thread asleep
  };
  State state = State::kElsewhere;
  uint64_t cpu = 0;  // time on a CPU of all its threads so far (ns; only differences count)
};

// `pid` as the process of host `host` (its registration's), seen from here.
ProcessSighting SightProcess(int pid, const std::string& host);

// For messages: "gone", "stopped", "running", "asleep", "elsewhere".
const char* SightingName(ProcessSighting::State state);

}  // namespace een
