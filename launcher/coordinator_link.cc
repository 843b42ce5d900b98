#include "launcher/coordinator_link.h"

#include <unistd.h>

#include <algorithm>

#include "common/job_env.h"
#include "common/logging.h"
#include "common/transport/registry.h"
#include "common/wire.h"

namespace een {

using std::chrono::milliseconds;

CoordinatorLink::CoordinatorLink(std::string address, launcher_messages::NodeStatusFields node,
                                 milliseconds interval)
    : address_(std::move(address)), node_(std::move(node)), interval_(interval) {
  node_.pid = getpid();
}

long CoordinatorLink::SilentMs() const {
  const Clock::time_point since = heard_ ? heard_at_ : first_asked_;
  if (since == Clock::time_point{}) return 0;
  return std::chrono::duration_cast<milliseconds>(Clock::now() - since).count();
}

bool CoordinatorLink::DeclaredLost(int pid) const {
  return std::find(lost_pids_.begin(), lost_pids_.end(), pid) != lost_pids_.end();
}

void CoordinatorLink::Ask(const std::string& failure, bool restart) {
  if (!connection_) {
    auto device = transport::DeviceFor(address_);
    if (!device.ok()) return;
    auto connection = (*device)->Connect(address_);
    if (!connection.ok()) return;
    connection_ = std::move(*connection);
  }
  asked_at_ = Clock::now();
  if (first_asked_ == Clock::time_point{}) first_asked_ = asked_at_;
  std::vector<std::pair<int, ProcessSighting>> sightings;
  if (role_pids_) {
    // As this host names itself to its roles: they are its own processes.
    for (int pid : role_pids_()) sightings.emplace_back(pid, SightProcess(pid, HostName()));
  }
  Ignored(connection_->Send(launcher_messages::NodeStatus(node_, failure, sightings, restart)),
          "asking the coordinator how the job stands");
}

bool CoordinatorLink::Read(milliseconds timeout) {
  if (!connection_) return false;
  auto reply = connection_->Receive(timeout);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kPermissionDenied) {
      // A CURVE handshake refused: this node's secret (or --insecure) is
      // not the job's. Definitive, and it says so now, not at the timeout.
      refused_ = reply.status().message() +
                 " (every node's een-launch needs the same --secret-file or EEN_JOB_SECRET, "
                 "and --insecure on all of them or none)";
    }
    return false;
  }
  bool answered = false;
  Ignored(wire::Visit(*reply,
                      [&](wire::Header::Reader h) -> Status {
                        if (!h.isNodeStatusReply()) return Status::Ok();
                        auto r = h.getNodeStatusReply();
                        // An earlier run's coordinator, lingering: not this run's.
                        if (r.getAttempt() < node_.attempt) return Status::Ok();
                        answered = true;
                        if (r.getAttempt() > node_.attempt) {
                          // This node missed its run's end: the job started again without it.
                          heard_ = true;
                          heard_at_ = Clock::now();
                          state_ = wire::JobState::ABORTED;
                          restart_every_worker_ = true;
                          reason_ = "the job was started again (run " +
                                    std::to_string(r.getAttempt()) + ") while this node ran " +
                                    std::to_string(node_.attempt);
                          return Status::Ok();
                        }
                        heard_ = true;
                        heard_at_ = Clock::now();
                        state_ = r.getState();
                        reason_ = r.getReason();
                        refused_ = r.getRefused();
                        restart_every_worker_ = r.getRestartEveryWorker();
                        lost_pids_.clear();
                        for (int pid : r.getLostPids()) lost_pids_.push_back(pid);
                        share_.nodes_joined = r.getNodesJoined();
                        share_.torch_store = r.getTorchStore();
                        share_.restart_workers.clear();
                        for (int rank : r.getRestartWorkers()) {
                          share_.restart_workers.push_back(rank);
                        }
                        if (r.getAssigned() && !share_.assigned) {  // given once, kept
                          share_.assigned = true;
                          share_.first_ps = r.getFirstPs();
                          share_.first_worker = r.getFirstWorker();
                          share_.num_ps = r.getNumPs();
                          share_.world_size = r.getWorldSize();
                        }
                        return Status::Ok();
                      }),
          "reading the coordinator's answer about the job");
  return answered;
}

void CoordinatorLink::Poll() {
  if (asked_at_ == Clock::time_point{} || Clock::now() - asked_at_ >= interval_) Ask("");
  while (Read(milliseconds(0))) {
  }
}

void CoordinatorLink::Refresh(milliseconds wait) {
  Ask("");
  const auto deadline = Clock::now() + wait;
  while (Clock::now() < deadline && !Read(milliseconds(20))) {
  }
}

bool CoordinatorLink::EndJob(const std::string& reason, milliseconds wait, bool restart) {
  if (state_ == wire::JobState::ABORTED || state_ == wire::JobState::SHUTDOWN) return true;
  Ask(reason, restart);
  const auto deadline = Clock::now() + wait;
  while (Clock::now() < deadline) {
    if (Read(milliseconds(20)) && state_ == wire::JobState::ABORTED) return true;
  }
  return false;
}

void RemoteCoordinator::Update() {
  if (exited_) return;
  link_->Poll();
  if (!link_->refused().empty()) {
    exited_ = true;
    verdict_ = "the coordinator refused this node: " + link_->refused();
  } else if (link_->state() == wire::JobState::ABORTED) {
    exited_ = true;
    verdict_ =
        link_->reason().empty() ? std::string("the coordinator ended the job") : link_->reason();
  } else if (link_->state() == wire::JobState::SHUTDOWN) {
    exited_ = true;  // the job finished well
  } else if (link_->heard() && link_->SilentMs() > silence_limit_.count()) {
    exited_ = true;
    silent_ = true;
    verdict_ = "the coordinator stopped answering (" + std::to_string(link_->SilentMs()) +
               " ms without an answer): node 0's host or its een-launch is gone. The "
               "coordinator runs on node 0 only and is not replicated (a single point of "
               "failure), so the job ends" +
               (snapshots_ ? "; start it again with --resume to go on from its snapshots" : "");
  }
}

std::string RemoteCoordinator::ExitDescription() const {
  if (!exited_) return "is still running";
  return verdict_.empty() ? "finished the job" : "ended: " + verdict_;
}

}  // namespace een
