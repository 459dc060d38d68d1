"""Upsampling kernels: nearest and linear, forward and backward, one launch each, for 1, 2 and 3
spatial axes (generated per number of axes).

:mod:`distnet.ops.decoder.upsample` takes one copy per axis forward (nearest), two gathers and a
multiply-add per axis (linear), and a zero-filled copy plus one add per offset (nearest) or a
scatter-add per axis (linear) backward. Here:

* a **forward** thread computes one output element: nearest copies the input it reads; linear
  computes each axis's pair of inputs and weights from the output's global index (the integer
  rule of the array code, ``l1 = r / (2 f)`` in ``T``) and combines the ``2^nd`` inputs with the
  last axis innermost, the array code's grouping;
* a **backward** thread computes one input element and gathers the outputs that read it: nearest
  its ``f^nd`` offsets in C order, each 0 outside the section (as the array code's zero-filled
  copy adds); linear, per axis, the outputs that may read it (its slots) in increasing order,
  each times the weight of its first, then of its second input (0 where that is another
  input), first axis innermost: the terms of the array code's axis-by-axis adjoint, zeros
  included, in its order.

Compiled without fused multiply-adds (:mod:`~distnet.ops.cuda.launch`), every term is rounded
as numpy rounds it: the results equal the array code's bit for bit (float32 and float64). The
input is read through its strides (:func:`~distnet.ops.cuda.launch.strided`: a chunk may be a
view); the output is a new C-contiguous array. Arguments: ``f`` factors, ``L`` global input
lengths, ``a`` the chunk's first global input, ``s`` the first global output computed, ``m`` the
outputs computed and ``n`` the chunk's inputs, one per axis.
"""
from .launch import Kernel, element_strides, source, strided
from .windows import dot, item, numbered

#: Numbers of spatial axes the kernels are generated for.
AXES = (1, 2, 3)


def _names(nd):
    """The per-axis parameter names: factors, global lengths, chunk start, section start,
    outputs, chunk inputs."""
    return tuple(numbered(p, nd) for p in ("f", "L", "a", "s", "m", "n"))


def _params(nd, arrays, strides):
    f, L, a, s, m, n = _names(nd)
    return arrays + ("B", "C") + f + L + a + s + m + n + (strides + "b", strides + "c") + numbered(strides + "s", nd)


def _kernel(name, nd, arrays, strides, body):
    return Kernel(name, source(name, _params(nd, arrays, strides), body, item="e"))


def _nearest_fprop(nd):
    f, _, a, s, m, _ = _names(nd)
    o = numbered("o", nd)
    read = dot((f"((({oi} + {si}) / {fi}) - {ai})" for oi, si, fi, ai in zip(o, s, f, a)), numbered("xs", nd))
    return _kernel(f"distnet_nearest_fprop_{nd}d", nd, ("T* y", "const T* x"), "x", (
        item("e", o, m, "b", "c"),
        f"y[e] = x[b * xb + c * xc + {read}];"))


def _nearest_bprop(nd):
    f, _, a, s, m, n = _names(nd)
    i, u, p = numbered("i", nd), numbered("u", nd), numbered("p", nd)
    loops, inside = [], []
    for d in range(nd):
        loops.append(f"for (long long {u[d]} = 0; {u[d]} < {f[d]}; ++{u[d]}) {{\n"
                     f"const long long {p[d]} = ({i[d]} + {a[d]}) * {f[d]} + {u[d]} - {s[d]};")
        inside.append(f"{p[d]} >= 0 && {p[d]} < {m[d]}")
    return _kernel(f"distnet_nearest_bprop_{nd}d", nd, ("T* dx", "const T* dy"), "g", (
        item("e", i, n, "b", "c"),
        "const T* g = dy + b * gb + c * gc;",
        "T acc = 0;",
        *loops,
        f"acc += ({' && '.join(inside)}) ? g[{dot(p, numbered('gs', nd))}] : (T)0;",
        "}" * nd,
        "dx[e] = acc;"))


def _linear_axis(d, o):
    """C statements: axis ``d``'s two inputs ``j0{d}``, ``j1{d}`` (global) and weights
    ``l0{d}``, ``l1{d}`` of the output at local index ``o`` (the array code's integer rule)."""
    return (f"long long t{d} = 2 * ({o} + s{d}) + 1 - f{d};\n"
            f"if (t{d} < 0) t{d} = 0;\n"
            f"const long long j0{d} = t{d} / (2 * f{d});\n"
            f"const long long j1{d} = j0{d} + 1 < L{d} ? j0{d} + 1 : L{d} - 1;\n"
            f"const T l1{d} = (T)(t{d} % (2 * f{d})) / (T)(2 * f{d});\n"
            f"const T l0{d} = (T)1 - l1{d};")


def _blend(d, nd, offset):
    """The C expression of the interpolated value over axes ``d ..``: axis ``d``'s two inputs
    weighted, the later axes inside (the last axis innermost)."""
    if d == nd:
        return f"x[{offset}]"
    return (f"({_blend(d + 1, nd, f'{offset} + (j0{d} - a{d}) * xs{d}')}) * l0{d} + "
            f"({_blend(d + 1, nd, f'{offset} + (j1{d} - a{d}) * xs{d}')}) * l1{d}")


def _linear_fprop(nd):
    o = numbered("o", nd)
    return _kernel(f"distnet_linear_fprop_{nd}d", nd, ("T* y", "const T* x"), "x", (
        item("e", o, _names(nd)[4], "b", "c"),
        *(_linear_axis(d, o[d]) for d in range(nd)),
        f"y[e] = {_blend(0, nd, 'b * xb + c * xc')};"))


def _linear_bprop(nd):
    """Per axis, outermost the last: the :func:`~distnet.ops.decoder.upsample.slots` of input
    ``i{d}``, output ``start(i - 1) + k`` (global), its value 0 outside the section, added with
    the weight of each of its two inputs (0 unless it is ``i``): the array code's terms, in its
    order, zeros included."""
    i = numbered("i", nd)
    lines = [item("e", i, _names(nd)[5], "b", "c"), "const T* g = dy + b * gb + c * gc;"]
    for d in range(nd):
        lines += [f"const long long gi{d} = {i[d]} + a{d};",
                  f"const long long lo{d} = gi{d} >= 2 ? (gi{d} - 1) * f{d} + f{d} / 2 : 0;"]

    def level(d):
        value = (f"v{d} = g[{dot(numbered('q', nd), numbered('gs', nd))}];" if d == 0
                 else level(d - 1) + f"\nv{d} = acc{d - 1};")
        return "\n".join([
            f"T acc{d} = 0;",
            f"for (long long k{d} = 0; k{d} < 2 * f{d} + f{d} / 2; ++k{d}) {{",
            f"const long long q{d} = lo{d} + k{d} - s{d};",
            _linear_axis(d, f"q{d}"),
            f"const T w0{d} = j0{d} == gi{d} ? l0{d} : (T)0;",
            f"const T w1{d} = j1{d} == gi{d} ? l1{d} : (T)0;",
            f"T v{d} = 0;",
            f"if (q{d} >= 0 && q{d} < m{d}) {{",
            value,
            "}",
            f"acc{d} += v{d} * w0{d};",
            f"acc{d} += v{d} * w1{d};",
            "}"])
    lines += [level(nd - 1), f"dx[e] = acc{nd - 1};"]
    return _kernel(f"distnet_linear_bprop_{nd}d", nd, ("T* dx", "const T* dy"), "g", lines)


#: Number of spatial axes -> kernel.
NEAREST_FPROP = {nd: _nearest_fprop(nd) for nd in AXES}
NEAREST_BPROP = {nd: _nearest_bprop(nd) for nd in AXES}
LINEAR_FPROP = {nd: _linear_fprop(nd) for nd in AXES}
LINEAR_BPROP = {nd: _linear_bprop(nd) for nd in AXES}


def launch(kernels, out, src, factor, length, in_start, out_start, m, n):
    """One launch of ``kernels[nd]`` (one of the tables above): a thread per element of ``out``
    (C-contiguous: the outputs ``(B, C, *m)`` forward, the chunk's inputs ``(B, C, *n)``
    backward), ``src`` (the other one) read through its strides. Returns ``out``."""
    kernels[out.ndim - 2](out.size, out, strided(src), *out.shape[:2],
                          *(int(v) for t in (factor, length, in_start, out_start, m, n) for v in t),
                          *element_strides(src))
    return out
