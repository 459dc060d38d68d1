"""The large-image kernels (hK2, issue 18) against naive loops: NCHW max pooling on blocks of
channels (several blocks per image, shared over kernel threads, ties everywhere) and the
flat-shift convolution's tile loop."""
import numpy as np
import pytest

from distnet.ops import parallel, pooling
from distnet.ops.workspace import Workspace


@pytest.fixture
def threads(monkeypatch):
    """Set the kernel thread count (skips n > 1 where threadpoolctl finds no BLAS)."""
    parallel.kernel_threads()

    def set_threads(n):
        if n > 1 and not parallel._state["blas"]:
            pytest.skip("no BLAS library found by threadpoolctl: kernel threading is off")
        monkeypatch.setitem(parallel._state, "threads", n)
    return set_threads


def naive_maxpool(x, f):
    (fh, fw) = f
    B, C, H, W = x.shape
    Ho, Wo = H // fh, W // fw
    y = np.empty((B, C, Ho, Wo), x.dtype)
    arg = np.empty((B, C, Ho, Wo), np.int64)
    for b in range(B):
        for c in range(C):
            for i in range(Ho):
                for j in range(Wo):
                    win = x[b, c, i * fh:(i + 1) * fh, j * fw:(j + 1) * fw]
                    arg[b, c, i, j] = np.argmax(win)      # the first maximum, row-major
                    y[b, c, i, j] = win.max()
    return y, arg


@pytest.mark.parametrize("shape,f", [((3, 5, 32, 34), (2, 2)), ((2, 3, 33, 40), (3, 4)),
                                     ((1, 4, 36, 33), (1, 3)), ((2, 2, 35, 32), (4, 1))])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_nchw_maxpool_blocks(shape, f, n_threads, threads, monkeypatch):
    monkeypatch.setattr(pooling, "NCHW_MIN_PLANE", 0)
    monkeypatch.setattr(pooling, "NCHW_BLOCK_BYTES", 2 * shape[2] * shape[3] * 8)  # 2 channels a block
    threads(n_threads)
    rng = np.random.default_rng(11)
    x = np.maximum(rng.integers(-2, 3, size=shape), 0).astype(np.float64)   # ties in every window
    y, arg = pooling.maxpool_fprop(x, f, f, work=Workspace())
    ry, rarg = naive_maxpool(x, f)
    np.testing.assert_array_equal(y, ry)
    np.testing.assert_array_equal(np.asarray(arg), rarg)
    dy = rng.standard_normal(y.shape)
    dx = pooling.maxpool_bprop(dy, arg, x.shape, f, f, work=Workspace())
    ref = np.zeros_like(x)
    fh, fw = f
    for b, c, i, j in np.ndindex(*y.shape):
        u, v = divmod(int(rarg[b, c, i, j]), fw)
        ref[b, c, i * fh + u, j * fw + v] = dy[b, c, i, j]
    np.testing.assert_array_equal(dx, ref)


def test_nchw_maxpool_nan_propagates():
    x = np.zeros((1, 1, 32, 32), np.float32)
    x[0, 0, 1, 0] = np.nan
    x[0, 0, 0, 1] = 5
    y, arg = pooling.maxpool_fprop(x, (2, 2), (2, 2), work=Workspace())
    assert np.isnan(y[0, 0, 0, 0]) and int(arg[0, 0, 0, 0]) == 1    # as numpy's maximum / greater
    assert (y[0, 0, 1:, :] == 0).all() and (np.asarray(arg)[0, 0, 1:, :] == 0).all()
