"""Everyday fixes: YAML 1.2 numbers in files and in ``--set``, the hint for an unquoted
``{rank}`` path, and a bare ``distnet`` printing its help."""
import subprocess
import sys

import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.config import load_experiment, load_experiment_text, parse_yaml
from distnet.config.overrides import parse_override
from distnet.config.yaml_loader import parse_scalar
from distnet.errors import ConfigError

NUMBERS = {"1e-3": 1e-3, "1E5": 1e5, ".5": 0.5, "-1.5e+3": -1500.0, "-.5": -0.5, "+2e0": 2.0,
           "1.0e-3": 1e-3, "0.5": 0.5, "3.": 3.0, ".inf": float("inf")}
NOT_FLOATS = {"12": 12, "-3": -3, "0x10": 16, "1e": "1e", "e5": "e5", "1.2.3": "1.2.3", "1e-3x": "1e-3x",
              "float64": "float64", "'1e-3'": "1e-3"}


@pytest.mark.parametrize("text,want", list(NUMBERS.items()) + list(NOT_FLOATS.items()))
def test_yaml_12_numbers(text, want):
    got = parse_scalar(text)
    assert got == want and type(got) is type(want)
    assert parse_yaml(f"{{a: {text}, b: [{text}]}}") == {"a": want, "b": [want]}
    assert parse_override(f"model.x={text}") == (["model", "x"], want)


EXP = """!obj:distnet.experiments.FitExperiment {
  datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere, sample_pct: .5}],
  model: !obj:distnet.models.MLP {num_epochs: 1, learning_rate: 1e-3,
    layers: [!obj:distnet.layers.Layer {nout: 10, learning_rate: 1E-2,
             weight_init: {type: uniform, low: -1.5e-1, high: 1.5E-1}}]}}
"""


def test_numbers_in_a_file_and_in_set(tmp_path):
    exp = load_experiment_text(EXP)
    assert exp.model.learning_rate == 1e-3 and exp.dataset.sample_pct == 0.5
    layer = exp.model.layers[0]
    assert layer.learning_rate == 1e-2 and layer.weight_init["low"] == -0.15
    path = tmp_path / "e.yaml"
    path.write_text(EXP)
    exp = load_experiment(str(path), ["model.learning_rate=5e-4", "datasets.0.sample_pct=2E1",
                                      "model.layers.0.weight_init.high=.25"])
    assert exp.model.learning_rate == 5e-4 and exp.model.layers[0].weight_init["high"] == 0.25
    assert exp.dataset.sample_pct == 20.0


def test_an_integer_key_refuses_1e5_as_a_number():
    with pytest.raises(ConfigError, match="num_epochs.*expected an integer, got 100000.0"):
        load_experiment_text(EXP.replace("num_epochs: 1", "num_epochs: 1E5"))


@pytest.mark.parametrize("line,quoted", [
    ("serialized_path: shards/{rank}.h5}],", '"shards/{rank}.h5"'),
    ("serialized_path: cache/mnist_{rank}of{size}.h5}],", '"cache/mnist_{rank}of{size}.h5"'),
    ("serialized_path: {rank}.h5}],", '"{rank}.h5"'),
])
def test_unquoted_rank_path_gets_a_hint(line, quoted):
    text = EXP.replace("sample_pct: .5}],", "sample_pct: .5,\n    " + line)
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, "e.yaml")
    msg = str(e.value)
    assert msg.startswith("e.yaml:3: malformed YAML")
    assert "must be quoted" in msg and f"serialized_path: {quoted}" in msg


def test_block_style_and_quoted_paths():
    block = "!obj:distnet.experiments.FitExperiment\ndatasets:\n- !obj:distnet.datasets.MNIST\n" \
            "  serialized_path: {rank}/mnist.h5\n"
    with pytest.raises(ConfigError, match=r'e\.yaml:4: .*write serialized_path: "\{rank\}/mnist\.h5"'):
        parse_yaml(block, "e.yaml")
    ok = parse_yaml(block.replace("{rank}/mnist.h5", '"{rank}/mnist.h5"'))
    assert ok.kwargs["datasets"][0].kwargs["serialized_path"] == "{rank}/mnist.h5"
    with pytest.raises(ConfigError) as e:           # other YAML errors get no hint
        parse_yaml("{a: [1, 2}", "e.yaml")
    assert "hint" not in str(e.value)


def test_bare_distnet_prints_help_and_succeeds():
    r = CliRunner().invoke(main, [])
    assert r.exit_code == 0 and "Usage:" in r.output and "run" in r.output
    proc = subprocess.run([sys.executable, "-m", "distnet"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Commands:" in proc.stdout
    r = CliRunner().invoke(main, ["no-such-command"])
    assert r.exit_code == 2


MLPDIST_CNN = """!obj:distnet.experiments.FitPredictErrorExperiment {
  dist_flag: True,
  datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere, dist_flag: True, dist_mode: MODE}],
  model: !obj:distnet.models.MLPDist {num_epochs: 1, learning_rate: 0.1,
    layers: [
      !obj:distnet.layers.ConvLayerDist {name: conv, nofm: 2, fshape: 5,
                                         weight_init: {type: uniform, low: -0.1, high: 0.1}},
      !obj:distnet.layers.LayerDist {name: out, nout: 10, weight_init: {type: normal}},
    ]}}
"""


@pytest.mark.parametrize("mode", ["vecpar", "halopar"])
def test_mlpdist_over_conv_is_refused_by_check_and_run(tmp_path, mode):
    path = tmp_path / "e.yaml"
    path.write_text(MLPDIST_CNN.replace("MODE", mode))
    for args in (["check", str(path)], ["run", str(path), "--no-run-dir"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, r.output
        assert f"{path}:6: layer 'conv': MLPDist shards fully connected layers" in r.output
        assert "cannot hold a ConvLayerDist" in r.output and "ConvnetDist" in r.output
        assert "give its dataset dist_mode: vecpar" not in r.output   # no longer sent there
        assert "nfeat" not in r.output


def test_mlpdist_takes_a_plain_fc_layer():
    """``Layer`` and neon's ``LayerDist`` are one class: MLPDist shards either (the vecpar tests
    under tests/mpi train the plain classes against the single-process MLP)."""
    text = MLPDIST_CNN.replace("MODE", "vecpar").replace(
        """      !obj:distnet.layers.ConvLayerDist {name: conv, nofm: 2, fshape: 5,
                                         weight_init: {type: uniform, low: -0.1, high: 0.1}},
""", "").replace("layers.LayerDist", "layers.Layer")
    exp = load_experiment_text(text, "e.yaml")
    assert [type(layer).__name__ for layer in exp.model.layers] == ["FullyConnectedLayer"]


def test_resolved_yaml_keeps_strings_that_look_like_yaml12_numbers():
    from distnet.config.resolved import dump_tree
    tree = {"name": "1e3", "half": ".5", "lr": 1e-3, "n": 5}
    assert parse_yaml(dump_tree(tree)) == tree


def test_dataset_and_datasets_0_are_one_override_key(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(EXP)                                   # datasets: [...]
    assert load_experiment(str(path), ["dataset.sample_pct=3"]).dataset.sample_pct == 3
    later = EXP.replace("datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere, sample_pct: .5}]",
                        "dataset: !obj:distnet.datasets.MNIST {repo_path: ./nowhere, sample_pct: .5}")
    path.write_text(later)                                 # neon's later dataset:
    assert load_experiment(str(path), ["datasets.0.sample_pct=4"]).dataset.sample_pct == 4
    assert load_experiment(str(path), ["dataset.sample_pct=5"]).dataset.sample_pct == 5


def test_check_refuses_an_output_layer_that_does_not_fit_the_classes_as_run_does():
    """`distnet check` said OK to 5 outputs for MNIST's 10 classes; `distnet run` refused them."""
    from pathlib import Path
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "mnist_cnn.yaml")
    r = CliRunner().invoke(main, ["check", exp, "--set", "model.layers.5.nout=5"])
    assert r.exit_code == 2 and "OK" not in r.output, r.output
    assert "key 'nout': layer 'output': gives 5 outputs but the dataset has 10 classes" in r.output


@pytest.mark.parametrize("text, words", [
    ("1:30", "base-60"),         # YAML 1.1: 90
    ("190:20:30", "base-60"),    # 685230
    ("010", "leading zero"),     # YAML 1.1: 8; YAML 1.2: 10
    ("-007", "leading zero"),
])
def test_yaml_11_integers_that_read_as_another_number_are_refused(text, words):
    """YAML 1.1 (PyYAML) reads ``1:30`` as 90 and ``010`` as 8: silently another number than
    written (``grid: 2:2``, ``nofm: 010``). They are errors naming the line, in files and --set."""
    with pytest.raises(ConfigError, match=words) as e:
        parse_yaml(f"a: 1\nb: {text}\n", "e.yaml")
    assert "e.yaml:2" in str(e.value) and text in str(e.value)
    with pytest.raises(ConfigError, match=words):
        parse_override(f"model.x={text}")


def test_integers_that_stay_integers():
    assert parse_yaml("[0, -3, +5, 1_000, 0x10, 0b101, '1:30', '010']") == [0, -3, 5, 1000, 16, 5, "1:30", "010"]


@pytest.mark.parametrize("flag", ["--reference", "--list-classes"])
def test_check_with_an_experiment_and_a_listing_flag_is_refused(flag):
    """`distnet check EXP --reference` printed the reference and checked nothing (exit 0)."""
    from pathlib import Path
    exp = str(Path(__file__).resolve().parents[2] / "experiments" / "mnist_cnn.yaml")
    r = CliRunner().invoke(main, ["check", exp, flag])
    assert r.exit_code == 2 and flag in r.output and "OK" not in r.output, r.output


def test_set_inside_an_aliased_mapping_changes_only_the_path_it_names():
    """mnist_cnn.yaml shares ``weight_init: &wt {...}`` among its four weighted layers;
    ``--set model.layers.0.weight_init.high=0.5`` changed all four."""
    from pathlib import Path
    path = str(Path(__file__).resolve().parents[2] / "experiments" / "mnist_cnn.yaml")
    exp = load_experiment(path, ["model.layers.0.weight_init.high=0.5", "model.layers.5.weight_init.low=-0.2"])
    inits = [layer.weight_init for layer in exp.model.layers if layer.name in ("conv1", "conv2", "fc1", "output")]
    assert [(w["low"], w["high"]) for w in inits] == [(-0.1, 0.5), (-0.1, 0.1), (-0.1, 0.1), (-0.2, 0.1)]
    # an aliased object stays one object: its key changes everywhere it is used
    exp = load_experiment(path, ["datasets.0.repo_path=elsewhere"])
    assert exp.dataset.repo_path == "elsewhere"
