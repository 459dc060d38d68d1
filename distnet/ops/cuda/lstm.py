"""LSTM time-step kernels: one launch per step for the gates and the state update, forward and
backward (the generic code takes ~20 array operations per step each way).

:mod:`distnet.ops.lstm` keeps the GEMMs (the input projection of all steps before the loop, one
recurrent GEMM per step, the weight gradients after it) and calls these for the elementwise part
of each step. One thread per state element ``(b, j)`` of ``(B, H)`` computes the four gates of
unit ``j`` and updates ``h, c`` (forward) or ``dh, dc`` (backward) **in place**: a thread reads
and writes only its own element of the state buffers, so no thread sees another's update. The
expressions are the numpy code's, term by term and in its order (the sigmoid as ``0.5 * (tanh(a
/ 2) + 1)``), so float64 results differ from numpy's only where the GEMMs or the device's
``tanh`` round differently.

Layouts (all C-contiguous): ``ax (B, T, 4H)``, ``gates (B, T, 4H)`` (``i, f, g, o`` blocks as the
weight rows), ``mask (B, T)``, ``y, tanh_c, h_prev, c_prev, dy (B, T, H)``, states ``(B, H)``,
per-step GEMM results ``(B, 4H)`` (forward) or ``(B, H)`` (backward).
"""
from .launch import Kernel

_SIGMOID = r"""
__device__ T distnet_lstm_sigmoid(const T a) {
    return (T)0.5 * (tanh((T)0.5 * a) + (T)1.0);
}
"""

STEP_FORWARD = Kernel("distnet_lstm_step_forward", _SIGMOID + r"""
extern "C" __global__ void distnet_lstm_step_forward(
        const long long n, const T* ax, const T* ah, const T* mask, T* h, T* c,
        T* y, T* gates, T* tanh_c, T* h_prev, T* c_prev,
        const long long t, const long long steps, const long long H) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)blockDim.x * gridDim.x) {
        const long long b = e / H, j = e % H;
        const long long bt = b * steps + t;
        const T* a = ax + bt * 4 * H;          // this step's input part, then the recurrent part
        const T* r = ah + b * 4 * H;
        const T i = distnet_lstm_sigmoid(a[j] + r[j]);
        const T f = distnet_lstm_sigmoid(a[H + j] + r[H + j]);
        const T g = tanh(a[2 * H + j] + r[2 * H + j]);
        const T o = distnet_lstm_sigmoid(a[3 * H + j] + r[3 * H + j]);
        const T m = mask[bt];
        const T hp = h[e], cp = c[e];
        const T cn = f * cp + i * g;
        const T tc = tanh(cn);
        const T hn = o * tc;
        const T cm = m * cn + (1 - m) * cp;     // a padding step (m = 0) keeps the state
        const T hm = m * hn + (1 - m) * hp;
        c[e] = cm;
        h[e] = hm;
        y[bt * H + j] = m * hm;
        T* gt = gates + bt * 4 * H;
        gt[j] = i;
        gt[H + j] = f;
        gt[2 * H + j] = g;
        gt[3 * H + j] = o;
        tanh_c[bt * H + j] = tc;
        h_prev[bt * H + j] = hp;
        c_prev[bt * H + j] = cp;
    }
}
""")

STEP_BACKWARD = Kernel("distnet_lstm_step_backward", r"""
extern "C" __global__ void distnet_lstm_step_backward(
        const long long n, T* dh, T* dc, const T* dh_rec, const T* dy, const T* mask,
        const T* gates, const T* tanh_c, const T* c_prev, T* da, T* da_step,
        const long long t, const long long steps, const long long H, const long long with_rec) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)blockDim.x * gridDim.x) {
        const long long b = e / H, j = e % H;
        const long long bt = b * steps + t;
        const T m = mask[bt];
        // dh holds the kept part of the next step's gradient; dh_rec = (next step's da) Wh
        T dhv = dh[e];
        if (with_rec) dhv = dhv + dh_rec[e];
        dhv = dhv + m * dy[bt * H + j];
        const T dcv = dc[e];
        const T dhn = m * dhv;
        T dcn = m * dcv;
        const T dh_keep = (1 - m) * dhv, dc_keep = (1 - m) * dcv;
        const T* gt = gates + bt * 4 * H;
        const T i = gt[j], f = gt[H + j], g = gt[2 * H + j], o = gt[3 * H + j];
        const T tc = tanh_c[bt * H + j];
        dcn = dcn + dhn * o * (1 - tc * tc);
        const T da_i = dcn * g * i * (1 - i);
        const T da_f = dcn * c_prev[bt * H + j] * f * (1 - f);
        const T da_g = dcn * i * (1 - g * g);
        const T da_o = dhn * tc * o * (1 - o);
        T* d = da + bt * 4 * H;
        d[j] = da_i;
        d[H + j] = da_f;
        d[2 * H + j] = da_g;
        d[3 * H + j] = da_o;
        T* ds = da_step + b * 4 * H;           // contiguous copy for the step's dh GEMM
        ds[j] = da_i;
        ds[H + j] = da_f;
        ds[2 * H + j] = da_g;
        ds[3 * H + j] = da_o;
        dh[e] = dh_keep;
        dc[e] = dc_keep + dcn * f;
    }
}
""")


def step_forward(t, ax, ah, mask, h, c, y, gates, tanh_c, h_prev, c_prev):
    """Step ``t`` of the forward: gates from ``ax[:, t] + ah`` (``ah = h Wh^T``, ``(B, 4H)``),
    the masked update of ``h, c (B, H)`` in place, and what the backward reads, written at
    ``[:, t]``: ``y``, ``gates``, ``tanh_c``, and the state before the step in ``h_prev, c_prev``.
    One launch."""
    B, steps, H = y.shape
    STEP_FORWARD(B * H, ax, ah, mask, h, c, y, gates, tanh_c, h_prev, c_prev, int(t), steps, H)


def step_backward(t, dh, dc, dh_rec, dy, mask, gates, tanh_c, c_prev, da, da_step):
    """Step ``t`` of the backward: with ``dh (B, H)`` the kept part of the gradient after step
    ``t`` and ``dh_rec (B, H)`` the recurrent part (``da_{t+1} Wh``; None at the last step),
    writes the gate gradients into ``da[:, t]`` and ``da_step (B, 4H)``, and leaves in ``dh, dc``
    the kept part of the gradient before step ``t`` (the caller adds ``da_step Wh`` to ``dh``).
    One launch."""
    B, steps, H = dy.shape
    with_rec = dh_rec is not None
    STEP_BACKWARD(B * H, dh, dc, dh_rec if with_rec else dh, dy, mask, gates, tanh_c, c_prev, da,
                  da_step, int(t), steps, H, int(with_rec))
