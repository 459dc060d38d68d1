"""Checkpoints on one process: resuming reaches the same weights as an uninterrupted run
(float64, bitwise), the file holds what it claims, writes are atomic, and damaged, foreign or
mismatched files raise CheckpointError naming the file and the problem."""
import logging
import os

import h5py
import numpy as np
import pytest

from distnet.config import load_experiment
from distnet.errors import CheckpointError, ConfigError
from distnet.models import checkpoint as ckmod
from distnet.models.global_params import model_params
from distnet.models.checkpoint import read_checkpoint
from tests.tiny import write_experiments


@pytest.fixture(autouse=True)
def _logger(restore_logger):
    """Experiments configure the distnet logger: restored after each test (tests/conftest.py)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_experiments(tmp_path_factory.mktemp("ck"))


def run(path, overrides=(), checkpoint=None, every=0, resume=None):
    exp = load_experiment(str(path), list(overrides), record=True)
    exp.checkpoint_path, exp.checkpoint_every = (str(checkpoint) if checkpoint else None), every
    return exp, exp.run(resume=str(resume) if resume else None)


def assert_same_state(a, b, exact=True):
    ca, cb = read_checkpoint(a), read_checkpoint(b)
    assert ca.epoch == cb.epoch
    for pa, pb in zip(ca.params, cb.params):
        for key in ("value", "velocity"):
            if exact:
                np.testing.assert_array_equal(pa[key], pb[key], err_msg=f"{pa['name']} {key}")
            else:
                np.testing.assert_allclose(pa[key], pb[key], rtol=1e-12, err_msg=f"{pa['name']} {key}")
    assert (ca.shuffle_state is None) == (cb.shuffle_state is None)
    if ca.shuffle_state is not None:
        np.testing.assert_array_equal(ca.shuffle_state[1], cb.shuffle_state[1])
        assert ca.shuffle_state[2] == cb.shuffle_state[2]


@pytest.mark.parametrize("model", ["cnn", "gb"])
def test_resume_reaches_the_uninterrupted_weights(files, tmp_path, model):
    full, part, resumed = tmp_path / "full.h5", tmp_path / "part.h5", tmp_path / "resumed.h5"
    _, ref = run(files[model], checkpoint=full)
    _, first = run(files[model], ["model.num_epochs=2"], checkpoint=part)
    assert read_checkpoint(part).epoch == 1
    _, rest = run(files[model], checkpoint=resumed, resume=part)
    assert rest.start_epoch == 2
    assert rest.epoch_costs == ref.epoch_costs and first.epoch_costs == ref.epoch_costs[:2]
    assert (rest.train_misclass, rest.test_misclass) == (ref.train_misclass, ref.test_misclass)
    assert_same_state(full, resumed)


def test_checkpoint_contents(files, tmp_path):
    path = tmp_path / "ck.h5"
    exp, result = run(files["cnn"], ["model.num_epochs=3"], checkpoint=path, every=2)
    ck = read_checkpoint(path)
    assert ck.epoch == 2 and [r["epoch"] for r in ck.history] == [0, 1, 2]
    assert [r["cost"] for r in ck.history] == result.epoch_costs
    assert [p["name"] for p in ck.params] == ["conv.W", "hidden.W", "out.W", "out.b"]
    for (layer, p), e in zip(model_params(exp.model), ck.params):
        np.testing.assert_array_equal(e["value"], p.value)
        np.testing.assert_array_equal(e["velocity"], p.velocity)   # momentum: velocities saved
    state = exp.model.shuffle_rng.get_state()
    assert ck.shuffle_state[0] == "MT19937" and ck.shuffle_state[2] == state[2]
    np.testing.assert_array_equal(ck.shuffle_state[1], state[1])
    assert ck.config["yaml"] == files["cnn"].read_text()
    assert ck.config["overrides"] == ["model.num_epochs=3"]
    assert ck.meta["model"] == "Convnet" and ck.meta["dtype"] == "float64" and ck.meta["grid"] == [1, 1]
    assert ck.meta["size"] == ck.meta["data"] == ck.meta["pipe"] == 1
    # the resolved experiment builds the experiment that ran
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(ck.config["resolved"])
    assert load_experiment(str(resolved)).model.num_epochs == 3


def test_h5py_s_runtime_error_on_a_full_disk_is_one_line(files, tmp_path, monkeypatch):
    """h5py raises RuntimeError ("Can't decrement id ref count (file write failed: time = ...
    error message = 'No space left on device', buf = 0x...") for some failed writes: it was no
    CheckpointError, so the run ended with that two-line text as an unexpected exception."""
    def broken(group, name, a):
        raise RuntimeError("Can't decrement id ref count (file write failed: time = Mon Nov 23 04:02:33 "
                           "2026\n, filename = 'x', errno = 28, error message = 'No space left on device', "
                           "buf = 0x564ac9286170)")
    monkeypatch.setattr(ckmod, "_dataset", broken)
    path = tmp_path / "ck.h5"
    with pytest.raises(CheckpointError) as e:
        run(files["cnn"], ["model.num_epochs=1"], checkpoint=path)
    assert str(e.value) == f"cannot write checkpoint {path}: No space left on device"
    assert os.listdir(tmp_path) == []


def test_a_disk_without_room_for_the_checkpoint_is_refused_before_h5py_writes(files, tmp_path, monkeypatch):
    """h5py meeting a full disk raised from its object deallocation (past our except clause: the
    job aborted with its two-line RuntimeError, one process segfaulted at exit)."""
    import shutil
    from collections import namedtuple
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 4096, 4096))
    path = tmp_path / "ck.h5"
    with pytest.raises(CheckpointError, match=rf"^cannot write checkpoint {path}: No space left on device "
                                              r"\(it needs about 0.\d\d MiB, .* has 0.00 MiB free\)$"):
        ckmod.write_checkpoint(path, [{"name": "W", "layer": "l", "sharded": False,
                                       "value": np.zeros((100, 100))}], epoch=0)
    assert os.listdir(tmp_path) == []


def test_checkpoint_every_n_epochs(files, tmp_path, monkeypatch):
    written = []
    real = ckmod.write_checkpoint
    monkeypatch.setattr(ckmod, "write_checkpoint", lambda path, entries, epoch, *a, **k:
                        (written.append(epoch), real(path, entries, epoch, *a, **k)))
    run(files["cnn"], ["model.num_epochs=5"], checkpoint=tmp_path / "ck.h5", every=2)
    assert written == [1, 3, 4]   # every 2 epochs, and at the end


def test_a_crash_while_writing_keeps_the_previous_checkpoint(files, tmp_path, monkeypatch):
    path = tmp_path / "ck.h5"
    run(files["cnn"], ["model.num_epochs=1"], checkpoint=path)
    before = path.read_bytes()

    def broken(group, name, a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckmod, "_dataset", broken)
    with pytest.raises(CheckpointError, match=f"cannot write checkpoint {path}: No space left"):
        run(files["cnn"], ["model.num_epochs=2"], checkpoint=path)
    assert path.read_bytes() == before and read_checkpoint(path).epoch == 0
    assert os.listdir(tmp_path) == ["ck.h5"]   # no temporary file left behind


@pytest.fixture(scope="module")
def good(files, tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "ck.h5"
    run(files["cnn"], ["model.num_epochs=1"], checkpoint=path)
    return path


def _flip_a_weight_byte(path):
    with h5py.File(path, "r") as f:
        offset = f["params/001/value"].id.get_offset()
    with open(path, "r+b") as f:
        f.seek(offset + 3)
        b = f.read(1)
        f.seek(offset + 3)
        f.write(bytes([b[0] ^ 0x40]))


def _set_attr(key, value):
    def damage(path):
        with h5py.File(path, "a") as f:
            f.attrs[key] = value
    return damage


def _drop_attr(key):
    def damage(path):
        with h5py.File(path, "a") as f:
            del f.attrs[key]
    return damage


def _drop(name):
    def damage(path):
        with h5py.File(path, "a") as f:
            del f[name]
    return damage


def _rename(name, new):
    def damage(path):      # a bit flip in a link name: the entry is no longer seen under its own
        with h5py.File(path, "a") as f:
            f.move(name, new)
    return damage


DAMAGE = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
                  "not a readable HDF5 file"),
    "garbage": (lambda p: p.write_bytes(os.urandom(4096)), "not a readable HDF5 file"),
    "empty": (lambda p: p.write_bytes(b""), "not a readable HDF5 file"),
    "bit flip": (_flip_a_weight_byte, "parameter 001 (hidden.W) value is damaged (CRC-32 mismatch)"),
    "foreign HDF5": (_set_attr("format", "something else"), "not a distnet checkpoint"),
    "newer version": (_set_attr("version", 99), "format version 99; this distnet reads versions 1, 2"),
    "no params": (_drop("params"), "has no /params group"),
    "no epoch": (_drop_attr("epoch"), "unreadable or incomplete (KeyError"),
    # resumed without the momentum velocity (another cost from then on), without a word:
    "velocity's name damaged": (_rename("params/001/velocity", "params/001/velocitz"),
                                "parameter 001 (hidden.W) holds 'velocitz', which distnet does not write"),
    "a parameter's name damaged": (_rename("params/001", "params/00q"), "/params holds entries"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_checkpoint_names_file_and_problem(good, tmp_path, kind):
    path = tmp_path / "bad.h5"
    path.write_bytes(good.read_bytes())
    damage, words = DAMAGE[kind]
    damage(path)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    assert str(e.value).startswith(f"checkpoint {path}: ") and words in str(e.value)


def test_missing_or_directory(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        read_checkpoint(tmp_path / "nope.h5")
    with pytest.raises(CheckpointError, match="is a directory"):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize("name", ["cnn", "gb"])
def test_the_size_told_before_training_covers_the_checkpoint_written(files, tmp_path, name):
    """distnet run checks the destination's free space against checkpoint_size before the first
    epoch: it must not be below what write_checkpoint then writes (nor far above it)."""
    from distnet.models.checkpoint import checkpoint_size
    exp = load_experiment(str(files[name]))
    exp.check()
    told = checkpoint_size(exp.model, np.dtype(exp.backend.dtype).itemsize)
    run(files[name], ["model.num_epochs=1"], checkpoint=tmp_path / "ck.h5")
    written = os.path.getsize(tmp_path / "ck.h5")
    assert written <= told <= written + 2**17, (written, told)


def test_resume_refuses_another_model(files, good):
    with pytest.raises(CheckpointError, match=r"checkpoint .*ck.h5: parameter conv.W has shape \(3, 1, 3, 3\) "
                                              r"but the experiment's conv.W has global shape \(4, 1, 3, 3\)"):
        run(files["cnn"], ["model.layers.0.nofm=4"], resume=good)
    with pytest.raises(CheckpointError, match=r"holds 4 parameters \(conv.W, .*\) but the experiment's model has 2"):
        run(files["gb"], resume=good)


def test_a_checkpoint_of_a_run_with_set_names_them_when_the_model_differs(files, tmp_path):
    """evaluate RUN_DIR/experiment.yaml with RUN_DIR/checkpoint.h5 of a run with --set said 'the
    checkpoint belongs to another model', the --set that made it so left to guess."""
    run(files["cnn"], ["model.layers.0.nofm=4", "model.num_epochs=1"], checkpoint=tmp_path / "ck.h5")
    with pytest.raises(CheckpointError, match=r"belongs to another model \(its run had --set model.layers.0.nofm=4 "
                                              r"--set model.num_epochs=1: give the same, or evaluate with the run "
                                              r"directory's resolved.yaml\)"):
        run(files["cnn"], resume=tmp_path / "ck.h5")


def test_resume_after_the_last_epoch_trains_nothing(files, good):
    from distnet.log import get_logger, keep_handler
    lines = []
    handler = keep_handler(logging.Handler())
    handler.emit = lambda record: lines.append(record.getMessage())
    try:
        _, result = run(files["cnn"], ["model.num_epochs=1"], resume=good)
    finally:
        get_logger().removeHandler(handler)
    assert result.start_epoch == 1 and len(result.epoch_costs) == 1
    assert result.test_misclass is not None
    # the log said "training epochs 1 to 0"
    assert any("no epoch left to train (num_epochs 1): evaluating the checkpoint's model" in m for m in lines), lines


def test_checkpoint_key_is_validated(files, tmp_path):
    for bad, words in (("checkpoint={evry: 2}", "unknown checkpoint key"),
                       ("checkpoint={every: -1}", "integer >= 0"),
                       ("checkpoint={path: 3}", "must be a file name"),
                       ("pipe=0", "expected int >= 1")):
        with pytest.raises(ConfigError, match=words):
            load_experiment(str(files["cnn"]), [bad])
    exp = load_experiment(str(files["cnn"]), [f"checkpoint={{every: 2, path: {tmp_path / 'k.h5'}}}"])
    assert (exp.checkpoint_every, exp.checkpoint_path) == (2, str(tmp_path / "k.h5"))


def test_dtype_change_is_cast_with_a_warning(files, good, caplog):
    exp = load_experiment(str(files["cnn"]), ["backend.dtype=float32", "model.num_epochs=2"])
    exp.setup()
    ck = read_checkpoint(good)
    log = logging.getLogger("test-ck")
    with caplog.at_level(logging.WARNING, logger="test-ck"):
        resume = ckmod.apply_checkpoint(exp.model, ck, log)
    assert "the run uses float32 (cast)" in caplog.text
    assert exp.model.layers[0].W.dtype == np.float32 and resume.epoch == 1


def test_the_layout_that_wrote_a_checkpoint_is_named_whole():
    """evaluate / resume name the writing layout as the run header does: 'written on 6 rank(s),
    grid 1x3' left the user to guess where the other 3 ranks were (data replicas, stages)."""
    from distnet.experiments.evaluate import layout_text, written_on
    assert layout_text(1, (1, 1)) == "1 rank(s), grid 1x1"
    assert layout_text(6, [1, 3], data=2) == "6 rank(s), grid 1x3, data 2"
    assert layout_text(8, (1, 2), data=2, pipe=2) == "8 rank(s), grid 1x2, data 2, pipe 2"
    old = ckmod.Checkpoint(path="ck.h5", epoch=0, params=[], meta={"size": 4, "grid": [2, 2]})   # before 'pipe'
    assert written_on(old) == "4 rank(s), grid 2x2"
    assert written_on(ckmod.Checkpoint(path="ck.h5", epoch=0, params=[], meta={})) == "? rank(s), grid ?"


def _warnings_of_apply(experiment, path, caplog):
    """The warnings of loading checkpoint ``path`` into ``experiment``'s model."""
    exp = load_experiment(str(experiment), ["model.num_epochs=2"])
    exp.setup()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-ck-state"):
        ckmod.apply_checkpoint(exp.model, read_checkpoint(path), logging.getLogger("test-ck-state"))
    return [r.getMessage() for r in caplog.records if r.name == "test-ck-state" and r.levelno == logging.WARNING]


def test_a_checkpoint_without_the_momentum_state_warns_what_is_reset(files, good, tmp_path, caplog):
    """The tiny CNN trains with Nesterov momentum: a checkpoint whose velocities are gone used
    to resume without them, silently (the run then differs from an uninterrupted one)."""
    assert _warnings_of_apply(files["cnn"], good, caplog) == []
    bare = tmp_path / "bare.h5"
    bare.write_bytes(good.read_bytes())
    with h5py.File(bare, "a") as f:
        for name in list(f["params"]):
            del f[f"params/{name}/velocity"]
    lines = _warnings_of_apply(files["cnn"], bare, caplog)
    assert lines == [f"checkpoint {bare} holds no momentum velocity for conv.W, hidden.W, out.W, out.b after 4 "
                     "optimiser steps: resumed with it reset to zero, so from here the run differs from an "
                     "uninterrupted one"], lines
    # another optimiser than the one that wrote it: Adam's moments are missing, and so said
    text = files["cnn"].read_text()
    adam = tmp_path / "adam.yaml"
    adam.write_text(text.replace("momentum: {type: nesterov, coef: 0.5},", "learning_rule: !obj:distnet.learning_rules.Adam {},"))
    assert adam.read_text() != text
    lines = _warnings_of_apply(adam, good, caplog)
    assert len(lines) == 1 and "holds no Adam state (m, v) for conv.W, hidden.W" in lines[0], lines
