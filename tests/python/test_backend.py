"""The `een` backend for torch.distributed (een/process_group.h): every
collective against gloo's, and unchanged DDP scripts that train through the
parameter servers as they do with gloo."""
import os
import random
import re
import signal
import sys
import tempfile
import time
import unittest

import torch

from job import BIN, HERE, Job, launch_args, run

COLLECTIVES = [sys.executable, os.path.join(HERE, "een_collectives.py")]
EQUIVALENCE = os.path.join(HERE, "ddp_equivalence.py")
TUTORIAL = os.path.join(HERE, "ddp_tutorial.py")


def worst_relative_difference(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    assert a.keys() == b.keys()
    worst = 0.0
    for k in a:
        scale = a[k].abs().max().item() or 1.0
        worst = max(worst, (a[k] - b[k]).abs().max().item() / scale)
    return worst


class Backend(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory(prefix="een-backend-")

    def tearDown(self):
        self.folder.cleanup()

    def train(self, backend, workers, optimizer):
        out = os.path.join(self.folder.name, "%s-%d-%s.pt" % (backend, workers, optimizer))
        ps = "2" if backend == "een" else "0"
        code, output = run([os.path.join(BIN, "een-launch"), "--ps", ps, "--workers",
                            str(workers), "--", sys.executable, EQUIVALENCE, "--backend",
                            backend, "--optimizer", optimizer, "--out", out], timeout=240)
        self.assertEqual(code, 0, output)
        return out

    def test_every_collective_agrees_with_gloo(self):
        code, out = run(launch_args(2, 3) + COLLECTIVES, timeout=240)
        self.assertEqual(code, 0, out)
        for rank in range(3):
            self.assertRegex(out, r"\[worker %d\] rank %d: collectives agree with gloo \(\d+ "
                                  r"checks\)" % (rank, rank))

    def test_a_group_never_waits_for_another(self):
        # Rank 0 starts a call on group a, then one on group b, and waits for
        # b's first; rank 1 calls b twice before a. Rank 0's second call on b
        # comes only after its first finished, so b must finish while a still
        # waits for rank 1 (gloo's groups have a thread each; so must een's).
        script = ("import een, time, torch, torch.distributed as dist\n"
                  "dist.init_process_group(%r)\n"
                  "r = dist.get_rank()\n"
                  "a, b = dist.new_group([0, 1]), dist.new_group([0, 1])\n"
                  "x, y, z = (torch.full((3,), float(r + k)) for k in (1, 10, 100))\n"
                  "if r == 0:\n"
                  "    wa = dist.all_reduce(x, group=a, async_op=True)\n"
                  "    time.sleep(0.3)\n"
                  "    dist.all_reduce(y, group=b)\n"
                  "    dist.all_reduce(z, group=b)\n"
                  "    wa.wait()\n"
                  "else:\n"
                  "    dist.all_reduce(y, group=b)\n"
                  "    dist.all_reduce(z, group=b)\n"
                  "    dist.all_reduce(x, group=a)\n"
                  "print('rank %%d: %%s %%s %%s' %% (r, x.tolist(), y.tolist(), z.tolist()), "
                  "flush=True)\n")
        for backend, ps in (("gloo", 0), ("een", 1)):
            code, out = run(launch_args(ps, 2) + [sys.executable, "-c", script % backend],
                            timeout=120)
            self.assertEqual(code, 0, backend + "\n" + out)
            for r in (0, 1):
                self.assertIn("rank %d: [3.0, 3.0, 3.0] [21.0, 21.0, 21.0] [201.0, 201.0, 201.0]"
                              % r, out, backend)

    def test_ddp_trains_bitwise_as_with_gloo_on_two_workers(self):
        # Two ranks: a + b in either order, so the very same bits.
        for optimizer in ("sgd", "adam"):
            gloo = self.train("gloo", 2, optimizer)
            een = self.train("een", 2, optimizer)
            self.assertEqual(worst_relative_difference(gloo, een), 0.0, optimizer)

    def test_ddp_trains_as_with_gloo_on_three_workers(self):
        # Three ranks: gloo's ring adds in another order than the PS (rank
        # order): rounding differences only, which Adam's normalisation
        # amplifies more than SGD does.
        for optimizer, bound in (("sgd", 1e-6), ("adam", 1e-5)):
            gloo = self.train("gloo", 3, optimizer)
            een = self.train("een", 3, optimizer)
            self.assertLessEqual(worst_relative_difference(gloo, een), bound, optimizer)

    def test_pytorchs_ddp_tutorial_with_one_word_changed(self):
        sums = {}
        for backend, ps in (("gloo", "0"), ("een", "2")):
            code, out = run([os.path.join(BIN, "een-launch"), "--ps", ps, "--workers", "3", "--",
                             sys.executable, "-c",
                             "import een, runpy, sys; sys.argv = ['t', '--backend', '%s']; "
                             "runpy.run_path('%s', run_name='__main__')" % (backend, TUTORIAL)],
                            timeout=240)
            self.assertEqual(code, 0, out)
            sums[backend] = set(re.findall(r"rank \d of 3: done, checksum (\S+)", out))
            self.assertEqual(len(sums[backend]), 1, out)
        self.assertEqual(sums["gloo"], sums["een"])

    def test_a_lost_rank_ends_the_job_naming_it_never_a_hang(self):
        script = ("import een, runpy, sys; sys.argv = ['t', '--backend', 'een', '--fail-rank', "
                  "'1', '--fail-step', '5', '--steps', '100000']; "
                  "runpy.run_path('%s', run_name='__main__')" % TUTORIAL)
        for options in ([], ["--max-restarts", "1"]):
            code, out = run(launch_args(2, 3, *options) + [sys.executable, "-c", script],
                            timeout=240)
            self.assertEqual(code, 1, out)
            self.assertRegex(out, r"\[een-launch\] job failed: worker 1 .*", options)
        # No newcomer can join torch's groups: every worker started again
        # once, rank 1 failed again, and no restart was left.
        self.assertIn("TORCHELASTIC_RESTART_COUNT=1 (restart 1 of 1", out)
        self.assertRegex(out, r"job failed: worker 1 .*; no restart left \(--max-restarts 1\)")

    def test_with_max_restarts_a_failed_rank_restarts_every_worker_as_torchrun_does(self):
        from test_torchrun import Torchrun
        Torchrun.assert_restart_ends_as_undisturbed(self, "een", 1)

    def test_with_max_restarts_a_silent_rank_restarts_every_worker(self):
        """A rank that hangs (stopped) is lost by its silence; with
        --max-restarts every worker starts again, as when one exits."""
        from test_torchrun import Torchrun
        Torchrun.assert_restart_ends_as_undisturbed(self, "een", 1, how="stop")

    def test_with_min_workers_the_survivors_go_on_with_their_mean(self):
        # Ranks contribute (rank + 1)^2: 1, 4, 9. All three: AVG 14/3. Rank 1
        # leaves; ranks 0 and 2 go on: AVG (1 + 9) / 2 = 5 although the
        # world size stays 3 (the sum is scaled by 3 / 2).
        script = ("import een, sys, torch, torch.distributed as dist\n"
                  "dist.init_process_group('een')\n"
                  "r = dist.get_rank()\n"
                  "def avg():\n"
                  "    t = torch.tensor([float((r + 1) ** 2)])\n"
                  "    dist.all_reduce(t, op=dist.ReduceOp.AVG)\n"
                  "    return t.item()\n"
                  "assert abs(avg() - 14 / 3) < 1e-5\n"
                  "if r == 1:\n"
                  "    sys.exit('rank 1 gives up')\n"
                  "for _ in range(100000):\n"
                  "    mean = avg()\n"
                  "    if een.live_ranks() == [0, 2]:\n"
                  "        break\n"
                  "print('rank %d: mean %.4f over ranks %s of %d' % (r, mean, een.live_ranks(), "
                  "dist.get_world_size()), flush=True)\n")
        code, out = run(launch_args(2, 3, "--min-workers", "2") + [sys.executable, "-c", script],
                        timeout=240)
        self.assertEqual(code, 0, out)
        for rank in (0, 2):
            self.assertIn("rank %d: mean 5.0000 over ranks [0, 2] of 3" % rank, out)
        self.assertRegex(out, r"job finished: 2 of 3 workers succeeded")
        # An unchanged DDP script goes on too, the survivors in step.
        script = ("import een, runpy, sys; sys.argv = ['t', '--backend', 'een', '--fail-rank', "
                  "'1', '--fail-step', '5', '--steps', '200']; "
                  "runpy.run_path('%s', run_name='__main__')" % TUTORIAL)
        code, out = run(launch_args(2, 3, "--min-workers", "2") + [sys.executable, "-c", script],
                        timeout=240)
        self.assertEqual(code, 0, out)
        sums = set(re.findall(r"rank [02] of 3: done, checksum (\S+)", out))
        self.assertEqual(len(sums), 1, out)
        self.assertNotIn("rank 1 of 3: done", out)

    def test_a_ps_killed_with_replicas_2_changes_nothing(self):
        def args(out):
            return launch_args(2, 2, "--replicas", "2") + [
                sys.executable, EQUIVALENCE, "--backend", "een", "--optimizer", "adam",
                "--steps", "3000", "--out", out]
        whole = os.path.join(self.folder.name, "whole.pt")
        killed = os.path.join(self.folder.name, "killed.pt")
        code, out = run(args(whole), timeout=240)
        self.assertEqual(code, 0, out)
        job = Job(args(killed))
        found = job.wait_for(r"registered ps 1 \(host \S+, pid (\d+)\)", 120)
        self.assertIsNotNone(found, job.output)
        self.assertIsNotNone(job.wait_for(r"job starts:", 120), job.output)
        time.sleep(random.Random(5).uniform(1.0, 2.0))  # a seeded moment in training
        os.kill(int(found.group(1)), signal.SIGKILL)
        self.assertEqual(job.wait(240), 0, job.output[-4000:])
        self.assertIn("collective calls in flight are answered by their other copies", job.output)
        self.assertEqual(worst_relative_difference(whole, killed), 0.0)

    def test_a_rank_that_ends_early_fails_the_others_calls_at_once(self):
        # Uneven inputs: rank 1 is done and exits 0 while rank 0 still calls
        # a collective. As with gloo, the call fails at once, saying why.
        script = ("import een, torch, torch.distributed as dist\n"
                  "dist.init_process_group('een')\n"
                  "if dist.get_rank() == 0:\n"
                  "    dist.all_reduce(torch.ones(100000))\n")
        code, out = run(launch_args(2, 2) + [sys.executable, "-c", script], timeout=120)
        self.assertEqual(code, 1, out)
        self.assertRegex(out, r"job failed: worker 0 .*worker 1 left the job \(it finished or was "
                              r"lost\) before sending its part")

    def test_outside_a_job_the_backend_says_why(self):
        code, out = run([sys.executable, "-c",
                         "import os, een, torch.distributed as dist\n"
                         "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='0')\n"
                         "dist.init_process_group('een', rank=0, world_size=1)"], timeout=60)
        self.assertNotEqual(code, 0, out)
        self.assertIn("een backend: cannot join a job", out)


if __name__ == "__main__":
    unittest.main()
