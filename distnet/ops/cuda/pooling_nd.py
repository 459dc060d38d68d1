"""Pooling kernels on lines and volumes (``(B, C, L)``, ``(B, C, D, H, W)``): the kernels of
:mod:`.pooling` generated for any number of spatial axes from the shared window loops
(:func:`~distnet.ops.cuda.windows.item`, :func:`~distnet.ops.cuda.windows.covering`).

The same contract as the image kernels: a forward thread computes one output element, scanning
its window's taps in C order (the order of the numpy code's tap slabs); a backward thread
computes one input element, gathering the windows that cover it in increasing tap order from
0; no fused multiply-adds, so float32 and float64 results equal the numpy code's bit for bit.
Images keep their own kernels (:mod:`.pooling`, with the large-plane row-maxima order).
"""
import re

import numpy as np

from .launch import Kernel, element_strides, source, strided
from .pooling import _MAX_STEP, _batch_inner
from .windows import covering, dot, item, numbered

#: The numbers of spatial axes generated here (images: :mod:`.pooling`).
AXES = (1, 3)


class _Names:
    """The C names of an ``nd``-axis pooling kernel: window sizes ``f*``, strides ``s*``,
    output counts ``no*`` and input sizes ``ni*``, window indices ``i*``, taps ``u*``, input
    positions ``p*``, the padding bounds ``lo*`` / ``hi*``, and each array's element strides
    (``xb, xc, x_0, ...``)."""

    def __init__(self, nd):
        self.nd = nd
        self.f, self.s, self.no, self.ni, self.i, self.u, self.p, self.lo, self.hi = (
            numbered(n, nd) for n in ("f", "s", "no", "ni", "i", "u", "p", "lo", "hi"))

    def strides(self, a):
        return (f"{a}b", f"{a}c") + numbered(f"{a}_", self.nd)

    def at(self, a, pos):
        """The element offset in array ``a`` of position ``pos`` (names) of batch ``b``,
        channel ``c``."""
        return f"{a}b * b + {a}c * c + {dot(pos, numbered(f'{a}_', self.nd))}"

    def taps(self, body):
        """``body`` for every tap ``u`` in C order, with ``p`` (the input position of window
        ``i``), ``off`` (its offset in ``x`` from the map's start) and, if ``body`` reads it,
        ``k`` (the flat tap)."""
        lines, k = [], self.u[0]
        for d in range(self.nd):
            lines.append("    " * d + f"for (long long {self.u[d]} = 0; {self.u[d]} < {self.f[d]}; ++{self.u[d]}) {{")
            if d:
                k = f"({k}) * {self.f[d]} + {self.u[d]}"
        pad = "    " * self.nd
        lines += [pad + f"const long long {p} = {i} * {s} + {u};"
                  for p, i, s, u in zip(self.p, self.i, self.s, self.u)]
        lines.append(pad + f"const long long off = {dot(self.p, numbered('x_', self.nd))};")
        if re.search(r"\bk\b", body):
            lines.append(pad + f"const long long k = {k};")
        lines += [pad + line for line in body.strip("\n").splitlines()]
        lines += ["    " * d + "}" for d in reversed(range(self.nd))]
        return "\n".join(lines)


def _forward(name, nd, arrays, scalars, before, tap, after, strides):
    n = _Names(nd)
    params = arrays + ("B", "C") + n.no + n.f + n.s + scalars + tuple(x for a in strides for x in n.strides(a))
    return source(name, params, (item("e", n.i, n.no, "b", "c", batch_inner="batch_inner"),
                                 "const T* base = x + b * xb + c * xc;", before, n.taps(tap),
                                 after.replace("OUT", n.at("y", n.i)).replace("ARG", n.at("a", n.i))),
                  item="e")


def _backward(name, nd, arrays, scalars, before, gather, after, strides, flat=None):
    n = _Names(nd)
    params = (arrays + ("B", "C") + n.ni + n.no + n.f + n.s + scalars
              + tuple(x for a in strides for x in n.strides(a)))
    loop = covering(gather.replace("G", n.at("g", n.i)).replace("A", n.at("a", n.i))
                    .replace("Y", n.at("y", n.i)),
                    n.p, n.f, n.s, n.no, n.i, n.u, flat=flat)
    return source(name, params, (item("e", n.p, n.ni, "b", "c", batch_inner="batch_inner"), before, loop,
                                 after.replace("DX", n.at("o", n.p)).replace("X", n.at("x", n.p))),
                  item="e")


def _kernels(nd):
    n = _Names(nd)
    inside = " && ".join(f"{p} >= {lo} && {p} < {hi}" for p, lo, hi in zip(n.p, n.lo, n.hi))
    maxf = {idx: Kernel(f"distnet_maxpool{nd}d_fprop_{tag}", _MAX_STEP + _forward(
        f"distnet_maxpool{nd}d_fprop_{tag}", nd, ("T* y", f"{idx}* arg", "const T* x"),
        n.lo + n.hi + ("const T lowest", "batch_inner"), "T m = lowest;\nlong long kk = 0;",
        f"const T v = ({inside}) ? base[off] : lowest;   // padding never wins\n"
        "distnet_max_step(&m, &kk, v, k);",
        f"y[OUT] = m;\narg[ARG] = ({idx})kk;", "yax")) for idx, tag in (("unsigned char", "u8"), ("int", "i32"))}
    disjoint = " && ".join(f"{s} >= {f}" for s, f in zip(n.s, n.f))
    maxb = {idx: Kernel(f"distnet_maxpool{nd}d_bprop_{tag}", _backward(
        f"distnet_maxpool{nd}d_bprop_{tag}", nd, ("T* o", "const T* g", f"const {idx}* a"), ("batch_inner",),
        f"const bool disjoint = {disjoint};\nT acc = 0;",
        "const T t = g[G] * (T)(a[A] == k);\nacc = disjoint ? t : acc + t;", "o[DX] = acc;", "oga", flat="k"))
        for idx, tag in (("unsigned char", "u8"), ("int", "i32"))}
    return {
        "maxpool_fprop": {np.dtype(np.uint8): maxf["unsigned char"], np.dtype(np.int32): maxf["int"]},
        "maxpool_bprop": {np.dtype(np.uint8): maxb["unsigned char"], np.dtype(np.int32): maxb["int"]},
        # the numpy code copies the first tap's slab, then adds the others
        "avgpool_fprop": Kernel(f"distnet_avgpool{nd}d_fprop", _forward(
            f"distnet_avgpool{nd}d_fprop", nd, ("T* y", "const T* x"), ("const T scale", "batch_inner"),
            "T acc = 0;", "acc = k ? acc + base[off] : base[off];", "y[OUT] = acc * scale;", "yx")),
        "avgpool_bprop": Kernel(f"distnet_avgpool{nd}d_bprop", _backward(
            f"distnet_avgpool{nd}d_bprop", nd, ("T* o", "const T* g"), ("const T scale", "batch_inner"),
            "T acc = 0;", "acc += g[G] * scale;", "o[DX] = acc;", "og")),
        "l2pool_fprop": Kernel(f"distnet_l2pool{nd}d_fprop", _forward(
            f"distnet_l2pool{nd}d_fprop", nd, ("T* y", "const T* x"), ("batch_inner",),
            "T acc = 0;", "const T v = base[off];\nacc += v * v;", "y[OUT] = sqrt(acc);", "yx")),
        # the sum over the windows that read the pixel of dy / yhat (an all-zero window: no NaN)
        "l2pool_bprop": Kernel(f"distnet_l2pool{nd}d_bprop", _backward(
            f"distnet_l2pool{nd}d_bprop", nd, ("T* o", "const T* x", "const T* y", "const T* g"),
            ("batch_inner",), "T acc = 0;",
            "const T yv = y[Y];\nacc += g[G] / (yv == 0 ? (T)1 : yv);", "o[DX] = x[X] * acc;", "oxyg")),
    }


#: Number of spatial axes -> op name -> kernel (max pooling: argmax dtype -> kernel).
KERNELS = {nd: _kernels(nd) for nd in AXES}


def _run(op, out, arrays, fshape, stride, *scalars, window=None):
    """Launch ``op`` over the elements of ``out``: the arrays, their sizes (the input's for a
    backward op: ``window`` is then the window counts), ``fshape``, ``stride``, ``scalars``,
    whether ``out`` is walked batch innermost, and the arrays' element strides."""
    nd = out.ndim - 2
    kernel = KERNELS[nd][op]
    if isinstance(kernel, dict):
        kernel = kernel[arrays[-1].dtype if op == "maxpool_bprop" else arrays[1].dtype]
    B, C = out.shape[:2]
    sizes = tuple(out.shape[2:]) + (tuple(window) if window is not None else ())
    kernel(out.size, *map(strided, arrays), B, C, *sizes, *map(int, fshape), *map(int, stride), *scalars,
           _batch_inner(out), *(s for a in arrays for s in element_strides(a)))
    return out


def maxpool_fprop(x, y, argmax, fshape, stride, inside, rows_first=False):
    """:func:`.pooling.maxpool_fprop` on ``nd`` axes (``inside``: ``(start, stop)`` per axis,
    flat; taps scanned in C order)."""
    lo, hi = tuple(map(int, inside[::2])), tuple(map(int, inside[1::2]))
    _run("maxpool_fprop", y, (y, argmax, x), fshape, stride, *lo, *hi, -float("inf"))
    return y, argmax


def maxpool_bprop(dy, argmax, dx, fshape, stride):
    """:func:`.pooling.maxpool_bprop` on ``nd`` axes."""
    return _run("maxpool_bprop", dx, (dx, dy, argmax), fshape, stride, window=dy.shape[2:])


def avgpool_fprop(x, y, fshape, stride):
    """:func:`.pooling.avgpool_fprop` on ``nd`` axes (times ``1 / prod(fshape)``)."""
    return _run("avgpool_fprop", y, (y, x), fshape, stride, 1.0 / int(np.prod(fshape)))


def avgpool_bprop(dy, dx, fshape, stride):
    """:func:`.pooling.avgpool_bprop` on ``nd`` axes."""
    return _run("avgpool_bprop", dx, (dx, dy), fshape, stride, 1.0 / int(np.prod(fshape)), window=dy.shape[2:])


def l2pool_fprop(x, y, fshape, stride):
    """:func:`.pooling.l2pool_fprop` on ``nd`` axes."""
    return _run("l2pool_fprop", y, (y, x), fshape, stride)


def l2pool_bprop(x, y, dy, dx, fshape, stride):
    """:func:`.pooling.l2pool_bprop` on ``nd`` axes."""
    return _run("l2pool_bprop", dx, (dx, x, y, dy), fshape, stride, window=dy.shape[2:])
