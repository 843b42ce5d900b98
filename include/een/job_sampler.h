// JobSampler: this worker's share of a dataset, following the job by itself,
// so a plain loop (`for each epoch: set_epoch(e); for each batch: ...;
// Step()`) trains what the job still owes, whatever happens to the job.
// Python's een.DistributedSampler uses it inside an EEN job.
//
// Each step's batch is drawn when the loop asks for it, for the step the job
// is at, with the layout DistributedSampler::Batch() and PositionAfter()
// define (bsp): the live workers of that step (membership_changes()) each
// take `batch` positions of the epoch's permutation, interleaved. So:
//  - after a lost or added worker (`--min-workers`, `--max-restarts`), the
//    workers live at a step share that step's global batch and the rest of
//    the epoch;
//  - after a rollback to a snapshot, the redone steps' batches come again
//    (and DataParallel::Step() no longer throws een::RolledBack while a
//    JobSampler follows it, unless DataParallelOptions::raise_rolled_back);
//  - a worker that starts mid-job (a replacement, an added worker,
//    `--resume`) starts at the job's epoch and position: the passes of
//    earlier epochs yield nothing, the current one its rest.
// The batch size: given (Python's een.DistributedSampler finds the
// DataLoader's), or learned from the loop (the indices drawn between two
// steps; before then the layout is DistributedSampler's, which is the same). The job keeps it (and
// --resume finds it next to the snapshots), so a worker that starts mid-job finds it there; given
// otherwise.
// A loop that draws ahead (a DataLoader with num_workers > 0 draws
// num_workers * prefetch_factor batches ahead) tells the job how far
// (bsp): a change's data then take effect past what every loop had drawn
// (MembershipChange::data_step, a lost worker's batches up to there owed;
// a joiner or new shares from there), and after a rollback the batches a
// rollback undid come again, those drawn and not trained yet once. The
// first batches of a job (before the loops' look-ahead reached the job) or
// one farther ahead than kMaxDataLookAhead are not covered: a warning says
// so. Known limit: the epoch's last step wraps
// around to a whole global batch (padding, as torch's sampler pads).
// Under ssp/async each worker takes its own steps, and a rollback gives it
// back its own steps from the snapshot's: the batches dealt for those steps
// come again (NextBatch() deals them first), or without the batch size the
// indices the sampler drew for them (before any new ones, also of an
// earlier epoch's pass when the rollback reaches back there); Step() throws
// nothing. (A batch is claimed for the step it will be trained at, so a lost
// worker's batches drawn ahead are dealt again; a rollback under ssp/async
// with a loop that draws ahead is warned of: its drawn batches come twice.)
// Under ssp/async, with the batch size given (or the job's), the job deals
// batches (DataParallel::NextBatch(): a fast worker takes more, every batch
// of an epoch once, each epoch's last batch short); without it each worker
// takes its fixed share. There each pass ends with Barrier() and
// PullParameters(), so what the loop evaluates or saves after an epoch holds
// every worker's gradients of it (Barrier() may throw een::RolledBack).
// One sampler trains: the first one a step is taken in while it draws; the
// others (an evaluation's) then keep torch's fixed shares.
// Thread safety: one thread (the loop's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "een/membership.h"
#include "een/redo_log.h"
#include "een/sampler.h"

namespace een {

class DataParallel;

class JobSampler {
 public:
  // `dp` must outlive the sampler. `batch`: samples per worker and step;
  // 0: learned from the loop.
  JobSampler(DataParallel& dp, size_t dataset_size, bool shuffle = true, uint64_t seed = 0,
             size_t batch = 0);
  ~JobSampler();
  JobSampler(const JobSampler&) = delete;
  JobSampler& operator=(const JobSampler&) = delete;

  // Starts a pass over epoch `epoch` (as torch's set_epoch() followed by
  // iterating the sampler).
  void Begin(uint64_t epoch);
  // The next index of this pass; nullopt once the job is past this epoch.
  std::optional<size_t> Next();
  // This worker's next batch of this pass (the batch size must be known);
  // empty once the job is past this epoch.
  std::vector<size_t> NextBatch();
  size_t batch() const { return batch_; }  // 0 until known
  // The batch size, found after construction (Python: the DataLoader's), as
  // if given; before a pass begins. Ignored once known.
  void GiveBatch(size_t batch);
  // The epoch of the data the index given last (Next()) is of: the pass's, but for a batch
  // of the pass before that a rollback at its end undid, or a lost worker's left untrained at
  // its end (bsp), or one dealt (ssp/async).
  uint64_t data_epoch() const { return data_epoch_; }

 private:
  enum class Mode { kFixed, kFollowing, kDealt, kDone };
  // Fills pending_ with the next data step's batch (one a rollback undid first, else the one
  // after the furthest drawn); false: the epoch is over.
  bool DrawBatch();
  // bsp: the data steps a rollback undid (the batches the Step() calls it undid had trained)
  // come again (redo_), those drawn and not trained yet not.
  void TakeBackUndone();
  // bsp: a batch drawn for `data_step`: recorded, and how far ahead the loop draws told to
  // the job.
  void NoteDraw(uint64_t data_step);
  // A change heard after the loop had drawn past its data step (warned once).
  void WarnIfLate(const std::vector<MembershipChange>& changes);
  uint64_t ForStep() const;  // the step the batch drawn next is trained at
  void WarnDrawnAhead();     // ssp/async, at a rollback: once, what it does to batches drawn ahead
  bool DrawDealt();          // ssp/async: fills pending_ with the job's next dealt batch
  // ssp/async: waits for the others' gradients of the epoch; false: a rollback meanwhile left
  // indices to give again (the pass goes on).
  bool EndPass();
  void Learn(uint64_t steps_this_pass);  // the batch size, from what the loop drew
  uint64_t JobBatch() const;             // the job's batch size for samplers (0: not known)
  void TellJob();                        // this one's, for joiners and --resume
  void Claim();                          // a step was taken during this pass: it trains
  void TakeFixedShares(uint64_t epoch);  // this pass: torch's shares of the live workers
  // ssp/async: what this worker drew for each of its steps, to give again after a rollback
  // (dealt batches: DataParallel::NextBatch() gives them again).
  bool PerArrival() const { return !bsp_ && follows_; }
  void NoteRollback();               // a rollback since the last look: replay
  void Logged(size_t index);         // drawn for the step the worker is at
  std::optional<size_t> Replayed();  // the next index to give again, if any
  const DistributedSampler& Order(uint64_t epoch);

  DataParallel& dp_;
  size_t size_;
  bool shuffle_;
  uint64_t seed_;
  size_t batch_;
  uint64_t epoch_ = 0;
  uint64_t data_epoch_ = 0;
  Mode mode_ = Mode::kDone;
  bool bsp_ = true;                          // the job's consistency, as of Begin()
  bool follows_ = true;                      // this pass follows the job (no other sampler trains)
  uint64_t begun_at_ = 0;                    // dp.step() when this pass began
  std::optional<DistributedSampler> order_;  // the permutation of order_epoch_
  uint64_t order_epoch_ = 0;
  // Fixed layout (the batch size not yet known): DistributedSampler's.
  std::vector<size_t> fixed_;
  size_t fixed_at_ = 0;
  // Learning the batch size: indices drawn when step 1 and step 2 were seen.
  uint64_t drawn_ = 0;  // this pass
  std::optional<uint64_t> drawn_at_step1_;
  // Following: the batch drawn, and the data step after the furthest drawn.
  std::vector<size_t> pending_;
  std::vector<uint64_t> pending_epochs_;  // the data epoch of each
  size_t pending_at_ = 0;
  uint64_t next_step_ = 0;
  // bsp, following: the data step each batch was drawn for, by the Step() call that trains it
  // (the loop trains them in order); the data steps to draw again first; the calls a rollback
  // undid already; dp.steps_called() when this pass began.
  struct Draw {
    uint64_t call = 0;
    uint64_t data_step = 0;
  };
  std::deque<Draw> draws_;
  std::deque<uint64_t> redo_;
  std::set<uint64_t> undone_calls_;
  uint64_t calls_at_begin_ = 0;
  size_t changes_seen_ = 0;  // membership changes looked at by WarnIfLate()
  bool warned_late_ = false;
  bool drawn_ahead_ = false;  // the loop was seen to draw ahead
  bool warned_ahead_ = false;
  uint64_t seen_rollbacks_ = 0;
  uint64_t pass_rollbacks_ = 0;   // dp.rollbacks() when this pass began
  std::optional<uint64_t> held_;  // ssp/async: a dealt batch of a later epoch
  uint64_t held_rollbacks_ = 0;   // dp.rollbacks() when held_ was dealt
  // ssp/async without the batch size: the index drawn for each of this worker's steps, over this
  // pass and the one before, given again after a rollback.
  RedoLog<size_t> drawn_log_;
  uint64_t log_begins_ = 0;  // the step this pass's first draw was for (older ones are dropped
                             // at the next pass)
  bool warned_ = false;
};

}  // namespace een
