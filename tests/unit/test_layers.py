"""Single-process layers and model plumbing in float64, on every array backend (numpy, the
device-like stand-in for cupy, cupy where there is a GPU): parameter and input gradients of a
whole network (padding, strides, every layer kind) against central differences, neon's weight
layout, and the SGD/momentum rules. Values are brought to the host (``backend.to_host``) for
the finite differences and the comparisons with the numpy oracles."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.layers import (AveragePoolingLayer, ConvLayer, L2PoolingLayer, FullyConnectedLayer, FullyConnectedNoBiasLayer,
                            MaxPoolingLayer)
from distnet.models import Model
from distnet.ops.activations import Logistic, Softmax, Tanh
from distnet.ops.costs import CrossEntropy, SumSquaredDiffs
from distnet.optim.sgd import MomentumSchedule, sgd_update
from distnet.testing.backends import make_backend
from tests.numgrad import numerical_grad

WI = {"type": "uniform", "low": -0.5, "high": 0.5}


def build(layers, shape, cost=None, backend="numpy", dtype="float64"):
    """An MLP of ``layers`` for inputs ``shape``, configured on one process with ``backend``
    (a name of :data:`distnet.testing.backends.BACKENDS`), weights drawn from seed 1."""
    model = Model(layers=layers, num_epochs=1, cost=cost or SumSquaredDiffs(), learning_rate=0.1)
    model.infer_shapes(shape)
    model.configure(make_backend(backend, dtype=dtype, rng_seed=1), Topology.serial())
    model.init_params()
    return model


def host(model, a):
    """``a`` (an array of ``model``'s backend) on the host."""
    return model.backend.to_host(a)


def numerical_grad_of(backend, f, a, eps=1e-6):
    """Central differences of the scalar ``f()`` with respect to the array ``a`` of ``backend``
    (perturbed in place, restored). A device array is perturbed through a host copy: each
    perturbed value is copied to the device whole, and the arithmetic stays on the host."""
    if isinstance(a, np.ndarray):
        return numerical_grad(f, a, eps)
    h = backend.to_host(a).copy()
    g = np.zeros(h.shape, dtype=np.float64)
    for i in np.ndindex(*h.shape):
        old = h[i]
        h[i] = old + eps
        a[...] = backend.asarray(h, dtype=h.dtype)
        fp = f()
        h[i] = old - eps
        a[...] = backend.asarray(h, dtype=h.dtype)
        fm = f()
        h[i] = old
        g[i] = (fp - fm) / (2 * eps)
    a[...] = backend.asarray(h, dtype=h.dtype)
    return g


def loss_of(model, x, t):
    return model.cost.loss(model.fprop(x), t)


def assert_network_gradients(model, x, t):
    """Every parameter gradient and the input gradient of ``model`` at ``(x, t)`` (host arrays,
    moved to the model's backend) equal central differences of its loss."""
    be = model.backend
    x, t = be.asarray(x), be.asarray(t)
    y = model.fprop(x)
    model.bprop(model.cost.grad(y, t))
    for layer in model.layers:
        for p in layer.params():
            grad = be.to_host(p.grad).copy()
            num = numerical_grad_of(be, lambda: loss_of(model, x, t), p.value)
            np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8, err_msg=p.name)
    # input gradient of the first layer (normally skipped at pos 0)
    y = model.fprop(x)
    delta = model.cost.grad(y, t)
    for layer in reversed(model.layers):
        delta = layer.bprop(delta, need_input_grad=True)
    delta = be.to_host(delta).copy()
    np.testing.assert_allclose(delta, numerical_grad_of(be, lambda: loss_of(model, x, t), x),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("layers", [
    lambda: [ConvLayer(nofm=2, fshape=3, padding=1, weight_init=WI), MaxPoolingLayer(fshape=2),
             ConvLayer(nofm=3, fshape=[2, 3], stride=[1, 2], weight_init=WI),
             FullyConnectedNoBiasLayer(nout=4, weight_init=WI, activation=Tanh())],
    lambda: [ConvLayer(nofm=2, fshape=3, stride=2, padding=2, weight_init=WI),
             L2PoolingLayer(fshape=2, stride=1), AveragePoolingLayer(fshape=2, stride=1, padding=1),
             FullyConnectedLayer(nout=3, weight_init=dict(WI, bias_init=0.2), activation=Logistic())],
], ids=["conv-pad-max-rect", "stride-l2-avgpad-bias"])
def test_network_gradients_match_central_differences(layers, backend_name):
    rng = np.random.RandomState(0)
    model = build(layers(), (2, 7, 8), backend=backend_name)
    x = rng.standard_normal((3, 2, 7, 8))
    t = rng.uniform(0, 1, (3, model.layers[-1].nout))
    assert_network_gradients(model, x, t)


def test_softmax_cross_entropy_gradients(backend_name):
    rng = np.random.RandomState(1)
    model = build([FullyConnectedNoBiasLayer(nout=4, weight_init=WI, activation=Softmax())], (5,), CrossEntropy(),
                  backend=backend_name)
    be = model.backend
    x, t = be.asarray(rng.standard_normal((3, 5))), be.asarray(np.eye(4)[[0, 2, 3]])
    model.bprop(model.cost.grad(model.fprop(x), t))
    p = model.layers[0].params()[0]
    grad = host(model, p.grad).copy()
    np.testing.assert_allclose(grad, numerical_grad_of(be, lambda: loss_of(model, x, t), p.value),
                               rtol=1e-6, atol=1e-8)


def test_conv_weights_follow_neon_layout(backend_name):
    """neon draws W as (C*fh*fw, K) with rows f = (c*fh + u)*fw + v; W4[k,c,u,v] = W[f, k]."""
    model = build([ConvLayer(nofm=3, fshape=[2, 3], weight_init=WI), FullyConnectedNoBiasLayer(nout=2, weight_init=WI)],
                  (2, 4, 5), backend=backend_name)
    w = np.random.RandomState(1).uniform(-0.5, 0.5, (2 * 2 * 3, 3))
    W = host(model, model.layers[0].W)
    for k in range(3):
        for c in range(2):
            for u in range(2):
                for v in range(3):
                    assert W[k, c, u, v] == w[(c * 2 + u) * 3 + v, k]


def test_bias_init_sets_last_column(backend_name):
    model = build([FullyConnectedLayer(nout=3, weight_init=dict(WI, bias_init=0.25))], (4,), backend=backend_name)
    assert (host(model, model.layers[0].b) == 0.25).all() and model.layers[0].W.shape == (3, 4)


def test_partial_last_batch_trains(backend_name):
    rng = np.random.RandomState(2)
    model = build([FullyConnectedNoBiasLayer(nout=3, weight_init=WI, activation=Logistic())], (1, 3, 3), CrossEntropy(),
                  backend=backend_name)
    model.batch_size = 4
    assert [len(b) for b in model.batches(10)] == [4, 4, 2]
    costs = model.fit(rng.standard_normal((10, 1, 3, 3)), rng.randint(0, 3, 10), 3)
    assert len(costs) == 1 and np.isfinite(costs[0])


def test_momentum_schedules():
    lm = MomentumSchedule({"type": "linear_monotone", "initial_coef": 0.5, "saturated_coef": 0.9,
                           "start_epoch": 2, "saturate_epoch": 6})
    assert [lm(e) for e in (0, 2, 4, 6, 9)] == pytest.approx([0.5, 0.5, 0.7, 0.9, 0.9])
    assert MomentumSchedule({"type": "constant", "coef": 0.3})(7) == 0.3
    assert MomentumSchedule(None)(0) == 0.0


def test_sgd_update_rules(backend_name):
    be = make_backend(backend_name)

    def a(value):
        return be.asarray(np.full(3, value))
    w = a(1.0)
    sgd_update(w, a(2.0), None, 0.1, 0.0)
    np.testing.assert_allclose(be.to_host(w), 0.8)
    w, v = a(1.0), a(0.5)
    sgd_update(w, a(2.0), v, 0.1, 0.9)  # v = 0.45 - 0.2 = 0.25; w = 1.25
    np.testing.assert_allclose(be.to_host(v), 0.25)
    np.testing.assert_allclose(be.to_host(w), 1.25)
    w, v = a(1.0), a(0.5)
    sgd_update(w, a(2.0), v, 0.1, 0.9, nesterov=True)  # w += 0.9*0.25 - 0.2
    np.testing.assert_allclose(be.to_host(w), 1.025)
    np.testing.assert_allclose(be.to_host(v), 0.25)


def test_maxpooling_layer_pads_with_minus_inf():
    """MaxPoolingLayer(padding=1) on all-negative images: the border outputs are the max of the
    real pixels (zero padding gave 0), and the gradient reaches only real pixels."""
    import numpy as np
    from distnet.backend import Numpy64
    from distnet.comm import Topology
    from distnet.errors import ConfigError
    from distnet.layers import MaxPoolingLayer
    from distnet.layers.base import SPATIAL, LayerContext
    x = np.random.RandomState(0).standard_normal((2, 3, 7, 6)) - 10.0
    layer = MaxPoolingLayer(fshape=3, stride=2, padding=1)
    layer.infer_shape((3, 7, 6))
    ctx = LayerContext(Numpy64(), Topology.serial(), 0)
    layer.bind(ctx)
    layer.configure(SPATIAL, ctx)
    for _ in range(2):                       # the planned chunk buffer is reused: still -inf
        y = layer.fprop(x.copy())
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        want = np.array([[[[xp[b, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max() for j in range(y.shape[3])]
                           for i in range(y.shape[2])] for c in range(3)] for b in range(2)])
        np.testing.assert_array_equal(y, want)
    dx = layer.bprop(np.ones_like(y))
    assert dx.shape == x.shape and dx.sum() == y.size and (dx >= 0).all()
    with pytest.raises(ConfigError, match="padding .* must be smaller than the window"):
        MaxPoolingLayer(fshape=2, padding=2)
