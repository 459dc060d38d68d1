"""The LCN kernels (distnet/ops/cuda/lcn.py) through the ops the LCN layer calls: on each device
backend (the device-like module runs their CUDA C on the host, distnet/testing/cuda_emulator.py;
cupy on a GPU) they give what the tap-by-tap numpy code gives, bit for bit (the same terms added in
the same order, no fused multiply-adds), in float32 and float64, with one map for every channel
(what the layer passes) and one map per channel, on inputs of any strides; and each op takes a
fixed number of device calls whatever the filter size (the numpy code takes several per filter
tap), counted on the device-like module."""
import numpy as np
import pytest

from distnet.layers import LCNLayer
from distnet.ops.cuda import launch
from distnet.ops.lcn import (lcn_bprop, lcn_bprop_divisive, lcn_bprop_subtractive, lcn_filter,
                             lcn_fprop, lcn_fprop_divisive, lcn_fprop_subtractive, lcn_mean,
                             lcn_mean_adjoint, shared_map)
from distnet.testing.backends import DEVICE_BACKENDS
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend
from tests.unit.test_layers_gb import ready

DTYPES = [np.float32, np.float64]
#: (B, C, Hc, Wc, fh, fw): chunks of odd and even sizes, batch 1, one channel, a 1-wide filter,
#: neon's 9x9 filter on an MNIST-like chunk, a filter as large as the chunk.
GEOMETRIES = [(2, 3, 9, 12, 3, 5), (1, 1, 7, 7, 3, 3), (3, 2, 8, 5, 1, 3), (2, 4, 13, 11, 5, 1),
              (2, 2, 36, 36, 9, 9), (1, 3, 5, 5, 5, 5)]


def filters(C, fshape, dtype, rng):
    """``{"shared": (1, fh, fw) neon filter, "per_channel": (C, fh, fw) different maps}``."""
    return {"shared": shared_map(lcn_filter(C, fshape, dtype)),
            "per_channel": rng.uniform(0.05, 1.0, (C,) + tuple(fshape)).astype(dtype)}


def layout(dev, a, how):
    """``a`` (host, ``(B, C, H, W)``) on the device module ``dev`` as a C-contiguous array, or as
    a view of CHWN memory (how the window layers hand over their outputs), or a view cut from a
    larger array."""
    if how == "contiguous":
        return dev.asarray(a)
    if how == "chwn":
        return dev.asarray(np.ascontiguousarray(a.transpose(1, 2, 3, 0))).transpose(3, 0, 1, 2)
    big = np.full((a.shape[0] + 1, a.shape[1] + 2) + a.shape[2:], np.nan, dtype=a.dtype)
    big[1:, 1:-1] = a
    return dev.asarray(big)[1:, 1:-1]


def blank(x):
    """Zero a corner of ``x`` (B, C, H, W), so that the divisive stage meets v == 0."""
    x[..., : -(-x.shape[2] // 2), : -(-x.shape[3] // 2)] = 0
    return x


def calls(fn, *args):
    """``fn(*args)`` and the device-like module's calls and waits during it (meaningful when the
    arguments are device-like arrays)."""
    xp.counts.clear()
    out = fn(*args)
    return out, xp.counts["calls"], xp.counts["syncs"]


@pytest.mark.parametrize("how", ["contiguous", "chwn", "view"])
@pytest.mark.parametrize("maps", ["shared", "per_channel"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES)
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_mean_equals_the_tap_by_tap_mean_in_one_launch(backend, geom, dtype, maps, how):
    be = device_backend(backend)
    B, C, Hc, Wc, fh, fw = geom
    rng = np.random.default_rng(sum(geom))
    w = filters(C, (fh, fw), dtype, rng)[maps]
    x = rng.standard_normal((B, C, Hc, Wc)).astype(dtype)
    want = lcn_mean(w, x)
    got, n, waits = calls(lcn_mean, be.xp.asarray(w), layout(be.xp, x, how))
    assert got.dtype == want.dtype == dtype and got.shape == want.shape == (B, 1, Hc - fh + 1, Wc - fw + 1)
    np.testing.assert_array_equal(be.to_host(got), want)
    if be.xp is xp:
        assert (n, waits) == (2, 0)         # the output, the launch


@pytest.mark.parametrize("maps", ["shared", "per_channel"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES)
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_mean_adjoint_is_a_gather_equal_to_the_tap_by_tap_scatter(backend, geom, dtype, maps):
    be = device_backend(backend)
    B, C, Hc, Wc, fh, fw = geom
    rng = np.random.default_rng(sum(geom) + 1)
    w = filters(C, (fh, fw), dtype, rng)[maps]
    gm = rng.standard_normal((B, 1, Hc - fh + 1, Wc - fw + 1)).astype(dtype)
    want = lcn_mean_adjoint(w, gm, (B, C, Hc, Wc))
    got, n, waits = calls(lcn_mean_adjoint, be.xp.asarray(w), be.xp.asarray(gm), (B, C, Hc, Wc))
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(be.to_host(got), want)
    if be.xp is xp:
        assert (n, waits) == (2, 0)


@pytest.mark.parametrize("how", ["contiguous", "chwn"])
@pytest.mark.parametrize("maps", ["shared", "per_channel"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES)
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_stages_equal_numpy_bit_for_bit_in_a_fixed_number_of_calls(backend, geom, dtype, maps, how):
    """The four stages as a distributed layer calls them (tile and chunk given separately),
    with a blank region where the divisor is replaced by 1; the forward stages take 3 device
    calls each, the backward ones 5 and 4 (one more for a non-contiguous operand read flat),
    whatever the filter size, and none waits."""
    be = device_backend(backend)
    B, C, Hc, Wc, fh, fw = geom
    h, wd = Hc - fh + 1, Wc - fw + 1
    t, l = (fh - 1) // 2, (fw - 1) // 2
    rng = np.random.default_rng(sum(geom) + 2)
    w = filters(C, (fh, fw), dtype, rng)[maps]
    x_chunk = blank(rng.standard_normal((B, C, Hc, Wc)).astype(dtype))
    x_tile = np.ascontiguousarray(x_chunk[:, :, t:t + h, l:l + wd])
    e = rng.standard_normal((B, C, h, wd)).astype(dtype)
    s_chunk = rng.standard_normal((B, C, Hc, Wc)).astype(dtype)     # ghosts from neighbours
    s_chunk[:, :, t:t + h, l:l + wd] = s_sub = lcn_fprop_subtractive(x_tile, x_chunk, w)
    s = np.ascontiguousarray(blank(s_chunk)[:, :, t:t + h, l:l + wd])
    y, d = lcn_fprop_divisive(s, s_chunk, w)
    gs_direct, gs_chunk = lcn_bprop_divisive(e, s, s_chunk, d, w)
    gx_direct, gx_chunk = lcn_bprop_subtractive(gs_direct, x_chunk.shape, w)
    assert (d == 1).any() == (-(-Hc // 2) >= fh and -(-Wc // 2) >= fw)    # a blank window

    W = be.xp.asarray(w)
    dev = {k: layout(be.xp, v, how) for k, v in dict(x_tile=x_tile, x_chunk=x_chunk, s=s, s_chunk=s_chunk,
                                                e=e, gs=gs_direct).items()}
    got_s, n1, w1 = calls(lcn_fprop_subtractive, dev["x_tile"], dev["x_chunk"], W)
    (got_y, got_d), n2, w2 = calls(lcn_fprop_divisive, dev["s"], dev["s_chunk"], W)
    (got_gsd, got_gsc), n3, w3 = calls(lcn_bprop_divisive, dev["e"], dev["s"], dev["s_chunk"], be.xp.asarray(d), W)
    (got_gxd, got_gxc), n4, w4 = calls(lcn_bprop_subtractive, dev["gs"], x_chunk.shape, W)
    for got, want in ((got_s, s_sub), (got_y, y), (got_d, d), (got_gsd, gs_direct), (got_gsc, gs_chunk),
                      (got_gxd, gx_direct), (got_gxc, gx_chunk)):
        assert got.dtype == want.dtype == dtype and got.shape == want.shape
        np.testing.assert_array_equal(be.to_host(got), want)
    if be.xp is not xp:
        return
    assert w1 + w2 + w3 + w4 == 0
    if how == "contiguous":
        assert (n1, n2, n3, n4) == (3, 3, 5, 4)
    else:   # a non-contiguous operand the kernel reads flat is copied first
        assert (n1, n2) == (3, 3) and n3 <= 6 and n4 <= 5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fshape", [(3, 3), (5, 3), (9, 9)])
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_single_process_lcn_with_zero_padding(backend, B, fshape, dtype):
    """lcn_fprop / lcn_bprop (padding, then the stages) with a shared map: bit-equal to numpy
    and the same number of device calls for every filter size."""
    be = device_backend(backend)
    rng = np.random.default_rng(B + fshape[0])
    x = blank(rng.standard_normal((B, 2, 11, 10)).astype(dtype))
    e = rng.standard_normal(x.shape).astype(dtype)
    w = shared_map(lcn_filter(2, fshape, dtype))
    y, cache = lcn_fprop(x, w)
    dx = lcn_bprop(e, cache, w)
    (got_y, got_cache), n1, w1 = calls(lcn_fprop, be.xp.asarray(x), be.xp.asarray(w))
    got_dx, n2, w2 = calls(lcn_bprop, be.xp.asarray(e), got_cache, be.xp.asarray(w))
    np.testing.assert_array_equal(be.to_host(got_y), y)
    np.testing.assert_array_equal(be.to_host(got_cache.d), cache.d)
    np.testing.assert_array_equal(be.to_host(got_dx), dx)
    if be.xp is xp:
        assert (n1, n2, w1 + w2) == (8, 13, 0)


def run_layer(fshape, backend, x, e):
    """An LCNLayer's forward and backward on ``backend``: ``(y, dx, device-like calls)``, the
    arrays on the host."""
    layer = ready(LCNLayer(fshape=fshape), x.shape[1:], backend=backend)
    be = layer.ctx.backend
    xp.counts.clear()
    y = layer.fprop(be.xp.asarray(x))
    dx = layer.bprop(be.xp.asarray(e))
    n, waits = xp.counts["calls"], xp.counts["syncs"]
    assert waits == 0
    return be.to_host(y), be.to_host(dx), n


@pytest.mark.parametrize("fshape", [[3, 5], [5, 1], 9])
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_lcn_layer_on_the_device_equals_numpy_in_calls_independent_of_the_filter(backend, fshape):
    """LCNLayer (what a model runs): the same output and input gradient as on numpy, bit for
    bit, and a forward + backward takes as many device calls as with a 3x3 filter."""
    device_backend(backend)
    rng = np.random.RandomState(4)
    x = blank(rng.standard_normal((2, 3, 10, 11)))
    e = rng.standard_normal(x.shape)
    y, dx, _ = run_layer(fshape, "numpy", x, e)
    got_y, got_dx, n = run_layer(fshape, backend, x, e)
    np.testing.assert_array_equal(got_y, y)
    np.testing.assert_array_equal(got_dx, dx)
    if backend == "devicelike":
        assert n == run_layer(3, backend, x, e)[2]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_a_host_filter_and_mixed_dtypes_follow_the_numpy_code(backend):
    """The tap-by-tap code accepts a numpy filter with device data and returns the result dtype
    of filter and data; so do the kernels (the filter is copied to the device). They compute in
    that dtype throughout (numpy sums the float32 channels in float32 first: float32 rounding)."""
    be = device_backend(backend)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    w = shared_map(lcn_filter(3, (3, 3), np.float64))
    want = lcn_mean(w, x)
    got = be.to_host(lcn_mean(w, be.xp.asarray(x)))
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(got, lcn_mean(w, x.astype(np.float64)))
    gm = rng.standard_normal((2, 1, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(be.to_host(lcn_mean_adjoint(be.xp.asarray(w), be.xp.asarray(gm), x.shape)),
                                  lcn_mean_adjoint(w, gm, x.shape))


def test_without_kernels_the_device_code_does_not_wait_either(monkeypatch):
    """With the kernels off (``DISTNET_CUDA_KERNELS=0``, or devicelike without a C++ compiler)
    the generic array code runs on the device: the same numbers, and the divisor's 1s need no
    host wait (a boolean-mask assignment would: cupy reads the mask's count back)."""
    monkeypatch.setattr(launch, "ENABLED", False)
    assert not launch.available(xp)
    rng = np.random.default_rng(6)
    x = blank(rng.standard_normal((2, 2, 7, 9)))
    e = rng.standard_normal(x.shape)
    w = shared_map(lcn_filter(2, (3, 3)))
    y, cache = lcn_fprop(x, w)
    xp.counts.clear()
    got_y, got_cache = lcn_fprop(xp.asarray(x), xp.asarray(w))
    got_dx = lcn_bprop(xp.asarray(e), got_cache, xp.asarray(w))
    assert xp.counts["syncs"] == 0 and xp.counts["calls"] > 100      # one per tap
    np.testing.assert_array_equal(got_y.get(), y)
    np.testing.assert_array_equal(got_dx.get(), lcn_bprop(e, cache, w))


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_an_empty_batch_keeps_its_shapes(backend):
    """A data replica may get no rows of a short last batch: the shapes numpy gives."""
    be = device_backend(backend)
    w = shared_map(lcn_filter(2, (3, 3)))
    x = np.zeros((0, 2, 5, 6))
    y, cache = lcn_fprop(x, w)
    got_y, got_cache = lcn_fprop(be.xp.asarray(x), be.xp.asarray(w))
    got_dx = lcn_bprop(be.xp.asarray(x), got_cache, be.xp.asarray(w))
    assert got_y.shape == y.shape and got_cache.d.shape == cache.d.shape
    assert got_dx.shape == lcn_bprop(x, cache, w).shape == x.shape
