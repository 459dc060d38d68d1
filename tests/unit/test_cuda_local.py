"""Local filtering's fused kernels (distnet/ops/cuda/local.py), run as CUDA C on the host through
the device-like module, against the numpy path of distnet/ops/local.py: every public function as
the layers call it, float32 and float64, strides, odd sizes, windows that do not tile the input,
batch 1, an input that is a strided view (a chunk of a larger array); and each is a fixed
number of device calls whatever the filter size. Every device backend whose arrays take the
kernels (devicelike here, cupy on a GPU); call counts on devicelike."""
import numpy as np
import pytest

import distnet.ops.cuda.launch
from distnet.errors import GeometryError
from distnet.ops.local import local_bprop, local_debprop, local_defprop, local_fprop, normalize_rows
from distnet.testing.backends import DEVICE_BACKENDS, assert_agree
from distnet.testing.devicelike import xp
from tests.unit.test_cuda_kernels import device_backend

#: (B, C, H, W, K, fh, fw, sy, sx)
GEOMETRIES = [
    (3, 2, 8, 7, 3, 3, 2, 1, 1),     # odd sizes, non-square filter
    (2, 3, 9, 9, 2, 3, 3, 2, 2),     # strides, windows tile
    (1, 2, 10, 7, 4, 3, 2, 3, 2),    # batch 1, windows that do not tile (rows and columns left over)
    (2, 1, 6, 6, 2, 6, 6, 1, 1),     # one window covering the input
    (4, 2, 7, 9, 3, 2, 4, 2, 3),     # stride larger than the filter in x: unread columns
]
DTYPES = [np.float32, np.float64]


def _out_hw(H, W, fh, fw, sy, sx):
    return (H - fh) // sy + 1, (W - fw) // sx + 1


def _window(a, geom):
    """The (B, C, H, W) window of ``a`` (a larger array) that a strided-view input reads."""
    B, C, H, W = geom[:4]
    return a[:, 1:, 2:2 + H, 1:1 + W]


def _inputs(geom, dtype, view=False):
    """Host arrays ``(big, x, w, dy)`` for ``geom``; with ``view`` x is a strided window of
    ``big`` (else a contiguous copy)."""
    B, C, H, W, K, fh, fw, sy, sx = geom
    Ho, Wo = _out_hw(H, W, fh, fw, sy, sx)
    rng = np.random.default_rng(sum(geom))
    big = rng.standard_normal((B, C + 1, H + 3, W + 2)).astype(dtype)
    x = _window(big, geom) if view else _window(big, geom).copy()
    F = C * fh * fw
    w = (rng.standard_normal((K, Ho, Wo, F)) / np.sqrt(F)).astype(dtype)
    dy = rng.standard_normal((B, K, Ho, Wo)).astype(dtype)
    return big, x, w, dy


def _device_x(dev, big, x, view, geom):
    """x on the device: the same strided window of a device copy of ``big``, or a copy."""
    return _window(dev.asarray(big), geom) if view else dev.asarray(x)


def _calls(dev, at_most):
    """The device calls since the last ``xp.counts.clear()`` are at most ``at_most`` (counted on
    devicelike only)."""
    if dev is xp:
        assert xp.counts["calls"] <= at_most, xp.counts["calls"]


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("view", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES)
def test_encoder_forward_and_backward_agree_with_numpy(backend, geom, dtype, view):
    be = device_backend(backend)
    dev = be.xp
    big, x, w, dy = _inputs(geom, dtype, view)
    fshape, stride = geom[5:7], geom[7:9]
    y = local_fprop(x, w, fshape, stride)
    dx, dw = local_bprop(x, w, dy, fshape, stride)
    _, dw_only = local_bprop(x, w, dy, fshape, stride, need_dx=False)

    dxd, dwd, dyd = _device_x(dev, big, x, view, geom), dev.asarray(w), dev.asarray(dy)
    assert dxd.flags.c_contiguous != view
    xp.counts.clear()
    yd = local_fprop(dxd, dwd, fshape, stride)
    _calls(dev, 2)                                       # the output's allocation + one launch
    xp.counts.clear()
    gx, gw = local_bprop(dxd, dwd, dyd, fshape, stride)
    _calls(dev, 4)                                       # two allocations + two launches
    xp.counts.clear()
    none, gw_only = local_bprop(dxd, dwd, dyd, fshape, stride, need_dx=False)
    assert none is None
    _calls(dev, 2)
    for got, want, name in ((yd, y, "y"), (gx, dx, "dx"), (gw, dw, "dw"), (gw_only, dw_only, "dw only")):
        assert got.shape == want.shape and got.dtype == want.dtype == dtype, name
        assert_agree(be.to_host(got), want, dtype, err_msg=name)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRIES)
def test_decoder_forward_and_backward_agree_with_numpy(backend, geom, dtype):
    be = device_backend(backend)
    dev = be.xp
    big, x, w, h = _inputs(geom, dtype)
    fshape, stride = geom[5:7], geom[7:9]
    eps = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    xhat = local_defprop(h, w, x.shape, fshape, stride)
    gh, gv = local_debprop(h, w, eps, fshape, stride)

    hd, wd, epsd = dev.asarray(h), dev.asarray(w), dev.asarray(eps)
    xp.counts.clear()
    xhatd = local_defprop(hd, wd, x.shape, fshape, stride)
    _calls(dev, 2)
    xp.counts.clear()
    ghd, gvd = local_debprop(hd, wd, epsd, fshape, stride)
    _calls(dev, 4)
    for got, want, name in ((xhatd, xhat, "xhat"), (ghd, gh, "gh"), (gvd, gv, "gv")):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        assert_agree(be.to_host(got), want, dtype, err_msg=name)


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_the_adjoint_identity_holds_on_the_device(backend):
    """<local_fprop(x, v), h> == <x, local_defprop(h, v)>: the decoder kernel is the adjoint."""
    dev = device_backend(backend).xp
    geom = GEOMETRIES[2]
    _, x, v, h = _inputs(geom, np.float64)
    fshape, stride = geom[5:7], geom[7:9]
    xd, vd, hd = dev.asarray(x), dev.asarray(v), dev.asarray(h)
    lhs = float((local_fprop(xd, vd, fshape, stride) * hd).sum())
    rhs = float((xd * local_defprop(hd, vd, x.shape, fshape, stride)).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12)


@pytest.mark.parametrize("fsize", [2, 5, 9])
def test_calls_do_not_depend_on_the_filter_size(fsize):
    device_backend("devicelike")
    B, C, H, W, K = 2, 3, 12, 11, 2
    rng = np.random.default_rng(fsize)
    Ho, Wo = H - fsize + 1, W - fsize + 1
    x = xp.asarray(rng.standard_normal((B, C, H, W)))
    w = xp.asarray(rng.standard_normal((K, Ho, Wo, C * fsize * fsize)))
    dy = xp.asarray(rng.standard_normal((B, K, Ho, Wo)))
    xp.counts.clear()
    local_fprop(x, w, (fsize, fsize), (1, 1))
    local_bprop(x, w, dy, (fsize, fsize), (1, 1))
    local_defprop(dy, w, x.shape, (fsize, fsize), (1, 1))
    local_debprop(dy, w, x, (fsize, fsize), (1, 1))
    normalize_rows(w)
    assert xp.counts["calls"] == 2 + 4 + 2 + 4 + 1


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_normalize_rows_is_one_launch_and_agrees(backend, dtype):
    be = device_backend(backend)
    w = np.random.default_rng(3).standard_normal((3, 4, 5, 7)).astype(dtype)
    w[1, 2, 3] = 0                                      # no epsilon: NaN, as numpy's
    with np.errstate(invalid="ignore"):
        want = normalize_rows(w.copy())
    wd = be.xp.asarray(w)
    xp.counts.clear()
    assert normalize_rows(wd) is wd
    _calls(be.xp, 1)
    got = be.to_host(wd)
    assert np.isnan(got[1, 2, 3]).all() and np.isnan(want[1, 2, 3]).all()
    ok = ~np.isnan(want)
    assert_agree(got[ok], want[ok], dtype)


def test_a_strided_weight_array_is_normalised_by_the_generic_code():
    device_backend("devicelike")
    w = np.random.default_rng(4).standard_normal((2, 3, 3, 8))
    want = w.copy()
    normalize_rows(want[:, :, 1:])
    wd = xp.asarray(w)
    normalize_rows(wd[:, :, 1:])                        # not C-contiguous: no kernel
    assert_agree(wd.get(), want, np.float64)


def test_a_gradient_of_the_wrong_shape_is_refused_before_a_kernel_reads_it():
    device_backend("devicelike")
    geom = GEOMETRIES[0]
    _, x, w, dy = _inputs(geom, np.float64)
    fshape, stride = geom[5:7], geom[7:9]
    with pytest.raises(GeometryError, match=r"dy \(3, 3, 6, 5\) should be \(3, 3, 6, 6\)"):
        local_bprop(xp.asarray(x), xp.asarray(w), xp.asarray(dy[..., :5]), fshape, stride)
    with pytest.raises(GeometryError, match="h .* should be"):
        local_defprop(xp.asarray(dy[:1]), xp.asarray(w), x.shape, fshape, stride)
    with pytest.raises(GeometryError, match="h .* should be"):
        local_debprop(xp.asarray(dy[:, :2]), xp.asarray(w), xp.asarray(x), fshape, stride)


def test_kernels_off_run_the_generic_code_to_the_same_numbers(monkeypatch):
    """``DISTNET_CUDA_KERNELS=0``: the patch-matrix code, with its many calls, agrees."""
    device_backend("devicelike")
    geom = GEOMETRIES[1]
    _, x, w, dy = _inputs(geom, np.float64)
    fshape, stride = geom[5:7], geom[7:9]
    args = tuple(xp.asarray(a) for a in (x, w, dy))

    def run():
        xp.counts.clear()
        y = local_fprop(*args[:2], fshape, stride)
        dx, dw = local_bprop(*args, fshape, stride)
        return [a.get() for a in (y, dx, dw)], xp.counts["calls"]
    fused, fused_calls = run()
    monkeypatch.setattr(distnet.ops.cuda.launch, "ENABLED", False)
    generic, generic_calls = run()
    assert fused_calls == 6 and generic_calls > 3 * fused_calls
    for a, b in zip(fused, generic):
        assert_agree(a, b, np.float64)
