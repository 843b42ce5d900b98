"""A parameter server SIGKILLed in the middle of a Python job with replicas
2: its backups take over and the final parameters are bitwise those of an
undisturbed run."""
import os
import random
import signal
import tempfile
import time
import unittest

import numpy

import job

STEPS = 4000


class Failover(unittest.TestCase):
    def args(self, out):
        return job.launch_args(3, 2, "--replicas", "2", "--progress-interval", "200ms") + [
            *job.TRAIN, "--optimizer", "adam", "--lr", "0.001", "--steps", str(STEPS),
            "--out", out]

    def test_killed_ps_fails_over_and_the_run_is_bitwise_the_same(self):
        with tempfile.TemporaryDirectory() as tmp:
            whole_out, killed_out = os.path.join(tmp, "whole.bin"), os.path.join(tmp, "killed.bin")
            code, output = job.run(self.args(whole_out), timeout=180)
            self.assertEqual(code, 0, output)

            run = job.Job(self.args(killed_out))
            self.assertIsNotNone(run.wait_for(r"progress: step", 60), run.output)
            time.sleep(random.Random(3).uniform(0.1, 1.1))  # a seeded moment in training
            pid = run.newest_pid("ps 1")
            self.assertIsNotNone(pid, run.output)
            mark = len(run.output)
            os.kill(pid, signal.SIGKILL)
            self.assertIsNotNone(
                run.wait_for("sending this step's gradients to their new primaries", 30, mark),
                run.output[mark:])
            self.assertEqual(run.wait(180), 0, run.output[-4000:])
            self.assertRegex(run.output, r"job finished: 2 of 2 workers succeeded")
            whole, killed = job.load(whole_out), job.load(killed_out)
            self.assertEqual(whole.size, killed.size)
            self.assertGreater(whole.size, 1000)
            self.assertTrue(numpy.array_equal(whole.view(numpy.uint32), killed.view(numpy.uint32)),
                            "the parameters differ from the undisturbed run's")


if __name__ == "__main__":
    unittest.main()
