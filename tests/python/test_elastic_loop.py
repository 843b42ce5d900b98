"""The plain loop survives what EEN survives: coverage_train.py (a DataLoader
over een.DistributedSampler, no elastic code) records every sample id it
trains; each epoch of the data must be trained exactly once, through a
rollback to a snapshot, and with the survivors taking over a lost worker's
share of the data (all but its unfinished steps)."""
import collections
import glob
import os
import signal
import sys
import tempfile
import unittest

import job

HERE = os.path.dirname(os.path.abspath(__file__))
COVERAGE = [sys.executable, os.path.join(HERE, "coverage_train.py")]
SAMPLES, BATCH, EPOCHS = 960, 8, 3


def trained(folder):
    """{data epoch: [sample ids, with repeats]} over every worker's record."""
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
            steps.setdefault(step, []).append((epoch, ids))
    epochs = collections.defaultdict(list)
    for step in sorted(steps):
        for epoch, ids in steps[step]:
            epochs[epoch].extend(ids)
    return epochs


class ElasticLoop(unittest.TestCase):
    def args(self, out, *options, give_batch=False):
        extra = ["--give-batch-size"] if give_batch else []
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
            code, output = job.run(self.args(tmp, 1, 3), timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            self.assert_exactly_once(trained(tmp), output)

    def test_a_rollback_redoes_the_batches_and_each_epoch_is_trained_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 2, 3, "--snapshot-every", "10", "--snapshot-dir",
                                    os.path.join(tmp, "snapshots")))
            self.assertIsNotNone(run.wait_for(r"snapshot of step [3-9]0 complete", 120),
                                 run.output[-3000:])
            pid = run.newest_pid("ps 1")
            self.assertIsNotNone(pid, run.output)
            os.kill(pid, signal.SIGKILL)
            self.assertEqual(run.wait(180), 0, run.output[-4000:])
            self.assertIn("the sampler gives the batches from there again", run.output)
            self.assert_exactly_once(trained(tmp), run.output)

    def test_survivors_take_over_a_lost_workers_share(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = job.Job(self.args(tmp, 1, 3, "--min-workers", "2"))
            self.assertIsNotNone(run.wait_for(r"epoch 1 step", 120), run.output[-3000:])
            pid = run.newest_pid("worker 2")
            self.assertIsNotNone(pid, run.output)
            os.kill(pid, signal.SIGKILL)
            self.assertEqual(run.wait(180), 0, run.output[-4000:])
            epochs = trained(tmp)
            self.assertEqual(sorted(epochs), list(range(EPOCHS)), run.output[-3000:])
            for epoch, ids in epochs.items():
                counts = collections.Counter(ids)
                missing = set(range(SAMPLES)) - set(counts)
                repeats = sum(c - 1 for c in counts.values())
                # The lost worker's unfinished steps (up to two of its
                # batches) are not dealt again; the epoch's last step pads a
                # whole global batch by wrapping around.
                self.assertLessEqual(len(missing), 2 * BATCH, "epoch %d" % epoch)
                self.assertLess(repeats, 2 * BATCH, "epoch %d" % epoch)
            # Before following the job, the static shards lost a third of
            # every epoch after the loss.
            self.assertEqual(set(epochs[EPOCHS - 1]), set(range(SAMPLES)))


if __name__ == "__main__":
    unittest.main()
