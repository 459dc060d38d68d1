"""A training step waits for the device once: to read its loss back (the loop checks it before
the next step). Every other wait stalls the launch queue of a GPU mid-step: a value read back
(``float()``, ``bool()``, ``.get()``) and, hidden, every operation whose result size depends on
the data (boolean-mask indexing and assignment, ``nonzero`` and its kin, ``unique``: cupy reads
the size back before it allocates). The device-like module counts all of them as waits
(``counts["syncs"]``); here every model of tests/unit/test_backend_models.py, and nets with batch
norm, LCN, dropout, global pooling, towers, the other costs and learning rules with clipping, and a
sequence-to-sequence model, make exactly one wait per training step. The wait-free forms of
batch norm's count and of clipping give the numbers the host code gives."""
import numpy as np
import pytest

from distnet.comm import Topology
from distnet.layers import ConvLayer, FullyConnectedLayer, LCNLayer, MaxPoolingLayer
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.layers.local import LocalFilteringLayer
from distnet.models import Model
from distnet.ops.activations import Logistic, RectLin, Tanh
from distnet.ops.batchnorm import bn_stats_finish, bn_stats_partial, bn_update_running
from distnet.ops.costs import CrossEntropy, SoftmaxCrossEntropy, SumSquaredDiffs
from distnet.optim.rules import Adam, AdamW, GradientDescent
from distnet.optim.clipping import clip_coefficient, scale, sum_of_squares
from distnet.testing.backends import make_backend
from distnet.testing import measure
from distnet.testing.devicelike import xp
from tests.tiny import CNN, GB, write_data
from tests.towers_net import tower_model
from tests.unit.test_backend_models import convnet, data, gb, run_experiment
from tests.unit.test_graph import resnet

WI = {"type": "uniform", "low": -0.3, "high": 0.3}


# -- what counts as a wait ------------------------------------------------------------------------

def _mask_pair():
    a = xp.asarray(np.arange(12.0).reshape(3, 4))
    return a, a > 4


@pytest.mark.parametrize("op", [
    lambda a, m: a[m],
    lambda a, m: a.__setitem__(m, 1.0),
    lambda a, m: a[m[:, 0], 1:],
    lambda a, m: xp.nonzero(m),
    lambda a, m: m.nonzero(),
    lambda a, m: xp.argwhere(m),
    lambda a, m: xp.flatnonzero(m),
    lambda a, m: xp.where(m),
    lambda a, m: xp.unique(a),
    lambda a, m: float(a.sum()),
    lambda a, m: bool(m.any()),
    lambda a, m: a.get(),
], ids=["mask-index", "mask-assign", "mask-row-index", "nonzero", "nonzero-method", "argwhere",
        "flatnonzero", "where-1", "unique", "float", "bool", "get"])
def test_devicelike_counts_what_waits_for_the_device(op):
    a, m = _mask_pair()
    xp.counts.clear()
    op(a, m)
    assert xp.counts["syncs"] == 1


@pytest.mark.parametrize("op", [
    lambda a, m: xp.where(m, a, 0.0),
    lambda a, m: a * m,
    lambda a, m: xp.count_nonzero(m),
    lambda a, m: a[xp.asarray(np.array([2, 0]))],
    lambda a, m: a[1:, ::2],
    lambda a, m: xp.maximum(a.sum() - 1, 1.0),
], ids=["where-3", "times-mask", "count_nonzero", "integer-index", "slice", "0-d arithmetic"])
def test_devicelike_does_not_count_what_stays_on_the_device(op):
    a, m = _mask_pair()
    xp.counts.clear()
    op(a, m)
    assert xp.counts["syncs"] == 0


# -- one wait per training step -------------------------------------------------------------------

@pytest.fixture
def waits(monkeypatch):
    """The device waits of each ``Model.train_step`` call, in order."""
    return measure.waits_per_train_step(monkeypatch)


def net(layers, shape, **kw):
    args = dict(num_epochs=2, batch_size=8, learning_rate=0.05)
    args.update(kw)
    m = Model(layers=layers, **args)
    m.infer_shapes(shape)
    m.configure(make_backend("devicelike", dtype="float32", rng_seed=3), Topology.serial())
    m.init_params()
    return m


def modern(cost, rule):
    """Conv, batch norm (ReLU), dropout, global average pooling, FC, dropout, FC."""
    return net([ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI),
                BatchNormLayer(activation=RectLin()), DropoutLayer(p=0.3), GlobalAveragePoolingLayer(),
                FullyConnectedLayer(nout=6, weight_init=WI, activation=Tanh()), DropoutLayer(p=0.5),
                BatchNormLayer(), FullyConnectedLayer(nout=3, weight_init=WI)],
               (2, 10, 12), cost=cost, learning_rule=rule)


def lcn_net():
    """Conv, LCN (9x9, as neon's MNIST GB), max pooling, LCN (rectangular), FC."""
    return net([ConvLayer(nofm=2, fshape=3, padding=1, weight_init=WI, activation=Tanh()),
                LCNLayer(fshape=9), MaxPoolingLayer(fshape=2), LCNLayer(fshape=[3, 5]),
                FullyConnectedLayer(nout=3, weight_init=WI, activation=Logistic())], (2, 12, 12))


def towers():
    """Three towers with a shared stem, dropout in one tower, tower sums (tests/towers_net.py)."""
    model = tower_model(3, 3)
    model.infer_shapes((1, 1, 5))
    model.configure(make_backend("devicelike", dtype="float32", rng_seed=2), Topology.serial())
    model.init_params()
    return model


MODELS = {
    "convnet": lambda: (convnet("devicelike", "float32"), (2, 10, 12)),
    "convnet-micro3": lambda: (convnet("devicelike", "float32", micro_batches=3), (2, 10, 12)),
    "gb": lambda: (gb("devicelike", "float32"), (1, 12, 12)),
    "resnet-add": lambda: (resnet(make_backend("devicelike", dtype="float32", rng_seed=2)), (2, 7, 6)),
    "resnet-concat": lambda: (resnet(make_backend("devicelike", dtype="float32", rng_seed=2), True), (2, 7, 6)),
    "lcn": lambda: (lcn_net(), (2, 12, 12)),
    "towers": lambda: (towers(), (1, 1, 5)),
    "bn-dropout-adam-clip": lambda: (modern(SoftmaxCrossEntropy(), Adam(learning_rate=0.01, max_grad_norm=0.5)),
                                     (2, 10, 12)),
    "bn-dropout-adamw-ssd": lambda: (modern(SumSquaredDiffs(), AdamW(learning_rate=0.01, weight_decay=0.1)),
                                     (2, 10, 12)),
    "bn-dropout-nesterov-ce-clip": lambda: (modern(CrossEntropy(), GradientDescent(
        learning_rate=0.01, momentum={"type": "nesterov", "coef": 0.9}, weight_decay=0.01,
        max_grad_norm=0.5)), (2, 10, 12)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_training_step_waits_once(name, waits):
    model, shape = MODELS[name]()
    x, y = data(20, shape, 3, seed=1, dtype="float32")     # batches of 8: the last one has 4
    costs = model.fit(x, y, 3)
    assert np.all(np.isfinite(costs)) and len(waits) == -(-20 // model.batch_size) * model.num_epochs
    assert waits == [1] * len(waits)


def test_gb_pretraining_steps_do_not_wait(monkeypatch):
    """A pretraining step of a LocalFiltering layer leaves its two costs on the device (they are
    read once per epoch)."""
    per_step = measure.waits_per_call(monkeypatch, LocalFilteringLayer, "pretrain_step")
    model = gb("devicelike", "float32")
    x, _ = data(10, (1, 12, 12), 3, seed=2, dtype="float32")
    for _ in model.pretraining_epochs(x):
        pass
    assert len(per_step) == 2 * 3 and per_step == [0] * 6      # 2 layers x 3 batches


@pytest.fixture(autouse=True)
def _logger(restore_logger):
    """Experiments configure the distnet logger: restored after each test (tests/conftest.py)."""


@pytest.mark.parametrize("dist", [False, True], ids=["serial", "dist1x1"])
@pytest.mark.parametrize("template", [CNN, GB], ids=["cnn", "gb"])
def test_an_experiment_step_waits_once(template, dist, waits, tmp_path):
    """The experiment path (FitPredictErrorExperiment: data from HDF5, the run loop, metrics)."""
    run_experiment(template, write_data(tmp_path / "data.h5"), "devicelike", "float64", 2, dist=dist)
    assert waits and waits == [1] * len(waits)


def test_a_seq2seq_step_waits_once(monkeypatch):
    """LSTM encoder/decoder with dropout, Adam and clipping."""
    from distnet.datasets.sequences import SequenceDataset
    from distnet.experiments.seq2seq import Seq2SeqExperiment
    from distnet.models.seq2seq import Seq2Seq
    per_step = []
    train_batch = Seq2Seq.train_batch

    def counted(self, *args, **kwargs):
        before = xp.counts["syncs"]
        loss = train_batch(self, *args, **kwargs)
        per_step.append(xp.counts["syncs"] - before)
        return loss
    monkeypatch.setattr(Seq2Seq, "train_batch", counted)
    model = Seq2Seq(num_epochs=2, embed=5, hidden=6, nlayers=2, batch_size=16, dropout=0.2,
                    learning_rule=Adam(learning_rate=0.05, max_grad_norm=0.5))
    ds = SequenceDataset(generate="numbers", digits=2, n_train=40, n_test=10, seed=1)
    Seq2SeqExperiment(model, [ds], backend=make_backend("devicelike", dtype="float32", rng_seed=4),
                      logging={"level": 30}).run(topology=Topology.serial())
    assert len(per_step) == 2 * 3 and per_step == [1] * 6


# -- the wait-free forms compute what the host forms compute ------------------------------------

@pytest.mark.parametrize("count", [1, 2, 37])
def test_batch_norm_with_the_count_on_the_device_equals_the_host(count):
    rng = np.random.default_rng(count)
    x = rng.standard_normal((count, 3)) * 2 + 1
    sums = bn_stats_partial(x)
    host = [np.full(3, 0.5), np.full(3, 2.0)]
    dev = [xp.asarray(a) for a in host]
    mean, var = bn_stats_finish(sums, float(count))
    bn_update_running(*host, mean, var, float(count))
    xp.counts.clear()
    dmean, dvar = bn_stats_finish(xp.asarray(sums), xp.asarray(np.float64(count)))
    bn_update_running(*dev, dmean, dvar, xp.asarray(np.float64(count)))
    assert xp.counts["syncs"] == 0
    for d, h in zip((dmean, dvar, *dev), (mean, var, *host)):
        np.testing.assert_array_equal(d.get(), h)


@pytest.mark.parametrize("max_norm", [0.1, 100.0], ids=["clipped", "unclipped"])
def test_clipping_on_the_device_equals_the_host(max_norm):
    rng = np.random.default_rng(7)
    grads = [rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(6)]
    dgrads = [xp.asarray(g) for g in grads]
    factor, norm = clip_coefficient(sum_of_squares(grads), max_norm)
    scale(grads, factor)
    xp.counts.clear()
    dfactor, dnorm = clip_coefficient(sum_of_squares(dgrads), max_norm)
    scale(dgrads, dfactor)
    assert xp.counts["syncs"] == 0
    assert float(dnorm) == norm and float(dfactor) == factor and (factor == 1.0) == (max_norm == 100.0)
    for d, h in zip(dgrads, grads):
        assert d.dtype == h.dtype
        np.testing.assert_array_equal(d.get(), h)
