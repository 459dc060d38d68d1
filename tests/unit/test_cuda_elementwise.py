"""The fused elementwise chains of the activations and costs (distnet/ops/cuda/elementwise.py):
one launch each on a device; the array code's bits where no exp/log is involved, agreement to
``AGREEMENT`` where the device's exp/log round differently; NaN, clipping bounds and every dense
layout (2-D, NCHW, batch-innermost) handled as the numpy code handles them."""
import numpy as np
import pytest

import distnet.ops.cuda.launch
from distnet.ops.activations import Logistic, RectLin, Tanh
from distnet.ops.costs import EPS, CrossEntropy
from distnet.testing.backends import DEVICE_BACKENDS, assert_agree, to_device
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

SHAPES = {"2d": (7, 10), "nchw": (3, 2, 5, 4), "chwn": (3, 2, 5, 4)}


def _draw(layout, dtype, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(SHAPES[layout]) * scale
    a.flat[:6] = [0.0, -0.0, np.nan, 40.0, -800.0, np.inf]    # ties at 0, NaN, tails
    if layout == "chwn":
        a = np.ascontiguousarray(a.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)
    return a.astype(dtype)


def _one_launch(fn, *args):
    """``fn(*args)`` and the device calls it made (devicelike counts them)."""
    xp.counts.clear()
    out = fn(*args)
    return out, xp.counts["calls"]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(SHAPES))
def test_activation_gradients_give_the_array_code_bits(backend, dtype, layout):
    be = device_backend(backend)
    with np.errstate(all="ignore"):
        z, dy = _draw(layout, dtype, 1), _draw(layout, dtype, 2)
        y = np.tanh(z)
        p = Logistic().fprop(z)
        cases = [(RectLin(), z, z, dy), (Tanh(), z, y, dy), (Logistic(), z, p, dy)]
        for act, zz, yy, d in cases:
            want = act.bprop(zz, yy, d)
            got, calls = _one_launch(act.bprop, to_device(be.xp, zz), to_device(be.xp, yy), to_device(be.xp, d))
            assert got.strides == to_device(be.xp, zz).strides, act.name      # the layout is kept
            np.testing.assert_array_equal(be.to_host(got), want, err_msg=act.name)
            if be.xp is xp:
                assert calls <= 6, (act.name, calls)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(SHAPES))
def test_logistic_agrees_and_keeps_nan(backend, dtype, layout):
    be = device_backend(backend)
    z = _draw(layout, dtype, 3)
    with np.errstate(all="ignore"):
        want = Logistic().fprop(z)
    got, calls = _one_launch(Logistic().fprop, to_device(be.xp, z))
    got = be.to_host(got)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    assert_agree(got[keep], want[keep], np.dtype(dtype).name)
    assert got.flat[3] == 1.0 and got.flat[4] == 0.0 and got.flat[5] == 1.0   # tails, +inf
    if be.xp is xp:
        assert calls <= 6


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_terms_and_gradient(backend, dtype):
    """Outputs at and beyond the clip bounds, targets in [0, 1]: the gradient bit for bit, the
    loss (a float64 sum of log terms) to AGREEMENT, a 0-d float64 device array."""
    be = device_backend(backend)
    rng = np.random.default_rng(4)
    y = rng.uniform(0, 1, (9, 6)).astype(dtype)
    y.flat[:5] = [0.0, 1.0, EPS / 2, 1 - EPS / 4, 0.5]
    t = (rng.uniform(0, 1, y.shape) > 0.5).astype(dtype)
    t[0, :3] = [0.25, 1.0, 0.0]
    cost = CrossEntropy()
    with np.errstate(all="ignore"):
        want_loss, want_grad = cost.loss_sum(y, t), cost.grad(y, t)
    dy_, dt = be.xp.asarray(y), be.xp.asarray(t)
    got_grad, calls = _one_launch(cost.grad, dy_, dt)
    np.testing.assert_array_equal(be.to_host(got_grad), want_grad)
    got_loss = cost.loss_sum(dy_, dt)
    assert got_loss.shape == () and got_loss.dtype == np.float64
    assert_agree(np.asarray(be.to_host(got_loss)), np.asarray(want_loss), np.dtype(dtype).name)
    if be.xp is xp:
        assert calls <= 4


def test_arrays_of_other_layouts_take_the_array_code(monkeypatch):
    """Mixed layouts (or dtypes) are not flat-compatible: the generic code runs, same numbers."""
    if not distnet.ops.cuda.launch.available(xp):
        pytest.skip("no fused kernels on the device-like module here (no C++ compiler)")
    z = _draw("nchw", np.float64, 5)
    dy = _draw("chwn", np.float64, 6)
    want = RectLin().bprop(z, z, dy)
    xp.counts.clear()
    got = RectLin().bprop(to_device(xp, z), to_device(xp, z), to_device(xp, dy))
    assert xp.counts["calls"] > 4      # the where/isnan chain, not one kernel
    np.testing.assert_array_equal(got.get(), want)

