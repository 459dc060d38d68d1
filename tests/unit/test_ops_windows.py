"""distnet.ops.windows: the patch view against a naive loop, and fold as its exact adjoint, on
every array backend (distnet/testing/backends.py)."""
import numpy as np
import pytest

from distnet.ops.windows import fold, output_shape, patches
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
