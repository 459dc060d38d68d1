"""GB layers (LocalFiltering, LCN) against the ops and central differences through the whole layer
(padding included), the LF pretraining step against an independent float64 oracle written from
docs/neon-semantics.md#gb-pretraining, config errors, and the GB model's phases (the same, and
docs/neon-semantics.md#gb-supervised-phase).

Layer and model tests run on every array backend (``backend_name``: numpy, the device-like
stand-in for cupy, cupy where there is a GPU); inputs are drawn on the host and moved with
``backend.asarray``, results come back with ``backend.to_host`` for the numpy oracles."""
from pathlib import Path

import numpy as np
import pytest

from distnet.comm.topology import Topology, valid_grids
from distnet.config import load_experiment
from distnet.config.builder import config_name
from distnet.errors import ConfigError
from distnet.layers import (SPATIAL, L2PoolingLayer, LayerContext, FullyConnectedNoBiasLayer, LCNLayer,
                            LocalFilteringLayer)
from distnet.layers.dropout import DropoutLayer
from distnet.layers.params import gen_weights
from distnet.layers.placement import OVER_DATA
from distnet.models.gb import GB
from distnet.ops.activations import Logistic
from distnet.ops.costs import CrossEntropy
from distnet.ops.lcn import lcn_bprop, lcn_filter, lcn_fprop
from distnet.ops.local import local_fprop
from distnet.testing.backends import make_backend
from tests.unit.test_layers import numerical_grad_of

ROOT = Path(__file__).resolve().parents[2]
WI = {"type": "uniform", "low": -0.1, "high": 0.1}


def ready(layer, in_shape, seed=0, backend="numpy"):
    """Shapes, a serial 1x1 plan and weights, as MLP.configure / init_params do, on the backend
    named ``backend`` (float64); the backend is ``layer.ctx.backend``."""
    layer.infer_shape(in_shape)
    ctx = LayerContext(make_backend(backend, dtype="float64"), Topology.serial(), 0)
    layer.bind(ctx)
    layer.configure(SPATIAL, ctx)
    layer.init_params(np.random.RandomState(seed))
    return layer


def lf(**kw):
    args = dict(nofm=3, fshape=3, weight_init=WI, learning_rate=0.1)
    args.update(kw)
    return LocalFilteringLayer(**args)


def pad(x, py, px):
    return np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)))


def on_host(layer, a):
    """A host copy of ``a``, an array of ``layer``'s backend."""
    return np.array(layer.ctx.backend.to_host(a), copy=True)


def dev(layer, a):
    """The host array ``a`` on ``layer``'s backend."""
    return layer.ctx.backend.asarray(a)


# -- LocalFilteringLayer ---------------------------------------------------------------------------

GEOMS = [dict(fshape=3), dict(fshape=[3, 2], stride=[2, 1], padding=[1, 2]), dict(fshape=4, padding=1)]


@pytest.mark.parametrize("geom", GEOMS)
def test_lf_weights_are_neon_global_draw_normalised(geom, backend_name):
    layer = ready(lf(**geom), (2, 7, 8), seed=3, backend=backend_name)
    K, Ho, Wo = layer.out_shape
    F = 2 * layer.fshape[0] * layer.fshape[1]
    w = gen_weights(np.random.RandomState(3), (K * Ho * Wo, F), WI, np.float64)
    w /= np.sqrt((w * w).sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(on_host(layer, layer.W), w.reshape(K, Ho, Wo, F))
    assert layer.params()[0].reduce_over == OVER_DATA and not layer.params()[0].sharded


@pytest.mark.parametrize("geom", GEOMS)
def test_lf_fprop_bprop_match_ops_and_central_differences(geom, backend_name):
    layer = ready(lf(**geom), (2, 7, 8), backend=backend_name)
    be = layer.ctx.backend
    (py, px) = layer.padding
    rng = np.random.RandomState(1)
    x_host = rng.standard_normal((2, 2, 7, 8))
    x = dev(layer, x_host)
    y = on_host(layer, layer.fprop(x))
    np.testing.assert_allclose(y, local_fprop(pad(x_host, py, px), on_host(layer, layer.W), layer.fshape,
                                              layer.stride), rtol=1e-13, atol=1e-13)
    R = dev(layer, rng.standard_normal(y.shape))
    dx = on_host(layer, layer.bprop(R))
    gw = on_host(layer, layer.params()[0].grad)
    W = layer.W

    def J():
        return float((layer.fprop(x) * R).sum())
    # J is linear in x and in W: central differences are exact for any step, and a large one
    # keeps J's own rounding (~1e-15 over a step of 1e-6) out of the comparison
    np.testing.assert_allclose(dx, numerical_grad_of(be, J, x, eps=1e-3), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(gw, numerical_grad_of(be, J, W, eps=1e-3), rtol=1e-7, atol=1e-9)
    assert layer.bprop(R, need_input_grad=False) is None


def test_lf_after_update_renormalises_only_updated_weights(backend_name):
    layer = ready(lf(), (1, 6, 6), backend=backend_name)
    layer.W *= 2.0
    layer.after_update()                      # no bprop since: untouched
    np.testing.assert_allclose(np.linalg.norm(on_host(layer, layer.W), axis=-1), 2.0)
    layer.fprop(dev(layer, np.ones((1, 1, 6, 6))))
    layer.bprop(dev(layer, np.ones((1, 3, 4, 4))))
    layer.after_update()
    np.testing.assert_allclose(np.linalg.norm(on_host(layer, layer.W), axis=-1), 1.0, rtol=1e-14)


def test_lf_requires_pretraining_keys():
    with pytest.raises(ConfigError) as e:
        lf(pretraining=True, sparsity=0.1)
    assert e.value.key == "pretrain_learning_rate"


# -- LCNLayer --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fshape", [3, [3, 5], [5, 1], 1])
def test_lcn_matches_ops_and_central_differences(fshape, backend_name):
    layer = ready(LCNLayer(fshape=fshape), (3, 6, 7), backend=backend_name)
    be = layer.ctx.backend
    assert layer.out_shape == (3, 6, 7)
    rng = np.random.RandomState(2)
    x_host = rng.standard_normal((2, 3, 6, 7))
    x = dev(layer, x_host)
    w = lcn_filter(3, layer.fshape)
    y = on_host(layer, layer.fprop(x))
    y_op, cache = lcn_fprop(x_host, w)
    np.testing.assert_allclose(y, y_op, rtol=1e-13, atol=1e-13)
    R_host = rng.standard_normal(y.shape)
    R = dev(layer, R_host)
    dx = on_host(layer, layer.bprop(R))
    np.testing.assert_allclose(dx, lcn_bprop(R_host, cache, w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, numerical_grad_of(be, lambda: float((layer.fprop(x) * R).sum()), x),
                               rtol=1e-6, atol=1e-8)


def test_lcn_exact_gradient_where_s_is_zero(backend_name):
    """A constant region has s == 0: the gradient there is e/d (neon v0.4 gave 0)."""
    layer = ready(LCNLayer(fshape=3), (1, 7, 7), backend=backend_name)
    x = np.zeros((1, 1, 7, 7))
    x[0, 0, :, 4:] = np.random.RandomState(0).standard_normal((7, 3))
    x[0, 0, :, :3] = 1.0                      # s is exactly 0 at interior columns 1
    x = dev(layer, x)
    y = layer.fprop(x)
    R = dev(layer, np.random.RandomState(1).standard_normal(y.shape))
    dx = on_host(layer, layer.bprop(R))
    num = numerical_grad_of(layer.ctx.backend, lambda: float((layer.fprop(x) * R).sum()), x, eps=1e-7)
    np.testing.assert_allclose(dx[..., 1:6, 1], num[..., 1:6, 1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kw,key", [(dict(fshape=4), "fshape"), (dict(fshape=[3, 2]), "fshape"),
                                    (dict(fshape=3, stride=2), "stride"),
                                    (dict(fshape=3, stride=[1, 2]), "stride")])
def test_lcn_config_errors_name_the_key(kw, key):
    with pytest.raises(ConfigError) as e:
        LCNLayer(**kw)
    assert e.value.key == key and key in str(e.value)


def test_lcn_rejects_padding_key_in_yaml(tmp_path):
    text = (ROOT / "experiments" / "mnist_gb.yaml").read_text()
    bad = text.replace("LCNLayer {name: lcn1,", "LCNLayer {name: lcn1, padding: 1,", 1)
    assert bad != text
    p = tmp_path / "bad.yaml"
    p.write_text(bad)
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: key 'padding': layer 'lcn1': LCN pads itself"):
        load_experiment(p)


# -- the pretraining step against an oracle ---------------------------------------------------------

def oracle_step(x, W4, V4, fshape, stride, padding, pool_f, lam, lr, tied):
    """docs/neon-semantics.md#gb-pretraining with neon's 2-D weights, explicit index maps and
    loops; float64."""
    B, C, H, Wd = x.shape
    (fh, fw), (sy, sx), (py, px) = fshape, stride, padding
    K, Ho, Wo, F = W4.shape
    W, V = W4.reshape(-1, F).copy(), V4.reshape(-1, F).copy()
    Hp, Wp = H + 2 * py, Wd + 2 * px
    pix = np.zeros((K * Ho * Wo, F), dtype=int)         # o, f -> flat index in the padded input
    for k in range(K):
        for i in range(Ho):
            for j in range(Wo):
                for c in range(C):
                    for u in range(fh):
                        for v in range(fw):
                            pix[(k * Ho + i) * Wo + j, (c * fh + u) * fw + v] = \
                                (c * Hp + i * sy + u) * Wp + j * sx + v
    xp = pad(x, py, px).reshape(B, -1)
    h = np.einsum("of,bof->bo", W, xp[:, pix])
    xhat_p = np.zeros_like(xp)
    for b in range(B):
        np.add.at(xhat_p[b], pix, h[b][:, None] * V)
    xhat = xhat_p.reshape(B, C, Hp, Wp)[:, :, py:py + H, px:px + Wd]
    eps = pad((xhat - x) / B, py, px).reshape(B, -1)
    gh_rec = np.einsum("bof,of->bo", eps[:, pix], V)
    GV = np.einsum("bo,bof->of", h, eps[:, pix])
    h4 = h.reshape(B, K, Ho, Wo)
    Po, Qo = Ho - pool_f + 1, Wo - pool_f + 1
    p = np.zeros((B, K, Po, Qo))
    gh_sp = np.zeros_like(h4)
    for i in range(Po):
        for j in range(Qo):
            win = h4[:, :, i:i + pool_f, j:j + pool_f]
            p[:, :, i, j] = np.sqrt((win ** 2).sum(axis=(2, 3)))
            ph = np.where(p[:, :, i, j] == 0, 1, p[:, :, i, j])[:, :, None, None]
            gh_sp[:, :, i:i + pool_f, j:j + pool_f] += (lam / B) * win / ph
    delta = gh_rec + gh_sp.reshape(B, -1)
    GW = np.einsum("bo,bof->of", delta, xp[:, pix])

    def N(a):
        return a / np.sqrt((a * a).sum(axis=1, keepdims=True))
    V_new = N(V - lr * GV)
    W_new = N((V_new if tied else W) - lr * GW)
    rcost = 0.5 * ((xhat - x) ** 2).sum()
    return W_new.reshape(W4.shape), V_new.reshape(W4.shape), rcost, lam * p.sum()


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("geom", [dict(fshape=3), dict(fshape=[2, 3], stride=[1, 2], padding=[1, 1])])
def test_pretrain_step_matches_oracle(tied, geom, backend_name):
    layer = ready(lf(nofm=2, pretraining=True, pretrain_learning_rate=0.05, sparsity=0.3,
                     tied_weights=tied, **geom), (2, 7, 8), backend=backend_name)
    pool = ready(L2PoolingLayer(fshape=2), layer.out_shape, backend=backend_name)
    x = np.random.RandomState(5).rand(3, 2, 7, 8)
    W0 = on_host(layer, layer.W)
    layer.pretrain_mode(pool)
    # encoder and decoder train at the pretraining rate; the layer keeps its own for later
    rates = layer.pretrain_optimizer.rates
    assert rates(layer, 1, 0) == rates(layer.decoder, 1, 0) == 0.05 and layer.learning_rate == 0.1
    assert (layer.decoder.V is layer.W) == tied
    if not tied:   # an untied decoder starts as a copy of W; make it differ to test both paths
        layer.decoder.V[...] = dev(layer, np.random.RandomState(9).standard_normal(W0.shape))
    V0 = on_host(layer, layer.decoder.V)
    r, s = (float(c) for c in layer.pretrain_step(dev(layer, x)))
    W1, V1, r_o, s_o = oracle_step(x, W0, V0, layer.fshape, layer.stride, layer.padding, 2, 0.3,
                                   0.05, tied)
    np.testing.assert_allclose([r, s], [r_o, s_o], rtol=1e-12)
    np.testing.assert_allclose(on_host(layer, layer.W), W1, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(on_host(layer, layer.decoder.V), W1 if tied else V1, rtol=1e-11, atol=1e-13)


# -- the GB model ----------------------------------------------------------------------------------

def gb_layers(pretraining=True):
    kw = dict(pretraining=pretraining, pretrain_learning_rate=0.01, sparsity=0.1)
    return [lf(nofm=2, **kw), L2PoolingLayer(fshape=3), LCNLayer(fshape=3),
            lf(nofm=2, padding=1, tied_weights=False, **kw), L2PoolingLayer(fshape=3), LCNLayer(fshape=3),
            FullyConnectedNoBiasLayer(nout=3, weight_init=WI, activation=Logistic())]


def gb_model(layers=None, backend="numpy", dtype="float64", **kw):
    """A GB model [LF, L2, LCN, LF, L2, LCN, FC] on 12x12 images, configured on one process with
    the backend named ``backend``."""
    args = dict(num_epochs=2, batch_size=4, learning_rate=0.1, num_pretrain_epochs=1,
                num_initial_epochs=1, pretraining=True)
    args.update(kw)
    m = GB(layers or gb_layers(), **args)
    m.infer_shapes((1, 12, 12))
    m.configure(make_backend(backend, dtype=dtype), Topology.serial())
    m.init_params()
    return m


@pytest.mark.parametrize("kw,key", [(dict(visualize=True), "visualize"),
                                    (dict(spot_check=True), "spot_check"),
                                    (dict(pretrain_cost=CrossEntropy()), "pretrain_cost"),
                                    (dict(num_initial_epochs=-1), "num_initial_epochs")])
def test_gb_config_errors(kw, key):
    with pytest.raises(ConfigError) as e:
        GB(gb_layers(), num_epochs=1, **kw)
    assert e.value.key == key


def test_gb_needs_a_pooling_layer_after_a_pretrained_lf():
    layers = gb_layers()
    layers[1], layers[2] = layers[2], layers[1]
    with pytest.raises(ConfigError, match="next layer .* LCNLayer"):
        gb_model(layers)
    with pytest.raises(ConfigError, match="no LocalFilteringLayer has pretraining"):
        gb_model(gb_layers(pretraining=False))


def test_gb_refuses_pipeline_stages():
    topo = Topology.serial()
    topo.npipe = 2
    m = GB(gb_layers(), num_epochs=1, learning_rate=0.1)
    m.infer_shapes((1, 12, 12))
    with pytest.raises(ConfigError, match="pipeline"):
        m.configure(make_backend("numpy"), topo)


def test_gb_initial_epochs_update_only_the_top_layer(backend_name):
    m = gb_model(backend=backend_name)
    be = m.backend
    rng = np.random.RandomState(0)
    x, t = be.asarray(rng.rand(4, 1, 12, 12)), be.asarray(np.eye(3)[rng.randint(0, 3, 4)])

    def values():
        return [np.array(be.to_host(p.value), copy=True) for _, p in m._params]
    before = values()
    m.train_step(x, t, epoch=0)
    after = values()
    assert all(np.array_equal(a, b) for a, b in zip(before[:-1], after[:-1]))
    assert not np.array_equal(before[-1], after[-1])
    m.train_step(x, t, epoch=1)
    assert all(not np.array_equal(a, b) for a, b in zip(after, values()))
    for layer in (m.layers[0], m.layers[3]):
        np.testing.assert_allclose(np.linalg.norm(be.to_host(layer.W), axis=-1), 1.0, rtol=1e-13)


def test_gb_fit_pretrains_then_trains(backend_name):
    m = gb_model(num_pretrain_epochs=2, backend=backend_name)
    rng = np.random.RandomState(0)
    x, labels = rng.rand(8, 1, 12, 12), rng.randint(0, 3, 8)
    costs = m.fit(x, labels, 3)
    assert [(n, e) for n, e, _, _ in m.pretrain_costs] == [
        ("LocalFilteringLayer0", 0), ("LocalFilteringLayer0", 1), ("LocalFilteringLayer3", 0),
        ("LocalFilteringLayer3", 1)]
    assert m.pretrain_costs[1][2] < m.pretrain_costs[0][2]   # reconstruction improves
    assert len(costs) == 2 and all(np.isfinite(costs))
    # the supervised phase trains at the supervised rate, whatever pretraining used
    assert [m.optimizer.rates(m.layers[i], m.steps, 1) for i in (0, 3)] == [0.1, 0.1]


def _dropout_masks(model):
    """``[(phase, mask)]`` of every training forward of the model's first layer (a dropout
    layer), recorded as ``fit`` runs."""
    drop, masks = model.layers[0], []
    fprop = drop.fprop

    def recording(x):
        y = fprop(x)
        masks.append((model.run_state.phase, np.array(model.backend.to_host(drop._mask))))
        return y
    drop.fprop = recording
    return masks


def test_gb_pretraining_draws_a_new_dropout_mask_every_step():
    """A dropout layer below the pretrained LF layers: every pretraining step of every layer,
    and the supervised steps, draw their own mask (the optimiser step count stays 0 during
    pretraining: keyed by it alone, every pretraining batch dropped the same units)."""
    rng = np.random.RandomState(0)
    x, labels = rng.rand(8, 1, 12, 12), rng.randint(0, 3, 8)
    m = gb_model([DropoutLayer(p=0.5)] + gb_layers(), num_pretrain_epochs=2)
    masks = _dropout_masks(m)
    m.fit(x, labels, 3)
    # LF layers 1 and 4: 2 epochs x 2 batches each, then 2 supervised epochs x 2 batches
    assert [phase for phase, _ in masks] == [2] * 4 + [5] * 4 + [0] * 4
    flat = [mask.tobytes() for _, mask in masks]
    assert len(set(flat)) == len(flat)
    # the supervised masks are those of a model that does not pretrain (their stream is unchanged)
    plain = gb_model([DropoutLayer(p=0.5)] + gb_layers(pretraining=False), pretraining=False)
    plain_masks = _dropout_masks(plain)
    plain.fit(x, labels, 3)
    assert [mask.tobytes() for _, mask in plain_masks] == flat[8:]


# -- shipped experiments ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mnist_gb", "mnist_gb_dist", "cifar10_gb", "cifar10_gb_dist"])
def test_shipped_experiments_build(name):
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    assert exp.model.infer_shapes(exp.dataset.image_shape) == (10,)
    assert config_name(exp.model) == ("GBDist" if name.endswith("dist") else "GB")
    if name.startswith("cifar10"):
        assert (4, 4) in valid_grids(16, exp.model.planes())
