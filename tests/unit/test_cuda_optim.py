"""The fused optimiser kernels (distnet/optim/kernels.py) give the array-module code's bits:
SGD (plain, momentum, Nesterov) and Adam, with L2 or decoupled weight decay, several steps, in
one launch per parameter and step."""
import numpy as np
import pytest

from distnet.optim.adam import adam_step
from distnet.optim.sgd import sgd_step, sgd_update
from distnet.testing.backends import DEVICE_BACKENDS
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

SGD_CASES = {
    "plain": dict(mu=0.0, nesterov=False, weight_decay=0.0, decoupled=False),
    "momentum": dict(mu=0.9, nesterov=False, weight_decay=0.0, decoupled=False),
    "nesterov": dict(mu=0.9, nesterov=True, weight_decay=0.0, decoupled=False),
    "momentum+l2": dict(mu=0.5, nesterov=False, weight_decay=1e-3, decoupled=False),
    "nesterov+decoupled": dict(mu=0.7, nesterov=True, weight_decay=0.05, decoupled=True),
}


def _arrays(dtype, shape=(7, 5, 3)):
    rng = np.random.default_rng(1)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(3)]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(SGD_CASES))
def test_sgd_kernel_gives_the_array_code_bits(backend, dtype, case):
    be = device_backend(backend)
    kw = SGD_CASES[case]
    w, v, _ = _arrays(dtype)
    if kw["mu"] == 0.0:
        v = None
    dw = be.asarray(w, dtype=dtype)
    dv = None if v is None else be.asarray(v, dtype=dtype)
    rng = np.random.default_rng(2)
    for step, lr in enumerate((0.1, 0.05, 0.3)):
        g = rng.standard_normal(w.shape).astype(dtype)
        dg = be.asarray(g, dtype=dtype)
        sgd_step(w, g, v, lr, **kw)
        xp.counts.clear()
        sgd_step(dw, dg, dv, lr, **kw)
        if be.xp is xp:
            assert xp.counts["calls"] == 1
    np.testing.assert_array_equal(be.to_host(dw), w)
    if v is not None:
        np.testing.assert_array_equal(be.to_host(dv), v)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_update_of_the_neon_step_gives_the_array_code_bits(backend, dtype, nesterov):
    be = device_backend(backend)
    w, v, g = _arrays(dtype)
    dw, dv, dg = (be.asarray(a, dtype=dtype) for a in (w, v, g))
    sgd_update(w, g, v, 0.01, 0.9, nesterov)
    sgd_update(dw, dg, dv, 0.01, 0.9, nesterov)
    np.testing.assert_array_equal(be.to_host(dw), w)
    np.testing.assert_array_equal(be.to_host(dv), v)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_decay,decoupled", [(0.0, False), (1e-2, False), (1e-2, True)])
def test_adam_kernel_gives_the_array_code_bits(backend, dtype, weight_decay, decoupled):
    be = device_backend(backend)
    w, _, _ = _arrays(dtype)
    m, v = np.zeros_like(w), np.zeros_like(w)
    dw, dm, dv = (be.asarray(a, dtype=dtype) for a in (w, m, v))
    rng = np.random.default_rng(3)
    for step in range(1, 5):
        g = rng.standard_normal(w.shape).astype(dtype)
        dg = be.asarray(g, dtype=dtype)
        adam_step(w, g, m, v, step, 1e-3, weight_decay=weight_decay, decoupled=decoupled)
        xp.counts.clear()
        adam_step(dw, dg, dm, dv, step, 1e-3, weight_decay=weight_decay, decoupled=decoupled)
        if be.xp is xp:
            assert xp.counts["calls"] == 1
    for d, h in ((dw, w), (dm, m), (dv, v)):
        np.testing.assert_array_equal(be.to_host(d), h)
