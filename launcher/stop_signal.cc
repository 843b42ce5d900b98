#include "launcher/stop_signal.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace een {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int signo) { g_signal = signo; }

}  // namespace

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int StopSignal() { return g_signal.load(); }

void RaiseStopSignal(int signo) { g_signal = signo; }

std::string StopSignalName() {
  const char* name = sigabbrev_np(g_signal.load());
  return std::string("SIG") + (name ? name : "?");
}

}  // namespace een
