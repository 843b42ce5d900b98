#include "launcher/local_host.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "launcher/say.h"

namespace een {

Result<std::shared_ptr<RoleProcess>> LocalHost::Start(ProcessSpec spec) {
  auto child = std::make_shared<ChildProcess>(std::move(spec));
  EEN_RETURN_IF_ERROR(child->Start());
  children_.push_back(child);
  return std::shared_ptr<RoleProcess>(child);
}

void LocalHost::Watch(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  for (const auto& c : children_) {
    if (c->output_fd() >= 0) fds.push_back({c->output_fd(), POLLIN, 0});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);  // nothing to read: pace the caller's loop
  } else {
    poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  }
  for (const auto& c : children_) c->Drain();
  Reap();
}

void LocalHost::Reap() {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (const auto& c : children_) {
      if (c->Reap(pid, status)) c->Drain(true);
    }
  }
}

void LocalHost::StopAll(std::chrono::milliseconds grace) {
  for (const auto& c : children_) {
    if (c->running()) c->Signal(SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  auto any_running = [&] {
    for (const auto& c : children_) {
      if (c->running()) return true;
    }
    return false;
  };
  // Watch reaps what ended; each wait is at most 20 ms.
  while (any_running() && std::chrono::steady_clock::now() < deadline) {
    Watch(std::chrono::milliseconds(20));
  }
  for (const auto& c : children_) {
    if (c->running()) {
      Say(c->label() + " did not stop on SIGTERM; sending SIGKILL");
      c->Signal(SIGKILL);
    }
  }
  for (const auto& c : children_) {
    if (c->running()) {
      int status;
      waitpid(c->pid(), &status, 0);
      c->Reap(c->pid(), status);
    }
    c->Signal(SIGKILL);  // anything a role left behind in its group
    c->Drain(true);
  }
}

}  // namespace een
