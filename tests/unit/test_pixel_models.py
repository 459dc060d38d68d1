"""A model that ends in per-pixel maps: the cost must fit the output (a ConfigError at the YAML
line otherwise), trainings on the device path agree with numpy and wait once per step, and the
per-pixel metrics (counts of pixels, IoU, Dice) reach metrics.jsonl, the final record,
``distnet evaluate`` (with class names), TensorBoard and ``distnet plot``; the checkpoint policy
knows their names and directions."""
import json

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment, load_experiment_text
from distnet.errors import ConfigError
from distnet.experiments.policy import check_monitor, check_policy_keys, higher_is_better
from distnet.models.notes import model_notes
from distnet.ops.confusion import pixel_confusion_counts, segmentation_rates
from distnet.testing import measure
from distnet.testing.backends import assert_agree, make_backend
from tests.pixel_data import pixel_experiment
from tests.tiny import KeepRecords

# -- the output must fit the cost ------------------------------------------------------------------

FC_OUT = ("!obj:distnet.layers.ConvLayer {name: scores, nofm: NOUT, fshape: 3, padding: 1,",
          "!obj:distnet.layers.Layer {name: scores, nout: NOUT,")


def _error(tmp_path, text):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        exp = load_experiment(str(path))
        exp.check()
        exp.layout(1)
        exp.setup(Topology.serial())
    return str(e.value)


def _line(text, needle):
    return 1 + text[:text.index(needle)].count("\n")


def test_a_per_pixel_cost_on_a_vector_output_is_refused_at_the_cost(tmp_path):
    text = pixel_experiment("ce").replace(*[s.replace("NOUT", "3") for s in FC_OUT])
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'exp.yaml'}:{_line(text, 'PixelSoftmaxCrossEntropy')}:")
    assert "PixelSoftmaxCrossEntropy is a per-pixel cost: the last layer must give maps" in message
    assert "layer 'scores' gives a vector of 3" in message


def test_a_per_image_cost_on_maps_is_refused_at_the_last_layer(tmp_path):
    text = pixel_experiment("ce").replace(pixel_experiment("ce").split("cost: ")[1].split("\n")[0],
                                          "!obj:distnet.costs.SoftmaxCrossEntropy {},")
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'exp.yaml'}:{_line(text, 'name: scores')}:")
    assert "must give a vector (a fully connected layer), but it gives maps 3x12x10" in message
    assert "per-pixel cost (PixelSoftmaxCrossEntropy, DiceLoss, PixelBinaryCrossEntropy)" in message


def test_labels_per_pixel_under_a_per_image_cost_are_refused_at_the_cost(tmp_path):
    ce = pixel_experiment("ce")
    text = ce.replace(*[s.replace("NOUT", "3") for s in FC_OUT]).replace(
        ce.split("cost: ")[1].split("\n")[0], "!obj:distnet.costs.SoftmaxCrossEntropy {},")
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'exp.yaml'}:{_line(text, 'SoftmaxCrossEntropy')}:")
    assert "the data set gives a label per pixel, but the cost SoftmaxCrossEntropy is per image; use a " \
           "per-pixel cost (PixelSoftmaxCrossEntropy, DiceLoss, PixelBinaryCrossEntropy)" in message


@pytest.mark.parametrize("change, expect", [
    ({"name: scores, nofm: 3, fshape: 3, padding: 1": "name: scores, nofm: 3, fshape: 3"},
     "scores every pixel of the images (12x10, the plane their labels cover), but the last layer 'scores' "
     "gives maps of 10x8"),
    ({"class_weights: [0.5, 1.0, 2.0]": "class_weights: [0.5, 1.0]"},
     "class_weights has 2 value(s), but the cost weighs 3 class(es)"),
    ({"name: scores, nofm: 3": "name: scores, nofm: 4"},
     "gives 4 map(s), but the cost PixelSoftmaxCrossEntropy needs 3 map(s) for the dataset's 3 classes"),
    ({"batch_size: 6,": "batch_size: 6, micro_batches: 2,"},
     "normalises over the whole minibatch; it cannot run with micro_batches: 2"),
    ({"eval_every: 1,": "eval_every: 1, top_k: 2,"}, "top_k: 2: a per-pixel model measures no top-k error rate"),
    ({"PixelSoftmaxCrossEntropy {ignore_label: 255": "PixelSoftmaxCrossEntropy {ignore_label: 254"},
     "the data set marks unlabelled pixels with 255, but the cost PixelSoftmaxCrossEntropy has ignore_label: 254"),
])
def test_what_does_not_fit_is_one_located_error(tmp_path, change, expect):
    text = pixel_experiment("ce")
    for old, new in change.items():
        assert old in text
        text = text.replace(old, new)
    message = _error(tmp_path, text)
    assert expect in message, message
    assert message.startswith(f"{tmp_path / 'exp.yaml'}:")


def test_binary_cross_entropy_needs_one_map_and_two_classes(tmp_path):
    text = pixel_experiment("bce").replace("classes: 2", "classes: 3")
    assert "needs one map and a dataset of 2 classes (it has 3)" in _error(tmp_path, text)


# -- trainings on the device path ----------------------------------------------------------------

def _run(text, backend="numpy", dtype="float64"):
    exp = load_experiment_text(text)
    exp.backend = make_backend(backend, dtype=dtype, rng_seed=exp.backend.rng_seed)
    records = []
    return exp, exp.run(topology=Topology.serial(), hooks=KeepRecords(records)), records


@pytest.mark.parametrize("name", ["ce", "dice", "bce"])
def test_the_device_path_trains_as_numpy_and_waits_once_per_step(monkeypatch, name):
    _, ref, ref_records = _run(pixel_experiment(name))
    waits = measure.waits_per_train_step(monkeypatch)
    _, got, records = _run(pixel_experiment(name), "devicelike")
    assert waits and set(waits) == {1}
    assert_agree(got.epoch_costs, ref.epoch_costs, "float64")
    for mine, theirs in zip(records, ref_records, strict=True):
        assert mine["test_confusion"] == theirs["test_confusion"] and mine["valid_miou"] == theirs["valid_miou"]
    assert got.final_metrics == ref.final_metrics


# -- the metrics from counts ---------------------------------------------------------------------

def test_segmentation_rates_against_a_pixel_loop():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, (5, 7, 6))
    predicted = np.where(rng.uniform(size=labels.shape) < 0.6, labels, rng.integers(0, 4, labels.shape))
    labels[0, 0] = 9
    predicted[labels == 3] = 1                      # class 3: labelled, never predicted
    labels[labels == 2] = 1                         # class 2: predicted, never labelled
    confusion = pixel_confusion_counts(predicted, labels, 5, ignore_label=9)
    keep = labels != 9
    assert confusion.sum() == keep.sum()
    r = segmentation_rates(confusion)
    assert r["pixel_acc"] == 100.0 * np.sum((predicted == labels) & keep) / keep.sum()
    for c in range(5):
        tp = np.sum((predicted == c) & (labels == c) & keep)
        union = np.sum(((predicted == c) | (labels == c)) & keep)
        if union:
            assert r["class_iou"][c] == 100.0 * tp / union
            size = np.sum((predicted == c) & keep) + np.sum((labels == c) & keep)
            assert r["class_dice"][c] == 100.0 * 2 * tp / size
        else:
            assert r["class_iou"][c] is None and r["class_dice"][c] is None   # class 4: nowhere
    assert r["class_iou"][3] == 0.0 and r["class_iou"][2] == 0.0
    assert r["miou"] == np.mean([v for v in r["class_iou"] if v is not None])
    halves = (pixel_confusion_counts(predicted[:2], labels[:2], 5, 9)
              + pixel_confusion_counts(predicted[2:], labels[2:], 5, 9))
    assert (halves == confusion).all()             # counts of parts add up: any tiling


def test_the_policy_knows_the_metrics_and_their_directions():
    assert higher_is_better("valid_miou") and higher_is_better("valid_dice") and higher_is_better("test_pixel_acc")
    assert higher_is_better("valid_token_acc") and not higher_is_better("valid_misclass")
    assert not higher_is_better("valid_cost") and not higher_is_better("valid_top5_misclass")
    for monitor in ("valid_miou", "valid_dice", "valid_pixel_acc", "valid_top3_misclass", "valid_seq_acc"):
        check_policy_keys({"monitor": monitor})
    with pytest.raises(ConfigError, match="valid_mIoU: the evaluations record no 'mIoU' of the valid split; .*valid_miou"):
        check_monitor({"monitor": "valid_mIoU"}, ("train", "valid"), ("cost", "misclass", "pixel_acc", "miou", "dice"))
    with pytest.raises(ConfigError, match="valid_class_iou holds a value per class; monitor one number"):
        check_policy_keys({"monitor": "valid_class_iou"})


def test_monitoring_the_mean_iou_keeps_the_epoch_of_the_largest(tmp_path):
    text = pixel_experiment("ce").replace("eval_every: 1,", "eval_every: 1, checkpoint: {monitor: valid_miou},")
    _, result, records = _run(text)
    best = max(records, key=lambda r: r["valid_miou"])
    assert result.best_epoch["metric"] == "valid_miou" and result.best_epoch["epoch"] == best["epoch"]
    assert json.dumps(records)                      # every record is JSON (None for a class without IoU)


@pytest.mark.parametrize("name, activation, expect", [
    ("ce", "Logistic", "its activation Logistic changes the logits PixelSoftmaxCrossEntropy takes"),
    ("bce", "Identity", "its activation Identity does not give the probabilities PixelBinaryCrossEntropy takes"),
    ("dice", "Identity", None),
])
def test_a_last_activation_that_does_not_suit_the_cost_is_a_note(name, activation, expect):
    text = pixel_experiment(name)
    for act in ("Identity", "Logistic"):
        text = text.replace(f"distnet.activations.{act}", f"distnet.activations.{activation}")
    notes = [message for _, message in model_notes(load_experiment_text(text).model)]
    assert (notes == []) if expect is None else (len(notes) == 1 and expect in notes[0]), notes
