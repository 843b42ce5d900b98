"""A Python worker's failures as een-launch and the job must see them: an
exception is a lost worker (never a finished one), and a rolled-back step's
gradients do not leak into the redone step."""
import os
import signal
import tempfile
import unittest

import numpy

import job


class Failures(unittest.TestCase):
    def test_an_exception_in_a_worker_is_a_lost_worker_not_a_finished_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, output = job.run(job.launch_args(1, 3, "--min-workers", "2") + [
                *job.TRAIN, "--steps", "40", "--workers", "3", "--fail-rank", "1",
                "--fail-step", "3", "--out", os.path.join(tmp, "p.bin")], timeout=120)
            self.assertEqual(code, 0, output)  # the others go on, as --min-workers allows
            self.assertIn("ValueError: a bug in worker 1 at step 3", output)
            self.assertNotIn("worker 1 finished", output)
            self.assertIn("job finished: 2 of 3 workers succeeded", output)
            # Without --min-workers the job fails, naming the worker.
            code, output = job.run(job.launch_args(1, 3) + [
                *job.TRAIN, "--steps", "40", "--workers", "3", "--fail-rank", "1",
                "--out", os.path.join(tmp, "q.bin")], timeout=120)
            self.assertNotEqual(code, 0, output)
            self.assertRegex(output.strip().splitlines()[-1], r"job failed: .*worker 1")

    def test_a_rolled_back_step_leaves_no_gradient_behind(self):
        with tempfile.TemporaryDirectory() as tmp:
            def args(name):
                return job.launch_args(2, 2, "--snapshot-every", "100", "--snapshot-dir",
                                       os.path.join(tmp, name)) + [
                    *job.TRAIN, "--optimizer", "adam", "--lr", "0.001", "--steps", "2500",
                    "--workers", "2", "--out", os.path.join(tmp, name + ".bin")]
            code, output = job.run(args("whole"), timeout=180)
            self.assertEqual(code, 0, output)
            run = job.Job(args("killed"))
            self.assertIsNotNone(run.wait_for(r"snapshot of step [3-9][0-9][0-9] complete on all",
                                              120), run.output)
            pid = run.newest_pid("ps 1")
            self.assertIsNotNone(pid, run.output)
            os.kill(pid, signal.SIGKILL)
            self.assertEqual(run.wait(180), 0, run.output[-4000:])
            self.assertIn("rolled back to step", run.output)
            whole = job.load(os.path.join(tmp, "whole.bin"))
            killed = job.load(os.path.join(tmp, "killed.bin"))
            self.assertTrue(numpy.array_equal(whole.view(numpy.uint32), killed.view(numpy.uint32)),
                            "the redone run differs from the undisturbed one")


if __name__ == "__main__":
    unittest.main()
