"""Jobs that survive a cluster: preemption signals end a run after one checkpoint that every rank
agrees on (exit status 75), ``--resume auto`` continues from the newest complete checkpoint on
whatever ranks the next job has, and the Slurm script of docs/cluster.md requeues itself.

Real signals reach real jobs: one process, and ``mpiexec`` of two simulated nodes (Hydra's fork
launcher, ``-hosts nodeA:2,nodeB:2``, each node its own working directory). Every job runs under
``timeout``; the float64 costs are compared with the uninterrupted run's (bitwise on the same
grid, to rounding on another)."""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from distnet.comm.launcher import mpiexec_path
from distnet.models.checkpoint import read_checkpoint
from tests.test_cli_two_nodes import LIMIT, _env, costs, two_nodes
from tests.test_signals import _descendant_ranks
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parent.parent
START = 240


@pytest.fixture(scope="module")
def long_exp(tmp_path_factory):
    """A float64 CNN of 3 epochs of 75 steps (600 images), single and distributed."""
    d = tmp_path_factory.mktemp("preempt")
    write_data(d / "data.h5", n_train=600)
    for name, dist in (("single.yaml", False), ("dist.yaml", True)):
        (d / name).write_text(experiment(CNN, "data.h5", dist).replace("num_epochs: 4", "num_epochs: 3"))
    return d


def _start(cmd, cwd, env=None):
    return subprocess.Popen(cmd, cwd=cwd, env=env or _env(), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _training(run_dir, proc, steps=5):
    """Wait until the run directory's metrics or the progress show training under way: the
    topology recorded, then ``steps`` x 0.2 s more."""
    deadline = time.monotonic() + START
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if "topology" in json.loads((Path(run_dir) / "run.json").read_text()):
                time.sleep(0.2 * steps)
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the job did not start training in time")


def _epoch_done(run_dir, proc):
    """Wait until the run directory's metrics.jsonl holds a training epoch (the handlers are
    installed and training runs; a loaded machine can take longer than a fixed sleep)."""
    deadline = time.monotonic() + START
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if '"epoch"' in (Path(run_dir) / "metrics.jsonl").read_text():
                return
        except OSError:
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the job did not finish an epoch in time")


def _end(proc, limit=120):
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"hung\n{err}")
    return proc.returncode, err


def _run(folder, *args):
    return subprocess.run(["timeout", LIMIT, sys.executable, "-m", "distnet", "run", *args], cwd=folder,
                          env=_env(), capture_output=True, text=True)


def test_sigusr1_then_resume_auto_on_one_process(long_exp, tmp_path):
    """SIGUSR1 mid-epoch: a checkpoint inside the epoch, exit 75, run.json preempted; `--resume
    auto` in the same run directory continues there and ends with the uninterrupted run's costs,
    bit for bit; the earlier attempt is kept in run.json."""
    shutil.copy(long_exp / "single.yaml", tmp_path)
    shutil.copy(long_exp / "data.h5", tmp_path)
    longer = ["--set", "model.num_epochs=16"]        # one process trains 3 epochs in about a second
    assert _run(tmp_path, "single.yaml", "-q", "--run-dir", "whole", *longer).returncode == 0
    proc = _start([sys.executable, "-m", "distnet", "run", "single.yaml", "-q", "--run-dir", "job", *longer], tmp_path)
    _epoch_done(tmp_path / "job", proc)
    proc.send_signal(signal.SIGUSR1)
    rc, err = _end(proc)
    assert rc == 75, err
    assert re.search(r"distnet: preempted by SIGUSR1: checkpoint job/checkpoint.h5 written (in epoch \d+ after "
                     r"\d+ step\(s\)|after epoch \d+); exit 75", err), err
    info = json.loads((tmp_path / "job" / "run.json").read_text())
    assert info["status"] == "preempted" and info["preempted"]["signal"] == "SIGUSR1", info
    assert read_checkpoint(tmp_path / "job" / "checkpoint.h5").meta["steps"] > 0
    resumed = _run(tmp_path, "single.yaml", "--run-dir", "job", "--resume", "auto", *longer)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from job/checkpoint.h5" in resumed.stderr
    np.testing.assert_array_equal(costs(tmp_path / "job"), costs(tmp_path / "whole"))
    info = json.loads((tmp_path / "job" / "run.json").read_text())
    assert info["status"] == "finished" and [a["status"] for a in info["attempts"]] == ["preempted"]


@pytest.mark.parametrize("ranks", [1, 2])
def test_sigusr1_during_the_start_up_ends_the_job_as_preempted(long_exp, tmp_path, ranks):
    """A SIGUSR1 that reaches a rank while it imports (before the run knows its experiment takes
    that signal) used to kill the rank; it is kept, and delivered once the handlers are in place:
    the job ends as preempted in its start-up, exit 75."""
    shutil.copy(long_exp / ("single.yaml" if ranks == 1 else "dist.yaml"), tmp_path / "exp.yaml")
    shutil.copy(long_exp / "data.h5", tmp_path)
    code = ("import os, signal, sys; sys.argv = ['distnet', 'run', 'exp.yaml', '-q', '--run-dir', 'job']; "
            "import distnet.cli; "
            "os.environ.get('PMI_RANK', '1') == '1' and os.kill(os.getpid(), signal.SIGUSR1); "
            "from distnet.cli.main import main; main()")
    cmd = [sys.executable, "-c", code]
    if ranks > 1:
        cmd = [mpiexec_path(), "-n", str(ranks)] + cmd
    rc, err = _end(_start(cmd, tmp_path))
    assert rc == 75, err
    assert re.search(r"preempted by SIGUSR1.*in start-up", err), err


def test_a_second_signal_ends_at_once_and_the_previous_checkpoint_stays_whole(long_exp, tmp_path):
    """The rank that should write the checkpoint never reaches its next step (it hangs): a
    second SIGUSR1 ends the job at once with 128 + 10, and the epoch's checkpoint is whole."""
    shutil.copy(long_exp / "single.yaml", tmp_path)
    shutil.copy(long_exp / "data.h5", tmp_path)
    env = dict(_env(), DISTNET_FAULT_INJECT="0:1:40:hang")
    proc = _start([sys.executable, "-m", "distnet", "run", "single.yaml", "-q", "--run-dir", "job",
                   "--checkpoint-every", "1"], tmp_path, env)
    deadline = time.monotonic() + START
    while not (tmp_path / "job" / "checkpoint.h5").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)                       # in the hang of epoch 1, batch 40
    proc.send_signal(signal.SIGUSR1)
    time.sleep(1)
    proc.send_signal(signal.SIGUSR1)
    rc, err = _end(proc)
    assert rc == 128 + signal.SIGUSR1, err
    assert "distnet: interrupted by SIGUSR1" in err or "a second SIGUSR1" in err, err
    assert json.loads((tmp_path / "job" / "run.json").read_text())["status"] == "interrupted"
    ck = read_checkpoint(tmp_path / "job" / "checkpoint.h5")
    assert ck.epoch == 0 and ck.position is None


def test_the_grace_time_ends_a_run_that_cannot_checkpoint(long_exp, tmp_path):
    """A rank hangs before its next step: `checkpoint.grace` seconds after SIGTERM the job ends
    (128 + 15), recorded as interrupted with the reason."""
    shutil.copy(long_exp / "dist.yaml", tmp_path)
    shutil.copy(long_exp / "data.h5", tmp_path)
    env = dict(_env(), DISTNET_FAULT_INJECT="1:0:30:hang")
    proc = _start(["timeout", "-k", "5", LIMIT, mpiexec_path(), "-n", "2", sys.executable, "-m", "distnet", "run",
                   "dist.yaml", "-q", "--run-dir", "job", "--set", "checkpoint={grace: 3}"], tmp_path, env)
    _training(tmp_path / "job", proc, steps=15)
    os.kill(_descendant_ranks(proc.pid)[0], signal.SIGTERM)
    rc, err = _end(proc)
    assert rc not in (0, 75, 124, 137), err
    assert "SIGTERM: the run did not end within the grace time of 3 s; ending at once" in err, err
    info = json.loads((tmp_path / "job" / "run.json").read_text())
    assert info["status"] == "interrupted" and "grace time" in info["error"], info


def _nodes(tmp_path, long_exp):
    a, b = tmp_path / "A", tmp_path / "B"
    for d in (a, b):
        d.mkdir()
        shutil.copy(long_exp / "data.h5", d)
    shutil.copy(long_exp / "dist.yaml", a)
    return a, b


def test_sigusr1_on_two_nodes_then_resume_auto_on_fewer_ranks(long_exp, tmp_path):
    """Two nodes of 2 ranks; SIGUSR1 to every rank mid-epoch (as Slurm's --signal sends it):
    one checkpoint, exit 75; `--resume auto` on node A alone (2 ranks, grid 1x2) reaches the
    uninterrupted 4-rank run's float64 costs."""
    a, b = _nodes(tmp_path, long_exp)
    assert two_nodes(a, b, "dist.yaml", "-q", "--run-dir", "whole").returncode == 0
    run = [sys.executable, "-m", "distnet", "run", "dist.yaml", "-q", "--run-dir", "job"]
    proc = _start(["timeout", "-k", "5", LIMIT, mpiexec_path(), "-launcher", "fork", "-hosts", "nodeA:2,nodeB:2",
                   "-n", "2", "-wdir", str(a), *run, ":", "-n", "2", "-wdir", str(b), *run], a)
    _epoch_done(a / "job", proc)      # every rank trains (rank 0 records its topology before the others may)
    for pid in _descendant_ranks(proc.pid).values():
        os.kill(pid, signal.SIGUSR1)
    rc, err = _end(proc)
    assert rc == 75, err
    assert [x for x in err.splitlines() if "preempted by SIGUSR1" in x][0].startswith("[rank 0] distnet: "), err
    ck = read_checkpoint(a / "job" / "checkpoint.h5")
    assert ck.meta["size"] == 4
    fewer = subprocess.run(["timeout", "-k", "5", LIMIT, mpiexec_path(), "-launcher", "fork", "-hosts", "nodeA:2",
                            "-n", "2", sys.executable, "-m", "distnet", "run", "dist.yaml", "--run-dir", "job",
                            "--resume", "auto"], cwd=a, env=_env(), capture_output=True, text=True)
    assert fewer.returncode == 0, fewer.stderr
    assert "[rank 0] resumed from job/checkpoint.h5" in fewer.stderr and "grid 1x2" in fewer.stderr
    np.testing.assert_allclose(costs(a / "job"), costs(a / "whole"), rtol=1e-12)
    done = ck.position["epoch"] if ck.position else ck.epoch + 1
    np.testing.assert_array_equal(costs(a / "job")[:done], costs(a / "whole")[:done])


SCRIPT_HEADING = "## Preemption, time limits and requeueing"


def slurm_script():
    """The job script of docs/cluster.md, as the page shows it."""
    page = (ROOT / "docs" / "cluster.md").read_text()
    block = page[page.index(SCRIPT_HEADING):]
    return block[block.index("```bash\n") + len("```bash\n"):block.index("\n```", block.index("```bash"))] + "\n"


def _stand_ins(tmp_path):
    """``srun`` (mpiexec of two simulated nodes, every other option dropped), ``scontrol``
    (writes its arguments to scontrol.log), and ``~/distnet/.venv``: this virtualenv."""
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    (home / "distnet").mkdir(parents=True)
    os.symlink(Path(sys.executable).parent.parent, home / "distnet" / ".venv")
    (bin_dir / "srun").write_text("#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n"
                                  f"exec {mpiexec_path()} -launcher fork -hosts nodeA:2,nodeB:2 -n 4 \"$@\"\n")
    (bin_dir / "scontrol").write_text(f"#!/bin/bash\necho \"$@\" >> {tmp_path}/scontrol.log\n")
    for f in ("srun", "scontrol"):
        (bin_dir / f).chmod((bin_dir / f).stat().st_mode | stat.S_IXUSR)
    return dict(_env(), PATH=f"{bin_dir}:{os.environ['PATH']}", HOME=str(home), SLURM_JOB_ID="4242")


def test_the_slurm_script_of_the_docs_requeues_itself(long_exp, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(slurm_script())
    assert "--resume auto" in script.read_text() and "scontrol requeue" in script.read_text()
    shutil.copy(long_exp / "data.h5", tmp_path)
    (tmp_path / "exp_dist.yaml").write_text((long_exp / "dist.yaml").read_text())
    env = _stand_ins(tmp_path)
    whole = subprocess.run(["timeout", "-k", "5", LIMIT, "bash", str(script)], cwd=tmp_path, env=dict(
        env, SLURM_JOB_ID="1"), capture_output=True, text=True)
    assert whole.returncode == 0 and not (tmp_path / "scontrol.log").exists(), whole.stderr
    proc = _start(["timeout", "-k", "5", LIMIT, "bash", str(script)], tmp_path, env)
    _epoch_done(tmp_path / "runs" / "job-4242", proc)
    for pid in _descendant_ranks(proc.pid, b"distnet\0run\0").values():    # --signal=USR1@120: every task
        os.kill(pid, signal.SIGUSR1)
    rc, err = _end(proc)
    assert rc == 75, err
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    again = subprocess.run(["timeout", "-k", "5", LIMIT, "bash", str(script)], cwd=tmp_path, env=env,
                           capture_output=True, text=True)    # Slurm runs the script again
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    np.testing.assert_array_equal(costs(tmp_path / "runs" / "job-4242"), costs(tmp_path / "runs" / "job-1"))
    listed = subprocess.run([sys.executable, "-m", "distnet", "runs", "runs"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert "runs/job-4242  finished" in listed.stdout, listed.stdout
