"""Naive loop oracles of the decoder's ops (distnet/ops/decoder), written from their definitions
(PyTorch's documentation of ConvTranspose and interpolate), for any number of spatial axes; and
the one-process oracle of a chunked call: the whole computation, sliced to a rank's tile."""
import itertools

import numpy as np


def transposed_conv(x, w, stride, pads, output_padding):
    """Input ``i``, tap ``u``: ``w[c, k, u] * x[b, c, i]`` added into output ``i*s + u - lo``."""
    B, C, *n = x.shape
    K, f = w.shape[1], w.shape[2:]
    out = [(a - 1) * s + k - lo - hi + op for a, k, s, (lo, hi), op in zip(n, f, stride, pads, output_padding)]
    y = np.zeros([B, K] + out)
    for i in itertools.product(*map(range, n)):
        for u in itertools.product(*map(range, f)):
            o = tuple(a * s + v - lo for a, s, v, (lo, _) in zip(i, stride, u, pads))
            if all(0 <= p < m for p, m in zip(o, out)):
                y[(Ellipsis,) + o] += x[(Ellipsis,) + i] @ w[(Ellipsis,) + u]
    return y


def nearest(x, factor):
    """Output ``o`` copies input ``floor(o / f)`` along every axis."""
    n = x.shape[2:]
    y = np.zeros(x.shape[:2] + tuple(a * f for a, f in zip(n, factor)))
    for o in itertools.product(*(range(a * f) for a, f in zip(n, factor))):
        y[(Ellipsis,) + o] = x[(Ellipsis,) + tuple(p // f for p, f in zip(o, factor))]
    return y


def linear(x, factor):
    """PyTorch's align_corners=False: ``src = max((o + 0.5) / f - 0.5, 0)``, the two inputs
    around it (the last one repeated at the border), weights ``1 - frac``, ``frac``; the
    product of the axes' weights over the ``2^nd`` corners."""
    n = x.shape[2:]
    y = np.zeros(x.shape[:2] + tuple(a * f for a, f in zip(n, factor)))
    for o in itertools.product(*(range(a * f) for a, f in zip(n, factor))):
        axes = []
        for p, f, L in zip(o, factor, n):
            src = max((p + 0.5) / f - 0.5, 0.0)
            i0 = int(np.floor(src))
            axes.append(((i0, 1 - (src - i0)), (min(i0 + 1, L - 1), src - i0)))
        for corner in itertools.product(*axes):
            idx = tuple(i for i, _ in corner)
            y[(Ellipsis,) + o] += np.prod([wt for _, wt in corner]) * x[(Ellipsis,) + idx]
    return y


def crop(x, lo, hi):
    """``y[o] = x[o + lo]`` where that lies inside ``x``, else 0."""
    n = x.shape[2:]
    out = tuple(a - l - h for a, l, h in zip(n, lo, hi))
    y = np.zeros(x.shape[:2] + out)
    for o in itertools.product(*map(range, out)):
        i = tuple(p + l for p, l in zip(o, lo))
        if all(0 <= p < a for p, a in zip(i, n)):
            y[(Ellipsis,) + o] = x[(Ellipsis,) + i]
    return y


def _overlap(box, n):
    """``(whole, chunk)``: the slices of the part of ``box`` inside an input of shape ``n``, in
    the input and in the chunk; None if there is none."""
    src = tuple(slice(max(a, 0), min(b, m)) for (a, b), m in zip(box.spans, n))
    if any(s.stop <= s.start for s in src):
        return None
    return (Ellipsis,) + src, (Ellipsis,) + tuple(slice(s.start - a, s.stop - a) for s, (a, _) in zip(src, box.spans))


def chunk_of(x, box):
    """The chunk ``box`` (global coordinates, may reach past ``x``) of ``x (B, C, *n)``, zero
    outside: what a rank's chunk exchange assembles."""
    out = np.zeros(x.shape[:2] + box.shape, dtype=x.dtype)
    parts = _overlap(box, x.shape[2:])
    if parts:
        out[parts[1]] = x[parts[0]]
    return out


def add_chunk(total, g, box):
    """Add a chunk gradient ``g`` (box ``box``) into ``total`` (the whole input's gradient),
    dropping what lies outside: the adjoint of :func:`chunk_of`."""
    parts = _overlap(box, total.shape[2:])
    if parts:
        total[parts[0]] += g[parts[1]]


def tile(y, box):
    """``y[..., box]``: a rank's output tile of the whole output."""
    return y[(Ellipsis,) + tuple(slice(a, b) for a, b in box.spans)]
