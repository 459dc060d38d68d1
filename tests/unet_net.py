"""A one-level U-Net for the tests (13x11 images): conv, pool, conv with batch norm, a decoder
layer, the skip connection cropped to the decoder map, channel concatenation, conv; global
average pooling and FC logits as the cost's input."""
from distnet.layers import (ConcatLayer, ConvLayer, CropLayer, DeconvLayer, FullyConnectedLayer, MaxPoolingLayer,
                            UpsampleLayer)
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.ops.activations import Identity, RectLin
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import GradientDescent

C, H, W, K = 2, 13, 11, 3
WI = {"type": "uniform", "low": -0.4, "high": 0.4}
DECODERS = {
    "nearest": lambda: UpsampleLayer(name="up", factor=2),
    "linear": lambda: UpsampleLayer(name="up", factor=2, mode="linear"),
    "deconv3": lambda: DeconvLayer(name="up", nofm=3, fshape=3, stride=2, padding=1, output_padding=1,
                                   weight_init=WI, activation=RectLin()),
    "deconv2": lambda: DeconvLayer(name="up", nofm=2, fshape=2, stride=2, weight_init=WI),
}


def unet(decoder, decoders=DECODERS, padding=0):
    """13x11 -> conv 3x3 (11x9) -> pool 2 (5x4) -> conv, batch norm -> decoder (10x8) ->
    [crop of the first conv's 11x9 to 10x8, decoder] -> conv -> GAP -> FC. ``decoders``: the
    decoder layers by name; ``padding``: the first conv's."""
    return [ConvLayer(name="enc1", nofm=3, fshape=3, padding=padding, weight_init=WI, activation=RectLin()),
            MaxPoolingLayer(name="pool", fshape=2),
            ConvLayer(name="enc2", nofm=4, fshape=3, padding=1, weight_init=WI),
            BatchNormLayer(name="bn", activation=RectLin()),
            decoders[decoder](),
            CropLayer(name="skip", inputs=["enc1", "up"]),
            ConcatLayer(name="cat", inputs=["skip", "up"]),
            ConvLayer(name="dec", nofm=3, fshape=3, padding=1, weight_init=WI, activation=RectLin()),
            GlobalAveragePoolingLayer(name="gap"),
            FullyConnectedLayer(name="fc", nout=K, weight_init=dict(WI, bias_init=0.0), activation=Identity())]


def crops():
    """A chain of the decoder's other cases: a crop that pads (13x11 -> 12x12), linear
    upsampling by 3x2 (36x24), a crop (33x21), a stride-2 conv (16x10), a transposed conv whose
    stride 3 exceeds its kernel 2 (rows that read no input: 47x10), GAP, FC."""
    return [CropLayer(name="pad", margins=[[-1, 2], [1, -2]]),
            UpsampleLayer(name="up", factor=[3, 2], mode="linear"),
            CropLayer(name="crop", margins=[[2, 1], [0, 3]]),
            ConvLayer(name="conv", nofm=3, fshape=3, stride=2, weight_init=WI, activation=RectLin()),
            DeconvLayer(name="dc", nofm=2, fshape=[2, 3], stride=[3, 1], padding=[0, 1], weight_init=WI),
            GlobalAveragePoolingLayer(name="gap"),
            FullyConnectedLayer(name="fc", nout=K, weight_init=dict(WI, bias_init=0.0), activation=Identity())]


def unet_model(decoder, backend, topology, shape=(C, H, W), padding=0):
    """The U-Net with ``decoder`` (or, for ``"crops"``, the chain of :func:`crops`) on inputs of
    ``shape`` (the first conv's ``padding``) configured on ``backend`` and ``topology``, weights
    drawn."""
    layers = crops() if decoder == "crops" else unet(decoder, padding=padding)
    model = Model(layers=layers, num_epochs=2, batch_size=3, cost=SoftmaxCrossEntropy(),
                  learning_rule=GradientDescent(learning_rate=0.2, momentum={"type": "constant", "coef": 0.5}))
    model.infer_shapes(shape)
    model.configure(backend, topology)
    model.init_params()
    return model
