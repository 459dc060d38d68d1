"""``distnet run`` when things go wrong, and the everyday commands, end to end through the CLI:
run directories, --resume composed with --set, checkpoints kept safe, one rank's failure ending
the whole job (never a hang), bad inputs tried deliberately (each a clear message on every rank
and a non-zero exit), ``distnet show``, ``distnet plot`` and ``compare --plot``.

Every command runs under ``timeout``; the multi-rank ones use 2 or 3 ranks."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from distnet.comm.launcher import launch_env, mpiexec_path
from distnet.models.checkpoint import read_checkpoint
from tests.tiny import CNN, experiment, write_data

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def distnet(*args, n=1, env=None, cwd=None):
    cmd = [sys.executable, "-m", "distnet", *args]
    if n > 1:
        cmd = [mpiexec_path(), "-n", str(n), *cmd]
    full_env = launch_env(n)
    full_env.update(env or {})
    return subprocess.run(["timeout", "-k", "5", str(TIMEOUT), *cmd], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True)


def ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("rel")
    data = write_data(d / "data.h5")
    for name, dist in (("cnn", False), ("cnn_dist", True)):
        (d / f"{name}.yaml").write_text(experiment(CNN, data, dist))
    return d


def metrics(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


# -- run directories, checkpoints, resume ------------------------------------------------------

def test_options_are_keys_of_the_resolved_experiment(env):
    """The options that change the run set keys of the experiment before it is built:
    resolved.yaml says what the run did, and builds the experiment that ran."""
    from distnet.config import load_experiment
    d = env / "run-keys"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "--run-dir", str(d), "-v",
               "--checkpoint-every", "1", "--watchdog", "30", "--sharded-checkpoint"))
    resolved = (d / "resolved.yaml").read_text()
    assert resolved.splitlines()[1:5] == ["#   --set model.num_epochs=1", "#   --checkpoint-every 1",
                                          "#   --sharded-checkpoint", "#   --watchdog 30"]
    exp = load_experiment(str(d / "resolved.yaml"))
    assert (exp.checkpoint_every, exp.checkpoint_sharded, exp.watchdog, exp.logging) == (1, True, 30.0, {"level": 10})
    assert (d / "checkpoint.h5").is_dir()       # the sharded folder, in the run directory
    d = env / "run-none"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "--run-dir", str(d), "--no-checkpoint"))
    assert load_experiment(str(d / "resolved.yaml")).checkpoint_enabled is False
    assert not (d / "checkpoint.h5").exists() and json.loads((d / "run.json").read_text())["checkpoint"] is None


def test_run_directory_then_resume_with_overrides(env):
    a, b, c = env / "run-a", env / "run-b", env / "run-c"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=2", "--run-dir", str(a),
               "--checkpoint-every", "1"))
    assert sorted(os.listdir(a)) == ["checkpoint.h5", "experiment.yaml", "log.txt", "metrics.jsonl",
                                     "resolved.yaml", "run.json"]
    info = json.loads((a / "run.json").read_text())
    assert info["status"] == "finished" and info["overrides"] == ["model.num_epochs=2"]
    assert info["topology"] == {"size": 1, "grid": [1, 1], "data": 1, "pipe": 1}
    assert {"distnet", "numpy", "mpi", "h5py"} <= set(info["versions"])
    assert {"setup", "data", "train", "total"} <= set(info["timings"])
    recs = metrics(a)
    assert [r.get("epoch") for r in recs] == [0, 1, None] and recs[-1]["final"]
    epoch_walls = [r["seconds"] for r in recs[:2]]  # recorded, not judged
    timing_keys = {"seconds", "checkpoint_seconds"}
    assert all(w >= 0 for w in epoch_walls) and timing_keys <= set(recs[0])
    assert (a / "experiment.yaml").read_text() == (env / "cnn.yaml").read_text()
    assert "num_epochs: 2" in (a / "resolved.yaml").read_text()
    saved = (a / "checkpoint.h5").read_bytes()

    ok(distnet("run", str(env / "cnn.yaml"), "--resume", str(a),      # a run directory: its checkpoint.h5
               "--set", "model.num_epochs=4", "--run-dir", str(b)))
    proc = ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=4", "--run-dir", str(c)))
    assert "run directory: " + str(c) in proc.stderr
    kb, kc = read_checkpoint(b / "checkpoint.h5"), read_checkpoint(c / "checkpoint.h5")
    assert kb.epoch == kc.epoch == 3
    for pb, pc in zip(kb.params, kc.params):
        np.testing.assert_array_equal(pb["value"], pc["value"])
        np.testing.assert_array_equal(pb["velocity"], pc["velocity"])
    rb, rc = metrics(b), metrics(c)
    assert [r["cost"] for r in rb[:-1]] == [r["cost"] for r in rc[:-1]]
    assert [r.get("from_checkpoint", False) for r in rb[:-1]] == [True, True, False, False]
    assert rb[-1]["test_misclass"] == rc[-1]["test_misclass"] and rb[-1]["start_epoch"] == 2
    assert json.loads((b / "run.json").read_text())["resume"] == str(a / "checkpoint.h5")
    assert (a / "checkpoint.h5").read_bytes() == saved      # the source is never touched
    (env / "empty").mkdir()
    bad = distnet("run", str(env / "cnn.yaml"), "--resume", str(env / "empty"), "--no-run-dir")
    assert bad.returncode == 2 and "is a folder without checkpoint.h5" in bad.stderr, bad.stderr


def test_default_run_directory_and_no_run_dir(env, tmp_path):
    runs = tmp_path / "runs"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "-q",
               env={"DISTNET_RUNS_DIR": str(runs)}))
    (made,) = runs.iterdir()
    assert made.name.startswith("cnn-") and (made / "checkpoint.h5").exists()
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "--no-run-dir", "-q",
               env={"DISTNET_RUNS_DIR": str(runs)}))
    assert len(list(runs.iterdir())) == 1


def test_a_run_directory_holding_a_run_is_not_overwritten(env):
    d = env / "run-twice"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "--run-dir", str(d), "-q"))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    proc = distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "--run-dir", str(d))
    assert proc.returncode == 1 and "already holds a run" in proc.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


@pytest.mark.parametrize("in_memory", ["true", "false"])
def test_nan_data_stops_on_every_rank_and_keeps_the_checkpoint(env, tmp_path, in_memory):
    """A NaN pixel (only in rank 0's tile of a 2x1 grid) is refused before training, on every
    rank, naming the file and the image, in memory and streamed (it used to train into a NaN
    cost)."""
    bad = tmp_path / "nan.yaml"
    bad.write_text(experiment(CNN, write_data(tmp_path / "nan.h5", nan_at=9), dist=True).replace(
        "HDF5Dataset {", f"HDF5Dataset {{in_memory: {in_memory}, "))
    ck = tmp_path / "ck.h5"
    ok(distnet("run", str(env / "cnn_dist.yaml"), "--set", "model.num_epochs=1", "--checkpoint", str(ck),
               "--no-run-dir", "-q", n=2))
    saved = ck.read_bytes()
    # (ck belongs to another experiment: --force lets this run replace it, had it finished)
    proc = distnet("run", str(bad), "--set", "model.shuffle=False", "--checkpoint", str(ck),
                   "--checkpoint-every", "1", "--run-dir", str(tmp_path / "r"), "--force", n=2)
    assert proc.returncode in (1, 2), proc.stderr
    msg = "nan.h5 (train) holds NaN or inf values (image 9)"
    assert f"[rank 0] distnet: error: {tmp_path}/{msg}" in proc.stderr
    assert "[rank 1] distnet: error: failed on 1 other rank(s): rank 0: DataError: " in proc.stderr
    assert "Traceback" not in proc.stderr
    assert ck.read_bytes() == saved
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["status"] == "failed" and msg in info["error"]


def test_nan_cost_stops_on_every_rank_and_keeps_the_checkpoint(env, tmp_path):
    # NaN pixels are refused when the data is loaded (tests/unit/test_nonfinite.py); a NaN cost
    # comes from RectLin layers and a huge learning rate
    relu = CNN.replace("padding: 1,", "padding: 1, activation: !obj:distnet.activations.RectLin {},")
    bad = tmp_path / "nan.yaml"
    bad.write_text(experiment(relu, env / "data.h5", dist=True).replace("learning_rate: 0.1", "learning_rate: 1e300"))
    ck = tmp_path / "ck.h5"
    ok(distnet("run", str(env / "cnn_dist.yaml"), "--set", "model.num_epochs=1", "--checkpoint", str(ck),
               "--no-run-dir", "-q", n=2))
    saved = ck.read_bytes()
    # --force: the checkpoint belongs to another experiment file (it is kept all the same: the run fails)
    proc = distnet("run", str(bad), "--set", "model.shuffle=False", "--checkpoint", str(ck), "--force",
                   "--checkpoint-every", "1", "--run-dir", str(tmp_path / "r"), n=2)
    assert proc.returncode == 1, proc.stderr
    for rank in (0, 1):
        assert f"[rank {rank}] distnet: error: the cost became nan in epoch 0, batch " in proc.stderr
    assert "Traceback" not in proc.stderr
    assert ck.read_bytes() == saved
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["status"] == "failed" and "the cost became nan in epoch 0, batch " in info["error"]


# -- no hangs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["grid", "data replicas"])
def test_a_failure_on_one_rank_ends_the_whole_job(env, tmp_path, kind):
    """Rank 1 raises (a bug, not a DistnetError) while rank 0 waits in that step's collectives."""
    if kind == "grid":
        exp = env / "cnn_dist.yaml"
    else:  # not dist_flag: the abort hook must be there too
        exp = tmp_path / "dp.yaml"
        exp.write_text(experiment(CNN, env / "data.h5").replace("Experiment {", "Experiment { data: 2,", 1))
    proc = distnet("run", str(exp), "--no-run-dir", n=2, env={"DISTNET_FAULT_INJECT": "1:1"})
    # 124/137: the timeout around mpiexec ended a hang
    assert proc.returncode not in (0, 124, 137), f"exit {proc.returncode}: {proc.stderr}"
    assert "[rank 1] InjectedFault: fault injected by DISTNET_FAULT_INJECT=1:1 on rank 1 before epoch 1" \
        in proc.stderr
    assert "aborting all 2 ranks" in proc.stderr and "epoch: 0, total training error" in proc.stderr


# -- bad input ---------------------------------------------------------------------------------

BAD_CONFIGS = {
    "malformed YAML": (lambda t: t.replace(".h5}],", ".h5}]],"), ":3: malformed YAML: while parsing a flow mapping"),
    "python tag": (lambda t: t.replace("rng_seed: 5", "rng_seed: !!python/object/apply:os.getpid []"),
                   ":2: malformed YAML: could not determine a constructor for the tag"),
    "unknown class": (lambda t: t.replace("layers.MaxPoolingLayer", "layers.MaxPool"),
                      ":10: unknown class !obj:distnet.layers.MaxPool; did you mean"),
    "stages": (lambda t: t.replace("num_epochs: 4,", "num_epochs: 4, stages: [9],", 1),
               ":5: key 'stages': stages[0] = 9 is out of range: a stage must begin at a layer index 1 .. 3"),
    "inconsistent shape": (lambda t: t.replace("name: hidden, nout: 5,", "name: hidden, nout: 5, nin: 7,"),
                           "key 'nin': layer 'hidden': nin is 7 but its input has 90 features"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_experiment_files(env, tmp_path, case):
    change, words = BAD_CONFIGS[case]
    bad = tmp_path / "bad.yaml"
    bad.write_text(change((env / "cnn.yaml").read_text()))
    proc = distnet("run", str(bad), "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2 and f"distnet: error: {bad}" in proc.stderr and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()   # nothing written


def test_launch_size_not_matching_the_topology(env, tmp_path):
    exp = tmp_path / "d2.yaml"
    exp.write_text((env / "cnn_dist.yaml").read_text().replace("dist_flag: True,", "dist_flag: True, data: 2,", 1))
    proc = distnet("run", str(exp), "--no-run-dir", n=3)
    assert proc.returncode != 0
    assert proc.stderr.count("the run has 3 ranks, which data=2 x pipe=1 does not divide") == 3, proc.stderr


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_config_error_of_rank_0_alone_exits_2_on_any_rank_count(env, tmp_path, n):
    """The log file (opened by rank 0 only) cannot be created: the other ranks learn it from rank
    0 (RemoteError) and exit as rank 0 does, 2 for a ConfigError, whichever rank aborts first."""
    exp = tmp_path / "log.yaml"
    log = tmp_path / "not-a-folder" / "log.txt"
    (tmp_path / "not-a-folder").write_text("a file")
    exp.write_text((env / "cnn_dist.yaml").read_text().replace(
        "dist_flag: True,", f"dist_flag: True, logging: {{filename: {log}}},", 1))
    for _ in range(2 if n > 1 else 1):   # the first rank to abort decides mpiexec's status
        proc = distnet("run", str(exp), "--no-run-dir", n=n)
        assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr}"
        assert proc.stderr.count(f"cannot open the log file {log}") == n, proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_missing_or_truncated_data_file(env, tmp_path, damage):
    data = tmp_path / "data.h5"
    if damage == "truncated":
        blob = (env / "data.h5").read_bytes()
        data.write_bytes(blob[: len(blob) // 3])
    exp = tmp_path / "e.yaml"
    exp.write_text(experiment(CNN, data))
    proc = distnet("run", str(exp), "--no-run-dir")
    words = "does not exist" if damage == "missing" else "cannot open HDF5 file"
    assert proc.returncode == 1 and str(data) in proc.stderr and words in proc.stderr, proc.stderr


def test_a_per_rank_data_path_under_mpiexec_is_said_by_every_rank(env, tmp_path):
    """A data path with {rank} (per-rank shard files, as neon's serialized_path): every rank names
    the key's YAML line and the reason ({rank} is filled in serialized_path only), exit 1."""
    shard = tmp_path / "shard_{rank}.h5"
    (tmp_path / "shard_0.h5").write_bytes((env / "data.h5").read_bytes())   # rank 0's is there
    exp = tmp_path / "e.yaml"
    exp.write_text((env / "cnn_dist.yaml").read_text().replace(str(env / "data.h5"), f"'{shard}'"))
    proc = distnet("run", str(exp), "--no-run-dir", n=2)
    assert proc.returncode == 1, proc.stderr
    line = next(i for i, ln in enumerate(exp.read_text().splitlines(), 1) if "HDF5Dataset" in ln)
    for rank in (0, 1):
        assert (f"[rank {rank}] distnet: error: {exp}:{line}: key 'path': HDF5 dataset file {shard} does not "
                "exist: {rank} and {size} are filled in serialized_path only") in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_mnist_files_are_listed(tmp_path):
    exp = tmp_path / "m.yaml"
    exp.write_text((ROOT / "experiments" / "mnist_cnn.yaml").read_text().replace("./datasets", str(tmp_path)))
    proc = distnet("run", str(exp), "--no-run-dir")
    assert proc.returncode == 1 and "train-images-idx3-ubyte" in proc.stderr, proc.stderr


def test_a_corrupted_shard_is_rebuilt_on_its_rank(env, tmp_path):
    exp = tmp_path / "cached.yaml"
    exp.write_text((env / "cnn_dist.yaml").read_text().replace(
        "HDF5Dataset {", f"HDF5Dataset {{serialized_path: '{tmp_path}/cache-{{rank}}of{{size}}.h5', "))
    ok(distnet("run", str(exp), "--metrics", str(tmp_path / "a.jsonl"), "--no-run-dir", n=2))
    shard = tmp_path / "cache-1of2.h5"
    shard.write_bytes(shard.read_bytes()[:500])
    proc = ok(distnet("run", str(exp), "--metrics", str(tmp_path / "b.jsonl"), "--no-run-dir", n=2))
    assert "[rank 1]" in proc.stderr and "rebuilding" in proc.stderr
    costs = [[json.loads(line).get("cost") for line in (tmp_path / f).read_text().splitlines()]
             for f in ("a.jsonl", "b.jsonl")]
    assert costs[0] == costs[1] and len(costs[0]) == 5
    with h5py.File(shard, "r"):
        pass   # rebuilt whole


def test_a_corrupted_checkpoint_is_refused_on_every_rank(env, tmp_path):
    bad = tmp_path / "ck.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(2000))
    proc = distnet("run", str(env / "cnn_dist.yaml"), "--resume", str(bad), "--run-dir", str(tmp_path / "r"), n=2)
    assert proc.returncode == 1
    assert proc.stderr.count(f"distnet: error: checkpoint {bad}: not a readable HDF5 file") == 2, proc.stderr
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "failed"


# -- show, plot, compare --plot -----------------------------------------------------------------

def test_show(env):
    out = ok(distnet("show", str(env / "cnn_dist.yaml"), "-n", "4")).stdout
    assert "4 rank(s) = data 1 x pipe 1 x grid 2x2" in out
    # hidden: 5 x 90 weights (3 maps of 6x5); rank 0 holds the columns of its 3x3 tile: 5 x 27
    assert " 450 " in out and "135 (shard)" in out
    proc = distnet("show", str(env / "cnn_dist.yaml"), "-n", "200")
    assert proc.returncode == 1 and "no process grid of 200 spatial ranks" in proc.stderr


def test_plot_and_compare_plot(env, tmp_path):
    pytest.importorskip("matplotlib")
    a, b = tmp_path / "a", tmp_path / "b"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "eval_every=1", "--run-dir", str(a), "-q"))
    ok(distnet("run", str(env / "cnn_dist.yaml"), "--set", "eval_every=2", "--run-dir", str(b), "-q", n=2))
    assert "test_misclass" in metrics(a)[0] and "test_misclass" in metrics(b)[1]
    out = tmp_path / "ab.png"
    ok(distnet("plot", str(a), str(b), "-o", str(out)))
    assert out.read_bytes()[:4] == b"\x89PNG"
    cmp = tmp_path / "cmp.png"
    proc = ok(distnet("compare", str(env / "cnn.yaml"), str(env / "cnn_dist.yaml"), "-n", "2",
                      "--cost-tol", "1e-9", "--plot", str(cmp), "--set", "model.num_epochs=2"))
    assert "AGREE" in proc.stdout and cmp.read_bytes()[:4] == b"\x89PNG"


def test_compare_plot_that_cannot_be_written_is_refused_before_the_runs(env, tmp_path):
    """--plot into a folder that cannot be made was found only after both runs had trained."""
    pytest.importorskip("matplotlib")
    (tmp_path / "file").write_text("not a folder")
    png = tmp_path / "file" / "cmp.png"
    proc = distnet("compare", str(env / "cnn.yaml"), str(env / "cnn_dist.yaml"), "-n", "2", "--plot", str(png))
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout   # no run started
    assert proc.stderr.strip() == f"distnet: error: cannot write plot {png}: {tmp_path / 'file'} is not a directory"


def test_a_metrics_file_that_fills_the_disk_mid_run_under_mpiexec_every_rank_says_why(env, tmp_path):
    """Rank 0 writes --metrics as the run goes: its failure (a full disk after the file was
    created) reached rank 0's stderr only, the other ranks were killed without a word."""
    from tests.test_cli_files import completely_full
    with completely_full(tmp_path / "full") as full:
        m = full / "m.jsonl"
        proc = distnet("run", str(env / "cnn_dist.yaml"), "--no-run-dir", "--no-checkpoint", "--metrics", str(m),
                       "-q", n=2)
        assert proc.returncode == 1, proc.stderr
        for rank in (0, 1):
            line = next(l for l in proc.stderr.splitlines() if l.startswith(f"[rank {rank}] distnet: error:"))
            assert f"cannot write metrics file {m}: No space left on device" in line, proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["data convert", "data mnist-sample", "distribute", "plot"])
def test_one_process_commands_that_write_files_under_mpiexec_say_so_on_every_rank(env, tmp_path, command):
    """Each rank ran the command: N conversions of one file, one of them refusing the file another
    rank had just written ('already exists', exit 2) while the others said 'wrote'."""
    out = tmp_path / "out"
    args = {"data convert": ["data", "convert", str(env / "data.h5"), str(out) + ".h5"],
            "data mnist-sample": ["data", "mnist-sample", str(out)],
            "distribute": ["distribute", str(env / "cnn.yaml"), "-o", str(out) + ".yaml"],
            "plot": ["plot", str(env / "data.h5"), "-o", str(out) + ".png"]}[command]
    proc = distnet(*args, n=2)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count(f"distnet: error: distnet {command} runs on one process: run it without mpiexec") \
        == 2, proc.stderr
    assert list(tmp_path.iterdir()) == []      # nothing written


#: Loaded by every rank through PYTHONPATH: rank 0's writes of the run record meet a full disk:
#: DISTNET_TEST_FULL=NAME[:TEXT] fails the write of the file NAME (holding TEXT), "metrics" the
#: --force --metrics rename at the end.
_FULL_DISK_ON_RANK_0 = '''
import errno, os
_what = os.environ.get("DISTNET_TEST_FULL", "")
_rank0 = os.environ.get("PMI_RANK", "0") == "0"
if _what == "metrics" and _rank0:
    _replace = os.replace
    def replace(src, dst, *a, **k):
        if str(dst).endswith("m.jsonl"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return _replace(src, dst, *a, **k)
    os.replace = replace
elif _what and _rank0:
    from distnet import fileio
    _name, _, _text = _what.partition(":")
    _orig = fileio.atomic_write_bytes
    def atomic_write_bytes(path, payload):
        if path.endswith(_name) and _text.encode() in payload:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return _orig(path, payload)
    fileio.atomic_write_bytes = atomic_write_bytes
'''


@pytest.mark.parametrize("what", ["resolved.yaml", 'run.json:"running"', 'run.json:"topology"',
                                  'run.json:"finished"', "metrics"])
def test_a_write_of_rank_0_alone_fails_on_every_rank(env, tmp_path, what):
    """Rank 0 writes the run record before training (experiment copies, run.json), when the
    topology is known, and after the last collective (run.json's 'finished', the --force
    --metrics rename). A failure there reached rank 0's stderr only: before training the other
    ranks were killed without a word, after it they had already exited 0. Every rank now says
    why and the job exits 1."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_FULL_DISK_ON_RANK_0)
    m = tmp_path / "m.jsonl"
    m.write_text("old\n")
    run_dir = tmp_path / "r"
    proc = distnet("run", str(env / "cnn_dist.yaml"), "--set", "model.num_epochs=1", "--run-dir", str(run_dir),
                   "--no-checkpoint", "--metrics", str(m), "--force", "-q", n=2,
                   env={"PYTHONPATH": str(tmp_path / "site"), "DISTNET_TEST_FULL": what})
    assert proc.returncode == 1, proc.stderr
    target = m if what == "metrics" else run_dir / what.split(":")[0]
    for rank in (0, 1):
        line = next((l for l in proc.stderr.splitlines() if l.startswith(f"[rank {rank}] distnet: error:")), "")
        assert f"{target}: No space left on device" in line, proc.stderr
    assert "Traceback" not in proc.stderr
    if what != 'run.json:"finished"':      # (written after the metrics took their place)
        assert m.read_text() == "old\n"     # the old metrics kept (the run did not succeed)


def test_a_scale_that_overflows_each_ranks_tile_is_one_error_said_alike_on_every_rank(env, tmp_path):
    """Each rank found the overflow in its own tile and named its own values: N different lines
    (N different 'holds finite values (a .. b in image 0)') for one key of the file."""
    rng = np.random.RandomState(0)
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        for split, n in (("train", 30), ("test", 10)):
            f[f"{split}/x"], f[f"{split}/y"] = (rng.rand(n, 1, 12, 10) * 1e3).astype(np.float32), rng.randint(0, 3, n)
        f.attrs["nclasses"] = 3
    exp = tmp_path / "exp.yaml"
    exp.write_text(experiment(CNN, path, True).replace("Numpy64", "Numpy").replace(
        f"path: {path}", f"path: {path}, in_memory: false, scale: 1e36"))
    proc = distnet("run", str(exp), "--no-run-dir", n=2)
    assert proc.returncode == 2, proc.stderr
    lines = [l.split("] ", 1)[1] for l in proc.stderr.splitlines() if "distnet: error:" in l]
    assert len(lines) == 2 and lines[0] == lines[1], proc.stderr
    assert f"{exp}:3: key 'scale': {path} (train) holds finite values" in lines[0]


def test_a_checkpoint_of_another_dtype_is_said_once_per_job(env, tmp_path):
    """Resuming a float64 checkpoint in float32 on N ranks printed one 'cast' line per parameter
    and per rank (N x P lines about one file)."""
    ck = tmp_path / "ck.h5"
    ok(distnet("run", str(env / "cnn.yaml"), "--set", "model.num_epochs=1", "--checkpoint", str(ck), "--no-run-dir"))
    proc = ok(distnet("run", str(env / "cnn_dist.yaml"), "--set", "backend.dtype=float32", "--set",
                      "model.num_epochs=2", "--resume", str(ck), "--no-run-dir", "--no-checkpoint", n=2))
    lines = [l for l in proc.stderr.splitlines() if "(cast)" in l]
    assert lines == [f"[rank 0] checkpoint {ck}: conv.W, hidden.W, out.W, out.b are float64, the run uses "
                     "float32 (cast)"], proc.stderr
