"""Device backends agree with numpy: every op, float32 and float64, the same inputs on numpy and on
each other backend (devicelike here; cupy where a GPU is present), results compared to the stated
tolerance :data:`distnet.testing.backends.AGREEMENT` (integer results, e.g. max-pooling argmax,
exactly). The op tests (test_ops_*.py) check each backend against oracles; this checks that the
backends agree with each other, including where they take different kernels (numpy's threaded
flat-shift conv for wide images vs im2col on a device)."""
import numpy as np
import pytest

from distnet.ops.activations import Identity, Logistic, RectLin, Softmax, Tanh
from distnet.ops.conv import conv2d_bprop, conv2d_fprop, use_flat
from distnet.ops.costs import CrossEntropy, SumSquaredDiffs, misclassified
from distnet.ops.lcn import lcn_bprop, lcn_filter, lcn_fprop
from distnet.ops.local import local_bprop, local_debprop, local_defprop, local_fprop
from distnet.ops.pooling import (avgpool_bprop, avgpool_fprop, l2pool_bprop, l2pool_fprop,
                                 maxpool_bprop, maxpool_fprop)
from distnet.ops.workspace import Workspace
from distnet.testing.backends import AGREEMENT, DEVICE_BACKENDS, assert_agree, make_backend


def _conv(shape, K, fshape, stride, pad=None):
    def inputs(rng):
        B, C = shape[:2]
        x = rng.standard_normal(shape)
        w = rng.standard_normal((K, C) + fshape) / np.sqrt(C * fshape[0] * fshape[1])
        y = conv2d_fprop(x, w, stride, pad=pad)
        return dict(x=x, w=w, dy=rng.standard_normal(y.shape))

    def run(be, a):
        y = conv2d_fprop(a["x"], a["w"], stride, pad=pad)
        dx, dw = conv2d_bprop(a["x"], a["w"], a["dy"], stride, pad=pad)
        return dict(y=y, dx=dx, dw=dw)
    return inputs, run


def _conv_workspace(shape, K, fshape, crop):
    """The layer-style call: scratch from a Workspace (called twice: reused buffers), fused
    ReLU, ``out`` / ``dx_out`` arguments and a cropped ``dx``."""
    def inputs(rng):
        x = rng.standard_normal(shape)
        w = rng.standard_normal((K, shape[1]) + fshape) / 3
        y = conv2d_fprop(x, w, (1, 1))
        return dict(x=x, w=w, dy=rng.standard_normal(y.shape))

    def run(be, a):
        x, w, dy = a["x"], a["w"], a["dy"]
        work = Workspace()
        (ct, cb), (cl, cr) = crop
        B, C, H, W = x.shape
        y = be.xp.empty(dy.shape, dtype=x.dtype)
        dx = be.xp.empty((B, C, H - ct - cb, W - cl - cr), dtype=x.dtype)
        for _ in range(2):
            r = conv2d_fprop(x, w, (1, 1), out=y, relu=True, work=work)
            rdx, dw = conv2d_bprop(x, w, dy, (1, 1), crop=crop, dx_out=dx, work=work)
        assert r is y and rdx is dx
        return dict(y=y, dx=dx, dw=dw)
    return inputs, run


def _maxpool_workspace(shape, fshape, stride):
    def inputs(rng):
        x = rng.standard_normal(shape)
        return dict(x=x, dy=rng.standard_normal(maxpool_fprop(x, fshape, stride)[0].shape))

    def run(be, a):
        x, dy = a["x"], a["dy"]
        work = Workspace()
        y = be.xp.empty(dy.shape, dtype=x.dtype)
        dx = be.xp.empty(x.shape, dtype=x.dtype)
        for _ in range(2):
            _, arg = maxpool_fprop(x, fshape, stride, out=y, work=work)
            maxpool_bprop(dy, arg, x.shape, fshape, stride, out=dx, work=work)
        return dict(y=y, argmax=be.xp.ascontiguousarray(arg), dx=dx)
    return inputs, run


def _pool(kind, shape, fshape, stride):
    def inputs(rng):
        x = rng.standard_normal(shape)
        y = maxpool_fprop(x, fshape, stride)[0]
        return dict(x=x, dy=rng.standard_normal(y.shape))

    def run(be, a):
        x, dy = a["x"], a["dy"]
        if kind == "max":
            y, arg = maxpool_fprop(x, fshape, stride)
            return dict(y=y, argmax=arg, dx=maxpool_bprop(dy, arg, x.shape, fshape, stride))
        if kind == "avg":
            return dict(y=avgpool_fprop(x, fshape, stride), dx=avgpool_bprop(dy, x.shape, fshape, stride))
        y = l2pool_fprop(x, fshape, stride)
        return dict(y=y, dx=l2pool_bprop(x, y, dy, fshape, stride))
    return inputs, run


def _local(shape, K, fshape, stride):
    def inputs(rng):
        B, C, H, W = shape
        Ho, Wo = (H - fshape[0]) // stride[0] + 1, (W - fshape[1]) // stride[1] + 1
        F = C * fshape[0] * fshape[1]
        return dict(x=rng.standard_normal(shape), w=rng.standard_normal((K, Ho, Wo, F)) / np.sqrt(F),
                    dy=rng.standard_normal((B, K, Ho, Wo)))

    def run(be, a):
        x, w, dy = a["x"], a["w"], a["dy"]
        dx, dw = local_bprop(x, w, dy, fshape, stride)
        gh, gv = local_debprop(dy, w, x, fshape, stride)
        return dict(y=local_fprop(x, w, fshape, stride), dx=dx, dw=dw,
                    xhat=local_defprop(dy, w, x.shape, fshape, stride), gh=gh, gv=gv)
    return inputs, run


def _lcn(shape, fshape, uniform=True):
    def inputs(rng):
        x = rng.uniform(0, 1, shape)
        x[:, :, :2, :3] = 0                       # a blank corner: the s == 0 / d := 1 branches
        C = shape[1]
        w = lcn_filter(C, fshape) if uniform else rng.uniform(0.2, 1.0, (C,) + fshape)
        return dict(x=x, w=w / w.sum(), e=rng.standard_normal(shape))

    def run(be, a):
        y, cache = lcn_fprop(a["x"], a["w"])
        return dict(y=y, d=cache.d, dx=lcn_bprop(a["e"], cache, a["w"]))
    return inputs, run


def _activation(cls):
    def inputs(rng):
        return dict(z=rng.standard_normal((6, 5)) * 3, dy=rng.standard_normal((6, 5)))

    def run(be, a):
        act = cls()
        y = act.fprop(a["z"])
        return dict(y=y, dz=act.bprop(a["z"], y, a["dy"]))
    return inputs, run


def _cost(cls):
    def inputs(rng):
        labels = rng.integers(0, 5, size=7)
        y = rng.uniform(0.01, 0.99, (7, 5))
        y[0, 0], y[1, 1] = 0.0, 1.0               # clipped
        return dict(y=y, t=np.eye(5)[labels])

    def run(be, a):
        c = cls()
        return dict(loss=c.loss(a["y"], a["t"]), grad=c.grad(a["y"], a["t"]),
                    wrong=misclassified(a["y"], a["t"]))
    return inputs, run


OPS = {
    "conv": _conv((3, 3, 9, 10), 4, (3, 3), (1, 1)),
    "conv_strided_padded": _conv((2, 2, 11, 9), 3, (3, 2), (2, 2), pad=((1, 2), (0, 1))),
    "conv_wide_image": _conv((2, 3, 6, 70), 4, (3, 5), (1, 1), pad=((1, 1), (2, 2))),
    "conv_workspace": _conv_workspace((2, 3, 8, 9), 4, (3, 3), ((1, 1), (0, 2))),
    "conv_workspace_wide": _conv_workspace((2, 2, 5, 68), 3, (3, 3), ((1, 0), (2, 1))),
    "maxpool": _pool("max", (3, 2, 9, 8), (3, 2), (2, 2)),
    "maxpool_workspace": _maxpool_workspace((3, 2, 9, 8), (3, 2), (2, 2)),
    "maxpool_workspace_large_plane": _maxpool_workspace((2, 2, 32, 36), (2, 3), (2, 3)),
    "maxpool_large_plane": _pool("max", (2, 2, 32, 36), (2, 3), (2, 3)),
    "avgpool": _pool("avg", (3, 2, 9, 8), (3, 3), (2, 1)),
    "l2pool": _pool("l2", (3, 2, 9, 8), (2, 2), (2, 2)),
    "local": _local((3, 2, 8, 7), 3, (3, 2), (1, 1)),
    "local_strided": _local((2, 3, 9, 9), 2, (3, 3), (2, 2)),
    "lcn": _lcn((2, 3, 7, 8), (3, 5)),
    "lcn_nonuniform": _lcn((2, 2, 6, 6), (3, 3), uniform=False),
    **{f"act_{c.name}": _activation(c) for c in (Identity, Logistic, RectLin, Tanh, Softmax)},
    **{f"cost_{c.name}": _cost(c) for c in (CrossEntropy, SumSquaredDiffs)},
}


def _run(be, run, host_inputs, dtype):
    """``run`` on backend ``be`` with the inputs cast to ``dtype`` and moved there; results
    brought back to the host (python scalars stay as they are)."""
    out = run(be, {k: be.asarray(v, dtype) for k, v in host_inputs.items()})
    return {k: v if isinstance(v, (int, float)) else be.to_host(v) for k, v in out.items()}


@pytest.mark.parametrize("dtype", sorted(AGREEMENT))
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("device", DEVICE_BACKENDS)
def test_device_agrees_with_numpy(device, op, dtype):
    dev = make_backend(device, dtype)
    ref = make_backend("numpy", dtype)
    inputs, run = OPS[op]
    host = {k: v.astype(dtype) for k, v in inputs(np.random.default_rng(sorted(OPS).index(op))).items()}
    expected = _run(ref, run, host, dtype)
    actual = _run(dev, run, host, dtype)
    assert expected.keys() == actual.keys()
    for key, e in expected.items():
        a = actual[key]
        if isinstance(e, int):
            assert a == e, key
        elif isinstance(e, float):
            assert isinstance(a, float) and a == pytest.approx(e, rel=AGREEMENT[dtype]["rtol"]), key
        elif np.issubdtype(e.dtype, np.integer):
            assert a.dtype == e.dtype, key
            np.testing.assert_array_equal(a, e, err_msg=key)
        else:
            assert a.dtype == e.dtype == np.dtype(dtype), key
            assert_agree(a, e, dtype, err_msg=f"{op}: {key} on {device}")


def test_wide_image_case_takes_different_kernels():
    """The numpy run of ``conv_wide_image`` uses the flat-shift kernel, a device run im2col: the
    agreement test above compares two different kernels there."""
    import devicelike  # registered by distnet.testing.backends
    assert use_flat((2, 3, 8, 74), (4, 3, 3, 5), (1, 1), np)
    assert not use_flat((2, 3, 8, 74), (4, 3, 3, 5), (1, 1), devicelike)
