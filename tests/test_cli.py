"""The distnet command end to end: run, check, distribute, compare (through mpiexec), info,
and the errors a user sees (file:line, non-zero exit, on every rank)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from distnet.comm.launcher import launch_env, mpiexec_path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 240

EXPERIMENT = """# a tiny CNN on synthetic 12x10 images
!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 5},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: DATA, serialized_path: SHARD}],
  model: !obj:distnet.models.Convnet {
    num_epochs: 2, batch_size: 8, shuffle: True, learning_rate: 0.1,
    momentum: {type: nesterov, coef: 0.5},
    layers: [
      !obj:distnet.layers.ConvLayer {nofm: 3, fshape: 3, padding: 1, weight_init: {type: uniform, low: -0.3, high: 0.3}},
      !obj:distnet.layers.MaxPoolingLayer {fshape: 2},
      !obj:distnet.layers.Layer {nout: 3, weight_init: {type: normal, scale: 0.1},
                                 activation: !obj:distnet.activations.Logistic {}},
    ],
  },
}
"""


def distnet(*args, n=1, cwd=None, check=False):
    cmd = [sys.executable, "-m", "distnet", *args]
    if n > 1:
        cmd = [mpiexec_path(), "-n", str(n), *cmd]
    proc = subprocess.run(["timeout", str(TIMEOUT), *cmd], cwd=cwd or ROOT, env=launch_env(n),
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    rng = np.random.RandomState(0)
    with h5py.File(d / "data.h5", "w") as f:
        for split, n in (("train", 30), ("test", 10)):
            y = rng.randint(0, 3, n)
            x = rng.standard_normal((n, 1, 12, 10)) * 0.3
            x[:, 0, :4, :4] += (y == 0)[:, None, None]  # learnable: class 0 is bright top-left
            f[f"{split}/x"], f[f"{split}/y"] = x, y
        f.attrs["nclasses"] = 3
    exp = d / "tiny.yaml"
    exp.write_text(EXPERIMENT.replace("DATA", str(d / "data.h5")).replace("SHARD", str(d / "cache.h5")))
    return d, exp


def test_run_writes_metrics(tiny):
    d, exp = tiny
    proc = distnet("run", str(exp), "--metrics", str(d / "m.jsonl"), check=True)
    assert "epoch: 1, total training error" in proc.stderr and "test set misclass rate" in proc.stderr
    recs = [json.loads(l) for l in (d / "m.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in recs[:-1]] == [0, 1] and recs[-1]["final"]


def test_distribute_then_compare_agree(tiny):
    d, exp = tiny
    dist = d / "tiny_dist.yaml"
    distnet("distribute", str(exp), "-o", str(dist), check=True)
    text = dist.read_text()
    assert text.startswith("# a tiny CNN") and "ConvLayerDist" in text and "LayerDist" in text
    assert "dist_flag: True" in text and "cache-{rank}of{size}.h5" in text
    proc = distnet("compare", str(exp), str(dist), "-n", "3", "--cost-tol", "1e-9", "--rate-tol", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout and "epoch 1 cost" in proc.stdout
    assert len(list(d.glob("cache-*of3.h5"))) == 3  # one shard per rank


def test_plain_layer_names_in_a_distributed_file_distribute_themselves(tiny):
    """One class per layer kind: a distributed file that keeps the plain names (``ConvLayer``,
    not neon's alias ``ConvLayerDist``) is accepted by check and run alike and gives the
    one-process numbers."""
    d, exp = tiny
    dist = d / "tiny_neon_dist.yaml"
    distnet("distribute", str(exp), "-o", str(dist), check=True)
    plain = d / "tiny_plain_dist.yaml"
    plain.write_text(re.sub(r"\b(\w*Layer\w*)Dist\b", r"\1", dist.read_text()))
    text = plain.read_text()
    assert "dist_flag: True" in text and "ConvnetDist" in text and "LayerDist" not in text
    assert "ConvLayer {" in text and "Layer {" in text
    assert distnet("check", str(plain)).returncode == 0
    proc = distnet("compare", str(exp), str(plain), "-n", "2", "--cost-tol", "1e-9", "--rate-tol", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AGREE" in proc.stdout


# What `distnet check` says about a GPU experiment where cupy or a GPU is missing (the ConfigError
# of distnet.backend.GPU); tests/test_cli_gpu.py checks those files completely with a stand-in cupy.
NO_GPU = re.compile(r"key 'backend': the GPU backend (needs cupy|found no usable CUDA device|found no CUDA device)")


def is_gpu_experiment(path):
    return re.search(r"!obj:\S*backends\S*\.GPU\b", path.read_text()) is not None


def _load_script(name):
    """A script of ``experiments/`` as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _demo_images_h5(folder):
    """datasets/my_images.h5 under ``folder``, as the README makes it (for experiments/my_images*)."""
    pytest.importorskip("PIL")
    from distnet.convert import convert
    _load_script("make_demo_images").make_demo_images(folder / "my_images", per_class=4)
    convert(folder / "my_images", folder / "datasets" / "my_images.h5", size=(32, 32), valid_fraction=0.1)
    return folder / "datasets" / "my_images.h5"


def _segmentation_demo_h5(folder):
    """datasets/segmentation_demo.h5 under ``folder``, as docs/segmentation.md makes it (fewer images)."""
    pytest.importorskip("PIL")
    from distnet.convert import convert
    _load_script("make_segmentation_demo").make_segmentation_demo(folder / "seg_demo", count=20)
    demo = folder / "seg_demo"
    convert(demo / "images", folder / "datasets" / "segmentation_demo.h5", masks=demo / "masks",
            classes=demo / "classes.txt")
    return folder / "datasets" / "segmentation_demo.h5"


def _demo_volumes_h5(folder, **shape):
    """datasets/volume_demo.h5 under ``folder``, as docs/volumes.md makes it (fewer volumes;
    ``shape=(D, H, W)`` for other sizes)."""
    from distnet.convert import convert
    _load_script("make_volume_demo").make_volume_demo(folder / "vol_demo", count=6, **shape)
    demo = folder / "vol_demo"
    convert(demo / "volumes", folder / "datasets" / "volume_demo.h5", masks=demo / "masks",
            classes=demo / "classes.txt", valid_fraction=0.2)
    return folder / "datasets" / "volume_demo.h5"


def _cosmo_demo_h5(folder):
    """datasets/cosmo_demo.h5 under ``folder``, as docs/volumes.md makes it (fewer volumes)."""
    from distnet.convert import convert
    _load_script("make_volume_demo").make_target_demo(folder / "cosmo_demo", count=8)
    demo = folder / "cosmo_demo"
    convert(demo / "volumes", folder / "datasets" / "cosmo_demo.h5", targets=demo / "targets.csv", valid_fraction=0.2)
    return folder / "datasets" / "cosmo_demo.h5"


#: The data files that shipped experiments read and the docs make (not in a clone): made here.
DEMO_DATA = {"my_images.h5": _demo_images_h5, "segmentation_demo.h5": _segmentation_demo_h5,
             "volume_demo.h5": _demo_volumes_h5, "cosmo_demo.h5": _cosmo_demo_h5}


def test_check_all_shipped_experiments(tmp_path):
    assert any(is_gpu_experiment(p) for p in (ROOT / "experiments").glob("*.yaml"))
    made = {}
    for exp in sorted((ROOT / "experiments").glob("*.yaml")):
        reads = re.search(r"path: datasets/([\w.]+\.h5)", exp.read_text())
        if reads and reads.group(1) in DEMO_DATA:
            name = reads.group(1)
            made[name] = made.get(name) or DEMO_DATA[name](tmp_path)
            proc = distnet("check", str(exp), "--set", f"datasets.0.path={made[name]}")
            assert proc.returncode == 0, f"{exp.name}: {proc.stderr}"
            continue
        proc = distnet("check", str(exp))
        if is_gpu_experiment(exp) and proc.returncode != 0:
            # no cupy / no GPU here: the one-line error that says so, nothing else
            assert proc.returncode == 2 and NO_GPU.search(proc.stderr), f"{exp.name}: {proc.stderr}"
            assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
            continue
        assert proc.returncode == 0, f"{exp.name}: {proc.stderr}"


def test_config_error_names_file_line_and_key(tiny, tmp_path):
    _, exp = tiny
    bad = tmp_path / "bad.yaml"
    bad.write_text(exp.read_text().replace("fshape: 2}", "fshape: 2, strid: 2}"))
    proc = distnet("run", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:10: key 'strid': unknown key for MaxPoolingLayer" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_error_on_every_rank(tiny, tmp_path):
    _, exp = tiny
    bad = tmp_path / "bad.yaml"
    bad.write_text(exp.read_text().replace("nofm: 3", "nofm: three"))
    proc = distnet("run", str(bad), n=2)
    assert proc.returncode != 0
    assert proc.stderr.count("key 'nofm': expected an integer") == 2


@pytest.mark.parametrize("override, words", [
    ("model.layers.0.nofm=null", "key 'nofm': needs a value, got null"),
    ("model.batch_size=1:30", "base-60 integer"),
    ("logging={filename: /nonexistent-dir/run.log}", "cannot open the log file /nonexistent-dir/run.log"),
])
def test_new_input_errors_on_every_rank(tiny, tmp_path, override, words):
    """Errors found on one rank only (the log file, opened by rank 0) or on all reach every rank;
    no rank hangs and none prints a traceback."""
    _, exp = tiny
    dist = tmp_path / "d.yaml"
    distnet("distribute", str(exp), "-o", str(dist), check=True)
    proc = distnet("run", str(dist), "--no-run-dir", "--set", override, n=2)
    assert proc.returncode not in (0, 124) and "Traceback" not in proc.stderr, proc.stderr
    assert all(f"[rank {r}] distnet: error:" in proc.stderr for r in (0, 1)), proc.stderr
    assert words in proc.stderr


def test_non_dist_experiment_under_mpiexec_is_refused(tiny):
    _, exp = tiny
    proc = distnet("run", str(exp), n=2)
    assert proc.returncode != 0 and "dist_flag: False: it runs on one process, not on 2 ranks" in proc.stderr
    plan = distnet("plan", str(exp), "-n", "4")        # not launched at all: nothing says it was
    assert plan.returncode == 1 and "dist_flag: False: it runs on one process, not on 4 ranks" in plan.stderr
    assert "launched" not in plan.stderr


def test_grid_that_does_not_fit_is_refused(tiny, tmp_path):
    d, exp = tiny
    dist = tmp_path / "g.yaml"
    distnet("distribute", str(exp), "-o", str(dist), check=True)
    dist.write_text(dist.read_text().replace("dist_flag: True,", "dist_flag: True, grid: [1, 3],", 1))
    proc = distnet("run", str(dist), n=2)
    assert proc.returncode != 0 and "grid 1x3" in proc.stderr and "Traceback" not in proc.stderr


def test_info_lists_the_stack():
    out = distnet("info", check=True).stdout
    for word in ("distnet", "numpy", "mpi", "h5py", "gpu", "threads"):
        assert word in out


@pytest.mark.parametrize("flags, words", [
    (["--run-dir", "RD", "--no-run-dir"], "--run-dir and --no-run-dir"),
    (["--checkpoint", "CK.h5", "--no-checkpoint"], "--checkpoint and --no-checkpoint"),
    (["--checkpoint-every", "2", "--no-checkpoint"], "--checkpoint-every and --no-checkpoint"),
    (["-v", "-q"], "--verbose and --quiet"),
    (["--progress", "-q"], "--progress and --quiet"),
    (["--watchdog", "nan"], "--watchdog"),
    (["--watchdog", "inf"], "--watchdog"),
])
def test_conflicting_or_meaningless_flags_are_refused_before_anything_runs(tmp_path, flags, words):
    """Each of these used to drop one flag silently (or watch nothing)."""
    from click.testing import CliRunner
    from distnet.cli.main import main
    flags = [str(tmp_path / f) if f in ("RD", "CK.h5") else f for f in flags]
    r = CliRunner().invoke(main, ["run", str(ROOT / "experiments" / "mnist_cnn.yaml"), "--set",
                                  "model.num_epochs=0", "--set", "dataset.sample_pct=1", *flags])
    assert r.exit_code == 2 and words in r.output, r.output
    assert not list(tmp_path.iterdir())         # nothing written


def test_info_under_mpiexec_prints_once_with_the_ranks_thread_plan():
    """`mpiexec -n 2 distnet info` printed the report twice, interleaved, each saying
    `threads: 2/rank (2 cores / 1 rank on this node)` for a node running 2 ranks."""
    from distnet.comm.launcher import THREAD_ENV
    env = {k: v for k, v in launch_env(2).items() if k not in THREAD_ENV}
    proc = subprocess.run(["timeout", str(TIMEOUT), mpiexec_path(), "-n", "2", sys.executable, "-m", "distnet",
                           "info"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    threads = [line for line in proc.stdout.splitlines() if line.strip().startswith("threads:")]
    assert len(threads) == 1 and proc.stdout.count("distnet: ") == 1, proc.stdout
    assert "/ 2 ranks on this node)" in threads[0], threads
