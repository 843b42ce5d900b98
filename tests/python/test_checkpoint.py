"""Checkpoints with optimizer state: dp.state_dict() taken in a job (2 PS,
2 workers), saved with torch.save, loaded by plain PyTorch into torch.optim,
and trained on there ends where the job itself ends."""
import os
import sys
import tempfile
import unittest

import numpy
import torch

import job

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = [sys.executable, os.path.join(HERE, "checkpoint_train.py")]


class Checkpoint(unittest.TestCase):
    def round_trip(self, optimizer, *launch_options):
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = os.path.join(tmp, "checkpoint.pt")
            args = ["--optimizer", optimizer, "--checkpoint", checkpoint]
            een_out, plain_out = os.path.join(tmp, "een.bin"), os.path.join(tmp, "plain.bin")
            code, output = job.run(job.launch_args(2, 2, *launch_options) + TRAIN + args +
                                   ["--out", een_out], timeout=120)
            self.assertEqual(code, 0, output)
            saved = torch.load(checkpoint)
            code, output = job.run(TRAIN + args + ["--plain", "--out", plain_out], timeout=60)
            self.assertEqual(code, 0, output)
            een_final, plain_final = job.load(een_out), job.load(plain_out)
            # The state matters: without it plain torch ends elsewhere.
            code, output = job.run(TRAIN + args + ["--plain", "--fresh-optimizer", "--out",
                                                   plain_out], timeout=60)
            self.assertEqual(code, 0, output)
            self.assertGreater(float(numpy.abs(job.load(plain_out) - een_final).max()), 1e-4)
        self.assertEqual(een_final.size, plain_final.size)
        # Both sum the same two gradients in the same order; what differs is
        # torch.optim's rounding of scalars against the PS's (an ulp or so).
        worst = float(numpy.abs(een_final - plain_final).max())
        print("%s: 10 steps on from the checkpoint, max abs difference %.2e (largest value %.2f)"
              % (optimizer, worst, float(numpy.abs(plain_final).max())))
        self.assertLessEqual(worst, 1e-6)
        return saved

    def test_adam_state_trains_on_in_plain_torch(self):
        saved = self.round_trip("adam")
        state = saved["optimizer"]["state"]
        self.assertEqual(sorted(state), list(range(6)))  # every parameter of the MLP
        self.assertEqual(sorted(state[0]), ["exp_avg", "exp_avg_sq", "step"])
        self.assertEqual(float(state[0]["step"]), 10.0)
        self.assertEqual(saved["optimizer"]["param_groups"][0]["lr"], 0.01)
        self.assertGreater(float(state[0]["exp_avg_sq"].abs().sum()), 0.0)

    def test_sgd_momentum_trains_on_in_plain_torch_with_replicas(self):
        saved = self.round_trip("sgd", "--replicas", "2")
        self.assertEqual(sorted(saved["optimizer"]["state"][5]), ["momentum_buffer"])
        self.assertEqual(saved["optimizer"]["param_groups"][0]["momentum"], 0.9)

    def test_adamw_and_adagrad_too(self):
        self.round_trip("adamw")
        saved = self.round_trip("adagrad")
        self.assertEqual(sorted(saved["optimizer"]["state"][0]), ["step", "sum"])


if __name__ == "__main__":
    unittest.main()
