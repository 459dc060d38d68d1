"""Layer graphs (``inputs`` keys): AddLayer and ConcatLayer against central differences and an
independent formula; a residual model's parameter gradients against central differences; the
graph's errors (file:line of the offending layer); chains unchanged."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.config import load_experiment_text
from distnet.errors import ConfigError
from distnet.layers.base import LayerContext
from distnet.layers.placement import SPATIAL
from distnet.layers import AddLayer, ConcatLayer, ConvLayer, FullyConnectedLayer
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.ops.activations import RectLin, Tanh
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.testing.backends import make_backend
from tests.numgrad import check_grad

WI = {"type": "normal", "scale": 0.3}


def _place(layer, shapes):
    """``layer`` shaped for ``shapes`` and configured on one process (spatial inputs)."""
    layer.infer_shape(shapes)
    ctx = LayerContext(make_backend("numpy", dtype="float64"), Topology.serial(), 0)
    layer.bind(ctx)
    layer.configure([SPATIAL] * len(shapes), ctx)
    return layer


@pytest.mark.parametrize("act", [None, Tanh()], ids=["plain", "tanh"])
def test_add_layer_forward_backward(act):
    rng = np.random.RandomState(0)
    layer = _place(AddLayer(name="add", inputs=["a", "b", "c"], activation=act), [(2, 4, 5)] * 3)
    xs = [rng.standard_normal((3, 2, 4, 5)) for _ in range(3)]
    w = rng.standard_normal((3, 2, 4, 5))
    y = layer.fprop(list(xs))
    ref = xs[0] + xs[1] + xs[2]
    np.testing.assert_array_equal(y, ref if act is None else np.tanh(ref))
    grads = layer.bprop(w)
    assert len(grads) == 3 and grads[0] is not grads[1]
    for k in range(3):
        check_grad(lambda: float((layer.fprop(list(xs)) * w).sum()), xs[k], grads[k])


@pytest.mark.parametrize("shapes", [[(2, 4, 5), (3, 4, 5)], [(4,), (1,), (2,)]], ids=["maps", "vectors"])
def test_concat_layer_forward_backward(shapes):
    rng = np.random.RandomState(1)
    layer = _place(ConcatLayer(name="cat", inputs=[f"x{i}" for i in range(len(shapes))]), list(shapes))
    xs = [rng.standard_normal((3,) + s) for s in shapes]
    assert layer.out_shape == (sum(s[0] for s in shapes),) + shapes[0][1:]
    y = layer.fprop(list(xs))
    np.testing.assert_array_equal(y, np.concatenate(xs, axis=1))
    w = rng.standard_normal(y.shape)
    grads = layer.bprop(w)
    for k in range(len(xs)):
        assert grads[k].flags.c_contiguous
        check_grad(lambda: float((layer.fprop(list(xs)) * w).sum()), xs[k], grads[k])


def resnet(backend, concat=False):
    """A residual graph: stem, an identity block, a stride-2 block with a 1x1/2 projection
    shortcut (or a concatenation), batch norm, global average pooling, FC logits."""
    rl = RectLin
    merge = (ConcatLayer(name="join", inputs=["bn2", "sbn"]) if concat else
             AddLayer(name="join", inputs=["bn2", "sbn"], activation=rl()))
    layers = [
        ConvLayer(name="stem", nofm=3, fshape=3, padding=1, weight_init=WI),
        BatchNormLayer(name="stem_bn", activation=Tanh()),
        ConvLayer(name="c1", nofm=3, fshape=3, padding=1, weight_init=WI, activation=Tanh()),
        AddLayer(name="add1", inputs=["c1", "stem_bn"]),
        ConvLayer(name="c2", nofm=4, fshape=3, stride=2, padding=1, weight_init=WI),
        BatchNormLayer(name="bn2"),
        ConvLayer(name="short", inputs=["add1"], nofm=4, fshape=1, stride=2, weight_init=WI),
        BatchNormLayer(name="sbn"),
        merge,
        GlobalAveragePoolingLayer(name="gap"),
        FullyConnectedLayer(name="out", nout=3, weight_init=WI)]
    model = Model(layers=layers, num_epochs=1, batch_size=4, learning_rate=0.1, cost=SoftmaxCrossEntropy())
    model.infer_shapes((2, 7, 6))
    model.configure(backend, Topology.serial())
    model.init_params()
    return model


@pytest.mark.parametrize("concat", [False, True], ids=["add", "concat"])
def test_residual_graph_gradients_match_central_differences(concat):
    """Every parameter's gradient and the input gradient of a residual graph (forks summed)."""
    model = resnet(make_backend("numpy", dtype="float64", rng_seed=2), concat)
    rng = np.random.RandomState(3)
    x = rng.standard_normal((4, 2, 7, 6))
    t = np.eye(3)[rng.randint(0, 3, 4)]

    def loss():
        return float(model.cost.loss_sum(model.fprop(x), t).sum())

    y = model.fprop(x)
    model.bprop(model.cost.grad(y, t))
    for layer, p in model._params:
        check_grad(loss, p.value, p.grad.copy(), rtol=1e-5, atol=1e-7)
    # the forks whose gradients are sums: stem_bn feeds c1 and add1; add1 feeds c2 and short
    assert model.graph.readers[1] == [2, 3] and model.graph.readers[3] == [4, 6]


def test_graph_training_float64_reproducible_and_chain_unchanged():
    """Two identical graph runs give the same numbers; a chain has no graph code path."""
    def run():
        model = resnet(make_backend("numpy", dtype="float64", rng_seed=4))
        rng = np.random.RandomState(5)
        x = rng.standard_normal((4, 2, 7, 6))
        t = np.eye(3)[rng.randint(0, 3, 4)]
        return [model.train_step(x, t, 0) for _ in range(3)]
    a, b = run(), run()
    assert a == b and a[2] < a[0]
    chain = Model(layers=[ConvLayer(nofm=2, fshape=3, weight_init=WI), FullyConnectedLayer(nout=3, weight_init=WI)],
                    num_epochs=1)
    assert chain.graph.is_chain


YAML = """!obj:distnet.experiments.FitPredictErrorExperiment {
  backend: !obj:distnet.backends.Numpy64 {rng_seed: 0},
  datasets: [!obj:distnet.datasets.HDF5Dataset {path: nowhere.h5}],
  model: !obj:distnet.models.Convnet {
    num_epochs: 1, learning_rate: 0.1,
    layers: [
      !obj:distnet.layers.ConvLayer {name: a, nofm: 2, fshape: 3, padding: 1, weight_init: {type: normal}},
      !obj:distnet.layers.ConvLayer {name: b, nofm: NOFM, fshape: 3, padding: PAD, weight_init: {type: normal}},
      !obj:distnet.layers.AddLayer {name: add, inputs: INPUTS},
      !obj:distnet.layers.Layer {name: out, nout: 3, weight_init: {type: normal}},
    ],
  },
}
"""


def _build(inputs="[a, b]", nofm=2, pad=1):
    text = YAML.replace("INPUTS", inputs).replace("NOFM", str(nofm)).replace("PAD", str(pad))
    exp = load_experiment_text(text, "graph.yaml")
    exp.model.infer_shapes((1, 6, 6))
    return exp


@pytest.mark.parametrize("inputs, nofm, pad, message, line", [
    ("[a, nope]", 2, 1, "inputs names 'nope', which is no layer", 9),
    ("[a, add]", 2, 1, "inputs names itself", 9),
    ("[a, out]", 2, 1, "listed after it", 9),
    ("[a]", 2, 1, "at least two inputs", 9),
    ("[a, b]", 3, 1, "'a' gives 2x6x6 and 'b' gives 3x6x6", 9),
    ("[a, b]", 2, 0, "'a' gives 2x6x6 and 'b' gives 2x4x4", 9),
    ("[b, input]", 2, 1, "'b' gives 2x6x6 and 'input' gives 1x6x6", 9),
    ("[b, b]", 2, 1, None, None),
])
def test_graph_errors_are_located(inputs, nofm, pad, message, line):
    if message is None:           # 'a' is read by nobody
        text = YAML.replace("INPUTS", inputs).replace("NOFM", "2").replace("PAD", "1")
        text = text.replace("{name: b, nofm", "{name: b, inputs: [input], nofm")
        with pytest.raises(ConfigError, match="layer 'a': its output is read by no layer") as e:
            load_experiment_text(text, "graph.yaml")
        assert "graph.yaml:7" in str(e.value)
        return
    with pytest.raises(ConfigError, match=message) as e:
        _build(inputs, nofm, pad)
    assert f"graph.yaml:{line}" in str(e.value)


def test_single_input_layer_refuses_two_inputs_and_pipelines_refuse_graphs():
    text = YAML.replace("INPUTS", "[a, b]").replace("NOFM", "2").replace("PAD", "1")
    bad = text.replace("{name: b, nofm", "{name: b, inputs: [input, a], nofm")
    with pytest.raises(ConfigError, match="reads one input but inputs names 2"):
        load_experiment_text(bad, "graph.yaml")
    exp = load_experiment_text(text, "graph.yaml")
    with pytest.raises(ConfigError, match="graphs run on one pipeline stage"):
        exp.model.stage_plan(2)
    with pytest.raises(ConfigError, match="graphs run one micro-batch"):
        load_experiment_text(text.replace("num_epochs: 1,", "num_epochs: 1, micro_batches: 2,"), "graph.yaml")


@pytest.mark.parametrize("merge", ["concat", "add"])
def test_a_layer_may_read_one_value_twice(merge):
    """``inputs: [c, c]`` (and ``[input, input]``): forward keeps the value until the layer has
    read it (it was dropped twice: KeyError in the first step), backward sums both gradients."""
    Merge = ConcatLayer if merge == "concat" else AddLayer
    layers = [AddLayer(name="twice_in", inputs=["input", "input"]),
              ConvLayer(name="c", nofm=2, fshape=3, padding=1, weight_init=WI, activation=Tanh()),
              Merge(name="twice", inputs=["c", "c"]),
              FullyConnectedLayer(name="out", nout=3, weight_init=WI)]
    model = Model(layers=layers, num_epochs=1, batch_size=4, learning_rate=0.1, cost=SoftmaxCrossEntropy())
    model.infer_shapes((1, 5, 4))
    model.configure(make_backend("numpy", dtype="float64", rng_seed=1), Topology.serial())
    model.init_params()
    rng = np.random.RandomState(2)
    x = rng.standard_normal((4, 1, 5, 4))
    t = np.eye(3)[rng.randint(0, 3, 4)]

    def loss():
        return float(model.cost.loss_sum(model.fprop(x), t).sum())

    model.bprop(model.cost.grad(model.fprop(x), t))
    for layer, p in model._params:
        check_grad(loss, p.value, p.grad.copy(), rtol=1e-5, atol=1e-7)
