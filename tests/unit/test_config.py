"""Experiment files: construction through the registry, and errors that name file, line and key."""
import pytest

from distnet.config import load_experiment, load_experiment_text
from distnet.config.builder import config_name
from distnet.config.registry import known_classes
from distnet.errors import ConfigError

HEADER = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: &be !obj:distnet.backends.Numpy {rng_seed: 0},
  datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere}],
  model: !obj:distnet.models.MLP {
    num_epochs: 1,
    learning_rate: 0.1,
    layers: [
"""
FOOTER = """    ],
  },
}
"""
CONV = "      !obj:distnet.layers.ConvLayer {nofm: 4, fshape: 5, weight_init: {type: uniform, low: -0.1, high: 0.1}},\n"
POOL = "      !obj:distnet.layers.MaxPoolingLayer {fshape: 2},\n"
FC = "      !obj:distnet.layers.LayerWithNoBias {nout: 10, weight_init: {type: uniform}},\n"


def build(*layers):
    return load_experiment_text(HEADER + "".join(layers) + FOOTER, "exp.yaml")


def error_of(*layers):
    with pytest.raises(ConfigError) as e:
        exp = build(*layers)
        exp.model.infer_shapes(exp.dataset.image_shape)
    return e.value


def test_builds_objects_and_derives_shapes():
    exp = build(CONV, POOL, FC)
    assert exp.model.infer_shapes((1, 28, 28)) == (10,)
    conv, pool, fc = exp.model.layers
    assert conv.out_shape == (4, 24, 24) and pool.out_shape == (4, 12, 12)
    assert fc.nfeat == 4 * 12 * 12


def test_aliases_are_the_same_object():
    exp = build(CONV, FC)
    assert exp.backend.rng_seed == 0
    text = HEADER.replace("model: !obj:distnet.models.MLP {", "model: !obj:distnet.models.MLP {\n    cost: &c !obj:distnet.costs.CrossEntropy {},") + FC + FOOTER
    exp = load_experiment_text(text, "x.yaml")
    assert type(exp.model.cost).__name__ == "CrossEntropy"


def test_neon_class_paths_are_aliases():
    exp = load_experiment("experiments/neon_mnist_numpy_cnn-20-50-500-10.yaml")
    assert [type(l).__name__ for l in exp.model.layers] == [
        "ConvLayer", "MaxPoolingLayer", "ConvLayer", "MaxPoolingLayer", "FullyConnectedNoBiasLayer",
        "FullyConnectedNoBiasLayer"]
    assert [config_name(l) for l in exp.model.layers][-2:] == ["LayerWithNoBias"] * 2   # as the file wrote
    assert exp.model.infer_shapes((1, 28, 28)) == (10,)


def test_messages_and_default_names_say_the_name_the_file_wrote():
    """``ConvLayerDist`` builds a ``ConvLayer``; the user reads ``ConvLayerDist`` back."""
    e = error_of(CONV.replace("ConvLayer {", "ConvLayerDist {").replace("nofm: 4", "nofm: 4, bogus: 1"), FC)
    assert "unknown key for ConvLayerDist" in str(e)
    e = error_of(CONV.replace("ConvLayer {", "ConvLayerDist {").replace("fshape: 5", "fshape: 40"), FC)
    assert "layer 'ConvLayerDist0'" in str(e) and e.key == "fshape"
    exp = build(CONV.replace("ConvLayer {", "ConvLayerDist {"), FC.replace("LayerWithNoBias {", "LayerDist {"))
    assert [layer.name for layer in exp.model.layers] == ["ConvLayerDist0", "LayerDist1"]   # checkpoints name them
    assert [type(layer).__name__ for layer in exp.model.layers] == ["ConvLayer", "FullyConnectedLayer"]


def test_unknown_class_names_line_and_suggests():
    e = error_of(CONV.replace("ConvLayer", "ConvLayr"))
    assert "exp.yaml:8" in str(e) and "ConvLayer" in str(e)


def test_arbitrary_python_paths_are_never_imported():
    e = error_of("      !obj:os.system {command: 'echo hi'},\n")
    assert "unknown class !obj:os.system" in str(e)


def test_unknown_key_names_key_line_and_valid_keys():
    e = error_of(CONV, "      !obj:distnet.layers.MaxPoolingLayer {\n        fshape: 2,\n        strid: 2},\n", FC)
    assert e.where == "exp.yaml:11" and e.key == "strid"
    assert "stride" in str(e)


def test_missing_required_key():
    e = error_of("      !obj:distnet.layers.ConvLayer {fshape: 5, weight_init: {type: uniform}},\n")
    assert "nofm" in str(e) and "exp.yaml:8" in str(e)


def test_wrong_type():
    e = error_of(CONV.replace("nofm: 4", "nofm: four"))
    assert e.key == "nofm" and "integer" in str(e)


def test_inconsistent_declared_shape_names_key():
    e = error_of(CONV, POOL.replace("{fshape: 2}", "{fshape: 2, nifm: 5}"), FC)
    assert e.key == "nifm" and "exp.yaml:9" in str(e) and "4 maps" in str(e)


def test_inconsistent_nin():
    e = error_of(CONV, POOL, FC.replace("{nout: 10", "{nin: 100, nout: 10"))
    assert e.key == "nin" and "576" in str(e)


def test_bad_weight_init():
    e = error_of(CONV.replace("type: uniform, low", "type: unifrom, low"))
    assert e.key == "weight_init" and "uniform" in str(e)


def test_malformed_yaml_names_line():
    with pytest.raises(ConfigError) as e:
        load_experiment_text("!obj:distnet.experiments.FitExperiment {\n  model: [1, 2\n", "bad.yaml")
    assert "bad.yaml:" in str(e.value) and "malformed YAML" in str(e.value)


def test_root_must_be_an_experiment():
    with pytest.raises(ConfigError, match="root"):
        load_experiment_text("!obj:distnet.backends.Numpy {}", "r.yaml")


def test_window_too_large_for_input():
    e = error_of(CONV.replace("fshape: 5", "fshape: 40"), FC)
    assert e.key == "fshape" and "larger than the input" in str(e)


def test_registry_lists_neon_paths():
    names = {n: p for n, _, _, p in known_classes()}
    assert names["ConvLayerDist"] == "neon.models.layer.ConvLayerDist"
    assert names["MLP"] == "neon.models.mlp.MLP"


def test_yaml_reference_is_up_to_date():
    """docs/yaml.md is generated (`distnet check --reference > docs/yaml.md`)."""
    from pathlib import Path

    from distnet.config.reference import reference_markdown
    doc = Path(__file__).resolve().parents[2] / "docs" / "yaml.md"
    assert doc.read_text() == reference_markdown(), "regenerate: distnet check --reference > docs/yaml.md"


@pytest.mark.parametrize("layer, key", [
    (CONV.replace("nofm: 4", "nofm: null"), "nofm"),          # required
    (CONV.replace("nofm: 4", "nofm: ~"), "nofm"),
    (CONV.replace("fshape: 5", "fshape: null"), "fshape"),
    (CONV.replace("nofm: 4", "nofm: 4, stride: null"), "stride"),   # default 1
    (CONV.replace("nofm: 4", "nofm: 4, padding: null"), "padding"),
    (FC.replace("nout: 10", "nout: null"), "nout"),
])
def test_null_for_a_key_that_needs_a_value_names_the_key(layer, key):
    e = error_of(layer, FC)
    assert e.key == key and "null" in str(e) and "exp.yaml:8" in str(e)


def test_null_for_a_key_whose_default_is_none_means_not_given():
    exp = build(CONV.replace("nofm: 4", "nofm: 4, nifm: null, activation: null"), FC)
    assert exp.model.infer_shapes((1, 28, 28)) == (10,)


@pytest.mark.parametrize("text, key", [
    (HEADER.replace("num_epochs: 1", "num_epochs: null") + CONV + FOOTER, "num_epochs"),
    (HEADER.replace("rng_seed: 0", "rng_seed: null") + CONV + FOOTER, "rng_seed"),
    (HEADER.replace("learning_rate: 0.1", "learning_rate: 0.1, shuffle: null") + CONV + FOOTER, "shuffle"),
    (HEADER.replace("!obj:distnet.experiments.FitPredictErrorExperiment {",
                    "!obj:distnet.experiments.FitPredictErrorExperiment { eval_every: null,") + CONV + FOOTER,
     "eval_every"),
])
def test_null_elsewhere_in_the_file(text, key):
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, "exp.yaml")
    assert e.value.key == key and "null" in str(e.value) and "exp.yaml:" in str(e.value)


@pytest.mark.parametrize("text, key", [
    (HEADER + "      null,\n" + CONV + FOOTER, "layers"),
    (HEADER + CONV + "      ~,\n" + FOOTER, "layers"),
    (HEADER.replace("datasets: [!obj:", "datasets: [null, !obj:") + CONV + FOOTER, "datasets"),
    (HEADER.replace("datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere}]", "datasets: [null]")
     + CONV + FOOTER, "datasets"),
    (HEADER + CONV.replace("nofm: 4", "nofm: 4, inputs: [null]") + FOOTER, "inputs"),
])
def test_a_null_item_in_a_list_is_refused(text, key):
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, "exp.yaml")
    assert e.value.key == key and "item" in str(e.value) and "null" in str(e.value)


def test_a_required_object_given_null():
    with pytest.raises(ConfigError) as e:
        load_experiment_text("!obj:distnet.experiments.FitExperiment {model: null,\n"
                             "  datasets: [!obj:distnet.datasets.MNIST {repo_path: x}]}\n", "exp.yaml")
    assert e.value.key == "model" and "exp.yaml:1" in str(e.value) and "null" in str(e.value)


def test_a_key_given_twice_is_an_error_naming_both_lines():
    """``weight_init: {low: -0.1, high: 0.1, high: 5}`` and ``shuffle: True, shuffle: False``:
    one of the two values is a mistake, so the file is refused at the repeat's line."""
    text = HEADER + CONV.replace("high: 0.1}", "high: 0.1,\n high: 0.2}") + FOOTER
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, "exp.yaml")
    assert e.value.key == "high" and e.value.where == "exp.yaml:9"
    assert "given twice (also at exp.yaml:8)" in str(e.value), str(e.value)
    with pytest.raises(ConfigError) as e:
        load_experiment_text(HEADER.replace("num_epochs: 1,", "num_epochs: 1, num_epochs: 2,") + CONV + FOOTER,
                             "exp.yaml")
    assert e.value.key == "num_epochs" and "given twice in !obj:" in str(e.value), str(e.value)


def test_merge_keys_are_not_duplicates():
    """An explicit key overriding one merged in with ``<<:`` is YAML's merge, not a duplicate."""
    text = HEADER.replace("num_epochs: 1,", "num_epochs: 1, momentum: {<<: &m {type: constant, coef: 0.5}, coef: 0.9},") \
        + CONV + FOOTER
    exp = load_experiment_text(text, "exp.yaml")
    assert exp.model.momentum.coef == 0.9
    assert not [t for _, t in exp.config_notes if "twice" in t]


def test_an_object_of_the_wrong_kind_is_named_by_its_class_path():
    """``cost: !obj:...RectLin {}`` said "got <distnet.ops.activations.RectLin object at 0x...>"."""
    e = error_of(CONV, FC.replace("nout: 10,", "nout: 10, name: out,").replace(
        "weight_init: {type: uniform}}", "weight_init: {type: uniform}, activation: !obj:distnet.costs.CrossEntropy {}}"))
    assert e.key == "activation" and "got !obj:distnet.costs.CrossEntropy (a cost)" in str(e) and " at 0x" not in str(e)


def test_an_activation_given_a_key_says_it_takes_none():
    e = error_of(CONV, FC.replace("weight_init: {type: uniform}}",
                                  "weight_init: {type: uniform}, activation: !obj:distnet.activations.RectLin {slope: 1}}"))
    assert e.key == "slope" and "RectLin takes no keys" in str(e)


@pytest.mark.parametrize("edit, key", [
    (('nofm: 4', 'nofm: 4, name: "conv\\x00"'), "name"),                       # a traceback at the checkpoint
    (("repo_path: ./nowhere", 'repo_path: "now\\0here"'), "repo_path"),
    (("FitPredictErrorExperiment {", 'FitPredictErrorExperiment { checkpoint: {path: ["c\\x00.h5"]},'),
     "checkpoint"),                                                           # nested in a mapping and a list
])
def test_a_nul_character_in_a_string_is_refused(edit, key):
    """No file name, HDF5 name or log file can hold NUL: open() raised 'embedded null byte'."""
    text = (HEADER + CONV + FOOTER).replace(*edit)
    assert edit[1] in text
    with pytest.raises(ConfigError, match=r"NUL") as e:
        load_experiment_text(text, "exp.yaml")
    assert e.value.key == key and "exp.yaml:" in str(e.value)
