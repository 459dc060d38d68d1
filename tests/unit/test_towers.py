"""Tower networks on one process: parameter gradients of a general tower graph (3 towers, a
shared stem, dropout in one tower, a shared reader of an exchange) against central differences;
the forward of Chainer's ParallelMLP against its formula; the exchanges declared in the
placements; the located errors of tower keys and TowerSumLayers (file:line)."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from distnet.errors import ConfigError
from distnet.geometry.grid import GridPosition
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad
from tests.towers_net import tower_model

K, D = 3, 5


def _configured(model, seed=2):
    model.infer_shapes((1, 1, D))
    model.configure(make_backend("numpy", dtype="float64", rng_seed=seed), Topology.serial())
    model.init_params()
    return model


@pytest.mark.parametrize("T", [2, 3])
def test_tower_graph_gradients_match_central_differences(T):
    model = _configured(tower_model(T, K))
    rng = np.random.RandomState(4)
    x = rng.standard_normal((6, 1, 1, D))
    t = np.eye(K)[rng.randint(0, K, 6)]

    def loss():
        return float(model.cost.loss_sum(model.fprop(x), t).sum())

    y = model.fprop(x)
    model.bprop(model.cost.grad(y, t))
    assert len(model._params) == 2 + 2 * T + T + 2 * T + 2   # stem, a_t (W, b), b_t (W), c_t (W, b), hs
    for layer, p in model._params:
        check_grad(loss, p.value, p.grad.copy(), rtol=1e-5, atol=1e-7)
    # the stem and h are shared values read by the towers: their gradients are exchanged
    names = [layer.name for layer in model.layers]
    assert [names[j] for j in model.towers.exchanged] == ["stem", "h"]


YAML = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 0},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: nowhere.h5}],
  model: !obj:distnet.models.MLP {
    num_epochs: 1, learning_rate: 0.1, towers: 2,
    layers: [
      !obj:distnet.layers.Layer {name: a0, tower: 0, inputs: [input], nout: 4, weight_init: {type: normal}},
      !obj:distnet.layers.Layer {name: b0, tower: 0, nout: 3, weight_init: {type: normal}},
      !obj:distnet.layers.Layer {name: a1, tower: 1, inputs: [input], nout: 4, weight_init: {type: normal}},
      !obj:distnet.layers.Layer {name: b1, tower: 1, nout: 3, weight_init: {type: normal}},
      !obj:distnet.layers.TowerSumLayer {name: h, inputs: [b0, b1], activation: !obj:distnet.activations.RectLin {}},
      !obj:distnet.layers.Layer {name: c0, tower: 0, inputs: [h], nout: 2, weight_init: {type: normal}},
      !obj:distnet.layers.Layer {name: c1, tower: 1, inputs: [h], nout: 2, weight_init: {type: normal}},
      !obj:distnet.layers.TowerSumLayer {name: y, inputs: [c0, c1]},
    ],
  },
}
"""


def _load(text=YAML):
    exp = load_experiment_text(text, "towers.yaml")
    exp.model.infer_shapes((1, 2, 3))
    return exp


def test_parallel_mlp_forward_is_the_formula():
    """y = sum_t second_t(relu(sum_t first_t(x))) with each tower's own weights."""
    model = _load().model
    model.configure(make_backend("numpy", dtype="float64", rng_seed=1), Topology.serial())
    model.init_params()
    x = np.random.RandomState(0).standard_normal((4, 1, 2, 3))
    W = {layer.name: (layer.W, layer.b) for layer in model.layers if layer.params()}

    def fc(name, v):
        return v @ W[name][0].T + W[name][1]
    x2 = x.reshape(4, 6)
    h = np.maximum(fc("b0", fc("a0", x2)) + fc("b1", fc("a1", x2)), 0)
    np.testing.assert_allclose(model.fprop(x), fc("c0", h) + fc("c1", h), rtol=1e-13)


def test_exchanges_are_declared_in_the_placements():
    model = _load().model
    for npipe in (1, 2):
        pls = dict(zip([layer.name for layer in model.layers],
                       model.placements(GridPosition((1, 1), (0, 0), 1, npipe, 0, 0))))
        got = {name: [(c.over, c.per_sample, c.backward) for c in pl.collectives] for name, pl in pls.items()}
        if npipe == 1:
            assert all(not c for c in got.values())
            continue
        # h: forward sum over the towers, and its gradient (read by c0 and c1) summed back;
        # y: the forward sum only (read by nobody: the model's output)
        assert got["h"] == [("pipe", 3, False), ("pipe", 3, True)]
        assert got["y"] == [("pipe", 2, False)]
        assert all(not got[n] for n in ("a0", "b0", "a1", "b1", "c0", "c1"))
    assert model.stage_plan(2) == [0, 0, 1, 1, 0, 0, 1, 0]


@pytest.mark.parametrize("old, new, message, line", [
    ("{name: a1, tower: 1,", "{name: a1, tower: 2,", "tower 2 is out of range: the model has towers: 2", 9),
    ("towers: 2", "towers: 3", "towers is 3 but no layer has tower: 2", 5),
    ("{name: c1, tower: 1, inputs: [h]", "{name: c1, tower: 1, inputs: [b0]",
     "layer 'c1': belongs to tower 1 but reads 'b0' \\(tower 0\\): towers exchange only through a TowerSumLayer", 13),
    ("TowerSumLayer {name: y,", "AddLayer {name: y,",
     "layer 'y': is shared by every tower \\(no tower key\\) but reads 'c0' \\(tower 0\\)", 14),
    ("inputs: [b0, b1]", "inputs: [a0, b0, b1]", "layer 'h': reads two outputs of tower 0 \\('a0' and 'b0'\\)", 11),
    ("inputs: [b0, b1]", "inputs: [b0, b1, input]", "reads the model's input, which belongs to no tower", 11),
    ("{name: c1, tower: 1, inputs: [h]", "{name: c1, tower: 1, inputs: [b1]",
     None, None),
    ("{name: b1, tower: 1, nout: 3", "{name: b1, tower: 1, nout: 5", "'b0' gives 3 and 'b1' gives 5", 11),
    ("{name: h,", "{name: h, tower: 0,", "a TowerSumLayer belongs to every tower", 11),
    ("{name: a0,", "{name: a0, stage: 0,", "has a stage key, but in a tower network", 7),
    ("inputs: [c0, c1]},", "inputs: [c0, c1]},\n      !obj:distnet.layers.Layer {name: z, tower: 0, nout: 2, "
     "weight_init: {type: normal}},", "layer 'z': the last layer gives the model's output and must be shared", 15),
    ("towers: 2,", "", "layer 'a0': has tower: 0 but the model has no towers key", 7),
])
def test_tower_errors_are_located(old, new, message, line):
    text = YAML.replace(old, new)
    assert text != YAML
    if message is None:       # h sums tower 0 only (tower 1's b1 feeds c1 directly)
        text = text.replace("inputs: [b0, b1]", "inputs: [b0]")
        message, line = "layer 'h': sums towers \\[0\\] but the model has towers: 2; .*missing: \\[1\\]", 11
    with pytest.raises(ConfigError, match=message) as e:
        _load(text)
    assert f"towers.yaml:{line}" in str(e.value)


def test_pipe_must_hold_the_towers():
    model = _load().model
    with pytest.raises(ConfigError, match="towers is 2 but the run has pipe = 3: .*pipe must be 1") as e:
        model.stage_plan(3)
    assert "towers.yaml:5" in str(e.value)
    with pytest.raises(ConfigError, match="a TowerSumLayer sums the outputs of towers, but the model has no towers"):
        _load(YAML.replace("towers: 2,", "").replace("tower: 0, ", "").replace("tower: 1, ", ""))
