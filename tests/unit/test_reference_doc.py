"""The YAML reference (docs/yaml.md) against the code: the mapping keys it lists are the ones the
code reads, every backend key is described, no class path is listed twice, and every neon
class path of docs/neon-semantics.md#keys-per-class is accepted."""
import inspect
import re

import pytest

from distnet.backend import Backend
from distnet.config import registry
from distnet.config.reference import MAPPINGS, reference_markdown
from distnet.layers.params import _INIT_KEYS
from distnet.optim import sgd


def _table(section):
    """``{type: set of keys}`` of the first table under ``### section`` in MAPPINGS."""
    body = MAPPINGS.split(f"### {section}\n", 1)[1].split("\n### ", 1)[0]
    rows = [r for r in body.splitlines() if r.startswith("| `") and not r.startswith("| `type` |")]
    out = {}
    for row in rows:
        types, keys = row.split(" | ")[:2]
        for t in re.findall(r"`(\w+)`", types):
            out[t] = set(re.findall(r"`(\w+)`", keys))
    return out


def test_weight_init_table_is_the_codes():
    assert _table("weight_init") == {t: set(keys) for t, keys in _INIT_KEYS.items()}
    assert "`bias_init`" in MAPPINGS and "`dtype`" in MAPPINGS


def test_momentum_table_is_the_codes():
    table = _table("momentum")
    assert set(table) == set(sgd._TYPES)
    assert set().union(*table.values()) | {"type"} == sgd._KEYS


def test_every_backend_key_is_described():
    doc = reference_markdown()
    section = doc.split("## Backends\n", 1)[1].split("\n### ", 1)[0]
    for key in inspect.signature(Backend.__init__).parameters:
        if key != "self":
            assert f"* `{key}` (" in section, key


def test_no_class_path_is_listed_twice():
    for line in reference_markdown().splitlines():
        if line.startswith("Paths: "):
            paths = re.findall(r"`([^`]+)`", line)
            assert len(paths) == len(set(paths)), line


NEON_PATHS = [   # neon v0.4.0's classes (docs/neon-semantics.md#keys-per-class)
    "neon.experiments.fit.FitExperiment", "neon.experiments.fit_predict_err.FitPredictErrorExperiment",
    "neon.backends._numpy.Numpy", "neon.backends._numpy.Numpy64",
    "neon.datasets.mnist.MNIST", "neon.datasets.cifar10.CIFAR10",
    "neon.models.mlp.MLP", "neon.models.convnet_dist.ConvnetDist", "neon.models.gb.GB", "neon.models.gb_dist.GBDist",
    *(f"neon.models.layer.{c}" for c in (
        "Layer", "LayerWithNoBias", "LayerWithNoBiasDist", "ConvLayer", "ConvLayerDist", "MaxPoolingLayer",
        "MaxPoolingLayerDist", "L2PoolingLayer", "L2PoolingLayerDist", "AveragePoolingLayer", "LCNLayer",
        "LCNLayerDist", "LocalFilteringLayer", "LocalFilteringLayerDist")),
    "neon.transforms.cross_entropy.CrossEntropy", "neon.transforms.sum_squared.SumSquaredDiffs",
    "neon.transforms.logistic.Logistic", "neon.transforms.rectified.RectLin", "neon.transforms.linear.Identity",
    "neon.transforms.tanh.Tanh",
]


@pytest.mark.parametrize("path", NEON_PATHS)
def test_neon_class_paths_are_accepted(path):
    cls, _ = registry.resolve(path)
    name = path.rsplit(".", 1)[1]
    assert cls.__name__ == (registry.alias_of(name) or name)   # neon's Dist names: aliases


def test_an_alias_is_listed_once_under_its_class():
    doc = reference_markdown()
    assert "### ConvLayerDist" not in doc and "### LayerDist" not in doc and "### Layer\n" not in doc
    section = doc.split("### FullyConnectedLayer\n", 1)[1].split("\n### ", 1)[0]
    assert "**Layer** (`distnet.layers.Layer`, `neon.models.layer.Layer`)" in section
    assert "**LayerDist** (`distnet.layers.LayerDist`, `neon.models.layer.LayerDist`)" in section


def test_seq2seq_experiment_keys_show_their_bounds():
    """data/pipe >= 1 and eval_every >= 0 were checked but documented as a bare 'int'."""
    doc = reference_markdown()
    section = doc.split("### Seq2SeqExperiment\n", 1)[1].split("\n### ", 1)[0]
    assert "| `data` | int >= 1 | `1` |" in section and "| `pipe` | int >= 1 | `1` |" in section
    assert "| `eval_every` | int >= 0 | `0` |" in section
