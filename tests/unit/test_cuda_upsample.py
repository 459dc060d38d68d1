"""The fused upsampling kernels (distnet/ops/cuda/upsample.py) through the ops of
distnet.ops.decoder, on every device backend whose arrays take the kernels (devicelike: their
CUDA C run on the host; cupy on a GPU): nearest and linear, forward and backward, 1, 2 and 3
spatial axes, whole inputs and a rank's section of them, inputs read through their strides; equal
to the numpy code bit for bit (float32 and float64), one launch per call. The transposed
convolution's device path (a GEMM and the fold kernel) agrees with numpy to AGREEMENT."""
import itertools

import numpy as np
import pytest

from distnet.geometry import LinearUpsample, NearestUpsample, TransposedWindow, plan_halo
from distnet.ops.decoder import (Section, conv_transpose_bprop, conv_transpose_fprop, linear_bprop,
                                 linear_fprop, nearest_bprop, nearest_fprop)
from distnet.testing.backends import AGREEMENT, DEVICE_BACKENDS
from distnet.testing.devicelike import xp
from tests.decoder_oracles import chunk_of
from tests.unit.test_cuda_kernels import device_backend
from tests.unit.test_cuda_pooling import assert_bits, assert_calls

MODES = {"nearest": (nearest_fprop, nearest_bprop, lambda f, n: NearestUpsample(f)),
         "linear": (linear_fprop, linear_bprop, LinearUpsample)}
CASES = [((2, 3, 7), (2,)), ((1, 2, 5), (3,)), ((2, 3, 5, 4), (2, 2)), ((2, 2, 3, 5), (3, 2)),
         ((1, 2, 4, 3, 5), (2, 2, 2)), ((2, 1, 3, 2, 4), (1, 3, 2))]


@pytest.fixture(params=DEVICE_BACKENDS)
def dev(request):
    return device_backend(request.param).xp


def ids(case):
    return "x".join(map(str, case[0])) + "-f" + "x".join(map(str, case[1]))


def view_of(dev, a):
    """``a`` on the device as a strided view into a larger NaN-filled buffer (a chunk)."""
    big = dev.full(tuple(n + 2 for n in a.shape), np.nan, dtype=a.dtype)
    inner = tuple(slice(1, 1 + n) for n in a.shape)
    big[inner] = dev.asarray(a)
    return big[inner]


def sections(shape, factor, mode):
    """The whole computation (None), then every rank's section on a grid of 2 along every axis
    that has at least 2 inputs: ``(chunk box or None, section)``."""
    yield None, None
    n = shape[2:]
    grid = tuple(2 if a >= 2 else 1 for a in n)
    rules = [MODES[mode][2](f, a) for f, a in zip(factor, n)]
    for coords in itertools.product(*map(range, grid)):
        plan = plan_halo(n, *rules, grid, coords)
        yield plan.chunk, Section.of_plan(plan)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_upsampling_kernels_equal_numpy_bit_for_bit(dev, case, mode, dtype):
    shape, factor = case
    fprop, bprop = MODES[mode][:2]
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    for chunk, section in sections(shape, factor, mode):
        xc = x if chunk is None else x[(Ellipsis,) + tuple(slice(a, b) for a, b in chunk.spans)]
        want = fprop(xc, factor, section)
        g = rng.standard_normal(want.shape).astype(dtype)
        want_dx = bprop(g, factor, xc.shape, section)
        x_dev, g_dev = view_of(dev, xc), view_of(dev, g)
        assert fprop.implementation(x_dev, factor, section) is not fprop.array_code
        xp.counts.clear()
        y = fprop(x_dev, factor, section)
        assert_calls(dev, 2)                    # the output allocated, one launch
        xp.counts.clear()
        dx = bprop(g_dev, factor, xc.shape, section)
        assert_calls(dev, 2)
        assert_bits(y.get(), want)
        assert_bits(dx.get(), want_dx)


@pytest.mark.parametrize("mode", list(MODES))
def test_device_array_code_agrees(mode, monkeypatch):
    """With the kernels off, the device runs the array code (a device forms the linear
    adjoint's sums as a product with the interpolation matrix): it agrees with numpy."""
    monkeypatch.setattr("distnet.ops.cuda.launch.ENABLED", False)
    fprop, bprop = MODES[mode][:2]
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 3))
    g = np.random.default_rng(2).standard_normal((2, 2, 10, 9))
    np.testing.assert_allclose(fprop(xp.asarray(x), (2, 3)).get(), fprop(x, (2, 3)), **AGREEMENT["float64"])
    np.testing.assert_allclose(bprop(xp.asarray(g), (2, 3), x.shape).get(), bprop(g, (2, 3), x.shape),
                               **AGREEMENT["float64"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_transposed_conv_on_a_device_agrees_with_numpy(dev, nd, dtype):
    rng = np.random.default_rng(nd)
    n, f, s = (5, 4, 3)[:nd], (3, 2, 3)[:nd], (2, 3, 1)[:nd]
    pads, op = ((1, 1),) * nd, tuple(min(1, st - 1) for st in s)
    x = rng.standard_normal((2, 3) + n).astype(dtype)
    w = rng.standard_normal((3, 2) + f).astype(dtype)
    rules = [TransposedWindow(k, st, 1, 1, o) for k, st, o in zip(f, s, op)]
    plan = plan_halo(n, *rules, (2,) + (1,) * (nd - 1), (1,) + (0,) * (nd - 1))
    for xc, section in ((x, None), (chunk_of(x, plan.chunk), Section.of_plan(plan))):
        y = conv_transpose_fprop(xc, w, s, pads, op, section)
        g = rng.standard_normal(y.shape).astype(dtype)
        dx, dw = conv_transpose_bprop(xc, w, g, s, pads, op, section)
        got = conv_transpose_fprop(dev.asarray(xc), dev.asarray(w), s, pads, op, section)
        gdx, gdw = conv_transpose_bprop(dev.asarray(xc), dev.asarray(w), dev.asarray(g), s, pads, op, section)
        for a, b in ((got, y), (gdx, dx), (gdw, dw)):
            np.testing.assert_allclose(a.get(), b, **AGREEMENT[dtype])
