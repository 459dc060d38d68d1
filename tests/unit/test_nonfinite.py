"""Non-finite values never pass silently: RectLin propagates NaN, data with NaN/inf pixels or
labels out of range is refused when loaded or taken from a cache (naming the file, the image and
the pixel), a huge learning rate stops training naming epoch and batch, a NaN parameter is
caught by the periodic check (naming layer, parameter, epoch and batch), and in every case no
checkpoint of non-finite weights is written. ``.nan`` in ``weight_init`` is a config error
(see test_config_bombs.py); here through the CLI."""
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from distnet.comm.launcher import launch_env, mpiexec_path
from distnet.config import load_experiment_text
from distnet.data.checks import check_split
from distnet.errors import DataError, TrainingError
from distnet.models import finite
from distnet.ops.activations import RectLin
from tests.tiny import CNN, GB, experiment, write_data

ROOT = Path(__file__).resolve().parents[2]
#: The tiny CNN with RectLin after the conv and in the hidden layer.
RELU_CNN = CNN.replace("padding: 1,", "padding: 1, activation: !obj:distnet.activations.RectLin {},").replace(
    "activation: !obj:distnet.activations.Tanh {}", "activation: !obj:distnet.activations.RectLin {}")


def distnet(*args, n=1):
    cmd = [sys.executable, "-m", "distnet", *args]
    if n > 1:
        cmd = [mpiexec_path(), "-n", str(n), *cmd]
    return subprocess.run(["timeout", "-k", "5", "120", *cmd], cwd=ROOT, env=launch_env(n),
                          capture_output=True, text=True)


def failed_cleanly(proc, code=1):
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


# -- activations -------------------------------------------------------------------------------

def test_rectlin_propagates_nan():
    z = np.array([-1.0, 0.0, 2.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    r = RectLin()
    y = r.fprop(z)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [0, 0, 2, np.nan, np.inf, 0])
    dz = r.bprop(z, y, np.full_like(z, 3.0))
    np.testing.assert_array_equal(dz, [0, 0, 3, np.nan, 3, 0])
    assert not np.signbit(dz).any()  # no -0.0 for negative inputs


@pytest.mark.parametrize("where", ["none", "z_nan", "dy_inf_masked", "dy_nan_kept"])
def test_rectlin_gradient_of_a_large_array_is_the_masked_formula_bit_for_bit(where):
    """Arrays large enough that the gradient is a product with the mask, shared over the kernel
    threads: the same bytes as ``where(z > 0, dy, where(isnan(z), z, 0))``, whichever share a
    NaN or an infinity lands in."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((2, 8, 128, 128)).astype(np.float32)
    dy = rng.standard_normal(z.shape).astype(np.float32)
    if where == "z_nan":
        z[1, 7, 127, 3] = np.nan
    elif where == "dy_inf_masked":
        dy[np.unravel_index(np.flatnonzero(z < 0)[-1], z.shape)] = np.inf
    elif where == "dy_nan_kept":
        dy[np.unravel_index(np.flatnonzero(z > 0)[-1], z.shape)] = np.nan
    want = np.where(z > 0, dy, np.where(np.isnan(z), z, 0))
    got = RectLin().bprop(z, RectLin().fprop(z), dy)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# -- data --------------------------------------------------------------------------------------

def test_check_split_names_image_and_pixel():
    x = np.zeros((600, 2, 4, 5), np.float32)
    check_split(x, np.array([0, 1, 2] * 200), 3, "f.h5", "train")
    x[517, 1, 2, 3] = np.inf
    with pytest.raises(DataError, match=r"f.h5: train image 517 has a non-finite pixel \(inf at channel 1, "
                                        r"row 12, column 3\)"):
        check_split(x, np.zeros(600, int), 3, "f.h5", "train", origin=(10, 0))
    with pytest.raises(DataError, match="image 42 has"):
        check_split(x[510:520], np.zeros(10, int), 3, "f.h5", "train", index=np.arange(35, 45))
    with pytest.raises(DataError, match=r"f.h5: test label of image 1 is -3, not a class index 0 .. 2 \(2 such"):
        check_split(np.zeros((3, 1, 1, 1)), np.array([0, -3, 7]), 3, "f.h5", "test")


def test_nan_and_inf_pixels_in_hdf5_are_refused_at_load(tmp_path, restore_logger):
    path = write_data(tmp_path / "d.h5", nan_at=4)
    exp = load_experiment_text(experiment(CNN, path), "exp.yaml")
    with pytest.raises(DataError, match=r"d\.h5.*\bimage 4\b"):  # the file datasets' own check
        exp.run()
    path = write_data(tmp_path / "e.h5")
    with h5py.File(path, "r+") as f:
        x = f["train/x"][()]
        x[7, 0, 11, 9] = -np.inf
        f["train/x"][...] = x
    exp = load_experiment_text(experiment(CNN, path), "exp.yaml")
    with pytest.raises(DataError, match=r"e\.h5.*\bimage 7\b"):
        exp.run()


def test_a_tampered_cache_with_nan_pixels_or_bad_labels_is_rebuilt(tmp_path, caplog):
    """``cache.load_or_build(check=...)`` (how ``Dataset.load`` reads MNIST / CIFAR-10 caches):
    a cache whose metadata is intact but whose pixels or labels fail the check is rebuilt."""
    from distnet.data import cache
    from distnet.data.checks import check_splits
    rng = np.random.RandomState(0)
    good = {s: (rng.standard_normal((6, 1, 4, 5)), np.arange(6) % 3) for s in ("train", "test")}
    meta = {"format_version": cache.CACHE_FORMAT_VERSION, "dataset": "T", "tile": [0, 4, 0, 5],
            "dtype": "float64"}
    path = str(tmp_path / "cache.h5")

    def check(d):
        check_splits(d, 3, path)
    cache.load_or_build(path, meta, lambda: good, check=check)
    for split, item, value in (("train", "x", np.nan), ("test", "y", -3), ("train", "y", 7)):
        with h5py.File(path, "r+") as f:
            a = f[split][item][()]
            a.flat[5] = value
            f[split][item][...] = a
        with caplog.at_level(logging.WARNING):
            data = cache.load_or_build(path, meta, lambda: good, check=check)
        # the cache's checksum (or, were it recomputed, the data check) finds the edit
        assert "unusable" in caplog.text and any(m in caplog.text for m in (
            "non-finite pixel", "not a class index", "changed after it was written"))
        caplog.clear()
        for s in ("train", "test"):
            np.testing.assert_array_equal(data[s][0], good[s][0])
            np.testing.assert_array_equal(data[s][1], good[s][1])


def test_gb_refuses_nan_pixels_before_pretraining(tmp_path):
    path = tmp_path / "gb.yaml"
    path.write_text(experiment(GB, write_data(tmp_path / "d.h5", nan_at=0)))
    err = failed_cleanly(distnet("run", str(path), "--no-run-dir"))
    assert "d.h5" in err and "image 0" in err and "pretrain" not in err


# -- parameters ----------------------------------------------------------------------------------

def test_huge_learning_rate_stops_and_writes_no_checkpoint(tmp_path):
    path = tmp_path / "relu.yaml"
    path.write_text(experiment(RELU_CNN, write_data(tmp_path / "d.h5")))
    ck, run = tmp_path / "ck.h5", tmp_path / "run"
    err = failed_cleanly(distnet("run", str(path), "--set", "model.learning_rate=1e300", "--checkpoint",
                                 str(ck), "--checkpoint-every", "1", "--run-dir", str(run)))
    assert "distnet: error: the cost became nan in epoch 0, batch 2" in err
    assert not ck.exists()
    assert json.loads((run / "run.json").read_text())["status"] == "failed"


def test_huge_learning_rate_on_two_ranks(tmp_path):
    path = tmp_path / "relu.yaml"
    path.write_text(experiment(RELU_CNN, write_data(tmp_path / "d.h5"), dist=True))
    ck = tmp_path / "ck.h5"
    err = failed_cleanly(distnet("run", str(path), "--set", "model.learning_rate=1e300", "--checkpoint",
                                 str(ck), "--no-run-dir", n=2))
    for rank in (0, 1):  # the batch may differ from one process's: inf - inf sums in another order
        assert re.search(rf"\[rank {rank}\] distnet: error: the cost became nan in epoch 0, batch \d", err), err
    assert not ck.exists()


def test_weight_init_nan_is_a_config_error(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(experiment(CNN, write_data(tmp_path / "d.h5")).replace("low: -0.3", "low: .nan"))
    err = failed_cleanly(distnet("run", str(path), "--no-run-dir"), code=2)
    assert "w.yaml:9: key 'weight_init': low: expected a number, got nan" in err


def _poison_after_update(model, layer_name, at_step):
    """Make ``model.train_step`` put a NaN into ``layer_name``'s first parameter after step
    ``at_step`` (the cost of that step is still finite: it was computed before the update)."""
    train_step, steps = model.train_step, [0]

    def poisoned(*args, **kwargs):
        loss = train_step(*args, **kwargs)
        steps[0] += 1
        if steps[0] == at_step:
            for layer, p in model._params:
                if layer.name == layer_name:
                    p.value.flat[0] = np.nan
                    break
        return loss
    model.train_step = poisoned


def test_a_nan_parameter_is_caught_at_the_epoch_end_and_not_checkpointed(tmp_path, restore_logger):
    exp = load_experiment_text(experiment(CNN, write_data(tmp_path / "d.h5")), "exp.yaml")
    exp.checkpoint_path, exp.checkpoint_every = str(tmp_path / "ck.h5"), 1
    _poison_after_update(exp.model, "out", at_step=4)  # 30 images / batch 8: the epoch's last step
    with pytest.raises(TrainingError, match=r"parameter 'out.W' of layer 'out' holds NaN values after "
                                            r"epoch 0, batch 3; lower the learning rate"):
        exp.run()
    assert not (tmp_path / "ck.h5").exists()


def test_the_check_runs_every_few_steps(tmp_path, restore_logger, monkeypatch):
    monkeypatch.setattr(finite, "CHECK_EVERY", 2)
    exp = load_experiment_text(experiment(CNN, write_data(tmp_path / "d.h5", n_train=80)), "exp.yaml")
    _poison_after_update(exp.model, "conv", at_step=3)
    # the NaN conv weight makes the next cost NaN unless the check sees it first: step 3 is
    # batch 2, not a multiple of 2 steps; the cost of batch 3 is then NaN
    with pytest.raises(TrainingError, match="epoch 0, batch 3"):
        exp.run()
    monkeypatch.setattr(finite, "CHECK_EVERY", 1)
    exp = load_experiment_text(experiment(CNN, write_data(tmp_path / "d.h5", n_train=80)), "exp.yaml")
    _poison_after_update(exp.model, "conv", at_step=3)
    with pytest.raises(TrainingError, match="parameter 'conv.W' of layer 'conv' holds NaN values after epoch 0, batch 2"):
        exp.run()


def test_infinity_is_named_and_an_overflowing_sum_is_not_an_error(tmp_path, restore_logger):
    exp = load_experiment_text(experiment(CNN, write_data(tmp_path / "d.h5")), "exp.yaml")
    exp.setup()
    finite.check_parameters(exp.model, "now")  # finite: nothing raised
    layer, p = exp.model._params[1]
    p.value.flat[0] = -np.inf
    with pytest.raises(TrainingError, match=rf"parameter '{p.name}' of layer '{layer.name}' holds infinite "
                                            r"values now"):
        finite.check_parameters(exp.model, "now")
    p.value[...] = 1e308  # finite values whose sum overflows: not an error
    finite.check_parameters(exp.model, "now")


def test_a_nan_velocity_reaches_its_parameter_in_the_same_update():
    from distnet.optim.sgd import sgd_update
    for nesterov in (False, True):
        w, g, v = np.zeros(3), np.ones(3), np.array([0.0, np.nan, 0.0])
        sgd_update(w, g, v, 0.1, 0.9, nesterov)
        assert np.isnan(w[1]) and np.isfinite(w[[0, 2]]).all()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_error_rates_of_non_finite_outputs_are_refused(tmp_path):
    """Finite weights whose outputs overflow (float64, weights ~1e200): with ``num_epochs: 0``
    nothing trained, so no NaN cost stopped the run, and the error rates of NaN outputs (argmax 0
    for every image) were printed as if they meant something."""
    text = experiment(RELU_CNN, write_data(tmp_path / "d.h5")).replace("num_epochs: 4", "num_epochs: 0").replace(
        "{type: uniform, low: -0.3, high: 0.3}", "{type: normal, scale: 1e200}").replace(
        "hidden, nout: 5, weight_init: {type: normal, scale: 0.1}", "hidden, nout: 5, weight_init: {type: normal, scale: 1e200}")
    assert text.count("1e200") == 2
    exp = load_experiment_text(text, "exp.yaml")
    with pytest.raises(TrainingError, match=r"outputs are not finite \(NaN or inf\) for \d+ of \d+ images"):
        exp.run()


def test_numpy_warnings_are_one_line_without_source_code(tmp_path):
    """numpy's RuntimeWarning before the cost check stopped a run printed a source line of
    distnet's kernels ("/.../ops/parallel.py:152: RuntimeWarning: ...\\n  return xp.matmul(...)")."""
    exp = tmp_path / "e.yaml"
    exp.write_text(experiment(RELU_CNN, write_data(tmp_path / "d.h5")).replace("learning_rate: 0.1", "learning_rate: 1e300"))
    err = failed_cleanly(distnet("run", str(exp), "--no-run-dir", "--no-checkpoint"))
    assert "the cost became" in err.splitlines()[-1]
    warned = [line for line in err.splitlines() if "Warning" in line]
    assert warned and all(line.startswith("distnet: warning: ") for line in warned), err
    assert ".py:" not in err and "xp." not in err, err
