"""One job on two nodes, simulated on this machine: MPICH's Hydra with ``-launcher fork -hosts
nodeA:2,nodeB:2`` starts ranks 0-1 as one node and ranks 2-3 as another (MPI's shared-memory
split sees two nodes), and ``:``-separated argument sets give each node its own working
directory (``-wdir``), so each node has its own files, as nodes without a shared file system do.

Each distributed run is compared with the one-process run of the same experiment on rank 0's
node (the oracle: float64 costs equal up to summation order)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distnet.comm.launcher import launch_env, mpiexec_path
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parent.parent
LIMIT = "150"


def _env():
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL", "SLURM_", "I_MPI_"))}
    base.pop("DISTNET_RUNS_DIR", None)       # each node's runs/ in its own working directory
    return launch_env(4, base)


def two_nodes(a, b, *args, env=None, a_args=(), b_args=()):
    """``distnet run ARGS`` on ranks 0-1 in folder ``a`` (node A) and ranks 2-3 in ``b`` (node B),
    each node with its ``a_args`` / ``b_args`` besides."""
    if shutil.which("timeout") is None:
        pytest.skip("needs timeout(1)")
    run = [sys.executable, "-m", "distnet", "run", *args]
    cmd = ["timeout", "-k", "5", LIMIT, mpiexec_path(), "-launcher", "fork", "-hosts", "nodeA:2,nodeB:2",
           "-n", "2", "-wdir", str(a), *run, *a_args, ":", "-n", "2", "-wdir", str(b), *run, *b_args]
    proc = subprocess.run(cmd, env=dict(_env(), **(env or {})), capture_output=True, text=True)
    assert proc.returncode not in (124, 137), f"timed out\n{proc.stderr}"
    return proc


def one_process(folder, *args):
    proc = subprocess.run(["timeout", LIMIT, sys.executable, "-m", "distnet", "run", *args], cwd=folder,
                          env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def costs(run_dir):
    lines = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return np.array([x["cost"] for x in lines if "cost" in x])


def runs_in(folder):
    d = Path(folder) / "runs"
    return sorted(d.iterdir()) if d.exists() else []


@pytest.fixture
def nodes(tmp_path):
    """Folders ``A`` and ``B``, each with its own copy of the data file ``data.h5``; the experiment
    ``cnn.yaml`` (2x2 tiles of a float64 CNN, reading ``data.h5`` relative to the node's folder)
    on node A only."""
    a, b = tmp_path / "A", tmp_path / "B"
    for d in (a, b):
        d.mkdir()
        write_data(d / "data.h5")
    (a / "cnn.yaml").write_text(experiment(CNN, "data.h5", dist=True).replace("num_epochs: 4,", "num_epochs: 2,"))
    return a, b


def test_the_experiment_is_read_on_rank_0s_node_only(nodes):
    """Node B has no experiment file, then one that differs (epochs, learning rate): both train
    rank 0's experiment, with the one-process numbers, and write one run directory, on node A."""
    a, b = nodes
    one_process(a, "cnn.yaml", "-q", "--run-dir", "oracle")
    oracle = costs(a / "oracle")
    assert len(oracle) == 2
    for b_file in (None, "num_epochs: 5, batch_size: 8, shuffle: True, learning_rate: 0.7,"):
        if b_file is not None:
            (b / "cnn.yaml").write_text((a / "cnn.yaml").read_text().replace(
                "num_epochs: 2, batch_size: 8, shuffle: True, learning_rate: 0.1,", b_file))
            assert (b / "cnn.yaml").read_text() != (a / "cnn.yaml").read_text()
        proc = two_nodes(a, b, "cnn.yaml", "-q", "--no-checkpoint")
        assert proc.returncode == 0, proc.stderr
        (run,) = runs_in(a)
        assert runs_in(b) == []
        np.testing.assert_allclose(costs(run), oracle, rtol=1e-12)
        assert json.loads((run / "run.json").read_text())["topology"]["size"] == 4
        shutil.rmtree(run)


def test_a_differing_data_copy_is_refused_naming_its_ranks(nodes):
    a, b = nodes
    write_data(b / "data.h5", seed=1)        # node B converted its copy again: other images and labels
    proc = two_nodes(a, b, "cnn.yaml", "-q")
    assert proc.returncode == 1, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "distnet: error:" in x]
    assert len(lines) == 4 and all("data.h5: rank(s) 2, 3 read data that differ from rank 0's (rank 2: other "
                                   "test images; other test labels; other train images; other train labels)" in x
                                   for x in lines), proc.stderr
    assert "epoch" not in proc.stdout + proc.stderr
    (run,) = runs_in(a)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and "rank(s) 2, 3 read data that differ" in info["error"]


def test_a_data_file_missing_on_another_node_writes_nothing(nodes):
    a, b = nodes
    os.remove(b / "data.h5")
    proc = two_nodes(a, b, "cnn.yaml", "-q")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"rank 2, 3: MissingDataError: cnn.yaml:3: key 'path': HDF5 dataset file data.h5 does not exist" in proc.stderr
    assert runs_in(a) == [] and runs_in(b) == []


def test_a_failure_on_node_b_is_recorded_on_node_a(nodes):
    """Rank 2 fails mid-run; its node cannot see rank 0's run directory, yet run.json says failed,
    which rank and why (not running)."""
    a, b = nodes
    proc = two_nodes(a, b, "cnn.yaml", "-q", env={"DISTNET_FAULT_INJECT": "2:1"})
    assert proc.returncode not in (0, 124, 137), proc.stderr
    (run,) = runs_in(a)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["failed_rank"] == 2, info
    assert info["error"].startswith("InjectedFault: fault injected by DISTNET_FAULT_INJECT=2:1 on rank 2")


def test_a_config_error_names_file_and_line_on_every_rank(nodes):
    """Node B has no experiment file: its ranks report rank 0's file and line all the same."""
    a, b = nodes
    (a / "cnn.yaml").write_text((a / "cnn.yaml").read_text().replace("batch_size: 8,", "batch_size: 8, bogus_key: 1,"))
    proc = two_nodes(a, b, "cnn.yaml", "-q")
    assert proc.returncode == 2, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if "distnet: error:" in x]
    assert len(errors) == 4 and len({x.split("] ", 1)[1] for x in errors}) == 1, proc.stderr
    assert errors[0].split("] ", 1)[1].startswith("distnet: error: cnn.yaml:5: "), errors[0]
    assert "bogus_key" in errors[0] and runs_in(a) == []


def test_an_experiment_file_missing_on_rank_0s_node_is_said_on_every_rank(nodes):
    a, b = nodes
    os.rename(a / "cnn.yaml", b / "cnn.yaml")           # only node B has it: rank 0 cannot read it
    proc = two_nodes(a, b, "cnn.yaml", "-q")
    assert proc.returncode == 2, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if "distnet: error:" in x]
    assert len(errors) == 4 and all("distnet: error: cnn.yaml: cannot read experiment file: No such file or directory"
                                    in x for x in errors), proc.stderr


def test_options_given_on_one_node_only_follow_rank_0(nodes):
    """Node B alone is started with options that change the run (checkpoints every epoch, in
    shards, a watchdog): had its ranks followed them, they would wait in a checkpoint's
    collectives that node A never joins. Every rank runs as rank 0 was told instead, node B's
    ranks say so in one line each, and the numbers are those of the run without the options."""
    a, b = nodes
    proc = two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "plain")
    assert proc.returncode == 0, proc.stderr
    extra = ["--checkpoint-every", "1", "--watchdog", "30", "--sharded-checkpoint"]
    proc = two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "told", b_args=extra)
    assert proc.returncode == 0, proc.stderr
    warned = [x for x in proc.stderr.splitlines() if "distnet: warning:" in x]
    assert sorted(x.split("]")[0] for x in warned) == ["[rank 2", "[rank 3"], proc.stderr
    assert all("differ from rank 0's (this rank: --checkpoint-every 1 --sharded-checkpoint --watchdog 30; "
               "rank 0: none): every rank runs as rank 0 was told" in x for x in warned), warned
    np.testing.assert_array_equal(costs(a / "told"), costs(a / "plain"))
    assert (a / "told" / "checkpoint.h5").is_file()       # rank 0's: one file, at the end only
    records = [json.loads(x) for x in (a / "told" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("checkpoint", "").endswith("checkpoint.h5") for r in records if "epoch" in r] == [False, True]
    assert "watchdog" not in (a / "told" / "resolved.yaml").read_text()
    assert runs_in(b) == [] and not (b / "told").exists()


def test_a_checkpoint_on_rank_0s_node_resumes_every_rank(nodes):
    """Only node A has the checkpoint (a run directory node B cannot see): rank 0 reads it and
    hands it to every rank, whether node B was given the same --resume (nothing to say) or none
    (its ranks say they follow rank 0); the resumed run's numbers are the uninterrupted one's."""
    a, b = nodes
    assert two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "whole").returncode == 0
    assert two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", "first", "--set", "model.num_epochs=1").returncode == 0
    for name, a_args in (("same", []), ("rank0", ["--resume", "first"])):
        both = ["--resume", "first"] if not a_args else []
        proc = two_nodes(a, b, "cnn.yaml", "-q", "--run-dir", name, *both, a_args=a_args)
        assert proc.returncode == 0, proc.stderr
        warned = [x for x in proc.stderr.splitlines() if "distnet: warning:" in x]
        if a_args:
            assert len(warned) == 2 and all("(this rank: none; rank 0: --resume first)" in x for x in warned), warned
        else:
            assert warned == [], proc.stderr
        np.testing.assert_array_equal(costs(a / name), costs(a / "whole"))
