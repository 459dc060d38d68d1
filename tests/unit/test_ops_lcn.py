"""Local contrast normalisation (distnet.ops.lcn) against neon's definition
(docs/neon-semantics.md#local-contrast-normalisation) written out with an explicit
zero-padded canvas, central differences (also where s == 0), and the staged (distributed)
composition emulated on one process. Every test of the ops runs on every array backend
(distnet/testing/backends.py): the op runs on the backend, results are compared on the host; central
differences use numpy on the host. (The filter and padding are host-side helpers.)"""
import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.ops.lcn import (lcn_bprop, lcn_bprop_divisive, lcn_bprop_subtractive, lcn_filter,
                             lcn_fprop, lcn_fprop_divisive, lcn_fprop_subtractive, lcn_mean,
                             lcn_mean_adjoint, lcn_pad)
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad

RTOL, ATOL = 1e-6, 1e-8


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


# ------------------------------------------------------------------- oracle (neon's definition)

def naive_star(w, z):
    """(w * z)[b,r,q] = sum_{c,a,beta} w[c,a,beta] z[b,c,r+a-ph,q+beta-pw], zeros outside: the
    input is placed at offset (ph, pw) of an explicit (H+fh-1) x (W+fw-1) canvas."""
    B, C, H, W = z.shape
    _, fh, fw = w.shape
    ph, pw = (fh - 1) // 2, (fw - 1) // 2
    canvas = np.zeros((B, C, H + fh - 1, W + fw - 1))
    canvas[:, :, ph:ph + H, pw:pw + W] = z
    out = np.zeros((B, 1, H, W))
    for b in range(B):
        for r in range(H):
            for q in range(W):
                acc = 0.0
                for c in range(C):
                    for a in range(fh):
                        for beta in range(fw):
                            acc += w[c, a, beta] * canvas[b, c, r + a, q + beta]
                out[b, 0, r, q] = acc
    return out


def naive_lcn(x, w):
    m = naive_star(w, x)
    s = x - m
    d = np.sqrt(naive_star(w, s * s))
    d[d == 0] = 1
    return s / d


def nonuniform_filter(C, fshape, seed):
    """A positive filter whose maps differ per channel (exercises the general code path)."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.2, 1.0, (C,) + tuple(fshape))
    return w / w.sum()


def loss(x, w, e):
    return float((lcn_fprop(x, w)[0] * e).sum())


# ----------------------------------------------------------------------------- filter, padding

def test_filter_3x3_values():
    for C in (1, 3):
        w = lcn_filter(C, (3, 3))
        assert w.shape == (C, 3, 3)
        tol = dict(rtol=0, atol=5e-7 / C)                     # the values are rounded to 6 places
        np.testing.assert_allclose(w[:, 1, 1], 0.682113 / C, **tol)
        np.testing.assert_allclose(w[:, 0, 1], 0.071894 / C, **tol)
        np.testing.assert_allclose(w[:, 1, 0], 0.071894 / C, **tol)
        np.testing.assert_allclose(w[:, 0, 0], 0.007578 / C, **tol)
        assert w.sum() == pytest.approx(1.0, abs=1e-14)
        assert (w == w[:1]).all()


def test_filter_rectangular_and_dtype():
    w = lcn_filter(2, (3, 5), np.float32)
    assert w.shape == (2, 3, 5) and w.dtype == np.float32
    mx, my, sigma = 2, 1, np.sqrt(5) / 3
    a, b = np.mgrid[0:3, 0:5]
    g = np.exp(-((b - mx) ** 2 + (a - my) ** 2) / (2 * sigma ** 2))
    np.testing.assert_allclose(w[1], g / (2 * g.sum()), rtol=1e-6)
    np.testing.assert_array_equal(w[0], w[0, ::-1, ::-1])       # symmetric about the centre
    assert lcn_filter(3, (1, 1)).ravel().tolist() == pytest.approx([1 / 3] * 3)


@pytest.mark.parametrize("fshape", [(2, 3), (3, 4), (0, 3)])
def test_filter_even_sizes_raise(fshape):
    with pytest.raises(GeometryError):
        lcn_filter(2, fshape)


def test_pad():
    assert lcn_pad((3, 5)) == ((1, 1), (2, 2))
    assert lcn_pad((1, 9)) == ((0, 0), (4, 4))
    assert lcn_pad((4, 2)) == ((2, 1), (1, 0))                 # neon's rule, even sizes


# ----------------------------------------------------------------------------- forward

@pytest.mark.parametrize("fshape", [(3, 3), (3, 5), (5, 3)])
@pytest.mark.parametrize("B", [1, 2])
def test_fprop_matches_neon_formulas(fshape, B, be):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (B, 3, 6, 7))
    for w in (lcn_filter(3, fshape), nonuniform_filter(3, fshape, 1)):
        y, _ = lcn_fprop(be.asarray(x), be.asarray(w))
        np.testing.assert_allclose(be.to_host(y), naive_lcn(x, w), rtol=1e-12, atol=1e-12)


def test_mean_adjoint_identity(be):
    rng = np.random.default_rng(1)
    for w in (lcn_filter(2, (3, 5)), nonuniform_filter(2, (3, 5), 2)):
        z = be.asarray(rng.standard_normal((2, 2, 7, 9)))
        g = be.asarray(rng.standard_normal((2, 1, 5, 5)))
        w = be.asarray(w)
        lhs = float((lcn_mean(w, z) * g).sum())
        rhs = float((z * lcn_mean_adjoint(w, g, z.shape)).sum())
        assert lhs == pytest.approx(rhs, rel=1e-12)


def test_blank_input(be):
    """An all-zero image: s == 0 and v == 0 everywhere, so y == 0 and the gradient is finite
    (it is e - M^T(sum_c e), the branch d == 1)."""
    w = be.asarray(lcn_filter(2, (3, 3)))
    x = be.xp.zeros((2, 2, 5, 5))
    y, cache = lcn_fprop(x, w)
    assert (be.to_host(y) == 0).all() and (be.to_host(cache.d) == 1).all()
    e = be.asarray(np.random.default_rng(2).standard_normal(x.shape))
    gx = be.to_host(lcn_bprop(e, cache, w))
    assert np.isfinite(gx).all()
    # d == 1 constant branch: y = x - M(x), a linear map whose adjoint is e - M^T(sum_c e)
    mt = lcn_mean_adjoint(w, e.sum(axis=1, keepdims=True), (2, 2, 7, 7))[:, :, 1:6, 1:6]
    np.testing.assert_allclose(gx, be.to_host(e - mt), rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- backward

@pytest.mark.parametrize("fshape", [(3, 3), (3, 5)])
@pytest.mark.parametrize("B", [1, 2])
def test_bprop_central_differences(fshape, B, be):
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (B, 3, 5, 6))
    e = rng.standard_normal(x.shape)
    for w in (lcn_filter(3, fshape), nonuniform_filter(3, fshape, 4)):
        wd = be.asarray(w)
        gx = be.to_host(lcn_bprop(be.asarray(e), lcn_fprop(be.asarray(x), wd)[1], wd))
        check_grad(lambda: loss(x, w, e), x, gx, rtol=RTOL, atol=ATOL)


def blank_regions_input(B, C, H, W, seed):
    """MNIST-like: an image with a blank (zero) top border 2 rows thick and a zero 4x6 block
    inside. With a 3x5 filter, s == 0 exactly wherever a pixel's whole 3x5 window is blank (top
    row: the window sees only padding and blank rows; rows 3-4, cols 3-4 of the block: the
    window fits in the block). v, though, is a 3x5 mean of s^2 and every such window still
    reaches a pixel whose window touches ink, so v > 0 everywhere: y is smooth in x (d never
    hits the d := 1 switch under a perturbation) and central differences are valid."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 1.0, (B, C, H, W))
    x[:, :, :2, :] = 0
    x[:, :, 2:6, 1:7] = 0
    return x


def test_bprop_exact_where_s_is_zero(be):
    """neon v0.4 drops e/d where s == 0; the exact gradient keeps it and matches central
    differences there."""
    w = lcn_filter(2, (3, 5))
    x = blank_regions_input(2, 2, 8, 9, seed=5)
    wd = be.asarray(w)
    y, cache = lcn_fprop(be.asarray(x), wd)
    s_zero = be.to_host(cache.s) == 0
    assert s_zero[:, :, 0, :].all() and s_zero[:, :, 3:5, 3:5].all()
    v = be.to_host(lcn_mean(wd, cache.s_chunk ** 2))
    assert (v > 0).all()                                        # the precondition of the check
    e = np.random.default_rng(6).standard_normal(x.shape)
    ed = be.asarray(e)
    gx = be.to_host(lcn_bprop(ed, cache, wd))
    check_grad(lambda: loss(x, w, e), x, gx, rtol=RTOL, atol=ATOL)
    # neon's variant (direct term 0 where s == 0) differs exactly by e/d on those pixels
    gs_direct, _ = lcn_bprop_divisive(ed, cache.s, cache.s_chunk, cache.d, wd)
    assert np.abs(np.where(s_zero, be.to_host(gs_direct), 0)).max() > 0.1


def test_bprop_where_v_is_zero(be):
    """A blank area wider than two filter windows gives v == 0 (d := 1, y == 0). There y jumps
    under any perturbation of its window (s/d with d ~ |s|), so no gradient exists; the branch
    taken is d == 1 constant, i.e. the d-path contributes 0 there. Checks: (1) with e == 0 on
    the v == 0 pixels the loss is smooth and the gradient matches central differences;
    (2) changing e only on v == 0 pixels leaves the d-path chunk gradient unchanged and moves the
    direct term by exactly that change."""
    w = lcn_filter(2, (3, 3))
    rng = np.random.default_rng(7)
    x = rng.uniform(0.2, 1.0, (2, 2, 9, 9))
    x[:, :, :6, :6] = 0                                         # blank corner (with the padding)
    H = be.to_host
    wd = be.asarray(w)
    _, cache = lcn_fprop(be.asarray(x), wd)
    v0 = H(lcn_mean(wd, cache.s_chunk ** 2)) == 0               # (B, 1, H, W)
    assert v0.any() and not v0.all()
    e = rng.standard_normal(x.shape) * ~v0
    gx = H(lcn_bprop(be.asarray(e), cache, wd))
    check_grad(lambda: loss(x, w, e), x, gx, rtol=RTOL, atol=ATOL)
    de = rng.standard_normal(x.shape) * v0
    a_direct, a_chunk = lcn_bprop_divisive(be.asarray(e), cache.s, cache.s_chunk, cache.d, wd)
    b_direct, b_chunk = lcn_bprop_divisive(be.asarray(e + de), cache.s, cache.s_chunk, cache.d, wd)
    np.testing.assert_array_equal(H(a_chunk), H(b_chunk))
    np.testing.assert_allclose(H(b_direct - a_direct), de, rtol=1e-14, atol=1e-15)


def test_float32_stays_float32(be):
    w = be.asarray(lcn_filter(2, (3, 3), np.float32), np.float32)
    x = be.asarray(np.random.default_rng(8).uniform(0, 1, (2, 2, 5, 5)), np.float32)
    y, cache = lcn_fprop(x, w)
    assert y.dtype == np.float32 and lcn_bprop(y, cache, w).dtype == np.float32


def test_shape_errors(be):
    w = be.asarray(lcn_filter(2, (3, 3)))
    with pytest.raises(GeometryError):
        lcn_mean(w, be.xp.zeros((1, 3, 5, 5)))                  # C mismatch
    with pytest.raises(GeometryError):
        lcn_mean(w, be.xp.zeros((1, 2, 2, 5)))                  # chunk smaller than the filter
    with pytest.raises(GeometryError):
        lcn_mean_adjoint(w, be.xp.zeros((1, 1, 4, 3)), (1, 2, 5, 5))


# ----------------------------------------------------------------------------- staged == single

def tiles(cuts, n):
    edges = [0, *cuts, n]
    return list(zip(edges[:-1], edges[1:]))


@pytest.mark.parametrize("row_cuts, col_cuts", [
    ((), (4,)),            # 2 tiles along x (the neon 1x2 case)
    ((3,), (4,)),          # 2 x 2 grid, uneven tiles
    ((), (1, 2, 6)),       # 1-column tiles, narrower than the 2-column halo of a 5-wide filter
])
@pytest.mark.parametrize("B", [1, 2])
def test_staged_equals_single_process(row_cuts, col_cuts, B, be):
    """The oracle of the distributed layer: every exchange is emulated by slicing the zero-padded
    global array (the chunk of tile [r0:r1, q0:q1] is padded[r0:r1+fh-1, q0:q1+fw-1]), every
    adjoint exchange by scatter-adding chunk gradients into a global padded array and keeping its
    interior (the padding belongs to nobody)."""
    fh, fw = 3, 5
    C, H, W = 2, 7, 9
    (pt, _), (pl, _) = lcn_pad((fh, fw))
    rng = np.random.default_rng(9)
    x = blank_regions_input(B, C, H, W, seed=10)
    x[:, :, 6:, :] = rng.uniform(0, 1, (B, C, 1, W))
    e = rng.standard_normal(x.shape)
    w = lcn_filter(C, (fh, fw))
    y_ref, cache = lcn_fprop(x, w)                  # numpy reference
    gx_ref = lcn_bprop(e, cache, w)
    xp = be.xp                                      # the staged version runs on the backend
    x, e, w = be.asarray(x), be.asarray(e), be.asarray(w)

    grid = [(r, q) for r in tiles(row_cuts, H) for q in tiles(col_cuts, W)]
    pad = lambda a: xp.pad(a, ((0, 0), (0, 0), lcn_pad((fh, fw))[0], lcn_pad((fh, fw))[1]))
    tile = lambda a, r, q: a[:, :, r[0]:r[1], q[0]:q[1]]
    chunk = lambda ap, r, q: ap[:, :, r[0]:r[1] + fh - 1, q[0]:q[1] + fw - 1]

    def exchange_adjoint(chunks):
        acc = xp.zeros((B, C, H + fh - 1, W + fw - 1))
        for (r, q), g in zip(grid, chunks):
            acc[:, :, r[0]:r[1] + fh - 1, q[0]:q[1] + fw - 1] += g
        return acc[:, :, pt:pt + H, pl:pl + W]

    # forward, stage 1 / exchange / stage 2
    xp_ = pad(x)
    s = xp.zeros_like(x)
    for r, q in grid:
        s[:, :, r[0]:r[1], q[0]:q[1]] = lcn_fprop_subtractive(tile(x, r, q), chunk(xp_, r, q), w)
    sp = pad(s)
    y = xp.zeros_like(x)
    d = {}
    for r, q in grid:
        y[:, :, r[0]:r[1], q[0]:q[1]], d[r, q] = lcn_fprop_divisive(tile(s, r, q), chunk(sp, r, q), w)
    np.testing.assert_allclose(be.to_host(y), y_ref, rtol=1e-12, atol=1e-13)

    # backward: divisive / adjoint exchange / subtractive / adjoint exchange
    gs = xp.zeros_like(x)
    gs_chunks = []
    for r, q in grid:
        direct, gc = lcn_bprop_divisive(tile(e, r, q), tile(s, r, q), chunk(sp, r, q), d[r, q], w)
        gs[:, :, r[0]:r[1], q[0]:q[1]] = direct
        gs_chunks.append(gc)
    gs += exchange_adjoint(gs_chunks)
    gx = xp.zeros_like(x)
    gx_chunks = []
    for r, q in grid:
        direct, gc = lcn_bprop_subtractive(tile(gs, r, q), chunk(xp_, r, q).shape, w)
        gx[:, :, r[0]:r[1], q[0]:q[1]] = direct
        gx_chunks.append(gc)
    gx += exchange_adjoint(gx_chunks)
    np.testing.assert_allclose(be.to_host(gx), gx_ref, rtol=1e-12, atol=1e-13)
