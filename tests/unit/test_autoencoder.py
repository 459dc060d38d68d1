"""neon's Autoencoder on one process: its training step against a hand-written numpy reference
(targets = inputs, neon's SGD with momentum), its reconstruction error, and its errors for a
last layer that does not give back an image."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from distnet.errors import ConfigError
from distnet.layers import FullyConnectedNoBiasLayer
from distnet.models.autoencoder import Autoencoder
from distnet.ops.activations import Logistic
from distnet.ops.costs import CrossEntropy
from distnet.testing.backends import make_backend

WI = {"type": "uniform", "low": -0.5, "high": 0.5}
LR, MU = 0.3, 0.5


def _model(batch_size=4, epochs=2):
    layers = [FullyConnectedNoBiasLayer(nout=3, weight_init=WI, activation=Logistic()),
              FullyConnectedNoBiasLayer(nout=6, weight_init=WI, activation=Logistic())]
    model = Autoencoder(layers=layers, num_epochs=epochs, cost=CrossEntropy(), batch_size=batch_size,
                        learning_rate=LR, momentum={"type": "constant", "coef": MU})
    model.infer_shapes((1, 2, 3))
    model.configure(make_backend("numpy", dtype="float64", rng_seed=1), Topology.serial())
    model.init_params()
    return model


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _reference(W1, W2, x, epochs, batch_size):
    """neon's MLP fit with targets = inputs, by hand: per minibatch of B rows, logistic
    layers without bias, binary cross-entropy (dz = y - t at the output), gradients / B,
    v = mu v - lr G, W += v. Returns the trained weights and the mean cost per image per epoch."""
    W1, W2 = W1.copy(), W2.copy()
    V1, V2 = np.zeros_like(W1), np.zeros_like(W2)
    t_all = x.reshape(len(x), -1)
    costs = []
    for _ in range(epochs):
        total = 0.0
        for i in range(0, len(x), batch_size):
            a0, t = t_all[i:i + batch_size], t_all[i:i + batch_size]
            h = _sigmoid(a0 @ W1.T)
            y = _sigmoid(h @ W2.T)
            total += -np.sum(t * np.log(y) + (1 - t) * np.log(1 - y))
            d2 = (y - t) / len(a0)
            d1 = (d2 @ W2) * h * (1 - h)
            G2, G1 = d2.T @ h, d1.T @ a0
            V2 = MU * V2 - LR * G2
            V1 = MU * V1 - LR * G1
            W2, W1 = W2 + V2, W1 + V1
        costs.append(total / len(x))
    return W1, W2, costs


def test_training_step_matches_hand_written_numpy():
    rng = np.random.RandomState(3)
    x = rng.uniform(0.05, 0.95, (10, 1, 2, 3))     # 10 images: a short last batch of 2
    labels = np.zeros(10, dtype=np.int64)
    model = _model()
    W1, W2 = (model.backend.to_host(l.W).copy() for l in model.layers)
    costs = model.fit(x, labels)
    rW1, rW2, rcosts = _reference(W1, W2, x, 2, 4)
    np.testing.assert_allclose(model.layers[0].W, rW1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(model.layers[1].W, rW2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(costs, rcosts, rtol=1e-12)
    assert not np.allclose(W1, rW1)               # the step moved the weights


def test_reconstruction_error_is_the_mean_cost_per_image():
    rng = np.random.RandomState(4)
    x = rng.uniform(0.05, 0.95, (7, 1, 2, 3))
    model = _model(batch_size=3)
    W1, W2 = (l.W for l in model.layers)
    flat = x.reshape(7, 6)
    y = _sigmoid(_sigmoid(flat @ W1.T) @ W2.T)
    want = -np.sum(flat * np.log(y) + (1 - flat) * np.log(1 - y)) / 7
    assert model.reconstruction_error(x) == pytest.approx(want, rel=1e-12)
    assert model.misclass_rate(x, np.zeros(7, dtype=np.int64)) == model.reconstruction_error(x)
    assert model.split_metrics((x, None)) == {"reconstruction": model.reconstruction_error(x)}


AE_YAML = """\
!obj:neon.experiments.fit_predict_err.FitPredictErrorExperiment {{
  backend: !obj:neon.backends._numpy.Numpy {{rng_seed: 0}},
  datasets: [!obj:neon.datasets.iris.Iris {{repo_path: /nowhere}}],
  model: !obj:neon.models.autoencoder.Autoencoder {{
    num_epochs: 1, batch_size: 30, learning_rate: 0.01,
    cost: !obj:neon.transforms.sum_squared.SumSquaredDiffs {{}},
    layers: [
      !obj:neon.models.layer.AELayer {{name: enc, nin: 4, nout: 2,
        weight_init: {{type: gaussian, scale: 0.1}}}},
      !obj:neon.models.layer.AELayer {{name: dec, nin: 2, nout: {nout},
        weight_init: {{type: gaussian, scale: 0.1}}}},
    ],
  }},
}}
"""


def test_an_iris_autoencoder_runs_from_neon_yaml():
    exp = load_experiment_text(AE_YAML.format(nout=4), "ae.yaml")
    assert isinstance(exp.model, Autoencoder)
    result = exp.run(topology=Topology.serial())
    assert np.isfinite(result.epoch_costs).all() and result.test_misclass > 0


def test_last_layer_must_give_back_the_image():
    with pytest.raises(ConfigError) as e:
        load_experiment_text(AE_YAML.format(nout=3), "ae.yaml").check()
    msg = str(e.value)
    assert "ae.yaml:10" in msg and "gives 3 outputs but the dataset's images have 4 values" in msg
    assert "reconstructs its input" in msg


def test_run_then_evaluate_report_the_reconstruction_error(tmp_path, restore_logger):
    from click.testing import CliRunner
    from distnet.cli.main import main
    path = tmp_path / "ae.yaml"
    path.write_text(AE_YAML.format(nout=4))
    runner = CliRunner()
    r = runner.invoke(main, ["run", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert r.exit_code == 0, r.output
    ran = [line.split("test set reconstruction error: ")[1] for line in r.output.splitlines()
           if "test set reconstruction error: " in line]
    assert len(ran) == 1 and "misclass" not in r.output
    r = runner.invoke(main, ["evaluate", str(path), "--checkpoint", str(tmp_path / "run" / "checkpoint.h5")])
    assert r.exit_code == 0, r.output
    assert f"test set reconstruction error: {ran[0]} (30 images)" in r.output
