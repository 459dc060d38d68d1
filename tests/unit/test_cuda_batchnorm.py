"""Batch normalisation's fused device passes (distnet/ops/cuda/batchnorm.py) give the array
code's bits: the forward (y and xhat) and the training-mode input gradient, for (N, C), NCHW and
CHWN (batch-innermost) arrays, volumes (NCDHW, CDHWN: depth and rows read as one axis), dx into a new
array or over dy."""
import numpy as np
import pytest

import distnet.ops.cuda.launch

from distnet.ops.layout import chwn_order, from_chwn
from distnet.ops.batchnorm import bn_bprop_dx, bn_bprop_partial, bn_fprop, bn_stats_finish, bn_stats_partial
from distnet.testing.backends import DEVICE_BACKENDS, to_device
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

LAYOUTS = {"nc": (6, 5), "nchw": (3, 4, 5, 2), "chwn": (3, 4, 5, 2), "ncdhw": (3, 4, 2, 3, 2),
           "cdhwn": (3, 4, 2, 3, 2)}


def _draw(layout, dtype, seed):
    a = np.random.default_rng(seed).standard_normal(LAYOUTS[layout]) * 3 + 1
    if layout in ("chwn", "cdhwn"):      # (B, C, *S) indexed, (C, *S, B) memory
        a = np.ascontiguousarray(a.transpose(chwn_order(a.ndim))).transpose(from_chwn(a.ndim))
    return a.astype(dtype)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_forward_and_input_gradient_give_the_array_code_bits(backend, dtype, layout, monkeypatch):
    be = device_backend(backend)
    x, dy = _draw(layout, dtype, 1), _draw(layout, dtype, 2)
    C = x.shape[1]
    rng = np.random.default_rng(3)
    gamma, beta = rng.standard_normal(C).astype(dtype), rng.standard_normal(C).astype(dtype)
    mean, var = bn_stats_finish(bn_stats_partial(x), x.size // C)
    y, xhat, inv_std = bn_fprop(x, mean, var, gamma, beta)
    dx = bn_bprop_dx(dy, xhat, gamma, inv_std, bn_bprop_partial(dy, xhat), x.size // C)
    dy_over = dy.copy()
    dx_over = bn_bprop_dx(dy_over, xhat, gamma, inv_std, bn_bprop_partial(dy, xhat), x.size // C, out=dy_over)

    dev = lambda a: to_device(be.xp, a)   # noqa: E731
    dmean, dvar = bn_stats_finish(bn_stats_partial(dev(x)), x.size // C)
    xp.counts.clear()
    gy, gxhat, ginv = bn_fprop(dev(x), dmean, dvar, be.xp.asarray(gamma), be.xp.asarray(beta))
    fprop_calls = xp.counts["calls"]
    np.testing.assert_array_equal(be.to_host(gy), y)
    np.testing.assert_array_equal(be.to_host(gxhat), xhat)
    np.testing.assert_array_equal(be.to_host(ginv), inv_std)
    assert gy.strides == dev(x).strides      # the layout is kept

    sums = bn_bprop_partial(dev(dy), gxhat)
    gdx = bn_bprop_dx(dev(dy), gxhat, be.xp.asarray(gamma), ginv, sums, x.size // C)
    np.testing.assert_array_equal(be.to_host(gdx), dx)
    ddy = dev(dy)
    gdx_over = bn_bprop_dx(ddy, gxhat, be.xp.asarray(gamma), ginv, bn_bprop_partial(ddy, gxhat), x.size // C, out=ddy)
    assert gdx_over is ddy
    np.testing.assert_array_equal(be.to_host(gdx_over), dx_over)
    if be.xp is xp:     # the generic code: one launch per arithmetic step over the activations
        monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
        xp.counts.clear()
        bn_fprop(dev(x), dmean, dvar, be.xp.asarray(gamma), be.xp.asarray(beta))
        assert fprop_calls < xp.counts["calls"]


def test_a_volume_whose_depth_and_rows_do_not_merge_runs_the_array_code():
    from distnet.ops.cuda.batchnorm import mergeable
    a = np.zeros((3, 4, 2, 4, 2))
    assert mergeable(a) and mergeable(a[:, :, :1, 1:]) and mergeable(_draw("cdhwn", np.float64, 0))
    assert not mergeable(a[:, :, :, 1:]) and not mergeable(np.zeros((1,) * 6))
