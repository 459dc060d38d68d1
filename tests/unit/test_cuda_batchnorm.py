"""Batch normalisation's fused device kernels (distnet/ops/cuda/batchnorm.py) give the array
code's bits: the per-channel finishing of the training statistics (with the running averages),
the forward (y and xhat), the training-mode input gradient and the parameter gradients, for
(N, C), (N, C, L), NCHW, NCDHW, batch-innermost and cut (tile) arrays, dx into a new array or
over dy; and a training step of the ops, as the layer makes it, agrees between numpy and the
device-like module with and without the kernels."""
import numpy as np
import pytest

import distnet.ops.cuda.launch

from distnet.ops.batchnorm import (bn_bprop_dx, bn_bprop_partial, bn_fprop, bn_normalize, bn_set_param_grads,
                                   bn_stats_finish, bn_stats_partial, bn_train_statistics, local_count)
from distnet.testing.backends import DEVICE_BACKENDS, assert_agree, make_backend
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

#: layout name -> (shape, memory): "c" C order, "n-last" batch innermost, "cut" a view of an
#: array one larger on each side of every spatial axis (a tile with its halo).
LAYOUTS = {"nc": ((6, 5), "c"), "ncl": ((3, 4, 5), "c"), "nchw": ((3, 4, 5, 2), "c"),
           "chwn": ((3, 4, 5, 2), "n-last"), "ncdhw": ((2, 3, 3, 4, 2), "c"),
           "cdhwn": ((2, 3, 3, 4, 2), "n-last"), "ncdhw-cut": ((2, 3, 3, 4, 2), "cut")}


def _place(module, a, memory):
    """``a (B, C, *S)`` held as ``memory`` says, on ``module`` (numpy or a device module)."""
    if memory == "n-last":
        perm = tuple(range(1, a.ndim)) + (0,)
        back = (a.ndim - 1,) + tuple(range(a.ndim - 1))
        return module.asarray(np.ascontiguousarray(a.transpose(perm))).transpose(back)
    if memory == "cut":
        cut = (slice(None), slice(None)) + (slice(1, -1),) * (a.ndim - 2)
        big = np.zeros(a.shape[:2] + tuple(s + 2 for s in a.shape[2:]), dtype=a.dtype)
        big[cut] = a
        return module.asarray(big)[cut]
    return module.asarray(a)


def _draw(shape, dtype, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 3 + 1).astype(dtype)


def _vectors(C, dtype, seed=3):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(C) * s + o).astype(dtype) for s, o in ((1, 1), (1, 0), (0.5, 0), (0.2, 1))]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_forward_and_input_gradient_give_the_array_code_bits(backend, dtype, layout, monkeypatch):
    be = device_backend(backend)
    shape, memory = LAYOUTS[layout]
    x, dy = _place(np, _draw(shape, dtype, 1), memory), _place(np, _draw(shape, dtype, 2), memory)
    C, count = shape[1], local_count(x)
    gamma, beta = _vectors(C, dtype)[:2]
    mean, var = bn_stats_finish(bn_stats_partial(x), count)
    y, xhat, inv_std = bn_fprop(x, mean, var, gamma, beta)
    sums = bn_bprop_partial(dy, xhat)
    dx = bn_bprop_dx(dy, xhat, gamma, inv_std, sums, count)
    dy_over = dy.copy()
    dx_over = bn_bprop_dx(dy_over, xhat, gamma, inv_std, sums, count, out=dy_over)

    dev = lambda a: _place(be.xp, np.ascontiguousarray(a), memory)    # noqa: E731
    dmean, dvar = be.xp.asarray(mean), be.xp.asarray(var)
    xp.counts.clear()
    gy, gxhat, ginv = bn_fprop(dev(x), dmean, dvar, be.xp.asarray(gamma), be.xp.asarray(beta))
    fprop_calls = xp.counts["calls"]
    np.testing.assert_array_equal(be.to_host(gy), y)
    np.testing.assert_array_equal(be.to_host(gxhat), xhat)
    np.testing.assert_array_equal(be.to_host(ginv), inv_std)
    if memory != "cut":
        assert gy.strides == dev(x).strides      # the layout is kept

    dsums = be.xp.asarray(sums)
    for dcount in (count, be.xp.asarray(np.float64(count))):     # a number, or on the device
        gdx = bn_bprop_dx(dev(dy), gxhat, be.xp.asarray(gamma), ginv, dsums, dcount)
        np.testing.assert_array_equal(be.to_host(gdx), dx)
    ddy = dev(dy)
    gdx_over = bn_bprop_dx(ddy, gxhat, be.xp.asarray(gamma), ginv, dsums, count, out=ddy)
    assert gdx_over is ddy
    np.testing.assert_array_equal(be.to_host(gdx_over), dx_over)
    if be.xp is xp:     # the generic code: one launch per arithmetic step over the activations
        monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
        xp.counts.clear()
        bn_fprop(dev(x), dmean, dvar, be.xp.asarray(gamma), be.xp.asarray(beta))
        assert fprop_calls < xp.counts["calls"]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count", [1, 2, 37])
@pytest.mark.parametrize("on_device", [False, True], ids=["host-count", "device-count"])
def test_train_statistics_give_the_array_code_bits(backend, dtype, count, on_device, monkeypatch):
    """Mean, inv_std and the running averages of one launch are the array code's, whether the
    count is a number or the Allreduced float64 on the device; a few launches instead of ~25."""
    be = device_backend(backend)
    C = 7
    rng = np.random.default_rng(count)
    x = rng.standard_normal((count, C)) * 3 + 2
    running = [v.copy() for v in _vectors(C, dtype)[2:]]
    running[1] = np.abs(running[1])
    sums = bn_stats_partial(x, running[0].astype(np.float64))
    sums[1, 0] = sums[0, 0] ** 2 / count * (1 - 1e-15)    # a variance that rounds below 0: clamped
    host = [r.copy() for r in running]
    mean, inv_std = bn_train_statistics(sums, count, *host, np.dtype(dtype), 1e-5, 0.1)

    def on_device_run():
        dev = [be.xp.asarray(r) for r in running]
        dcount = be.xp.asarray(np.float64(count)) if on_device else count
        dsums = be.xp.asarray(sums)
        xp.counts.clear()
        out = bn_train_statistics(dsums, dcount, *dev, np.dtype(dtype), 1e-5, 0.1)
        counts = dict(xp.counts)
        return [be.to_host(a) for a in (*out, *dev)], counts.get("calls", 0), counts.get("syncs", 0)

    got, calls, syncs = on_device_run()
    for g, h in zip(got, (mean, inv_std, *host)):
        assert g.dtype == dtype
        np.testing.assert_array_equal(g, h)
    if be.xp is xp:
        assert syncs == 0
        monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
        generic, generic_calls, generic_syncs = on_device_run()
        assert generic_syncs == 0
        for g, h in zip(generic, got):
            np.testing.assert_array_equal(g, h)
        assert calls == 3 and generic_calls > 20     # two allocations and the kernel


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_param_grads_are_the_sums_cast(backend, dtype):
    be = device_backend(backend)
    sums = np.random.default_rng(0).standard_normal((2, 5)) * 1e3
    dgamma, dbeta = np.empty(5, dtype), np.empty(5, dtype)
    bn_set_param_grads(sums, dgamma, dbeta)
    ddgamma, ddbeta = be.xp.zeros(5, dtype), be.xp.zeros(5, dtype)
    bn_set_param_grads(be.xp.asarray(sums), ddgamma, ddbeta)
    np.testing.assert_array_equal(be.to_host(ddgamma), dgamma)
    np.testing.assert_array_equal(be.to_host(ddbeta), dbeta)
    np.testing.assert_array_equal(dbeta, sums[0].astype(dtype))


def test_more_axes_than_the_kernel_reads_take_the_array_code():
    """A cut view of seven axes keeps seven after merging: the array code runs, same numbers."""
    be = device_backend("devicelike")
    shape = (2, 3, 2, 3, 2, 2, 3)
    x = _draw(shape, np.float64, 4)
    mean, inv_std, gamma, beta = _vectors(3, np.float64)
    dx = _place(be.xp, x, "cut")
    assert bn_normalize.implementation(dx, mean, inv_std, gamma, beta) is bn_normalize.array_code
    whole = be.xp.asarray(x)      # merged to (2, 3, 72): the kernel
    assert bn_normalize.implementation(whole, mean, inv_std, gamma, beta) is not bn_normalize.array_code
    y, xhat = bn_normalize(dx, *(be.xp.asarray(v) for v in (mean, inv_std, gamma, beta)))
    want_y, want_xhat = bn_normalize(x, mean, inv_std, gamma, beta)
    np.testing.assert_array_equal(be.to_host(y), want_y)
    np.testing.assert_array_equal(be.to_host(xhat), want_xhat)


def _training_step(be, x, dy, vectors):
    """The ops in the batch-norm layer's order for one training step on one process:
    ``(y, dx, dgamma, dbeta, running_mean, running_var)`` on the host."""
    gamma, beta, rm, rv = (be.asarray(v.copy()) for v in vectors)     # numpy's asarray would not copy
    x, dy = be.asarray(x), be.asarray(dy)
    C, count = x.shape[1], float(local_count(x))
    buf = be.xp.empty(2 * C + 1, dtype="float64")
    sums = bn_stats_partial(x, rm, out=buf[:2 * C].reshape(2, C))
    buf[2 * C] = count
    mean, inv_std = bn_train_statistics(sums, count, rm, rv, x.dtype, 1e-5, 0.1)
    y, xhat = bn_normalize(x, mean, inv_std, gamma, beta)
    g = bn_bprop_partial(dy, xhat)
    dgamma, dbeta = be.xp.empty_like(gamma), be.xp.empty_like(beta)
    bn_set_param_grads(g, dgamma, dbeta)
    dx = bn_bprop_dx(dy, xhat, gamma, inv_std, g, count)
    return [be.to_host(a) for a in (y, dx, dgamma, dbeta, rm, rv)]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "generic"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(8, 5), (4, 3, 6, 5), (2, 3, 4, 3, 5)], ids=["nc", "nchw", "ncdhw"])
def test_a_training_step_agrees_with_numpy(backend, kernels, dtype, shape, monkeypatch):
    """numpy against the device path, with the kernels and without (``DISTNET_CUDA_KERNELS=0``):
    the device-like module gives numpy's bits (its reductions are numpy's), a GPU agrees to
    rounding (its reductions add in another order)."""
    monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", kernels)
    be = make_backend(backend, dtype=dtype)
    x, dy = _draw(shape, dtype, 5) + 4, _draw(shape, dtype, 6)
    vectors = _vectors(shape[1], dtype)
    vectors[3] = np.abs(vectors[3])
    want = _training_step(make_backend("numpy", dtype=dtype), x, dy, vectors)
    got = _training_step(be, x, dy, vectors)
    for name, g, w in zip(("y", "dx", "dgamma", "dbeta", "running_mean", "running_var"), got, want):
        assert g.dtype == w.dtype, name
        if be.xp is xp:
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            assert_agree(g, w, dtype, err_msg=name)
