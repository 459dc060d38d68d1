"""distnet.ops.conv: forward against a naive loop, backward against central differences, on every
array backend (distnet/testing/backends.py): inputs drawn with numpy, the op run on the backend,
results compared on the host (central differences use the numpy forward on the host)."""
import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.ops.conv import conv2d_bprop, conv2d_fprop, im2col
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)

CASES = [  # (x shape (B,C,H,W), K, fshape, stride)
    ((1, 1, 5, 5), 1, (3, 3), (1, 1)),
    ((2, 3, 7, 8), 4, (3, 2), (2, 2)),
    ((2, 2, 8, 6), 3, (2, 3), (2, 1)),
    ((3, 2, 10, 9), 1, (4, 2), (3, 2)),   # windows do not tile the input exactly
    ((1, 4, 6, 7), 2, (1, 1), (1, 1)),
    ((2, 1, 5, 4), 5, (5, 4), (1, 1)),    # filter covers the whole input: 1x1 output
]


def naive_conv(x, w, stride):
    B, C, H, W = x.shape
    K, _, fh, fw = w.shape
    sy, sx = stride
    Ho, Wo = (H - fh) // sy + 1, (W - fw) // sx + 1
    y = np.zeros((B, K, Ho, Wo))
    for b in range(B):
        for k in range(K):
            for i in range(Ho):
                for j in range(Wo):
                    s = 0.0
                    for c in range(C):
                        for u in range(fh):
                            for v in range(fw):
                                s += w[k, c, u, v] * x[b, c, i * sy + u, j * sx + v]
                    y[b, k, i, j] = s
    return y


def make(shape, K, fshape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((K, shape[1]) + fshape)
    return rng, x, w


@pytest.mark.parametrize("shape,K,fshape,stride", CASES)
def test_fprop_matches_loop(shape, K, fshape, stride, be):
    _, x, w = make(shape, K, fshape)
    y = conv2d_fprop(be.asarray(x), be.asarray(w), stride)
    assert y.flags.c_contiguous
    np.testing.assert_allclose(be.to_host(y), naive_conv(x, w, stride), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,K,fshape,stride", CASES)
def test_bprop_matches_central_differences(shape, K, fshape, stride, be):
    rng, x, w = make(shape, K, fshape)
    dy = rng.standard_normal(conv2d_fprop(x, w, stride).shape)

    def f():  # L = <conv(x, w), dy>, so dL/dy = dy (numpy, on the host)
        return float(np.vdot(conv2d_fprop(x, w, stride), dy))

    xd, wd, dyd = be.asarray(x), be.asarray(w), be.asarray(dy)
    dx, dw = conv2d_bprop(xd, wd, dyd, stride)
    assert dx.shape == x.shape and dw.shape == w.shape
    check_grad(f, x, be.to_host(dx))
    check_grad(f, w, be.to_host(dw))
    none, dw2 = conv2d_bprop(xd, wd, dyd, stride, need_dx=False)
    assert none is None
    np.testing.assert_array_equal(be.to_host(dw2), be.to_host(dw))


def test_unread_pixels_get_zero_gradient(be):
    rng, x, w = make((2, 2, 8, 7), 3, (3, 2), seed=3)
    stride = (3, 2)                       # rows 6..7 and column 6 are read by no window
    dy = rng.standard_normal(conv2d_fprop(x, w, stride).shape)
    dx, _ = conv2d_bprop(be.asarray(x), be.asarray(w), be.asarray(dy), stride)
    dx = be.to_host(dx)
    assert dx[:, :, :6, :6].all() and not dx[:, :, 6:, :].any() and not dx[:, :, :, 6:].any()


def test_out_argument_and_noncontiguous_input(be):
    rng, x, w = make((2, 3, 9, 9), 4, (3, 3), seed=4)
    xt = be.xp.asfortranarray(be.asarray(x))   # not C-contiguous: the patch view must still be right
    assert not xt.flags.c_contiguous
    out = be.xp.empty((2, 4, 4, 4))
    r = conv2d_fprop(xt, be.asarray(w), (2, 2), out=out)
    assert r is out
    np.testing.assert_allclose(be.to_host(out), naive_conv(x, w, (2, 2)), rtol=1e-12, atol=1e-12)


def test_im2col_layout(be):
    x = np.arange(2 * 2 * 4 * 5, dtype=float).reshape(2, 2, 4, 5)
    cols = be.to_host(im2col(be.asarray(x), (2, 3), (2, 1)))      # Ho=2, Wo=3
    assert cols.shape == (2 * 2 * 3, 2 * 2 * 3)
    for c, u, v, b, i, j in np.ndindex(2, 2, 3, 2, 2, 3):
        assert cols[(c * 2 + u) * 3 + v, (i * 3 + j) * 2 + b] == x[b, c, i * 2 + u, j + v]


def test_float32_stays_float32(be):
    rng, x, w = make((2, 3, 6, 6), 2, (3, 3))
    x, w = x.astype(np.float32), w.astype(np.float32)
    xd, wd = be.asarray(x, np.float32), be.asarray(w, np.float32)
    y = conv2d_fprop(xd, wd, (1, 1))
    dx, dw = conv2d_bprop(xd, wd, y, (1, 1))
    assert y.dtype == dx.dtype == dw.dtype == np.float32
    np.testing.assert_allclose(be.to_host(y), naive_conv(x.astype(float), w.astype(float), (1, 1)),
                               rtol=1e-4, atol=1e-4)


def test_bad_geometry_raises(be):
    x = be.xp.zeros((1, 2, 3, 3))
    with pytest.raises(GeometryError):
        conv2d_fprop(x, be.xp.zeros((1, 2, 4, 1)), (1, 1))
    with pytest.raises(GeometryError):
        conv2d_fprop(x, be.xp.zeros((1, 3, 2, 2)), (1, 1))
