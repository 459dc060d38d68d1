"""Upsampling by an integer factor per spatial axis, nearest and linear, forward and backward,
on ``(B, C, *spatial)`` arrays of any number of spatial axes.

* **nearest**: output ``o`` is input ``floor(o / f)`` (PyTorch's ``mode='nearest'`` with an
  integer ``scale_factor``).
* **linear**, PyTorch's ``align_corners=False`` (``'linear'``, ``'bilinear'``, ``'trilinear'``):
  output ``o`` sits at the input coordinate ``src = max((o + 0.5) / f - 0.5, 0)`` and is
  ``l0 * x[i0] + l1 * x[i1]`` with ``i0 = floor(src)``, ``i1 = min(i0 + 1, L - 1)``,
  ``l1 = src - i0``, ``l0 = 1 - l1``. In integers: ``r = max(2 o + 1 - f, 0)``,
  ``i0 = r // (2 f)``, ``l1 = (r mod 2 f) / (2 f)`` (one rounding). Axes are interpolated one
  after the other, the last axis first, which is PyTorch's grouping
  ``l0_y (l0_x x00 + l1_x x01) + l1_y (l0_x x10 + l1_x x11)``. The backward goes axis by axis
  too, the first first; along an axis, input ``i`` gathers the outputs that may read it
  (:func:`slots`), each times its weight for ``i`` (0 where it reads another input).

Every op takes a :class:`~.section.Section` (default: the whole input): the chunk ``x`` holds the
input positions from ``section.in_start`` on, and the call computes the global outputs of
``section.out_start`` / ``out_shape``, so that a rank computes its output tile from its chunk.
The linear rule clamps at the global border, hence ``section.length``.

On a device that launches kernels (:mod:`distnet.ops.dispatch`) each op is one launch of
:mod:`distnet.ops.cuda.upsample`, which adds the array code's terms in its order: the same bits.
"""
import numpy as np

from ...backend import get_array_module
from ...errors import GeometryError
from .. import dispatch
from ..cuda import upsample as cuda_upsample
from ..parallel import run_split
from ..windows import tap_slices
from .section import Section


def _nearest_reads(f, length, o):
    """The first and last input that output ``o`` of nearest upsampling reads."""
    return o // f, o // f


def _linear_reads(f, length, o):
    """The first and last input that output ``o`` of linear upsampling reads."""
    i0, i1, _ = linear_weights(f, length, o)
    return int(i0), int(i1)


def _section(x_shape, factor, section, reads, dy=None):
    """``section``, or the whole computation of an input of ``x_shape``; checked: the chunk
    holds every input the section's outputs read (``reads(f, length, o)``: the first and last
    input of output ``o``), and a gradient ``dy`` (if given) has the outputs' shape."""
    nd = len(x_shape) - 2
    if len(factor) != nd or min(factor, default=1) < 1:
        raise GeometryError(f"upsampling: factors {tuple(factor)} (each >= 1) for an input of shape "
                            f"{tuple(x_shape)}")
    if section is None:
        n = tuple(x_shape[2:])
        section = Section.whole(n, tuple(a * f for a, f in zip(n, factor)))
    section.check(x_shape, "upsampling")
    for f, length, a, o0, m, n in zip(factor, *_axes(section), x_shape[2:]):
        if m and (reads(f, length, o0)[0] < a or reads(f, length, o0 + m - 1)[1] >= a + n):
            raise GeometryError(f"upsampling: the outputs {o0}..{o0 + m - 1} read inputs outside the "
                                f"chunk {a}..{a + n - 1}")
    if dy is not None and tuple(dy.shape) != tuple(x_shape[:2]) + tuple(section.out_shape):
        raise GeometryError(f"upsampling: a gradient of shape {tuple(dy.shape)} for the outputs "
                            f"{tuple(x_shape[:2]) + tuple(section.out_shape)}")
    return section


def _axes(s):
    """``(length, in_start, out_start, out_shape)`` of a section, four per-axis tuples."""
    return s.length, s.in_start, s.out_start, s.out_shape


def _output(x, section):
    """A new ``(B, C, *section.out_shape)`` array like ``x``."""
    return get_array_module(x).empty(tuple(x.shape[:2]) + tuple(section.out_shape), dtype=x.dtype)


def _takes(kernels):
    """The ``when`` of a kernel declaration: float arrays with a number of spatial axes that
    ``kernels`` (a table of :mod:`distnet.ops.cuda.upsample`) has a kernel for."""
    return lambda a, *args, **kwargs: dispatch.float_arrays(a) and a.ndim - 2 in kernels


def _args(factor, x_shape, s):
    """The per-axis arguments of :func:`distnet.ops.cuda.upsample.launch` for the section ``s``
    of an input of ``x_shape``."""
    return factor, s.length, s.in_start, s.out_start, s.out_shape, x_shape[2:]


# ------------------------------------------------------------------------------------- nearest

def _nearest_index(f, a, o0, m):
    """Along one axis: the chunk position each output ``o0 .. o0 + m - 1`` reads (numpy)."""
    return (o0 + np.arange(m)) // f - a


@dispatch.op
def nearest_fprop(x, factor, section=None):
    """``y[..., o] = x[..., floor(o / f) - in_start]`` for the outputs of ``section``: ``x (B, C,
    *n)`` -> ``(B, C, *out_shape)`` (whole: ``n * f``). Exact copies."""
    xp = get_array_module(x)
    s = _section(x.shape, factor, section, _nearest_reads)
    y = x
    for d, (f, a, o0, m) in enumerate(zip(factor, s.in_start, s.out_start, s.out_shape)):
        y = xp.take(y, xp.asarray(_nearest_index(f, a, o0, m)), axis=2 + d)
    return xp.ascontiguousarray(y)


@nearest_fprop.kernel(when=_takes(cuda_upsample.NEAREST_FPROP))
def nearest_fprop(x, factor, section=None):       # one launch
    s = _section(x.shape, factor, section, _nearest_reads)
    return cuda_upsample.launch(cuda_upsample.NEAREST_FPROP, _output(x, s), x, *_args(factor, x.shape, s))


def _placed(dy, factor, x_shape, s):
    """``dy`` put in a zero array over every output the chunk's inputs reach (``n * f`` per
    axis, from output ``in_start * f`` on)."""
    xp = get_array_module(dy)
    full = tuple(n * f for n, f in zip(x_shape[2:], factor))
    at = (slice(o0 - a * f, o0 - a * f + m) for o0, a, f, m in zip(s.out_start, s.in_start, factor, s.out_shape))
    z = xp.zeros(tuple(dy.shape[:2]) + full, dtype=dy.dtype)
    z[(Ellipsis,) + tuple(at)] = dy
    return z


@dispatch.op
def nearest_bprop(dy, factor, x_shape, section=None):
    """Adjoint of :func:`nearest_fprop`: ``dx (x_shape)``, each input the sum of the gradients
    of the outputs it was copied to, added tap by tap (offsets ``u`` in C order) from 0."""
    xp = get_array_module(dy)
    s = _section(x_shape, factor, section, _nearest_reads, dy)
    z = _placed(dy, factor, x_shape, s)
    dx = xp.zeros(x_shape, dtype=dy.dtype)
    for _, slices in tap_slices(x_shape[2:], factor, factor):
        dx += z[(Ellipsis,) + slices]
    return dx


@nearest_bprop.kernel(when=_takes(cuda_upsample.NEAREST_BPROP))
def nearest_bprop(dy, factor, x_shape, section=None):    # one launch
    s = _section(x_shape, factor, section, _nearest_reads, dy)
    dx = get_array_module(dy).empty(x_shape, dtype=dy.dtype)
    return cuda_upsample.launch(cuda_upsample.NEAREST_BPROP, dx, dy, *_args(factor, x_shape, s))


# -------------------------------------------------------------------------------------- linear

def linear_weights(f, length, o):
    """Along one axis, for the global outputs ``o`` (numpy ints) of linear upsampling by ``f`` of
    ``length`` inputs: ``(i0, i1, r)`` (numpy int64), the two global inputs each output reads
    and the numerator of ``l1 = r / (2 f)``."""
    t = np.maximum(2 * np.asarray(o, dtype=np.int64) + 1 - f, 0)
    i0 = t // (2 * f)
    return i0, np.minimum(i0 + 1, length - 1), t % (2 * f)


def _weights(xp, dtype, r, f):
    """``(l0, l1)`` as ``xp`` arrays of ``dtype``: ``l1 = r / (2 f)`` rounded once, ``l0 = 1 - l1``."""
    l1 = xp.asarray(r).astype(dtype) / np.dtype(dtype).type(2 * f)
    return 1 - l1, l1


def _along(w, axis, nd):
    """The per-position weights ``w`` shaped to broadcast along spatial ``axis`` of
    ``(B, C, *spatial)`` arrays."""
    return w.reshape((-1,) + (1,) * (nd - 1 - axis))


def _runs(ok):
    """``[(start, stop), ...]``: the maximal runs of positions ``start .. stop - 1`` in which
    ``ok[j]`` holds for every ``start < j < stop`` (``ok (n,)`` bool, numpy; ``ok[0]`` unused),
    covering ``0 .. n - 1`` in order."""
    breaks = np.flatnonzero(~ok[1:]) + 1
    edges = [0] + breaks.tolist() + [len(ok)]
    return [(b, e) for b, e in zip(edges[:-1], edges[1:]) if e > b]


def _steps(index, step):
    """``(n,)`` bool: ``index[j] - index[j - 1] == step`` (``[0]``: True)."""
    return np.concatenate([[True], np.diff(index) == step])


def _at(nd, axis, where):
    """The index of ``where`` (a slice or an index array) along spatial ``axis``."""
    return (slice(None),) * (2 + axis) + (where,)


def _interpolate_axis(xp, y, axis, f, length, a, o0, m, out=None):
    """One axis of :func:`linear_fprop`: the outputs ``o0 .. o0 + m - 1`` along spatial ``axis``
    of the chunk ``y`` (inputs from ``a`` on), ``take(i0) * l0 + take(i1) * l1``. The outputs of
    one phase ``o mod f`` read consecutive inputs with the same weights away from the borders:
    those are two slices times two numbers, the same products and sum as gathering them. Into
    ``out`` if given."""
    nd = y.ndim - 2
    if out is None:
        out = xp.empty(y.shape[:2 + axis] + (m,) + y.shape[3 + axis:], dtype=y.dtype)
    i0, i1, r = linear_weights(f, length, o0 + np.arange(m))
    l0, l1 = _weights(np, y.dtype, r, f)
    for p in range(min(f, m)):
        q = np.arange(p, m, f)
        ok = _steps(i0[q], 1) & _steps(i1[q], 1) & np.concatenate([[True], r[q][1:] == r[q][:-1]])
        for b, e in _runs(ok):
            j = q[b]
            if e - b < 4:        # a border: gathered
                qs = q[b:e]
                v0, v1 = (xp.take(y, xp.asarray(i[qs] - a), axis=2 + axis) for i in (i0, i1))
                w0, w1 = (_along(xp.asarray(w[qs]), axis, nd) for w in (l0, l1))
                out[_at(nd, axis, xp.asarray(qs))] = v0 * w0 + v1 * w1
                continue
            dst = out[_at(nd, axis, slice(j, q[e - 1] + 1, f))]
            s0, s1 = i0[j] - a, i1[j] - a
            xp.multiply(y[_at(nd, axis, slice(s0, s0 + e - b))], l0[j], out=dst)
            dst += y[_at(nd, axis, slice(s1, s1 + e - b))] * l1[j]
    return out


def temporaries(mode, out, factor):
    """``(forward, backward)`` elements per sample of the temporaries of the numpy upsampling of
    ``mode`` for ``out`` output elements, ``factor`` per axis. Linear, forward: on the last axis
    computed (the first) the output beside the other axes' result (``out / f0``) and one phase's
    product (at most ``out / f0``); backward, first axis first: the axis's sum and one run's
    product (``out / f0`` each). Nearest: the output, and the gradient placed into the whole
    grid."""
    if mode == "linear":
        rest = out // factor[0]
        return out + 2 * rest, 2 * rest
    return out, out


@dispatch.op
def linear_fprop(x, factor, section=None):
    """Linear upsampling (module docstring) of ``x (B, C, *n)`` for the outputs of ``section``:
    ``(B, C, *out_shape)``. Per axis, last first: ``take(i0) * l0 + take(i1) * l1``."""
    xp = get_array_module(x)
    s = _section(x.shape, factor, section, _linear_reads)
    out = _output(x, s)

    def channels(sl):                  # the kernel threads take shares of the channels
        y = x[:, sl]
        for d in reversed(range(x.ndim - 2)):
            y = _interpolate_axis(xp, y, d, factor[d], *(t[d] for t in _axes(s)), out=out[:, sl] if d == 0 else None)
    run_split(channels, x.shape[1], xp, out.size)
    return out


@linear_fprop.kernel(when=_takes(cuda_upsample.LINEAR_FPROP))
def linear_fprop(x, factor, section=None):        # one launch
    s = _section(x.shape, factor, section, _linear_reads)
    return cuda_upsample.launch(cuda_upsample.LINEAR_FPROP, _output(x, s), x, *_args(factor, x.shape, s))


def slots(f):
    """How many outputs, at most, read one input of linear upsampling by ``f``: those of the
    global outputs ``start(i - 1) .. start(i + 1) - 1``, ``start(j) = j f + f // 2`` (``j >=
    1``; 0 for ``j <= 0``: output ``o`` reads ``i0 >= j`` from ``start(j)`` on), at most
    ``2 f + f // 2`` (input 1)."""
    return 2 * f + f // 2


def _adjoint_axis(xp, g, axis, f, length, a, o0, n, out=None):
    """Adjoint of one axis of :func:`linear_fprop`: ``g`` (the outputs ``o0 ..`` along spatial
    ``axis``) -> the ``n`` chunk inputs from ``a`` on. Input ``i`` adds, for each of its
    :func:`slots` ``k`` (output ``o = start(i - 1) + k``), ``g[o] * w0`` then ``g[o] * w1``,
    ``w0 = l0`` if ``i0(o) == i`` else 0, ``w1`` likewise, from 0; outputs outside the section
    read 0. Away from the borders input ``i + 1`` reads the outputs ``f`` further on with the same
    weights: there each slot is a strided slice of ``g`` times a number, and a weight of 0 adds
    nothing (nor does it at the borders: its terms are left out there too)."""
    gi = a + np.arange(n)
    lo = np.where(gi >= 2, (gi - 1) * f + f // 2, 0)
    m, nd = g.shape[2 + axis], g.ndim - 2
    terms, ok = [], np.ones(n, bool)
    for k in range(slots(f)):
        o = lo + k
        i0, i1, r = linear_weights(f, length, o)
        l0, l1 = _weights(np, g.dtype, r, f)
        inside = (o >= o0) & (o < o0 + m)
        w0, w1 = (np.where((j == gi) & inside, w, 0).astype(g.dtype) for j, w in ((i0, l0), (i1, l1)))
        idx = np.where(inside, o - o0, 0)
        terms.append((idx, w0, w1))
        ok &= (_steps(idx, f) & np.concatenate([[True], (w0[1:] == w0[:-1]) & (w1[1:] == w1[:-1])]))
    if out is None:
        out = xp.zeros(g.shape[:2 + axis] + (n,) + g.shape[3 + axis:], dtype=g.dtype)
    else:
        out[...] = 0
    for b, e in _runs(ok):
        dst = out[_at(nd, axis, slice(b, e))]
        for idx, w0, w1 in terms:
            if e - b < 4:        # a border: gathered, a weight per input
                if (w0[b:e] != 0).any() or (w1[b:e] != 0).any():
                    v = xp.take(g, xp.asarray(idx[b:e]), axis=2 + axis)
                    dst += v * _along(xp.asarray(w0[b:e]), axis, nd)
                    dst += v * _along(xp.asarray(w1[b:e]), axis, nd)
                continue
            v = g[_at(nd, axis, slice(idx[b], idx[e - 1] + 1, f))]
            for w in (w0[b], w1[b]):
                if w != 0:
                    dst += v * w
    return out


@dispatch.op
def linear_bprop(dy, factor, x_shape, section=None):
    """Adjoint of :func:`linear_fprop`: ``dx (x_shape)`` from ``dy (B, C, *out_shape)``, axis by
    axis, first axis first (the forward's steps in reverse)."""
    xp = get_array_module(dy)
    s = _section(x_shape, factor, section, _linear_reads, dy)
    dx, nd = xp.empty(x_shape, dtype=dy.dtype), len(x_shape) - 2

    def channels(sl):                  # the kernel threads take shares of the channels
        g = dy[:, sl]
        for d in range(nd):
            g = _adjoint_axis(xp, g, d, factor[d], s.length[d], s.in_start[d], s.out_start[d], x_shape[2 + d],
                              out=dx[:, sl] if d == nd - 1 else None)
    run_split(channels, x_shape[1], xp, dy.size)
    return dx


@linear_bprop.kernel(when=_takes(cuda_upsample.LINEAR_BPROP))
def linear_bprop(dy, factor, x_shape, section=None):     # one launch
    s = _section(x_shape, factor, section, _linear_reads, dy)
    dx = get_array_module(dy).empty(x_shape, dtype=dy.dtype)
    return cuda_upsample.launch(cuda_upsample.LINEAR_BPROP, dx, dy, *_args(factor, x_shape, s))
