"""distnet.ops.activations and distnet.ops.costs: values against formulas, gradients against
central differences, on every array backend (distnet/testing/backends.py): the op runs on the
backend, results are compared on the host; central differences use numpy on the host."""
import numpy as np
import pytest

from distnet.ops.activations import Identity, Logistic, RectLin, Softmax, Tanh
from distnet.ops.costs import EPS, CrossEntropy, MeanSquared, SumSquared, SumSquaredDiffs, misclassified
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad

ACTIVATIONS = [Identity, Logistic, RectLin, Tanh, Softmax]

REFERENCE = {
    Identity: lambda z: z,
    Logistic: lambda z: 1 / (1 + np.exp(-z)),
    RectLin: lambda z: np.maximum(z, 0),
    Tanh: np.tanh,
    Softmax: lambda z: np.exp(z) / np.exp(z).sum(axis=1, keepdims=True),
}


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


@pytest.mark.parametrize("cls", ACTIVATIONS)
@pytest.mark.parametrize("shape", [(1, 5), (4, 3)])
def test_activation_fprop_and_bprop(cls, shape, be):
    rng = np.random.default_rng(0)
    z = rng.standard_normal(shape) * 2
    z[np.abs(z) < 1e-3] = 0.5                 # keep RectLin away from its kink for the check
    act = cls()
    zd = be.asarray(z)
    y = act.fprop(zd)
    np.testing.assert_allclose(be.to_host(y), REFERENCE[cls](z), rtol=1e-12, atol=1e-15)
    dy = rng.standard_normal(shape)
    dz = be.to_host(act.bprop(zd, y, be.asarray(dy)))
    check_grad(lambda: float(np.vdot(act.fprop(z), dy)), z, dz)


@pytest.mark.parametrize("cls", ACTIVATIONS)
def test_activation_api(cls, be):
    act = cls()
    assert isinstance(act.name, str) and act.name and cls.__doc__
    with pytest.raises(TypeError):
        cls(foo=1)
    z = be.asarray(np.random.default_rng(1).standard_normal((3, 4)), np.float32)
    y = act.fprop(z)
    assert y.dtype == np.float32 and act.bprop(z, y, y).dtype == np.float32


def test_elementwise_activations_any_shape(be):
    z = np.random.default_rng(2).standard_normal((2, 3, 4, 5))
    for cls in (Identity, Logistic, RectLin, Tanh):
        np.testing.assert_allclose(be.to_host(cls().fprop(be.asarray(z))), REFERENCE[cls](z), rtol=1e-12)


def test_rectlin_derivative_zero_at_zero(be):
    z = be.asarray(np.array([[-1.0, 0.0, 2.0]]))
    y = RectLin().fprop(z)
    np.testing.assert_array_equal(be.to_host(y), [[0, 0, 2]])
    np.testing.assert_array_equal(be.to_host(RectLin().bprop(z, y, be.xp.ones_like(z))), [[0, 0, 1]])


def test_logistic_extremes_no_overflow(be):
    z = be.asarray(np.array([[-1000.0, -50.0, 0.0, 50.0, 1000.0]]), np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):   # numpy-based backends
        y = Logistic().fprop(z)
    assert y.dtype == np.float32
    y = be.to_host(y)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, [[0, 1 / (1 + np.exp(50.0)), 0.5, 1, 1]], rtol=1e-6, atol=0)


def test_softmax_stable_and_normalised(be):
    z = be.asarray(np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]]))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = be.to_host(Softmax().fprop(z))
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y.sum(axis=1), 1.0)
    ref = be.to_host(Softmax().fprop(be.asarray(np.array([[0.0, 1.0, 2.0]]))))
    np.testing.assert_allclose(y[0], ref[0], rtol=1e-12)
    np.testing.assert_allclose(y[1], [0, 0, 1], atol=1e-300)


# ----------------------------------------------------------------------------------------- costs

def targets(B, K, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, K, size=B)
    return labels, np.eye(K)[labels]


@pytest.mark.parametrize("B,K", [(1, 4), (5, 3)])
def test_cross_entropy(B, K, be):
    rng = np.random.default_rng(1)
    y = rng.uniform(0.05, 0.95, size=(B, K))
    _, t = targets(B, K)
    ce = CrossEntropy()
    yd, td = be.asarray(y), be.asarray(t)
    expected = -sum(t[b, k] * np.log(y[b, k]) + (1 - t[b, k]) * np.log(1 - y[b, k])
                    for b in range(B) for k in range(K))
    assert ce.loss(yd, td) == pytest.approx(expected, rel=1e-12)
    assert isinstance(ce.loss(yd, td), float)
    check_grad(lambda: ce.loss(y, t), y, be.to_host(ce.grad(yd, td)))
    # Soft (non one-hot) targets too.
    ts = rng.uniform(0, 1, size=(B, K))
    check_grad(lambda: ce.loss(y, ts), y, be.to_host(ce.grad(yd, be.asarray(ts))))


def test_cross_entropy_clipping(be):
    y = be.asarray(np.array([[0.0, 1.0, 0.5]]))
    t = be.asarray(np.array([[1.0, 0.0, 1.0]]))
    ce = CrossEntropy()
    assert EPS == 2.0 ** -23
    assert ce.loss(y, t) == pytest.approx(-2 * np.log(EPS) - np.log(0.5), rel=1e-12)
    g = be.to_host(ce.grad(y, t))
    np.testing.assert_allclose(g, [[-1 / EPS, 1 / EPS, -0.5 / 0.25]], rtol=1e-12)
    # A perfect prediction costs (almost) nothing and is finite.
    assert 0 <= ce.loss(be.asarray(np.array([[1.0, 0.0]])), be.asarray(np.array([[1.0, 0.0]]))) < 1e-6


def test_cross_entropy_logistic_shortcut(be):
    # neon: with a Logistic output, dz = (y - t) wherever y(1-y) >= EPS.
    z = be.asarray(np.random.default_rng(3).standard_normal((4, 3)))
    _, t = targets(4, 3)
    t = be.asarray(t)
    lg = Logistic()
    y = lg.fprop(z)
    np.testing.assert_allclose(be.to_host(lg.bprop(z, y, CrossEntropy().grad(y, t))), be.to_host(y - t),
                               rtol=1e-12)


@pytest.mark.parametrize("B,K", [(1, 4), (5, 3)])
def test_sum_squared_diffs(B, K, be):
    rng = np.random.default_rng(2)
    y = rng.standard_normal((B, K))
    t = rng.standard_normal((B, K))
    c = SumSquaredDiffs()
    yd, td = be.asarray(y), be.asarray(t)
    assert c.loss(yd, td) == pytest.approx(0.5 * np.sum((y - t) ** 2), rel=1e-12)
    check_grad(lambda: c.loss(y, t), y, be.to_host(c.grad(yd, td)))


def test_mean_squared_and_sum_squared_are_neons_on_float_targets(be):
    """neon's MeanSquared: per sample the mean over the T targets of the halved squared errors,
    gradient (y - t) / T; SumSquared: SumSquaredDiffs' sum. Both regress float targets."""
    rng = np.random.default_rng(3)
    y, t = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    yd, td = be.asarray(y), be.asarray(t)
    assert MeanSquared().loss(yd, td) == pytest.approx(np.sum(np.mean((y - t) ** 2, axis=1) / 2), rel=1e-12)
    check_grad(lambda: MeanSquared().loss(y, t), y, be.to_host(MeanSquared().grad(yd, td)))
    assert SumSquared().loss(yd, td) == SumSquaredDiffs().loss(yd, td)
    assert MeanSquared.regresses and SumSquared.regresses and not SumSquaredDiffs.regresses


@pytest.mark.parametrize("cls", [CrossEntropy, SumSquaredDiffs, MeanSquared])
def test_cost_float32_grad(cls, be):
    y = be.asarray(np.random.default_rng(0).uniform(0.1, 0.9, size=(3, 4)), np.float32)
    _, t = targets(3, 4)                      # float64 targets must not upcast the gradient
    assert cls().grad(y, be.xp.asarray(t)).dtype == np.float32
    assert cls().grad(y, t).dtype == np.float32   # host targets (labels from a dataset) are accepted
    assert isinstance(cls().loss(y, be.asarray(t, np.float32)), float)
    assert cls.name


def test_misclassified(be):
    y = be.asarray(np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]]))
    labels = np.array([1, 2, 2, 1])           # row 3 is a tie: argmax picks 0, wrong
    assert misclassified(y, be.xp.asarray(labels)) == 2
    assert misclassified(y, labels) == 2      # host labels are accepted
    assert misclassified(y, be.asarray(np.eye(3)[labels])) == 2
    assert isinstance(misclassified(y, be.xp.asarray(labels)), int)
