"""Checkpoints with optimizer state, both ways (2 PS, 2 workers):
dp.state_dict() of a job, saved with torch.save, trains on in plain PyTorch
to where the job ends; a plain PyTorch checkpoint, or a job's, loaded with
dp.load_state_dict() starts a job that ends where plain PyTorch (or the
uninterrupted job) ends. And the model each worker ends with: with uneven
data every rank ends with the job's final values (DDP's join())."""
import os
import re
import signal
import sys
import tempfile
import unittest

import numpy
import torch

import job

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = [sys.executable, os.path.join(HERE, "checkpoint_train.py")]


def launch(*options):
    return job.launch_args(2, 2, *options) + TRAIN


class Checkpoint(unittest.TestCase):
    def run_ok(self, argv, timeout=120):
        code, output = job.run(argv, timeout=timeout)
        self.assertEqual(code, 0, output)
        return output

    def close(self, what, a, b):
        # Both sum the same two gradients in the same order; what differs is
        # torch.optim's rounding of scalars against the PS's (an ulp or so).
        self.assertEqual(a.size, b.size)
        worst = float(numpy.abs(a - b).max())
        print("%s: max abs difference %.2e (largest value %.2f)" %
              (what, worst, float(numpy.abs(b).max())))
        self.assertLessEqual(worst, 1e-6)

    def job_to_plain(self, optimizer, *launch_options):
        """dp.state_dict() at step 10 into plain torch, 10 more steps each way."""
        with tempfile.TemporaryDirectory() as tmp:
            path = lambda name: os.path.join(tmp, name)  # noqa: E731
            args = ["--optimizer", optimizer]
            self.run_ok(launch(*launch_options) + args + ["--save", path("c.pt"),
                                                          "--out", path("een.bin")])
            saved = torch.load(path("c.pt"))
            self.run_ok(TRAIN + args + ["--plain", "--load", path("c.pt"), "--out",
                                        path("plain.bin")], timeout=60)
            self.close(optimizer + ", job's checkpoint on in plain torch",
                       job.load(path("een.bin")), job.load(path("plain.bin")))
            # The state matters: without it plain torch ends elsewhere.
            self.run_ok(TRAIN + args + ["--plain", "--load", path("c.pt"), "--fresh-optimizer",
                                        "--out", path("fresh.bin")], timeout=60)
            self.assertGreater(
                float(numpy.abs(job.load(path("fresh.bin")) - job.load(path("een.bin"))).max()),
                1e-4)
        return saved

    def test_adam_state_trains_on_in_plain_torch(self):
        saved = self.job_to_plain("adam")
        state = saved["optimizer"]["state"]
        self.assertEqual(sorted(state), list(range(6)))  # every parameter of the MLP
        self.assertEqual(sorted(state[0]), ["exp_avg", "exp_avg_sq", "step"])
        self.assertEqual(float(state[0]["step"]), 10.0)
        self.assertEqual(saved["optimizer"]["param_groups"][0]["lr"], 0.01)

    def test_eenctl_export_of_a_jobs_snapshot_is_its_checkpoint(self):
        """`eenctl export` of the snapshot of step 10 holds what dp.state_dict()
        gave at step 10, and plain torch trains on from it to where the job
        ends; a folder without snapshots, or a step it lacks, is said."""
        with tempfile.TemporaryDirectory() as tmp:
            path = lambda name: os.path.join(tmp, name)  # noqa: E731
            eenctl = os.path.join(job.BIN, "eenctl")
            self.run_ok(launch("--snapshot-every", "10", "--snapshot-dir", path("snapshots")) +
                        ["--optimizer", "adam", "--save", path("c.pt"), "--out", path("een.bin")])
            out = self.run_ok([eenctl, "export", "--snapshot-dir", path("snapshots"), "--step",
                               "10", "--out", path("exported.pt")], timeout=60)
            self.assertIn("step 10 of " + path("snapshots"), out)
            exported, saved = torch.load(path("exported.pt")), torch.load(path("c.pt"))
            self.assertEqual(sorted(exported["model"]), sorted(saved["model"]))
            for name, value in saved["model"].items():
                self.assertTrue(torch.equal(exported["model"][name], value), name)
            state, want = exported["optimizer"]["state"], saved["optimizer"]["state"]
            self.assertEqual(sorted(state), sorted(want))
            for index in want:
                self.assertEqual(sorted(state[index]), sorted(want[index]))
                for slot, value in want[index].items():
                    self.assertTrue(torch.equal(state[index][slot], value), (index, slot))
            group, want_group = (exported["optimizer"]["param_groups"][0],
                                 saved["optimizer"]["param_groups"][0])
            for key in ("lr", "betas", "eps", "weight_decay", "params"):
                self.assertEqual(group[key], want_group[key], key)
            # Plain torch trains on from the exported file to where the job ends.
            self.run_ok(TRAIN + ["--optimizer", "adam", "--plain", "--load", path("exported.pt"),
                                 "--out", path("plain.bin")], timeout=60)
            self.close("adam, exported snapshot on in plain torch",
                       job.load(path("een.bin")), job.load(path("plain.bin")))
            # The newest whole snapshot by default (the job's last, step 20; 10 when a busy
            # machine skipped 20 while 10 was still being written).
            out = self.run_ok([eenctl, "export", "--snapshot-dir", path("snapshots"), "--out",
                               path("newest.pt")], timeout=60)
            newest = re.search(r"step (20|10) of", out)
            self.assertIsNotNone(newest, out)
            self.assertEqual(float(torch.load(path("newest.pt"))["optimizer"]["state"][0]
                                   ["step"]), float(newest.group(1)))
            code, out = job.run([eenctl, "export", "--snapshot-dir", path("snapshots"), "--step",
                                 "7", "--out", path("none.pt")], timeout=60)
            self.assertEqual(code, 1, out)
            self.assertIn("no whole snapshot of step 7", out)
            self.assertRegex(out, r"ps-0: steps (20, )?10")
            code, out = job.run([eenctl, "export", "--snapshot-dir", tmp, "--out",
                                 path("none.pt")], timeout=60)
            self.assertEqual(code, 1, out)
            self.assertIn("no model layout in " + tmp, out)
            self.assertFalse(os.path.exists(path("none.pt")))
            # Never into the snapshots it reads, nor over what is not a file.
            current = os.path.join(path("snapshots"), "ps-0", "CURRENT")
            code, out = job.run([eenctl, "export", "--snapshot-dir", path("snapshots") + "/",
                                 "--out", current], timeout=60)
            self.assertEqual(code, 1, out)
            self.assertIn("lies inside the snapshot folder", out)
            code, out = job.run([eenctl, "export", "--snapshot-dir", path("snapshots"), "--out",
                                 "/dev/null"], timeout=60)
            self.assertEqual(code, 1, out)
            self.assertIn("/dev/null exists and is not a regular file", out)
            # A link is written through, as torch.save does.
            os.symlink(path("target.pt"), path("link.pt"))
            self.run_ok([eenctl, "export", "--snapshot-dir", path("snapshots"), "--out",
                         path("link.pt")], timeout=60)
            self.assertTrue(os.path.islink(path("link.pt")))
            self.assertIn("model", torch.load(path("target.pt")))

    def test_eenctl_export_of_a_running_job_takes_a_snapshot_and_writes_it(self):
        """Without --snapshot-dir, `eenctl export` asks the running job for a
        snapshot (as `eenctl snapshot`), waits until every PS wrote it, and
        writes it: the optimizer state is of the step the job agreed on."""
        with tempfile.TemporaryDirectory() as tmp:
            path = lambda name: os.path.join(tmp, name)  # noqa: E731
            run = job.Job(launch("--snapshot-every", "1000000", "--snapshot-dir",
                                 path("snapshots")) +
                          ["--optimizer", "adam", "--steps", "100000000", "--out", path("x.bin")])
            try:
                address = run.wait_for(r"coordinator at (\S+?);", 60)
                self.assertIsNotNone(address, run.output)
                self.assertIsNotNone(run.wait_for("job starts", 120), run.output)
                code, out = job.run([os.path.join(job.BIN, "eenctl"), "export", "--coordinator",
                                     address.group(1), "-o", path("live.pt")], timeout=180)
                self.assertEqual(code, 0, out + run.output[-3000:])
                taken = re.search(r"every PS snapshots step ([0-9]+) into " +
                                  re.escape(path("snapshots")), out)
                self.assertIsNotNone(taken, out)
                self.assertIn("step %s of %s" % (taken.group(1), path("snapshots")), out)
                exported = torch.load(path("live.pt"))
                self.assertEqual(sorted(exported), ["model", "optimizer"])
                self.assertEqual(float(exported["optimizer"]["state"][0]["step"]),
                                 float(taken.group(1)))
            finally:
                run.proc.send_signal(signal.SIGINT)
                run.wait(60)

    def test_sgd_momentum_trains_on_in_plain_torch_with_replicas(self):
        saved = self.job_to_plain("sgd", "--replicas", "2")
        self.assertEqual(sorted(saved["optimizer"]["state"][5]), ["momentum_buffer", "step"])
        self.assertEqual(saved["optimizer"]["param_groups"][0]["momentum"], 0.9)

    def test_adamw_and_adagrad_too(self):
        self.job_to_plain("adamw")
        saved = self.job_to_plain("adagrad")
        self.assertEqual(sorted(saved["optimizer"]["state"][0]), ["step", "sum"])

    def test_a_job_starts_from_plain_torch_and_from_its_own_checkpoint(self):
        for optimizer in ("adam", "sgd"):
            with tempfile.TemporaryDirectory() as tmp:
                path = lambda name: os.path.join(tmp, name)  # noqa: E731
                args = ["--optimizer", optimizer]
                # Plain torch to step 20, saving at 10; a job from its step 10.
                # (torch's SGD counts no steps: a job goes on from step 1 there.)
                self.run_ok(TRAIN + args + ["--plain", "--save", path("plain.pt"), "--out",
                                            path("plain.bin")], timeout=60)
                output = self.run_ok(launch() + args + ["--load", path("plain.pt"), "--out",
                                                        path("from_plain.bin")])
                if optimizer == "adam":
                    self.assertIn("checkpoint loaded: True, at step 10", output)
                    self.close(optimizer + ", plain torch's checkpoint on in a job",
                               job.load(path("from_plain.bin")), job.load(path("plain.bin")))
                else:
                    self.assertIn("checkpoint loaded: True, at step 1", output)
                # A job straight through, and one from its step-10 checkpoint: bitwise.
                self.run_ok(launch("--replicas", "2") + args + [
                    "--save", path("job.pt"), "--out", path("straight.bin")])
                self.run_ok(launch("--replicas", "2") + args + [
                    "--load", path("job.pt"), "--out", path("resumed.bin")])
                self.assertTrue(numpy.array_equal(job.load(path("straight.bin")),
                                                  job.load(path("resumed.bin"))))


class CheckpointThroughPsLoss(unittest.TestCase):
    def test_checkpoints_pulled_every_step_while_a_ps_is_killed_change_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            def args(name):
                return job.launch_args(3, 2, "--replicas", "2") + TRAIN + [
                    "--steps", "400", "--pull-every", "1", "--save",
                    os.path.join(tmp, name + ".pt"), "--out", os.path.join(tmp, name + ".bin")]
            code, output = job.run(args("whole"), timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            run = job.Job(args("killed"))
            job.kill_when(self, run, r"pulled the checkpoint of step 100", "ps 1")
            self.assertIn("its backups take over", run.output)
            whole, killed = (torch.load(os.path.join(tmp, n + ".pt")) for n in ("whole", "killed"))
            for name, value in whole["model"].items():
                self.assertTrue(torch.equal(value, killed["model"][name]), name)
            for index, state in whole["optimizer"]["state"].items():
                for slot, value in state.items():
                    self.assertTrue(torch.equal(value, killed["optimizer"]["state"][index][slot]),
                                    "%s of parameter %d" % (slot, index))
            self.assertTrue(numpy.array_equal(job.load(os.path.join(tmp, "whole.bin")),
                                              job.load(os.path.join(tmp, "killed.bin"))))


    def test_a_ps_killed_as_a_checkpoint_loads_changes_nothing(self):
        """A job started from a checkpoint ends bitwise the same when a PS is
        killed just as the workers load it (--replicas 2: its backups take
        the state that was loaded)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = lambda name: os.path.join(tmp, name)  # noqa: E731
            self.assertEqual(job.run(TRAIN + ["--plain", "--save", path("c.pt"), "--out",
                                              path("plain.bin")], timeout=60)[0], 0)
            def args(name, *more):
                return job.launch_args(3, 2, "--replicas", "2") + TRAIN + [
                    "--steps", "60", "--load", path("c.pt"), "--out", path(name + ".bin"), *more]
            code, output = job.run(args("whole"), timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            run = job.Job(args("killed", "--gate", path("gate")))
            for rank in (0, 1):
                self.assertIsNotNone(run.wait_for("worker %d ready to load" % rank, 120),
                                     run.output[-3000:])
            open(path("gate"), "w").close()
            pid = run.newest_pid("ps 1")
            self.assertIsNotNone(pid, run.output)
            os.kill(pid, signal.SIGKILL)
            self.assertEqual(run.wait(180), 0, run.output[-4000:])
            self.assertIn("its backups take over", run.output)
            self.assertIn("checkpoint loaded: True, at step 10", run.output)
            self.assertTrue(numpy.array_equal(job.load(path("whole.bin")),
                                              job.load(path("killed.bin"))))


class FinalValues(unittest.TestCase):
    def ends(self, workers, *options, leave_at_once=False):
        """Each worker's final parameters: worker r trains 4 + 4r steps."""
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "final")
            argv = job.launch_args(2, workers, *options) + [
                sys.executable, os.path.join(HERE, "uneven_train.py"), "--out", out]
            if leave_at_once:
                argv.append("--leave-at-once")
            code, output = job.run(argv, timeout=120)
            self.assertEqual(code, 0, output)
            return [job.load("%s.%d" % (out, r)) for r in range(workers)], output

    def test_workers_that_finish_early_end_with_the_final_model(self):
        for consistency in ("bsp", "ssp:2", "async"):
            finals, output = self.ends(3, "--consistency", consistency)
            for rank in (0, 1):
                self.assertTrue(numpy.array_equal(finals[rank], finals[2]),
                                "%s: worker %d ends with other values" % (consistency, rank))
            self.assertIn("took the job's final values", output)

    def test_a_ps_killed_while_a_worker_waits_for_the_final_values_changes_nothing(self):
        """Worker 0 finishes first and waits for the job's final values; a PS
        killed meanwhile (--replicas 2) changes none of them."""
        with tempfile.TemporaryDirectory() as tmp:
            def argv(name):
                return job.launch_args(3, 2, "--replicas", "2") + [
                    sys.executable, os.path.join(HERE, "uneven_train.py"), "--extra", "1500",
                    "--out", os.path.join(tmp, name)]
            code, output = job.run(argv("whole"), timeout=180)
            self.assertEqual(code, 0, output[-3000:])
            run = job.Job(argv("killed"))
            # Once the backups are built (before, past step 0, a lost PS ends the job).
            self.assertIsNotNone(run.wait_for("every shard has a live backup", 120),
                                 run.output[-3000:])
            job.kill_when(self, run, r"coordinator: worker 0 finished at step", "ps 1")
            self.assertIn("its backups take over", run.output)
            for rank in (0, 1):
                whole, killed = (job.load(os.path.join(tmp, "%s.%d" % (n, rank)))
                                 for n in ("whole", "killed"))
                self.assertTrue(numpy.array_equal(whole, killed), "worker %d" % rank)

    def test_leaving_at_once_keeps_this_workers_last_values(self):
        finals, _ = self.ends(2, leave_at_once=True)
        self.assertFalse(numpy.array_equal(finals[0], finals[1]))


if __name__ == "__main__":
    unittest.main()
