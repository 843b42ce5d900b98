"""A Python program under een-launch (4 workers, 2 PS) trains what one
process trains with the global batch and torch.optim."""
import os
import tempfile
import unittest

import numpy

import job


class Equivalence(unittest.TestCase):
    def train(self, optimizer, reference):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "params.bin")
            args = [*job.TRAIN, "--optimizer", optimizer, "--out", out]
            if reference:
                code, output = job.run(args + ["--reference", "--workers", "4"], timeout=60)
            else:
                code, output = job.run(job.launch_args(2, 4) + args, timeout=120)
            self.assertEqual(code, 0, output)
            return job.load(out)

    def check(self, optimizer):
        distributed = self.train(optimizer, reference=False)
        reference = self.train(optimizer, reference=True)
        self.assertEqual(distributed.size, reference.size)
        self.assertGreater(reference.size, 1000)
        worst = float(numpy.abs(distributed - reference).max())
        print("max abs difference, %s: %.3e" % (optimizer, worst))
        self.assertLessEqual(worst, 1e-5)
        with tempfile.TemporaryDirectory() as tmp:  # and training moved the parameters
            start = os.path.join(tmp, "start.bin")
            code, output = job.run(job.TRAIN + ["--reference", "--steps", "0", "--out", start])
            self.assertEqual(code, 0, output)
            self.assertGreater(float(numpy.abs(job.load(start) - reference).max()), 1e-2)

    def test_sgd_matches_one_process_with_the_global_batch(self):
        self.check("sgd")

    def test_adam_matches_one_process_with_the_global_batch(self):
        self.check("adam")


if __name__ == "__main__":
    unittest.main()
