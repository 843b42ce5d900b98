#include "een/job_sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <string>

#include "een/data_parallel.h"
#include "een/error.h"

namespace een {

JobSampler::JobSampler(DataParallel& dp, size_t dataset_size, bool shuffle, uint64_t seed,
                       size_t batch)
    : dp_(dp), size_(dataset_size), shuffle_(shuffle), seed_(seed), batch_(batch) {
  if (dataset_size == 0) throw Error("een: JobSampler: the dataset is empty");
  dp_.AddFollowingSampler(1);
}

uint64_t JobSampler::JobBatch() const { return dp_.job_data_batch(); }

void JobSampler::TellJob() {
  if (dp_.job_data_batch() == 0) dp_.NoteJobDataBatch(batch_);
}

void JobSampler::GiveBatch(size_t batch) {
  if (batch_ == 0) batch_ = batch;
}

JobSampler::~JobSampler() {
  dp_.AddFollowingSampler(-1);
  if (dp_.training_sampler() == this) dp_.set_training_sampler(nullptr);
}

void JobSampler::Claim() {
  // The sampler a step is taken in trains; others (an evaluation's) keep
  // their fixed shares while it lives.
  if (dp_.training_sampler() == nullptr && dp_.step() != begun_at_) {
    dp_.set_training_sampler(this);
    if (batch_ != 0) TellJob();  // the job keeps the training sampler's (not an evaluation's)
  }
}

const DistributedSampler& JobSampler::Order(uint64_t epoch) {
  if (!order_ || order_epoch_ != epoch) {
    order_.emplace(size_, 0, 1, shuffle_, seed_);
    order_->set_epoch(epoch);
    order_epoch_ = epoch;
  }
  return *order_;
}

void JobSampler::Begin(uint64_t epoch) {
  NoteRollback();  // one in the last pass's end (ssp/async): its steps' indices come again
  if (dp_.consistency() == "bsp") {
    TakeBackUndone();  // one in the last pass's end, after its last draw
    // Drawn in the last pass and never trained (the loop left it early): drawn again.
    const uint64_t calls = dp_.steps_called();
    while (!draws_.empty() && draws_.back().call >= calls) {
      redo_.push_front(draws_.back().data_step);
      draws_.pop_back();
    }
  }
  calls_at_begin_ = dp_.steps_called();
  // What this worker drew in the pass before the last is no longer redone by a rollback.
  drawn_log_.Forget(log_begins_);
  log_begins_ = dp_.step();
  epoch_ = data_epoch_ = epoch;
  drawn_ = 0;
  drawn_at_step1_.reset();
  pending_.clear();
  pending_epochs_.clear();
  pending_at_ = 0;
  fixed_.clear();
  fixed_at_ = 0;
  seen_rollbacks_ = pass_rollbacks_ = dp_.rollbacks();
  begun_at_ = dp_.step();
  next_step_ = std::max(next_step_, begun_at_);  // past what an earlier pass drew
  const void* training = dp_.training_sampler();
  follows_ = training == nullptr || training == this;
  if (batch_ == 0) batch_ = JobBatch();  // another worker's sampler learned it
  bsp_ = dp_.consistency() == "bsp";
  if (!follows_) {  // another sampler trains: torch's fixed shares (an evaluation's)
    TakeFixedShares(epoch);
    return;
  }
  if (batch_ != 0) {
    // ssp/async: every worker takes its own steps; the job deals batches.
    mode_ = bsp_ ? Mode::kFollowing : Mode::kDealt;
    return;
  }
  if (!bsp_ && !warned_) {
    warned_ = true;
    spdlog::warn(
        "under {} the sampler deals the job's batches (a fast worker takes more) once it knows "
        "the batch size: until then each worker takes its fixed share of each epoch, and it "
        "learns the batch size from the loop in the first epoch; give it "
        "(een.DistributedSampler(dataset, batch_size=B), found by itself under a torch "
        "DataLoader) to deal from the start",
        dp_.consistency());
  }
  if (begun_at_ > 0 && bsp_) {
    throw Error(
        "een: the sampler starts at step " + std::to_string(begun_at_) +
            " of a running job (a replacement, an added worker, --resume, or an epoch of "
            "fewer than two steps), and does not know the batch size to find the job's place "
            "in the data: give it (Python een.DistributedSampler(dataset, batch_size=B); C++ "
            "JobSampler(dp, n, shuffle, seed, B))",
        Error::Code::kFailedPrecondition);
  }
  // The job at step 0 (or ssp/async): DistributedSampler's layout, which
  // is the following layout's too until something changes.
  TakeFixedShares(epoch);
}

void JobSampler::TakeFixedShares(uint64_t epoch) {
  DistributedSampler mine(size_, std::max(dp_.live_index(), 0), std::max(dp_.live_count(), 1),
                          shuffle_, seed_);
  mine.set_epoch(epoch);
  fixed_ = mine.indices();
  mode_ = Mode::kFixed;
}

void JobSampler::Learn(uint64_t steps_this_pass) {
  if (batch_ != 0) return;
  if (steps_this_pass >= 1 && !drawn_at_step1_) drawn_at_step1_ = drawn_;
  // Between the pass's steps 1 and 2 the loop drew one batch, however far
  // ahead a prefetching DataLoader draws.
  if (steps_this_pass >= 2 && drawn_at_step1_ && drawn_ > *drawn_at_step1_) {
    batch_ = drawn_ - *drawn_at_step1_;
    spdlog::debug("the sampler learned the batch size: {}", batch_);
    TellJob();
    if (*drawn_at_step1_ > batch_) drawn_ahead_ = true;
  }
}

void JobSampler::NoteRollback() {
  if (dp_.rollbacks() == seen_rollbacks_) return;
  seen_rollbacks_ = dp_.rollbacks();
  WarnDrawnAhead();
  // ssp/async: this worker goes on from its own step `from`; what it drew for that step and
  // later ones comes again, before what it still had to give again.
  const uint64_t from = dp_.step();
  if (const size_t again = drawn_log_.Rollback(from); again > 0) {
    spdlog::info(
        "rolled back to this worker's step {}: the sampler gives the {} samples it drew "
        "for its steps since then again",
        from, again);
  }
}

void JobSampler::Logged(size_t index) { drawn_log_.Note(dp_.step(), index); }

std::optional<size_t> JobSampler::Replayed() {
  std::optional<size_t> index = drawn_log_.Again();
  if (index) Logged(*index);
  return index;
}

std::optional<size_t> JobSampler::Next() {
  Claim();
  if (PerArrival()) {
    NoteRollback();
    if (std::optional<size_t> again = Replayed()) {
      ++drawn_;
      return again;
    }
  }
  if (mode_ == Mode::kFixed) {
    // The batch size, learned from the loop in this pass (under ssp/async not
    // across a rollback): under bsp the pass follows the job from the next
    // step on; under ssp/async the job deals the batches from the next pass.
    if (follows_ && (bsp_ || dp_.rollbacks() == pass_rollbacks_)) Learn(dp_.step() - begun_at_);
    if (bsp_ && follows_) {
      if (batch_ != 0 && drawn_ % batch_ == 0) {
        mode_ = Mode::kFollowing;  // the same layout, drawn per step from here
        next_step_ = begun_at_ + drawn_ / batch_;
      } else if (!warned_ && (dp_.rollbacks() != seen_rollbacks_ ||
                              dp_.live_count() != static_cast<int>(dp_.world_size()))) {
        warned_ = true;
        spdlog::warn(
            "the job changed (a rollback or a membership change) before the sampler knew the "
            "batch size: this epoch's data may be trained twice or not at all; give the batch "
            "size (een.DistributedSampler(dataset, batch_size=B))");
      }
    }
    if (mode_ == Mode::kFixed) {
      if (fixed_at_ == fixed_.size()) {
        if (EndPass()) return std::nullopt;
        return Next();  // rolled back while the pass ended: its steps come again
      }
      ++drawn_;
      if (PerArrival()) Logged(fixed_[fixed_at_]);
      return fixed_[fixed_at_++];
    }
  }
  if (mode_ != Mode::kDone && pending_at_ == pending_.size() &&
      !(mode_ == Mode::kFollowing ? DrawBatch() : DrawDealt()) && !EndPass()) {
    return Next();
  }
  if (mode_ == Mode::kDone) return std::nullopt;
  ++drawn_;
  if (pending_at_ < pending_epochs_.size()) data_epoch_ = pending_epochs_[pending_at_];
  return pending_[pending_at_++];
}

std::vector<size_t> JobSampler::NextBatch() {
  if (batch_ == 0) {
    throw Error("een: JobSampler::NextBatch() needs the batch size (the constructor's `batch`)",
                Error::Code::kFailedPrecondition);
  }
  Claim();
  std::vector<size_t> out;
  if (PerArrival()) {
    NoteRollback();
    while (out.size() < batch_ && drawn_log_.redoing()) out.push_back(*Replayed());
    if (!out.empty()) return out;
  }
  if (mode_ == Mode::kFixed) {
    while (out.size() < batch_ && fixed_at_ < fixed_.size()) {
      if (PerArrival()) Logged(fixed_[fixed_at_]);
      out.push_back(fixed_[fixed_at_++]);
    }
    if (out.empty() && !EndPass()) return NextBatch();
    return out;
  }
  if (mode_ == Mode::kDone || !(mode_ == Mode::kFollowing ? DrawBatch() : DrawDealt())) {
    if (!EndPass()) return NextBatch();
    return out;
  }
  out.assign(pending_.begin(), pending_.end());
  if (!pending_epochs_.empty()) data_epoch_ = pending_epochs_.front();
  pending_at_ = pending_.size();
  drawn_ += out.size();
  return out;
}

bool JobSampler::DrawBatch() {
  // After a rollback the steps from the snapshot are redone: the batches the undone steps
  // trained come again (those a loader drew ahead and had not given yet come once).
  TakeBackUndone();
  const std::vector<MembershipChange> changes = dp_.known_membership_changes();
  WarnIfLate(changes);
  const bool again = !redo_.empty();
  const uint64_t data_step = again ? redo_.front() : std::max(next_step_, dp_.step());
  const StepData at = StepDataAt(data_step, dp_.world_size(), changes, size_, batch_);
  if (at.epoch > epoch_) {
    if (drawn_ == 0) {
      spdlog::info(
          "the job is past epoch {} (at step {}, epoch {}): this pass draws nothing (a worker "
          "that starts mid-job skips the epochs trained before it)",
          epoch_, data_step, at.epoch);
    }
    return false;
  }
  if (drawn_ == 0 && at.epoch < epoch_) {
    spdlog::info("the pass of epoch {} first draws the rest of epoch {} ({})", epoch_, at.epoch,
                 again ? "batches a rollback undid" : "the loop left its pass early");
  }
  // This worker's place among the workers live at that step (owed
  // positions of a lost worker's unfinished steps first).
  const std::vector<uint64_t> positions = at.PositionsOf(dp_.rank(), batch_, size_);
  if (positions.empty()) {
    throw Error("een: the sampler is asked for step " + std::to_string(data_step) +
                    ", at which this worker is not one of the job's live workers",
                Error::Code::kFailedPrecondition);
  }
  if (!at.owed.empty() && !at.live.empty() && at.live.front() == dp_.rank()) {
    spdlog::info("step {}: the live workers first train {} samples a lost worker left untrained",
                 data_step, at.owed.size());
  }
  // Each position of its own epoch (owed ones of an epoch that ended: that one's).
  const std::vector<uint64_t> epochs = at.EpochsOf(dp_.rank(), batch_);
  pending_.resize(positions.size());
  pending_epochs_ = epochs;
  for (uint64_t e : std::set<uint64_t>(epochs.begin(), epochs.end())) {
    const DistributedSampler& order = Order(e);
    for (size_t i = 0; i < positions.size(); ++i) {
      if (epochs[i] == e) pending_[i] = order.At({positions[i]})[0];
    }
  }
  pending_at_ = 0;
  if (epochs.front() < at.epoch && !at.live.empty() && at.live.front() == dp_.rank()) {
    spdlog::info(
        "step {}: epoch {}'s last steps' batches a lost worker left untrained come first (its "
        "pass was drawn whole before the change reached the data)",
        data_step, epochs.front());
  }
  if (again) {
    redo_.pop_front();
  } else {
    next_step_ = data_step + 1;
  }
  NoteDraw(data_step);
  return true;
}

void JobSampler::TakeBackUndone() {
  const uint64_t rollbacks = dp_.rollbacks();
  if (rollbacks == seen_rollbacks_) return;
  const uint64_t calls = dp_.steps_called();
  constexpr uint64_t kCallsLooked = 4096;  // DataParallel keeps as many
  const uint64_t oldest = calls - std::min(calls, kCallsLooked);
  std::set<uint64_t> again(redo_.begin(), redo_.end());
  std::map<uint64_t, uint64_t> drawn_for;  // Step() call -> the data step it trained
  for (const Draw& d : draws_) drawn_for[d.call] = d.data_step;
  for (uint64_t k = seen_rollbacks_ + 1; k <= rollbacks; ++k) {
    const std::optional<uint64_t> to = dp_.rolled_back_to(k);
    if (!to) continue;
    for (uint64_t call = oldest; call < calls; ++call) {
      const std::optional<DataParallel::StepCall> c = dp_.step_call(call);
      // Undone: taken before rollback k, at its step or later, and not undone already.
      if (!c || c->rollbacks >= k || c->step < *to || !undone_calls_.insert(call).second) continue;
      const auto drawn = drawn_for.find(call);
      // Without a record (before this sampler drew): the step's own data, as it trained.
      again.insert(drawn != drawn_for.end() ? drawn->second : c->step);
    }
  }
  seen_rollbacks_ = rollbacks;
  while (!undone_calls_.empty() && *undone_calls_.begin() < oldest) {
    undone_calls_.erase(undone_calls_.begin());
  }
  redo_.assign(again.begin(), again.end());
}

void JobSampler::NoteDraw(uint64_t data_step) {
  // The loop trains the batches in the order drawn, one a Step() call.
  draws_.push_back({calls_at_begin_ + drawn_ / batch_, data_step});
  if (draws_.size() > 4096) draws_.pop_front();
  // How far past the step it trains the loop has drawn: a change's data take effect past it.
  const uint64_t step = dp_.step();
  if (next_step_ > step + 1) dp_.NoteDataLookAhead(next_step_ - step - 1);
}

void JobSampler::WarnIfLate(const std::vector<MembershipChange>& changes) {
  if (changes_seen_ == 0 && draws_.empty()) changes_seen_ = changes.size();  // known at start
  for (; changes_seen_ < changes.size(); ++changes_seen_) {
    const MembershipChange& change = changes[changes_seen_];
    if (warned_late_ || change.layout_step() >= next_step_) continue;
    warned_late_ = true;
    spdlog::warn(
        "the loop had drawn the data of step {} already when this worker heard of the change "
        "at step {} (its data from step {}): some of this epoch's samples may be trained "
        "twice or not at all (the job learns how far the loops draw ahead from their first "
        "batches; a DataLoader draws num_workers * prefetch_factor batches ahead, and at "
        "most {} steps are covered)",
        next_step_ - 1, change.step, change.layout_step(), kMaxDataLookAhead);
  }
}

void JobSampler::WarnDrawnAhead() {
  if (bsp_ || warned_ahead_ || !drawn_ahead_) return;  // bsp: the job follows what loops drew
  warned_ahead_ = true;
  spdlog::warn(
      "the data loader draws batches ahead (a DataLoader with num_workers > 0): under {} this "
      "rollback gives the batches it had drawn already a second time; num_workers=0 keeps "
      "each epoch exact there",
      dp_.consistency());
}

uint64_t JobSampler::ForStep() const {
  // Batches drawn this pass before the next one, and those trained.
  const uint64_t batches = batch_ == 0 ? 0 : drawn_ / batch_;
  const uint64_t trained = dp_.steps_called() - calls_at_begin_;
  return dp_.step() + (batches > trained ? batches - trained : 0);
}

bool JobSampler::DrawDealt() {
  const uint64_t per_epoch = (size_ + batch_ - 1) / batch_;
  // A rollback since a batch was held undid the step it was dealt at: NextBatch() deals it
  // again in its place among the undone steps' batches (taking it here too trained it twice).
  if (held_ && held_rollbacks_ != dp_.rollbacks()) held_.reset();
  // (Epochs before this one may have been trained in fixed shares, the batch
  // size not known yet: the job deals from this epoch's first batch.)
  const uint64_t first = epoch_ > UINT64_MAX / per_epoch ? UINT64_MAX : epoch_ * per_epoch;
  const uint64_t for_step = ForStep();
  if (for_step > dp_.step() + 1) drawn_ahead_ = true;
  const uint64_t k = held_ ? *held_ : dp_.DealtBatchFrom(first, for_step);
  held_.reset();
  if (k / per_epoch > epoch_) {
    held_ = k;  // the next epoch's: its pass takes it
    held_rollbacks_ = dp_.rollbacks();
    return false;
  }
  const uint64_t position = (k % per_epoch) * batch_;
  pending_ = Order(k / per_epoch).Slice(position, 0, std::min<uint64_t>(batch_, size_ - position));
  pending_epochs_.assign(pending_.size(), k / per_epoch);
  pending_at_ = 0;
  return true;
}

bool JobSampler::EndPass() {
  if (mode_ == Mode::kDone) return true;
  const Mode was = mode_;
  mode_ = Mode::kDone;
  if (bsp_ || !follows_) return true;  // every worker ended the epoch at the same step
  spdlog::info("epoch {}'s data is all drawn: waiting until every worker's steps of it are in",
               epoch_);
  // ssp/async: the epoch ends once every worker's gradients of it are in, so
  // what the loop evaluates or saves next holds them all. A rollback meanwhile
  // gives this worker back steps: their indices come again first.
  while (true) {
    try {
      dp_.Barrier();
      if (!dp_.sum_mode()) dp_.PullParameters();
      return true;
    } catch (const RolledBack& back) {
      if (dp_.raises_rolled_back()) throw;
      NoteRollback();
      // Dealt batches: NextBatch() deals the undone steps' again.
      if (drawn_log_.redoing() || was == Mode::kDealt) {
        spdlog::warn("{}; the sampler gives the batches from there again", back.what());
        mode_ = was;
        return false;
      }
    }
  }
}

}  // namespace een
