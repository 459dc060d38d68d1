"""The classification counts (against a per-row loop), the top-k rule, and the checkpoint
policy's decisions: best epoch, patience and min_delta, keep_last, {epoch} paths, the test split
refused, and a replayed history that decides as the uninterrupted run."""
import os

import numpy as np
import pytest

from distnet.errors import ConfigError
from distnet.experiments.base import check_checkpoint_key
from distnet.experiments.metrics import resolve_top_k
from distnet.experiments.policy import CheckpointPolicy, best_file, checkpoint_file
from distnet.ops.confusion import confusion_counts, rates, topk_misses


def test_confusion_and_topk_against_a_row_loop():
    rng = np.random.RandomState(0)
    y = rng.standard_normal((200, 7))
    y[::13, 3] = y[::13, 1]      # ties
    labels = rng.randint(0, 7, 200)
    want = np.zeros((7, 7), dtype=int)
    for row, label in zip(y, labels):
        want[label, int(np.argmax(row))] += 1
    assert (confusion_counts(y, labels, 7) == want).all()
    for k in (1, 2, 5):
        misses = sum(sorted(row, reverse=True).index(row[label]) >= k for row, label in zip(y, labels))
        assert topk_misses(y, labels, k) == misses
    # rates from summed partial counts equal those of the whole
    halves = confusion_counts(y[:90], labels[:90], 7) + confusion_counts(y[90:], labels[90:], 7)
    r = rates(halves, topk_misses(y, labels, 2), 2)
    wrong = int(np.count_nonzero(y.argmax(axis=1) != labels))
    assert r["misclass"] == 100.0 * wrong / 200 and r["confusion"] == want.tolist()
    assert r["class_accuracy"] == [100.0 * want[c, c] / want[c].sum() for c in range(7)]


def test_a_class_without_images_has_no_accuracy():
    r = rates(confusion_counts(np.eye(3)[[0, 0, 1]], [0, 0, 1], 3))
    assert r["class_accuracy"] == [100.0, 100.0, None] and r["misclass"] == 0.0


def test_precision_recall_and_f1_against_their_definitions():
    """Per class: precision = right / predicted as it, recall = right / its images (its accuracy),
    F1 their harmonic mean; the macro averages over the classes with images, a class never
    predicted counting 0 (scikit-learn's zero_division=0)."""
    confusion = np.array([[5, 1, 0, 0],
                          [2, 3, 0, 0],
                          [1, 1, 0, 0],        # class 2: images, never predicted
                          [0, 0, 0, 0]])       # class 3: no image
    r = rates(confusion)
    assert r["precision"] == [100 * 5 / 8, 100 * 3 / 5, None, None]
    assert r["recall"] == [100 * 5 / 6, 100 * 3 / 5, 0.0, None] and r["recall"][:3] == r["class_accuracy"][:3]
    p, q = r["precision"][0], r["recall"][0]
    assert r["f1"] == [pytest.approx(2 * p * q / (p + q)), pytest.approx(60.0), None, None]
    assert r["macro_precision"] == pytest.approx((100 * 5 / 8 + 60) / 3)
    assert r["macro_recall"] == pytest.approx((100 * 5 / 6 + 60 + 0) / 3)
    assert r["macro_f1"] == pytest.approx((r["f1"][0] + 60 + 0) / 3)
    assert list(r)[-1] == "confusion"


def test_top_k_default_and_bounds():
    assert resolve_top_k(None, 10) == 5 and resolve_top_k(None, 5) is None and resolve_top_k(0, 10) is None
    assert resolve_top_k(2, 3) == 2
    with pytest.raises(ConfigError, match="top_k must be below the number of classes"):
        resolve_top_k(3, 3)


def test_epoch_paths():
    assert checkpoint_file("ck_{epoch}.h5", 7) == "ck_7.h5"
    assert checkpoint_file("ck_{epoch:03d}.h5", 7) == "ck_007.h5"
    assert checkpoint_file("checkpoint.h5", 7) == "checkpoint.h5"
    assert best_file("out/ck_{epoch:03d}.h5") == "out/ck_best.h5"
    assert best_file("out/checkpoint.h5") == "out/checkpoint-best.h5"
    with pytest.raises(ConfigError, match=r"names \{metric\}; only \{epoch\}"):
        checkpoint_file("ck_{metric}.h5", 1)


@pytest.mark.parametrize("keys, message", [
    ({"monitor": "test_misclass"}, "monitor test_misclass selects on the test split.*select_on_test: true"),
    ({"keep_last": 2, "path": "ck.h5"}, r"keep_last needs \{epoch\} in the checkpoint path"),
    ({"patience": -1}, "patience must be an integer >= 0"),
    ({"min_delta": "a"}, "min_delta must be a number >= 0"),
    ({"monitor": "cost"}, "monitor must name a metric of an evaluated split"),
    ({"keep_best": 1}, "keep_best must be True or False"),
])
def test_policy_keys_refused(keys, message):
    with pytest.raises(ConfigError, match=message):
        check_checkpoint_key(keys)


def test_selecting_on_test_when_asked():
    """The test split is refused as the monitor (test_policy_keys_refused) unless asked for;
    asked for, the keys pass as given and the policy selects on it."""
    keys = {"monitor": "test_misclass", "select_on_test": True}
    assert check_checkpoint_key(keys) == keys
    policy = CheckpointPolicy.of(_Exp(**keys), ["train", "test"])
    assert policy.monitor == "test_misclass"
    policy.epoch_done({"epoch": 0, "test_misclass": 3.0}, last=False)
    policy.epoch_done({"epoch": 1, "test_misclass": 2.0}, last=False)
    assert policy.best == {"epoch": 1, "split": "test", "metric": "test_misclass", "value": 2.0, "misclass": 2.0}


class _Exp:
    default_metric = "misclass"

    def __init__(self, eval_every=1, **keys):
        self.checkpoint_policy = {k: v for k, v in keys.items() if k not in ("path", "every", "at_end")}
        self.checkpoint_path = keys.get("path")
        self.checkpoint_every = keys.get("every", 1)
        self.checkpoint_at_end = keys.get("at_end", True)
        self.eval_every = eval_every

    def metric_names(self):     # what a classifier with top_k 5 records
        return ("cost", "misclass", "top5_misclass", "macro_f1")


def test_no_validation_split_selects_nothing_unless_asked():
    assert CheckpointPolicy.of(_Exp(), ["train", "test"]).monitor is None
    assert CheckpointPolicy.of(_Exp(select_on_test=True), ["test"]).monitor == "test_misclass"
    with pytest.raises(ConfigError, match="has none.*select_on_test: true"):
        CheckpointPolicy.of(_Exp(keep_best=True), ["test"])
    with pytest.raises(ConfigError, match="need evaluated epochs: set eval_every"):
        CheckpointPolicy.of(_Exp(eval_every=0, patience=2), ["valid"])
    with pytest.raises(ConfigError, match="evaluates no valid split"):
        CheckpointPolicy.of(_Exp(monitor="valid_cost"), ["test"])


VALUES = [5.0, 4.0, 3.95, 4.5, 3.0, 3.0, 3.5, 3.2]   # min_delta 0.1: improvements at 0, 1, 4


def _run(policy, epochs, num_epochs=len(VALUES), history=None):
    history = [] if history is None else history
    removed = []
    for e in epochs:
        record = {"epoch": e, "valid_misclass": VALUES[e]}
        history.append(record)
        due = policy.epoch_done(record, e == num_epochs - 1)
        removed += due["remove"]
        if policy.stop:
            break
    return history, removed


def test_best_patience_min_delta_and_keep_last():
    p = CheckpointPolicy.of(_Exp(path="ck_{epoch}.h5", keep_best=True, keep_last=2, patience=3,
                                 min_delta=0.1), ["valid"])
    history, removed = _run(p, range(len(VALUES)))
    assert [r["epoch"] for r in history if r.get("best")] == [0, 1, 4]
    assert [r.get("since_best") for r in history] == [0, 0, 1, 2, 0, 1, 2, 3]
    assert p.stop["reason"] == "early_stopping" and p.stop["epoch"] == 7
    assert "since epoch 4 (patience 3)" in p.stop["detail"]
    assert p.best == {"epoch": 4, "split": "valid", "metric": "valid_misclass", "value": 3.0, "misclass": 3.0}
    assert history[4]["best_checkpoint"] == "ck_best.h5"
    assert p.kept == ["ck_6.h5", "ck_7.h5"] and removed == [f"ck_{e}.h5" for e in range(6)]
    assert p.files() == ["ck_6.h5", "ck_7.h5", "ck_best.h5"]


def test_replayed_history_decides_as_the_uninterrupted_run():
    keys = dict(path="ck_{epoch}.h5", keep_best=True, keep_last=2, patience=3, min_delta=0.1)
    whole = CheckpointPolicy.of(_Exp(**keys), ["valid"])
    want, _ = _run(whole, range(len(VALUES)))
    for cut in range(1, 7):
        first = CheckpointPolicy.of(_Exp(**keys), ["valid"])
        history, _ = _run(first, range(cut), num_epochs=cut)   # the at-end checkpoint of a shorter run
        resumed = CheckpointPolicy.of(_Exp(**keys), ["valid"])
        resumed.replay(history)
        history, _ = _run(resumed, range(cut, len(VALUES)), history=history)
        assert [{k: r.get(k) for k in ("best", "since_best", "stop")} for r in history] == \
            [{k: r.get(k) for k in ("best", "since_best", "stop")} for r in want]
        assert (resumed.best, resumed.kept, resumed.files(), resumed.stop) == \
            (whole.best, whole.kept, whole.files(), whole.stop)


def test_only_rank_0_removes_and_a_missing_file_is_no_error(tmp_path):
    (tmp_path / "a.h5").write_text("x")
    CheckpointPolicy(world_rank=1).remove([str(tmp_path / "a.h5")])
    assert os.path.exists(tmp_path / "a.h5")
    CheckpointPolicy().remove([str(tmp_path / "a.h5"), str(tmp_path / "gone.h5")])
    assert not os.path.exists(tmp_path / "a.h5")


def test_a_monitor_the_records_lack_is_refused():
    p = CheckpointPolicy.of(_Exp(monitor="valid_top5_misclass"), ["valid"])
    p.check_monitor({"epoch": 0, "cost": 1.0})     # not evaluated: nothing to say
    with pytest.raises(ConfigError, match="monitor valid_top5_misclass is not measured; the valid split gives "
                                          "valid_cost, valid_misclass"):
        p.check_monitor({"epoch": 0, "valid_cost": 1.0, "valid_misclass": 2.0, "valid_confusion": [[1]]})


def test_a_monitor_is_checked_against_the_metric_names_before_any_epoch():
    with pytest.raises(ConfigError, match="checkpoint monitor valid_misclas: the evaluations record no 'misclas' of "
                                          "the valid split; a monitor names one of valid_cost, valid_misclass, "
                                          "valid_top5_misclass, valid_macro_f1"):
        CheckpointPolicy.of(_Exp(monitor="valid_misclas"), ["valid"])
    assert CheckpointPolicy.of(_Exp(monitor="valid_macro_f1"), ["valid"]).higher_is_better
    assert not CheckpointPolicy.of(_Exp(monitor="valid_cost"), ["valid"]).higher_is_better
