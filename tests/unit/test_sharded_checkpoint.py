"""Sharded checkpoints on one process: a sharded save holds exactly what the single file holds,
resumes to the uninterrupted run's weights (float64, bitwise), consolidates to a single file and
splits back into any number of shards; damaged, foreign or incomplete folders are refused naming
the shard and the problem. (Resharding across ranks: tests/mpi/test_sharded_checkpoint.py.)"""
import json
import os

import h5py
import numpy as np
import pytest

from distnet.config import load_experiment
from distnet.errors import CheckpointError, ConfigError
from distnet.models import reshard, sharded
from distnet.models.checkpoint import read_checkpoint
from distnet.models.sharded import read_any
from tests.tiny import write_experiments


@pytest.fixture(autouse=True)
def _logger(restore_logger):
    """Experiments configure the distnet logger: restored after each test (tests/conftest.py)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_experiments(tmp_path_factory.mktemp("sck"))


def run(path, overrides=(), checkpoint=None, resume=None, shard=False):
    exp = load_experiment(str(path), list(overrides), record=True)
    exp.checkpoint_path, exp.checkpoint_sharded = (str(checkpoint) if checkpoint else None), shard
    return exp, exp.run(resume=str(resume) if resume else None)


def assert_same(a, b):
    """Two checkpoints (files or folders) hold the same training state, bit for bit."""
    ca, cb = read_any(a), read_any(b)
    def timeless(history):   # times, and the paths the two were written to, differ
        return [{k: v for k, v in r.items() if not k.endswith("seconds") and "checkpoint" not in k} for r in history]
    assert (ca.epoch, timeless(ca.history), ca.config) == (cb.epoch, timeless(cb.history), cb.config)
    for k in ("model", "dtype", "grid", "size", "data", "pipe", "steps"):
        assert ca.meta[k] == cb.meta[k], k
    assert len(ca.params) == len(cb.params) and len(ca.buffers) == len(cb.buffers)
    for ea, eb in zip(ca.params + ca.buffers, cb.params + cb.buffers):
        assert (ea["name"], ea["layer"], ea["sharded"]) == (eb["name"], eb["layer"], eb["sharded"])
        for key in ("value", "velocity"):
            if ea[key] is None:
                assert eb[key] is None
            else:
                assert ea[key].dtype == eb[key].dtype and np.array_equal(ea[key], eb[key]), (ea["name"], key)
        assert sorted(ea["state"]) == sorted(eb["state"])
        for k in ea["state"]:
            assert np.array_equal(ea["state"][k], eb["state"][k])
    np.testing.assert_array_equal(ca.shuffle_state[1], cb.shuffle_state[1])
    assert ca.shuffle_state[2:] == cb.shuffle_state[2:]


@pytest.fixture(scope="module")
def saved(files, tmp_path_factory):
    """The gb model after 2 epochs as a single file and as a sharded folder, and after 4."""
    tmp = tmp_path_factory.mktemp("saved")
    run(files["gb"], ["model.num_epochs=2"], tmp / "single.h5")
    exp, _ = run(files["gb"], ["model.num_epochs=2"], tmp / "folder", shard=True)
    run(files["gb"], [], tmp / "full.h5")
    return tmp, exp.checkpoint_io


def test_a_sharded_save_holds_what_the_single_file_holds(saved):
    tmp, io = saved
    assert sorted(os.listdir(tmp / "folder")) == ["index.h5", "shard-00000.h5"]
    assert_same(tmp / "single.h5", tmp / "folder")
    files = sum(os.path.getsize(tmp / "folder" / n) for n in os.listdir(tmp / "folder"))
    assert io["save_format"] == "sharded" and io["save_bytes"] == files and io["save_seconds"] > 0
    assert not [n for n in os.listdir(tmp) if ".tmp-" in n or ".old-" in n]


@pytest.mark.parametrize("model", ["cnn", "gb"])
def test_resuming_a_sharded_checkpoint_reaches_the_uninterrupted_weights(files, tmp_path, model):
    _, ref = run(files[model], [], tmp_path / "full.h5")
    run(files[model], ["model.num_epochs=2"], tmp_path / "part", shard=True)
    exp, rest = run(files[model], [], tmp_path / "resumed", resume=tmp_path / "part", shard=True)
    assert rest.start_epoch == 2 and rest.epoch_costs == ref.epoch_costs
    assert (rest.train_misclass, rest.test_misclass) == (ref.train_misclass, ref.test_misclass)
    assert exp.checkpoint_io["restore_format"] == "sharded" and exp.checkpoint_io["restore_bytes"] > 0
    assert_same(tmp_path / "full.h5", tmp_path / "resumed")


def test_consolidate_and_split_round_trip(saved, tmp_path):
    tmp, _ = saved
    one = tmp_path / "one.h5"
    reshard.consolidate(tmp / "folder", one)
    assert_same(tmp / "single.h5", one)
    for n in (1, 3, 7):
        out = tmp_path / f"split{n}"
        reshard.split(one, out, n)
        assert len([f for f in os.listdir(out) if f.startswith("shard-")]) == n
        assert_same(one, out)
        back = tmp_path / f"back{n}.h5"
        reshard.consolidate(out, back)
        assert_same(one, back)


def test_a_split_checkpoint_resumes_bitwise(files, saved, tmp_path):
    """Any boxes do: a 5-shard split of the single file resumes as the single file does."""
    tmp, _ = saved
    reshard.split(tmp / "single.h5", tmp_path / "five", 5)
    run(files["gb"], [], tmp_path / "resumed.h5", resume=tmp_path / "five")
    assert_same(tmp / "full.h5", tmp_path / "resumed.h5")


def test_a_second_save_replaces_the_first_whole(files, tmp_path):
    path = tmp_path / "ck"
    run(files["cnn"], ["model.num_epochs=1"], path, shard=True)
    run(files["cnn"], ["model.num_epochs=2"], path, shard=True)
    assert read_any(path).epoch == 1 and sorted(os.listdir(tmp_path)) == ["ck"]
    run(files["cnn"], ["model.num_epochs=1"], tmp_path / "one.h5")
    for p in (path, tmp_path / "one.h5"):
        sharded.remove_any(p)
    assert os.listdir(tmp_path) == []


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_a_damaged_shard_is_refused_naming_it(files, saved, tmp_path):
    tmp, _ = saved
    bad = _copy(tmp / "folder", tmp_path / "bad")
    with h5py.File(bad / "shard-00000.h5", "r+") as f:
        d = f["000002"]
        d[(0,) * d.ndim] = d[(0,) * d.ndim] + 1.0
    with pytest.raises(CheckpointError, match=r"shard shard-00000.h5 is damaged: \S+ value fails its CRC-32"):
        run(files["gb"], [], tmp_path / "x.h5", resume=bad)
    with pytest.raises(CheckpointError, match="shard shard-00000.h5 is damaged"):
        read_any(bad)


def test_an_incomplete_checkpoint_is_refused(files, saved, tmp_path):
    tmp, _ = saved
    no_index = _copy(tmp / "folder", tmp_path / "noindex")
    os.unlink(no_index / "index.h5")
    with pytest.raises(CheckpointError, match=r"incomplete sharded checkpoint: no index.h5"):
        run(files["gb"], [], tmp_path / "x.h5", resume=no_index)
    no_shard = _copy(tmp / "folder", tmp_path / "noshard")
    os.unlink(no_shard / "shard-00000.h5")
    with pytest.raises(CheckpointError, match="shard shard-00000.h5 is missing"):
        run(files["gb"], [], tmp_path / "x.h5", resume=no_shard)
    # a shard of another save (a crash between two saves' files) is not mixed in
    other = tmp_path / "other"
    run(files["gb"], ["model.num_epochs=1"], other, shard=True)
    mixed = _copy(tmp / "folder", tmp_path / "mixed")
    os.replace(other / "shard-00000.h5", mixed / "shard-00000.h5")
    with pytest.raises(CheckpointError, match="shard shard-00000.h5 belongs to another save"):
        read_any(mixed)


def test_a_folder_that_is_no_checkpoint_and_the_sharded_key(files, tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(CheckpointError, match="is a directory, not a checkpoint file"):
        read_checkpoint(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="is a directory, not a checkpoint file"):
        read_any(tmp_path / "plain")
    with pytest.raises(ConfigError, match="checkpoint sharded must be True or False"):
        load_experiment(str(files["cnn"]), ["checkpoint={sharded: 1}"])


def test_the_index_records_boxes_and_checksums(saved):
    tmp, _ = saved
    with h5py.File(tmp / "folder" / "index.h5", "r") as f:
        arrays = json.loads(f.attrs["arrays"])
        shards = json.loads(f.attrs["shards"])
    assert [s["file"] for s in shards] == ["shard-00000.h5"]
    for e in arrays:
        for key in e["keys"]:
            (piece,) = e["pieces"][key]
            assert piece["box"] == [[0, n] for n in e["shape"]] and isinstance(piece["crc32"], int)


def test_pieces_stream_in_blocks(files, saved, tmp_path, monkeypatch):
    """Blocks of a few rows (their CRC-32 summed up on the way) load the same state; a damaged
    row past the first block is still caught."""
    tmp, _ = saved
    monkeypatch.setattr(sharded, "BLOCK_BYTES", 100)
    run(files["gb"], [], tmp_path / "resumed.h5", resume=tmp / "folder")
    assert_same(tmp / "full.h5", tmp_path / "resumed.h5")
    bad = _copy(tmp / "folder", tmp_path / "bad")
    with h5py.File(bad / "shard-00000.h5", "r+") as f:
        d = max((f[k] for k in f), key=lambda d: d.shape[0] if d.ndim else 0)
        assert d.shape[0] * np.prod(d.shape[1:]) * d.dtype.itemsize > 300
        d[-1] = d[-1] * 2 + 1
    with pytest.raises(CheckpointError, match="shard shard-00000.h5 is damaged"):
        read_any(bad)


def test_adam_state_and_steps_through_the_cli(tmp_path):
    """``distnet run --sharded-checkpoint`` of a sequence-to-sequence model with Adam: the
    folder holds Adam's moments and the step count, a run resumed from it equals the
    uninterrupted one bit for bit, and run.json records the checkpoint's bytes and seconds."""
    from pathlib import Path

    from click.testing import CliRunner

    from distnet.cli.main import main
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "seq2seq_numbers.yaml")
    small = ["--set", "dataset.digits=2", "--set", "dataset.n_train=200", "--set", "dataset.n_test=40",
             "--set", "backend.dtype=float64", "--set", "model.hidden=8", "--set", "model.embed=4"]

    def run(epochs, name, *extra):
        r = CliRunner().invoke(main, ["run", exp, "-q", "--no-progress", "--run-dir", str(tmp_path / name),
                                      "--set", f"model.num_epochs={epochs}", *small, *extra])
        assert r.exit_code == 0, r.output
        return json.loads((tmp_path / name / "run.json").read_text())

    run(3, "full")
    part = run(1, "part", "--sharded-checkpoint")
    assert os.path.isdir(tmp_path / "part" / "checkpoint.h5")
    io = part["checkpoint_io"]
    assert io["save_format"] == "sharded" and io["save_bytes"] > 0 and io["save_seconds"] > 0
    resumed = run(3, "resumed", "--resume", str(tmp_path / "part"))
    assert resumed["checkpoint_io"]["restore_format"] == "sharded"
    a, b = (read_any(tmp_path / n / "checkpoint.h5") for n in ("full", "resumed"))
    held = sharded.stored_arrays(sharded.read_index(tmp_path / "part" / "checkpoint.h5").params)
    assert held and all(h["velocity"] is None and sorted(h["state"]) == ["m", "v"] for h in held)
    assert a.meta["steps"] == b.meta["steps"] == 3 * 4
    for ea, eb in zip(a.params, b.params):
        assert sorted(ea["state"]) == ["m", "v"]
        for k in ("m", "v"):
            np.testing.assert_array_equal(ea["state"][k], eb["state"][k])
        np.testing.assert_array_equal(ea["value"], eb["value"])


def test_the_checkpoint_commands(saved, tmp_path):
    from click.testing import CliRunner

    from distnet.cli.main import main
    tmp, _ = saved

    def cli(*args):
        return CliRunner().invoke(main, ["checkpoint", *map(str, args)])
    r = cli("consolidate", tmp / "folder", tmp_path / "one.h5")
    assert r.exit_code == 0 and r.output.startswith(f"{tmp_path / 'one.h5'}: epoch 1, 2 parameters and 0 buffers "
                                                    "from 1 shard(s), "), r.output
    assert_same(tmp / "single.h5", tmp_path / "one.h5")
    r = cli("split", tmp_path / "one.h5", tmp_path / "two", "--shards", 2)
    assert r.exit_code == 0 and "in 2 shard(s)" in r.output, r.output
    assert_same(tmp / "single.h5", tmp_path / "two")
    r = cli("split", tmp_path / "one.h5", tmp_path / "two")
    assert r.exit_code == 1 and "checkpoint" in r.output and "already exists; give --force" in r.output
    assert cli("split", tmp_path / "one.h5", tmp_path / "two", "--shards", 3, "--force").exit_code == 0
    assert len(read_any(tmp_path / "two").meta["shards"]) == 3
    (tmp_path / "junk.h5").write_text("junk")
    r = cli("split", tmp_path / "junk.h5", tmp_path / "j")
    assert r.exit_code == 1 and "not a readable HDF5 file" in r.output and not (tmp_path / "j").exists()


def test_a_sharded_checkpoint_without_momentum_state_warns_what_is_reset(files, tmp_path, caplog):
    """As for a single file: resuming without the velocities the run keeps is said, once."""
    import logging
    single = tmp_path / "ck.h5"
    run(files["cnn"], ["model.num_epochs=1"], checkpoint=single)
    with h5py.File(single, "a") as f:
        for name in list(f["params"]):
            del f[f"params/{name}/velocity"]
    reshard.split(single, tmp_path / "bare", 2)
    exp = load_experiment(str(files["cnn"]), ["model.num_epochs=2"])
    exp.setup()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-sck-state"):
        sharded.apply_sharded(exp.model, sharded.read_index(tmp_path / "bare"), logging.getLogger("test-sck-state"))
    lines = [r.getMessage() for r in caplog.records if r.name == "test-sck-state" and r.levelno == logging.WARNING]
    assert len(lines) == 1 and "holds no momentum velocity for conv.W, hidden.W, out.W, out.b" in lines[0], lines
    assert all(p.velocity is None for layer in exp.model.layers for p in layer.params())
