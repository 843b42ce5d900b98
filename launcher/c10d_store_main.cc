// een-c10d-store: the c10d store of a job's torch.distributed, as torchrun's
// agent hosts it. een-launch starts it on the coordinator's host and gives
// every worker MASTER_ADDR/MASTER_PORT for it with
// TORCHELASTIC_USE_AGENT_STORE=True, so `init_process_group("gloo")` (and
// any backend) rendezvous there: LibTorch's own c10d::TCPStore server, not a
// copy of its protocol.
//
//   een-c10d-store --port P --ready-fd FD
//
// It listens on port P (0: any free port) on every interface (TCPStore has
// no bind address), writes the port, one line, to FD once it listens, and
// serves until SIGTERM/SIGINT or until its parent (een-launch) dies. Like
// torchrun's store it is unauthenticated: anyone who reaches the port can
// read and write its keys (gloo's addresses), so the job's hosts should be
// on a private network (docs/user-guide.md, "Coming from torchrun").
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{"een-c10d-store: a job's torch.distributed store (started by een-launch)"};
  app.set_version_flag("--version", een::kVersionLine);
  int port = 0, ready_fd = -1;
  app.add_option("--port", port, "port to listen on (0: any free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--ready-fd", ready_fd, "file descriptor to write the port to");
  CLI11_PARSE(app, argc, argv);

  // Ends with een-launch, even one killed by SIGKILL; the signals below end it.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before TCPStore's threads start
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) return 1;  // the parent went before prctl

  std::unique_ptr<c10d::TCPStore> store;
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = true;
    options.waitWorkers = false;  // workers come and go (replacements)
    store = std::make_unique<c10d::TCPStore>("127.0.0.1", options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot listen on port %d for the torch.distributed store: %s\n", port,
                 e.what());
    return 1;
  }
  if (ready_fd >= 0) {
    const std::string line = std::to_string(store->getPort()) + "\n";
    if (write(ready_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 1;
    close(ready_fd);
  }
  int sig = 0;
  sigwait(&stop, &sig);
  return 0;
}
