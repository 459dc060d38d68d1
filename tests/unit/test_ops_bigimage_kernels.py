"""The large-image kernels against naive loops: NCHW max pooling on blocks of
channels (several blocks per image, shared over kernel threads, ties everywhere) and the
flat-shift convolution's tile loop."""
import numpy as np
import pytest

from distnet.ops import maxpool_nchw, parallel, pooling
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
    monkeypatch.setattr(maxpool_nchw, "NCHW_BLOCK_BYTES", 2 * shape[2] * shape[3] * 8)  # 2 channels a block
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


FLAT_CASES = [  # (B, C, H, W, K, fh, fw, pad)
    (2, 3, 9, 30, 4, 3, 3, 1), (3, 2, 7, 26, 5, 5, 4, 0), (1, 4, 5, 25, 2, 1, 1, 0),
    (2, 5, 6, 40, 3, 2, 5, 2), (3, 6, 11, 33, 7, 3, 3, 1)]


@pytest.mark.parametrize("case", FLAT_CASES)
@pytest.mark.parametrize("layout", ["shifts", "full"])
@pytest.mark.parametrize("tile_bytes", [200, 4000, 1 << 20])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_flat_layouts_match_im2col(case, layout, tile_bytes, n_threads, threads, monkeypatch):
    """Both tile im2col layouts of the flat-shift kernel (shifted rows read in place per filter
    row, or the full tile im2col), every tile height (one output row per tile, a few, the whole
    image), 1 and 2 kernel threads: forward (with and without the fused ReLU), weight gradient
    and data gradient with every crop, float64, against the batch-im2col kernel."""
    from distnet.ops import conv
    monkeypatch.setattr(conv.flat, "SHIFT_MIN_INNER", 0 if layout == "shifts" else 10 ** 9)
    monkeypatch.setattr(conv.flat, "SHIFT_MIN_PER_OUTPUT", 0)
    monkeypatch.setattr(conv.flat, "TILE_BYTES", tile_bytes)
    threads(n_threads)
    B, C, H, W, K, fh, fw, p = case
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((B, C, H, W)), rng.standard_normal((K, C, fh, fw))
    pad = ((p, p), (p, p)) if p else None
    ws = Workspace()
    for _ in range(2):   # the second pass reuses the workspace buffers
        y = conv.conv2d_fprop(x, w, (1, 1), method="im2col", pad=pad)
        np.testing.assert_allclose(conv.conv2d_fprop(x, w, (1, 1), method="flat", work=ws, pad=pad), y,
                                   rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(conv.conv2d_fprop(x, w, (1, 1), method="flat", relu=True, work=ws, pad=pad),
                                   np.maximum(y, 0), rtol=1e-13, atol=1e-13)
        dy = rng.standard_normal(y.shape)
        for crop in [None, ((1, 0), (0, min(2, fw - 1))), ((fh - 1, fh - 1), (fw - 1, fw - 1)), ((fh, 0), (0, 0))]:
            Hp, Wp = H + 2 * p, W + 2 * p
            if crop is not None and (sum(crop[0]) >= Hp or sum(crop[1]) >= Wp):
                continue
            if pad is not None and crop is not None:
                continue     # with pad, the crop is the pad (the one-process layer's case)
            a = conv.conv2d_bprop(x, w, dy, (1, 1), crop=crop, method="im2col", pad=pad)
            b = conv.conv2d_bprop(x, w, dy, (1, 1), crop=crop, method="flat", work=ws, pad=pad)
            np.testing.assert_allclose(b[0], a[0], rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(b[1], a[1], rtol=1e-13, atol=1e-12)
            assert b[0].flags.c_contiguous
            _, dw = conv.conv2d_bprop(x, w, dy, (1, 1), need_dx=False, method="flat", work=ws, pad=pad)
            np.testing.assert_allclose(dw, a[1], rtol=1e-13, atol=1e-12)


def test_flat_layout_choice():
    """bigimage: conv1 (RGB) takes the full tile im2col; conv2's forward, both data gradients
    and every weight gradient with 32 channels the shifted rows; conv3's forward (64 outputs
    from 32 channels) the full one."""
    from distnet.ops.conv.flat import uses_shifts
    assert not uses_shifts(3, 3, 32) and not uses_shifts(3, 3)            # conv1 forward, dw
    assert uses_shifts(32, 3, 32) and uses_shifts(32, 3)                  # conv2 forward, dw, dx
    assert not uses_shifts(32, 3, 64) and uses_shifts(64, 3, 32)          # conv3 forward, dx


@pytest.mark.parametrize("case", FLAT_CASES)
@pytest.mark.parametrize("method", ["flat", "im2col", None])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_bprop_relu_y(case, method, n_threads, threads, monkeypatch):
    """``relu_y``: the gradients of the conv given the gradient of its fused-ReLU output equal
    those of ``dz = dy * [y > 0]`` (the flat kernel applies the mask image by image; the other
    kernels first), for every crop, with and without ``dx``; ``fuses_relu_grad`` says which."""
    from distnet.ops import conv
    monkeypatch.setattr(conv.flat, "TILE_BYTES", 4000)
    threads(n_threads)
    B, C, H, W, K, fh, fw, p = case
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((B, C, H, W)), rng.standard_normal((K, C, fh, fw))
    pad = ((p, p), (p, p)) if p else None
    ws = Workspace()
    y = conv.conv2d_fprop(x, w, (1, 1), relu=True, method=method, work=ws, pad=pad)
    dy = rng.standard_normal(y.shape)
    dz = dy * (y > 0)
    fused = conv.fuses_relu_grad(x, w, (1, 1), pad, method)
    assert fused == (method == "flat" or (method is None and conv.use_flat(
        (B, C, H + 2 * p, W + 2 * p), w.shape, (1, 1)) and (fh, fw) != (1, 1)))
    crops = [None] if pad is not None else [None, ((1, 0), (0, min(2, fw - 1))), ((fh, 0), (0, 0))]
    for crop in crops:
        if crop is not None and (sum(crop[0]) >= H or sum(crop[1]) >= W):
            continue
        for need_dx in (True, False):
            for _ in range(2):   # workspace reuse
                a = conv.conv2d_bprop(x, w, dz, (1, 1), need_dx=need_dx, crop=crop, method=method, pad=pad)
                b = conv.conv2d_bprop(x, w, dy, (1, 1), need_dx=need_dx, crop=crop, method=method, pad=pad,
                                      work=ws, relu_y=y)
                np.testing.assert_allclose(b[1], a[1], rtol=1e-13, atol=1e-12)
                if need_dx:
                    np.testing.assert_allclose(b[0], a[0], rtol=1e-13, atol=1e-13)
                else:
                    assert b[0] is None


def test_flat_workspace_is_planned_once():
    """A steady training loop allocates nothing: forward (full tile im2col: 64 outputs from 32
    channels) and backward (shifted rows for dw and dx) keep their own buffers."""
    from distnet.ops import conv
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 32, 70, 70)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    pad, ws = ((1, 1), (1, 1)), Workspace()
    y = conv.conv2d_fprop(x, w, (1, 1), relu=True, work=ws, pad=pad)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    conv.conv2d_bprop(x, w, dy, (1, 1), work=ws, pad=pad, relu_y=y)
    before = {k: id(v) for k, v in ws._bufs.items()}
    for _ in range(2):
        conv.conv2d_fprop(x, w, (1, 1), relu=True, work=ws, pad=pad, out=y)
        conv.conv2d_bprop(x, w, dy, (1, 1), work=ws, pad=pad, relu_y=y)
    assert {k: id(v) for k, v in ws._bufs.items()} == before
