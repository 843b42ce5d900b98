"""torchrun's environment in every worker of an een-launch job: the
variables a DDP script reads, init_process_group("gloo") meeting at the
c10d store een-launch hosts, a replacement's restart count, and the
torchrun flags een-launch takes or refuses."""
import os
import re
import sys
import unittest

from job import BIN, HERE, launch_args, run

SCRIPT = [sys.executable, os.path.join(HERE, "torchrun_env.py")]
DDP_TUTORIAL = os.path.join(HERE, "ddp_tutorial.py")
RESTART_TRAIN = os.path.join(HERE, "restart_train.py")


def variables(output, rank):
    """NAME -> VALUE of worker `rank`'s last printed torchrun variables."""
    found = {}
    for name, value in re.findall(r"\[worker %d\] worker %d: ([A-Z_]+)=(\S*)" % (rank, rank),
                                  output):
        found[name] = value
    return found


class Torchrun(unittest.TestCase):
    def test_every_worker_has_torchruns_environment_and_gloo_meets(self):
        code, out = run(launch_args(1, 3) + SCRIPT, timeout=240)
        self.assertEqual(code, 0, out)
        ports = set()
        for rank in range(3):
            env = variables(out, rank)
            self.assertEqual(env.get("RANK"), str(rank), out)
            self.assertEqual(env["LOCAL_RANK"], str(rank))
            self.assertEqual(env["WORLD_SIZE"], "3")
            self.assertEqual(env["LOCAL_WORLD_SIZE"], "3")
            self.assertEqual(env["GROUP_RANK"], "0")
            self.assertEqual(env["GROUP_WORLD_SIZE"], "1")
            self.assertEqual(env["ROLE_RANK"], str(rank))
            self.assertEqual(env["ROLE_NAME"], "default")
            self.assertEqual(env["ROLE_WORLD_SIZE"], "3")
            self.assertEqual(env["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(env["TORCHELASTIC_RESTART_COUNT"], "0")
            self.assertEqual(env["TORCHELASTIC_MAX_RESTARTS"], "0")
            self.assertEqual(env["TORCHELASTIC_USE_AGENT_STORE"], "True")
            self.assertNotEqual(env["TORCHELASTIC_RUN_ID"], "<unset>")
            ports.add(env["MASTER_PORT"])
            # 1 + 2 + 3: every rank's metric, summed by gloo.
            self.assertIn("[worker %d] worker %d: gloo all_reduce 6 of 3 ranks" % (rank, rank),
                          out)
        self.assertEqual(len(ports), 1, out)
        self.assertGreater(int(ports.pop()), 0)

    def test_a_replacement_reads_the_next_restart_count(self):
        code, out = run(launch_args(1, 2, "--max-restarts", "1") + SCRIPT + ["--fail-first"],
                        timeout=240)
        self.assertEqual(code, 0, out)
        counts = re.findall(r"\[worker 1\] worker 1: TORCHELASTIC_RESTART_COUNT=(\d+)", out)
        self.assertEqual(counts, ["0", "1"], out)
        self.assertIn("worker 1: TORCHELASTIC_MAX_RESTARTS=1", out)
        self.assertEqual(variables(out, 0)["TORCHELASTIC_RESTART_COUNT"], "0")

    def test_the_master_port_asked_for_is_the_stores(self):
        # A free port: the kernel's pick, released at once.
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        code, out = run(launch_args(1, 2, "--master_port", str(port)) + SCRIPT, timeout=240)
        self.assertEqual(code, 0, out)
        self.assertEqual(variables(out, 1)["MASTER_PORT"], str(port))
        self.assertIn("gloo all_reduce 3 of 2 ranks", out)

    def test_nproc_per_node_is_the_workers_of_one_host(self):
        launch = os.path.join(BIN, "een-launch")
        code, out = run([launch, "--ps", "1", "--nproc_per_node", "2", "--"] + SCRIPT,
                        timeout=240)
        self.assertEqual(code, 0, out)
        self.assertEqual(variables(out, 1)["WORLD_SIZE"], "2")

    def test_an_unchanged_gloo_ddp_script_runs_with_ps_0(self):
        launch = os.path.join(BIN, "een-launch")
        code, out = run([launch, "--ps", "0", "--nproc-per-node", "3", "--", sys.executable,
                         DDP_TUTORIAL], timeout=240)
        self.assertEqual(code, 0, out)
        checksums = set(re.findall(r"\[worker (\d)\] rank \1 of 3: done, checksum (\S+)", out))
        self.assertEqual(sorted(r for r, _ in checksums), ["0", "1", "2"], out)
        self.assertEqual(len({c for _, c in checksums}), 1, out)  # DDP kept the ranks equal
        self.assertIn("job finished: 3 of 3 workers succeeded", out)

    def test_a_failing_rank_ends_a_ps_0_job_naming_it(self):
        launch = os.path.join(BIN, "een-launch")
        code, out = run([launch, "--ps", "0", "--workers", "3", "--", sys.executable,
                         DDP_TUTORIAL, "--fail-rank", "1", "--fail-step", "5"], timeout=240)
        self.assertEqual(code, 1, out)
        self.assertRegex(out, r"job failed: worker 1 \(pid \d+\) exited with status 1; its last "
                              r"line: rank 1 gives up at step 5")

    def test_with_max_restarts_a_failed_rank_restarts_every_worker_as_torchrun_does(self):
        self.assert_restart_ends_as_undisturbed(self, "gloo", 0)

    @staticmethod
    def assert_restart_ends_as_undisturbed(test, backend, ps, how="exit"):
        """Rank 1 fails at step 5 of the first attempt (exits 1, or with
        how="stop" stops itself and is lost by its silence): every worker
        starts again with TORCHELASTIC_RESTART_COUNT=1, resumes from the
        script's own checkpoint, and the run ends bitwise where an
        undisturbed one does."""
        import tempfile
        import torch
        with tempfile.TemporaryDirectory(prefix="een-restart-") as folder:
            def train(name, *fail):
                out = os.path.join(folder, name + ".pt")
                code, log = run(launch_args(ps, 2, "--max-restarts", "1") + [
                    sys.executable, RESTART_TRAIN, "--backend", backend, "--checkpoint",
                    os.path.join(folder, name + ".ckpt"), "--out", out, *fail], timeout=240)
                test.assertEqual(code, 0, log)
                return torch.load(out), log
            undisturbed, _ = train("undisturbed")
            restarted, log = train("restarted", "--fail-rank", "1", "--fail-step", "5",
                                   "--fail-how", how)
            cause = ("its last line: rank 1 fails at step 5" if how == "exit" else
                     r"worker 1 \(host [^,]+, pid [0-9]+\) silent for [^;]+;[^\n]*")
            test.assertRegex(log, cause + "; stopping every process to start the whole job "
                             r"again, every worker with TORCHELASTIC_RESTART_COUNT=1 \(restart 1 "
                             "of 1")
            test.assertIn("rank 0 attempt 1 resumes at step 5", log)
            test.assertIn("rank 1 attempt 1 resumes at step 5", log)
            test.assertIn("done at step 12, attempt 1", log)
            test.assertIn("job finished: 2 of 2 workers succeeded", log)
            test.assertEqual(undisturbed.keys(), restarted.keys())
            for k in undisturbed:
                test.assertTrue(torch.equal(undisturbed[k], restarted[k]), k)

    def test_ps_0_refuses_what_needs_parameter_servers(self):
        launch = os.path.join(BIN, "een-launch")
        code, out = run([launch, "--ps", "0", "--workers", "2", "--min-workers", "1", "--",
                         "true"], timeout=30)
        self.assertEqual(code, 2, out)
        self.assertIn("--min-workers (min_workers) needs them", out)
        # An EEN program in a job without PS: told why, not left waiting.
        code, out = run([launch, "--ps", "0", "--workers", "2", "--"] + SCRIPT, timeout=240)
        self.assertEqual(code, 1, out)
        self.assertIn("this job runs without parameter servers (een-launch --ps 0)", out)
        # init_process_group("een") too: the cause, not "run it under een-launch".
        code, out = run([launch, "--ps", "0", "--workers", "1", "--", sys.executable, "-c",
                         "import een, torch.distributed as d; d.init_process_group('een')"],
                        timeout=120)
        self.assertEqual(code, 1, out)
        self.assertIn("cannot join the job: this job runs without parameter servers", out)
        self.assertNotIn("one-process mode", out)

    def test_torchrun_habits_get_een_launchs_spelling(self):
        launch = os.path.join(BIN, "een-launch")
        cases = [
            (["--ps", "1", "--workers", "2", "--standalone", "--", "true"], "drop --standalone"),
            (["--ps", "1", "--workers", "2", "--rdzv_backend", "c10d", "--", "true"],
             "--rdzv HOST:PORT"),
            (["--ps", "1", "--worker", "2", "--", "true"], "did you mean --workers"),
            (["--ps", "1", "--workers", "2", "train.py"], "put the program after --"),
            (["--ps", "1", "--workers", "2", "--", "no_such_train.py"], "python3 no_such_train.py"),
            (["--ps", "1", "--workers", "2", "--nproc-per-node", "3", "--", "true"], "differ"),
        ]
        for argv, expected in cases:
            code, out = run([launch] + argv, timeout=30)
            self.assertEqual(code, 2, (argv, out))
            self.assertIn(expected, out, argv)


if __name__ == "__main__":
    unittest.main()
