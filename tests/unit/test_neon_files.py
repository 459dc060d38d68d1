"""neon's later experiment schema (config/neon_compat.py) and neon's own files on one process:
every file of ``tests/data/neon_later`` and the neon 0.4 file pass ``distnet check`` and run
(tiny: ``--set``), and each translated key means what neon meant. The 4-rank runs are in
``tests/mpi/test_neon_files.py``."""
import logging

import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.comm import Topology
from distnet.config import load_experiment, load_experiment_text
from distnet.config.registry import resolve
from distnet.errors import ConfigError
from distnet.layers import FullyConnectedLayer, FullyConnectedNoBiasLayer, LocalFilteringLayer
from distnet.optim.sgd import MomentumSchedule
from tests import neon_files

# files with seterr_handling {all: warn} make numpy warn about harmless underflows
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

LATER = {p.stem: p for p in neon_files.LATER}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return neon_files.write_data(str(tmp_path_factory.mktemp("neon-data")))


@pytest.fixture(autouse=True)
def _keep_numpy_errors():
    with np.errstate(all="ignore"):   # files with seterr_handling would change it for later tests
        yield


def _load(stem, folder, overrides=()):
    path = neon_files.write_experiment(LATER[stem], folder, folder)
    return load_experiment(str(path), overrides)


def test_the_ten_later_files_are_there():
    kinds = sorted(p.stem.split("_")[1] for p in neon_files.LATER)
    assert kinds == ["datapar"] * 4 + ["halopar"] * 3 + ["vecpar"] * 3


@pytest.mark.parametrize("path", neon_files.params(neon_files.ALL))
def test_check_and_run_on_one_process(folder, tmp_path, path, restore_logger):
    as_is = str(neon_files.write_experiment(path, folder, tmp_path, cpu_if_no_gpu=False))
    runner = CliRunner()
    r = runner.invoke(main, ["check", as_is])        # GPU files too: checked as CPU without a GPU
    assert r.exit_code == 0, r.output
    assert ": OK (" in r.output
    if not neon_files.have_gpu() and neon_files.uses_gpu(path):
        assert "no usable GPU here: the GPU backend" in r.output
    exp_path = str(neon_files.write_experiment(path, folder, tmp_path))
    r = runner.invoke(main, ["run", exp_path, "--no-run-dir", "--no-progress",
                             *[a for o in neon_files.tiny_overrides(path) for a in ("--set", o)]])
    assert r.exit_code == 0, r.output


def test_backends_of_neon_later_and_0_4():
    for path in ("neon.backends.cpu.CPU", "neon.backends.cpu.CPUDataDist"):
        assert resolve(path)[0].__name__ == "CPU"
    for path in ("neon.backends._cudanet.Cudanet", "neon.backends._cudamat.Cudamat",
                 "neon.backends.gpu.GPUDataDist", "neon.backends.gpu.GPU"):
        assert resolve(path) == resolve("distnet.backends.GPU")
    assert resolve("neon.backends.fixedpoint.FixedPoint")[0].__name__ == "Numpy"


def test_datapar_cnn_translation(folder):
    exp = _load("mnist_datapar_cpu_cnn-20-50-500-10", folder)
    conv1, _, conv2, _, fc, out = exp.model.layers
    # dataset: (singular), its global batch_size and num_test_sample; the model's dist_mode
    assert exp.dataset.dist_mode == "datapar" and exp.dataset.num_test_sample == 9900
    assert exp.model.batch_size == 300
    assert any(level == logging.INFO and "global minibatch" in text for level, text in exp.config_notes)
    # learning_rule: GradientDescent -> no momentum; GradientDescentMomentum -> its own schedule
    assert conv1.learning_rate == conv2.learning_rate == fc.learning_rate == 0.01
    plain = {"type": "constant", "coef": 0.0}      # GradientDescent: this layer has no momentum
    assert conv1.momentum_params == plain and conv2.momentum_params == plain
    assert fc.momentum_params == {"type": "constant", "initial_coef": 0.9, "coef": 0.9}
    assert MomentumSchedule(conv1.momentum_params)(3) == 0.0
    assert MomentumSchedule(fc.momentum_params)(0) == 0.9
    exp.check()
    exp.model.configure(exp.backend, Topology.serial())    # the training step's momentum per layer
    rule_of = exp.model.optimizer.rule_of
    assert rule_of(conv1).momentum(3) == 0.0 and rule_of(fc).momentum(0) == 0.9 and not rule_of(fc).momentum.nesterov
    assert rule_of(conv1) is not rule_of(fc) and rule_of(fc).neon_velocity      # neon's update, per layer
    # weight_init: !obj:params.UniformValGen without bias_init -> a Layer without bias (neon 2015)
    assert type(fc) is FullyConnectedNoBiasLayer and fc.weight_init == {"type": "uniform", "low": -0.1, "high": 0.1}
    assert out.weight_init == fc.weight_init       # the aliased generator


def test_datapar_mlp_bias_and_nin(folder):
    exp = _load("mnist_datapar_cpu_mlp-784-100-10", folder)
    h0, out = exp.model.layers
    assert type(h0) is FullyConnectedLayer and h0.nin == 785       # neon 2015 wrote 784: the bias row is added
    assert h0.weight_init == {"type": "gaussian", "loc": 0.0, "scale": 0.01, "bias_init": 0.0}
    assert out.weight_init == {"type": "node_normalized", "scale": 4.0, "bias_init": 0.0}
    exp.check()                                       # 785 = 784 features + bias: consistent


def test_momentum_only_where_the_learning_rule_says(folder, restore_logger):
    exp = _load("mnist_datapar_cpu_cnn-20-50-500-10", folder, neon_files.tiny_overrides(
        LATER["mnist_datapar_cpu_cnn-20-50-500-10"]))
    exp.run(topology=Topology.serial())
    conv1, _, conv2, _, fc, out = exp.model.layers
    assert all(p.velocity is None for layer in (conv1, conv2) for p in layer.params())
    assert all(p.velocity is not None for layer in (fc, out) for p in layer.params())


def test_halopar_gb_translation(folder):
    exp = _load("mnist_halopar_cpu_gb", folder)
    lf = exp.model.layers[0]
    assert type(lf) is LocalFilteringLayer
    assert (lf.learning_rate, lf.pretrain_learning_rate, lf.sparsity) == (0.1, 0.01, 0.1)
    assert lf.momentum_params == {"type": "constant", "coef": 0.0}   # GradientDescentPretrain: no momentum
    top = exp.model.layers[-1]
    assert type(top) is FullyConnectedNoBiasLayer and top.nin == 1800
    # neon 2015's linear_monotone ran the way its name says, as distnet's does
    sched = MomentumSchedule(top.momentum_params)
    assert [sched(e) for e in (0, 4, 5, 9)] == [0.99, 0.99, 0.9, 0.9]


def test_duplicate_key_keeps_the_later_value_with_a_warning(folder):
    text = neon_files.text_of(LATER["mnist_datapar_gpu_mlp-784-100-10"], folder)
    exp = load_experiment_text(text, "gpu_mlp.yaml")
    warnings = [t for level, t in exp.config_notes if level == logging.WARNING]
    assert any("key 'cost' is given twice" in t and "later value is used" in t for t in warnings)


def _experiment(backend="!obj:neon.backends.cpu.CPU {rng_seed: 0}", model_extra="", layer_extra="",
                dataset_extra="", layer="neon.models.layer.Layer"):
    return f"""!obj:neon.experiments.fit_predict_err.FitPredictErrorExperiment {{
  backend: &be {backend},
  dataset: !obj:neon.datasets.mnist.MNIST {{backend: *be, repo_path: ./nowhere{dataset_extra}}},
  model: !obj:neon.models.mlp.MLP {{
    backend: *be, num_epochs: 1, batch_size: 10{model_extra},
    layers: [&last !obj:{layer} {{
      name: out, backend: *be, batch_size: 10, pos: 0, nin: 784, nout: 10,
      activation: !obj:neon.transforms.logistic.Logistic {{}},
      weight_init: !obj:params.UniformValGen {{backend: *be, low: -0.1, high: 0.1}},
      learning_rule: !obj:neon.models.learning_rule.GradientDescent {{
        name: lr, lr_params: {{learning_rate: 0.1, backend: *be}}}}{layer_extra}}}],
    cost: !obj:neon.transforms.cross_entropy.CrossEntropy {{olayer: *last}},
  }},
}}"""


def test_ignored_keys_warn():
    fixed = ("!obj:neon.backends.fixedpoint.FixedPoint {rng_seed: 0, sign_bit: False, int_bits: 3, "
             "frac_bits: 12, overflow: 0, rounding: 0}")
    exp = load_experiment_text(_experiment(backend=fixed, model_extra=", serialized_path: ./m.pkl",
                                           layer_extra=", weight_dtype: float32, output_dtype: float32"),
                               "e.yaml")
    warnings = [t for level, t in exp.config_notes if level == logging.WARNING]
    assert any("FixedPoint backend" in t and "int_bits" in t for t in warnings)
    assert any("model's serialized_path is accepted and ignored" in t for t in warnings)
    assert any("'weight_dtype'" in t for t in warnings) and any("'output_dtype'" in t for t in warnings)
    assert all(t.startswith("e.yaml:") for t in warnings)


def test_ignored_keys_warn_in_the_log_of_a_run(folder, capfd, restore_logger):
    text = _experiment(model_extra=", serialized_path: ./m.pkl", layer_extra=", weight_dtype: float32")
    text = text.replace("./nowhere", folder)
    with np.errstate(all="ignore"):
        load_experiment_text(text, "e.yaml").run(topology=Topology.serial())
    err = capfd.readouterr().err
    assert "model's serialized_path is accepted and ignored" in err
    assert "key 'weight_dtype' of LayerWithNoBias is accepted and ignored" in err


def test_check_prints_the_warnings(folder, tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(_experiment(model_extra=", serialized_path: ./m.pkl").replace("./nowhere", folder))
    r = CliRunner().invoke(main, ["check", str(path)])
    assert r.exit_code == 0
    assert "distnet: warning:" in r.output and "serialized_path is accepted and ignored" in r.output


@pytest.mark.parametrize("edit,match", [
    (dict(layer_extra=", nin: 3"), "duplicate|given twice"),
    (dict(model_extra=", dist_mode: vecpar"), "model has dist_mode vecpar but its dataset has none"),
])
def test_translation_errors(edit, match):
    text = _experiment(**edit)
    if "nin: 3" in text:   # a duplicate key only warns
        exp = load_experiment_text(text, "e.yaml")
        assert any("given twice" in t for _, t in exp.config_notes)
        return
    with pytest.raises(ConfigError, match=match) as e:
        load_experiment_text(text, "e.yaml")
    assert "e.yaml:" in str(e.value)


def test_unknown_learning_rule_and_generator_are_located_errors():
    text = _experiment().replace("learning_rule.GradientDescent", "learning_rule.AdaDelta")
    with pytest.raises(ConfigError, match=r"e\.yaml:\d+: key 'learning_rule': learning_rule must be one of"):
        load_experiment_text(text, "e.yaml")
    text = _experiment().replace("low: -0.1", "lo: -0.1")
    with pytest.raises(ConfigError, match=r"e\.yaml:\d+: key 'lo': unknown key for UniformValGen"):
        load_experiment_text(text, "e.yaml")
    text = _experiment().replace("learning_rate: 0.1, ", "weight_decay: 0.1, learning_rate: 0.1, ")
    with pytest.raises(ConfigError, match="weight_decay is not supported"):
        load_experiment_text(text, "e.yaml")


def test_dataset_and_datasets_together_is_an_error():
    text = _experiment().replace("  model:", "  datasets: [],\n  model:")
    with pytest.raises(ConfigError, match="either dataset .* or datasets"):
        load_experiment_text(text, "e.yaml")


def test_num_test_sample_keeps_the_first_test_images(folder):
    exp = _load("mnist_datapar_cpu_mlp-784-100-10", folder, ["dataset.num_test_sample=7"])
    data = exp.dataset.load()
    assert len(data["test"][1]) == 7 and len(data["train"][1]) == 60
    full = _load("mnist_vecpar_cpu_mlp-784-100-10", folder).dataset.load()
    np.testing.assert_array_equal(data["test"][0], full["test"][0][:7])


def test_docs_neon_md_is_linked_and_covers_the_differences():
    root = neon_files.ROOT
    assert "(docs/neon.md)" in (root / "README.md").read_text()
    doc = (root / "docs" / "neon.md").read_text()
    for needle in ("linear_monotone", "every layer with weights", "LCN gradient", "logged cost",
                   "`sample_pct`", "FixedPoint", "model's `serialized_path`", "`*_dtype` keys",
                   "learning_rule", "UniformValGen", "olayer", "num_test_sample", "CPUDataDist",
                   "Cudanet", "Cudamat"):
        assert needle in doc, needle


def test_datapar_batch_size_given_on_the_command_line_wins(folder):
    exp = _load("mnist_datapar_cpu_mlp-784-100-10", folder, ["model.batch_size=50"])
    assert exp.model.batch_size == 50
    exp = _load("mnist_datapar_cpu_mlp-784-100-10", folder, ["dataset.batch_size=40"])
    assert exp.model.batch_size == 40
