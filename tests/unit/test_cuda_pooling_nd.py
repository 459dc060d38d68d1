"""The pooling kernels of lines and volumes (distnet/ops/cuda/pooling_nd.py) through the public
ops of distnet.ops.pooling on every device backend whose arrays take kernels: bit for bit the
numpy code (float32 and float64, ties, NaNs, padding read as -inf, NCDHW and batch-innermost
memory), one launch per call."""
import numpy as np
import pytest

from distnet.ops.layout import chwn_order, from_chwn
from distnet.ops.pooling import (avgpool_bprop, avgpool_fprop, l2pool_bprop, l2pool_fprop,
                                 maxpool_bprop, maxpool_fprop)
from distnet.ops.windows import output_shape
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_pooling import assert_bits, assert_calls, dev, host  # noqa: F401 - dev: a fixture

GEOMETRIES = [  # (x shape, fshape, stride)
    ((2, 3, 5, 6, 7), (2, 3, 2), (1, 2, 1)),       # overlapping windows on some axes
    ((3, 2, 4, 4, 6), (2, 2, 2), (2, 2, 2)),       # disjoint windows tiling the volume
    ((1, 2, 7, 5, 5), (3, 1, 2), (3, 2, 3)),       # gaps between windows, the last planes unread
    ((2, 1, 7, 7, 7), (7, 6, 7), (1, 1, 1)),       # 294-element windows: an int32 argmax
    ((2, 3, 11), (3,), (2,)),                      # lines
]
DTYPES = [np.float32, np.float64]


def ids(g):
    return "-".join("x".join(map(str, part)) for part in g)


def _device(dev, a, layout):
    if layout == "ncdhw":
        return dev.asarray(a)
    return dev.asarray(np.ascontiguousarray(a.transpose(chwn_order(a.ndim)))).transpose(from_chwn(a.ndim))


def _inputs(geom, dtype, ties, seed=0):
    shape, fshape, stride = geom
    rng = np.random.default_rng(seed + sum(shape))
    x = rng.integers(-2, 3, shape) if ties else rng.standard_normal(shape)
    dy = rng.standard_normal(shape[:2] + output_shape(shape[2:], fshape, stride))
    return x.astype(dtype), dy.astype(dtype)


@pytest.mark.parametrize("layout", ["ncdhw", "batch-innermost"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES, ids=ids)
def test_pooling_equals_numpy_bit_for_bit(dev, geom, dtype, layout):
    _, fshape, stride = geom
    x, dy = _inputs(geom, dtype, ties=True)
    want_y, want_arg = maxpool_fprop(x, fshape, stride)
    want_dx = maxpool_bprop(dy, want_arg, x.shape, fshape, stride)
    xd, dyd = _device(dev, x, layout), _device(dev, dy, layout)
    xp.counts.clear()
    y, arg = maxpool_fprop(xd, fshape, stride)
    assert_calls(dev, 3)                        # y and argmax allocated, one launch
    dx = maxpool_bprop(dyd, arg, x.shape, fshape, stride)
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    assert_bits(host(dx), want_dx)
    x, dy = _inputs(geom, dtype, ties=False, seed=1)
    xd, dyd = _device(dev, x, layout), _device(dev, dy, layout)
    xp.counts.clear()
    ya = avgpool_fprop(xd, fshape, stride)
    assert_calls(dev, 2)                        # the result allocated, one launch
    assert_bits(host(ya), avgpool_fprop(x, fshape, stride))
    assert_bits(host(avgpool_bprop(dyd, x.shape, fshape, stride)), avgpool_bprop(dy, x.shape, fshape, stride))
    y2 = l2pool_fprop(x, fshape, stride)
    yd = l2pool_fprop(xd, fshape, stride)
    assert_bits(host(yd), y2)
    assert_bits(host(l2pool_bprop(xd, yd, dyd, fshape, stride)), l2pool_bprop(x, y2, dy, fshape, stride))


@pytest.mark.parametrize("dtype", DTYPES)
def test_maxpool_padding_and_nans_of_a_volume(dev, dtype):
    """A zero-padded chunk with ``inside`` (read as -inf: no padded position wins on negative
    data; ``x`` is not written), and NaNs reported where numpy reports them."""
    x = (np.random.default_rng(5).standard_normal((2, 2, 5, 4, 6)) - 10).astype(dtype)
    x[np.random.default_rng(6).random(x.shape) < 0.1] = np.nan
    pad = ((0, 0), (0, 0), (1, 1), (0, 0), (1, 1))
    chunk = np.pad(x, pad)
    inside = (1, 6, 0, 4, 1, 7)
    fshape, stride = (2, 2, 3), (2, 1, 2)
    want_y, want_arg = maxpool_fprop(chunk.copy(), fshape, stride, inside=inside)
    dy = np.random.default_rng(1).standard_normal(want_y.shape).astype(dtype)
    want_dx = maxpool_bprop(dy, want_arg, chunk.shape, fshape, stride)
    chunk_dev = dev.asarray(chunk)
    y, arg = maxpool_fprop(chunk_dev, fshape, stride, inside=inside)
    assert np.isnan(want_y).any() and (want_y[~np.isnan(want_y)] < -5).all()
    assert_bits(host(y), want_y)
    assert_bits(host(arg), np.asarray(want_arg))
    assert_bits(host(maxpool_bprop(dev.asarray(dy), arg, chunk.shape, fshape, stride)), want_dx)
    assert_bits(host(chunk_dev), chunk)
