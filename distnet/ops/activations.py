"""Activation functions (docs/neon-semantics.md#activations): ``fprop(z) -> y`` and
``bprop(z, y, dy) -> dz``.

``z`` is the pre-activation, ``y = fprop(z)`` its value (passed back in so that no function is
evaluated twice), ``dy`` = dL/dy and ``dz`` = dL/dz, all of the same shape. Element-wise
activations accept any shape; :class:`Softmax` needs ``(B, F)``. The constructors take no
arguments (the config layer maps YAML keys to classes); ``name`` is a short lower-case tag.
Outputs keep the dtype of the inputs.
"""
from ..backend import get_array_module
from . import dispatch
from .cuda import elementwise as cuda_ew
from .parallel import run_split


def _flat(*arrays):
    """The arrays as flat views where all are C-contiguous (an image's or a batch's elements
    shared out evenly), else as they are (shared out by their first axis)."""
    if all(a.flags.c_contiguous for a in arrays):
        return tuple(a.reshape(-1) for a in arrays)
    return arrays


class Identity:
    """``y = z``; ``dz = dy``."""

    name = "identity"

    def fprop(self, z):
        return z

    def bprop(self, z, y, dy):
        return dy


class Logistic:
    """``y = 1 / (1 + exp(-z))``; ``dz = dy * y * (1 - y)``.

    Evaluated as ``exp(-|z|)`` based branches so that no ``exp`` overflows for large ``|z|``.
    """

    name = "logistic"

    @dispatch.op
    def fprop(self, z):
        xp = get_array_module(z)
        e = xp.exp(-xp.abs(z))                       # in (0, 1]: never overflows
        r = 1 / (1 + e)
        return xp.where(z >= 0, r, e * r)            # e/(1+e) = 1/(1+exp(-z)) for z < 0

    @fprop.kernel(when=lambda self, z: cuda_ew.dense_alike(z))
    def fprop(self, z):                              # one launch instead of five
        return cuda_ew.launch(cuda_ew.LOGISTIC, z)

    @dispatch.op
    def bprop(self, z, y, dy):
        return dy * y * (1 - y)

    @bprop.kernel(when=lambda self, z, y, dy: cuda_ew.dense_alike(dy, y))
    def bprop(self, z, y, dy):
        return cuda_ew.launch(cuda_ew.LOGISTIC_GRAD, dy, y)


class RectLin:
    """``y = max(z, 0)``; ``dz = dy * [z > 0]``: the derivative is 0 at ``z == 0``. A NaN in ``z``
    stays NaN in ``y`` and ``dz`` (a NaN must reach the cost check, never become a 0)."""

    name = "rectlin"

    def fprop(self, z):
        xp = get_array_module(z)
        if z.ndim == 0:
            return xp.maximum(z, 0)
        y = xp.empty_like(z)
        zs, ys = _flat(z, y)

        def part(sl):                                # elementwise: the kernel threads take shares
            xp.maximum(zs[sl], 0, out=ys[sl])        # maximum propagates NaN
        run_split(part, len(zs), xp, z.size)
        return y

    @dispatch.op
    def bprop(self, z, y, dy):
        xp = get_array_module(z, dy)
        if dispatch.reads_without_waiting(xp) and z.ndim:
            # numpy's where() is several times slower than a product with the mask (U-Net,
            # 2x8x512x512: 27 ms against 6); the product gives the same numbers unless a value
            # is not finite, so a NaN or an infinity anywhere takes the exact formula below
            dz = xp.empty_like(dy)
            zs, dys, dzs = _flat(z, dy, dz)
            finite = []

            def part(sl):                            # elementwise: the kernel threads take shares
                with xp.errstate(over="ignore", invalid="ignore"):
                    xp.multiply(dys[sl], zs[sl] > 0, out=dzs[sl])
                    dzs[sl] += 0                     # -0 (a negative dy masked) -> +0, as where()
                    finite.append(bool(xp.isfinite(zs[sl].sum()) and xp.isfinite(dzs[sl].sum())))
            run_split(part, len(zs), xp, z.size)
            if all(finite):
                return dz
        return xp.where(z > 0, dy, xp.where(xp.isnan(z), z, 0))

    @bprop.kernel(when=lambda self, z, y, dy: cuda_ew.dense_alike(z, dy))
    def bprop(self, z, y, dy):                       # one launch instead of four
        return cuda_ew.launch(cuda_ew.RECTLIN_GRAD, z, dy)


class Tanh:
    """``y = tanh(z)``; ``dz = dy * (1 - y**2)``. (neon v0.4.0 could not use it as a layer
    activation; distnet can.)"""

    name = "tanh"

    def fprop(self, z):
        return get_array_module(z).tanh(z)

    @dispatch.op
    def bprop(self, z, y, dy):
        return dy * (1 - y * y)

    @bprop.kernel(when=lambda self, z, y, dy: cuda_ew.dense_alike(dy, y))
    def bprop(self, z, y, dy):
        return cuda_ew.launch(cuda_ew.TANH_GRAD, dy, y)


class Softmax:
    """Softmax over axis 1 of ``z (B, F)``: ``y[b, k] = exp(z[b, k]) / sum_j exp(z[b, j])``.

    The row maximum is subtracted first (same result, no overflow). Backward is the
    Jacobian-vector product ``dz = y * (dy - sum_k dy[:, k] * y[:, k])``.
    """

    name = "softmax"

    def fprop(self, z):
        xp = get_array_module(z)
        e = xp.exp(z - z.max(axis=1, keepdims=True))
        e /= e.sum(axis=1, keepdims=True)
        return e

    def bprop(self, z, y, dy):
        return y * (dy - (dy * y).sum(axis=1, keepdims=True))
