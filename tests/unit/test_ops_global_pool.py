"""distnet.ops.global_pool: the mean over pixels, its gradient (central differences), and tiles:
partial sums added over tiles / global pixel count == the whole image's result."""
import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.ops.global_pool import (gap_bprop, gap_finish, gap_partial, global_avg_pool_bprop,
                                     global_avg_pool_fprop)
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def test_forward_backward(be):
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3))
    y = global_avg_pool_fprop(be.asarray(x))
    np.testing.assert_allclose(be.to_host(y), x.mean(axis=(2, 3)), rtol=1e-13)
    dx = be.to_host(global_avg_pool_bprop(be.asarray(dy), x.shape))
    check_grad(lambda: float(np.vdot(x.mean(axis=(2, 3)), dy)), x, dx)


@pytest.mark.parametrize("rows,cols", [(1, 2), (2, 1), (2, 2), (3, 3), (2, 3)])
def test_tiles_sum_to_whole(rows, cols, be):
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((2, 3, 7, 8)), rng.standard_normal((2, 3))
    H, W = x.shape[2:]
    ys, xs = np.linspace(0, H, rows + 1).astype(int), np.linspace(0, W, cols + 1).astype(int)
    tiles = [(slice(a, b), slice(c, d)) for a, b in zip(ys[:-1], ys[1:]) for c, d in zip(xs[:-1], xs[1:])]
    s = sum(be.to_host(gap_partial(be.asarray(x[:, :, ty, tx]))) for ty, tx in tiles)
    y = be.to_host(gap_finish(be.asarray(s), H * W))
    np.testing.assert_allclose(y, be.to_host(global_avg_pool_fprop(be.asarray(x))), rtol=1e-13)
    whole = be.to_host(global_avg_pool_bprop(be.asarray(dy), x.shape))
    for ty, tx in tiles:
        h, w = ty.stop - ty.start, tx.stop - tx.start
        np.testing.assert_array_equal(be.to_host(gap_bprop(be.asarray(dy), (h, w), H * W)), whole[:, :, ty, tx])


def test_float64_accumulation_and_errors(be):
    x = be.asarray(np.ones((1, 2, 3, 3)), np.float32)
    assert gap_partial(x).dtype == np.float32
    assert gap_partial(x, dtype="float64").dtype == np.float64
    assert gap_finish(gap_partial(x, dtype="float64"), 9, dtype="float32").dtype == np.float32
    with pytest.raises(GeometryError):
        gap_partial(be.asarray(np.ones((2, 3))))
