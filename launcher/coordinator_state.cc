// Coordinator: what it keeps across its own restarts (RocksDB state) and
// the membership history it keeps next to the snapshots. See coordinator.h.
#include <capnp/serialize.h>

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "common/optimizer_wire.h"
#include "common/wire.h"
#include "launcher/coordinator.h"
#include "launcher/coordinator_internal.h"

namespace een {

using transport::Message;

void Coordinator::SaveState() {
  if (!state_store_) return;
  capnp::MallocMessageBuilder b;
  auto st = b.initRoot<wire::CoordinatorState>();
  st.setState(state_);
  TensorsToWire(model_, st.initTensors(model_.size()));
  OptimizerToWire(optimizer_, st.initOptimizer());
  auto nodes = st.initNodes(ps_.size() + workers_.size());
  size_t i = 0;
  for (auto* all : {&ps_, &workers_}) {
    for (const Node& n : *all) {
      auto r = nodes[i++];
      r.setRole(all == &ps_ ? wire::Role::PS : wire::Role::WORKER);
      r.setRank(n.rank);
      r.setHost(n.host);
      r.setPid(n.pid);
      r.setDataAddress(n.data_address);
      r.setLocalAddress(n.local_address);
      r.setDone(n.done);
      r.setLost(n.lost);
      r.setStep(n.step);
      r.setJoining(n.joining);
      r.setJoinStep(n.join_step);
      r.setAwaitsFinal(n.awaits_final);
      r.setFinalTaken(n.final_taken);
    }
  }
  st.setMembershipEpoch(membership_.epoch());
  const std::vector<int> live = membership_.pending() ? std::vector<int>() : LiveWorkerRanks();
  auto l = st.initLiveWorkers(live.size());
  for (size_t k = 0; k < live.size(); ++k) l.set(k, live[k]);
  st.setCompleteSnapshot(snapshots_.complete());
  st.setStartStep(start_step_);
  st.setResume(options_.resume);
  st.setMapEpoch(map_epoch_);
  if (map_) map_->ToWire(st.initMap());
  st.setRollbackEpoch(rollback_.epoch());
  st.setRollbackStep(rollback_.step());
  st.setMapMoved(map_moved_);
  st.setWorkerReplacements(worker_replacements_);
  st.setNextBatch(next_batch_);
  st.setDataBatch(data_batch_);
  st.setDataLookAhead(static_cast<uint32_t>(data_look_ahead_));
  batches_since_save_ = 0;
  const std::vector<MembershipChange>& history = membership_.history();
  auto saved_history = st.initHistory(history.size());
  for (size_t k = 0; k < history.size(); ++k) wire::MembershipToWire(history[k], saved_history[k]);
  auto words = capnp::messageToFlatArray(b);
  auto bytes = words.asBytes();
  if (Status s = state_store_->Put(std::string(bytes.begin(), bytes.end())); !s.ok()) {
    spdlog::error("{}; a restart of the coordinator now would lose the latest changes",
                  s.message());
  }
}

Status Coordinator::RestoreState() {
  EEN_ASSIGN_OR_RETURN(std::optional<std::string> saved, state_store_->Get());
  if (!saved) {  // killed before the job started: nothing was lost
    spdlog::warn(
        "no saved state in {}: the job had not started; starting over (every process "
        "registers again)",
        options_.state_path);
    return Status::Ok();
  }
  // Copied into words: Cap'n Proto reads aligned memory.
  std::vector<capnp::word> words(saved->size() / sizeof(capnp::word));
  if (!words.empty()) {  // a state shorter than a word: no memcpy from or to nothing
    std::memcpy(words.data(), saved->data(), words.size() * sizeof(capnp::word));
  }
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
    auto st = reader.getRoot<wire::CoordinatorState>();
    if (st.getState() == wire::JobState::STARTING) {
      spdlog::warn("the saved job had not started; starting over (every process registers again)");
      return Status::Ok();
    }
    if (st.getState() != wire::JobState::RUNNING && st.getState() != wire::JobState::SHUTDOWN) {
      return FailedPrecondition("the saved job had ended; nothing to take up");
    }
    state_ = st.getState();
    EEN_ASSIGN_OR_RETURN(model_, TensorsFromWire(st.getTensors()));
    EEN_ASSIGN_OR_RETURN(optimizer_, OptimizerFromWire(st.getOptimizer()));
    // Ranks are 0..n-1 per role (a job grows one rank at a time), so a rank
    // beyond the records of its role is damage, not a job of 2^31 workers.
    size_t records[2] = {0, 0};
    for (auto r : st.getNodes()) ++records[r.getRole() == wire::Role::PS ? 0 : 1];
    for (auto r : st.getNodes()) {
      std::vector<Node>& nodes = NodesOf(r.getRole());
      const size_t most = std::max(nodes.size(), records[r.getRole() == wire::Role::PS ? 0 : 1]);
      if (r.getRank() < 0 || static_cast<size_t>(r.getRank()) >= most) {
        return DataLoss(fmt::format("the saved state lists {} rank {}, with {} {} records",
                                    RoleName(r.getRole()), r.getRank(), most,
                                    RoleName(r.getRole())));
      }
      if (r.getRank() >= static_cast<int>(nodes.size()))
        nodes.resize(r.getRank() + 1);  // joined live
      Node& n = nodes[r.getRank()];
      n.role = r.getRole();
      n.rank = r.getRank();
      n.host = r.getHost();
      n.pid = r.getPid();
      n.data_address = r.getDataAddress();
      n.local_address = r.getLocalAddress();
      n.done = r.getDone();
      n.lost = r.getLost();
      n.step = r.getStep();
      n.joining = r.getJoining();
      n.join_step = r.getJoinStep();
      n.awaits_final = r.getAwaitsFinal();
      n.final_taken = r.getFinalTaken();
      n.registered = true;
      n.liveness.Restart(Clock::now());  // silence counts from now
    }
    std::vector<int> live;
    for (int w : st.getLiveWorkers()) live.push_back(w);
    std::vector<MembershipChange> history;
    for (auto m : st.getHistory()) history.push_back(wire::MembershipFromWire(m));
    membership_.Restore(st.getMembershipEpoch(), std::move(history), live != LiveWorkerRanks());
    snapshots_.Restore(st.getCompleteSnapshot());
    start_step_ = st.getStartStep();
    map_epoch_ = std::max<uint64_t>(1, st.getMapEpoch());
    if (st.hasMap()) {
      EEN_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromWire(st.getMap()));
      map_ = std::move(map);
    }
    rollback_.Restore(st.getRollbackEpoch(), st.getRollbackStep());
    map_moved_ = st.getMapMoved();
    worker_replacements_ = st.getWorkerReplacements();
    next_batch_ = st.getNextBatch();
    data_batch_ = st.getDataBatch();
    data_look_ahead_ = std::min<uint64_t>(st.getDataLookAhead(), kMaxDataLookAhead);
  } catch (const kj::Exception& e) {
    return DataLoss("the saved coordinator state is corrupt: " +
                    std::string(e.getDescription().cStr()));
  }
  RefreshPsHosts();  // not in the saved map: placement needs them again
  if (state_ == wire::JobState::SHUTDOWN) shutdown_at_ = Clock::now();
  spdlog::info(
      "took the job up again from {} (incarnation {:x}): {} workers live, newest "
      "complete snapshot at step {}{}",
      options_.state_path, incarnation_, LiveWorkerRanks().size(), snapshots_.complete(),
      next_batch_ == 0 ? std::string()
                       : fmt::format("; NextBatch() deals on from batch {} (the last saved: up to "
                                     "{} batches dealt since come again)",
                                     next_batch_, kBatchesPerSave));
  return Status::Ok();
}

void Coordinator::NoteDataLookAhead(int rank, uint64_t steps) {
  if (data_look_ahead_ == kMaxDataLookAhead) return;
  if (steps > kMaxDataLookAhead) {
    spdlog::warn(
        "worker {}'s loop draws its data {} steps ahead of the one it trains; the job keeps "
        "each epoch exact for at most {} (a DataLoader draws num_workers * prefetch_factor "
        "batches ahead): past that, after a lost or added worker some samples may be trained "
        "twice or not at all",
        rank, steps, kMaxDataLookAhead);
    steps = kMaxDataLookAhead;
  }
  data_look_ahead_ = steps;
  spdlog::info(
      "worker {}'s loop draws its data up to {} step(s) ahead (a DataLoader with workers): "
      "under bsp a change of the workers reaches the data {} step(s) after the change",
      rank, steps, steps);
  SaveState();
}

void Coordinator::NoteDataBatch(uint64_t batch) {
  data_batch_ = batch;
  spdlog::info(
      "the workers' samplers draw batches of {} a step each (kept for joiners and --resume)",
      batch);
  SaveState();
  if (options_.snapshot_dir.empty()) return;
  if (Status s = WriteDataBatch(options_.snapshot_dir, batch); !s.ok()) {
    spdlog::warn("{}; a --resume of this job needs the batch size given to its samplers",
                 s.message());
  }
}

void Coordinator::SaveHistory() {
  if (options_.snapshot_dir.empty()) return;
  if (Status s = WriteMembershipLog(options_.snapshot_dir, membership_.history()); !s.ok()) {
    spdlog::warn("{}; a --resume of this job may misplace the data position", s.message());
  }
}

}  // namespace een
