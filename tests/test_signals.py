"""Signals and kills: Ctrl-C (SIGINT to the whole process group, as a terminal sends), SIGTERM to
mpiexec, to one rank and to a single process, and a stopped rank under ``--watchdog``. Each must
end every rank promptly with a non-zero exit and leave a truthful ``run.json``.

Every job runs in its own session (process group) under ``timeout``; a job still alive
``GRACE`` seconds after its signal counts as a hang. Timings are never asserted beyond "ended".
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distnet.comm.launcher import launch_env, mpiexec_path
from distnet.experiments.rundir import run_status
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parent.parent
GRACE = 20          # seconds after the signal before a job counts as hung (the goal is 5 s)
START_TIMEOUT = 240
TRIALS = int(os.environ.get("DISTNET_SIGNAL_TRIALS", "3"))


@pytest.fixture(scope="module")
def exps(tmp_path_factory):
    d = tmp_path_factory.mktemp("sig")
    data = write_data(d / "data.h5", n_train=200)
    long = lambda dist: experiment(CNN, data, dist).replace("num_epochs: 4", "num_epochs: 100000")  # noqa: E731
    (d / "dist.yaml").write_text(long(True))
    (d / "single.yaml").write_text(long(False))
    return d


def _descendant_ranks(root, marker=b"-m\0distnet\0"):
    """``{rank: pid}`` of the distnet processes descended from ``root`` (hydra's proxy and the
    ranks run in sessions of their own, so the process group does not find them); ``marker``:
    what their command line holds (``python -m distnet``)."""
    parent, info = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        parent[int(entry)] = int(fields[1])
        info[int(entry)] = cmd
    out = {}
    for pid, cmd in info.items():
        p = pid
        while p in parent and p != root and p > 1:
            p = parent[p]
        if p != root or marker not in cmd or b"mpiexec" in os.path.basename(cmd.split(b"\0")[0]):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        out[int(env.get(b"PMI_RANK", b"0"))] = pid
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Job:
    def __init__(self, exp, run_dir, n, extra=()):
        cmd = [sys.executable, "-m", "distnet", "run", str(exp), "--run-dir", str(run_dir), "-q", *extra]
        if n > 1:
            cmd = [mpiexec_path(), "-n", str(n), *cmd]
        self.n, self.run_dir = n, Path(run_dir)
        self.proc = subprocess.Popen(cmd, cwd=ROOT,
                                     env=launch_env(n), start_new_session=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_training(self, extra=0.5):
        """Until rank 0 recorded its topology (setup done on every rank), then ``extra`` s."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ended early: {self.proc.returncode}\n{self.proc.stderr.read()}")
            try:
                if "topology" in json.loads((self.run_dir / "run.json").read_text()):
                    self.rank_pids = self.ranks()
                    if len(self.rank_pids) == self.n:
                        time.sleep(extra)
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        seen = self.ranks()
        self.kill()
        raise AssertionError(f"the job did not start training in time (ranks seen: {seen})")

    def ranks(self):
        if self.n == 1:
            return {0: self.proc.pid} if self.proc.poll() is None else {}
        return _descendant_ranks(self.proc.pid)

    def end(self, grace=GRACE):
        """``(exit status, or "hung" when it did not end within grace seconds, stderr)``."""
        try:
            _, err = self.proc.communicate(timeout=grace)
            return self.proc.returncode, err
        except subprocess.TimeoutExpired:
            self.kill()
            _, err = self.proc.communicate()
            return "hung", err

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def info(self):
        return json.loads((self.run_dir / "run.json").read_text())


def _check_ended(job, rc, err, status="interrupted"):
    assert rc not in (0, "hung"), f"exit {rc}\n{err}"
    assert "Traceback" not in err, err
    # mpiexec may return a moment before its killed ranks are gone: give them the 5 s goal
    deadline = time.monotonic() + 5
    while [p for p in job.rank_pids.values() if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in job.rank_pids.values() if _alive(p)], "some rank survived"
    info = job.info()
    assert info["status"] == status, info
    assert run_status(job.run_dir) == status


def test_ctrl_c_of_a_four_rank_run(exps, tmp_path):
    """SIGINT to the process group (mpiexec and every rank), several times: it was intermittent."""
    for trial in range(TRIALS):
        job = Job(exps / "dist.yaml", tmp_path / f"run{trial}", 4)
        job.wait_training(extra=0.3 * trial)
        os.killpg(job.proc.pid, signal.SIGINT)
        rc, err = job.end()
        _check_ended(job, rc, err)
        assert "interrupted by SIGINT" in err
        info = job.info()
        assert info["error"] == "interrupted by SIGINT" and info["failed_rank"] in range(4)


@pytest.mark.parametrize("target", ["mpiexec", "rank 2"])
def test_sigterm_of_a_four_rank_run_without_checkpoints(exps, tmp_path, target):
    """A run that writes no checkpoint has nothing to save: SIGTERM ends it at once (a run that
    writes checkpoints is preempted: tests/test_preemption.py)."""
    job = Job(exps / "dist.yaml", tmp_path / "run", 4, extra=["--no-checkpoint"])
    job.wait_training()
    pid = job.proc.pid if target == "mpiexec" else job.ranks()[2]
    os.kill(pid, signal.SIGTERM)
    rc, err = job.end()
    _check_ended(job, rc, err)
    info = job.info()
    assert "interrupted by SIGTERM" in info["error"]
    if target == "rank 2":
        assert info["failed_rank"] == 2 and "[rank 2] interrupted by SIGTERM" in err


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_to_a_single_process(exps, tmp_path, sig):
    job = Job(exps / "single.yaml", tmp_path / "run", 1, extra=["--no-checkpoint"])
    job.wait_training()
    if sig == "SIGINT":
        os.killpg(job.proc.pid, signal.SIGINT)
    else:
        os.kill(job.proc.pid, signal.SIGTERM)
    rc, err = job.end()
    _check_ended(job, rc, err)
    assert rc == 128 + getattr(signal, sig)
    assert err.strip().splitlines()[-1] == f"distnet: interrupted by {sig}"
    assert job.info()["error"] == f"interrupted by {sig}"


def test_kill_9_is_recognised_as_crashed(exps, tmp_path):
    job = Job(exps / "single.yaml", tmp_path / "run", 1)
    job.wait_training()
    assert run_status(job.run_dir) == "running"
    os.kill(job.proc.pid, signal.SIGKILL)
    job.end()
    assert job.info()["status"] == "running"    # what was recorded ...
    assert run_status(job.run_dir) == "crashed"  # ... and what it means
    from distnet.experiments.rundir import read_run
    assert "crashed" in read_run(str(job.run_dir))["label"]
    listed = subprocess.run([sys.executable, "-m", "distnet", "runs", str(job.run_dir.parent)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    line = next(x for x in listed.stdout.splitlines() if x.startswith(str(job.run_dir) + " "))
    assert "  crashed  " in line and "recorded as running; its process" in line


def _beat(step, batch, place, in_comm, phase="training", entered=5):
    return {"host": "n1", "phase": phase, "entered": entered, "ticks": step, "step": step, "where": (0, batch),
            "place": place, "in_comm": in_comm}


def test_stalled_ranks_in_words():
    from distnet.comm.watchdog import stalled_ranks
    waiting = _beat(5, 3, "distnet/comm/reduce.py:40 (allreduce)", True)
    busy = _beat(5, 3, "distnet/ops/conv.py:88 (fprop)", False)
    hosts = ["n0", "n1", "n2"]
    assert stalled_ranks({0: (0.1, waiting), 1: (40, waiting), 2: (0.2, waiting)}, 30, hosts) == (
        [1], "rank 1 on n1 (in training; no heartbeat for 40 s: stopped, lost, or hung outside Python)")
    assert stalled_ranks({0: (0.1, waiting), 1: (40, None)}, 30, hosts)[1] == (
        "rank 1 on n1 (never heard; no heartbeat for 40 s: stopped, lost, or hung outside Python)")
    behind = _beat(4, 2, "distnet/ops/conv.py:88 (fprop)", False)
    assert stalled_ranks({0: (0.1, waiting), 1: (0.1, behind)}, 30, hosts) == (
        [1], "rank 1 on n1 (at step 4, epoch 0, batch 2, while others reached step 5; in distnet/ops/conv.py:88 "
             "(fprop))")
    loading = _beat(0, None, "distnet/data/sources.py:9 (read)", False, "data loading", 2)
    assert stalled_ranks({0: (0.1, waiting), 1: (0.1, loading)}, 30, hosts)[1] == (
        "rank 1 on n1 (in data loading while others reached training; in distnet/data/sources.py:9 (read))")
    assert stalled_ranks({0: (0.1, waiting), 1: (0.1, busy), 2: (0.1, waiting)}, 30, hosts) == (
        [1], "rank 1 on n1 (busy in distnet/ops/conv.py:88 (fprop) while the others wait in communication)")
    assert stalled_ranks({0: (0.1, waiting), 1: (0.1, waiting)}, 30, hosts) [1].startswith("no single rank")


def test_watchdog_names_a_stopped_rank(exps, tmp_path):
    """SIGSTOP on rank 2: without the watchdog the others would spin forever."""
    job = Job(exps / "dist.yaml", tmp_path / "run", 4, extra=["--watchdog", "6"])
    job.wait_training(extra=1.0)
    os.kill(job.ranks()[2], signal.SIGSTOP)
    try:
        rc, err = job.end(grace=60)
    finally:
        job.kill()
    assert rc not in (0, "hung"), f"exit {rc}\n{err}"
    assert "watchdog: no progress for" in err and "in training" in err, err
    assert re.search(r"stalled: rank 2 on \S+ \(in training; no heartbeat", err), err
    info = job.info()
    assert info["status"] == "failed" and "stalled: rank 2" in info["error"]
    assert (info["failed_rank"], info["failed_phase"]) == (2, "training"), info     # the rank that stalled


def test_a_failure_on_a_non_zero_rank_is_recorded_by_that_rank(exps, tmp_path):
    """Rank 2 raises (a bug) while rank 0, the writer of run.json, waits in a collective."""
    d = tmp_path / "run"
    proc = subprocess.run(["timeout", "-k", "5", "120", mpiexec_path(), "-n", "4", sys.executable, "-m", "distnet",
                           "run", str(exps / "dist.yaml"), "--run-dir", str(d), "-q"], cwd=ROOT,
                          env=dict(launch_env(4), DISTNET_FAULT_INJECT="2:0:2"), capture_output=True, text=True)
    assert proc.returncode not in (0, 124, 137), proc.stderr
    info = json.loads((d / "run.json").read_text())
    assert info["status"] == "failed" and info["failed_rank"] == 2, info
    assert info["error"].startswith("InjectedFault: fault injected by DISTNET_FAULT_INJECT=2:0:2 on rank 2")
    assert run_status(d) == "failed"


def test_kill_9_of_a_non_writer_rank(exps, tmp_path):
    """The launcher ends the other ranks; whatever it sends them, the record must not say running
    (interrupted when rank 0 could still write, else crashed from the dead pid)."""
    job = Job(exps / "dist.yaml", tmp_path / "run", 4)
    job.wait_training()
    os.kill(job.ranks()[1], signal.SIGKILL)
    rc, err = job.end()
    assert rc not in (0, "hung"), err
    deadline = time.monotonic() + 5
    while [p for p in job.rank_pids.values() if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run_status(job.run_dir) in ("interrupted", "crashed", "failed"), job.info()


def test_watchdog_names_a_busy_rank(exps, tmp_path):
    """Rank 1 loops forever in Python (alive, heartbeats going) while the others wait for it."""
    d = tmp_path / "run"
    proc = subprocess.run(["timeout", "-k", "5", "120", mpiexec_path(), "-n", "3", sys.executable, "-m", "distnet",
                           "run", str(exps / "dist.yaml"), "--run-dir", str(d), "-q", "--set", "watchdog=6"], cwd=ROOT,
                          env=dict(launch_env(3), DISTNET_FAULT_INJECT="1:0:2:hang"), capture_output=True, text=True)
    assert proc.returncode not in (0, 124, 137), proc.stderr
    # rank 1 hangs before it stamps its step: it is behind, and where it is says why
    assert re.search(r"stalled: rank 1 on \S+ \(at step 2, epoch 0, batch 1, while others reached step 3; in "
                     r"distnet/faults.py:", proc.stderr), proc.stderr
    assert "shows the traceback" not in proc.stderr
    info = json.loads((d / "run.json").read_text())
    assert info["status"] == "failed" and "stalled: rank 1 on" in info["error"] and info["failed_rank"] == 1


@pytest.mark.parametrize("sig, rank", [("SIGINT", None), ("SIGTERM", "1")])
def test_a_signal_during_the_imports_ends_the_command_quietly(sig, rank):
    """Ctrl-C in the first second or two of a run (importing numpy, h5py, click, mpi4py) printed a
    KeyboardInterrupt traceback from inside an import on every rank, and exit statuses such as 1
    or (from mpiexec) 11; SIGTERM killed the ranks without a word (status 15)."""
    code = ("import os, signal, sys, time; sys.argv[0] = os.path.join('bin', 'distnet'); "
            "import distnet.cli; os.kill(os.getpid(), signal." + sig + "); time.sleep(10); print('not ended')")
    env = {k: v for k, v in os.environ.items() if k != "PMI_RANK"}
    if rank:
        env["PMI_RANK"] = rank
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 128 + getattr(signal, sig) and p.stdout == ""
    assert p.stderr == (f"[rank {rank}] " if rank else "distnet: ") + f"interrupted by {sig}\n"
    library = subprocess.run([sys.executable, "-c", "import signal, distnet.cli; "
                              "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
                             capture_output=True, text=True, timeout=60)
    assert library.stdout.strip() == "True"     # a library user's (or pytest's) Ctrl-C is left alone


def test_the_watchdog_watches_the_final_error_rates_in_their_phase(tmp_path):
    """The watchdog covers the whole run: the final error rates are measured with it armed, in
    the phase that a stall there would name (its limit must exceed one split's evaluation)."""
    from distnet.cli.hooks import CliHooks
    from distnet.comm.phase import current
    from distnet.config import load_experiment_text
    exp = load_experiment_text(experiment(CNN, write_data(tmp_path / "data.h5")))
    exp.model.num_epochs, exp.checkpoint_path = 1, None
    seen = []
    hooks = CliHooks(None, None, None, watchdog=1000)
    rate = exp.model.misclass_rate
    exp.model.misclass_rate = lambda x, y: (seen.append((current(), hooks.watchdog._thread.is_alive())), rate(x, y))[1]
    exp.run(hooks=hooks)
    assert seen and all(s == ("final evaluation", True) for s in seen), seen
    hooks.close_watchdog()
    assert not hooks.watchdog._thread.is_alive()


_SIGNAL_MID_CHECKPOINT = """
import os, signal, sys
import numpy as np
from distnet.comm.signals import Interrupted, install_signal_handlers
from distnet.models import checkpoint
install_signal_handlers(None)                   # what distnet run installs on one process
entries = lambda v: [{"name": f"p{i}", "layer": f"l{i}", "sharded": False, "value": np.full(50000, v),
                      "velocity": None, "state": {}} for i in range(6)]
path = sys.argv[1]
checkpoint.write_checkpoint(path, entries(1.0), 0, {"grid": [1, 1]})     # the previous checkpoint
written = []
_dataset = checkpoint._dataset
def dataset(group, name, a):                    # SIGTERM arrives while the 3rd array is written
    written.append(name)
    if len(written) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
    return _dataset(group, name, a)
checkpoint._dataset = dataset
try:
    checkpoint.write_checkpoint(path, entries(2.0), 1, {"grid": [1, 1]})
except Interrupted as e:
    print("interrupted", e.name)
print(sorted(os.listdir(os.path.dirname(path))), checkpoint.read_checkpoint(path).epoch)
"""


def test_a_signal_during_the_checkpoint_write_keeps_the_previous_checkpoint(tmp_path):
    """SIGTERM (or Ctrl-C) while one process writes its checkpoint: the previous checkpoint stays
    whole, no temporary is left behind, and nothing of HDF5 is printed."""
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_MID_CHECKPOINT, str(tmp_path / "ck.h5")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["interrupted SIGTERM", "['ck.h5'] 0"], proc.stdout
    assert proc.stderr == ""
