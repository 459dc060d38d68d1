"""Batch norm, global average pooling and dropout LAYERS (one process, float64) against central
differences and independent formulas; the training step's learning rules and clipping against
textbook loops; the model's evaluation mode; checkpoints of buffers and optimiser state; YAML
end to end (softmax cross-entropy, Adam). The distributed equality is tests/mpi/test_modern_layers.py."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.config import load_experiment_text
from distnet.errors import ConfigError
from distnet.layers import ConvLayer, FullyConnectedLayer, LayerContext, FullyConnectedNoBiasLayer
from distnet.layers.base import RunState
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.layers.params import Param
from distnet.layers.placement import COMPLETE, OVER_GRAD, SPATIAL, ParamPlacement
from distnet.layers.step import TrainingStep
from distnet.models import Model
from distnet.models.checkpoint import read_checkpoint, save_checkpoint
from distnet.models.restore_single import restore_checkpoint
from distnet.ops.activations import Identity
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.ops.dropout import keep_mask, stream_key
from distnet.optim.optimizer import Optimizer
from distnet.optim.rates import LearningRates
from distnet.optim.rules import Adam, GradientDescent
from tests.numgrad import check_grad

WI = {"type": "uniform", "low": -0.4, "high": 0.4}


def placed(layer, in_shape, run=None, index=0):
    """``layer`` shaped, placed on one process and initialised (float64)."""
    layer.infer_shape(in_shape)
    ctx = LayerContext(Numpy64(rng_seed=2), Topology.serial(), index, run or RunState())
    layer.bind(ctx)
    layer.configure(SPATIAL, ctx)
    layer.init_params(np.random.RandomState(0))
    return layer


# ------------------------------------------------------------------ batch norm

@pytest.mark.parametrize("shape", [(6, 3, 4, 5), (7, 4)], ids=["conv", "fc"])
def test_batchnorm_formula_running_stats_and_gradients(shape):
    rng = np.random.RandomState(1)
    x = rng.standard_normal(shape) * 2 + 3
    bn = placed(BatchNormLayer(eps=1e-3, momentum=0.25, name="bn"), shape[1:])
    bn.gamma[...] = rng.uniform(0.5, 1.5, shape[1])
    bn.beta[...] = rng.standard_normal(shape[1])
    axes = (0,) if len(shape) == 2 else (0, 2, 3)
    b = (1, -1) if len(shape) == 2 else (1, -1, 1, 1)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    want = bn.gamma.reshape(b) * (x - mean.reshape(b)) / np.sqrt(var.reshape(b) + 1e-3) + bn.beta.reshape(b)
    y = bn.fprop(x)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    n = x.size // shape[1]
    np.testing.assert_allclose(bn.running_mean, 0.25 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var, 0.75 + 0.25 * var * n / (n - 1), rtol=1e-12)

    r = rng.standard_normal(shape)
    bn.fprop(x)
    dx = bn.bprop(r.copy())
    dg, db = (p.grad.copy() for p in bn.params())

    def loss():
        saved = bn.running_mean.copy(), bn.running_var.copy()
        out = float(np.sum(bn.fprop(x) * r))
        bn.running_mean[...], bn.running_var[...] = saved
        return out
    check_grad(loss, x, dx, rtol=1e-6, atol=1e-8)
    check_grad(loss, bn.gamma, dg, rtol=1e-6, atol=1e-8)
    check_grad(loss, bn.beta, db, rtol=1e-6, atol=1e-8)
    assert [p.reduce_over for p in bn.params()] == [COMPLETE, COMPLETE]     # complete: not summed again


def test_batchnorm_evaluation_uses_running_statistics():
    run = RunState()
    bn = placed(BatchNormLayer(name="bn"), (3, 4, 4), run)
    x = np.random.RandomState(2).standard_normal((5, 3, 4, 4))
    bn.running_mean[...] = [0.1, -0.2, 0.3]
    bn.running_var[...] = [1.5, 0.5, 2.0]
    run.training = False
    y = bn.fprop(x)
    want = (x - bn.running_mean.reshape(1, 3, 1, 1)) / np.sqrt(bn.running_var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-12)
    np.testing.assert_array_equal(bn.running_mean, [0.1, -0.2, 0.3])       # not updated


def test_batchnorm_placement_and_errors():
    from distnet.geometry.grid import GridPosition
    pos = GridPosition((1, 2), (0, 1))
    d = BatchNormLayer(name="bn")
    d.infer_shape((3, 8, 8))
    pl = d.place(SPATIAL, pos)
    assert pl.out_layout.local_shape == (3, 8, 4) and [b.name for b in pl.buffers] == ["bn.running_mean",
                                                                                         "bn.running_var"]
    assert pl.extra["stats_over"] == OVER_GRAD and pl.collectives[0].per_step == 7
    with pytest.raises(ConfigError, match="eps"):
        BatchNormLayer(eps=0)
    from distnet.config import Builder, parse_yaml
    with pytest.raises(ConfigError, match=r"bn.yaml:1: key 'learning_rate': expected number >= 0"):
        Builder().build(parse_yaml("!obj:distnet.layers.BatchNormLayer {learning_rate: -0.1}", "bn.yaml"))


# ------------------------------------------------------------------ global average pooling

def test_global_average_pooling_formula_and_gradient():
    rng = np.random.RandomState(3)
    x = rng.standard_normal((4, 3, 5, 6))
    gap = placed(GlobalAveragePoolingLayer(name="gap"), (3, 5, 6))
    assert gap.out_shape == (3,)
    np.testing.assert_allclose(gap.fprop(x), x.mean(axis=(2, 3)), rtol=1e-14)
    r = rng.standard_normal((4, 3))
    dx = gap.bprop(r)
    check_grad(lambda: float(np.sum(gap.fprop(x) * r)), x, dx)


# ------------------------------------------------------------------ dropout

def test_dropout_uses_the_global_mask_and_is_identity_in_evaluation():
    run = RunState(step=4, row0=3, rows=10)
    d = placed(DropoutLayer(p=0.4, name="d"), (2, 5, 6), run, index=7)
    x = np.random.RandomState(4).standard_normal((5, 2, 5, 6))
    y = d.fprop(x)
    keep = keep_mask(stream_key(2, 4, 7), 0.4, (10, 2, 5, 6))[3:8]
    np.testing.assert_array_equal(y, np.where(keep, x / 0.6, 0.0))
    dy = np.ones_like(x)
    np.testing.assert_array_equal(d.bprop(dy), np.where(keep, 1 / 0.6, 0.0))
    run.step = 5
    assert not np.array_equal(d.fprop(x), y)                  # a new mask every step
    run.training = False
    assert d.fprop(x) is x and d.bprop(dy) is dy
    with pytest.raises(ConfigError, match="p must be"):
        DropoutLayer(p=1.0)


# ------------------------------------------------------------------ the training step

class _Layer:
    def __init__(self, lr=None):
        self.learning_rate, self.updates = lr, 0

    def after_update(self):
        self.updates += 1


def test_training_step_adam_with_clipping_equals_textbook():
    rng = np.random.RandomState(5)
    w0 = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    grads = [[rng.standard_normal(a.shape) for a in w0] for _ in range(4)]
    layer = _Layer()
    params = [(layer, Param(ParamPlacement(f"p{i}", a.shape, a.shape, reduce_over=ro), a.copy(), np.zeros_like(a)))
              for i, (a, ro) in enumerate(zip(w0, (OVER_GRAD, COMPLETE)))]
    rule = Adam(learning_rate=0.05, max_grad_norm=1.5)
    step = TrainingStep(Topology.serial())
    for t, gs in enumerate(grads, 1):
        def run(after_layer, gs=gs):
            for (_, p), g in zip(params, gs):
                p.grad[...] = g
            return [np.zeros(1)]
        step(run, params, Optimizer(rule, LearningRates(rule=rule)), t, 0)
    # textbook: clip by the global norm, then Adam with bias correction
    w = [a.copy() for a in w0]
    m = [np.zeros_like(a) for a in w0]
    v = [np.zeros_like(a) for a in w0]
    for t, gs in enumerate(grads, 1):
        norm = np.sqrt(sum(np.sum(g * g) for g in gs))
        f = min(1.0, 1.5 / (norm + 1e-6))
        for i, g in enumerate(gs):
            g = g * f
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            w[i] = w[i] - 0.05 * (m[i] / (1 - 0.9 ** t)) / (np.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-8)
    for (_, p), want, mm, vv in zip(params, w, m, v):
        np.testing.assert_allclose(p.value, want, rtol=1e-12)
        np.testing.assert_allclose(p.state["m"], mm, rtol=1e-12)
        np.testing.assert_allclose(p.state["v"], vv, rtol=1e-12)
    assert layer.updates == 4


def test_training_step_sgd_weight_decay_and_layer_rate():
    rng = np.random.RandomState(6)
    w0, g = rng.standard_normal(6), rng.standard_normal(6)
    layer = _Layer(lr=0.3)                                   # the layer's rate wins over the rule's
    p = Param(ParamPlacement("w", w0.shape, w0.shape), w0.copy(), g.copy())
    rule = GradientDescent(learning_rate=0.1, momentum={"type": "constant", "coef": 0.9}, weight_decay=0.01)
    TrainingStep(Topology.serial())(lambda after_layer: [], [(layer, p)], Optimizer(rule, LearningRates(rule=rule)))
    np.testing.assert_allclose(p.value, w0 - 0.3 * (g + 0.01 * w0), rtol=1e-14)   # L2 by default
    np.testing.assert_allclose(p.state["velocity"], -0.3 * (g + 0.01 * w0), rtol=1e-14)


# ------------------------------------------------------------------ models

def _model(rule=None, epochs=2, **keys):
    layers = [ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, name="c"), BatchNormLayer(name="bn"),
              DropoutLayer(p=0.2, name="d"), GlobalAveragePoolingLayer(name="g"),
              FullyConnectedNoBiasLayer(nout=4, weight_init=WI, name="f"), BatchNormLayer(name="bnf"),
              FullyConnectedLayer(nout=3, weight_init=WI, activation=Identity(), name="o")]
    m = Model(layers=layers, num_epochs=epochs, batch_size=4, cost=SoftmaxCrossEntropy(),
                learning_rule=rule or Adam(learning_rate=0.01), **keys)
    m.infer_shapes((2, 6, 6))
    m.configure(Numpy64(rng_seed=1), Topology.serial())
    m.init_params()
    return m


def _data():
    rng = np.random.RandomState(8)
    return rng.standard_normal((10, 2, 6, 6)), rng.randint(0, 3, 10)


def test_model_predict_runs_in_evaluation_mode():
    m = _model()
    x, labels = _data()
    m.fit(x, labels, 3)
    assert m.steps == 6 and m.run_state.training
    out = m.predict(x)
    assert m.run_state.training                     # switched back
    with m.evaluating():
        again = m.fprop(x[:4])
    np.testing.assert_array_equal(out[:4], again)   # deterministic: no dropout, running statistics
    assert 0 <= m.misclass_rate(x, labels) <= 100


def test_model_errors():
    with pytest.raises(ConfigError, match="momentum is a key of the learning rule"):
        Model(layers=[FullyConnectedLayer(nout=2, weight_init=WI)], num_epochs=1, learning_rule=Adam(),
                momentum={"type": "constant", "coef": 0.9})
    m = Model(layers=[BatchNormLayer(name="bn"), FullyConnectedLayer(nout=2, weight_init=WI, name="o")], num_epochs=1,
                learning_rate=0.1, micro_batches=2)
    m.infer_shapes((2, 3, 3))
    with pytest.raises(ConfigError, match="whole minibatch"):
        m.configure(Numpy64(), Topology.serial())


def test_checkpoint_keeps_buffers_optimizer_state_and_steps(tmp_path):
    x, labels = _data()
    ref = _model(epochs=2)
    ref.fit(x, labels, 3)
    first = _model(epochs=1)
    first.fit(x, labels, 3)
    path = tmp_path / "ck.h5"
    save_checkpoint(str(path), first, Topology.serial(), epoch=0)
    ck = read_checkpoint(str(path))
    assert ck.meta["steps"] == 3 and [b["name"] for b in ck.buffers] == [
        "bn.running_mean", "bn.running_var", "bnf.running_mean", "bnf.running_var"]
    resumed = _model(epochs=2)
    ck = restore_checkpoint(resumed, str(path), Topology.serial())
    np.testing.assert_array_equal(resumed.layers[1].running_var, first.layers[1].running_var)
    np.testing.assert_array_equal(resumed.layers[0].params()[0].state["m"], first.layers[0].params()[0].state["m"])
    resumed.fit(x, labels, 3, resume=ck.resume)
    for a, b in zip(resumed.layers, ref.layers):
        for p, q in zip(a.params() + a.buffers(), b.params() + b.buffers()):
            np.testing.assert_array_equal(p.value, q.value, err_msg=p.name)


def test_yaml_softmax_cross_entropy_adam_end_to_end():
    exp = load_experiment_text("""!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 0},
  datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere}],
  model: !obj:distnet.models.Convnet {
    num_epochs: 2, batch_size: 4,
    cost: !obj:distnet.costs.SoftmaxCrossEntropy {},
    learning_rule: !obj:distnet.learning_rules.Adam {
      learning_rate: 0.01, max_grad_norm: 5.0, schedule_unit: step,
      schedule: [!obj:distnet.schedules.LinearWarmup {warmup: 2}]},
    layers: [
      !obj:distnet.layers.ConvLayer {nofm: 3, fshape: 3, padding: 1, weight_init: {type: uniform, low: -0.3, high: 0.3}},
      !obj:distnet.layers.BatchNormLayer {activation: !obj:distnet.activations.RectLin {}},
      !obj:distnet.layers.DropoutLayer {p: 0.1},
      !obj:distnet.layers.GlobalAveragePoolingLayer {},
      !obj:distnet.layers.Layer {nout: 3, weight_init: {type: uniform, low: -0.3, high: 0.3}},
    ],
  },
}
""", "modern.yaml")
    m = exp.model
    m.infer_shapes((2, 6, 6))
    m.configure(Numpy64(rng_seed=0), Topology.serial())
    m.init_params()
    x, labels = _data()
    costs = m.fit(x, labels, 3)
    assert len(costs) == 2 and all(np.isfinite(costs)) and m.steps == 6


def test_learning_rule_and_neon_per_layer_momentum_do_not_mix():
    layer = FullyConnectedLayer(nout=2, weight_init=WI, name="o")
    layer.momentum_params = {"type": "constant", "coef": 0.9}     # neon's per-layer learning_rule
    m = Model(layers=[layer], num_epochs=1, learning_rule=Adam())
    m.infer_shapes((4,))
    with pytest.raises(ConfigError, match="own momentum"):
        m.configure(Numpy64(), Topology.serial())
