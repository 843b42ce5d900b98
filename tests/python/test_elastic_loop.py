"""The plain loop survives what EEN survives: coverage_train.py (a DataLoader
over een.DistributedSampler, no elastic code, the batch size the
DataLoader's, or learned from the loop) records every sample id it trains; each epoch of the data must be
trained exactly once through a rollback to a snapshot and a --resume, and,
after a lost worker, the survivors (and its replacement, which starts at
the job's epoch and position) take over its share of the data, its
unfinished steps' batches first."""
import collections
import glob
import os
import re
import signal
import sys
import tempfile
import unittest

import job

HERE = os.path.dirname(os.path.abspath(__file__))
COVERAGE = [sys.executable, os.path.join(HERE, "coverage_train.py")]
SAMPLES, BATCH, EPOCHS = 960, 8, 3


def unfinished_steps(output):
    """{rank: first step its gradients were missing from}, for each worker
    the job went on without, as the coordinator's log says it."""
    first = {}
    for rank, step in re.findall(r"worker (\d+)'s batches of steps (\d+)-\d+ were not trained",
                                 output):
        first[int(rank)] = min(first.get(int(rank), 1 << 62), int(step))
    return first


def trained(folder, before=None, after=None, output=""):
    """{data epoch: [sample ids, with repeats]} over every worker's record,
    of the steps in [after, before) when given. A step a process tried but
    did not see done (it was killed) counts as trained unless the job's log
    says that worker's batches of that step were not trained."""
    unfinished = unfinished_steps(output)
    steps = {}
    for path in glob.glob(os.path.join(folder, "*.log")):
        rank = int(re.match(r"rank(\d+)-", os.path.basename(path)).group(1))
        tried, done = {}, set()
        with open(path) as f:
            for line in f:
                words = line.split()
                if words[0] == "undo":
                    tried = {s: v for s, v in tried.items() if s < int(words[1])}
                    done = {s for s in done if s < int(words[1])}
                elif words[0] == "done":
                    done.add(int(words[1]))
                else:
                    tried[int(words[2])] = (int(words[1]), [int(w) for w in words[3:]])
        for step, (epoch, ids) in tried.items():
            if step not in done and step >= unfinished.get(rank, 1 << 62):
                continue  # killed before its gradients all arrived
            if (before is None or step < before) and (after is None or step >= after):
                steps.setdefault(step, []).append((epoch, ids))
    epochs = collections.defaultdict(list)
    for step in sorted(steps):
        for epoch, ids in steps[step]:
            epochs[epoch].extend(ids)
    return epochs


class ElasticLoop(unittest.TestCase):
    def args(self, out, *options, give_batch=False, short_ms=0, loader_workers=0,
             own_batching=False):
        extra = ["--give-batch-size"] if give_batch else []
        extra += ["--own-batching"] if own_batching else []
        extra += ["--short-ms", str(short_ms), "--loader-workers", str(loader_workers)]
        return job.launch_args(*options) + [*COVERAGE, "--samples", str(SAMPLES), "--batch",
                                            str(BATCH), "--epochs", str(EPOCHS), "--step-ms",
                                            "20", "--out", out, *extra]

    def assert_exactly_once(self, epochs, output):
        self.assertEqual(sorted(epochs), list(range(EPOCHS)), output[-3000:])
        for epoch, ids in epochs.items():
            counts = collections.Counter(ids)
            missing = set(range(SAMPLES)) - set(counts)
            twice = {i: c for i, c in counts.items() if c > 1}
            self.assertEqual((missing, twice), (set(), {}), "epoch %d\n%s" % (epoch,
                                                                              output[-3000:]))

    def test_an_undisturbed_job_trains_each_epoch_exactly_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, output = job.run(self.args(tmp, 1, 3, give_batch=True) + ["--evaluate"],
                                   timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            self.assert_exactly_once(trained(tmp), output)
            # An evaluation loader's sampler keeps its fixed share (300 / 3).
            for worker in range(3):
                for epoch in range(EPOCHS):
                    self.assertIn("worker %d evaluated 100 samples after epoch %d" % (worker, epoch),
                                  output)

    def test_a_rollback_redoes_the_batches_and_each_epoch_is_trained_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            # Batches of the program's own: the sampler learns the batch size.
            run = job.Job(self.args(tmp, 2, 3, "--snapshot-every", "10", "--snapshot-dir",
                                    os.path.join(tmp, "snapshots"), own_batching=True))
            job.kill_when(self, run, r"snapshot of step [3-9]0 complete", "ps 1")
            self.assertIn("the sampler gives the batches from there again", run.output)
            self.assert_exactly_once(trained(tmp), run.output)

    def assert_once_but_the_padding(self, epochs, output, live_after):
        """Each epoch: every sample, and none twice but the padding of the
        step that ends an epoch (it wraps around to a whole global batch of
        the `live_after` workers): a lost worker's unfinished steps are
        dealt again."""
        self.assertEqual(sorted(epochs), list(range(EPOCHS)), output[-3000:])
        for epoch, ids in epochs.items():
            counts = collections.Counter(ids)
            missing = set(range(SAMPLES)) - set(counts)
            repeats = sum(c - 1 for c in counts.values())
            self.assertEqual(missing, set(), "epoch %d\n%s" % (epoch, output[-3000:]))
            self.assertLess(repeats, live_after * BATCH, "epoch %d\n%s" % (epoch, output[-3000:]))

    def test_a_replacement_starts_at_the_jobs_epoch_and_position(self):
        with tempfile.TemporaryDirectory() as tmp:
            # Slow steps while it is missing: time for the replacement to join.
            run = job.Job(self.args(tmp, 1, 3, "--max-restarts", "1", short_ms=500))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            self.assertEqual(len(glob.glob(os.path.join(tmp, "rank2-*.log"))), 2, run.output)
            self.assert_once_but_the_padding(trained(tmp, output=run.output), run.output, 3)

    def test_resume_goes_on_mid_epoch_at_the_right_sample(self):
        with tempfile.TemporaryDirectory() as tmp:
            first, second = os.path.join(tmp, "first"), os.path.join(tmp, "second")
            os.mkdir(first)
            os.mkdir(second)
            snapshots = ["--snapshot-every", "10", "--snapshot-dir", os.path.join(tmp, "snaps")]
            run = job.Job(self.args(first, 1, 3, *snapshots))
            self.assertIsNotNone(run.wait_for(r"snapshot of step (5|6|7)0 complete", 120),
                                 run.output[-3000:])
            run.proc.send_signal(signal.SIGKILL)
            run.wait(30)
            code, output = job.run(self.args(second, 1, 3, "--resume", snapshots[3]),
                                   timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            resumed = re.search(r"resuming from the snapshot of step ([0-9]+)", output)
            self.assertIsNotNone(resumed, output[-3000:])
            step = int(resumed.group(1))
            epochs = trained(first, before=step)
            for epoch, ids in trained(second, after=step).items():
                epochs.setdefault(epoch, []).extend(ids)
            self.assert_exactly_once(epochs, output)

    def test_under_async_the_job_deals_the_batches_and_each_epoch_is_trained_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, output = job.run(self.args(tmp, 1, 3, "--consistency", "async", give_batch=True)
                                   + ["--slow-rank", "2"], timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            # The last batch of each epoch is short: no padding, no repeat.
            self.assert_exactly_once(trained(tmp), output)
            batches = {}
            for path in glob.glob(os.path.join(tmp, "rank*.log")):
                with open(path) as f:
                    batches[os.path.basename(path).split("-")[0]] = len(f.readlines())
            self.assertGreater(batches["rank0"], batches["rank2"], "a fast worker takes more")

    def test_under_ssp_the_job_deals_the_batches_and_each_epoch_is_trained_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, output = job.run(self.args(tmp, 1, 3, "--consistency", "ssp:2")
                                   + ["--slow-rank", "2"], timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            self.assert_exactly_once(trained(tmp), output)

    def test_under_async_a_rollback_gives_each_worker_its_steps_batches_again(self):
        """A PS lost under async rolls the job back to a snapshot: each worker
        goes on from its own steps there, and the sampler gives the batches it
        drew for the undone steps again (dp.step() raises nothing). Every
        sample is trained once per epoch over the run (a rollback that reaches
        back into the last epoch gives those batches in the next pass)."""
        # The job deals the batches (a slow worker takes fewer: the workers' own steps
        # differ). The PS is killed while a worker waits at an epoch's end, holding the next
        # epoch's first dealt batch: the rollback deals it again (it was once trained twice).
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 2, 3, "--consistency", "async", "--snapshot-every", "2",
                                    "--snapshot-dir", os.path.join(tmp, "snapshots"),
                                    give_batch=True) + ["--slow-rank", "2", "--slow-factor", "8"])
            snapshot = run.wait_for(r"snapshot of step [0-9]+ complete", 120)
            self.assertIsNotNone(snapshot, run.output[-3000:])
            self.assertIsNotNone(run.wait_for(r"epoch [01]'s data is all drawn", 120,
                                              snapshot.end()), run.output[-3000:])
            os.kill(run.newest_pid("ps 1"), signal.SIGKILL)
            self.assert_each_sample_once_per_epoch_over_the_run(
                tmp, run, "NextBatch\\(\\) deals the [0-9]+ batch")
        # No batch size to see (batches of the program's own): each worker takes its
        # fixed share of the first epoch, the job deals the later ones; killed mid-epoch
        # (the rollback may reach back into the first epoch: the sampler gives the
        # indices it drew again).
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 2, 3, "--consistency", "async", "--snapshot-every", "10",
                                    "--snapshot-dir", os.path.join(tmp, "snapshots"),
                                    own_batching=True))
            self.assertIsNotNone(run.wait_for(r"snapshot of step [3-9]0 complete", 120),
                                 run.output[-3000:])
            os.kill(run.newest_pid("ps 1"), signal.SIGKILL)
            self.assert_each_sample_once_per_epoch_over_the_run(
                tmp, run, "the sampler gives the [0-9]+ samples it drew|"
                "NextBatch\\(\\) deals the [0-9]+ batch")

    def batches_per_epoch(self, tmp):
        batches = collections.Counter()
        for path in glob.glob(os.path.join(tmp, "rank*.log")):
            rank = os.path.basename(path).split("-")[0]
            with open(path) as f:
                for line in f:
                    if line.startswith("try"):
                        batches[rank, int(line.split()[1])] += 1
        return batches

    def test_under_async_a_plain_dataloader_is_dealt_from_the_first_epoch(self):
        """The sampler finds the batch size of the DataLoader over it, so the
        job deals the batches from the first epoch: a fast worker takes more."""
        with tempfile.TemporaryDirectory() as tmp:
            code, output = job.run(self.args(tmp, 1, 3, "--consistency", "async")
                                   + ["--slow-rank", "2"], timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            self.assert_exactly_once(trained(tmp), output)
            batches = self.batches_per_epoch(tmp)
            for epoch in (0, 1, 2):
                self.assertGreater(batches["rank0", epoch], batches["rank2", epoch], output[-3000:])

    def test_under_async_without_the_batch_size_the_job_deals_from_the_second_epoch(self):
        """Batches of the program's own hide the batch size: the sampler
        learns it from the loop in the first epoch (each worker takes its
        fixed share there); from the second the job deals the batches, so a
        fast worker takes more."""
        with tempfile.TemporaryDirectory() as tmp:
            code, output = job.run(self.args(tmp, 1, 3, "--consistency", "async",
                                             own_batching=True)
                                   + ["--slow-rank", "2"], timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            self.assert_exactly_once(trained(tmp), output)
            batches = self.batches_per_epoch(tmp)
            per_share = SAMPLES // 3 // BATCH
            self.assertEqual((batches["rank0", 0], batches["rank2", 0]), (per_share, per_share))
            for epoch in (1, 2):
                self.assertGreater(batches["rank0", epoch], batches["rank2", epoch], output[-3000:])

    def assert_each_sample_once_per_epoch_over_the_run(self, tmp, run, redone):
        self.assertEqual(run.wait(180), 0, run.output[-4000:])
        self.assertIn("rolling back to the snapshot", run.output)
        self.assertRegex(run.output, redone)
        counts = collections.Counter(i for ids in trained(tmp).values() for i in ids)
        self.assertEqual(dict(counts), {i: EPOCHS for i in range(SAMPLES)}, run.output[-3000:])

    def test_survivors_take_over_a_lost_workers_share(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 1, 3, "--min-workers", "2"))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            # Before following the job, the static shards lost a third of
            # every epoch after the loss; before the unfinished steps were
            # dealt again, up to two of the lost worker's batches.
            self.assert_once_but_the_padding(trained(tmp, output=run.output), run.output, 2)


    # A DataLoader with num_workers=2 draws 4 batches ahead: the job learns
    # it, and a change's data take effect past what every loader drew.
    def assert_the_job_knew_the_loaders_drew_ahead(self, output):
        self.assertRegex(output, r"loop draws its data up to [1-9]\d* step\(s\) ahead")
        self.assertNotIn("may be trained twice or not at all", output)

    def test_with_a_loader_that_draws_ahead_survivors_take_over_a_lost_workers_share(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 1, 3, "--min-workers", "2", loader_workers=2))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            self.assert_the_job_knew_the_loaders_drew_ahead(run.output)
            self.assertRegex(run.output, r"the others' loaders had drawn theirs ahead")
            self.assert_once_but_the_padding(trained(tmp, output=run.output), run.output, 2)

    def test_with_a_loader_that_draws_ahead_a_rollback_redoes_exactly_what_it_undid(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 2, 3, "--snapshot-every", "10", "--snapshot-dir",
                                    os.path.join(tmp, "snapshots"), loader_workers=2))
            job.kill_when(self, run, r"snapshot of step [3-9]0 complete", "ps 1")
            self.assertIn("the sampler gives the batches from there again", run.output)
            self.assert_the_job_knew_the_loaders_drew_ahead(run.output)
            self.assert_exactly_once(trained(tmp), run.output)

    def test_with_a_loader_that_draws_ahead_a_replacement_joins_past_what_it_drew(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 1, 3, "--max-restarts", "1", short_ms=500,
                                    loader_workers=2))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            self.assertEqual(len(glob.glob(os.path.join(tmp, "rank2-*.log"))), 2, run.output)
            self.assert_the_job_knew_the_loaders_drew_ahead(run.output)
            self.assert_once_but_the_padding(trained(tmp, output=run.output), run.output, 3)

    def test_under_async_a_lost_workers_unfinished_batches_are_dealt_again(self):
        """Under async the job deals the batches; a worker lost mid-epoch had
        been dealt some it never finished: NextBatch() deals those again to
        the live workers, so every sample is still trained once per epoch
        over the run (the lost worker's steps not applied everywhere do not
        count, as the job's log says)."""
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 1, 3, "--consistency", "async", "--min-workers", "2",
                                    give_batch=True))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            self.assertRegex(run.output, r"worker 2's batches of steps \d+-\d+ were not trained")
            counts = collections.Counter(
                i for ids in trained(tmp, output=run.output).values() for i in ids)
            self.assertEqual(dict(counts), {i: EPOCHS for i in range(SAMPLES)},
                             run.output[-3000:])

if __name__ == "__main__":
    unittest.main()
