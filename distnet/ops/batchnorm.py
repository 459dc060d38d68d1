"""Batch normalisation, split so that a tiled (distributed) run is exact.

Shapes: ``x`` is ``(N, C)`` (FC outputs: per-feature statistics over the batch) or
``(N, C, *S)`` with any number of spatial axes (conv outputs ``(N, C, H, W)``, volumes
``(N, C, D, H, W)``: per-channel statistics over the batch and all pixels). Channel vectors
(``gamma``, ``beta``, ``mean``, ``var``, ``inv_std``, running statistics) are ``(C,)``.
``count`` is the number of values behind each channel's statistics: ``N`` or ``N*H*W`` of the
GLOBAL tensor (all tiles, all data replicas): a number, or a 0-d array on the arrays' device (the
Allreduced count stays there, so that no step waits for the device to read it).

Every statistic is a per-channel SUM, so a tile computes its partial sums, one Allreduce(SUM)
over the tiles (and data replicas) makes the global sums, and every rank finishes the formula
itself. The single-process run is the same code with one tile (no Allreduce). Partial sums are
accumulated in float64 (a ``(2, C)`` array: one buffer, one Allreduce).

Forward (training)::

    s = bn_stats_partial(x, shift)            # (2, C) float64: [sum(x-K), sum((x-K)^2)]
    (Allreduce s)                             # over the tiles / replicas
    mean, var = bn_stats_finish(s, count, shift)   # biased variance (divides by count)
    y, xhat, inv_std = bn_fprop(x, mean, var, gamma, beta, eps)
    bn_update_running(run_mean, run_var, mean, var, count, momentum)

A training step on a device takes the per-channel part after the Allreduce in one launch
(:func:`bn_train_statistics`: the three calls above with ``shift = running_mean``, read before
it is updated), then :func:`bn_normalize`, and the backward's in two (:func:`bn_set_param_grads`,
:func:`bn_bprop_dx`): the fused kernels of :mod:`distnet.ops.cuda.batchnorm`, the same numbers.

Backward::

    g = bn_bprop_partial(dy, xhat)            # (2, C) float64: [sum dy, sum dy*xhat]
    (Allreduce g)                             # g[0] = dbeta, g[1] = dgamma (GLOBAL already)
    dx = bn_bprop_dx(dy, xhat, gamma, inv_std, g, count)

The shift ``K`` (per channel, identical on every rank) makes the variance numerically sound:
``var = E[(x-K)^2] - (E[x-K])^2`` cancels badly only when ``|mean - K| >> std``. Two choices,
both exact across tiles:

* one pass, one Allreduce: ``shift = running_mean`` (known everywhere, close to the mean after
  a few steps);
* two passes, two Allreduces: first ``bn_stats_partial(x)`` (row 0 gives the mean), then
  ``bn_stats_partial(x, shift=mean)``: row 0 is ~0 and ``var = sum((x-mean)^2)/count``, the
  textbook two-pass formula.

Evaluation uses the running statistics: ``bn_fprop(x, run_mean, run_var, gamma, beta, eps)``
(no sums, no communication; its backward is ``dy * gamma * inv_std``, see
:func:`bn_bprop_dx_inference`).

Running averages follow PyTorch's ``BatchNorm`` (``momentum`` default 0.1)::

    running_mean = (1 - m) * running_mean + m * mean
    running_var  = (1 - m) * running_var  + m * var * count / (count - 1)   # unbiased

(note: the opposite convention to Keras/TensorFlow, whose momentum weights the old value).
"""
from ..backend import get_array_module
from ..errors import GeometryError
from . import dispatch
from .cuda import batchnorm as cuda_bn
from .cuda.batchnorm import fits as kernel_fits
from .parallel import run_split


def channel_axes(x):
    """The axes a channel's statistics run over: ``(0,)`` for ``(N, C)``, ``(0, 2, 3)`` for
    ``(N, C, H, W)``: all but the channel axis 1."""
    if x.ndim < 2:
        raise GeometryError(f"batch norm needs (N, C) or (N, C, *spatial) arrays, got shape {tuple(x.shape)}")
    return (0,) + tuple(range(2, x.ndim))


def _bshape(x):
    """Shape that broadcasts a ``(C,)`` vector against ``x``."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _as(v, x):
    """``(C,)`` vector ``v`` in ``x``'s dtype, shaped to broadcast against ``x``."""
    xp = get_array_module(x)
    return xp.asarray(v, dtype=x.dtype).reshape(_bshape(x))


def _vector(v, x):
    """``(C,)`` vector ``v`` as a contiguous ``(C,)`` array in ``x``'s dtype (a kernel argument;
    ``v`` itself where it is one already: no launch)."""
    if v.dtype == x.dtype and v.ndim == 1 and v.flags.c_contiguous:
        return v
    xp = get_array_module(x)
    v = xp.asarray(v, dtype=x.dtype)
    return v if v.ndim == 1 and v.flags.c_contiguous else xp.ascontiguousarray(v.reshape(-1))


def _given(out):
    """``(out,)``, or ``()`` if None: the output arrays a kernel's layout must also fit."""
    return () if out is None else (out,)


def _host_count(count):
    """Whether ``count`` is a number (or a host array), not a value on the device."""
    return dispatch.reads_without_waiting(get_array_module(count))


def local_count(x):
    """Values per channel in this array: ``N`` or ``N*h*w`` (a tile's share of ``count``)."""
    return x.size // x.shape[1]


# ------------------------------------------------------------------------ forward

def bn_stats_partial(x, shift=None, out=None):
    """Partial per-channel sums of ``x`` (a tile): ``(2, C)`` float64 array
    ``[sum(x - shift), sum((x - shift)**2)]`` over :func:`channel_axes`.

    ``shift``: ``(C,)`` (or None = 0), the same on every rank. ``out``: a ``(2, C)`` float64
    array to write into (e.g. the Allreduce buffer). Partial sums of disjoint tiles add up to
    the sums of the whole array.
    """
    xp = get_array_module(x)
    axes = channel_axes(x)
    C = x.shape[1]
    if out is None:
        out = xp.empty((2, C), dtype="float64")
    if shift is None:
        out[0] = xp.sum(x, axis=axes, dtype="float64")
        d = x * x
    else:
        d = x - _as(shift, x)                # one temporary, squared in place
        out[0] = xp.sum(d, axis=axes, dtype="float64")
        xp.multiply(d, d, out=d)
    out[1] = xp.sum(d, axis=axes, dtype="float64")
    return out


def bn_stats_finish(sums, count, shift=None):
    """``(mean, var)`` (``(C,)`` float64) from the GLOBAL sums of :func:`bn_stats_partial` over
    ``count`` values per channel. ``var`` is the biased (population) variance, clamped at 0."""
    xp = get_array_module(sums)
    m1 = sums[0] / count
    var = xp.maximum(sums[1] / count - m1 * m1, 0.0)
    mean = m1 if shift is None else m1 + xp.asarray(shift, dtype="float64")
    return mean, var


def bn_fprop(x, mean, var, gamma, beta, eps=1e-5, out=None):
    """Normalise ``x`` with given statistics: ``xhat = (x - mean) * inv_std``,
    ``inv_std = 1 / sqrt(var + eps)``, ``y = gamma * xhat + beta``.

    Returns ``(y, xhat, inv_std)``: ``y`` and ``xhat`` shaped like ``x`` in its dtype (``y``
    written into ``out`` if given), ``inv_std (C,)`` in ``x``'s dtype; keep ``xhat`` and
    ``inv_std`` for the backward. Training: the batch statistics; evaluation: the running ones.
    """
    xp = get_array_module(x)
    inv_std = 1.0 / xp.sqrt(xp.asarray(var, dtype="float64") + eps)
    inv_std = inv_std.astype(x.dtype)
    out, xhat = bn_normalize(x, mean, inv_std, gamma, beta, out)
    return out, xhat, inv_std


@dispatch.op
def bn_normalize(x, mean, inv_std, gamma, beta, out=None):
    """``(y, xhat)`` of :func:`bn_fprop` for a given ``inv_std`` (``(C,)`` in ``x``'s dtype;
    ``y`` into ``out`` if given). Elementwise, so the kernel threads take shares of the
    channels: the same numbers."""
    xp = get_array_module(x)
    xhat = xp.empty_like(x)
    if out is None:
        out = xp.empty_like(x)
    m, s, g, b = _as(mean, x), inv_std.reshape(_bshape(x)), _as(gamma, x), _as(beta, x)

    def channels(sl):
        c = (slice(None), sl)
        xp.subtract(x[c], m[c], out=xhat[c])
        xhat[c] *= s[c]
        xp.multiply(xhat[c], g[c], out=out[c])
        out[c] += b[c]
    run_split(channels, x.shape[1], xp, x.size)
    return out, xhat


@bn_normalize.kernel(when=lambda x, mean, inv_std, gamma, beta, out=None: kernel_fits(x, *_given(out)))
def bn_normalize(x, mean, inv_std, gamma, beta, out=None):
    """One launch for ``xhat`` and ``y``, the same roundings."""
    xp = get_array_module(x)
    out = xp.empty_like(x) if out is None else out
    xhat = xp.empty_like(x)
    cuda_bn.bn_fprop(x, *(_vector(v, x) for v in (mean, inv_std, gamma, beta)), out, xhat)
    return out, xhat


@dispatch.op
def bn_train_statistics(sums, count, running_mean, running_var, dtype, eps=1e-5, momentum=0.1):
    """A training forward's per-channel work after the Allreduce: from the GLOBAL ``sums``
    (``(2, C)`` float64) of :func:`bn_stats_partial` shifted by ``running_mean``, the batch
    statistics (:func:`bn_stats_finish`), ``inv_std`` (as :func:`bn_fprop`) and the running
    averages updated in place (:func:`bn_update_running`). Returns ``(mean, inv_std)``, ``(C,)``
    in ``dtype`` (the activations'), for :func:`bn_normalize`."""
    xp = get_array_module(sums)
    mean, var = bn_stats_finish(sums, count, running_mean)
    inv_std = (1.0 / xp.sqrt(var + eps)).astype(dtype)
    bn_update_running(running_mean, running_var, mean, var, count, momentum)
    return mean.astype(dtype), inv_std


@bn_train_statistics.kernel(
    when=lambda sums, count, running_mean, running_var, dtype, eps=1e-5, momentum=0.1:
    dispatch.float_arrays(running_mean, running_var) and running_mean.dtype == dtype
    and sums.flags.c_contiguous)
def bn_train_statistics(sums, count, running_mean, running_var, dtype, eps=1e-5, momentum=0.1):
    """One thread per channel, the array code's roundings (float64 statistics, then cast)."""
    xp = get_array_module(sums)
    mean, inv_std = (xp.empty(running_mean.size, dtype=dtype) for _ in range(2))
    cuda_bn.bn_statistics(sums, count, running_mean, running_var, mean, inv_std, eps, momentum)
    return mean, inv_std


def bn_update_running(running_mean, running_var, mean, var, count, momentum=0.1):
    """In place (PyTorch semantics): ``running = (1 - m) * running + m * batch`` with the
    UNBIASED batch variance ``var * count / (count - 1)`` (``count`` = global values per
    channel, a number or a 0-d device array; ``count == 1`` uses ``var``)."""
    xp = get_array_module(running_mean)
    if _host_count(count):                  # a number
        correction = count / (count - 1) if count > 1 else 1.0
    else:                                   # on the device: no branch on its value (a wait)
        correction = count / xp.maximum(count - 1, 1.0)
    new_mean = momentum * xp.asarray(mean, dtype="float64")
    new_var = (momentum * correction) * xp.asarray(var, dtype="float64")
    running_mean *= 1 - momentum
    running_mean += new_mean.astype(running_mean.dtype, copy=False)
    running_var *= 1 - momentum
    running_var += new_var.astype(running_var.dtype, copy=False)


# ------------------------------------------------------------------------ backward

def bn_bprop_partial(dy, xhat, out=None):
    """Partial per-channel sums for the backward of a tile: ``(2, C)`` float64
    ``[sum dy, sum dy * xhat]``. After the Allreduce, row 0 is ``dL/dbeta`` and row 1 is
    ``dL/dgamma`` of the whole (global) batch: do NOT sum these gradients again."""
    xp = get_array_module(dy, xhat)
    axes = channel_axes(dy)
    if out is None:
        out = xp.empty((2, dy.shape[1]), dtype="float64")
    out[0] = xp.sum(dy, axis=axes, dtype="float64")
    out[1] = xp.sum(dy * xhat, axis=axes, dtype="float64")
    return out


@dispatch.op
def bn_bprop_dx(dy, xhat, gamma, inv_std, sums, count, out=None):
    """``dx`` of the training-mode forward (batch statistics), given the GLOBAL sums ``sums``
    of :func:`bn_bprop_partial` and the global ``count``::

        dx = gamma * inv_std * (dy - sum(dy)/count - xhat * sum(dy*xhat)/count)

    Shaped like ``dy`` in its dtype (into ``out`` if given; ``out`` may be ``dy``)."""
    xp = get_array_module(dy, xhat)
    b = _bshape(dy)
    mdy = xp.asarray(sums[0] / count, dtype=dy.dtype).reshape(b)
    mdyx = xp.asarray(sums[1] / count, dtype=dy.dtype).reshape(b)
    scale = (xp.asarray(gamma, dtype=dy.dtype) * xp.asarray(inv_std, dtype=dy.dtype)).reshape(b)
    if out is None:
        out = xp.empty_like(dy)

    def channels(sl):                        # elementwise: the kernel threads take channels
        c = (slice(None), sl)
        o = out[c]
        if out is dy:                        # dy is still read: one temporary for xhat * mean(dy xhat)
            t = xhat[c] * mdyx[c]
            o -= mdy[c]
            o -= t
        else:
            xp.multiply(xhat[c], mdyx[c], out=o)
            xp.subtract(dy[c], o, out=o)
            o -= mdy[c]
        o *= scale[c]
    run_split(channels, dy.shape[1], xp, dy.size)
    return out


def _reads_bprop_dx(dy, xhat, gamma, inv_std, sums, count, out=None):
    """The kernel reads these: float64 sums in one block, the count a number or a device float64."""
    return (sums.dtype == "float64" and sums.flags.c_contiguous and kernel_fits(dy, xhat, *_given(out))
            and (_host_count(count) or count.dtype == "float64"))


@bn_bprop_dx.kernel(when=_reads_bprop_dx)
def bn_bprop_dx(dy, xhat, gamma, inv_std, sums, count, out=None):
    """One launch: the per-channel vectors formed by each thread in the array code's roundings."""
    out = get_array_module(dy).empty_like(dy) if out is None else out
    count = float(count) if _host_count(count) else count
    cuda_bn.bn_bprop_dx(dy, xhat, sums, count, _vector(gamma, dy), _vector(inv_std, dy), out)
    return out


def bn_bprop_dx_inference(dy, gamma, inv_std, out=None):
    """``dx = dy * gamma * inv_std`` for the evaluation-mode forward (fixed statistics)."""
    xp = get_array_module(dy)
    scale = (xp.asarray(gamma, dtype=dy.dtype) * xp.asarray(inv_std, dtype=dy.dtype)).reshape(_bshape(dy))
    if out is None:
        out = xp.empty_like(dy)
    xp.multiply(dy, scale, out=out)
    return out


def bn_param_grads(sums):
    """``(dgamma, dbeta)`` (``(C,)`` float64) from the global backward sums."""
    return sums[1], sums[0]


@dispatch.op
def bn_set_param_grads(sums, dgamma, dbeta):
    """Write :func:`bn_param_grads` of ``sums`` into the gradient arrays ``dgamma`` and
    ``dbeta`` (``(C,)``, cast to their dtype)."""
    dbeta[...] = sums[0]
    dgamma[...] = sums[1]


@bn_set_param_grads.kernel(when=lambda sums, dgamma, dbeta: dispatch.float_arrays(dgamma, dbeta)
                           and dgamma.flags.c_contiguous and dbeta.flags.c_contiguous
                           and sums.flags.c_contiguous)
def bn_set_param_grads(sums, dgamma, dbeta):       # one launch instead of four
    cuda_bn.bn_param_grads(sums, dgamma, dbeta)
