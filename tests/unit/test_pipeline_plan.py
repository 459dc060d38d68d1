"""Pipeline placement and micro-batching on one process: the stage plan (``stages`` lists,
per-layer ``stage`` keys, their errors), segments, micro-batch slices, ``release_params``, and
micro-batched training (gradient accumulation + re-materialisation) equal to full-batch training
in float64. The multi-rank schedule is tested in ``tests/mpi/test_pipeline.py``."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import SerialComm, Topology
from distnet.errors import ConfigError
from distnet.layers import ConvLayer, FullyConnectedLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer
from distnet.layers.base import REPLICATED, SPATIAL
from distnet.models import Model
from distnet.models.pipeline import (Segment, StagePlanError, assign_stages, local_feature_shape,
                                     micro_slices, segments)
from distnet.ops.activations import Logistic, Tanh

WI = {"type": "uniform", "low": -0.3, "high": 0.3}


# -- assign_stages -------------------------------------------------------------------------------

@pytest.mark.parametrize("n,bounds,npipe,want", [
    (5, [3], 2, [0, 0, 0, 1, 1]),
    (5, [1, 3], 3, [0, 1, 1, 2, 2]),
    (3, [1, 2], 3, [0, 1, 2]),
    (4, [1, 2, 3], 4, [0, 1, 2, 3]),
])
def test_stage_list_is_where_stages_begin(n, bounds, npipe, want):
    assert assign_stages(n, None, bounds, npipe) == want


@pytest.mark.parametrize("keys,npipe,want", [
    ([0, None, 1, None, None], 2, [0, 0, 1, 1, 1]),      # a layer without a key stays on the previous stage
    ([None, None, 1], 2, [0, 0, 1]),                     # the first layer defaults to stage 0
    ([0, 1, 0], 2, [0, 1, 0]),                           # ChainerMN: the output comes back to rank 0
    ([1, 0, 2, 1, 0], 3, [1, 0, 2, 1, 0]),               # any non-monotone sequence
    ([2, 1, 0], 3, [2, 1, 0]),
])
def test_layer_stage_keys(keys, npipe, want):
    assert assign_stages(len(keys), keys, None, npipe) == want


def test_both_given_must_agree():
    assert assign_stages(4, [0, None, 1, 1], [2], 2) == [0, 0, 1, 1]
    with pytest.raises(StagePlanError, match="disagrees") as e:
        assign_stages(4, [0, 1, None, None], [2], 2)
    assert e.value.layer == 1 and e.value.key == "stage"


@pytest.mark.parametrize("n,keys,bounds,npipe,match", [
    (4, None, [0], 2, r"stages\[0\] = 0 is out of range"),
    (4, None, [4], 2, r"stages\[0\] = 4 is out of range"),
    (4, None, [-1], 2, "out of range"),
    (4, None, [2, 2], 3, "strictly increasing"),
    (4, None, [3, 1], 3, "strictly increasing"),
    (4, None, [2], 3, "model has 2 pipeline stage"),
    (4, None, [1, 2], 2, "model has 3 pipeline stage"),
    (4, [0, 2, 0, 0], None, 2, "stage 2 is out of range: stages are 0 .. 1"),
    (4, [0, -1, 0, 0], None, 2, "stage -1 is out of range"),
    (4, [0, 2, 2, 0], None, 3, r"stage\(s\) \[1\] run no layer"),
    (4, [1, 1, 1, 1], None, 2, r"stage\(s\) \[0\] run no layer"),
    (4, None, None, 2, "model has 1 pipeline stage"),
    (3, [0, 1, 1], None, 3, "model has 2 pipeline stage"),
])
def test_plan_errors(n, keys, bounds, npipe, match):
    with pytest.raises(StagePlanError, match=match):
        assign_stages(n, keys, bounds, npipe)


def test_one_stage_runs_everything_locally_after_checking():
    assert assign_stages(3, [0, 1, 0], None, 1) == [0, 0, 0]
    assert assign_stages(3, None, [1], 1) == [0, 0, 0]
    with pytest.raises(StagePlanError, match="strictly increasing"):
        assign_stages(3, None, [2, 1], 1)
    with pytest.raises(StagePlanError, match="run no layer"):
        assign_stages(3, [0, 2, 0], None, 1)


def test_segments_and_micro_slices():
    assert segments([0, 0, 1, 1, 0]) == [Segment(0, 0, 2), Segment(1, 2, 4), Segment(0, 4, 5)]
    assert segments([0]) == [Segment(0, 0, 1)]
    assert micro_slices(5, 3) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert micro_slices(2, 3) == [slice(0, 1), slice(1, 2)]      # empty micro-batches dropped
    assert micro_slices(0, 3) == [slice(0, 0)]                  # a replica without rows runs one empty one
    assert micro_slices(7, 1) == [slice(0, 7)]


# -- model-level ---------------------------------------------------------------------------------

def net():
    return [ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, learning_rate=0.1),
            MaxPoolingLayer(fshape=2),
            ConvLayer(nofm=2, fshape=[2, 3], stride=[1, 2], weight_init=WI, learning_rate=0.1),
            FullyConnectedNoBiasLayer(nout=6, weight_init=WI, learning_rate=0.1, activation=Tanh()),
            FullyConnectedLayer(nout=3, weight_init=dict(WI, bias_init=0.1), learning_rate=0.1, activation=Logistic())]


def fake_topology(npipe, stage):
    """A one-process topology that claims to be stage ``stage`` of ``npipe`` (configure only)."""
    return Topology(SerialComm("world"), SerialComm("spatial"), SerialComm("data"), SerialComm("pipe"),
                    SerialComm("grad"), (1, 1), (0, 0), pipe_index=stage, npipe=npipe)


def configured(layers, topology, **keys):
    model = Model(layers=layers, num_epochs=2, batch_size=5, momentum={"type": "constant", "coef": 0.5}, **keys)
    model.infer_shapes((2, 9, 8))
    model.configure(Numpy64(rng_seed=4), topology)
    return model


def test_model_errors_point_at_the_layer_or_the_key():
    layers = net()
    layers[1].stage, layers[2].stage = 1, 2
    with pytest.raises(ConfigError, match="layer 'ConvLayer2': stage 2 is out of range: stages are 0 .. 1"):
        configured(layers, fake_topology(2, 0))
    with pytest.raises(ConfigError, match="model has 2 pipeline stage.* pipe = 3"):
        configured(net(), fake_topology(3, 0), stages=[2])
    with pytest.raises(ConfigError, match="model has 1 pipeline stage"):
        configured(net(), fake_topology(2, 0))


def test_placement_errors_are_found_when_the_model_is_built():
    """Errors that no pipe size can fix are raised by the constructor (so `distnet check` sees them)."""
    layers = net()
    layers[2].stage = 2
    with pytest.raises(ConfigError, match=r"stage\(s\) \[1\] run no layer"):
        Model(layers=layers, num_epochs=1)
    with pytest.raises(ConfigError, match="stages must be strictly increasing") as e:
        Model(layers=net(), num_epochs=1, stages=[3, 2])
    assert e.value.key == "stages"
    with pytest.raises(ConfigError, match=r"stages\[0\] = 5 is out of range"):
        Model(layers=net(), num_epochs=1, stages=[5])


@pytest.mark.parametrize("stage", [0, 1])
def test_each_stage_keeps_only_its_layers_parameters(stage):
    ref = configured(net(), Topology.serial())
    ref.init_params()
    layers = net()
    for layer, s in zip(layers, [0, 1, 1, 1, 0]):
        layer.stage = s
    model = configured(layers, fake_topology(2, stage))
    model.init_params()
    mine = [i for i, s in enumerate([0, 1, 1, 1, 0]) if s == stage]
    assert model.local_layers == [layers[i] for i in mine]
    assert [p.name for _, p in model._params] == [p.name for i in mine for p in ref.layers[i].params()]
    for i, (lr, lm) in enumerate(zip(ref.layers, model.layers)):
        if i in mine:
            for pr, pm in zip(lr.params(), lm.params()):     # the same draws: one RNG stream
                np.testing.assert_array_equal(pm.value, pr.value)
        else:
            assert lm.params() == []
            assert getattr(lm, "W", None) is None and getattr(lm, "b", None) is None


def test_local_feature_shape():
    model = configured(net(), Topology.serial())
    shapes = [local_feature_shape(layer) for layer in model.layers]
    assert shapes == [(3, 9, 8), (3, 4, 4), (2, 3, 1), (6,), (3,)]
    assert model.layouts == [SPATIAL, SPATIAL, SPATIAL, REPLICATED, REPLICATED]


@pytest.mark.parametrize("micro", [2, 3, 5, 8])
def test_micro_batches_equal_the_full_batch(micro):
    """23 images in batches of 5 (last one 3): accumulated micro-batch gradients with
    re-materialised caches give the full-batch training, to 1e-12 relative."""
    rng = np.random.RandomState(7)
    x, labels = rng.standard_normal((23, 2, 9, 8)), rng.randint(0, 3, 23)
    ref = configured(net(), Topology.serial())
    ref.init_params()
    ref_costs = ref.fit(x, labels, 3)
    model = configured(net(), Topology.serial(), micro_batches=micro)
    assert model.pipeline is not None and ref.pipeline is None
    model.init_params()
    costs = model.fit(x, labels, 3)
    np.testing.assert_allclose(costs, ref_costs, rtol=1e-12)
    np.testing.assert_allclose(model.predict(x), ref.predict(x), rtol=1e-12, atol=1e-14)
    for lr, lm in zip(ref.layers, model.layers):
        for pr, pm in zip(lr.params(), lm.params()):
            np.testing.assert_allclose(pm.value, pr.value, rtol=1e-12, atol=1e-14, err_msg=pm.name)


class TopOnlyMLP(Model):
    """Trains only the layers from index 3 up in epoch 0 (like GB's initial epochs)."""

    def lowest_trained_layer(self, epoch):
        return 3 if epoch == 0 else 0


def test_micro_batches_honour_lowest_trained_layer():
    rng = np.random.RandomState(8)
    x, labels = rng.standard_normal((11, 2, 9, 8)), rng.randint(0, 3, 11)
    finals = []
    for micro in (1, 3):
        for epochs in (1, 2):
            model = TopOnlyMLP(layers=net(), num_epochs=epochs, batch_size=4, micro_batches=micro)
            model.infer_shapes((2, 9, 8))
            model.configure(Numpy64(rng_seed=4), Topology.serial())
            model.init_params()
            w0 = model.layers[0].W.copy()
            model.fit(x, labels, 3)
            if epochs == 1:
                np.testing.assert_array_equal(model.layers[0].W, w0)   # frozen in epoch 0
        finals.append(model)
    for l1, l3 in zip(finals[0].layers, finals[1].layers):
        for p1, p3 in zip(l1.params(), l3.params()):
            np.testing.assert_allclose(p3.value, p1.value, rtol=1e-12, atol=1e-14)
