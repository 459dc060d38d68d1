"""Locally connected ("local filtering") layer math and its decoder
(docs/neon-semantics.md#local-filtering, docs/neon-semantics.md#local-defiltering).

Every output unit ``(k, i, j)`` has its own filter (untied weights), no bias, no activation::

    y[b, k, i, j] = sum_f w[k, i, j, f] * patch[b, i, j, f],   f = (c, u, v) in C order,
    patch[b, i, j, (c, u, v)] = x[b, c, i*sy + u, j*sx + v].

Weight layout: ``w (K, Ho, Wo, F)``, F = C*fh*fw, i.e. neon's W ``(K*Ho*Wo, F)`` reshaped. A
distributed layer holds the slice ``w[:, i0:i1, j0:j1, :]`` of its output tile and passes its
input *chunk* (tile + halo), so nothing here knows the global size: ``(Ho, Wo)`` is whatever the
valid windows of ``x`` give, and must match ``w``.

All contractions are batched matmuls over the Ho*Wo positions (``matmul`` dispatches one small
GEMM per position, no Python loop): per position the work is a (K x F) @ (F x B) product, which is
exactly the structure of an untied layer. Internally the batch is the innermost axis
(``(Ho*Wo, F, B)`` columns), which makes the im2col gather and the fold copy contiguous runs.

On a device whose array module launches fused kernels (:func:`distnet.ops.cuda.launch.available`)
every product is instead one direct kernel of :mod:`distnet.ops.cuda.local` (no patch matrix, no
transposes): a forward or decoder pass is one launch, a backward pass two, a renormalisation one.

Pure math: no parameters owned, no communication; numpy or cupy through ``get_array_module``.
"""
from ..backend import get_array_module
from ..errors import GeometryError
from . import dispatch
from .cuda import local as cuda_local
from .parallel import matmul as pmatmul
from .windows import fold, output_shape, patches


def _geometry(x_shape, w_shape, fshape, stride):
    """Check that ``w (K, Ho, Wo, F)`` fits the valid windows of an input of ``x_shape``;
    return ``(Ho, Wo)``. A mismatch means the caller sliced the wrong weights or chunk."""
    B, C, H, W = x_shape
    K, Ho, Wo, F = w_shape
    fh, fw = fshape
    if F != C * fh * fw:
        raise GeometryError(
            f"local filter size {F} != C*fh*fw = {C}*{fh}*{fw} for input {tuple(x_shape)}")
    if H < fh or W < fw:
        raise GeometryError(f"input {H}x{W} is smaller than the {fh}x{fw} filter")
    if output_shape((H, W), fshape, stride) != (Ho, Wo):
        raise GeometryError(
            f"weights for a {Ho}x{Wo} output, but input {H}x{W} with filter {fh}x{fw} and "
            f"stride {tuple(stride)} gives {output_shape((H, W), fshape, stride)}")
    return Ho, Wo


def _check_grad(name, g, shape):
    """A kernel reads ``g`` through its shape: refuse one that does not match the layer's."""
    if tuple(g.shape) != tuple(shape):
        raise GeometryError(f"local filtering: {name} {tuple(g.shape)} should be {tuple(shape)}")


def _cols(x, fshape, stride):
    """im2col per position, batch innermost: a contiguous ``(Ho*Wo, F, B)`` copy of the windows
    of ``x (B, C, H, W)``, ``cols[i*Wo + j, (c, u, v), b] = x[b, c, i*sy + u, j*sx + v]``.

    x is first transposed to (C, H, W, B) so that the window gather copies contiguous runs of B
    values (several times faster than gathering single elements), and every position's block is
    an (F x B) row-major matrix, the right operand of the per-position product."""
    xp = get_array_module(x)
    B, C, H, W = x.shape
    xt = xp.ascontiguousarray(x.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)  # (B,C,H,W) view
    p = patches(xt, fshape, stride)                     # (B, C, Ho, Wo, fh, fw), B stride 1
    _, _, Ho, Wo, fh, fw = p.shape
    return xp.ascontiguousarray(p.transpose(2, 3, 1, 4, 5, 0)).reshape(Ho * Wo, C * fh * fw, B)


def _wmat(w):
    """``w (K, Ho, Wo, F)`` as stacked per-position matrices ``(Ho*Wo, K, F)`` (a view)."""
    K, Ho, Wo, F = w.shape
    return w.reshape(K, Ho * Wo, F).transpose(1, 0, 2)


def _pkb(dy):
    """``dy (B, K, Ho, Wo)`` as a contiguous ``(Ho*Wo, K, B)`` (per-position (K x B) blocks)."""
    xp = get_array_module(dy)
    B, K, Ho, Wo = dy.shape
    return xp.ascontiguousarray(dy.reshape(B, K, Ho * Wo).transpose(2, 1, 0))


def _from_pkb(a, Ho, Wo):
    """``(Ho*Wo, K, B)`` -> contiguous ``(B, K, Ho, Wo)``."""
    xp = get_array_module(a)
    P, K, B = a.shape
    return xp.ascontiguousarray(a.transpose(2, 1, 0)).reshape(B, K, Ho, Wo)


def _from_pkf(a, Ho, Wo):
    """``(Ho*Wo, K, F)`` -> contiguous ``(K, Ho, Wo, F)`` (the weight layout)."""
    xp = get_array_module(a)
    P, K, F = a.shape
    return xp.ascontiguousarray(a.transpose(1, 0, 2)).reshape(K, Ho, Wo, F)


def _fold_cols(cols_pfb, x_shape, fshape, stride, Ho, Wo):
    """Adjoint of :func:`_cols`: ``(Ho*Wo, F, B)`` summed back into a ``(B, C, H, W)`` array."""
    xp = get_array_module(cols_pfb)
    B, C, H, W = x_shape
    fh, fw = fshape
    cols = cols_pfb.reshape(Ho, Wo, C, fh, fw, B).transpose(5, 2, 0, 1, 3, 4)  # (B,C,Ho,Wo,fh,fw)
    # accumulate in a batch-innermost buffer, matching the source layout (contiguous B runs)
    out = xp.empty((C, H, W, B), dtype=cols_pfb.dtype).transpose(3, 0, 1, 2)
    fold(cols, (B, C, H, W), stride, out=out)
    return xp.ascontiguousarray(out)


# ---------------------------------------------------------------------------------------------
# encoder: LocalFilteringLayer
# ---------------------------------------------------------------------------------------------

@dispatch.op
def local_fprop(x, w, fshape, stride):
    """Locally connected forward pass (valid windows on ``x``; the caller pads / builds chunks).

    x : (B, C, H, W)        input (a distributed layer passes its chunk)
    w : (K, Ho, Wo, F)      F = C*fh*fw in (c, u, v) order; (Ho, Wo) must equal the valid output
                            size of x, ``((H - fh)//sy + 1, (W - fw)//sx + 1)``
    fshape, stride : (fh, fw), (sy, sx)
    returns y : (B, K, Ho, Wo),  y[b,k,i,j] = sum_f w[k,i,j,f] * x[b, c, i*sy+u, j*sx+v]
    """
    Ho, Wo = _geometry(x.shape, w.shape, fshape, stride)
    cols = _cols(x, fshape, stride)                     # (P, F, B)
    return _from_pkb(pmatmul(_wmat(w), cols), Ho, Wo)           # (P, K, F) @ (P, F, B) -> (P, K, B)


@local_fprop.kernel(when=lambda x, w, *args, **kwargs: dispatch.float_arrays(x, w))
def local_fprop(x, w, fshape, stride):          # one launch, no patch matrix
    _geometry(x.shape, w.shape, fshape, stride)
    return cuda_local.apply(x, w, fshape, stride)


@dispatch.op
def local_bprop(x, w, dy, fshape, stride, need_dx=True):
    """Gradients of :func:`local_fprop`.

    x : (B, C, H, W), w : (K, Ho, Wo, F), dy : (B, K, Ho, Wo) = dJ/dy
    returns (dx, dw):
      dx : (B, C, H, W) = dJ/dx (overlapping windows add; pixels no window reads get 0),
           or None if ``need_dx`` is False (first layer: saves the fold)
      dw : (K, Ho, Wo, F), dw[k,i,j,f] = sum_b dy[b,k,i,j] * patch[b,i,j,f]  (summed over batch,
           not divided by anything; neon's G reshaped)
    """
    Ho, Wo = _geometry(x.shape, w.shape, fshape, stride)
    cols = _cols(x, fshape, stride)                     # (P, F, B)
    dyt = _pkb(dy)                                      # (P, K, B)
    dw = _from_pkf(pmatmul(dyt, cols.transpose(0, 2, 1)), Ho, Wo)   # (P, K, B) @ (P, B, F)
    dx = None
    if need_dx:
        dcols = pmatmul(_wmat(w).transpose(0, 2, 1), dyt)      # (P, F, K) @ (P, K, B) -> (P, F, B)
        dx = _fold_cols(dcols, x.shape, fshape, stride, Ho, Wo)
    return dx, dw


@local_bprop.kernel(when=lambda x, w, dy, *args, **kwargs: dispatch.float_arrays(x, w, dy))
def local_bprop(x, w, dy, fshape, stride, need_dx=True):    # two launches
    Ho, Wo = _geometry(x.shape, w.shape, fshape, stride)
    _check_grad("dy", dy, (x.shape[0], w.shape[0], Ho, Wo))
    dw = cuda_local.weight_grad(x, dy, fshape, stride)
    return (cuda_local.adjoint(dy, w, x.shape, fshape, stride) if need_dx else None), dw


@dispatch.op
def normalize_rows(w):
    """Scale every filter ``w[k, i, j, :]`` of ``w (K, Ho, Wo, F)`` to unit L2 norm, **in
    place**; returns ``w``. No epsilon (as neon's N): an all-zero row becomes NaN,
    as in neon. Per-row, so a distributed layer can normalise its own slice independently."""
    xp = get_array_module(w)
    w /= xp.sqrt((w * w).sum(axis=-1, keepdims=True))
    return w


@normalize_rows.kernel(when=lambda w: dispatch.float_arrays(w) and w.flags.c_contiguous)
def normalize_rows(w):                          # one launch
    return cuda_local.normalize_rows(w)


# ---------------------------------------------------------------------------------------------
# decoder: LocalDeFilteringLayer (the adjoint of LF, with its own weights V of W's shape)
# ---------------------------------------------------------------------------------------------

@dispatch.op
def local_defprop(h, v, x_shape, fshape, stride):
    """Decoder forward: the adjoint of LF with weights ``v``, i.e. LF's input-gradient map
    applied to ``h`` (so ``<local_fprop(x, v), h> == <x, local_defprop(h, v, x.shape, ...)>``).

    h : (B, K, Ho, Wo)      code (the encoder's output)
    v : (K, Ho, Wo, F)      decoder weights, same layout as the encoder's
    x_shape : (B, C, H, W)  shape of the reconstruction (the encoder's input / chunk)
    returns xhat : (B, C, H, W),
      xhat[b,c,i*sy+u,j*sx+v] += sum_k h[b,k,i,j] * v[k,i,j,(c,u,v)]
    """
    Ho, Wo = _geometry(x_shape, v.shape, fshape, stride)
    dcols = pmatmul(_wmat(v).transpose(0, 2, 1), _pkb(h))      # (P, F, K) @ (P, K, B) -> (P, F, B)
    return _fold_cols(dcols, tuple(x_shape), fshape, stride, Ho, Wo)


@local_defprop.kernel(when=lambda h, v, *args, **kwargs: dispatch.float_arrays(h, v))
def local_defprop(h, v, x_shape, fshape, stride):   # one launch
    Ho, Wo = _geometry(x_shape, v.shape, fshape, stride)
    _check_grad("h", h, (x_shape[0], v.shape[0], Ho, Wo))
    return cuda_local.adjoint(h, v, x_shape, fshape, stride)


@dispatch.op
def local_debprop(h, v, eps, fshape, stride):
    """Decoder backward, given ``eps = dJ/dxhat``.

    h : (B, K, Ho, Wo), v : (K, Ho, Wo, F), eps : (B, C, H, W)
    returns (gh, gv):
      gh : (B, K, Ho, Wo) = dJ/dh = local_fprop(eps, v)  (the adjoint of the adjoint is LF)
      gv : (K, Ho, Wo, F), gv[k,i,j,f] = sum_b h[b,k,i,j] * patch(eps)[b,i,j,f]  (batch sum)
    """
    Ho, Wo = _geometry(eps.shape, v.shape, fshape, stride)
    cols = _cols(eps, fshape, stride)                   # (P, F, B)
    gh = _from_pkb(pmatmul(_wmat(v), cols), Ho, Wo)             # (P, K, F) @ (P, F, B)
    gv = _from_pkf(pmatmul(_pkb(h), cols.transpose(0, 2, 1)), Ho, Wo)  # (P, K, B) @ (P, B, F)
    return gh, gv


@local_debprop.kernel(when=lambda h, v, eps, *args, **kwargs: dispatch.float_arrays(h, v, eps))
def local_debprop(h, v, eps, fshape, stride):   # two launches
    Ho, Wo = _geometry(eps.shape, v.shape, fshape, stride)
    _check_grad("h", h, (eps.shape[0], v.shape[0], Ho, Wo))
    return cuda_local.apply(eps, v, fshape, stride), cuda_local.weight_grad(eps, h, fshape, stride)
