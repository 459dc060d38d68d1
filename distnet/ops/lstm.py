"""LSTM over variable-length sequences in one batch: forward and backward through time.

Shapes (batch-major, as the sequence HDF5 layout stores tokens): ``x (B, T, D)`` inputs,
``mask (B, T)`` (1.0 where step ``t < length[b]``, 0.0 on padding), states ``h, c (B, H)``.
One layer's weights: ``Wx (4H, D)``, ``Wh (4H, H)``, ``b (4H,)``; the gate rows are, in order,
input ``i``, forget ``f``, candidate ``g``, output ``o``::

    a = x_t Wx^T + h_{t-1} Wh^T + b;  i, f, o = sigmoid(a_i, a_f, a_o);  g = tanh(a_g)
    c' = f * c_{t-1} + i * g;         h' = o * tanh(c')
    c_t = m_t c' + (1 - m_t) c_{t-1}; h_t = m_t h' + (1 - m_t) h_{t-1};   y_t = m_t h_t

so a masked (padding) step keeps the state, its output is 0, and the final state ``(h_T, c_T)``
of every sequence is its state after its own last token (NStepLSTM's variable lengths, with
padding instead of sorted packed sequences). A stack runs layer ``l`` on the outputs of layer
``l - 1`` with initial states ``h0[l], c0[l]``.

Pure array code (numpy or cupy through ``get_array_module``); no MPI. On a device module with
fused kernels (:func:`distnet.ops.cuda.launch.available`) each time step is one recurrent GEMM
plus one kernel for its gates and state update (:mod:`distnet.ops.cuda.lstm`), forward and
backward, and ``dWh`` is one GEMM over all steps; numpy keeps the code below.
"""
from ..backend import get_array_module
from . import dispatch
from .cuda import lstm as cuda_lstm


def _sigmoid(xp, a):
    return 0.5 * (xp.tanh(0.5 * a) + 1.0)


@dispatch.op
def lstm_forward(x, mask, h0, c0, Wx, Wh, b):
    """One LSTM layer over ``T`` steps. Returns ``(y (B, T, H), hT (B, H), cT (B, H), cache)``."""
    xp = get_array_module(x)
    B, T, _ = x.shape
    H = Wh.shape[1]
    ax = x @ Wx.T + b                              # (B, T, 4H): the input part of every step
    y = xp.zeros((B, T, H), dtype=x.dtype)
    hs, cs, gates, tcs = [h0], [c0], [], []
    h, c = h0, c0
    for t in range(T):
        a = ax[:, t] + h @ Wh.T
        i, f = _sigmoid(xp, a[:, :H]), _sigmoid(xp, a[:, H:2 * H])
        g, o = xp.tanh(a[:, 2 * H:3 * H]), _sigmoid(xp, a[:, 3 * H:])
        cn = f * c + i * g
        tc = xp.tanh(cn)
        hn = o * tc
        m = mask[:, t:t + 1]
        c = m * cn + (1 - m) * c
        h = m * hn + (1 - m) * h
        y[:, t] = m * h
        gates.append((i, f, g, o))
        tcs.append(tc)
        hs.append(h)
        cs.append(c)
    return y, h, c, (x, mask, Wx, Wh, hs, cs, gates, tcs)


@dispatch.op
def lstm_backward(dy, dhT, dcT, cache):
    """Backward through time of :func:`lstm_forward`. ``dy (B, T, H)``, ``dhT, dcT (B, H)``
    (gradients of the final states; zeros if unused). Returns ``(dx, dh0, dc0, dWx, dWh, db)``."""
    x, mask, Wx, Wh, hs, cs, gates, tcs = cache
    xp = get_array_module(x)
    B, T, _ = x.shape
    H = Wh.shape[1]
    da_all = xp.zeros((B, T, 4 * H), dtype=x.dtype)
    dWh = xp.zeros_like(Wh)
    dh, dc = dhT.copy(), dcT.copy()
    for t in range(T - 1, -1, -1):
        m = mask[:, t:t + 1]
        i, f, g, o = gates[t]
        tc, c_prev, h_prev = tcs[t], cs[t], hs[t]
        dh = dh + m * dy[:, t]
        dhn, dcn = m * dh, m * dc                  # into the new state
        dh_keep, dc_keep = (1 - m) * dh, (1 - m) * dc
        dcn = dcn + dhn * o * (1 - tc * tc)
        da = da_all[:, t]
        da[:, :H] = dcn * g * i * (1 - i)
        da[:, H:2 * H] = dcn * c_prev * f * (1 - f)
        da[:, 2 * H:3 * H] = dcn * i * (1 - g * g)
        da[:, 3 * H:] = dhn * tc * o * (1 - o)
        dWh += da.T @ h_prev
        dh = dh_keep + da @ Wh
        dc = dc_keep + dcn * f
    dx = da_all @ Wx
    dWx = da_all.reshape(B * T, 4 * H).T @ x.reshape(B * T, x.shape[-1])   # B may be 0 (a replica without rows)
    db = da_all.sum(axis=(0, 1))
    return dx, dh, dc, dWx, dWh, db


class _FusedCache(tuple):
    """What the fused forward keeps for the fused backward: ``(x, mask, Wx, Wh, gates
    (B, T, 4H), tanh_c, h_prev, c_prev (B, T, H))``, the last two the state before each step."""


def _contiguous(xp, a, dtype):
    """``a`` as a C-contiguous array of ``dtype`` (itself when it is one): what a kernel reads."""
    if a.dtype != dtype:
        a = a.astype(dtype)
    return a if a.flags.c_contiguous else xp.ascontiguousarray(a)


@lstm_forward.kernel
def lstm_forward(x, mask, h0, c0, Wx, Wh, b):
    """:func:`lstm_forward` with one fused launch per step (:func:`distnet.ops.cuda.lstm
    .step_forward`) after the step's recurrent GEMM, instead of ~20 launches; the same results
    up to the rounding of the GEMMs and of the device's ``tanh``."""
    xp = get_array_module(x)
    B, T, _ = x.shape
    H = Wh.shape[1]
    ax = x @ Wx.T + b                              # (B, T, 4H): the input part of every step
    mask = _contiguous(xp, mask, x.dtype)
    y = xp.empty((B, T, H), dtype=x.dtype)         # every element is written by its step
    gates = xp.empty((B, T, 4 * H), dtype=x.dtype)
    tanh_c, h_prev, c_prev = (xp.empty((B, T, H), dtype=x.dtype) for _ in range(3))
    h, c = h0.copy(), c0.copy()                    # updated in place step by step
    WhT = Wh.T
    for t in range(T):
        cuda_lstm.step_forward(t, ax, h @ WhT, mask, h, c, y, gates, tanh_c, h_prev, c_prev)
    return y, h, c, _FusedCache((x, mask, Wx, Wh, gates, tanh_c, h_prev, c_prev))


@lstm_backward.kernel(when=lambda dy, dhT, dcT, cache: isinstance(cache, _FusedCache))
def lstm_backward(dy, dhT, dcT, cache):
    """:func:`lstm_backward` of the fused forward: per step one fused launch for the gate
    gradients (:func:`distnet.ops.cuda.lstm.step_backward`) and the GEMM ``da_t Wh``; the
    weight gradients are GEMMs over all steps after the loop."""
    x, mask, Wx, Wh, gates, tanh_c, h_prev, c_prev = cache
    xp = get_array_module(x)
    B, T, D = x.shape
    H = Wh.shape[1]
    dy = _contiguous(xp, dy, x.dtype)
    da_all = xp.empty((B, T, 4 * H), dtype=x.dtype)   # every element is written by its step
    da_step = xp.empty((B, 4 * H), dtype=x.dtype)
    dh, dc = dhT.copy(), dcT.copy()                # updated in place step by step
    dh_rec = None
    for t in range(T - 1, -1, -1):
        cuda_lstm.step_backward(t, dh, dc, dh_rec, dy, mask, gates, tanh_c, c_prev, da_all, da_step)
        dh_rec = da_step @ Wh
    if dh_rec is not None:
        dh = dh + dh_rec
    dx = da_all @ Wx
    da_rows = da_all.reshape(B * T, 4 * H)         # B may be 0 (a replica without rows)
    dWx = da_rows.T @ x.reshape(B * T, D)
    dWh = da_rows.T @ h_prev.reshape(B * T, H)
    db = da_all.sum(axis=(0, 1))
    return dx, dh, dc, dWx, dWh, db


def stack_forward(x, mask, h0, c0, weights, drop=None):
    """``len(weights)`` LSTM layers (``weights[l] = (Wx, Wh, b)``), initial states ``h0, c0
    (L, B, H)``; ``drop`` (optional): ``L - 1`` dropout multipliers ``(B, T, H)`` (0 or
    ``1 / (1 - p)``), ``drop[l - 1]`` scales the input of layer ``l``. Returns ``(y (B, T, H),
    hT (L, B, H), cT (L, B, H), caches)``."""
    xp = get_array_module(x)
    hT, cT, caches = [], [], []
    for l, (Wx, Wh, b) in enumerate(weights):
        if l and drop is not None:
            x = x * drop[l - 1]
        x, h, c, cache = lstm_forward(x, mask, h0[l], c0[l], Wx, Wh, b)
        hT.append(h)
        cT.append(c)
        caches.append(cache)
    return x, xp.stack(hT), xp.stack(cT), caches


def stack_backward(dy, dhT, dcT, caches, drop=None):
    """Backward of :func:`stack_forward` (the same ``drop``). ``dhT, dcT (L, B, H)``. Returns
    ``(dx, dh0, dc0, grads)`` with ``dh0, dc0 (L, B, H)`` and ``grads[l] = (dWx, dWh, db)``."""
    xp = get_array_module(dy)
    L = len(caches)
    dh0, dc0, grads = [None] * L, [None] * L, [None] * L
    for l in range(L - 1, -1, -1):
        dy, dh0[l], dc0[l], *g = lstm_backward(dy, dhT[l], dcT[l], caches[l])
        if l and drop is not None:
            dy = dy * drop[l - 1]
        grads[l] = tuple(g)
    return dy, xp.stack(dh0), xp.stack(dc0), grads
