"""The small-image kernels in batch-innermost (CHWN) memory: the batch im2col conv and
max pooling give the same numbers whatever the layout of their inputs and outputs (NCHW or CHWN
memory, both indexed (B, C, H, W)), whatever the tile size of the tiled conv (one output row per
tile up to the whole batch at once), with one kernel thread or several, and on an empty batch.
The layers hand CHWN arrays on only where the kernels want them."""
import numpy as np
import pytest

from distnet.ops import conv, parallel, pooling
from distnet.ops.conv import tiled
from distnet.ops.workspace import Workspace
from tests.unit.test_ops_conv_cases import reference


def chwn(a):
    """``a`` copied into (C, H, W, B) memory, still indexed (B, C, H, W)."""
    out = conv.empty_chwn(a.shape, a.dtype)
    out[...] = a
    return out


CASES = [  # x shape, K, fshape, stride, pad
    ((6, 3, 12, 12), 5, (5, 5), (1, 1), None),
    ((5, 2, 9, 11), 4, (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((7, 1, 10, 10), 3, (3, 2), (1, 2), ((0, 1), (2, 0))),
]


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request, monkeypatch):
    parallel._probe()
    monkeypatch.setitem(parallel._state, "threads", request.param if parallel._state["blas"] else 1)
    return request.param


@pytest.mark.parametrize("shape,K,fshape,stride,pad", CASES)
@pytest.mark.parametrize("tile", [1, 1 << 30], ids=["row-tiles", "one-tile"])
def test_conv_layouts_and_tiles(shape, K, fshape, stride, pad, tile, threads, monkeypatch):
    monkeypatch.setattr(tiled, "SMALL_TILE_BYTES", tile)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(shape), rng.standard_normal((K, shape[1]) + fshape)
    want = reference(x, w, stride, pad or ((0, 0), (0, 0)))
    dy = rng.standard_normal(want.shape)
    ref_dx, ref_dw = conv.conv2d_bprop(x, w, dy, stride, pad=pad, method="im2col")
    for xin, dyin in ((x, dy), (chwn(x), chwn(dy))):
        for out in (np.empty(want.shape), conv.empty_chwn(want.shape, x.dtype)):
            y = conv.conv2d_fprop(xin, w, stride, out=out, pad=pad, work=Workspace())
            assert y is out
            np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
        for dx_out in (np.empty(x.shape), conv.empty_chwn(x.shape, x.dtype)):
            dx, dw = conv.conv2d_bprop(xin, w, dyin, stride, pad=pad, dx_out=dx_out, work=Workspace())
            assert dx is dx_out
            np.testing.assert_allclose(dx, ref_dx, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(dw, ref_dw, rtol=1e-12, atol=1e-12)


def test_conv_dx_fold_order_does_not_depend_on_the_tiles(monkeypatch):
    """dx pixels add their window terms in the (u, v) order of the untiled fold: with the same
    dcols (float64 GEMMs of the same inner length), row tiles and one tile agree to rounding of
    the GEMM alone."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((4, 3, 10, 10)), rng.standard_normal((2, 3, 5, 5))
    dy = rng.standard_normal((4, 2, 6, 6))
    got = []
    for tile in (1, 1 << 30):
        monkeypatch.setattr(tiled, "SMALL_TILE_BYTES", tile)
        got.append(conv.conv2d_bprop(x, w, dy, (1, 1), method="im2col"))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-13, atol=1e-13)


def test_conv_and_pool_on_an_empty_batch():
    x, w = np.zeros((0, 3, 10, 10), np.float32), np.ones((4, 3, 3, 3), np.float32)
    y = conv.conv2d_fprop(x, w, (1, 1), method="im2col")
    dx, dw = conv.conv2d_bprop(x, w, np.zeros(y.shape, np.float32), (1, 1), method="im2col")
    assert y.shape == (0, 4, 8, 8) and dx.shape == x.shape and dw.shape == w.shape
    assert not dw.any()
    yp, am = pooling.maxpool_fprop(x, (2, 2), (2, 2))
    assert pooling.maxpool_bprop(yp, am, x.shape, (2, 2), (2, 2)).shape == x.shape


@pytest.mark.parametrize("fshape,stride", [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((2, 2), (3, 3)), ((3, 2), (1, 1))])
def test_maxpool_layouts(fshape, stride, threads):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 4, 11, 10))
    x[:, :, ::3, ::2] = 0.5              # ties: the first maximum wins in every layout
    y_ref, am_ref = pooling.maxpool_fprop(x.copy(), fshape, stride)
    dy = rng.standard_normal(y_ref.shape)
    dx_ref = pooling.maxpool_bprop(dy, am_ref, x.shape, fshape, stride)
    for xin, dyin in ((x, dy), (chwn(x), chwn(dy))):
        for out in (np.empty(y_ref.shape), conv.empty_chwn(y_ref.shape, x.dtype)):
            y, am = pooling.maxpool_fprop(xin, fshape, stride, out=out, work=Workspace())
            assert y is out
            np.testing.assert_array_equal(y, y_ref)
            np.testing.assert_array_equal(am, am_ref)
            for dx_out in (np.empty(x.shape), conv.empty_chwn(x.shape, x.dtype)):
                dx = pooling.maxpool_bprop(dyin, am, x.shape, fshape, stride, out=dx_out, work=Workspace())
                assert dx is dx_out
                np.testing.assert_array_equal(dx, dx_ref)


def test_which_kernels_want_chwn():
    assert conv.output_chwn((100, 20, 12, 12), (50, 20, 5, 5), (1, 1), np)          # mnist conv2
    assert not conv.output_chwn((16, 3, 256, 256), (32, 3, 3, 3), (1, 1), np)       # flat-shift
    assert not conv.output_chwn((4, 8, 10, 10), (6, 8, 1, 1), (1, 1), np)           # pointwise
    assert pooling.output_chwn((100, 20, 24, 24), (2, 2), (2, 2), np)
    assert not pooling.output_chwn((16, 32, 256, 256), (2, 2), (2, 2), np)          # NCHW pooling
