"""Helpers of the Python tests: een-launch jobs of train_mlp.py as
subprocesses, with deadlines, and their outputs. EEN_BIN_DIR names the
folder of een-launch (set by ctest)."""
import os
import re
import select
import signal
import subprocess
import sys
import time

import numpy

BIN = os.environ.get("EEN_BIN_DIR", "build/bin")
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = [sys.executable, os.path.join(HERE, "train_mlp.py")]


def launch_args(ps, workers, *options):
    return [os.path.join(BIN, "een-launch"), "--ps", str(ps), "--workers", str(workers),
            *options, "--"]


def run(argv, timeout=120):
    """Runs argv to the end; returns (exit code, output)."""
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout


def load(path):
    return numpy.fromfile(path, dtype=numpy.float32)


class Job:
    """A running een-launch job whose output is read as it comes."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.output = ""

    def wait_for(self, pattern, timeout, start=0):
        """Reads output until `pattern` (a regex) matches after `start`; the match or None."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.output[start:])
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                return re.search(pattern, self.output[start:])

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], min(timeout, 1.0))
        if not ready:
            return self.proc.poll() is None
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        self.output += chunk.decode(errors="replace")
        return True

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self._read(max(0.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                self.proc.kill()
                break
        try:
            return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        finally:
            self.proc.stdout.close()

    def newest_pid(self, role):
        """The pid een-launch's output gives `role` ("ps 1") last."""
        pids = re.findall(r"registered %s \(host [^,]+, pid ([0-9]+)\)|%s \(host [^,]+, pid "
                          r"([0-9]+)\) (?:takes over|joins the running job)" % (role, role),
                          self.output)
        return int(next(p for p in pids[-1] if p)) if pids else None


def kill_when(test, run, pattern, role, timeout=120):
    """Once `run`'s output matches `pattern`, SIGKILLs `role` ("ps 1"),
    then asserts that the job ends with exit 0 (`test` asserts)."""
    test.assertIsNotNone(run.wait_for(pattern, timeout), run.output[-3000:])
    pid = run.newest_pid(role)
    test.assertIsNotNone(pid, run.output)
    os.kill(pid, signal.SIGKILL)
    test.assertEqual(run.wait(180), 0, run.output[-4000:])
