"""What a cluster does to a job, on two simulated nodes (tests/test_cli_two_nodes.py says how):
a node frozen during a sharded save or at start-up is named in run.json with its host and
phase, the next save cleans up after the interrupted one, a sharded folder some node cannot see
is refused before training, a launch inside a launch is refused, the watchdog leaves no message
unreceived, `distnet info` reports every rank by node, `verify: full` finds one changed image,
and `--log-dir` gives every rank its own log."""
import json
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from distnet.comm.launcher import mpiexec_path
from tests.test_cli_two_nodes import LIMIT, _env, costs, two_nodes
from tests.tiny import CNN, experiment, write_data


@pytest.fixture
def nodes(tmp_path):
    """Folders ``A`` and ``B`` with a copy of the data each (300 images: 38 steps an epoch), the
    float64 CNN ``cnn.yaml`` (2 epochs, 2x2 tiles) on node A only."""
    a, b = tmp_path / "A", tmp_path / "B"
    for d in (a, b):
        d.mkdir()
        write_data(d / "data.h5", n_train=300)
    (a / "cnn.yaml").write_text(experiment(CNN, "data.h5", dist=True).replace("num_epochs: 4,", "num_epochs: 2,"))
    return a, b


def _info(run_dir):
    return json.loads((run_dir / "run.json").read_text())


def test_a_node_frozen_during_a_sharded_save_is_named_and_the_next_save_cleans_up(nodes):
    """Node B's rank 2 freezes (SIGSTOP) once its second sharded save has written its first array:
    the watchdog names rank 2, nodeB, checkpoint; the unfinished save's folder is left and
    `distnet runs` lists it; `--resume auto` on node A alone continues from the first save,
    removes the folder at its first save (said in the log), and reaches the uninterrupted costs."""
    a, b = nodes
    assert two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "whole", "--no-checkpoint").returncode == 0
    opts = ["-q", "--run-dir", "job", "--watchdog", "6", "--sharded-checkpoint", "--checkpoint", "../ck",
            "--checkpoint-every-steps", "10"]
    proc = two_nodes(a, b, "cnn.yaml", *opts, env={"DISTNET_FAULT_INJECT": "2:checkpoint+1:2:stop"})
    assert proc.returncode not in (0, 75), proc.stderr
    assert re.search(r"\[rank 0\] watchdog: no progress for \d+ s \(limit 6 s\) in checkpoint; stalled: rank 2 on "
                     r"nodeB \(in checkpoint; no heartbeat", proc.stderr), proc.stderr
    info = _info(a / "job")
    assert (info["status"], info["failed_rank"], info["failed_host"], info["failed_phase"]) == (
        "failed", 2, "nodeB", "checkpoint"), info
    left = sorted(p.name for p in a.parent.glob("ck.tmp-*"))
    assert len(left) == 1
    listed = subprocess.run([sys.executable, "-m", "distnet", "runs", "A"], cwd=a.parent, env=_env(),
                            capture_output=True, text=True, timeout=60)
    assert f"left by a save that did not finish: {a.parent / left[0]}" in listed.stdout, listed.stdout
    again = subprocess.run(["timeout", "-k", "5", LIMIT, mpiexec_path(), "-launcher", "fork", "-hosts", "nodeA:2",
                            "-n", "2", sys.executable, "-m", "distnet", "run", "cnn.yaml", *opts[1:], "--resume",
                            "auto"], cwd=a, env=_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "resumed from ../ck: epoch 0 in progress, 10 batch(es) of it done (written on 4 rank(s), grid 2x2)" \
        in again.stderr, again.stderr
    assert f"checkpoint ../ck: removed {left[0]}" in again.stderr and "left by a save that did not finish" in again.stderr
    assert not list(a.parent.glob("ck.tmp-*")) and (a.parent / "ck" / "index.h5").is_file()
    np.testing.assert_allclose(costs(a / "job"), costs(a / "whole"), rtol=1e-12)


def test_a_node_frozen_at_start_up_ends_the_job_by_the_watchdog(nodes):
    a, b = nodes
    proc = two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "job", "--watchdog", "6",
                     env={"DISTNET_FAULT_INJECT": "3:start-up:stop"})
    assert proc.returncode not in (0, 124, 137), proc.stderr
    assert re.search(r"watchdog: no progress for \d+ s \(limit 6 s\) in start-up; stalled: rank 3 on nodeB "
                     r"\((never heard|in start-up); no heartbeat", proc.stderr), proc.stderr
    info = _info(a / "job")
    assert (info["failed_rank"], info["failed_host"], info["failed_phase"]) == (3, "nodeB", "start-up"), info


def test_a_sharded_folder_that_a_node_cannot_see_is_refused_before_training(nodes):
    """`--checkpoint ck` is a relative path: each node would write its own `ck`, which the other
    cannot see. Before the first epoch, every rank says so in one line."""
    a, b = nodes
    proc = two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "job", "--sharded-checkpoint", "--checkpoint", "ck")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "epoch" not in proc.stdout
    assert f"[rank 2] distnet: error: cannot write checkpoint ck: rank 2 does not see the folder rank 0 writes it " \
           f"in (here {b}); a sharded checkpoint needs a folder every rank sees (a shared file system); on " \
           "node-local disks write a single file" in proc.stderr, proc.stderr
    info = _info(a / "job")
    assert info["status"] == "failed" and info["failed_rank"] == 2 and info["failed_phase"] == "data loading", info
    assert not list(a.glob("ck*")) and not list(b.glob("ck*"))


def test_no_message_is_left_unreceived_at_the_end_of_a_watched_run(nodes):
    """One rank per node: MPI's inter-node transport warned of the watchdog's heartbeats still
    in flight at the end (`UCX WARN unexpected tag-receive ... not matched`)."""
    a, b = nodes
    run = [sys.executable, "-m", "distnet", "run", "cnn.yaml", "-q", "--no-checkpoint", "--watchdog", "20"]
    proc = subprocess.run(["timeout", "-k", "5", LIMIT, mpiexec_path(), "-launcher", "fork", "-hosts",
                           "nodeA:1,nodeB:1", "-n", "1", "-wdir", str(a), *run, ":", "-n", "1", "-wdir", str(b), *run],
                          env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "WARN" not in proc.stderr + proc.stdout, proc.stderr


def test_a_launch_inside_a_launch_is_refused(nodes):
    """`srun -n 2 mpiexec -n 2 ...`: each mpiexec's ranks are the tasks of one srun task; two jobs
    would train side by side."""
    a, b = nodes
    proc = two_nodes(a, b, "cnn.yaml", "-q", env={"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
                                                   "SLURM_PROCID": "1"})
    assert proc.returncode == 2, proc.stderr
    assert "inside task 1 of an srun step of 2 tasks (SLURM_STEP_NUM_TASKS=2): srun started 2 copies of this " \
           "job (a launch inside a launch)" in proc.stderr
    assert not (a / "runs").exists()


def test_info_prints_every_rank_by_node(nodes):
    a, b = nodes
    cmd = [sys.executable, "-m", "distnet", "info"]
    proc = subprocess.run(["timeout", "-k", "5", LIMIT, mpiexec_path(), "-launcher", "fork", "-hosts",
                           "nodeA:2,nodeB:2", "-n", "4", *cmd], env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.count("   distnet: " + lines[0].split(": ", 1)[1]) == 1
    assert "node nodeA: rank(s) 0, 1" in lines and "node nodeB: rank(s) 2, 3" in lines
    assert all(any(x.startswith(f"  [rank {r}] ") for x in lines) for r in range(4))


def test_verify_full_finds_one_changed_image_that_the_sample_misses(nodes):
    a, b = nodes
    with h5py.File(b / "data.h5", "r+") as f:
        f["train/x"][150, 0, 3, 3] += 0.25         # one pixel of one of 300 images
    assert two_nodes(a, b, "cnn.yaml", "-q", "--no-run-dir", "--no-checkpoint",
                     "--set", "model.num_epochs=1").returncode == 0      # the sample does not see it
    proc = two_nodes(a, b, "cnn.yaml", "-q", "--no-run-dir", "--set", "datasets.0.verify=full")
    assert proc.returncode == 1, proc.stderr
    assert "data.h5: rank(s) 2, 3 on nodeB read data that differ from rank 0's (verify: full: train images rows " \
           "0-299 differ)" in proc.stderr, proc.stderr


def test_every_rank_logs_into_its_own_file(nodes):
    a, b = nodes
    proc = two_nodes(a, b, "cnn.yaml", "--no-checkpoint", "--log-dir", "logs", "--set", "model.num_epochs=1")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (a / "logs").iterdir()) == ["rank-00000.log", "rank-00001.log"]
    text = (b / "logs" / "rank-00003.log").read_text()
    assert "[rank 3 on nodeB] INFO phase: data loading" in text and "phase: final evaluation" in text, text
    assert "epoch: 0, total training error" in (a / "logs" / "rank-00000.log").read_text()
    shutil.rmtree(a / "logs")
