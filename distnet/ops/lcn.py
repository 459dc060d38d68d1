"""Local contrast normalisation (neon's ``LCNLayer``,
docs/neon-semantics.md#local-contrast-normalisation): "same" size, stride 1, one Gaussian filter
``w (C, fh, fw)`` spanning all C maps and producing a single map.

Single process, with ``M(z) = lcn_mean(w, pad(z))`` (zero padding by :func:`lcn_pad`)::

    m = M(x);  s = x - m;  v = M(s**2);  d = sqrt(v), d := 1 where d == 0;  y = s / d

A distributed layer computes the same from *chunks* (its tile + ghost rows/cols from other
ranks + zero padding on global-border sides), with an exchange between the two stages, and the
adjoint exchange (ghost gradients sent back and *added* to their owners) between the backward
stages::

    x_chunk = exchange(x_tile)
    s_tile = lcn_fprop_subtractive(x_tile, x_chunk, w)
    s_chunk = exchange(s_tile)
    y_tile, d = lcn_fprop_divisive(s_tile, s_chunk, w)
    ...
    gs_direct, gs_chunk = lcn_bprop_divisive(e, s_tile, s_chunk, d, w)
    gs_tile = gs_direct + exchange_adjoint(gs_chunk)
    gx_direct, gx_chunk = lcn_bprop_subtractive(gs_tile, x_chunk.shape, w)
    gx_tile = gx_direct + exchange_adjoint(gx_chunk)

:func:`lcn_fprop` / :func:`lcn_bprop` are exactly this with identity exchanges (one tile).

The gradient is the **exact** one. neon v0.4 writes the direct term e*y/s with s == 0 replaced
by 1, which gives 0 instead of e/d wherever s == 0 exactly (blank image regions, e.g. MNIST
borders); distnet uses e/d everywhere, which matches central differences there
(docs/neon.md#differences-in-what-is-computed).

Pure math: no parameters, no communication; numpy or cupy through ``get_array_module``. On a
device the mean, its adjoint and the divisive stage's per-pixel factors are fused kernels
(:mod:`distnet.ops.cuda.lcn`: one launch each instead of one per filter tap, the same bits).
"""
from typing import NamedTuple

import numpy as np

from ..backend import get_array_module
from ..errors import GeometryError
from ..geometry.window import same_padding
from . import dispatch
from .cuda import lcn as cuda_lcn


# ---------------------------------------------------------------------------------------------
# filter and padding
# ---------------------------------------------------------------------------------------------

def lcn_filter(C, fshape, dtype=np.float64):
    """neon's normalised Gaussian LCN filter, a numpy array ``(C, fh, fw)`` of ``dtype``.

    mx = fw//2, my = fh//2, sigma = sqrt(mx^2 + my^2)/3,
    g[a, b] = exp(-((b - mx)^2 + (a - my)^2) / (2 sigma^2)),  w[c] = g / (C * sum g)  for every c,
    so ``w.sum() == 1``. For 3x3, g/sum(g) = centre 0.682113, edge 0.071894, corner 0.007578.
    A 1x1 filter (sigma = 0, where neon's formula is 0/0) is the limit, the identity tap 1/C.

    Raises :class:`GeometryError` unless both sizes are odd and positive (the output must be
    centred on its input pixel) and C >= 1.
    """
    fh, fw = (int(f) for f in fshape)
    if fh < 1 or fw < 1 or fh % 2 == 0 or fw % 2 == 0:
        raise GeometryError(f"LCN filter sizes must be odd and positive, got fshape={fh}x{fw}")
    if int(C) < 1:
        raise GeometryError(f"LCN needs at least one input map, got C={C}")
    mx, my = fw // 2, fh // 2
    sigma = np.sqrt(mx * mx + my * my) / 3.0
    a = np.arange(fh, dtype=np.float64)[:, None]
    b = np.arange(fw, dtype=np.float64)[None, :]
    if sigma == 0.0:
        g = np.ones((1, 1))
    else:
        g = np.exp(-((b - mx) ** 2 + (a - my) ** 2) / (2.0 * sigma * sigma))
    g = g / (int(C) * g.sum())          # computed in float64, then cast once
    return np.ascontiguousarray(np.broadcast_to(g, (int(C), fh, fw))).astype(dtype)


def lcn_pad(fshape):
    """Zero padding ``((top, bottom), (left, right))`` that keeps the size at stride 1 (neon's
    rule per axis: lo = f - 1 - (f - 1)//2, hi = (f - 1)//2; equal for odd f). It is also the
    halo width a distributed LCN needs from its neighbours on interior sides."""
    fh, fw = fshape
    return same_padding(int(fh)), same_padding(int(fw))


# ---------------------------------------------------------------------------------------------
# the weighted local mean (single output map) and its adjoint
# ---------------------------------------------------------------------------------------------

def shared_map(w):
    """The filter to hand to the LCN ops: ``w[:1]`` ``(1, fh, fw)`` if every channel of
    ``w (C, fh, fw)`` uses the same map (always, for :func:`lcn_filter`), else ``w``. Checked
    once by the caller (on a GPU the check waits for the device), not at every call."""
    xp = get_array_module(w)
    return w[:1] if w.shape[0] == 1 or bool(xp.all(w == w[:1])) else w


def _shared_map(w):
    """``w[0]`` when every channel uses the same map: ``w`` is ``(1, fh, fw)`` (see
    :func:`shared_map`), or a numpy ``(C, fh, fw)`` with equal maps (checked here: on the host
    that costs nothing); else None. Then sum_c w[c] * x[c] = w[0] * sum_c x[c]: the channel sum
    is done once instead of once per filter tap, which makes the mean C times cheaper."""
    if w.shape[0] == 1:
        return w[0]
    if dispatch.reads_without_waiting(get_array_module(w)) and bool(np.all(w == w[:1])):
        return w[0]
    return None


def _check_mean(w, chunk_shape):
    C, fh, fw = w.shape
    B, Cx, Hc, Wc = chunk_shape
    if C not in (1, Cx):
        raise GeometryError(f"LCN filter has {C} maps but the input has {Cx}")
    if Hc < fh or Wc < fw:
        raise GeometryError(f"LCN chunk {Hc}x{Wc} is smaller than the {fh}x{fw} filter")
    return Hc - fh + 1, Wc - fw + 1


def _check_adjoint(w, gm, chunk_shape):
    h, wd = _check_mean(w, chunk_shape)
    if tuple(gm.shape) != (chunk_shape[0], 1, h, wd):
        raise GeometryError(f"LCN mean gradient {tuple(gm.shape)} does not fit chunk {tuple(chunk_shape)}")
    return h, wd


@dispatch.op
def lcn_mean(w, x_chunk):
    """Valid single-map correlation (the weighted local mean).

    w : (C, fh, fw), or (1, fh, fw): one map for every channel; x_chunk : (B, C, Hc, Wc)
    returns m : (B, 1, Hc-fh+1, Wc-fw+1),
      m[b, 0, r, q] = sum_{c,a,beta} w[c, a, beta] * x_chunk[b, c, r+a, q+beta]
    """
    xp = get_array_module(x_chunk)
    C, fh, fw = w.shape
    h, wd = _check_mean(w, x_chunk.shape)
    B = x_chunk.shape[0]
    m = xp.zeros((B, h, wd), dtype=xp.result_type(w.dtype, x_chunk.dtype))
    g = _shared_map(w)
    if g is not None:
        z = x_chunk.sum(axis=1)                                     # (B, Hc, Wc)
        for a in range(fh):
            for b in range(fw):
                m += g[a, b] * z[:, a:a + h, b:b + wd]
    else:
        for a in range(fh):
            for b in range(fw):
                m += xp.einsum("bchw,c->bhw", x_chunk[:, :, a:a + h, b:b + wd], w[:, a, b])
    return m[:, None]


@lcn_mean.kernel
def lcn_mean(w, x_chunk):               # one launch instead of one per tap
    return cuda_lcn.mean(w, x_chunk, *_check_mean(w, x_chunk.shape))


@dispatch.op
def lcn_mean_adjoint(w, gm, chunk_shape):
    """Adjoint of :func:`lcn_mean`: scatter the single map back through the same weights to
    every channel.

    w : (C, fh, fw) or (1, fh, fw) (as :func:`lcn_mean`), gm : (B, 1, h, wd),
    chunk_shape : (B, C, h+fh-1, wd+fw-1)
    returns g_chunk : (B, C, Hc, Wc),
      g_chunk[b, c, r+a, q+beta] += w[c, a, beta] * gm[b, 0, r, q]
    """
    xp = get_array_module(gm)
    C, fh, fw = w.shape
    B = chunk_shape[0]
    h, wd = _check_adjoint(w, gm, chunk_shape)
    dtype = xp.result_type(w.dtype, gm.dtype)
    g = _shared_map(w)
    if g is not None:
        G = xp.zeros((B, 1) + tuple(chunk_shape[2:]), dtype=dtype)   # one map, then copy to C
        for a in range(fh):
            for b in range(fw):
                G[:, :, a:a + h, b:b + wd] += g[a, b] * gm
        out = xp.empty(tuple(chunk_shape), dtype=dtype)
        out[...] = G
        return out
    out = xp.zeros(tuple(chunk_shape), dtype=dtype)
    for a in range(fh):
        for b in range(fw):
            out[:, :, a:a + h, b:b + wd] += w[:, a, b][None, :, None, None] * gm
    return out


@lcn_mean_adjoint.kernel
def lcn_mean_adjoint(w, gm, chunk_shape):       # one launch (a gather) instead of one per tap
    _check_adjoint(w, gm, chunk_shape)
    return cuda_lcn.mean_adjoint(w, gm, chunk_shape)


# ---------------------------------------------------------------------------------------------
# staged forward and backward
# ---------------------------------------------------------------------------------------------

def lcn_fprop_subtractive(x_tile, x_chunk, w):
    """Stage 1: ``s = x_tile - lcn_mean(w, x_chunk)``.

    x_tile : (B, C, h, wd); x_chunk : (B, C, h+fh-1, wd+fw-1), the tile at offset
    ``(top, left)`` of :func:`lcn_pad` plus ghosts / zero padding around it
    returns s_tile : (B, C, h, wd)
    """
    return x_tile - lcn_mean(w, x_chunk)


@dispatch.op
def lcn_fprop_divisive(s_tile, s_chunk, w):
    """Stage 2: ``v = lcn_mean(w, s_chunk**2)``, ``d = sqrt(v)`` with ``d := 1`` where
    ``d == 0`` exactly (no epsilon, no threshold: neon's rule), ``y = s_tile / d``.

    s_tile : (B, C, h, wd), s_chunk : (B, C, h+fh-1, wd+fw-1) (exchange of s_tile)
    returns (y, d): y : (B, C, h, wd), d : (B, 1, h, wd) (keep d for the backward pass)
    """
    xp = get_array_module(s_chunk)
    d = xp.sqrt(lcn_mean(w, s_chunk * s_chunk))
    # where(), not d[d == 0] = 1: a boolean-mask assignment waits for the device (its size)
    d = xp.where(d == 0, d.dtype.type(1), d)
    return s_tile / d, d


@lcn_fprop_divisive.kernel
def lcn_fprop_divisive(s_tile, s_chunk, w):
    """The squares, the mean, ``sqrt`` and the 1s in one launch."""
    d = cuda_lcn.mean(w, s_chunk, *_check_mean(w, s_chunk.shape), divisor=True)
    return s_tile / d, d


@dispatch.op
def lcn_bprop_divisive(e, s_tile, s_chunk, d, w):
    """Backward of stage 2, given ``e = dJ/dy (B, C, h, wd)``.

    returns (gs_direct, gs_chunk):
      gs_direct : (B, C, h, wd) = e / d, the term through the numerator, on the tile;
      gs_chunk  : (B, C, h+fh-1, wd+fw-1) = -s_chunk * lcn_mean_adjoint(w, A), the term through
                  d, on the chunk, with A = sum_c e*s_tile / d^3 (B, 1, h, wd).
    dJ/ds_tile = gs_direct + exchange_adjoint(gs_chunk).

    Exact gradient: the direct term is e/d everywhere, also where s == 0 (neon v0.4 gives 0
    there). Where v == 0 (d replaced by 1), y is the constant 0 branch: with a
    positive centre tap (always, for :func:`lcn_filter`: it is the largest weight), v == 0
    forces s_tile == 0 at that pixel, so A == 0 and the d-path contributes nothing. (At v == 0
    the true function is not differentiable; this is the gradient of the branch taken.)
    """
    gs_direct = e / d
    A = (e * s_tile).sum(axis=1, keepdims=True) / (d * d * d)
    # d(d)/d(v) = 1/(2d) and d(s^2)/ds = 2s cancel the 1/2 and 2: gs = -s * M^T(A)
    gs_chunk = lcn_mean_adjoint(w, -A, s_chunk.shape)
    gs_chunk *= s_chunk
    return gs_direct, gs_chunk


@lcn_bprop_divisive.kernel
def lcn_bprop_divisive(e, s_tile, s_chunk, d, w):
    """``-A``, then the adjoint times ``s_chunk``: two launches."""
    gs_direct = e / d
    gm = cuda_lcn.divisive_gain(e, s_tile, d)
    _check_adjoint(w, gm, s_chunk.shape)
    return gs_direct, cuda_lcn.mean_adjoint(w, gm, s_chunk.shape, factor=s_chunk)


def lcn_bprop_subtractive(gs_tile, x_chunk_shape, w):
    """Backward of stage 1, given the *complete* ``gs_tile = dJ/ds (B, C, h, wd)`` (after the
    adjoint exchange of the divisive stage).

    returns (gx_direct, gx_chunk):
      gx_direct : (B, C, h, wd) = gs_tile itself (**not a copy**), the identity path x -> s;
      gx_chunk  : x_chunk_shape = -lcn_mean_adjoint(w, sum_c gs_tile), the path through m.
    dJ/dx_tile = gx_direct + exchange_adjoint(gx_chunk).
    """
    gx_chunk = lcn_mean_adjoint(w, -gs_tile.sum(axis=1, keepdims=True), x_chunk_shape)
    return gs_tile, gx_chunk


# ---------------------------------------------------------------------------------------------
# single process: identity exchanges
# ---------------------------------------------------------------------------------------------

class LCNCache(NamedTuple):
    """What :func:`lcn_bprop` needs from :func:`lcn_fprop`."""
    s: object          # (B, C, H, W)   x - m
    s_chunk: object    # (B, C, H+fh-1, W+fw-1)   zero-padded s
    d: object          # (B, 1, H, W)   divisor (1 where v == 0)


def _pad(x, pads):
    xp = get_array_module(x)
    return xp.pad(x, ((0, 0), (0, 0)) + tuple(pads))


def _add_interior(tile, chunk, pads):
    """Identity adjoint exchange on one process: the padding part of a chunk gradient belongs
    to nobody (it was zeros), so only the interior is added to the tile."""
    (top, _), (left, _) = pads
    h, wd = tile.shape[2:]
    return tile + chunk[:, :, top:top + h, left:left + wd]


def lcn_fprop(x, w):
    """Single-process LCN. x : (B, C, H, W), w : (C, fh, fw) -> (y (B, C, H, W), LCNCache)."""
    pads = lcn_pad(w.shape[1:])
    s = lcn_fprop_subtractive(x, _pad(x, pads), w)
    s_chunk = _pad(s, pads)
    y, d = lcn_fprop_divisive(s, s_chunk, w)
    return y, LCNCache(s, s_chunk, d)


def lcn_bprop(e, cache, w):
    """Single-process LCN backward (exact gradient). e : (B, C, H, W) = dJ/dy -> dJ/dx (B, C, H, W)."""
    pads = lcn_pad(w.shape[1:])
    gs_direct, gs_chunk = lcn_bprop_divisive(e, cache.s, cache.s_chunk, cache.d, w)
    gs = _add_interior(gs_direct, gs_chunk, pads)
    gx_direct, gx_chunk = lcn_bprop_subtractive(gs, cache.s_chunk.shape, w)
    return _add_interior(gx_direct, gx_chunk, pads)
