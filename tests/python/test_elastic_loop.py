"""The plain loop survives what EEN survives: coverage_train.py (a DataLoader
over een.DistributedSampler, no elastic code, the batch size learned from
the loop) records every sample id it trains; each epoch of the data must be
trained exactly once through a rollback to a snapshot and a --resume, and,
after a lost worker, the survivors (and its replacement, which starts at
the job's epoch and position) take over its share of the data (all but its
unfinished steps')."""
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


def trained(folder, before=None, after=None):
    """{data epoch: [sample ids, with repeats]} over every worker's record,
    of the steps in [after, before) when given."""
    steps = {}
    for path in glob.glob(os.path.join(folder, "*.log")):
        mine = {}
        with open(path) as f:
            for line in f:
                words = line.split()
                if words[0] == "undo":
                    mine = {s: v for s, v in mine.items() if s < int(words[1])}
                else:
                    mine[int(words[1])] = (int(words[0]), [int(w) for w in words[2:]])
        for step, (epoch, ids) in mine.items():
            if (before is None or step < before) and (after is None or step >= after):
                steps.setdefault(step, []).append((epoch, ids))
    epochs = collections.defaultdict(list)
    for step in sorted(steps):
        for epoch, ids in steps[step]:
            epochs[epoch].extend(ids)
    return epochs


class ElasticLoop(unittest.TestCase):
    def args(self, out, *options, give_batch=False, short_ms=0):
        extra = ["--give-batch-size"] if give_batch else []
        extra += ["--short-ms", str(short_ms)]
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
            run = job.Job(self.args(tmp, 2, 3, "--snapshot-every", "10", "--snapshot-dir",
                                    os.path.join(tmp, "snapshots")))
            job.kill_when(self, run, r"snapshot of step [3-9]0 complete", "ps 1")
            self.assertIn("the sampler gives the batches from there again", run.output)
            self.assert_exactly_once(trained(tmp), run.output)

    def assert_covered_but_the_lost_steps(self, epochs, output):
        """Each epoch: every sample but a lost worker's unfinished steps' (up
        to two of its batches, not dealt again; and a third the records may
        miss: a batch it trained just before the kill, before it could write
        its record), none repeated but the last step's padding (it wraps
        around to a whole global batch)."""
        self.assertEqual(sorted(epochs), list(range(EPOCHS)), output[-3000:])
        for epoch, ids in epochs.items():
            counts = collections.Counter(ids)
            missing = set(range(SAMPLES)) - set(counts)
            repeats = sum(c - 1 for c in counts.values())
            self.assertLessEqual(len(missing), 3 * BATCH, "epoch %d\n%s" % (epoch, output[-3000:]))
            self.assertLess(repeats, 3 * BATCH, "epoch %d\n%s" % (epoch, output[-3000:]))

    def test_a_replacement_starts_at_the_jobs_epoch_and_position(self):
        with tempfile.TemporaryDirectory() as tmp:
            # Slow steps while it is missing: time for the replacement to join.
            run = job.Job(self.args(tmp, 1, 3, "--max-restarts", "1", short_ms=500))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            self.assertEqual(len(glob.glob(os.path.join(tmp, "rank2-*.log"))), 2, run.output)
            self.assert_covered_but_the_lost_steps(trained(tmp), run.output)
            self.assertEqual(set(trained(tmp)[EPOCHS - 1]), set(range(SAMPLES)))

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

    def test_survivors_take_over_a_lost_workers_share(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 1, 3, "--min-workers", "2"))
            job.kill_when(self, run, r"epoch 1 step", "worker 2")
            epochs = trained(tmp)
            self.assert_covered_but_the_lost_steps(epochs, run.output)
            # Before following the job, the static shards lost a third of
            # every epoch after the loss.
            self.assertEqual(set(epochs[EPOCHS - 1]), set(range(SAMPLES)))


if __name__ == "__main__":
    unittest.main()
