"""The fused per-pixel softmax chains (distnet/ops/cuda/pixel_costs.py): one launch each on a
device, numpy's results to AGREEMENT (the device's exp and log round on their own; the rest is
the array code's order), ignored pixels and labels as the array code treats them, NaN logits
propagated as numpy's maximum does, and arguments the kernels do not read (strided logits)
taking the array code."""
import numpy as np
import pytest

from distnet.ops.pixel_softmax import masked_softmax, pixel_ce_grad, pixel_ce_terms, pixel_dice_grad
from distnet.testing.backends import DEVICE_BACKENDS, assert_agree
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

IGNORE = 9


def _draw(dtype, shape=(3, 4, 5, 6), seed=0):
    rng = np.random.default_rng(seed)
    z = (3 * rng.standard_normal(shape)).astype(dtype)
    z[0, :, 0, 0] = [40.0, -800.0, 0.0, 0.0]           # tails and a tie
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    t[rng.uniform(size=t.shape) < 0.2] = IGNORE
    per_class = [rng.uniform(0.1, 2, shape[1]).astype(dtype) for _ in range(2)]
    rows = [rng.standard_normal((shape[0], shape[1])).astype(dtype) for _ in range(2)]
    return z, t, per_class, rows


def _ops(per_class, rows):
    """``(name, op, extra arguments)`` of each fused op."""
    return [("ce_terms", pixel_ce_terms, (per_class[0],)), ("ce_grad", pixel_ce_grad, (per_class[1],)),
            ("masked_softmax", masked_softmax, ()), ("dice_grad", pixel_dice_grad, tuple(rows)),
            ("dice_grad_batch", pixel_dice_grad, tuple(r[:1] for r in rows))]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ignore", [IGNORE, None])
def test_one_launch_each_with_the_array_code_numbers(backend, dtype, ignore):
    be = device_backend(backend)
    z, t, per_class, rows = _draw(dtype)
    if ignore is None:
        t = np.where(t == IGNORE, 1, t)
    for name, op, extra in _ops(per_class, rows):
        want = op(z, t, *extra, ignore)
        args = [be.xp.asarray(a) for a in (z, t, *extra)]
        assert op.implementation(*args, ignore) is not op.array_code, name
        xp.counts.clear()
        got = op(*args, ignore)
        if be.xp is xp:
            assert xp.counts["calls"] <= 2, (name, xp.counts["calls"])
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        assert_agree(be.to_host(got), want, np.dtype(dtype).name, err_msg=name)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_nan_logits_and_strided_arguments(backend):
    be = device_backend(backend)
    z, t, per_class, rows = _draw(np.float64, seed=1)
    z[1, 2, 3, 4] = np.nan                          # a labelled or ignored pixel: as numpy
    z[2, 0, 1, 1] = np.nan
    t[2, 1, 1] = IGNORE
    with np.errstate(invalid="ignore"):
        for name, op, extra in _ops(per_class, rows):
            want = op(z, t, *extra, IGNORE)
            got = be.to_host(op(be.xp.asarray(z), be.xp.asarray(t), *(be.xp.asarray(a) for a in extra), IGNORE))
            assert np.array_equal(np.isnan(got), np.isnan(want)), name
            keep = ~np.isnan(want)
            assert_agree(got[keep], want[keep], "float64", err_msg=name)
    zt = be.xp.asarray(np.ascontiguousarray(z.transpose(1, 0, 2, 3))).transpose(1, 0, 2, 3)   # not C order
    td = be.xp.asarray(t)
    assert pixel_ce_grad.implementation(zt, td, be.xp.asarray(per_class[0]), IGNORE) is pixel_ce_grad.array_code
    with np.errstate(invalid="ignore"):      # NaN where numpy has NaN (assert_allclose: equal_nan)
        assert_agree(be.to_host(pixel_ce_grad(zt, td, be.xp.asarray(per_class[0]), IGNORE)),
                     pixel_ce_grad(z, t, per_class[0], IGNORE), "float64")
