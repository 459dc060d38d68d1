"""The decoder's layers (distnet/layers/decoder.py) on one process: DeconvLayer, UpsampleLayer and
CropLayer against PyTorch (float64) and their naive oracles, their gradients against central
differences, the weights drawn as the adjoint convolution's, their YAML (names, keys, a U-Net
graph) and the errors a user can make, located at the YAML line."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from distnet.errors import ConfigError
from distnet.layers import ConvLayer, CropLayer, DeconvLayer, UpsampleLayer
from distnet.layers.base import LayerContext
from distnet.ops.activations import RectLin
from distnet.testing import measure
from distnet.testing.backends import AGREEMENT, make_backend
from tests import decoder_oracles as oracle
from tests.numgrad import check_grad
from tests.unet_net import C, DECODERS, H, K, W, unet_model

WI = {"type": "uniform", "low": -0.5, "high": 0.5}


def placed(layer, shape, seed=0):
    """``layer`` shaped for ``shape`` (a list for two inputs), configured and drawn on one
    process (float64)."""
    layer.infer_shape(shape)
    nd = len((shape[0] if isinstance(shape, list) else shape)) - 1
    ctx = LayerContext(make_backend("numpy", dtype="float64", rng_seed=seed), Topology.serial(nd), 0)
    layer.bind(ctx)
    layer.configure(["spatial"] * len(shape) if isinstance(shape, list) else "spatial", ctx)
    layer.init_params(np.random.RandomState(seed))
    return layer


def draw(*shapes, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("keys", [dict(fshape=3, stride=2, padding=1, output_padding=1),
                                  dict(fshape=2, stride=2), dict(fshape=[3, 2], stride=[1, 3], padding=[0, 1])])
def test_deconv_layer_equals_pytorch(keys):
    torch = pytest.importorskip("torch")
    layer = placed(DeconvLayer(name="up", nofm=3, weight_init=WI, **keys), (2, 5, 4))
    x, = draw((3, 2, 5, 4))
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(layer.W, requires_grad=True)
    yt = torch.nn.functional.conv_transpose2d(xt, wt, stride=layer.stride, padding=layer.padding,
                                              output_padding=layer.output_padding)
    y = layer.fprop(x)
    assert y.shape == (3,) + layer.out_shape == tuple(yt.shape)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    g, = draw(y.shape, seed=2)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(layer.bprop(g), xt.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(layer.params()[0].grad, wt.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_deconv_layer_activation_and_gradients():
    layer = placed(DeconvLayer(name="up", nofm=2, fshape=3, stride=2, padding=1, weight_init=WI,
                               activation=RectLin()), (2, 4, 3))
    x, g = draw((2, 2, 4, 3), (2, 2, 7, 5))
    want = np.maximum(oracle.transposed_conv(x, layer.W, (2, 2), ((1, 1), (1, 1)), (0, 0)), 0)
    np.testing.assert_allclose(layer.fprop(x), want, rtol=1e-12)
    check_deconv_grads(layer, x, g)


def check_deconv_grads(layer, x, g):
    """The layer's input and weight gradients of ``sum(fprop(x) * g)`` against central
    differences."""
    dx = layer.bprop(g)
    dw = layer.params()[0].grad.copy()

    def loss():
        return float((layer.fprop(x) * g).sum())
    check_grad(loss, x, dx)
    check_grad(loss, layer.W, dw)


def test_deconv_weights_are_the_adjoint_convolutions_draw():
    """``W (C, K, fh, fw)`` is what a ConvLayer from K maps to C draws from the same stream."""
    deconv = placed(DeconvLayer(name="up", nofm=4, fshape=[3, 2], weight_init=WI), (3, 5, 5), seed=7)
    conv = placed(ConvLayer(name="c", nofm=3, fshape=[3, 2], weight_init=WI), (4, 5, 5), seed=7)
    np.testing.assert_array_equal(deconv.W, conv.W)
    assert deconv.placement.params[0].global_shape == (3, 4, 3, 2)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("factor", [2, [3, 2]])
def test_upsample_layer_equals_pytorch_and_the_oracle(mode, factor):
    layer = placed(UpsampleLayer(name="up", factor=factor, mode=mode), (2, 5, 3))
    x, = draw((2, 2, 5, 3))
    y = layer.fprop(x)
    f = layer.factor
    np.testing.assert_allclose(y, (oracle.nearest if mode == "nearest" else oracle.linear)(x, f), rtol=1e-13)
    g, = draw(y.shape, seed=3)
    check_grad(lambda: float((layer.fprop(x) * g).sum()), x, layer.bprop(g))
    torch = pytest.importorskip("torch")
    yt = torch.nn.functional.interpolate(torch.tensor(x), scale_factor=f, mode="nearest" if mode == "nearest" else
                                         "bilinear", **({} if mode == "nearest" else {"align_corners": False}))
    np.testing.assert_allclose(y, yt.numpy(), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("margins,want", [([1, 2], ((1, 1), (2, 2))), ([[0, 1], [2, 0]], ((0, 1), (2, 0))),
                                          ([[-1, 1], [0, -2]], ((-1, 1), (0, -2)))])
def test_crop_layer_with_margins(margins, want):
    layer = placed(CropLayer(name="crop", margins=margins), (2, 7, 6))
    x, = draw((2, 2, 7, 6))
    lo, hi = tuple(a for a, _ in want), tuple(b for _, b in want)
    y = layer.fprop(x)
    np.testing.assert_array_equal(y, oracle.crop(x, lo, hi))
    g, = draw(y.shape, seed=4)
    np.testing.assert_array_equal(layer.bprop(g), oracle.crop(g, tuple(-a for a in lo), tuple(-b for b in hi)))


def test_crop_layer_centred_on_a_reference():
    """13x11 cropped to 10x8: (13 - 10) // 2 = 1 row at the top, 2 at the bottom; 1 and 2
    columns. The reference's gradient is zero; its values are never read."""
    layer = placed(CropLayer(name="skip", inputs=["enc", "dec"]), [(3, 13, 11), (5, 10, 8)])
    assert layer.out_shape == (3, 10, 8) and layer.multi_input
    x, ref, g = draw((2, 3, 13, 11), (2, 5, 10, 8), (2, 3, 10, 8))
    np.testing.assert_array_equal(layer.fprop([x, ref]), x[:, :, 1:11, 1:9])
    dx, dref = layer.bprop(g)
    np.testing.assert_array_equal(dx, oracle.crop(g, (-1, -1), (-2, -2)))
    assert dref.shape == ref.shape and not dref.any()


YAML = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 0},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: nowhere.h5}],
  model: !obj:distnet.models.Convnet {
    num_epochs: 1, learning_rate: 0.1,
    layers: [
      !obj:distnet.layers.ConvLayer {name: enc1, nofm: 4, fshape: 3, weight_init: {type: normal}},
      !obj:distnet.layers.MaxPoolingLayer {name: pool, fshape: 2},
      !obj:distnet.layers.ConvLayer {name: enc2, nofm: 8, fshape: 3, padding: 1, weight_init: {type: normal}},
      UP,
      !obj:distnet.layers.CropLayer {name: skip, CROP},
      !obj:distnet.layers.ConcatLayer {name: cat, inputs: [skip, up]},
      !obj:distnet.layers.ConvLayer {name: dec, nofm: 4, fshape: 3, padding: 1, weight_init: {type: normal}},
      !obj:distnet.layers.GlobalAveragePoolingLayer {name: gap},
      !obj:distnet.layers.Layer {name: out, nout: 3, weight_init: {type: normal}},
    ],
  },
}
"""
UPS = {"deconv": "!obj:distnet.layers.DeconvLayer {name: up, nofm: 4, fshape: 3, stride: 2, padding: 1, "
                 "output_padding: 1, weight_init: {type: normal}}",
       "convtranspose": "!obj:distnet.layers.ConvTransposeLayer {name: up, nofm: 4, fshape: 2, stride: 2, "
                        "weight_init: {type: normal}}",
       "nearest": "!obj:distnet.layers.UpsampleLayer {name: up, factor: 2}",
       "linear": "!obj:distnet.layers.UpsampleLayer {name: up, factor: [2, 2], mode: linear}"}


def build(up=UPS["deconv"], crop="inputs: [enc1, up]", shape=(1, 13, 11)):
    exp = load_experiment_text(YAML.replace("UP", up).replace("CROP", crop), "unet.yaml")
    exp.model.infer_shapes(shape)
    return exp


@pytest.mark.parametrize("up", list(UPS))
def test_a_unet_in_yaml(up):
    """13x11 -> conv 11x9 -> pool 5x4 -> conv -> up 10x8; the skip cropped to 10x8."""
    model = build(UPS[up]).model
    shapes = {layer.name: layer.out_shape for layer in model.layers}
    channels = 4 if up in ("deconv", "convtranspose") else 8
    assert shapes["up"] == (channels, 10, 8) and shapes["skip"] == (4, 10, 8) and shapes["cat"] == (4 + channels, 10, 8)
    assert type(model.layers[3]).__name__ == ("DeconvLayer" if "conv" in up else "UpsampleLayer")


@pytest.mark.parametrize("up,crop,message,line", [
    (UPS["nearest"].replace("factor: 2", "factor: 2, mode: cubic"), None, "mode must be one of nearest, linear", 10),
    (UPS["deconv"].replace("output_padding: 1", "output_padding: [1, 2]"), None,
     "output_padding .* must be smaller than the stride", 10),
    (UPS["deconv"].replace("padding: 1,", "padding: 5,", 1), None, "leaves no output", 10),
    (UPS["nearest"], "margins: [1, 2, 3]", "margins must have one entry per spatial axis", 11),
    (UPS["nearest"], "margins: [[6, 6], [0, 0]], inputs: [up]", "leaves nothing", 11),
    (UPS["nearest"], "margins: [1, 1], inputs: [enc1, up]", "give either margins, or two inputs", 11),
    (UPS["nearest"], "inputs: [enc1]", "give either margins, or two inputs", 11),
    (UPS["nearest"].replace("factor: 2", "factor: 0"), None, "expected sizes >= 1", 10),
])
def test_yaml_errors_are_located(up, crop, message, line):
    with pytest.raises(ConfigError, match=message) as e:
        build(up, crop or "inputs: [enc1, up]")
    assert f"unet.yaml:{line}" in str(e.value)


def test_crop_reference_must_be_image_like():
    with pytest.raises(ConfigError, match="the reference 'v' must be image-like"):
        CropLayer(name="skip", inputs=["x", "v"]).infer_shape([(3, 5, 5), (4,)])


@pytest.mark.parametrize("decoder", list(DECODERS))
def test_unet_on_a_device_agrees_and_waits_once_per_step(decoder, monkeypatch):
    """The device path (the upsampling kernels, the transposed convolution's GEMM and fold
    kernel, the crop as an exchange) trains the U-Net as numpy does, reading back only each
    step's loss."""
    rng = np.random.RandomState(5)
    x, labels = rng.standard_normal((7, C, H, W)), rng.randint(0, K, 7)
    want = unet_model(decoder, make_backend("numpy", rng_seed=3), Topology.serial()).fit(x, labels, K)
    waits = measure.waits_per_train_step(monkeypatch)
    got = unet_model(decoder, make_backend("devicelike", rng_seed=3), Topology.serial()).fit(x, labels, K)
    np.testing.assert_allclose(got, want, **AGREEMENT["float64"])
    assert waits == [1] * 6                     # 2 epochs of 3 batches (3, 3, 1)


# -- volumes (C, D, H, W): the keys broadcast to three axes, against the naive oracles ---------

VOLUME = (2, 4, 3, 5)


@pytest.mark.parametrize("keys,f,s,p,op", [
    (dict(fshape=3, stride=2, padding=1, output_padding=1), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
    (dict(fshape=[2, 3, 1], stride=[2, 1, 3], padding=[0, 1, 0], output_padding=[1, 0, 2]),
     (2, 3, 1), (2, 1, 3), (0, 1, 0), (1, 0, 2))])
def test_deconv_layer_on_volumes(keys, f, s, p, op):
    layer = placed(DeconvLayer(name="up", nofm=3, weight_init=WI, activation=RectLin(), **keys), VOLUME)
    assert (layer.fshape, layer.stride, layer.padding, layer.output_padding) == (f, s, p, op)
    assert layer.W.shape == (2, 3) + f
    x, = draw((2,) + VOLUME)
    want = np.maximum(oracle.transposed_conv(x, layer.W, s, tuple((a, a) for a in p), op), 0)
    y = layer.fprop(x)
    assert y.shape == (2,) + layer.out_shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-14)
    check_deconv_grads(layer, x, draw(y.shape, seed=2)[0])
    assert layer.placement.macs == 2 * 3 * int(np.prod(f)) * int(np.prod(layer.placement.chunk_shape[1:]))


def test_deconv_weights_on_volumes_are_the_adjoint_convolutions_draw():
    deconv = placed(DeconvLayer(name="up", nofm=4, fshape=[3, 2, 2], weight_init=WI), (3, 5, 5, 5), seed=7)
    conv = placed(ConvLayer(name="c", nofm=3, fshape=[3, 2, 2], weight_init=WI), (4, 5, 5, 5), seed=7)
    np.testing.assert_array_equal(deconv.W, conv.W)
    assert deconv.placement.params[0].global_shape == (3, 4, 3, 2, 2)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("factor", [2, [3, 1, 2]])
def test_upsample_layer_on_volumes(mode, factor):
    layer = placed(UpsampleLayer(name="up", factor=factor, mode=mode), VOLUME)
    x, = draw((2,) + VOLUME)
    y = layer.fprop(x)
    f = layer.factor
    assert len(f) == 3 and layer.out_shape == (2,) + tuple(n * a for n, a in zip(VOLUME[1:], f))
    np.testing.assert_allclose(y, (oracle.nearest if mode == "nearest" else oracle.linear)(x, f), rtol=1e-13)
    g, = draw(y.shape, seed=3)
    check_grad(lambda: float((layer.fprop(x) * g).sum()), x, layer.bprop(g))


@pytest.mark.parametrize("margins,lo,hi", [([1, [0, 1], [-1, 2]], (1, 0, -1), (1, 1, 2)),
                                           ([0, 1, 2], (0, 1, 2), (0, 1, 2))])
def test_crop_layer_on_volumes(margins, lo, hi):
    layer = placed(CropLayer(name="crop", margins=margins), (2, 5, 6, 7))
    x, = draw((2, 2, 5, 6, 7))
    y = layer.fprop(x)
    np.testing.assert_array_equal(y, oracle.crop(x, lo, hi))
    g, = draw(y.shape, seed=4)
    np.testing.assert_array_equal(layer.bprop(g), oracle.crop(g, tuple(-a for a in lo), tuple(-b for b in hi)))


def test_crop_layer_on_volumes_centred_on_a_reference():
    layer = placed(CropLayer(name="skip", inputs=["enc", "dec"]), [(3, 9, 8, 7), (5, 6, 8, 4)])
    assert layer.out_shape == (3, 6, 8, 4)
    x, ref, g = draw((2, 3, 9, 8, 7), (2, 5, 6, 8, 4), (2, 3, 6, 8, 4))
    np.testing.assert_array_equal(layer.fprop([x, ref]), x[:, :, 1:7, :, 1:5])
    dx, dref = layer.bprop(g)
    np.testing.assert_array_equal(dx, oracle.crop(g, (-1, 0, -1), (-2, 0, -2)))
    assert not dref.any()


@pytest.mark.parametrize("layer,key", [
    (lambda: DeconvLayer(name="up", nofm=2, fshape=[2, 2], weight_init=WI), "fshape"),
    (lambda: DeconvLayer(name="up", nofm=2, fshape=2, stride=2, output_padding=[1, 1], weight_init=WI),
     "output_padding"),
    (lambda: UpsampleLayer(name="up", factor=[2, 2]), "factor")])
def test_a_key_of_the_wrong_length_is_refused_at_the_key(layer, key):
    with pytest.raises(ConfigError, match=f"key '{key}'.* has 2 sizes, but the input has 3 spatial axes"):
        layer().infer_shape(VOLUME)


def test_crop_margins_of_the_wrong_length_are_refused():
    with pytest.raises(ConfigError, match="key 'margins'.*one entry per spatial axis, but it has 2"):
        CropLayer(name="crop", margins=[1, 1]).infer_shape(VOLUME)


@pytest.mark.parametrize("decoder", ["deconv3", "linear", "nearest"])
def test_unet_on_volumes_on_a_device_agrees(decoder):
    """The 3-D U-Net (the 2-D test's, first conv 'same') on 7x9x8 volumes: the device path (the
    3-D upsampling kernels, the transposed convolution's GEMM and fold) trains as numpy does."""
    rng = np.random.RandomState(5)
    x, labels = rng.standard_normal((5, C, 7, 9, 8)), rng.randint(0, K, 5)

    def fit(backend):
        model = unet_model(decoder, make_backend(backend, rng_seed=3), Topology.serial(3), (C, 7, 9, 8), padding=1)
        return model.fit(x, labels, K)
    np.testing.assert_allclose(fit("devicelike"), fit("numpy"), **AGREEMENT["float64"])
