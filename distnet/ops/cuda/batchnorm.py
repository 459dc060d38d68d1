"""Batch normalisation in a few launches per layer and step: the per-channel finishing of the
training statistics (mean, ``inv_std``, running averages), the forward normalisation (``xhat``
and ``y`` together), the training-mode input gradient, and the parameter gradients.

The array-module code of :mod:`distnet.ops.batchnorm` makes about forty launches per layer and
training step on its ``(C,)`` vectors alone (divisions by the count, casts, reshapes, the running
averages), and about ten for each pass over the activations. Here one thread per channel does
the vector arithmetic and one thread per element the elementwise passes, each in the array
code's order and roundings, so the results are its bits: the statistics are read from the
float64 Allreduce buffer (``double`` parameters whatever ``T`` is) and cast to ``T`` where the
array code casts them. The activations may be ``(B, C, *S)`` arrays with any number of spatial
axes, held NCHW, batch-innermost or as cut views: each thread walks the elements in the memory
order of ``x`` and indexes every array through its own strides, after merging the axes that
are contiguous in all of them (:func:`fits`).
"""
from .launch import Kernel, element_strides, strided

#: Axes of the elementwise kernels after merging (batch, channel and up to four more).
AXES = 6

# The count of the statistics: a number (``count``) or a float64 on the device (``count_at[0]``,
# the Allreduced count: reading it on the host would wait for the device).
_COUNT = "const double count, const double* count_at, const long long count_on_device"
_READ_COUNT = "const double cnt = count_on_device ? count_at[0] : count;"


def _layout_params():
    """The parameters after each elementwise kernel's own (x's axes in memory order, the channel
    axis's position, the element strides of x and of two more arrays) and the loop that finds,
    for element e, the arrays' offsets (ox, o1, o2) and the channel c."""
    names = lambda p: ", ".join(f"{p}{k}" for k in range(AXES))     # noqa: E731
    decl = lambda p: ", ".join(f"const long long {p}{k}" for k in range(AXES))   # noqa: E731
    return f"""
        {decl("d")}, const long long caxis,
        {decl("x")}, {decl("y")}, {decl("h")}) {{
    const long long dims[{AXES}] = {{{names("d")}}};
    const long long sx[{AXES}] = {{{names("x")}}}, s1[{AXES}] = {{{names("y")}}},
        s2[{AXES}] = {{{names("h")}}};
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)blockDim.x * gridDim.x) {{
    // element e of x's memory order -> offsets of the arrays and the channel
    long long r = e, ox = 0, o1 = 0, o2 = 0, c = 0;
    for (int k = {AXES - 1}; k >= 0; --k) {{
        const long long q = r % dims[k]; r /= dims[k];
        ox += q * sx[k]; o1 += q * s1[k]; o2 += q * s2[k];
        if (k == caxis) c = q;
    }}
"""


_LAYOUT = _layout_params()

STATISTICS = Kernel("distnet_bn_statistics", r"""
extern "C" __global__ void distnet_bn_statistics(
        const long long n, const double* sums, """ + _COUNT + r""",
        T* running_mean, T* running_var, T* mean_out, T* inv_std_out,
        const double eps, const double momentum) {
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < n;
         c += (long long)blockDim.x * gridDim.x) {
        """ + _READ_COUNT + r"""
        // bn_stats_finish, shifted by the running mean (read before it is updated)
        const double m1 = sums[c] / cnt;
        const double sq = m1 * m1;
        double var = sums[n + c] / cnt;
        var = var - sq;
        var = (var >= 0.0 || var != var) ? var : 0.0;       // numpy's maximum(var, 0): NaN stays
        const double mean = m1 + (double)running_mean[c];
        mean_out[c] = (T)mean;
        inv_std_out[c] = (T)(1.0 / sqrt(var + eps));
        // bn_update_running: PyTorch's averages with the unbiased variance
        const double correction = cnt > 1 ? cnt / (cnt - 1) : 1.0;
        const double new_mean = momentum * mean;
        const double new_var = (momentum * correction) * var;
        const T keep = (T)(1.0 - momentum);
        T rm = running_mean[c] * keep;
        running_mean[c] = rm + (T)new_mean;
        T rv = running_var[c] * keep;
        running_var[c] = rv + (T)new_var;
    }
}
""", float64=(0, 1, 2, 8, 9))

PARAM_GRADS = Kernel("distnet_bn_param_grads", r"""
extern "C" __global__ void distnet_bn_param_grads(
        const long long n, const double* sums, T* dgamma, T* dbeta) {
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < n;
         c += (long long)blockDim.x * gridDim.x) {
        dbeta[c] = (T)sums[c];
        dgamma[c] = (T)sums[n + c];
    }
}
""", float64=(0,))

FPROP = Kernel("distnet_bn_fprop", r"""
extern "C" __global__ void distnet_bn_fprop(
        const long long n, const T* x, T* y, T* xhat, const T* mean, const T* inv_std,
        const T* gamma, const T* beta,
""" + _LAYOUT + r"""
        T xh = x[ox] - mean[c];
        xh = xh * inv_std[c];
        T out = xh * gamma[c];
        out = out + beta[c];
        xhat[o2] = xh;
        y[o1] = out;
    }
}
""")

BPROP_DX = Kernel("distnet_bn_bprop_dx", r"""
extern "C" __global__ void distnet_bn_bprop_dx(
        const long long n, const T* dy, T* dx, const T* xhat, const double* sums,
        """ + _COUNT + r""", const T* gamma, const T* inv_std, const long long C,
        const long long dy_first,
""" + _LAYOUT + r"""
        """ + _READ_COUNT + r"""
        const T mdy = (T)(sums[c] / cnt), mdyx = (T)(sums[C + c] / cnt);
        const T scale = gamma[c] * inv_std[c];
        const T t = xhat[o2] * mdyx;
        T d = dy[ox];
        // the array code subtracts in this order when dx is dy itself, the other way otherwise
        if (dy_first) { d = d - mdy; d = d - t; }
        else { d = d - t; d = d - mdy; }
        dx[o1] = d * scale;
    }
}
""", float64=(3, 4, 5))


def _layout(x, *others):
    """``[dims, caxis, strides...]``: ``x``'s axes (the channel axis, and the others merged where
    they are contiguous in every array; size-1 axes dropped) in its memory order (largest stride
    first, so consecutive threads touch consecutive addresses of ``x``), padded in front to
    :data:`AXES`; the position of the channel axis among them; every array's element strides in
    that axis order. None if more than :data:`AXES` axes are left."""
    arrays = (x,) + others
    strides = [element_strides(a) for a in arrays]
    order = sorted(range(x.ndim), key=lambda k: (-abs(strides[0][k]), k))
    dims, merged = [], [[] for _ in arrays]
    caxis = None
    for k in order:
        if x.shape[k] == 1 and k != 1:
            continue
        mergeable = dims and k != 1 and len(dims) - 1 != caxis and all(
            m[-1] == s[k] * x.shape[k] for m, s in zip(merged, strides))
        if mergeable:
            dims[-1] *= x.shape[k]
            for m, s in zip(merged, strides):
                m[-1] = s[k]
            continue
        caxis = len(dims) if k == 1 else caxis
        dims.append(x.shape[k])
        for m, s in zip(merged, strides):
            m.append(s[k])
    pad = AXES - len(dims)
    if pad < 0:
        return None
    return [(1,) * pad + tuple(dims), caxis + pad] + [(0,) * pad + tuple(m) for m in merged]


def fits(x, *others):
    """Whether the elementwise kernels read ``x`` and ``others`` (shaped like ``x``): at most
    :data:`AXES` axes once merged."""
    return _layout(x, *others) is not None


def _count(count, sums):
    """The count parameters: ``(count, count_at, count_on_device)``; ``count`` a number or a
    0-d float64 device array (``sums`` then stands in for the unread pointer)."""
    if isinstance(count, (int, float)):
        return float(count), sums, 0
    return 0.0, count, 1


def bn_statistics(sums, count, running_mean, running_var, mean, inv_std, eps, momentum):
    """From the global ``sums (2, C)`` float64 of :func:`~distnet.ops.batchnorm.bn_stats_partial`
    shifted by ``running_mean``: ``mean`` and ``inv_std`` (``(C,)``, the activations' dtype)
    written, ``running_mean`` and ``running_var`` updated in place; one thread per channel."""
    STATISTICS(running_mean.size, sums, *_count(count, sums), running_mean, running_var, mean,
               inv_std, float(eps), float(momentum))


def bn_param_grads(sums, dgamma, dbeta):
    """``dbeta = sums[0]``, ``dgamma = sums[1]`` cast to their dtype (``(C,)``)."""
    PARAM_GRADS(dgamma.size, sums, dgamma, dbeta)


def bn_fprop(x, mean, inv_std, gamma, beta, y, xhat):
    """``xhat = (x - mean) * inv_std``, ``y = xhat * gamma + beta`` into ``y`` and ``xhat``
    (shaped like ``x (B, C, *S)``, any strides); the ``(C,)`` vectors contiguous, in ``x``'s
    dtype."""
    dims, caxis, sx, sy, sh = _layout(x, y, xhat)
    FPROP(x.size, strided(x), strided(y), strided(xhat), mean, inv_std, gamma, beta, *dims, caxis,
          *sx, *sy, *sh)


def bn_bprop_dx(dy, xhat, sums, count, gamma, inv_std, dx):
    """``dx = (dy - xhat * mdyx - mdy) * scale`` into ``dx`` (subtracting ``mdy`` first when
    ``dx`` is ``dy``, as the array code does), where ``mdy, mdyx = sums / count`` (the global
    float64 ``(2, C)`` sums of the backward, cast to ``dy``'s dtype) and ``scale = gamma *
    inv_std`` (``(C,)`` vectors in ``dy``'s dtype)."""
    dims, caxis, sx, sy, sh = _layout(dy, dx, xhat)
    BPROP_DX(dy.size, strided(dy), strided(dx), strided(xhat), sums, *_count(count, sums), gamma,
             inv_std, dy.shape[1], int(dx is dy), *dims, caxis, *sx, *sy, *sh)
