"""distnet.ops.softmax and costs.SoftmaxCrossEntropy: formulas, central differences, no overflow
for logits of 1e4, one-hot and class-id targets, on every array backend (and against PyTorch
where it is installed)."""
import numpy as np
import pytest

from distnet.ops.costs import SoftmaxCrossEntropy, misclassified
from distnet.ops.softmax import log_softmax, log_softmax_bprop, logsumexp, softmax, softmax_bprop
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def ref_softmax(z):
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_and_logsumexp_formulas(be):
    z = np.random.default_rng(0).standard_normal((4, 5)) * 3
    zd = be.asarray(z)
    np.testing.assert_allclose(be.to_host(softmax(zd)), ref_softmax(z), rtol=1e-13)
    np.testing.assert_allclose(be.to_host(logsumexp(zd)), np.log(np.exp(z).sum(axis=1)), rtol=1e-13)
    np.testing.assert_allclose(be.to_host(log_softmax(zd)), np.log(ref_softmax(z)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(be.to_host(softmax(zd, axis=0)), ref_softmax(z.T).T, rtol=1e-13)
    out = zd.copy()
    assert softmax(out, out=out) is out
    np.testing.assert_allclose(be.to_host(out), ref_softmax(z), rtol=1e-13)


def test_softmax_backward_central_differences(be):
    rng = np.random.default_rng(1)
    z, dy = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    y = softmax(be.asarray(z))
    dz = be.to_host(softmax_bprop(y, be.asarray(dy)))
    check_grad(lambda: float(np.vdot(ref_softmax(z), dy)), z, dz)
    lp = log_softmax(be.asarray(z))
    dz = be.to_host(log_softmax_bprop(lp, be.asarray(dy)))
    check_grad(lambda: float(np.vdot(np.log(ref_softmax(z)), dy)), z, dz)


@pytest.mark.parametrize("ids", [False, True])
def test_cross_entropy_value_and_grad(ids, be):
    rng = np.random.default_rng(2)
    z = rng.standard_normal((5, 4)) * 2
    labels = rng.integers(0, 4, size=5)
    onehot = np.eye(4)[labels]
    t = be.asarray(labels) if ids else be.asarray(onehot)
    cost = SoftmaxCrossEntropy()
    want = -np.log(ref_softmax(z))[np.arange(5), labels].sum()
    loss = cost.loss_sum(be.asarray(z), t)
    assert loss.dtype == np.float64
    np.testing.assert_allclose(float(loss), want, rtol=1e-13)
    assert cost.loss(be.asarray(z), t) == pytest.approx(want, rel=1e-13)
    g = be.to_host(cost.grad(be.asarray(z), t))
    np.testing.assert_allclose(g, ref_softmax(z) - onehot, rtol=1e-13, atol=1e-15)
    check_grad(lambda: -np.log(ref_softmax(z))[np.arange(5), labels].sum(), z, g)
    assert misclassified(be.asarray(z), t) == int((z.argmax(1) != labels).sum())


def test_cross_entropy_soft_targets(be):
    rng = np.random.default_rng(3)
    z, t = rng.standard_normal((3, 4)), rng.random((3, 4))
    cost = SoftmaxCrossEntropy()
    g = be.to_host(cost.grad(be.asarray(z), be.asarray(t)))
    check_grad(lambda: float(-(t * np.log(ref_softmax(z))).sum()), z, g)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_no_overflow_for_huge_logits(dtype, be):
    z = np.array([[1e4, 0.0, -1e4], [-1e4, -1e4, 1e4], [1e4, 1e4, -1e4]])
    onehot = np.array([[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0]])
    zd, td = be.asarray(z, dtype), be.asarray(onehot, dtype)
    cost = SoftmaxCrossEntropy()
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        loss = float(cost.loss_sum(zd, td))
        g = be.to_host(cost.grad(zd, td))
        y = be.to_host(softmax(zd))
    np.testing.assert_allclose(loss, 0 + 2e4 + np.log(2), rtol=1e-6)
    assert g.dtype == np.dtype(dtype) and np.isfinite(g).all()
    np.testing.assert_allclose(g, [[0, 0, 0], [-1, 0, 1], [0.5, -0.5, 0]], atol=1e-6)
    np.testing.assert_allclose(y, [[1, 0, 0], [0, 0, 1], [0.5, 0.5, 0]], atol=1e-6)


def test_registered():
    from distnet.config.registry import resolve
    assert resolve("SoftmaxCrossEntropy") == (SoftmaxCrossEntropy, "cost")


def test_against_torch_if_installed():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    z, labels = rng.standard_normal((6, 5)) * 4, rng.integers(0, 5, size=6)
    zt = torch.from_numpy(z.copy()).requires_grad_(True)
    lt = torch.nn.functional.cross_entropy(zt, torch.from_numpy(labels), reduction="sum")
    lt.backward()
    cost = SoftmaxCrossEntropy()
    np.testing.assert_allclose(float(cost.loss_sum(z, labels)), lt.item(), rtol=1e-13)
    np.testing.assert_allclose(cost.grad(z, labels), zt.grad.numpy(), rtol=1e-12, atol=1e-15)
