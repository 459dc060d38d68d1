"""The one training loop (distnet/experiments/loop.py) on one process: what the hooks see, in
which order, and that the model is driven through its protocol (nothing planted on it)."""
import numpy as np
import pytest

from distnet.config import load_experiment
from distnet.experiments.loop import RunHooks
from distnet.models import checkpoint as ckmod
from tests.tiny import write_experiments


@pytest.fixture(autouse=True)
def _logger(restore_logger):
    """Experiments configure the distnet logger: restored after each test (tests/conftest.py)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_experiments(tmp_path_factory.mktemp("loop"))


class Recorder(RunHooks):
    def __init__(self):
        self.calls = []

    def batch(self, epoch, batch, nbatches, running_cost):
        self.calls.append(("batch", epoch, batch, nbatches, running_cost))

    def epoch(self, record):
        self.calls.append(("epoch", record))

    def pretrain(self, record):
        self.calls.append(("pretrain", record))

    def trained(self):
        self.calls.append(("trained",))


def test_batch_hook_gets_the_running_cost_of_the_epoch(files):
    """``running_cost`` before batch b is the summed cost of batches 0 .. b-1 (0.0 first): the
    epoch's mean cost times its images after the last batch's own cost."""
    exp = load_experiment(str(files["cnn"]), ["model.num_epochs=2"])
    hooks = Recorder()
    losses = []
    step = exp.model.train_step
    exp.model.train_step = lambda *a, **k: losses.append(step(*a, **k)) or losses[-1]
    result = exp.run(hooks=hooks)
    batches = [c for c in hooks.calls if c[0] == "batch"]
    assert [c[1:4] for c in batches] == [(e, b, 4) for e in range(2) for b in range(4)]
    for e in range(2):
        mine = losses[4 * e:4 * e + 4]
        assert [c[4] for c in batches[4 * e:4 * e + 4]] == [sum(mine[:b]) for b in range(4)]
        assert result.epoch_costs[e] == sum(mine) / 30


def test_pretraining_records_come_before_the_epochs_and_not_on_resume(files, tmp_path):
    exp = load_experiment(str(files["gb"]), ["model.num_epochs=2"])
    exp.checkpoint_path = str(tmp_path / "ck.h5")
    hooks = Recorder()
    exp.run(hooks=hooks)
    kinds = [c[0] for c in hooks.calls if c[0] != "batch"]
    assert kinds == ["pretrain", "epoch", "epoch", "trained"]
    assert set(hooks.calls[0][1]) == {"pretrain", "pretrain_epoch", "cost", "reconstruction", "sparsity"}
    again = load_experiment(str(files["gb"]), ["model.num_epochs=3"])
    hooks = Recorder()
    again.run(hooks=hooks, resume=exp.checkpoint_path)
    kinds = [(c[0], c[1].get("from_checkpoint", False)) if c[0] == "epoch" else (c[0],)
             for c in hooks.calls if c[0] != "batch"]
    assert kinds == [("epoch", True), ("epoch", True), ("epoch", False), ("trained",)]


def test_restore_returns_the_resume_state_and_plants_nothing(files, tmp_path):
    exp = load_experiment(str(files["cnn"]), ["model.num_epochs=1"])
    exp.checkpoint_path = str(tmp_path / "ck.h5")
    exp.run()
    again = load_experiment(str(files["cnn"]))
    again.setup()
    ck = again.restore(exp.checkpoint_path)
    assert ck.resume == ckmod.ResumeState(1, ck.shuffle_state) and ck.shuffle_state is not None
    assert not hasattr(again.model, "resume")
    # the model starts after the checkpoint's epoch, its shuffle where the checkpoint left it
    assert again.model.start(ck.resume) == 1
    assert np.array_equal(again.model.shuffle_rng.get_state()[1], ck.shuffle_state[1])
    assert again.model.start() == 0
