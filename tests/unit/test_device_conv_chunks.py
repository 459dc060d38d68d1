"""The device path of the batch im2col conv in blocks of output rows (distnet/ops/conv/blocked.py,
its budget sized from the device's free memory or fixed by ``DEVICE_COLS_BYTES``): with the
budget set small, forward and backward (strides, padding, a
fused ReLU, a cropped ``dx`` written into ``dx_out``, a workspace reused) agree with numpy and
with the single-block device result, the scratch arrays stay under the budget, and a batch that
fits in one block takes exactly the single-block code (same bits, same calls). The agreement
tests run on every device backend (devicelike here, cupy on a GPU); allocations and calls are
measured on devicelike."""

import numpy as np
import pytest

from distnet.backend import get_array_module
from distnet.ops.conv import blocked, conv2d_bprop, conv2d_fprop
from distnet.ops.conv.shapes import norm_pad
from distnet.ops.cuda import launch
from distnet.ops.workspace import Workspace
from distnet.testing import measure
from distnet.testing.backends import AGREEMENT, DEVICE_BACKENDS, assert_agree, make_backend
from distnet.testing.devicelike import xp

#: (B, C, H, W, K, fh, fw, stride, pad)
GEOMETRIES = {
    "3x3_same": (2, 3, 13, 9, 4, 3, 3, (1, 1), ((1, 1), (1, 1))),
    "strided_padded": (3, 2, 15, 10, 3, 3, 2, (2, 2), ((1, 2), (0, 1))),
    "stride3_unread_rows": (2, 2, 17, 9, 2, 2, 2, (3, 3), None),
    "wide_filter_batch1": (1, 2, 12, 11, 5, 5, 3, (1, 2), ((2, 2), (1, 1))),
}
DTYPES = ["float32", "float64"]


def _block_rows(geom, dtype):
    B, C, H, W, K, fh, fw, stride, pad = geom
    y = conv2d_fprop(np.zeros((B, C, H, W)), np.zeros((K, C, fh, fw)), stride, pad=pad)
    return blocked.block_rows((B, C, H, W), (K, C, fh, fw), stride, y.shape[2:],
                              np.dtype(dtype).itemsize, blocked.cols_budget(xp), norm_pad(pad)), y.shape[2]


def _budget_for_rows(geom, dtype, rows):
    """The smallest budget whose blocks hold ``rows`` output rows of ``geom``: the patch matrix,
    the GEMM output and the input band of ``rows`` rows each fit."""
    B, C, H, W, K, fh, fw, stride, pad = geom
    Wp = W + (sum(pad[1]) if pad else 0)
    Wo = (Wp - fw) // stride[1] + 1
    return np.dtype(dtype).itemsize * B * max(C * fh * fw * Wo * rows, K * Wo * rows,
                                              C * Wp * ((rows - 1) * stride[0] + fh))


def _small_budget(geom, dtype, blocks=3):
    """A budget that cuts ``geom``'s output rows into at least ``blocks`` blocks."""
    Ho = _block_rows(geom, dtype)[1]
    return _budget_for_rows(geom, dtype, max(1, Ho // blocks - 1))


def _inputs(geom, dtype):
    B, C, H, W, K, fh, fw, stride, pad = geom
    rng = np.random.default_rng(B * H + W)
    x = rng.standard_normal((B, C, H, W)).astype(dtype)
    w = (rng.standard_normal((K, C, fh, fw)) / np.sqrt(C * fh * fw)).astype(dtype)
    y = conv2d_fprop(x, w, stride, pad=pad, relu=True)
    return x, w, rng.standard_normal(y.shape).astype(dtype)


def _run(x, w, dy, geom, work=None, crop=None, chwn=False):
    """The layer-style calls: fused ReLU forward; backward through the ReLU, full ``dx`` or the
    ``crop`` of it written into ``dx_out``; and the weight gradient alone. Twice with a
    workspace (its buffers reused)."""
    stride, pad = geom[7], geom[8]
    mod = get_array_module(x)
    for _ in range(2 if work is not None else 1):
        y = conv2d_fprop(x, w, stride, pad=pad, relu=True, work=work)
        if crop is None:
            dx, dw = conv2d_bprop(x, w, dy, stride, pad=pad, relu_y=y, work=work)
        else:
            (ct, cb), (cl, cr) = crop
            B, C, H, W = x.shape
            shape = (B, C, H - ct - cb, W - cl - cr)
            dx = (mod.empty(shape[1:] + shape[:1], dtype=x.dtype).transpose(3, 0, 1, 2) if chwn
                  else mod.empty(shape, dtype=x.dtype))
            r, dw = conv2d_bprop(x, w, dy, stride, crop=crop, dx_out=dx, relu_y=y, work=work)
            assert r is dx
        none, dw_only = conv2d_bprop(x, w, dy, stride, pad=pad, need_dx=False, relu_y=y, work=work)
        assert none is None
    return {"y": y, "dx": dx, "dw": dw, "dw_only": dw_only}


def _host(res):
    return {k: v if isinstance(v, np.ndarray) else v.get() for k, v in res.items()}


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_blocks_agree_with_numpy_and_with_one_block(backend, name, dtype, monkeypatch):
    be = make_backend(backend, dtype)
    geom = GEOMETRIES[name]
    x, w, dy = _inputs(geom, dtype)
    want = _run(x, w, dy, geom)
    dev = tuple(be.xp.asarray(a) for a in (x, w, dy))
    one = _host(_run(*dev, geom))
    assert _block_rows(geom, dtype)[0] >= _block_rows(geom, dtype)[1]      # default: one block
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", _small_budget(geom, dtype))
    n, Ho = _block_rows(geom, dtype)
    assert -(-Ho // n) >= 3, (n, Ho)                                         # several blocks
    blocks = _host(_run(*dev, geom, work=Workspace()))
    for key in want:
        assert blocks[key].dtype == want[key].dtype
        assert_agree(blocks[key], want[key], dtype, err_msg=f"{key} vs numpy")
        assert_agree(blocks[key], one[key], dtype, err_msg=f"{key} vs one block")
    # an output pixel is the same dot product in any block; a dx pixel adds the same taps
    np.testing.assert_allclose(blocks["y"], one["y"], rtol=AGREEMENT[dtype]["rtol"])


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("chwn", [False, True])
@pytest.mark.parametrize("crop", [((0, 0), (0, 0)), ((1, 2), (2, 0))])
def test_a_cropped_input_gradient_in_blocks(backend, crop, chwn, monkeypatch):
    """A layer's tile inside its chunk: ``dx`` cropped and written into ``dx_out`` (NCHW, or
    batch-innermost memory, which the blocks fold into directly when nothing is cropped)."""
    geom = (2, 2, 14, 12, 3, 3, 3, (1, 1), None)
    x, w, dy = _inputs(geom, "float64")
    want = _run(x, w, dy, geom, crop=crop)
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", _small_budget(geom, "float64", blocks=4))
    dev = make_backend(backend).xp
    got = _host(_run(*(dev.asarray(a) for a in (x, w, dy)), geom, work=Workspace(), crop=crop,
                     chwn=chwn))
    for key in want:
        assert_agree(got[key], want[key], "float64", err_msg=key)


def test_blocks_without_fused_kernels_agree(monkeypatch):
    """Where no kernel can be launched (devicelike without a C++ compiler), the blocks fold
    with the generic array-module code."""
    monkeypatch.delitem(launch._RUNNERS, "devicelike", raising=False)
    geom = GEOMETRIES["strided_padded"]
    x, w, dy = _inputs(geom, "float64")
    want = _run(x, w, dy, geom)
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", _small_budget(geom, "float64"))
    got = _host(_run(*(xp.asarray(a) for a in (x, w, dy)), geom))
    for key in want:
        assert_agree(got[key], want[key], "float64", err_msg=key)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_scratch_stays_under_the_budget(name, monkeypatch):
    """Every array the blocked path allocates is under the budget, except the activation-sized
    ones (the padded batch-innermost copy of x, y, dx and its padded form, the ReLU's dz); one
    block (the default budget) allocates the whole patch matrix, larger."""
    geom = GEOMETRIES[name]
    B, C, H, W, K, fh, fw, stride, pad = geom
    x, w, dy = _inputs(geom, "float64")
    Hp, Wp = H + (sum(pad[0]) if pad else 0), W + (sum(pad[1]) if pad else 0)
    activations = {x.nbytes, dy.nbytes, x.itemsize * B * C * Hp * Wp}
    dev = tuple(xp.asarray(a) for a in (x, w, dy))
    with measure.allocations() as whole:
        _run(*dev, geom)
    patch_matrix = x.itemsize * C * fh * fw * dy[0, 0].size * B
    assert patch_matrix in whole
    budget = _small_budget(geom, "float64")
    assert patch_matrix > budget
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", budget)
    for work in (None, Workspace()):
        with measure.allocations() as sizes:
            _run(*dev, geom, work=work)
        over = [s for s in sizes if s > budget and s not in activations]
        assert not over, (over, budget)
        if work is not None:
            assert work._bufs["block_cols"].nbytes <= budget
            assert all(a.nbytes <= budget or a.nbytes in activations for a in work._bufs.values())


def test_one_block_is_the_single_block_code(monkeypatch):
    """A budget that the whole patch matrix just fits gives the default run's bits and calls."""
    geom = GEOMETRIES["strided_padded"]
    B, C, H, W, K, fh, fw, stride, pad = geom
    x, w, dy = _inputs(geom, "float64")
    dev = tuple(xp.asarray(a) for a in (x, w, dy))

    def counted():
        xp.counts.clear()
        res = _host(_run(*dev, geom))
        return res, xp.counts["calls"]
    ref, calls = counted()
    Ho = dy.shape[2]
    exact = _budget_for_rows(geom, "float64", Ho)
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", exact)
    assert _block_rows(geom, "float64")[0] == Ho
    got, got_calls = counted()
    assert got_calls == calls
    for key in ref:
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", exact - 1)              # one byte less: blocks
    assert _block_rows(geom, "float64")[0] < Ho


def test_calls_grow_with_the_blocks_only(monkeypatch):
    """Each block is a fixed number of calls (copies, GEMMs, one fold, the views they take),
    whatever the filter size: one forward and two backward passes cost at most 60 per block.
    Without the fused fold (no host compiler to run it) the fold is one call per tap."""
    if not launch.available(xp):
        pytest.skip("the device-like module has no fused kernels here (no C++ compiler)")
    per = {}
    for fsize in (3, 5):
        geom = (2, 3, 13, 9, 4, fsize, fsize, (1, 1), ((fsize // 2,) * 2,) * 2)
        x, w, dy = _inputs(geom, "float64")
        dev = tuple(xp.asarray(a) for a in (x, w, dy))
        Ho = dy.shape[2]
        counts = []
        for rows in (5, 2):                                  # 3 and 7 blocks of 13 rows
            monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", _budget_for_rows(geom, "float64", rows))
            assert _block_rows(geom, "float64")[0] == rows
            xp.counts.clear()
            _run(*dev, geom)
            counts.append((-(-Ho // rows), xp.counts["calls"]))
        (b0, c0), (b1, c1) = counts
        per[fsize] = (c1 - c0) / (b1 - b0)
    assert per[3] == per[5] and per[3] <= 60, per


@pytest.fixture
def free_memory(monkeypatch):
    """Set the device-like module's free memory (bytes): the budget is sized afresh from it."""
    def set_free(free):
        monkeypatch.setattr(xp.cuda, "mem_info", (free, 16 << 30))
        monkeypatch.setattr(blocked, "_sized", {})
    monkeypatch.setattr(blocked, "_sized", {})
    return set_free


@pytest.mark.parametrize("free,budget", [(8 << 30, 256 << 20), (5 << 30, 128 << 20),
                                         (100 << 20, blocked.COLS_BYTES_MIN),
                                         (1 << 40, blocked.COLS_BYTES_MAX)])
def test_the_budget_is_a_power_of_two_share_of_the_free_memory(free, budget, free_memory, monkeypatch):
    free_memory(free)
    assert blocked.cols_budget(xp) == budget
    monkeypatch.setattr(xp.cuda, "mem_info", (free // 3, 16 << 30))   # read once: later figures
    assert blocked.cols_budget(xp) == budget                           # change nothing
    monkeypatch.setattr(blocked, "DEVICE_COLS_BYTES", 12345)            # a fixed budget wins
    assert blocked.cols_budget(xp) == 12345


def test_little_free_memory_cuts_the_batch_into_blocks(free_memory, monkeypatch):
    """The same conv on a device with plenty of free memory (one block: the single-block code) and
    with little (blocks of rows, each under the budget): the same results."""
    geom = GEOMETRIES["3x3_same"]
    x, w, dy = _inputs(geom, "float64")
    dev = tuple(xp.asarray(a) for a in (x, w, dy))
    free_memory(8 << 30)
    whole = _host(_run(*dev, geom))
    small = _budget_for_rows(geom, "float64", 3)
    monkeypatch.setattr(blocked, "COLS_BYTES_MIN", 1)
    free_memory(int(small / blocked.COLS_FREE_FRACTION))
    budget = blocked.cols_budget(xp)
    assert budget <= small and _block_rows(geom, "float64")[0] < dy.shape[2]
    with measure.allocations() as sizes:
        parts = _host(_run(*dev, geom, work=Workspace()))
    patch_matrix = x.itemsize * np.prod(w.shape[1:]) * dy[0, 0].size * x.shape[0]
    assert patch_matrix not in sizes
    for key in whole:
        assert_agree(parts[key], whole[key], "float64", err_msg=key)
