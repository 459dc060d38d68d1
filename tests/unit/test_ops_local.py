"""Locally connected layer math (distnet.ops.local) against naive loops, central differences and
the adjoint identity (docs/neon-semantics.md#local-defiltering), on every array backend
(distnet/testing/backends.py): the op runs on the backend, results are compared on the host; central
differences use numpy on the host."""
import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.ops.local import (local_bprop, local_debprop, local_defprop, local_fprop,
                               normalize_rows)
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad

STRIDES = [(1, 1), (2, 2), (2, 1)]
RTOL, ATOL = 1e-6, 1e-8


def naive_local(x, w, fshape, stride):
    """y[b,k,i,j] = sum_{c,u,v} w[k,i,j,f(c,u,v)] x[b,c,i*sy+u,j*sx+v], spelled out."""
    B, C, H, W = x.shape
    K, Ho, Wo, F = w.shape
    (fh, fw), (sy, sx) = fshape, stride
    y = np.zeros((B, K, Ho, Wo))
    for b in range(B):
        for k in range(K):
            for i in range(Ho):
                for j in range(Wo):
                    acc = 0.0
                    for c in range(C):
                        for u in range(fh):
                            for v in range(fw):
                                acc += w[k, i, j, (c * fh + u) * fw + v] * x[b, c, i * sy + u, j * sx + v]
                    y[b, k, i, j] = acc
    return y


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def make(B, C, K, H, W, fshape, stride, seed=0):
    rng = np.random.default_rng(seed)
    (fh, fw), (sy, sx) = fshape, stride
    Ho, Wo = (H - fh) // sy + 1, (W - fw) // sx + 1
    x = rng.standard_normal((B, C, H, W))
    w = rng.standard_normal((K, Ho, Wo, C * fh * fw))
    return rng, x, w, (Ho, Wo)


@pytest.mark.parametrize("stride", STRIDES)
@pytest.mark.parametrize("B", [1, 3])
def test_fprop_matches_naive(stride, B, be):
    # rectangular filter, K != C, and W - fw not a multiple of sx (an unread last column)
    _, x, w, _ = make(B, 2, 3, 7, 8, (3, 2), stride)
    y = local_fprop(be.asarray(x), be.asarray(w), (3, 2), stride)
    assert y.flags.c_contiguous
    np.testing.assert_allclose(be.to_host(y), naive_local(x, w, (3, 2), stride), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", STRIDES)
@pytest.mark.parametrize("B", [1, 2])
def test_bprop_central_differences(stride, B, be):
    rng, x, w, (Ho, Wo) = make(B, 2, 3, 6, 7, (2, 3), stride, seed=1)
    G = rng.standard_normal((B, 3, Ho, Wo))              # J = <y, G>, so dJ/dy = G
    xd, wd, Gd = be.asarray(x), be.asarray(w), be.asarray(G)
    dx, dw = local_bprop(xd, wd, Gd, (2, 3), stride)
    J = lambda: float((local_fprop(x, w, (2, 3), stride) * G).sum())
    check_grad(J, x, be.to_host(dx), rtol=RTOL, atol=ATOL)
    check_grad(J, w, be.to_host(dw), rtol=RTOL, atol=ATOL)
    dx2, dw2 = local_bprop(xd, wd, Gd, (2, 3), stride, need_dx=False)
    assert dx2 is None
    np.testing.assert_array_equal(be.to_host(dw2), be.to_host(dw))


@pytest.mark.parametrize("stride", STRIDES)
@pytest.mark.parametrize("B", [1, 2])
def test_decoder_is_adjoint_of_encoder(stride, B, be):
    rng, x, v, (Ho, Wo) = make(B, 3, 2, 9, 8, (3, 3), stride, seed=2)
    h = rng.standard_normal((B, 2, Ho, Wo))
    x, v, h = be.asarray(x), be.asarray(v), be.asarray(h)
    xhat = local_defprop(h, v, x.shape, (3, 3), stride)
    assert xhat.shape == x.shape
    lhs = float((local_fprop(x, v, (3, 3), stride) * h).sum())
    rhs = float((x * xhat).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)
    # and the decoder is the encoder's input-gradient map
    dx, _ = local_bprop(x, v, h, (3, 3), stride)
    np.testing.assert_allclose(be.to_host(xhat), be.to_host(dx), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", STRIDES)
def test_decoder_bprop_central_differences(stride, be):
    rng, x, v, (Ho, Wo) = make(2, 2, 3, 6, 7, (3, 2), stride, seed=3)
    h = rng.standard_normal((2, 3, Ho, Wo))
    eps = rng.standard_normal(x.shape)                   # J = <xhat, eps>, so dJ/dxhat = eps
    gh, gv = local_debprop(be.asarray(h), be.asarray(v), be.asarray(eps), (3, 2), stride)
    J = lambda: float((local_defprop(h, v, x.shape, (3, 2), stride) * eps).sum())
    check_grad(J, h, be.to_host(gh), rtol=RTOL, atol=ATOL)
    check_grad(J, v, be.to_host(gv), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("stride", STRIDES)
def test_tile_of_output_from_chunk_and_weight_slice(stride, be):
    """A distributed layer: the output tile rows i0:i1, cols j0:j1 computed from its input chunk
    and the weight slice equals the slice of the global result; so does its weight gradient."""
    (fh, fw), (sy, sx) = (3, 2), stride
    rng, x, w, (Ho, Wo) = make(2, 2, 3, 11, 12, (fh, fw), stride, seed=4)
    G = be.asarray(rng.standard_normal((2, 3, Ho, Wo)))
    x, w = be.asarray(x), be.asarray(w)
    y = local_fprop(x, w, (fh, fw), stride)
    dx, dw = local_bprop(x, w, G, (fh, fw), stride)
    i0, i1, j0, j1 = 1, Ho - 1, 2, Wo
    chunk = x[:, :, i0 * sy:(i1 - 1) * sy + fh, j0 * sx:(j1 - 1) * sx + fw]
    wt = w[:, i0:i1, j0:j1, :]
    H = be.to_host
    np.testing.assert_allclose(H(local_fprop(chunk, wt, (fh, fw), stride)), H(y)[:, :, i0:i1, j0:j1],
                               rtol=1e-12, atol=1e-12)
    _, dwt = local_bprop(chunk, wt, G[:, :, i0:i1, j0:j1], (fh, fw), stride)
    np.testing.assert_allclose(H(dwt), H(dw)[:, i0:i1, j0:j1, :], rtol=1e-12, atol=1e-12)


def test_normalize_rows_in_place(be):
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((3, 4, 5, 6))
    w = be.asarray(w0.copy())
    out = normalize_rows(w)
    assert out is w
    w = be.to_host(w)
    np.testing.assert_allclose(np.linalg.norm(w, axis=-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(w * np.linalg.norm(w0, axis=-1, keepdims=True), w0, rtol=1e-13)


def test_float32_stays_float32(be):
    _, x, w, (Ho, Wo) = make(2, 2, 3, 6, 6, (3, 3), (1, 1))
    x, w = be.asarray(x, np.float32), be.asarray(w, np.float32)
    y = local_fprop(x, w, (3, 3), (1, 1))
    dx, dw = local_bprop(x, w, y, (3, 3), (1, 1))
    gh, gv = local_debprop(y, w, x, (3, 3), (1, 1))
    assert y.dtype == dx.dtype == dw.dtype == gh.dtype == gv.dtype == np.float32
    assert local_defprop(y, w, x.shape, (3, 3), (1, 1)).dtype == np.float32


def test_geometry_mismatch_raises(be):
    _, x, w, _ = make(1, 2, 3, 6, 6, (3, 3), (1, 1))
    x, w = be.asarray(x), be.asarray(w)
    with pytest.raises(GeometryError):
        local_fprop(x, w[:, 1:], (3, 3), (1, 1))          # weights for a smaller tile
    with pytest.raises(GeometryError):
        local_fprop(x[:, :1], w, (3, 3), (1, 1))          # F != C*fh*fw
    with pytest.raises(GeometryError):
        local_defprop(be.xp.zeros((1, 3, 4, 4)), w, (1, 2, 7, 7), (3, 3), (1, 1))
