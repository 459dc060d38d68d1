"""distnet.ops.pooling: max / average / L2 pooling against naive loops and central differences, on
every array backend (distnet/testing/backends.py): the op runs on the backend, results are compared
on the host; central differences use the numpy forward on the host."""
import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.ops.pooling import (avgpool_bprop, avgpool_fprop, l2pool_bprop, l2pool_fprop,
                                 maxpool_bprop, maxpool_fprop)
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad

CASES = [  # (x shape (B,C,H,W), fshape, stride)
    ((1, 1, 4, 4), (2, 2), (2, 2)),
    ((2, 3, 7, 8), (3, 2), (2, 2)),
    ((2, 2, 8, 6), (2, 3), (2, 1)),
    ((3, 2, 10, 9), (4, 2), (3, 2)),   # windows do not tile the input exactly
    ((1, 2, 6, 7), (3, 3), (1, 1)),    # heavy overlap
]


def windows(x, fshape, stride):
    """Yield (b, c, i, j, window (fh, fw)) for every output position, naively."""
    B, C, H, W = x.shape
    (fh, fw), (sy, sx) = fshape, stride
    for b in range(B):
        for c in range(C):
            for i in range((H - fh) // sy + 1):
                for j in range((W - fw) // sx + 1):
                    yield b, c, i, j, x[b, c, i * sy:i * sy + fh, j * sx:j * sx + fw]


def out_shape(shape, fshape, stride):
    return shape[:2] + ((shape[2] - fshape[0]) // stride[0] + 1, (shape[3] - fshape[1]) // stride[1] + 1)


def naive(x, fshape, stride, reduce):
    y = np.zeros(out_shape(x.shape, fshape, stride))
    for b, c, i, j, win in windows(x, fshape, stride):
        y[b, c, i, j] = reduce(win)
    return y


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def check_pool_grad(be, fprop, bprop, x, fshape, stride, seed=1):
    """``bprop`` (run on the backend with ``dy`` moved there) against central differences of
    ``fprop`` (numpy, on the host)."""
    dy = np.random.default_rng(seed).standard_normal(out_shape(x.shape, fshape, stride))
    dx = be.to_host(bprop(be.asarray(dy)))
    assert dx.shape == x.shape
    check_grad(lambda: float(np.vdot(fprop(x), dy)), x, dx)


# ----------------------------------------------------------------------------------------- max

@pytest.mark.parametrize("shape,fshape,stride", CASES)
def test_maxpool_forward_and_argmax(shape, fshape, stride, be):
    x = np.random.default_rng(0).standard_normal(shape)
    y, arg = maxpool_fprop(be.asarray(x), fshape, stride)
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(be.to_host(y), naive(x, fshape, stride, np.max))
    np.testing.assert_array_equal(be.to_host(arg), naive(x, fshape, stride, lambda w: np.argmax(w)))
    assert np.issubdtype(arg.dtype, np.integer) and arg.dtype.itemsize <= 4


def scatter_to_argmax(x, dy, fshape, stride):
    """The max-pooling gradient written out: each ``dy`` to its window's first maximum."""
    dx = np.zeros_like(x)
    for b, c, i, j, win in windows(x, fshape, stride):
        u, v = np.unravel_index(np.argmax(win), fshape)
        dx[b, c, i * stride[0] + u, j * stride[1] + v] += dy[b, c, i, j]
    return dx


@pytest.mark.parametrize("shape,fshape,stride", [((1, 2, 32, 34), (2, 2), (2, 2)),
                                                 ((2, 1, 33, 40), (3, 4), (3, 4))])
def test_maxpool_large_planes(shape, fshape, stride, be):
    """Planes of >= 1024 pixels with non-overlapping windows: the NCHW kernel (unread last
    rows / cols included; ties from rounding to a coarse grid)."""
    x = np.round(np.random.default_rng(9).standard_normal(shape) * 2) / 2
    y, arg = maxpool_fprop(be.asarray(x), fshape, stride)
    np.testing.assert_array_equal(be.to_host(y), naive(x, fshape, stride, np.max))
    np.testing.assert_array_equal(be.to_host(arg), naive(x, fshape, stride, lambda w: np.argmax(w)))
    dy = np.random.default_rng(10).standard_normal(y.shape)
    dx = be.to_host(maxpool_bprop(be.asarray(dy), arg, x.shape, fshape, stride))
    np.testing.assert_array_equal(dx, scatter_to_argmax(x, dy, fshape, stride))


@pytest.mark.parametrize("shape,fshape,stride", [((0, 2, 32, 34), (2, 2), (2, 2)), ((0, 2, 5, 6), (3, 3), (1, 2))],
                         ids=["nchw", "chwn"])
def test_maxpool_empty_batch(shape, fshape, stride, be):
    """No images (a data replica with no rows of a short last batch): empty outputs and
    gradients from both kernels (the NCHW one raised ValueError on its empty block list)."""
    x = np.zeros(shape)
    y, arg = maxpool_fprop(be.asarray(x), fshape, stride)
    assert y.shape == (0,) + naive(np.zeros((1,) + shape[1:]), fshape, stride, np.max).shape[1:]
    dx = maxpool_bprop(be.asarray(np.zeros(y.shape)), arg, x.shape, fshape, stride)
    assert dx.shape == shape


@pytest.mark.parametrize("shape,fshape,stride", CASES)
def test_maxpool_backward(shape, fshape, stride, be):
    x = np.random.default_rng(0).standard_normal(shape)   # distinct values: differentiable
    _, arg = maxpool_fprop(be.asarray(x), fshape, stride)
    check_pool_grad(be, lambda a: maxpool_fprop(a, fshape, stride)[0],
                    lambda dy: maxpool_bprop(dy, arg, x.shape, fshape, stride), x, fshape, stride)


def test_maxpool_ties_first_max_wins(be):
    # Integer values in a tiny range: many ties inside every window.
    x = np.random.default_rng(2).integers(0, 3, size=(2, 2, 7, 8)).astype(float)
    fshape, stride = (3, 2), (2, 1)
    y, arg = maxpool_fprop(be.asarray(x), fshape, stride)
    np.testing.assert_array_equal(be.to_host(arg), naive(x, fshape, stride, lambda w: np.argmax(w)))
    # Backward sends dy to the first maximum only; overlapping windows add up.
    dy = np.random.default_rng(3).standard_normal(y.shape)
    expected = scatter_to_argmax(x, dy, fshape, stride)
    dx = maxpool_bprop(be.asarray(dy), arg, x.shape, fshape, stride)
    np.testing.assert_allclose(be.to_host(dx), expected, rtol=1e-12)


def test_maxpool_all_equal_window_and_negative_values(be):
    x = np.full((1, 1, 2, 2), -1.0)
    y, arg = maxpool_fprop(be.asarray(x), (2, 2), (1, 1))
    y, arg_h = be.to_host(y), be.to_host(arg)
    assert y[0, 0, 0, 0] == -1 and arg_h[0, 0, 0, 0] == 0
    dx = maxpool_bprop(be.xp.ones((1, 1, 1, 1)), arg, x.shape, (2, 2), (1, 1))
    np.testing.assert_array_equal(be.to_host(dx)[0, 0], [[1, 0], [0, 0]])


def test_maxpool_large_window_index_dtype(be):
    x = np.random.default_rng(4).standard_normal((1, 1, 20, 20))
    y, arg = maxpool_fprop(be.asarray(x), (20, 20), (1, 1))
    assert arg.dtype == np.int32
    y, arg = be.to_host(y), be.to_host(arg)
    assert int(arg[0, 0, 0, 0]) == int(np.argmax(x)) and y[0, 0, 0, 0] == x.max()


# ------------------------------------------------------------------------------------- average

@pytest.mark.parametrize("shape,fshape,stride", CASES)
def test_avgpool(shape, fshape, stride, be):
    x = np.random.default_rng(0).standard_normal(shape)
    y = be.to_host(avgpool_fprop(be.asarray(x), fshape, stride))
    np.testing.assert_allclose(y, naive(x, fshape, stride, np.mean), rtol=1e-12, atol=1e-14)
    check_pool_grad(be, lambda a: avgpool_fprop(a, fshape, stride),
                    lambda dy: avgpool_bprop(dy, x.shape, fshape, stride), x, fshape, stride)


def test_avgpool_zero_padding_counts(be):
    x = np.zeros((1, 1, 3, 3))
    x[0, 0, 1, 1] = 9.0                    # as if a 1x1 image were padded by 1
    assert be.to_host(avgpool_fprop(be.asarray(x), (3, 3), (1, 1)))[0, 0, 0, 0] == 1.0


# ------------------------------------------------------------------------------------------ L2

@pytest.mark.parametrize("shape,fshape,stride", CASES)
def test_l2pool(shape, fshape, stride, be):
    x = np.random.default_rng(0).standard_normal(shape)
    xd = be.asarray(x)
    y = l2pool_fprop(xd, fshape, stride)
    np.testing.assert_allclose(be.to_host(y), naive(x, fshape, stride, lambda w: np.sqrt(np.sum(w * w))),
                               rtol=1e-12)
    check_pool_grad(be, lambda a: l2pool_fprop(a, fshape, stride),
                    lambda dy: l2pool_bprop(xd, y, dy, fshape, stride), x, fshape, stride)


def test_l2pool_zero_windows(be):
    # Zero rows/cols give all-zero windows (y == 0 exactly); others are mixed.
    x = np.random.default_rng(5).standard_normal((2, 2, 8, 7))
    x[:, :, :4, :] = 0
    x[1, 1] = 0
    fshape, stride = (2, 3), (2, 2)
    yd = l2pool_fprop(be.asarray(x), fshape, stride)
    y = be.to_host(yd)
    assert (y == 0).any()
    dy = np.random.default_rng(6).standard_normal(y.shape)
    dx = be.to_host(l2pool_bprop(be.asarray(x), yd, be.asarray(dy), fshape, stride))
    assert np.isfinite(dx).all()
    expected = np.zeros_like(x)            # neon's L2 pooling rule, written out
    for b, c, i, j, win in windows(x, fshape, stride):
        yhat = y[b, c, i, j] if y[b, c, i, j] != 0 else 1.0
        expected[b, c, i * 2:i * 2 + 2, j * 2:j * 2 + 3] += dy[b, c, i, j] * win / yhat
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-15)
    # sqrt(sum x^2) at an all-zero window has symmetric central differences (0): still matches.
    check_grad(lambda: float(np.vdot(l2pool_fprop(x, fshape, stride), dy)), x, dx)


# -------------------------------------------------------------------------------------- common

@pytest.mark.parametrize("fn", ["max", "avg", "l2"])
def test_float32_stays_float32(fn, be):
    x = be.asarray(np.random.default_rng(0).standard_normal((2, 2, 6, 6)), np.float32)
    fs, st = (2, 2), (2, 2)
    if fn == "max":
        y, arg = maxpool_fprop(x, fs, st)
        dx = maxpool_bprop(y, arg, x.shape, fs, st)
    elif fn == "avg":
        y = avgpool_fprop(x, fs, st)
        dx = avgpool_bprop(y, x.shape, fs, st)
    else:
        y = l2pool_fprop(x, fs, st)
        dx = l2pool_bprop(x, y, y, fs, st)
    assert y.dtype == dx.dtype == np.float32


def test_bad_geometry_raises(be):
    with pytest.raises(GeometryError):
        maxpool_fprop(be.xp.zeros((1, 1, 2, 2)), (3, 3), (1, 1))


def test_layouts_do_not_matter(be):
    # Non-contiguous input, and an argmax re-laid out by the caller: same results.
    base = np.random.default_rng(7).standard_normal((3, 4, 9, 8))
    x_h = base[:, ::2]
    x = be.asarray(base)[:, ::2]                       # (3, 2, 9, 8) view
    assert not x.flags.c_contiguous
    fs, st = (3, 2), (2, 2)
    y, arg = maxpool_fprop(x, fs, st)
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(be.to_host(y), naive(x_h, fs, st, np.max))
    dy = be.asarray(np.random.default_rng(8).standard_normal(y.shape))
    np.testing.assert_array_equal(be.to_host(maxpool_bprop(dy, arg, x.shape, fs, st)),
                                  be.to_host(maxpool_bprop(dy, be.xp.ascontiguousarray(arg), x.shape, fs, st)))
    for f, ref in ((avgpool_fprop, np.mean), (l2pool_fprop, lambda w: np.sqrt(np.sum(w * w)))):
        r = f(x, fs, st)
        assert r.flags.c_contiguous
        np.testing.assert_allclose(be.to_host(r), naive(x_h, fs, st, ref), rtol=1e-12)
    for dx in (avgpool_bprop(dy, x.shape, fs, st), l2pool_bprop(x, y, dy, fs, st)):
        assert dx.flags.c_contiguous and dx.shape == x.shape


# ------------------------------------------------------------------------ max pooling with padding

PADDED = [  # (x shape, fshape, stride, padding (py, px))
    ((2, 2, 7, 6), (3, 3), (2, 2), (1, 1)),
    ((1, 3, 5, 8), (2, 3), (1, 2), (1, 2)),
    ((2, 1, 6, 6), (2, 2), (2, 2), (1, 1)),
    ((1, 2, 4, 9), (3, 4), (3, 1), (2, 3)),
]


def naive_padded(x, fshape, stride, padding):
    """Pad with -inf, then the naive max and first-argmax of every window (values, argmax and the
    padded array)."""
    (py, px) = padding
    xp = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)), constant_values=-np.inf)
    return (naive(xp, fshape, stride, np.max), naive(xp, fshape, stride, lambda w: np.argmax(w)), xp)


@pytest.mark.parametrize("shape,fshape,stride,padding", PADDED)
def test_maxpool_padding_never_wins(shape, fshape, stride, padding, be):
    """A padded chunk with ``inside``: the padding is -inf, so on all-negative data every output
    is the max of the real values of its window (zero padding returned 0 at the border)."""
    x = np.random.default_rng(5).standard_normal(shape) - 10.0        # all negative
    (py, px) = padding
    chunk = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)))           # zero padding, as a layer gets it
    inside = (py, py + shape[2], px, px + shape[3])
    want_y, want_arg, xp_inf = naive_padded(x, fshape, stride, padding)
    assert (want_y < -5).all()
    y, arg = maxpool_fprop(be.asarray(chunk), fshape, stride, inside=inside)
    np.testing.assert_array_equal(be.to_host(y), want_y)
    np.testing.assert_array_equal(be.to_host(arg), want_arg)
    dy = np.random.default_rng(6).standard_normal(want_y.shape)
    dxc = be.to_host(maxpool_bprop(be.asarray(dy), arg, chunk.shape, fshape, stride))
    np.testing.assert_allclose(dxc, scatter_to_argmax(xp_inf, dy, fshape, stride), rtol=1e-12, atol=1e-15)
    border = np.ones(chunk.shape[2:], bool)
    border[py:py + shape[2], px:px + shape[3]] = False
    assert (dxc[:, :, border] == 0).all()                             # padding gets no gradient


def test_maxpool_padding_as_large_as_the_window_is_refused():
    x = np.zeros((1, 1, 6, 6))
    with pytest.raises(GeometryError, match="entirely in the padding"):
        maxpool_fprop(x, (2, 2), (2, 2), inside=(2, 4, 2, 4))


def test_inside_of_a_chunk():
    from distnet.geometry.partition import Box
    from distnet.ops.pooling import inside_of
    assert inside_of(Box(-1, 4, -2, 7), (10, 6)) == (1, 5, 2, 8)       # top-left padding, right edge
    assert inside_of(Box(3, 8, 1, 5), (10, 6)) == (0, 5, 0, 4)         # an interior chunk: all inside
