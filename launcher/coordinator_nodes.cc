// Coordinator: the launchers of a per-node launch (een-launch --nnodes N
// --node-rank R --rdzv HOST:PORT). Each asks how the job stands; its first
// answer is the rendezvous (elastic jobs: the answer that gives its ranks,
// elastic_nodes.h). See coordinator.h.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <sstream>

#include "common/logging.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"
#include "launcher/coordinator_messages.h"

namespace een {

Status Coordinator::HandleNodeStatus(const transport::PeerId& peer,
                                     wire::NodeStatus::Reader status) {
  const int node = status.getNode();
  const int64_t nnodes = status.getNnodes();
  const std::string host = status.getHost();
  const int pid = status.getPid();
  const coordinator_messages::JobRun run{options_.attempt, restart_every_worker_};
  if (status.getAttempt() != options_.attempt) {
    // A node of another run of the job (a restart of every worker, --max-restarts): one of an
    // earlier run learns that the job started again; one of a later run, that this is not its
    // coordinator (it waits for the next). Neither counts as a node of this run.
    return listener_->Send(
        peer, coordinator_messages::NodeStatusReply(state_, abort_reason_, {}, "", {}, run));
  }
  std::string refused;
  if (nnodes < 1 || node < 0 || node >= nnodes) {
    refused = fmt::format("node rank {} of {} nodes is not a node", node, nnodes);
  } else if (std::string problem = NodeCountsProblem(status); !problem.empty()) {
    refused = fmt::format("node {} {}", node, problem);
  } else if (std::string differ = SettingsThatDiffer(status.getSettings()); !differ.empty()) {
    refused = fmt::format(
        "node {} was started with other job-wide flags than node 0 ({}): give every node's "
        "een-launch the same flags",
        node, differ);
  } else if (auto it = node_launchers_.find(node);
             it != node_launchers_.end() && (it->second.pid != pid || it->second.host != host) &&
             !LauncherSilent(it->second)) {
    refused = fmt::format(
        "node rank {} is taken by the een-launch on {} (pid {}), which is alive: give each "
        "node its own --node-rank",
        node, it->second.host, it->second.pid);
  } else if (auto old = node_launchers_.find(node);
             !options_.elastic.enabled() && state_ != wire::JobState::STARTING &&
             old != node_launchers_.end() && old->second.pid != pid) {
    // A fixed node count: a node whose een-launch came back after the job
    // went on without it. Its ranks are its old ones; workers of it that
    // now run on other nodes would be refused there.
    std::string moved;
    for (const auto& [rank, from] : moved_from_) {
      if (from == host) moved += (moved.empty() ? "" : ", ") + std::to_string(rank);
    }
    if (!moved.empty()) {
      refused = fmt::format(
          "node {}'s worker(s) {} run on other nodes since its een-launch was lost; the job goes "
          "on without this node (a job with a fixed --nnodes takes no node back once its workers "
          "moved; --nnodes MIN:MAX lets nodes come and go)",
          node, moved);
    }
  }
  if (!refused.empty()) {
    spdlog::warn("refused the een-launch on {} (pid {}): {}", host, pid, refused);
    refused_launchers_[node] = fmt::format("the een-launch on {} was refused: {}", host, refused);
    return listener_->Send(peer,
                           coordinator_messages::NodeStatusReply(state_, "", {}, refused, {}, run));
  }
  refused_launchers_.erase(node);  // started again, right this time
  auto [it, first] = node_launchers_.try_emplace(node);
  coordinator_messages::NodeShare share_kept = it->second.share;
  if (first || it->second.pid != pid || it->second.host != host) {
    spdlog::info("node {} ({}, een-launch pid {}) joined the rendezvous", node, host, pid);
    // Its predecessor's roles died with it (they die with their launcher).
    if (!first) ForgetRolesOf(it->second.host);
    last_node_joined_ = Clock::now();
    // Elastic, once started: those roles are lost (their workers may run
    // on other nodes by now), so the node comes back as a new one, with
    // new ranks.
    if (!first && options_.elastic.enabled() && state_ != wire::JobState::STARTING) {
      share_kept = {};
    }
  }
  it->second = NodeLauncher{host, pid, Clock::now(), false, false, share_kept, {}};
  // At most a report per role of the job (a launcher that lies can only
  // buy its own roles time, up to the cap of a running process).
  const size_t most = workers_.size() + ps_.size() + spares_.size() + 16;
  for (auto sighting : status.getSightings()) {
    if (it->second.sightings.size() >= most) break;
    const auto state = static_cast<uint16_t>(sighting.getState());
    if (state > static_cast<uint16_t>(wire::ProcessState::IDLE)) continue;  // newer than us
    it->second.sightings[sighting.getPid()] = {static_cast<ProcessSighting::State>(state),
                                               sighting.getCpuNanos()};
  }
  MaybeCloseRendezvous();
  if (options_.elastic.enabled() && !it->second.share.assigned &&
      state_ == wire::JobState::RUNNING) {
    // A node new to the running job; one whose roles are in it already
    // (this coordinator restarted and forgot the launchers) keeps them.
    bool in_job = false;
    for (const auto* nodes : {&ps_, &workers_}) {
      for (const Node& n : *nodes) in_job = in_job || (n.registered && n.host == host);
    }
    if (options_.restore && in_job) {
      it->second.share.assigned = true;
    } else {
      AssignLateNode(node, it->second);
    }
  }
  const std::string failure = status.getFailure();
  if (!failure.empty() &&
      (state_ == wire::JobState::STARTING || state_ == wire::JobState::RUNNING)) {
    // For a restart: this coordinator then ends with kCoordinatorExitRestartEveryWorker, once
    // every node heard it.
    restart_every_worker_ = status.getRestart();
    Abort(fmt::format("node {} ({}): {}", node, host, failure));
  }
  it->second.told_end = state_ == wire::JobState::SHUTDOWN || state_ == wire::JobState::ABORTED;
  std::vector<int> lost_pids;
  for (const Node& w : workers_) {
    if (w.registered && w.lost && w.host == host) lost_pids.push_back(w.pid);
  }
  coordinator_messages::NodeShare share = it->second.share;
  share.nodes_joined = static_cast<int>(node_launchers_.size());
  share.restart_workers = WorkersToRestartOn(node);
  share.torch_store = options_.torch_store;
  return listener_->Send(
      peer, coordinator_messages::NodeStatusReply(state_, abort_reason_, lost_pids, "", share,
                                                  {options_.attempt, restart_every_worker_}));
}

ProcessSighting Coordinator::Sight(const Node& n, std::chrono::milliseconds fresh) const {
  const ProcessSighting here = SightProcess(n.pid, n.host);
  if (here.state != ProcessSighting::State::kElsewhere) return here;
  for (const auto& [rank, launcher] : node_launchers_) {
    if (launcher.host != n.host || Clock::now() - launcher.heard > fresh) continue;
    const auto it = launcher.sightings.find(n.pid);
    if (it == launcher.sightings.end()) continue;
    ProcessSighting seen = it->second;
    // Asleep there: the hung check compares CPU times of two looks, which a
    // late report would show equal; a remote process asleep gets the time a
    // running one gets (up to the cap) instead.
    if (seen.state == ProcessSighting::State::kIdle) seen.state = ProcessSighting::State::kRunnable;
    return seen;
  }
  return here;
}

std::string Coordinator::SettingsThatDiffer(const std::string& settings) const {
  if (options_.job_settings.empty() || settings == options_.job_settings) return "";
  auto fields = [](const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    for (std::string word; in >> word;) {
      const size_t eq = word.find('=');
      out[word.substr(0, eq)] = eq == std::string::npos ? "" : word.substr(eq + 1);
    }
    return out;
  };
  const auto here = fields(settings), ours = fields(options_.job_settings);
  std::string differ;
  for (const auto& [name, value] : ours) {
    auto it = here.find(name);
    const std::string theirs = it == here.end() ? "(none)" : it->second;
    if (theirs != value) {
      differ += fmt::format("{}--{} {} there, {} on node 0", differ.empty() ? "" : "; ", name,
                            theirs, value);
    }
  }
  return differ.empty() ? "flags of another een-launch version" : differ;
}

std::string Coordinator::NodeCountsProblem(wire::NodeStatus::Reader status) const {
  const ElasticNodes& e = options_.elastic;
  if (e.enabled() || status.getMinNodes() > 0) {
    if (status.getMinNodes() == e.min && status.getNnodes() == e.max &&
        status.getPs() == e.ps_per_node && status.getWorkers() == e.workers_per_node) {
      return "";
    }
    const auto nodes = [](int min, int max) {
      return min > 0 ? fmt::format("{}:{}", min, max) : std::to_string(max);
    };
    return fmt::format(
        "was started with --nnodes {} and {} PS and {} workers per node, but this job has "
        "--nnodes {} with {} PS and {} workers per node: start every node's een-launch with the "
        "same --nnodes and counts",
        nodes(status.getMinNodes(), status.getNnodes()), status.getPs(), status.getWorkers(),
        nodes(e.min, e.max), e.enabled() ? e.ps_per_node : options_.job.ps,
        e.enabled() ? e.workers_per_node : options_.job.workers);
  }
  if (status.getPs() == options_.job.ps && status.getWorkers() == options_.job.workers) return "";
  return fmt::format(
      "was started for a job of {} PS and {} workers, but this job has {} PS and {} workers: "
      "start every node's een-launch with the same --nnodes and counts",
      status.getPs(), status.getWorkers(), options_.job.ps, options_.job.workers);
}

std::vector<int> Coordinator::WorkersToRestartOn(int node) {
  std::vector<int> ranks;
  if (state_ != wire::JobState::RUNNING) return ranks;
  // Handed out already and not yet taken up: this node's, unless that node
  // fell silent too (then another may take them).
  int pending = 0;
  for (auto it = restart_on_.begin(); it != restart_on_.end();) {
    const Node& w = workers_[it->first];
    auto holder = node_launchers_.find(it->second);
    if (!w.lost || w.done || holder == node_launchers_.end() || LauncherSilent(holder->second)) {
      it = restart_on_.erase(it);  // replaced (or no one left to do it)
      continue;
    }
    ++pending;
    if (it->second == node) ranks.push_back(it->first);
    ++it;
  }
  // A lost worker whose own node's een-launch is silent (the whole host is
  // gone) has no one to restart it: this node does, within --max-restarts.
  for (const Node& w : workers_) {
    if (!w.registered || !w.lost || w.done || w.joining || restart_on_.count(w.rank)) continue;
    if (options_.job.max_restarts - worker_replacements_ - pending <= 0) break;
    bool own_node_alive = false;
    for (const auto& [n, launcher] : node_launchers_) {
      own_node_alive = own_node_alive || (launcher.host == w.host && !LauncherSilent(launcher));
    }
    if (own_node_alive) continue;  // its own een-launch restarts it
    restart_on_[w.rank] = node;
    moved_from_[w.rank] = w.host;
    ++pending;
    ranks.push_back(w.rank);
    spdlog::warn("{} was lost with its node; node {} starts its replacement", Describe(w), node);
  }
  return ranks;
}

void Coordinator::MaybeCloseRendezvous() {
  const ElasticNodes& e = options_.elastic;
  if (!e.enabled() || rdzv_closed_ || state_ != wire::JobState::STARTING) return;
  int joined = 0;
  for (const auto& [node, launcher] : node_launchers_) joined += LauncherSilent(launcher) ? 0 : 1;
  const bool last_call_over = MillisSince(last_node_joined_) >= e.last_call.count();
  if (joined < e.min || (joined < e.max && !last_call_over)) return;
  rdzv_closed_ = true;
  for (auto it = node_launchers_.begin(); it != node_launchers_.end();) {
    it = LauncherSilent(it->second) ? node_launchers_.erase(it) : std::next(it);
  }
  int ps = 0, workers = 0;
  std::string which;
  for (auto& [node, launcher] : node_launchers_) {  // by node rank: node-rank-major ranks
    launcher.share.assigned = true;
    launcher.share.first_ps = ps;
    launcher.share.first_worker = workers;
    ps += e.ps_per_node;
    workers += e.workers_per_node;
    which += (which.empty() ? "" : ", ") + std::to_string(node);
  }
  for (auto& [node, launcher] : node_launchers_) {
    launcher.share.num_ps = ps;
    launcher.share.world_size = workers;
  }
  options_.job.ps = ps;
  options_.job.workers = workers;
  ps_.resize(ps);
  workers_.resize(workers);
  next_late_ps_ = ps;
  next_late_worker_ = workers;
  spdlog::info(
      "rendezvous closed with {} of {}..{} nodes ({}{}): {} PS and {} workers; up to {} more "
      "node(s) may join the running job",
      joined, e.min, e.max, which, joined < e.max ? ", after the last call" : "", ps, workers,
      e.max - joined);
}

void Coordinator::AssignLateNode(int node, NodeLauncher& launcher) {
  const ElasticNodes& e = options_.elastic;
  // Ranks given to late nodes whose een-launch fell silent before their
  // roles joined are free again (else every later node would wait for them).
  next_late_ps_ = static_cast<int>(ps_.size());
  next_late_worker_ = static_cast<int>(workers_.size());
  for (const auto& [n, other] : node_launchers_) {
    if (&other == &launcher || !other.share.assigned || LauncherSilent(other)) continue;
    next_late_ps_ = std::max(next_late_ps_, other.share.first_ps + e.ps_per_node);
    next_late_worker_ = std::max(next_late_worker_, other.share.first_worker + e.workers_per_node);
  }
  coordinator_messages::NodeShare& share = launcher.share;
  share.assigned = true;
  share.first_worker = next_late_worker_;
  next_late_worker_ += e.workers_per_node;
  share.first_ps = next_late_ps_;
  next_late_ps_ += e.ps_per_node;
  share.num_ps = next_late_ps_;
  share.world_size = next_late_worker_;
  spdlog::info(
      "node {} ({}) joins the running job: its {} worker(s) take ranks from {}, its {} PS ranks "
      "from {} (added one after the other)",
      node, launcher.host, e.workers_per_node, share.first_worker, e.ps_per_node, share.first_ps);
  SaveState();
}

bool Coordinator::LauncherSilent(const NodeLauncher& launcher) const {
  // It asks every heartbeat interval.
  return MillisSince(launcher.heard) > 5 * options_.job.heartbeat_interval.count() + 500;
}

bool Coordinator::LaunchersTold() const {
  for (const auto& [node, launcher] : node_launchers_) {
    if (!launcher.told_end && !LauncherSilent(launcher)) return false;
  }
  return true;
}

void Coordinator::ForgetRolesOf(const std::string& host) {
  if (state_ != wire::JobState::STARTING) return;  // once started, liveness says who is lost
  for (auto* nodes : {&ps_, &workers_}) {
    for (Node& n : *nodes) {
      if (!n.registered || n.host != host) continue;
      spdlog::warn(
          "{} is gone with its node's een-launch before the job started; its rank is "
          "free for a replacement",
          Describe(n));
      FreeRank(n);
    }
  }
}

void Coordinator::ForgetSilentNodesBeforeStart() {
  for (auto& [node, launcher] : node_launchers_) {
    if (launcher.forgotten || !LauncherSilent(launcher)) continue;
    spdlog::warn("the een-launch of node {} ({}, pid {}) went silent before the job started", node,
                 launcher.host, launcher.pid);
    launcher.forgotten = true;
    ForgetRolesOf(launcher.host);
  }
}

}  // namespace een
