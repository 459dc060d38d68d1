"""ConvLayer's ``activation`` key (float64 gradients against central differences), the
flat-shift conv kernel against the batch-im2col one, the NCHW max-pooling path, and layers that
reuse their buffers (``reuse_buffers``) giving the same numbers as layers that do not.

The layer tests run on every array backend (``backend_name``: numpy, the device-like stand-in
for cupy, cupy where there is a GPU); the kernel tests (flat-shift conv, NCHW max pooling, the
threaded kernels) test numpy-only code paths (device arrays always take the batch-im2col conv
and the CHWN pooling, which the layer tests cover) and run on numpy only."""
import numpy as np
import pytest

from distnet.config import load_experiment_text
from distnet.layers import ConvLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer
from distnet.ops import conv, pooling
from distnet.ops.conv import choose, flat
from distnet.ops.activations import Logistic, RectLin, Tanh
from distnet.ops.workspace import Workspace
from tests.unit.test_layers import assert_network_gradients, build

WI = {"type": "uniform", "low": -0.5, "high": 0.5}


@pytest.fixture(autouse=True)
def small_flat_threshold(monkeypatch):
    """Width 30 takes the flat-shift conv kernel, width 8 the batch-im2col one."""
    monkeypatch.setattr(choose, "FLAT_MIN_WIDTH", 16)


@pytest.mark.parametrize("act", [RectLin, Tanh, Logistic])
@pytest.mark.parametrize("width", [8, 30], ids=["im2col", "flat"])
def test_conv_activation_gradients(act, width, backend_name):
    rng = np.random.RandomState(0)
    model = build([ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, activation=act()),
                   MaxPoolingLayer(fshape=2),
                   ConvLayer(nofm=2, fshape=[2, 3], weight_init=WI, activation=act()),
                   FullyConnectedNoBiasLayer(nout=3, weight_init=WI, activation=Tanh())], (2, 6, width),
                  backend=backend_name)
    x = rng.standard_normal((2, 2, 6, width))
    t = rng.uniform(0, 1, (2, 3))
    assert_network_gradients(model, x, t)


def test_conv_activation_values_and_default(backend_name):
    rng = np.random.RandomState(2)
    plain = build([ConvLayer(nofm=2, fshape=3, weight_init=WI), FullyConnectedNoBiasLayer(nout=2, weight_init=WI)],
                  (1, 5, 5), backend=backend_name)
    relu = build([ConvLayer(nofm=2, fshape=3, weight_init=WI, activation=RectLin()),
                  FullyConnectedNoBiasLayer(nout=2, weight_init=WI)], (1, 5, 5), backend=backend_name)
    be = plain.backend
    x = be.asarray(rng.standard_normal((3, 1, 5, 5)))
    z = be.to_host(plain.layers[0].fprop(x)).copy()
    np.testing.assert_array_equal(be.to_host(relu.layers[0].fprop(x)), np.maximum(z, 0))
    assert plain.layers[0].activation is None
    assert "activation=rectlin" in relu.layers[0].describe()


def test_conv_activation_yaml_key():
    text = """!obj:distnet.experiments.FitExperiment {
      datasets: [!obj:distnet.datasets.MNIST {repo_path: ./nowhere}],
      model: !obj:distnet.models.Convnet {num_epochs: 1, learning_rate: 0.1, layers: [
        !obj:distnet.layers.ConvLayer {nofm: 2, fshape: 3, weight_init: {type: uniform},
                                       activation: !obj:distnet.activations.RectLin {}},
        !obj:distnet.layers.LayerWithNoBias {nout: 10, weight_init: {type: uniform}}]}}"""
    exp = load_experiment_text(text)
    assert isinstance(exp.model.layers[0].activation, RectLin)


CONV_CASES = [  # (B, C, H, W, K, fh, fw)
    (2, 3, 9, 30, 4, 3, 3), (3, 2, 7, 26, 5, 5, 4), (1, 1, 5, 25, 2, 1, 1), (2, 2, 6, 40, 3, 2, 5)]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("tile_bytes", [200, 1 << 20])
def test_flat_kernel_matches_im2col(case, tile_bytes, monkeypatch):
    monkeypatch.setattr(flat, "TILE_BYTES", tile_bytes)   # 200: one output row per tile
    B, C, H, W, K, fh, fw = case
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((B, C, H, W)), rng.standard_normal((K, C, fh, fw))
    ws = Workspace()
    for _ in range(2):   # the second pass reuses the workspace buffers
        y = conv.conv2d_fprop(x, w, (1, 1), method="im2col")
        np.testing.assert_allclose(conv.conv2d_fprop(x, w, (1, 1), method="flat", work=ws), y, atol=1e-12)
        np.testing.assert_allclose(conv.conv2d_fprop(x, w, (1, 1), method="flat", relu=True),
                                   np.maximum(y, 0), atol=1e-12)
        dy = rng.standard_normal(y.shape)
        for crop in [None, ((1, 0), (0, min(2, fw - 1))), ((fh - 1, fh - 1), (fw - 1, fw - 1)), ((fh, 0), (0, 0))]:
            if crop is not None and (sum(crop[0]) >= H or sum(crop[1]) >= W):
                continue
            a = conv.conv2d_bprop(x, w, dy, (1, 1), crop=crop, method="im2col")
            b = conv.conv2d_bprop(x, w, dy, (1, 1), crop=crop, method="flat", work=ws)
            np.testing.assert_allclose(b[0], a[0], atol=1e-12)
            np.testing.assert_allclose(b[1], a[1], atol=1e-12)
            assert b[0].flags.c_contiguous


@pytest.mark.parametrize("shape,f", [((2, 3, 32, 34), 2), ((1, 2, 33, 35), 2), ((2, 1, 36, 30), 3)])
def test_nchw_maxpool_matches_chwn(shape, f, monkeypatch):
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal(shape), 0)     # many ties at 0: first maximum must win
    dy = None
    for threshold in (10 ** 9, 0):                    # CHWN path, then NCHW path
        monkeypatch.setattr(pooling, "NCHW_MIN_PLANE", threshold)
        y, arg = pooling.maxpool_fprop(x, (f, f), (f, f), work=Workspace())
        dy = rng.standard_normal(y.shape) if dy is None else dy
        dx = pooling.maxpool_bprop(dy, arg, x.shape, (f, f), (f, f), work=Workspace())
        if threshold:
            ref = (y.copy(), np.asarray(arg).copy(), dx.copy())
        else:
            np.testing.assert_array_equal(y, ref[0])
            np.testing.assert_array_equal(np.asarray(arg), ref[1])
            np.testing.assert_array_equal(dx, ref[2])


@pytest.mark.parametrize("width", [8, 30])
def test_reuse_buffers_gives_the_same_training(width, backend_name):
    rng = np.random.RandomState(4)
    x = rng.standard_normal((3, 2, 6, width))
    t = rng.uniform(0, 1, (3, 3))

    def run(reuse):
        model = build([ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, activation=RectLin()),
                       MaxPoolingLayer(fshape=2), ConvLayer(nofm=2, fshape=3, padding=1, weight_init=WI),
                       FullyConnectedNoBiasLayer(nout=3, weight_init=WI, activation=Tanh())], (2, 6, width),
                      backend=backend_name)
        for layer in model.layers:
            layer.reuse_buffers = reuse
        be = model.backend
        losses = [model.train_step(be.asarray(x), be.asarray(t), 0) for _ in range(3)]
        return losses, [be.to_host(p.value).copy() for _, p in model._params]

    (la, wa), (lb, wb) = run(False), run(True)
    np.testing.assert_allclose(la, lb, rtol=1e-12)
    for a, b in zip(wa, wb):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.fixture
def threads(monkeypatch):
    """Set the kernel thread count (needs a BLAS threadpoolctl can drive; else the threaded
    paths are off)."""
    from distnet.ops import parallel
    parallel.kernel_threads()

    def set_threads(n):
        if n > 1 and not parallel._state["blas"]:
            pytest.skip("no BLAS library found by threadpoolctl: kernel threading is off")
        monkeypatch.setitem(parallel._state, "threads", n)
    return set_threads


@pytest.mark.parametrize("method,width", [("im2col", 9), ("flat", 30)])
def test_threaded_kernels_match_one_thread(method, width, threads):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((19, 3, 7, width))          # 19 images: uneven shares
    w = rng.standard_normal((4, 3, 3, 3))
    dy = rng.standard_normal((19, 4, 7, width))
    pad = ((1, 1), (1, 1))
    res = []
    for n in (1, 2, 3):
        threads(n)
        ws = Workspace()
        y = conv.conv2d_fprop(x, w, (1, 1), pad=pad, method=method, work=ws, relu=True)
        dx, dw = conv.conv2d_bprop(x, w, dy, (1, 1), pad=pad, method=method, work=ws)
        res.append((y.copy(), dx.copy(), dw.copy()))
    for r in res[1:]:
        for a, b in zip(r, res[0]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(7, 5), (5, 300), (300, 5), (6, 6)])
def test_threaded_matmul_splits(shape, threads, monkeypatch):
    from distnet.ops import parallel
    monkeypatch.setattr(parallel, "MIN_PARALLEL_MACS", 0)
    rng = np.random.default_rng(6)
    M, N = shape
    K = 700 if max(M, N) < 10 else 40
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    threads(2)
    np.testing.assert_allclose(parallel.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)
    s = rng.standard_normal((5, M, K))
    np.testing.assert_allclose(parallel.matmul(s, rng.standard_normal((5, K, N))).shape, (5, M, N))


@pytest.mark.parametrize("nchw,B", [(True, 5), (False, 21)], ids=["nchw", "chwn-batch-shares"])
def test_threaded_maxpool_matches(nchw, B, threads, monkeypatch):
    monkeypatch.setattr(pooling, "NCHW_MIN_PLANE", 0 if nchw else 10 ** 9)
    rng = np.random.default_rng(7)
    x = np.maximum(rng.standard_normal((B, 3, 8, 10)), 0)
    dy = rng.standard_normal((B, 3, 4, 5))
    out = []
    for n in (1, 2):
        threads(n)
        y, arg = pooling.maxpool_fprop(x, (2, 2), (2, 2), work=Workspace())
        out.append((y.copy(), pooling.maxpool_bprop(dy, arg, x.shape, (2, 2), (2, 2), work=Workspace()).copy()))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
