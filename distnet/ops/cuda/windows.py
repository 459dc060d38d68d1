"""The device's window loops, written once: CUDA C snippets for any number of spatial axes, and
col2im's fold (the adjoint of the patch view) in one launch.

A valid-window op over ``nd`` spatial axes reads, for output window ``(i_0, ..., i_{nd-1})`` and
filter tap ``(u_0, ...)``, the input position ``p_d = i_d * s_d + u_d``. Its backward pass (and
every adjoint: the fold, pooling's gradients, local filtering's data gradient, LCN's mean
adjoint) runs one thread per input position and gathers **the output windows that cover it**:
:func:`covering` writes that loop, taps in C order (first axis outermost), so a kernel adds
its terms in the order the array code adds tap slabs. :func:`item` writes the decoding of a
thread's work item into its batch, channel and position indices, in the array's memory order
(batch innermost for batch-innermost memory, so that neighbouring threads touch neighbouring
addresses). Every kernel that needs them is generated from these two (:mod:`.pooling`,
:mod:`.local`, :mod:`.lcn` and :data:`FOLD` here); a window op over volumes is a new ``nd``, not
a new loop.

The names a snippet uses are the kernel's own: each argument is a sequence of C names or
expressions, one per spatial axis (first axis first), e.g. ``PLANE`` for the 2-D kernels'
``(fh, fw)``, ``(sy, sx)``, ... or :func:`numbered` for generated ``nd``-axis kernels.
"""
import textwrap

from .launch import Kernel, element_strides, source, strided

#: The 2-D kernels' names: filter sizes, strides, output sizes, window indices, taps.
PLANE = dict(size=("fh", "fw"), stride=("sy", "sx"), count=("Ho", "Wo"), index=("i", "j"),
             tap=("u", "v"))


def numbered(prefix, nd):
    """``prefix0, ..., prefix{nd-1}``: the names of one quantity along ``nd`` axes."""
    return tuple(f"{prefix}{d}" for d in range(nd))


def dot(index, strides):
    """``i0 * s0 + i1 * s1 + ...``: an element offset (``0`` for no axes)."""
    return " + ".join(f"{i} * {s}" for i, s in zip(index, strides)) or "0"


def item(e, pos, dims, batch=None, channel=None, B="B", C="C", batch_inner=None):
    """C statements declaring the indices of work item ``e`` of an array ``(B, C, *dims)``:
    ``batch``, ``channel`` (each left out when None) and ``pos`` (names, one per axis of
    ``dims``). The items run in the array's memory order: C order, or with the batch innermost
    where the C expression ``batch_inner`` (if given) is true."""
    lines = [f"long long e_rest = {e};"]
    if batch is not None and batch_inner is not None:
        lines.append(f"long long {batch} = 0;")
        lines.append(f"if ({batch_inner}) {{ {batch} = e_rest % {B}; e_rest /= {B}; }}")
    for p, n in reversed(list(zip(pos, dims))):
        lines.append(f"const long long {p} = e_rest % {n}; e_rest /= {n};")
    if channel is not None:
        lines.append(f"const long long {channel} = e_rest % {C}; e_rest /= {C};")
    if batch is not None and batch_inner is not None:
        lines.append(f"if (!({batch_inner})) {batch} = e_rest;")
    elif batch is not None:
        lines.append(f"const long long {batch} = e_rest;")
    return "\n".join(lines)


def covering(body, pos, size, stride, count, index, tap, flat=None, dilation=None):
    """C loops running ``body`` once for every output window ``index`` (names declared here)
    that reads input position ``pos`` through filter tap ``tap``: taps in C order over filters
    of ``size``, windows ``0 <= index < count`` with ``index * stride + tap * dilation == pos``
    (``dilation``: C names or expressions per axis; None: 1). ``flat``: also declare the tap's
    C-order flat index under that name."""
    out = []
    dils = dilation or (None,) * len(pos)
    for d, (p, f, s, o, i, u, dl) in enumerate(zip(pos, size, stride, count, index, tap, dils)):
        pad = "    " * d
        reach = u if dl is None else f"{u} * {dl}"
        out += [f"{pad}for (long long {u} = 0; {u} < {f}; ++{u}) {{",
                f"{pad}    const long long {i}_at = {p} - {reach};",
                f"{pad}    if ({i}_at < 0 || {i}_at % {s}) continue;",
                f"{pad}    const long long {i} = {i}_at / {s};",
                f"{pad}    if ({i} >= {o}) continue;"]
    inner = "    " * len(pos)
    if flat is not None:
        k = tap[0]
        for f, u in zip(size[1:], tap[1:]):
            k = f"({k}) * {f} + {u}"
        out.append(f"{inner}const long long {flat} = {k};")
    out.append(textwrap.indent(textwrap.dedent(body).strip("\n"), inner))
    out += ["    " * d + "}" for d in reversed(range(len(pos)))]
    return "\n".join(out)


def _fold(nd):
    name = f"distnet_fold_{nd}d"
    x, n, o, f, s, dl, i, u, xs, ci, cu = (numbered(p, nd) for p in ("x", "n", "o", "f", "s", "dl", "i",
                                                                      "u", "xs", "ci", "cu"))
    params = (("T* out", "const T* cols", "B", "C") + n + o + f + s + dl + ("batch_inner", "ob", "oc")
              + xs + ("kb", "kc") + ci + cu)
    return Kernel(name, source(name, params, (
        item("e", x, n, "b", "c", batch_inner="batch_inner"),
        "const T* base = cols + b * kb + c * kc;",
        "T acc = 0;",
        covering(f"acc += base[{dot(i, ci)} + {dot(u, cu)}];", x, f, s, o, i, u, dilation=dl),
        f"out[b * ob + c * oc + {dot(x, xs)}] = acc;"), item="e"))


#: Number of spatial axes -> the fold kernel: one thread per image element gathers the taps
#: that cover it, in the order (first filter axis outermost) of the tap-by-tap fold of
#: :func:`distnet.ops.windows.fold`, starting from 0, so a float64 result equals it bit for bit.
FOLD = {nd: _fold(nd) for nd in (1, 2, 3)}


def fold(cols, out, stride, dilation):
    """``out (B, C, *spatial)`` (any strides) = the adjoint of the patch view of ``cols (B, C,
    *windows, *filter)`` (any strides) with ``dilation`` (an int per axis): what
    :func:`distnet.ops.windows.fold` computes, in one launch. Returns ``out``."""
    nd = out.ndim - 2
    B, C = out.shape[:2]
    so = element_strides(out)
    batch_inner = int(so[0] == 1 and B > 1)
    FOLD[nd](out.size, strided(out), strided(cols), B, C, *out.shape[2:], *cols.shape[2:2 + nd],
             *cols.shape[2 + nd:], *map(int, stride), *map(int, dilation), batch_inner, *so, *element_strides(cols))
    return out
