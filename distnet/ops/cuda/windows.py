"""Sliding-window kernels: col2im's fold (the adjoint of the patch view) in one launch.

:func:`distnet.ops.windows.fold` adds every filter tap's slab into the image, one array
operation per tap (``fh*fw`` launches, 25 for a 5x5 filter). Here one thread per image element
gathers the taps that cover it, in the same order (filter row by row) starting from 0, so a
float64 result equals the tap-by-tap fold bit for bit.
"""
from .launch import Kernel, element_strides, strided

FOLD = Kernel("distnet_fold", r"""
extern "C" __global__ void distnet_fold(
        const long long n, T* out, const T* cols,
        const long long B, const long long C, const long long H, const long long W,
        const long long Ho, const long long Wo, const long long fh, const long long fw,
        const long long sy, const long long sx, const long long batch_inner,
        const long long ob, const long long oc, const long long oh, const long long ow,
        const long long kb, const long long kc, const long long ki, const long long kj,
        const long long ku, const long long kv) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)blockDim.x * gridDim.x) {
        long long r = e, b, x;
        // Walk the image in its memory order (batch innermost for CHWN) so neighbouring
        // threads write neighbouring addresses.
        if (batch_inner) { b = r % B; r /= B; x = r % W; r /= W; }
        else { x = r % W; r /= W; }
        const long long y = r % H; r /= H;
        const long long c = r % C; r /= C;
        if (!batch_inner) b = r;
        const T* base = cols + b * kb + c * kc;
        T acc = 0;
        for (long long u = 0; u < fh; ++u) {
            const long long dy = y - u;
            if (dy < 0 || dy % sy) continue;
            const long long i = dy / sy;
            if (i >= Ho) continue;
            for (long long v = 0; v < fw; ++v) {
                const long long dx = x - v;
                if (dx < 0 || dx % sx) continue;
                const long long j = dx / sx;
                if (j >= Wo) continue;
                acc += base[i * ki + j * kj + u * ku + v * kv];
            }
        }
        out[b * ob + c * oc + y * oh + x * ow] = acc;
    }
}
""")


def fold(cols, out, stride):
    """``out (B, C, H, W)`` (any strides) = the adjoint of the patch view of ``cols (B, C, Ho,
    Wo, fh, fw)`` (any strides): what :func:`distnet.ops.windows.fold` computes, in one launch.
    Returns ``out``."""
    B, C, H, W = out.shape
    _, _, Ho, Wo, fh, fw = cols.shape
    so = element_strides(out)
    batch_inner = int(so[0] == 1 and B > 1)
    FOLD(out.size, strided(out), strided(cols), B, C, H, W, Ho, Wo, fh, fw, int(stride[0]),
         int(stride[1]), batch_inner, *so, *element_strides(cols))
    return out
