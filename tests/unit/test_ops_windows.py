"""distnet.ops.windows: the patch view against a naive loop, and fold as its exact adjoint, on
every array backend (distnet/testing/backends.py), for images and for 1-D signals and 3-D
volumes."""
import itertools

import numpy as np
import pytest

from distnet.ops.windows import fold, from_cols, output_shape, patches, to_cols
from distnet.testing.backends import make_backend


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)

CASES = [  # (x shape, fshape, stride)
    ((1, 1, 5, 5), (3, 3), (1, 1)),
    ((2, 3, 7, 8), (3, 2), (2, 2)),
    ((2, 2, 9, 6), (2, 3), (2, 1)),
    ((3, 2, 10, 9), (4, 2), (3, 2)),   # windows do not tile the input exactly
    ((1, 2, 4, 6), (4, 1), (1, 3)),
]


def naive_patches(x, fshape, stride):
    B, C, H, W = x.shape
    (fh, fw), (sy, sx) = fshape, stride
    Ho, Wo = (H - fh) // sy + 1, (W - fw) // sx + 1
    p = np.zeros((B, C, Ho, Wo, fh, fw))
    for b in range(B):
        for c in range(C):
            for i in range(Ho):
                for j in range(Wo):
                    for u in range(fh):
                        for v in range(fw):
                            p[b, c, i, j, u, v] = x[b, c, i * sy + u, j * sx + v]
    return p


@pytest.mark.parametrize("shape,fshape,stride", CASES)
def test_patches_matches_loop(shape, fshape, stride, be):
    x = np.random.default_rng(0).standard_normal(shape)
    p = patches(be.asarray(x), fshape, stride)
    assert p.shape[2:4] == output_shape(shape[2:], fshape, stride)
    np.testing.assert_array_equal(be.to_host(p), naive_patches(x, fshape, stride))
    if be.name == "numpy":                 # cupy's as_strided has no read-only flag
        assert not p.flags.writeable


@pytest.mark.parametrize("shape,fshape,stride", CASES)
def test_fold_is_adjoint_of_patches(shape, fshape, stride, be):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    c = rng.standard_normal(patches(x, fshape, stride).shape)
    lhs = np.vdot(be.to_host(patches(be.asarray(x), fshape, stride)), c)
    rhs = np.vdot(x, be.to_host(fold(be.asarray(c), shape, stride)))
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_fold_zero_where_unread_and_out_reset(be):
    # 3x3 window, stride 3 on 7x8: row 6 and columns 6, 7 are read by no window.
    c = be.xp.ones((1, 1, 2, 2, 3, 3))
    out = be.xp.full((1, 1, 7, 8), 5.0)
    r = fold(c, (1, 1, 7, 8), (3, 3), out=out)
    assert r is out
    expected = np.zeros((7, 8))
    expected[:6, :6] = 1
    np.testing.assert_array_equal(be.to_host(r)[0, 0], expected)


def test_fold_overlaps_add(be):
    c = be.xp.ones((1, 1, 3, 3, 2, 2))
    r = be.to_host(fold(c, (1, 1, 4, 4), (1, 1)))[0, 0]
    np.testing.assert_array_equal(r, [[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]])


def test_output_shape():
    assert output_shape((28, 28), (5, 5), (1, 1)) == (24, 24)
    assert output_shape((10, 9), (4, 2), (3, 2)) == (3, 4)


# --- any number of spatial axes: 1-D signals and 3-D volumes as 2-D images -----------------------

ND_CASES = [  # (x shape, fshape, stride)
    ((2, 3, 11), (3,), (2,)),
    ((1, 2, 9), (4,), (1,)),
    ((2, 2, 6, 7, 5), (3, 2, 2), (1, 2, 2)),
    ((1, 3, 7, 5, 6), (2, 3, 3), (3, 1, 2)),   # windows do not tile the input exactly
]


def _windows(shape, fshape, stride):
    """Every (window, tap, input position) of a valid-window op, by plain loops."""
    out = [(n - f) // s + 1 for n, f, s in zip(shape[2:], fshape, stride)]
    for i in itertools.product(*map(range, out)):
        for u in itertools.product(*map(range, fshape)):
            yield i, u, tuple(a * s + b for a, s, b in zip(i, stride, u))


def naive_patches_nd(x, fshape, stride):
    p = np.zeros(x.shape[:2] + output_shape(x.shape[2:], fshape, stride) + tuple(fshape))
    for i, u, pos in _windows(x.shape, fshape, stride):
        p[(slice(None), slice(None)) + i + u] = x[(slice(None), slice(None)) + pos]
    return p


def naive_fold_nd(cols, x_shape, stride):
    nd = len(stride)
    out = np.zeros(x_shape)
    for i, u, pos in _windows(x_shape, cols.shape[2 + nd:], stride):
        out[(slice(None), slice(None)) + pos] += cols[(slice(None), slice(None)) + i + u]
    return out


@pytest.mark.parametrize("shape,fshape,stride", ND_CASES)
def test_nd_patches_match_loops(shape, fshape, stride, be):
    x = np.random.default_rng(2).standard_normal(shape)
    np.testing.assert_array_equal(be.to_host(patches(be.asarray(x), fshape, stride)),
                                  naive_patches_nd(x, fshape, stride))


@pytest.mark.parametrize("shape,fshape,stride", ND_CASES)
def test_nd_fold_matches_loops_and_is_the_adjoint(shape, fshape, stride, be):
    """On a device backend with kernels, the fold is the generated kernel of this many axes: it
    adds the taps in the array code's order, so it gives the numpy fold's bits."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    c = rng.standard_normal(patches(x, fshape, stride).shape)
    got = be.to_host(fold(be.asarray(c), shape, stride))
    np.testing.assert_allclose(got, naive_fold_nd(c, shape, stride), rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(got, fold(c, shape, stride))
    assert np.vdot(patches(x, fshape, stride), c) == pytest.approx(np.vdot(x, got), rel=1e-12)


@pytest.mark.parametrize("shape,fshape,stride", ND_CASES + CASES)
def test_the_im2col_order_and_back(shape, fshape, stride):
    """``to_cols``: patches as ``(C, *filter, *windows, B)``, the batch im2col matrix's rows
    (patch elements) and columns (positions, batch innermost); ``from_cols`` undoes it."""
    nd = len(stride)
    x = np.random.default_rng(4).standard_normal(shape)
    p = patches(x, fshape, stride)
    cols = p.transpose(to_cols(nd))
    B, C = shape[:2]
    for i, u, pos in _windows(shape, fshape, stride):
        assert np.array_equal(cols[(slice(None),) + u + i], x[(slice(None), slice(None)) + pos].T)
    np.testing.assert_array_equal(cols.transpose(from_cols(nd)), p)
    assert to_cols(2) == (1, 4, 5, 2, 3, 0) and from_cols(2) == (5, 0, 3, 4, 1, 2)
