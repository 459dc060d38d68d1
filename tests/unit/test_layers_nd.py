"""Spatial layers on volumes ``(B, C, D, H, W)`` (and lines ``(B, C, L)``) against naive loops
and central differences (float64), on numpy and the device-like backend; window keys written
in YAML broadcast to the input's number of axes."""
import itertools

import numpy as np
import pytest

from distnet.comm import Topology
from distnet.errors import ConfigError
from distnet.layers import (AveragePoolingLayer, ConvLayer, FullyConnectedLayer, L2PoolingLayer,
                            LCNLayer, MaxPoolingLayer)
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.ops.activations import RectLin, Tanh
from distnet.ops.costs import SumSquaredDiffs
from distnet.testing.backends import make_backend
from tests.unit.test_config import FOOTER, HEADER, build as build_yaml
from tests.unit.test_layers import assert_network_gradients, host

WI = {"type": "uniform", "low": -0.5, "high": 0.5}


def build(layers, shape, backend="numpy"):
    """A chain of ``layers`` for inputs ``shape`` on one process of ``len(shape) - 1`` axes."""
    model = Model(layers=layers, num_epochs=1, cost=SumSquaredDiffs(), learning_rate=0.1)
    model.infer_shapes(shape)
    model.configure(make_backend(backend, dtype="float64", rng_seed=1), Topology.serial(len(shape) - 1))
    model.init_params()
    return model


def windows(x, f, s, p, d, fill):
    """Naive oracle: per output position (in C order) the window ``(B, C, *f)`` of ``x (B, C,
    *S)`` padded with ``fill``."""
    nd = len(f)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in p], constant_values=fill)
    out = [(n - (k - 1) * e - 1) // t + 1 for n, k, e, t in zip(xp.shape[2:], f, d, s)]
    for o in itertools.product(*map(range, out)):
        index = tuple(slice(i * t, i * t + (k - 1) * e + 1, e) for i, t, k, e in zip(o, s, f, d))
        yield o, xp[(Ellipsis,) + index]
    assert nd == len(out)


def naive(x, f, s, p, d, reduce, fill=0.0, channels=None):
    """``reduce(window) -> (B, channels)`` at every output position: ``(B, channels, *out)``."""
    got = dict(windows(x, f, s, p, d, fill))
    out = tuple(np.array(max(got)) + 1)
    y = np.empty((x.shape[0], channels or x.shape[1]) + out)
    for o, win in got.items():
        y[(slice(None), slice(None)) + o] = reduce(win)
    return y


CASES = [((2, 5, 6, 7), [3, 2, 3], [1, 2, 1], [1, 0, 2], [1, 2, 1]),
         ((1, 6, 5, 4), 2, 1, 1, 2),
         ((3, 9), 3, 2, 1, 1)]


@pytest.mark.parametrize("shape,f,s,p,d", CASES, ids=["volume", "volume-int-keys", "line"])
def test_conv_and_pooling_equal_naive_loops(shape, f, s, p, d, backend_name):
    rng = np.random.RandomState(0)
    nd = len(shape) - 1
    axes = (lambda v: tuple(v) if isinstance(v, list) else (v,) * nd)
    x = rng.standard_normal((2,) + shape)
    conv = build([ConvLayer(nofm=3, fshape=f, stride=s, padding=p, dilation=d, weight_init=WI),
                  GlobalAveragePoolingLayer()], shape, backend_name)
    w = host(conv, conv.layers[0].W)
    want = naive(x, axes(f), axes(s), axes(p), axes(d),
                 lambda win: win.reshape(len(win), -1) @ w.reshape(len(w), -1).T, channels=3)
    np.testing.assert_allclose(host(conv, conv.layers[0].fprop(conv.backend.asarray(x))), want, rtol=1e-12)
    pf, pp = axes(f), tuple(min(q, k - 1) for q, k in zip(axes(p), axes(f)))
    for cls, fill, reduce in [(MaxPoolingLayer, -np.inf, lambda win: win.reshape(win.shape[:2] + (-1,)).max(-1)),
                              (AveragePoolingLayer, 0.0, lambda win: win.reshape(win.shape[:2] + (-1,)).mean(-1)),
                              (L2PoolingLayer, 0.0, lambda win: np.sqrt((win ** 2).reshape(win.shape[:2] + (-1,)).sum(-1)))]:
        model = build([cls(fshape=list(pf), stride=s, padding=list(pp)), GlobalAveragePoolingLayer()], shape, backend_name)
        got = host(model, model.layers[0].fprop(model.backend.asarray(x)))
        want = naive(x, pf, axes(s), pp, (1,) * nd, reduce, fill)
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=cls.__name__)


def test_batch_norm_and_global_pooling_of_a_volume(backend_name):
    rng = np.random.RandomState(1)
    x = rng.standard_normal((3, 2, 4, 3, 5)) * 2 + 1
    model = build([BatchNormLayer(), GlobalAveragePoolingLayer()], (2, 4, 3, 5), backend_name)
    xd = model.backend.asarray(x)
    y = host(model, model.layers[0].fprop(xd))
    mean, var = x.mean(axis=(0, 2, 3, 4), keepdims=True), x.var(axis=(0, 2, 3, 4), keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(host(model, model.layers[1].fprop(xd)), x.mean(axis=(2, 3, 4)), rtol=1e-12)


@pytest.mark.parametrize("layers", [
    lambda: [ConvLayer(nofm=2, fshape=[2, 3, 3], padding=1, dilation=[1, 1, 2], weight_init=WI, activation=RectLin()),
             MaxPoolingLayer(fshape=2, stride=[1, 2, 2], padding=[1, 0, 1]),
             BatchNormLayer(activation=Tanh()),
             ConvLayer(nofm=3, fshape=3, stride=[2, 1, 1], padding=1, weight_init=WI),
             FullyConnectedLayer(nout=3, weight_init=WI, activation=Tanh())],
    lambda: [ConvLayer(nofm=2, fshape=2, weight_init=WI),
             AveragePoolingLayer(fshape=2, stride=1, padding=1), L2PoolingLayer(fshape=[1, 2, 2]),
             GlobalAveragePoolingLayer(), FullyConnectedLayer(nout=2, weight_init=WI)],
], ids=["conv-dilated-max-bn-stride-fc", "avgpad-l2-gap"])
def test_volume_network_gradients_match_central_differences(layers, backend_name):
    rng = np.random.RandomState(2)
    model = build(layers(), (2, 4, 5, 6), backend=backend_name)
    x = rng.standard_normal((3, 2, 4, 5, 6))
    t = rng.uniform(0, 1, (3, model.layers[-1].nout))
    assert_network_gradients(model, x, t)


def test_yaml_window_keys_broadcast_to_the_volume():
    conv = ("      !obj:distnet.layers.ConvLayer {nofm: 4, fshape: 3, stride: [1, 2, 2], padding: 1, "
            "weight_init: {type: uniform, low: -0.1, high: 0.1}},\n")
    pool = "      !obj:distnet.layers.MaxPoolingLayer {fshape: [2, 2, 2]},\n"
    fc = "      !obj:distnet.layers.LayerWithNoBias {nout: 10, weight_init: {type: uniform}},\n"
    exp = build_yaml(conv, pool, fc)
    assert exp.model.infer_shapes((1, 8, 16, 16)) == (10,)
    c, p, _ = exp.model.layers
    assert (c.fshape, c.stride, c.padding, c.out_shape) == ((3, 3, 3), (1, 2, 2), (1, 1, 1), (4, 8, 8, 8))
    assert p.out_shape == (4, 4, 4, 4)
    assert "f=3x3x3 s=1x2x2 p=1x1x1" in c.describe()
    bad = build_yaml(conv.replace("stride: [1, 2, 2]", "stride: [1, 2]"), pool, fc)
    with pytest.raises(ConfigError) as e:
        bad.model.infer_shapes((1, 8, 16, 16))
    assert e.value.key == "stride" and "exp.yaml:8" in str(e.value) and "3 spatial axes" in str(e.value)


def test_image_only_layers_refuse_volumes():
    with pytest.raises(ConfigError, match="2 spatial axes, but its input is 4x5x6"):
        LCNLayer(fshape=3).infer_shape((2, 4, 5, 6))


def test_show_speaks_depth_rows_and_cols(tmp_path):
    """``distnet show`` of a volume net: the grid it chooses for 8 ranks cuts all three axes,
    tiles, chunks and the FC's shard in D x H x W."""
    from click.testing import CliRunner
    from distnet.cli.show import show
    wi = "weight_init: {type: uniform, low: -0.1, high: 0.1}"
    text = (HEADER.replace("rng_seed: 0},", "rng_seed: 0},\n  dist_flag: True,")
            .replace("./nowhere}", "./nowhere, dist_flag: True}").replace("learning_rate: 0.1,", "learning_rate: 0.1, batch_size: 4,")
            + f"      !obj:distnet.layers.ConvLayer {{nofm: 8, fshape: 3, padding: 1, {wi}}},\n"
            + "      !obj:distnet.layers.MaxPoolingLayer {fshape: [1, 2, 2]},\n"
            + f"      !obj:distnet.layers.LayerWithNoBias {{nout: 10, {wi}}},\n" + FOOTER)
    path = tmp_path / "volume.yaml"
    path.write_text(text)
    r = CliRunner().invoke(show, [str(path), "-n", "8", "--input-shape", "1,16,32,32"])
    assert r.exit_code == 0, r.output
    assert "grid 2x2x2" in r.output and "input 1x16x32x32" in r.output
    conv = next(line for line in r.output.splitlines() if line.startswith("0  ConvLayer"))
    assert conv.split()[3:7] == ["8x16x32x32", "8x8x16x16", "8x8x16x16", "1x10x18x18"]
    fc = next(line for line in r.output.splitlines() if line.startswith("2  LayerWithNoBias"))
    assert "40,960 (shard)" in fc     # 10 outputs x its tile's 8x8x8x8 features
