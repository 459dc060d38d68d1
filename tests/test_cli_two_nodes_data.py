"""Data only on rank 0's node, two nodes simulated on this machine: MPICH's hydra with the fork
launcher and two host names (``-hosts nodeA:2,nodeB:2``) makes MPI see two nodes (two
shared-memory groups), and per-host argument sets (``:``) give each node its own working
directory, so each has its own files. Every launch runs inside ``timeout``.

* ``read: root``, the data file in nodeA's folder only: the run's checkpoint and costs equal
  (bit for bit) those of ``read: every`` with a copy on both nodes, and the one-process oracle's
  up to summation order;
* ``cache_dir``: the first run fills each node's caches; a second run with the data gone from
  nodeA trains from them, to the same numbers; a rank without its cache then is a clear error;
* ``distnet check``, ``distnet evaluate`` and ``distnet predict`` with data, images and
  checkpoint on nodeA only: OK, and the one-process results.
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from distnet.comm.launcher import launch_env, mpiexec_path
from tests.tiny import CNN, experiment, write_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 240


def _mpiexec():
    found = mpiexec_path()
    if found is None or "hydra" not in subprocess.run([found, "--version"], capture_output=True,
                                                      text=True).stdout.lower():
        pytest.skip("needs MPICH's hydra mpiexec (per-host -wdir, the fork launcher)")
    return found


def _env():
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL"))}
    env = launch_env(4, base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def two_nodes(node_a, node_b, *args, ok=True):
    """``distnet ARGS`` on 2 + 2 ranks, nodeA's in ``node_a``, nodeB's in ``node_b``."""
    cmd = [sys.executable, "-m", "distnet", *args]
    full = ["timeout", "-k", "10", str(LIMIT), _mpiexec(), "-launcher", "fork", "-hosts", "nodeA:2,nodeB:2",
            "-n", "2", "-wdir", str(node_a), *cmd, ":", "-n", "2", "-wdir", str(node_b), *cmd]
    proc = subprocess.run(full, env=_env(), capture_output=True, text=True, timeout=LIMIT + 30)
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == ok, out[-4000:]
    return out


def one_process(folder, *args):
    proc = subprocess.run([sys.executable, "-m", "distnet", *args], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=LIMIT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


def _params(path):
    with h5py.File(path, "r") as f:
        return {k: f[f"params/{k}/value"][()] for k in f["params"]}


def _costs(path):
    with open(path) as f:
        return [json.loads(line)["cost"] for line in f if '"cost"' in line]


RUN = ("run", "exp.yaml", "--no-run-dir", "--metrics", "m.jsonl", "--checkpoint", "ck.h5", "--force", "-q")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Folders ``one`` (the oracle), ``A`` and ``B`` (the nodes) and ``every`` / ``everyB`` (a
    copy on both nodes); the experiment, a 2x2 halopar CNN in float64, in each."""
    base = tmp_path_factory.mktemp("nodes")
    dirs = {k: base / k for k in ("one", "A", "B", "every", "everyB")}
    for d in dirs.values():
        d.mkdir()
    write_data(dirs["A"] / "data.h5", n_train=48, n_test=16)
    for k in ("one", "every", "everyB"):
        shutil.copy(dirs["A"] / "data.h5", dirs[k] / "data.h5")
    text = experiment(CNN, "data.h5", dist=True)
    shared = text.replace("HDF5Dataset {dist_flag: True, ",
                          "HDF5Dataset {dist_flag: True, read: root, read_chunk_mb: 0.01, cache_dir: cache, ")
    (dirs["one"] / "exp.yaml").write_text(text)     # one process: grid 1x1
    for k in ("every", "everyB"):
        (dirs[k] / "exp.yaml").write_text(text)
    for k in ("A", "B"):
        (dirs[k] / "exp.yaml").write_text(shared)
    with h5py.File(dirs["A"] / "data.h5", "r") as f:
        np.save(dirs["A"] / "new.npy", f["test/x"][:7])
    shutil.copy(dirs["A"] / "new.npy", dirs["one"] / "new.npy")
    one_process(dirs["one"], *RUN)
    two_nodes(dirs["every"], dirs["everyB"], *RUN)
    two_nodes(dirs["A"], dirs["B"], *RUN)
    return dirs


def test_data_on_rank0s_node_only_trains_as_a_shared_copy(nodes):
    assert not (nodes["B"] / "data.h5").exists()
    every, root, one = (_params(nodes[k] / "ck.h5") for k in ("every", "A", "one"))
    assert every.keys() == root.keys() == one.keys()
    for k in every:
        np.testing.assert_array_equal(root[k], every[k])          # the same numbers, bit for bit
        np.testing.assert_allclose(root[k], one[k], rtol=1e-12, atol=1e-14)   # summation order
    assert _costs(nodes["A"] / "m.jsonl") == _costs(nodes["every"] / "m.jsonl")
    np.testing.assert_allclose(_costs(nodes["A"] / "m.jsonl"), _costs(nodes["one"] / "m.jsonl"), rtol=1e-12)
    assert sorted(os.listdir(nodes["A"] / "cache")) == ["data.rank0of4.h5", "data.rank1of4.h5"]
    assert sorted(os.listdir(nodes["B"] / "cache")) == ["data.rank2of4.h5", "data.rank3of4.h5"]


def test_one_reader_per_node(nodes):
    """read: node with a copy on each node: ranks 0 and 2 read, each for its node; the numbers
    are those of read: every."""
    for k in ("every", "everyB"):
        text = (nodes[k] / "exp.yaml").read_text()
        (nodes[k] / "node.yaml").write_text(text.replace("HDF5Dataset {dist_flag: True, ",
                                                         "HDF5Dataset {dist_flag: True, read: node, "))
    two_nodes(nodes["every"], nodes["everyB"], "run", "node.yaml", "--no-run-dir", "--metrics", "mn.jsonl",
              "--checkpoint", "ckn.h5", "-q")
    node, every = _params(nodes["every"] / "ckn.h5"), _params(nodes["every"] / "ck.h5")
    for k in every:
        np.testing.assert_array_equal(node[k], every[k])
    assert _costs(nodes["every"] / "mn.jsonl") == _costs(nodes["every"] / "m.jsonl")


def test_second_run_from_the_node_caches_without_the_data(nodes, tmp_path):
    first = _params(nodes["A"] / "ck.h5")
    shutil.move(nodes["A"] / "data.h5", tmp_path / "data.h5")
    try:
        two_nodes(nodes["A"], nodes["B"], *RUN)
        again = _params(nodes["A"] / "ck.h5")
        for k in first:
            np.testing.assert_array_equal(again[k], first[k])
        shutil.move(nodes["B"] / "cache" / "data.rank3of4.h5", tmp_path / "c3.h5")
        out = two_nodes(nodes["A"], nodes["B"], *RUN, ok=False)
        assert "data.h5 is not on the reading rank's node" in out and "rank(s) 3" in out
    finally:
        shutil.move(tmp_path / "data.h5", nodes["A"] / "data.h5")
        if (tmp_path / "c3.h5").exists():
            shutil.move(tmp_path / "c3.h5", nodes["B"] / "cache" / "data.rank3of4.h5")


def test_evaluate_and_predict_with_everything_on_rank0s_node(nodes):
    shutil.rmtree(nodes["B"] / "cache", ignore_errors=True)     # nodeB: nothing at all,
    os.remove(nodes["B"] / "exp.yaml")       # not even the experiment: every command builds from rank 0's
    out = two_nodes(nodes["A"], nodes["B"], "check", "exp.yaml")    # distnet check: the reader's header too
    assert "exp.yaml: OK (4 layers, input (1, 12, 10), output (3,); on these 4 ranks" in out
    out = two_nodes(nodes["A"], nodes["B"], "evaluate", "exp.yaml", "--checkpoint", "ck.h5")
    want = one_process(nodes["one"], "evaluate", "exp.yaml", "--checkpoint", str(nodes["A"] / "ck.h5"))
    rates = [line.split(":", 1)[1] for line in out.splitlines() if "misclass rate" in line]
    assert rates == [line.split(":", 1)[1] for line in want.splitlines() if "misclass rate" in line]
    assert len(rates) == 2
    two_nodes(nodes["A"], nodes["B"], "predict", "exp.yaml", "--checkpoint", "ck.h5", "--data", "new.npy",
              "-o", "pred.h5", "--force")
    one_process(nodes["one"], "predict", "exp.yaml", "--checkpoint", str(nodes["A"] / "ck.h5"), "--data",
                "new.npy", "-o", "pred.h5", "--force")
    with h5py.File(nodes["A"] / "pred.h5", "r") as got, h5py.File(nodes["one"] / "pred.h5", "r") as want:
        np.testing.assert_allclose(got["probabilities"][()], want["probabilities"][()], rtol=1e-12)
        np.testing.assert_array_equal(got["labels"][()], want["labels"][()])
    assert sorted(os.listdir(nodes["B"])) == ["cache"]   # no experiment, data, images nor checkpoint there
    assert sorted(os.listdir(nodes["B"] / "cache")) == ["data.rank2of4.h5", "data.rank3of4.h5"]   # refilled
