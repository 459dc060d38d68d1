"""Stride-2 and 1x1 convolutions as first-class cases of distnet.ops.conv (ResNet's downsampling
3x3/2 with padding 1, the 1x1/2 projection shortcut, 1x1 bottlenecks): every kernel (auto,
forced im2col, the pointwise GEMM path) against an independent tap-sum formula, gradients
against central differences, on every array backend."""
import numpy as np
import pytest

from distnet.ops.conv import conv2d_bprop, conv2d_fprop
from distnet.ops.conv.pointwise import pointwise_bprop, pointwise_fprop, use_pointwise
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def reference(x, w, stride, pad=((0, 0), (0, 0))):
    """Sum over filter taps of strided input slices (independent of im2col and GEMM layouts)."""
    x = np.pad(x, ((0, 0), (0, 0)) + tuple(pad))
    K, C, fh, fw = w.shape
    sy, sx = stride
    Ho, Wo = (x.shape[2] - fh) // sy + 1, (x.shape[3] - fw) // sx + 1
    y = np.zeros((x.shape[0], K, Ho, Wo))
    for u in range(fh):
        for v in range(fw):
            xs = x[:, :, u:u + sy * (Ho - 1) + 1:sy, v:v + sx * (Wo - 1) + 1:sx]
            y += np.einsum("bchw,kc->bkhw", xs, w[:, :, u, v])
    return y


CASES = [  # x shape, K, fshape, stride, pad
    ((2, 3, 8, 8), 4, (3, 3), (2, 2), ((1, 1), (1, 1))),    # ResNet downsampling conv, even size
    ((2, 3, 7, 9), 2, (3, 3), (2, 2), ((1, 1), (1, 1))),    # odd sizes: last row/col read once
    ((1, 2, 9, 6), 3, (3, 3), (2, 1), ((1, 1), (1, 1))),    # stride 2 on one axis only
    ((2, 4, 8, 8), 5, (1, 1), (2, 2), ((0, 0), (0, 0))),    # projection shortcut 1x1/2
    ((2, 4, 7, 5), 3, (1, 1), (2, 2), ((0, 0), (0, 0))),    # 1x1/2 on odd sizes
    ((3, 6, 5, 4), 2, (1, 1), (1, 1), ((0, 0), (0, 0))),    # bottleneck 1x1
    ((2, 3, 6, 7), 4, (1, 1), (1, 2), ((0, 0), (0, 0))),
    ((2, 3, 5, 5), 2, (1, 1), (1, 1), ((1, 0), (0, 1))),    # 1x1 with padding (general kernels)
    ((2, 2, 9, 9), 3, (5, 5), (2, 2), ((2, 2), (2, 2))),
]


def make(shape, K, fshape, seed=0):
    rng = np.random.default_rng(seed)
    return rng, rng.standard_normal(shape), rng.standard_normal((K, shape[1]) + fshape)


@pytest.mark.parametrize("shape,K,fshape,stride,pad", CASES)
@pytest.mark.parametrize("method", [None, "im2col"])
def test_fprop_against_tap_sums(shape, K, fshape, stride, pad, method, be):
    _, x, w = make(shape, K, fshape)
    y = conv2d_fprop(be.asarray(x), be.asarray(w), stride, pad=pad, method=method)
    np.testing.assert_allclose(be.to_host(y), reference(x, w, stride, pad), rtol=1e-12, atol=1e-12)
    r = conv2d_fprop(be.asarray(x), be.asarray(w), stride, pad=pad, method=method, relu=True)
    np.testing.assert_allclose(be.to_host(r), np.maximum(reference(x, w, stride, pad), 0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,K,fshape,stride,pad", CASES)
@pytest.mark.parametrize("method", [None, "im2col"])
def test_bprop_central_differences(shape, K, fshape, stride, pad, method, be):
    rng, x, w = make(shape, K, fshape, seed=1)
    dy = rng.standard_normal(reference(x, w, stride, pad).shape)

    def f():
        return float(np.vdot(reference(x, w, stride, pad), dy))
    dx, dw = conv2d_bprop(be.asarray(x), be.asarray(w), be.asarray(dy), stride, pad=pad, method=method)
    assert dx.shape == x.shape and dw.shape == w.shape
    check_grad(f, x, be.to_host(dx))
    check_grad(f, w, be.to_host(dw))


@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (2, 1)])
def test_pointwise_equals_im2col(stride, be):
    rng, x, w = make((3, 5, 9, 8), 4, (1, 1), seed=2)
    xd, wd = be.asarray(x), be.asarray(w)
    y = conv2d_fprop(xd, wd, stride)
    yi = conv2d_fprop(xd, wd, stride, method="im2col")
    np.testing.assert_allclose(be.to_host(y), be.to_host(yi), rtol=1e-12, atol=1e-13)
    dy = be.asarray(rng.standard_normal(y.shape))
    dx, dw = conv2d_bprop(xd, wd, dy, stride)
    dxi, dwi = conv2d_bprop(xd, wd, dy, stride, method="im2col")
    np.testing.assert_allclose(be.to_host(dx), be.to_host(dxi), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(be.to_host(dw), be.to_host(dwi), rtol=1e-12, atol=1e-13)
    assert conv2d_bprop(xd, wd, dy, stride, need_dx=False)[0] is None


@pytest.mark.parametrize("stride", [(1, 1), (2, 2)])
def test_pointwise_out_arguments(stride, be):
    rng, x, w = make((2, 3, 6, 5), 4, (1, 1), seed=3)
    xd, wd = be.asarray(x), be.asarray(w)
    want = reference(x, w, stride)
    out = be.xp.empty(want.shape)
    assert conv2d_fprop(xd, wd, stride, out=out) is out
    np.testing.assert_allclose(be.to_host(out), want, rtol=1e-12, atol=1e-13)
    strided = be.xp.empty(want.shape[:3] + (2 * want.shape[3],))[..., ::2]   # not contiguous
    assert pointwise_fprop(xd, wd, stride, out=strided) is strided
    np.testing.assert_allclose(be.to_host(strided), want, rtol=1e-12, atol=1e-13)
    xf = be.xp.asfortranarray(xd)                                            # not contiguous input
    np.testing.assert_allclose(be.to_host(pointwise_fprop(xf, wd, stride)), want, rtol=1e-12, atol=1e-13)
    dy = be.asarray(rng.standard_normal(want.shape))
    dx_ref, _ = conv2d_bprop(xd, wd, dy, stride, method="im2col")
    dx_out = be.xp.full(x.shape, 7.0)                    # stale values must be overwritten
    dx, _ = pointwise_bprop(xd, wd, dy, stride, dx_out=dx_out)
    assert dx is dx_out
    np.testing.assert_allclose(be.to_host(dx), be.to_host(dx_ref), rtol=1e-12, atol=1e-13)


def test_pointwise_crop_falls_back(be):
    rng, x, w = make((2, 3, 6, 6), 2, (1, 1), seed=4)
    xd, wd = be.asarray(x), be.asarray(w)
    dy = be.asarray(rng.standard_normal((2, 2, 6, 6)))
    crop = ((1, 0), (0, 2))
    dx, _ = conv2d_bprop(xd, wd, dy, (1, 1), crop=crop)
    full, _ = conv2d_bprop(xd, wd, dy, (1, 1))
    np.testing.assert_allclose(be.to_host(dx), be.to_host(full)[:, :, 1:, :4], rtol=1e-13)


def test_float32_pointwise(be):
    rng, x, w = make((2, 3, 5, 5), 4, (1, 1))
    xd, wd = be.asarray(x, np.float32), be.asarray(w, np.float32)
    y = conv2d_fprop(xd, wd, (2, 2))
    dx, dw = conv2d_bprop(xd, wd, y, (2, 2))
    assert y.dtype == dx.dtype == dw.dtype == np.float32


def test_use_pointwise_rule():
    assert use_pointwise((4, 3, 1, 1))
    assert not use_pointwise((4, 3, 1, 1), method="im2col")
    assert not use_pointwise((4, 3, 3, 3))
    assert not use_pointwise((4, 3, 1, 1), pad=((1, 1), (1, 1)))
    assert not use_pointwise((4, 3, 1, 1), crop=((0, 1), (0, 0)))
    assert use_pointwise((4, 3, 1, 1), crop=((0, 0), (0, 0)))
