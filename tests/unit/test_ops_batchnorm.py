"""distnet.ops.batchnorm: against the one-array textbook formula, central differences (float64),
and the split-sums property (partial sums over tiles add up to the whole array's, so a tiled run
gives the single-process numbers), on every array backend."""
import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.ops.batchnorm import (bn_bprop_dx, bn_bprop_dx_inference, bn_bprop_partial, bn_fprop,
                                   bn_param_grads, bn_stats_finish, bn_stats_partial, bn_update_running,
                                   channel_axes, local_count)
from distnet.testing.backends import make_backend
from tests.numgrad import numerical_grad

SHAPES = [(5, 3), (4, 3, 5), (3, 2, 4, 5), (2, 3, 3, 4, 2)]
EPS = 1e-5


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def reference(x, gamma, beta, eps=EPS):
    axes = (0,) + tuple(range(2, x.ndim))
    b = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    return gamma.reshape(b) * (x - mean.reshape(b)) / np.sqrt(var.reshape(b) + eps) + beta.reshape(b), mean, var


def run_train(be, x, gamma, beta, shift=None):
    """Forward through the split API on one array (one tile): y, xhat, inv_std, mean, var."""
    xd = be.asarray(x)
    s = bn_stats_partial(xd, None if shift is None else be.asarray(shift))
    mean, var = bn_stats_finish(s, local_count(xd), None if shift is None else be.asarray(shift))
    y, xhat, inv_std = bn_fprop(xd, mean, var, be.asarray(gamma), be.asarray(beta), EPS)
    return y, xhat, inv_std, mean, var


def data(shape, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    C = shape[1]
    return (rng.standard_normal(shape) * 2 + offset, rng.standard_normal(C) + 1, rng.standard_normal(C),
            rng.standard_normal(shape))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("two_pass", [False, True])
def test_forward_matches_formula(shape, two_pass, be):
    x, gamma, beta, _ = data(shape, offset=3.0)
    shift = None
    if two_pass:
        xd = be.asarray(x)
        shift = be.to_host(bn_stats_finish(bn_stats_partial(xd), local_count(xd))[0])
    y, xhat, inv_std, mean, var = run_train(be, x, gamma, beta, shift)
    ref, rmean, rvar = reference(x, gamma, beta)
    np.testing.assert_allclose(be.to_host(y), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(be.to_host(mean), rmean, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(be.to_host(var), rvar, rtol=1e-12)
    np.testing.assert_allclose(be.to_host(inv_std), 1 / np.sqrt(rvar + EPS), rtol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_backward_central_differences(shape, be):
    x, gamma, beta, r = data(shape)

    def loss():
        return float(np.vdot(reference(x, gamma, beta)[0], r))

    y, xhat, inv_std, _, _ = run_train(be, x, gamma, beta)
    g = bn_bprop_partial(be.asarray(r), xhat)
    dx = bn_bprop_dx(be.asarray(r), xhat, be.asarray(gamma), inv_std, g, local_count(xhat))
    dgamma, dbeta = bn_param_grads(g)
    np.testing.assert_allclose(be.to_host(dx), numerical_grad(loss, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(be.to_host(dgamma), numerical_grad(loss, gamma), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(be.to_host(dbeta), numerical_grad(loss, beta), rtol=1e-6, atol=1e-8)


def test_dx_into_dy(be):
    x, gamma, beta, r = data((3, 2, 4, 5), seed=3)
    y, xhat, inv_std, _, _ = run_train(be, x, gamma, beta)
    dy = be.asarray(r)
    g = bn_bprop_partial(dy, xhat)
    want = be.to_host(bn_bprop_dx(dy, xhat, be.asarray(gamma), inv_std, g, local_count(dy)))
    out = bn_bprop_dx(dy, xhat, be.asarray(gamma), inv_std, g, local_count(dy), out=dy)
    assert out is dy
    np.testing.assert_allclose(be.to_host(dy), want, rtol=1e-14)


def test_inference_mode(be):
    x, gamma, beta, r = data((4, 3, 2, 2), seed=1)
    rm, rv = np.array([0.1, -0.2, 0.3]), np.array([1.5, 0.5, 2.0])
    y, _, inv_std = bn_fprop(be.asarray(x), be.asarray(rm), be.asarray(rv), be.asarray(gamma), be.asarray(beta))
    b = (1, -1, 1, 1)
    want = gamma.reshape(b) * (x - rm.reshape(b)) / np.sqrt(rv.reshape(b) + EPS) + beta.reshape(b)
    np.testing.assert_allclose(be.to_host(y), want, rtol=1e-12, atol=1e-13)

    def loss():
        return float(np.vdot(gamma.reshape(b) * (x - rm.reshape(b)) / np.sqrt(rv.reshape(b) + EPS), r))
    dx = bn_bprop_dx_inference(be.asarray(r), be.asarray(gamma), inv_std)
    np.testing.assert_allclose(be.to_host(dx), numerical_grad(loss, x), rtol=1e-6, atol=1e-8)


def tiles_4d(shape, cuts):
    """Disjoint index tuples covering an (N, C, H, W) array: cuts along N, H and W."""
    (cn, ch, cw) = cuts
    N, _, H, W = shape

    def parts(n, k):
        edges = np.linspace(0, n, k + 1).astype(int)
        return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]
    return [(a, slice(None), b, c) for a in parts(N, cn) for b in parts(H, ch) for c in parts(W, cw)]


@pytest.mark.parametrize("cuts", [(1, 1, 2), (1, 2, 1), (2, 2, 2), (1, 3, 3)])
@pytest.mark.parametrize("one_pass_shift", [False, True])
def test_split_sums_equal_whole(cuts, one_pass_shift, be):
    """The distributed recipe (partial sums per tile, summed = Allreduce, finish per tile) gives
    the single-array statistics, outputs, gradients and running averages."""
    shape = (4, 3, 6, 7)
    x, gamma, beta, r = data(shape, seed=2, offset=5.0)
    shift = np.array([4.5, 5.5, 5.0]) if one_pass_shift else None
    sh = None if shift is None else be.asarray(shift)
    count = shape[0] * shape[2] * shape[3]
    gd, bd = be.asarray(gamma), be.asarray(beta)
    # whole array
    xd = be.asarray(x)
    s_all = bn_stats_partial(xd, sh)
    mean_a, var_a = bn_stats_finish(s_all, count, sh)
    y_a, xhat_a, inv_a = bn_fprop(xd, mean_a, var_a, gd, bd)
    g_all = bn_bprop_partial(be.asarray(r), xhat_a)
    dx_a = be.to_host(bn_bprop_dx(be.asarray(r), xhat_a, gd, inv_a, g_all, count))
    # tiles
    tiles = tiles_4d(shape, cuts)
    s = sum(be.to_host(bn_stats_partial(be.asarray(x[t]), sh)) for t in tiles)
    np.testing.assert_allclose(s, be.to_host(s_all), rtol=1e-12, atol=1e-9)
    mean, var = bn_stats_finish(be.asarray(s), count, sh)
    np.testing.assert_allclose(be.to_host(mean), x.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(be.to_host(var), x.var(axis=(0, 2, 3)), rtol=1e-10)
    outs = []
    for t in tiles:
        y, xhat, inv = bn_fprop(be.asarray(x[t]), mean, var, gd, bd)
        np.testing.assert_allclose(be.to_host(y), be.to_host(y_a)[t], rtol=1e-10, atol=1e-10)
        outs.append((xhat, inv))
    g = sum(be.to_host(bn_bprop_partial(be.asarray(r[t]), o[0])) for t, o in zip(tiles, outs))
    np.testing.assert_allclose(g, be.to_host(g_all), rtol=1e-10, atol=1e-10)
    for t, (xhat, inv) in zip(tiles, outs):
        dx = bn_bprop_dx(be.asarray(r[t]), xhat, gd, inv, be.asarray(g), count)
        np.testing.assert_allclose(be.to_host(dx), dx_a[t], rtol=1e-9, atol=1e-10)


def test_split_sums_fc(be):
    x, gamma, beta, r = data((9, 4), seed=5)
    s = sum(be.to_host(bn_stats_partial(be.asarray(x[a:b]))) for a, b in [(0, 4), (4, 5), (5, 9)])
    np.testing.assert_allclose(s, be.to_host(bn_stats_partial(be.asarray(x))), rtol=1e-13, atol=1e-13)


def test_running_averages_pytorch_semantics(be):
    rm, rv = be.asarray(np.zeros(3)), be.asarray(np.ones(3))
    mean, var, count = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]), 10
    bn_update_running(rm, rv, be.asarray(mean), be.asarray(var), count, momentum=0.1)
    np.testing.assert_allclose(be.to_host(rm), 0.1 * mean, rtol=1e-15)
    np.testing.assert_allclose(be.to_host(rv), 0.9 + 0.1 * var * 10 / 9, rtol=1e-15)


def test_running_float32_keeps_dtype(be):
    rm, rv = be.asarray(np.zeros(2), np.float32), be.asarray(np.ones(2), np.float32)
    x = be.asarray(np.random.default_rng(0).standard_normal((6, 2)), np.float32)
    mean, var = bn_stats_finish(bn_stats_partial(x), 6)
    bn_update_running(rm, rv, mean, var, 6)
    assert rm.dtype == np.float32 and rv.dtype == np.float32
    y, xhat, inv = bn_fprop(x, mean, var, be.asarray(np.ones(2), np.float32), be.asarray(np.zeros(2), np.float32))
    assert y.dtype == np.float32 and xhat.dtype == np.float32 and inv.dtype == np.float32
    g = bn_bprop_partial(y, xhat)
    assert bn_bprop_dx(y, xhat, be.asarray(np.ones(2), np.float32), inv, g, 6).dtype == np.float32


def test_against_torch_if_installed():
    torch = pytest.importorskip("torch")
    x, gamma, beta, r = data((4, 3, 5, 5), seed=7, offset=1.0)
    m = torch.nn.BatchNorm2d(3, eps=EPS, momentum=0.1).double()
    with torch.no_grad():
        m.weight.copy_(torch.from_numpy(gamma))
        m.bias.copy_(torch.from_numpy(beta))
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    yt = m(xt)
    (yt * torch.from_numpy(r)).sum().backward()
    be = make_backend("numpy")
    y, xhat, inv, mean, var = run_train(be, x, gamma, beta)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = bn_bprop_partial(r, xhat)
    dx = bn_bprop_dx(r, xhat, gamma, inv, g, local_count(x))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g[1], m.weight.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(g[0], m.bias.grad.numpy(), rtol=1e-10)
    rm, rv = np.zeros(3), np.ones(3)
    bn_update_running(rm, rv, mean, var, local_count(x), 0.1)
    np.testing.assert_allclose(rm, m.running_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv, m.running_var.numpy(), rtol=1e-12)


def test_channel_axes_any_number_of_spatial_axes():
    assert channel_axes(np.zeros((2, 3))) == (0,)
    assert channel_axes(np.zeros((2, 3, 4))) == (0, 2)
    assert channel_axes(np.zeros((2, 3, 4, 5, 6))) == (0, 2, 3, 4)


def test_bad_shape():
    with pytest.raises(GeometryError):
        channel_axes(np.zeros(3))
