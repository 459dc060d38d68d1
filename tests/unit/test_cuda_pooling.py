"""The fused pooling kernels (distnet/ops/cuda/pooling.py) through the public ops of
distnet.ops.pooling, as the layers call them, on every device backend whose arrays take the kernels
(devicelike: their CUDA C run on the host, distnet/testing/cuda_emulator.py; cupy on a GPU): they
equal the numpy code bit for bit (float32 and float64, ties, NaNs, padding, any input layout), in
one launch per call whatever the window (counted on devicelike)."""
import shutil
import subprocess

import numpy as np
import pytest

import distnet.ops.cuda.launch
from distnet.errors import GeometryError
from distnet.ops.cuda import pooling as cuda_pooling
from distnet.ops.pooling import (avgpool_bprop, avgpool_fprop, l2pool_bprop, l2pool_fprop,
                                 maxpool_bprop, maxpool_fprop)
from distnet.ops.workspace import Workspace
from distnet.testing.backends import DEVICE_BACKENDS
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

GEOMETRIES = [  # (B, C, H, W, fh, fw, sy, sx)
    (2, 3, 7, 8, 3, 3, 1, 1),      # overlapping windows
    (3, 2, 9, 9, 2, 3, 2, 1),      # strides > 1, overlapping along one axis
    (1, 1, 5, 5, 5, 5, 1, 1),      # batch 1, one window: the whole image
    (4, 2, 10, 7, 3, 2, 3, 2),     # windows that do not tile: the last row and column unread
    (2, 2, 9, 9, 2, 2, 3, 3),      # stride > window: gaps between windows
    (2, 2, 32, 36, 2, 3, 2, 3),    # a large plane with disjoint windows (numpy: its NCHW path)
    (2, 1, 18, 17, 17, 16, 1, 1),  # 272-element windows: an int32 argmax
]
DTYPES = [np.float32, np.float64]
LAYOUTS = ["nchw", "chwn", "view"]


def ids(g):
    return "x".join(map(str, g))


@pytest.fixture(params=DEVICE_BACKENDS)
def dev(request):
    """The device array module under test (skips where its arrays take no kernels)."""
    return device_backend(request.param).xp


def assert_calls(dev, n):
    """``n`` device calls since the last ``xp.counts.clear()`` (devicelike counts them; cupy
    has no counter)."""
    if dev is xp:
        assert xp.counts["calls"] == n


def to_device(dev, a, layout="nchw"):
    """``a (B, C, H, W)`` on the device: NCHW, batch-innermost (CHWN) memory, or a strided view
    into a larger NaN-filled buffer (what a halo chunk or a cropped gradient looks like)."""
    if layout == "nchw":
        return dev.asarray(a)
    if layout == "chwn":
        return dev.asarray(np.ascontiguousarray(a.transpose(1, 2, 3, 0))).transpose(3, 0, 1, 2)
    B, C, H, W = a.shape
    big = dev.full((B, C + 1, H + 2, W + 3), np.nan, dtype=a.dtype)
    big[:, 1:, 1:H + 1, 2:W + 2] = dev.asarray(a)
    return big[:, 1:, 1:H + 1, 2:W + 2]


def host(a):
    return a.get()


def inputs(geom, dtype, ties=False, seed=0):
    """``x (B, C, H, W)`` and a ``dy`` of the output's shape. ``ties``: values from a small set
    of integers, so most windows hold their maximum more than once."""
    B, C, H, W, fh, fw, sy, sx = geom
    rng = np.random.default_rng(seed + sum(geom))
    x = rng.integers(-2, 3, (B, C, H, W)) if ties else rng.standard_normal((B, C, H, W))
    dy = rng.standard_normal((B, C, (H - fh) // sy + 1, (W - fw) // sx + 1))
    return x.astype(dtype), dy.astype(dtype)


def assert_bits(got, want):
    """Same dtype, shape and bits (signed zeros included), NaN where numpy has NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        real = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]))


# ----------------------------------------------------------------------------------------- max

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES, ids=ids)
def test_maxpool_equals_numpy_bit_for_bit(dev, geom, dtype, layout):
    x, dy = inputs(geom, dtype, ties=True)
    fshape, stride = geom[4:6], geom[6:]
    want_y, want_arg = maxpool_fprop(x, fshape, stride)
    want_dx = maxpool_bprop(dy, want_arg, x.shape, fshape, stride)
    x_dev, dy_dev = to_device(dev, x, layout), to_device(dev, dy, layout)
    xp.counts.clear()
    y, arg = maxpool_fprop(x_dev, fshape, stride)
    assert_calls(dev, 3)                        # y and argmax allocated, one launch
    xp.counts.clear()
    dx = maxpool_bprop(dy_dev, arg, x.shape, fshape, stride)
    assert_calls(dev, 2)                        # dx allocated, one launch
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    assert_bits(host(dx), want_dx)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", [GEOMETRIES[0], GEOMETRIES[3], GEOMETRIES[5]], ids=ids)
def test_maxpool_layer_call_writes_into_its_buffers_in_one_launch(dev, geom, dtype):
    """The layer's call: ``out``, ``work`` (scratch reused by the next call) and an ``out`` for
    the gradient; from the second step on, each direction is a single launch."""
    x, dy = inputs(geom, dtype, ties=True, seed=1)
    fshape, stride = geom[4:6], geom[6:]
    want_y, want_arg = maxpool_fprop(x, fshape, stride)
    want_dx = maxpool_bprop(dy, want_arg, x.shape, fshape, stride)
    work = Workspace()
    y, dx = dev.empty(want_y.shape, dtype=dtype), dev.empty(x.shape, dtype=dtype)
    x_dev, dy_dev = dev.asarray(x), dev.asarray(dy)
    for step in range(2):
        xp.counts.clear()
        ry, arg = maxpool_fprop(x_dev, fshape, stride, out=y, work=work,
                                inside=(0, x.shape[2], 0, x.shape[3]))
        rdx = maxpool_bprop(dy_dev, arg, x.shape, fshape, stride, out=dx, work=work)
        assert ry is y and rdx is dx
        assert_calls(dev, 3 if step == 0 else 2)    # the argmax is allocated once
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    assert_bits(host(dx), want_dx)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom,padding", [((2, 2, 6, 7, 3, 3, 2, 2), (1, 1)),
                                          ((1, 3, 5, 5, 2, 2, 2, 2), (1, 0)),
                                          ((3, 1, 8, 9, 3, 2, 1, 3), (2, 1)),
                                          ((2, 2, 31, 33, 2, 2, 2, 2), (1, 1))],
                         ids=ids)
def test_maxpool_padding_is_read_as_minus_inf(dev, geom, padding, dtype):
    """A zero-padded chunk with ``inside``: the kernel reads the padding as -inf (numpy writes
    -inf there first), so on all-negative data no padded position wins; ``x`` is not written."""
    B, C, H, W, fh, fw, sy, sx = geom
    (py, px), fshape, stride = padding, (fh, fw), (sy, sx)
    x = (np.random.default_rng(sum(geom)).standard_normal((B, C, H, W)) - 10).astype(dtype)
    chunk = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)))
    inside = (py, py + H, px, px + W)
    want_y, want_arg = maxpool_fprop(chunk.copy(), fshape, stride, inside=inside)
    dy = np.random.default_rng(1).standard_normal(want_y.shape).astype(dtype)
    want_dx = maxpool_bprop(dy, want_arg, chunk.shape, fshape, stride)
    chunk_dev = dev.asarray(chunk)
    xp.counts.clear()
    y, arg = maxpool_fprop(chunk_dev, fshape, stride, inside=inside)
    assert_calls(dev, 3)
    dx = maxpool_bprop(dev.asarray(dy), arg, chunk.shape, fshape, stride)
    assert (want_y < -5).all()
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    assert_bits(host(dx), want_dx)
    assert_bits(host(chunk_dev), chunk)


@pytest.mark.parametrize("geom", [GEOMETRIES[0], GEOMETRIES[1], GEOMETRIES[5]], ids=ids)
def test_maxpool_nan_as_numpy(dev, geom):
    """NaNs: the maximum of a window holding one is NaN, and its argmax is the index the numpy
    code reports (the first maximum before the NaN; on the large-plane path, row by row)."""
    x, dy = inputs(geom, np.float64, ties=True, seed=2)
    x[np.random.default_rng(3).random(x.shape) < 0.1] = np.nan
    fshape, stride = geom[4:6], geom[6:]
    want_y, want_arg = maxpool_fprop(x, fshape, stride)
    assert np.isnan(want_y).any() and not np.isnan(want_y).all()
    y, arg = maxpool_fprop(dev.asarray(x), fshape, stride)
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    want_dx = maxpool_bprop(dy, want_arg, x.shape, fshape, stride)
    assert_bits(host(maxpool_bprop(dev.asarray(dy), arg, x.shape, fshape, stride)), want_dx)


def test_maxpool_empty_batch(dev):
    x = dev.zeros((0, 2, 6, 6))
    y, arg = maxpool_fprop(x, (2, 2), (2, 2))
    assert y.shape == arg.shape == (0, 2, 3, 3)
    assert maxpool_bprop(dev.zeros((0, 2, 3, 3)), arg, x.shape, (2, 2), (2, 2)).shape == (0, 2, 6, 6)


# ------------------------------------------------------------------------------ average and L2

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES, ids=ids)
def test_avgpool_equals_numpy_bit_for_bit(dev, geom, dtype, layout):
    x, dy = inputs(geom, dtype)
    fshape, stride = geom[4:6], geom[6:]
    want_y = avgpool_fprop(x, fshape, stride)
    want_dx = avgpool_bprop(dy, x.shape, fshape, stride)
    x_dev, dy_dev = to_device(dev, x, layout), to_device(dev, dy, layout)
    xp.counts.clear()
    y = avgpool_fprop(x_dev, fshape, stride)
    dx = avgpool_bprop(dy_dev, x.shape, fshape, stride)
    assert_calls(dev, 4)                        # per direction: the result allocated, one launch
    assert_bits(host(y), want_y)
    assert_bits(host(dx), want_dx)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES, ids=ids)
def test_l2pool_equals_numpy_bit_for_bit(dev, geom, dtype, layout):
    x, dy = inputs(geom, dtype)
    x[:, :, :3, :4] = 0                         # all-zero windows: y == 0, no NaN gradient
    fshape, stride = geom[4:6], geom[6:]
    want_y = l2pool_fprop(x, fshape, stride)
    want_dx = l2pool_bprop(x, want_y, dy, fshape, stride)
    x_dev, dy_dev = to_device(dev, x, layout), to_device(dev, dy, layout)
    xp.counts.clear()
    y = l2pool_fprop(x_dev, fshape, stride)
    dx = l2pool_bprop(x_dev, y, dy_dev, fshape, stride)
    assert_calls(dev, 4)
    assert_bits(host(y), want_y)
    assert_bits(host(dx), want_dx)
    assert np.isfinite(host(dx)).all()


def test_l2pool_gradient_through_a_view_of_y(dev):
    """``y`` and ``dy`` as the kernel's caller may hold them: views of larger buffers."""
    geom = GEOMETRIES[1]
    x, dy = inputs(geom, np.float64)
    fshape, stride = geom[4:6], geom[6:]
    y = l2pool_fprop(x, fshape, stride)
    want = l2pool_bprop(x, y, dy, fshape, stride)
    got = l2pool_bprop(to_device(dev, x, "chwn"), to_device(dev, y, "view"),
                       to_device(dev, dy, "view"), fshape, stride)
    assert_bits(host(got), want)


# ---------------------------------------------------------------------------------- on a GPU

POOL_KERNELS = [*cuda_pooling.MAXPOOL_FPROP.values(), *cuda_pooling.MAXPOOL_BPROP.values(),
                cuda_pooling.AVGPOOL_FPROP, cuda_pooling.AVGPOOL_BPROP,
                cuda_pooling.L2POOL_FPROP, cuda_pooling.L2POOL_BPROP]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler (nvcc)")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", POOL_KERNELS, ids=lambda k: k.name)
def test_gpu_code_rounds_as_numpy(kernel, dtype, tmp_path):
    """Bit equality on a GPU needs every operation rounded as on the host: with the kernels'
    compile options, no product fused into a multiply-add, and correctly rounded division and
    square root."""
    cu = tmp_path / "k.cu"
    cu.write_text(kernel.source_for(dtype))
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", *distnet.ops.cuda.launch.COMPILE_OPTIONS,
                        str(cu), "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    assert "fma." not in ptx and "div.approx" not in ptx and "sqrt.approx" not in ptx
    assert kernel is not cuda_pooling.L2POOL_FPROP or "sqrt.rn" in ptx


# ------------------------------------------------------------------------------------ bad input

def test_wrong_shapes_are_refused_before_a_launch(dev):
    """A kernel reads raw memory: a gradient, argmax or output of the wrong shape is a
    GeometryError naming it, not a read past the end of an array."""
    x = dev.zeros((2, 3, 6, 6))
    y, arg = maxpool_fprop(x, (2, 2), (2, 2))
    with pytest.raises(GeometryError, match=r"dy has shape \(2, 3, 2, 3\), expected \(2, 3, 3, 3\)"):
        maxpool_bprop(dev.zeros((2, 3, 2, 3)), arg, x.shape, (2, 2), (2, 2))
    with pytest.raises(GeometryError, match="argmax has shape"):
        maxpool_bprop(dev.zeros((2, 3, 3, 3)), arg[:, :2], x.shape, (2, 2), (2, 2))
    with pytest.raises(GeometryError, match="out has shape"):
        maxpool_fprop(x, (2, 2), (2, 2), out=dev.zeros((2, 3, 3, 2)))
    with pytest.raises(GeometryError, match="dy has shape"):
        avgpool_bprop(dev.zeros((2, 3, 3, 4)), x.shape, (2, 2), (2, 2))
    with pytest.raises(GeometryError, match="y has shape"):
        l2pool_bprop(x, dev.zeros((2, 3, 3, 2)), dev.zeros((2, 3, 3, 3)), (2, 2), (2, 2))
    with pytest.raises(GeometryError, match="gives no output"):
        l2pool_fprop(x, (7, 2), (1, 1))


def test_padding_as_large_as_the_window_is_refused_on_a_device(dev):
    with pytest.raises(GeometryError, match="entirely in the padding"):
        maxpool_fprop(dev.zeros((1, 1, 6, 6)), (2, 2), (2, 2), inside=(2, 4, 2, 4))


def test_with_the_kernels_off_the_array_module_code_runs(dev, monkeypatch):
    """``DISTNET_CUDA_KERNELS=0`` (or devicelike without a C++ compiler): the generic
    array-module code runs instead, with the same numbers in more calls."""
    monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
    geom = GEOMETRIES[3]
    x, dy = inputs(geom, np.float64, ties=True)
    fshape, stride = geom[4:6], geom[6:]
    want_y, want_arg = maxpool_fprop(x, fshape, stride)
    x_dev, dy_dev = dev.asarray(x), dev.asarray(dy)
    xp.counts.clear()
    y, arg = maxpool_fprop(x_dev, fshape, stride)
    if dev is xp:
        assert xp.counts["calls"] > 3 * fshape[0] * fshape[1]      # a few per window offset
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    assert_bits(host(maxpool_bprop(dy_dev, arg, x.shape, fshape, stride)),
                maxpool_bprop(dy, want_arg, x.shape, fshape, stride))
    close = dict(rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(host(avgpool_fprop(x_dev, fshape, stride)),
                               avgpool_fprop(x, fshape, stride), **close)
    np.testing.assert_allclose(host(avgpool_bprop(dy_dev, x.shape, fshape, stride)),
                               avgpool_bprop(dy, x.shape, fshape, stride), **close)
    y, y_dev = l2pool_fprop(x, fshape, stride), l2pool_fprop(x_dev, fshape, stride)
    np.testing.assert_allclose(host(y_dev), y, **close)
    np.testing.assert_allclose(host(l2pool_bprop(x_dev, y_dev, dy_dev, fshape, stride)),
                               l2pool_bprop(x, y, dy, fshape, stride), **close)
