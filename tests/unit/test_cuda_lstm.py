"""The fused LSTM time-step kernels (distnet/ops/cuda/lstm.py), on the device-like module (their
CUDA C run on the host) and on cupy where a GPU is present: the LSTM stack as the seq2seq model
calls it agrees with numpy (distnet.testing.backends' AGREEMENT, float32 and float64; not bit for
bit: the device's tanh is not numpy's) for odd sizes, batch 1, one step, padded and empty
sequences, dropout between layers and non-contiguous inputs, and a time step costs one recurrent
GEMM plus one kernel each way."""
import numpy as np
import pytest

import distnet.ops.cuda.launch
from distnet.comm import Topology
from distnet.models.seq2seq import Seq2Seq
from distnet.ops.lstm import stack_backward, stack_forward
from distnet.testing import cuda_emulator
from distnet.testing.backends import DEVICE_BACKENDS, assert_agree
from distnet.testing.devicelike import DeviceLike, xp
from tests.unit.test_cuda_kernels import device_backend

needs_compiler = pytest.mark.skipif(cuda_emulator.compiler() is None, reason="no C++ compiler")


def _inputs(B, T, D, H, L, lengths, dropout, dtype, seed):
    rng = np.random.default_rng(seed)
    mask = (np.arange(T)[None, :] < np.asarray(lengths)[:, None]).astype(dtype)
    x = rng.normal(size=(B, T, D)).astype(dtype)
    h0, c0 = ((rng.normal(size=(L, B, H)) * 0.5).astype(dtype) for _ in range(2))
    weights = [tuple((rng.normal(size=s) * 0.5).astype(dtype)
                     for s in ((4 * H, D if l == 0 else H), (4 * H, H), (4 * H,))) for l in range(L)]
    dy, dhT, dcT = (rng.normal(size=s).astype(dtype) for s in ((B, T, H), (L, B, H), (L, B, H)))
    drop = [((rng.random((B, T, H)) >= dropout) / (1 - dropout)).astype(dtype)
            for _ in range(L - 1)] if dropout else None
    return dict(x=x, mask=mask, h0=h0, c0=c0, weights=weights, dy=dy, dhT=dhT, dcT=dcT, drop=drop)


def _run(a):
    """Forward and backward of the stack on ``a``'s arrays -> named results (the arrays' module)."""
    y, hT, cT, caches = stack_forward(a["x"], a["mask"], a["h0"], a["c0"], a["weights"], a["drop"])
    dx, dh0, dc0, grads = stack_backward(a["dy"], a["dhT"], a["dcT"], caches, a["drop"])
    out = dict(y=y, hT=hT, cT=cT, dx=dx, dh0=dh0, dc0=dc0)
    for l, g in enumerate(grads):
        out.update({f"{k}{l}": v for k, v in zip(("dWx", "dWh", "db"), g)})
    return out


def _on_device(a, dev=xp, strided=False):
    """``a`` moved to the array module ``dev``; ``strided``: ``mask`` and ``dy`` as
    non-contiguous views (every other column of a wider array), as a caller may pass them."""
    def move(v):
        if isinstance(v, list):
            return [move(e) for e in v]
        if isinstance(v, tuple):
            return tuple(move(e) for e in v)
        return None if v is None else dev.asarray(v)
    d = {k: move(v) for k, v in a.items()}
    if strided:
        for k in ("mask", "dy"):
            wide = np.repeat(a[k], 2, axis=1)
            d[k] = dev.asarray(wide)[:, ::2]
            assert not d[k].flags.c_contiguous
    return d


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("geom", [
    # B, T, D, H, L, lengths, dropout, strided mask and dy
    (3, 5, 4, 3, 2, [5, 2, 0], 0.3, False),        # padded and empty sequences, dropout
    (1, 7, 5, 6, 1, [4], 0.0, False),              # batch 1
    (4, 1, 3, 5, 1, [1, 0, 1, 1], 0.0, True),      # one step (greedy decoding's call)
    (5, 6, 3, 7, 3, [6, 1, 3, 6, 5], 0.2, True),   # three layers, odd sizes
    (2, 9, 1, 1, 2, [9, 8], 0.0, False),           # a single unit
])
def test_stack_on_the_fused_kernels_agrees_with_numpy(backend, geom, dtype):
    be = device_backend(backend)
    B, T, D, H, L, lengths, dropout, strided = geom
    a = _inputs(B, T, D, H, L, lengths, dropout, dtype, seed=B * T + H)
    want = _run(a)
    got = {k: be.to_host(v) for k, v in _run(_on_device(a, be.xp, strided)).items()}
    for k, v in want.items():
        assert got[k].dtype == np.dtype(dtype), k
        assert_agree(got[k], v, dtype, k)
    # a padding step keeps the state, its output is 0
    assert np.all(got["y"][a["mask"] == 0] == 0)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_an_empty_batch_gives_zero_weight_gradients_on_the_fused_kernels(backend):
    """A data replica without rows of a short last batch runs the stack on B = 0."""
    be = device_backend(backend)
    a = _inputs(3, 4, 2, 3, 2, [4, 4, 4], 0.0, "float64", seed=1)
    a = {k: ([tuple(w) for w in v] if k == "weights" else
             None if v is None else v[:, :0] if k in ("h0", "c0", "dhT", "dcT") else v[:0])
         for k, v in a.items()}
    got = {k: be.to_host(v) for k, v in _run(_on_device(a, be.xp)).items()}
    assert got["y"].shape == (0, 4, 3) and got["dx"].shape == (0, 4, 2)
    assert got["hT"].shape == got["dh0"].shape == (2, 0, 3)
    for l, (Wx, Wh, b) in enumerate(a["weights"]):
        for k, w in (("dWx", Wx), ("dWh", Wh), ("db", b)):
            g = got[f"{k}{l}"]
            assert g.shape == w.shape and not g.any()


def _calls(T, L, backward):
    a = _on_device(_inputs(4, T, 3, 5, L, [T] * 4, 0.0, "float64", seed=T))
    xp.counts.clear()
    y, hT, cT, caches = stack_forward(a["x"], a["mask"], a["h0"], a["c0"], a["weights"])
    if not backward:
        return xp.counts.pop("calls", 0)
    xp.counts.clear()
    stack_backward(a["dy"], a["dhT"], a["dcT"], caches)
    return xp.counts.pop("calls", 0)


@needs_compiler
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_a_time_step_is_one_gemm_and_one_kernel_per_layer(backward, monkeypatch):
    for L in (1, 2):
        short, long = _calls(3, L, backward), _calls(9, L, backward)
        assert (long - short) == 2 * L * 6, (L, short, long)
        assert short - 2 * L * 3 <= 16 * L     # plus a set-up per layer independent of T
    # without the kernels (DISTNET_CUDA_KERNELS=0) the generic code takes ~20 launches per step
    monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
    short, long = _calls(3, 1, backward), _calls(9, 1, backward)
    assert long - short >= 6 * 18, (short, long)


def _seq2seq_step_calls(T, nlayers):
    m = Seq2Seq(num_epochs=1, embed=4, hidden=5, nlayers=nlayers, batch_size=6, dropout=0.2)
    m.configure(DeviceLike(rng_seed=4, dtype="float64"), Topology.serial(), 9, 9)
    rng = np.random.default_rng(T)
    src, tgt = rng.integers(4, 9, size=(6, T)), rng.integers(4, 9, size=(6, T))
    src_len, tgt_len = rng.integers(1, T + 1, size=6), rng.integers(1, T + 1, size=6)
    m.train_batch(src, src_len, tgt, tgt_len)
    xp.counts.clear()
    m.train_batch(src, src_len, tgt, tgt_len)
    return xp.counts["calls"]


@needs_compiler
@pytest.mark.parametrize("nlayers", [1, 2])
def test_a_seq2seq_training_step_costs_eight_launches_per_time_step_and_layer(nlayers):
    """Encoder and decoder, forward and backward: 4 kernels and 4 GEMMs per time step and layer
    (the generic code took 156 per time step and layer)."""
    short, long = _seq2seq_step_calls(4, nlayers), _seq2seq_step_calls(8, nlayers)
    assert long - short == 8 * nlayers * 4
