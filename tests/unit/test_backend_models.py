"""Whole models on every array backend: a device backend (the device-like stand-in for cupy, cupy
where there is a GPU) trains the same small models from the same data and seed as numpy, and gets
the same per-epoch costs, final weights (and momentum velocities), pretraining costs and
predictions, to the stated GPU-vs-CPU tolerance :data:`distnet.testing.backends.AGREEMENT` of the
dtype.

* a Convnet: conv (zero padding, fused RectLin) + max pooling + conv (Tanh) + two fully connected
  layers, Nesterov momentum, reshuffled batches, a short last batch;
* a GB model: [LocalFiltering, L2 pooling, LCN] x 2 + FC, sparse-autoencoder pretraining of both
  LF layers, top-layer-only first epoch, then full backpropagation, constant momentum;
* the experiment path: ``FitPredictErrorExperiment`` from YAML (data from an HDF5 file, metrics,
  misclassification rates) with the backend swapped, and a checkpoint written on the device
  backend that resumes to the uninterrupted run's weights.

Weights are drawn on the host from the one RNG stream and copied to the device, so both runs
start equal; they then differ only by the order of floating-point sums.
"""

import numpy as np
import pytest

from distnet.comm import SerialComm, Topology
from distnet.config import load_experiment_text
from distnet.config.builder import config_name
from distnet.experiments.loop import RunHooks
from distnet.layers import ConvLayer, FullyConnectedLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer
from distnet.models import Model
from distnet.models.checkpoint import read_checkpoint
from distnet.ops.activations import Logistic, RectLin, Tanh
from distnet.testing.backends import DEVICE_BACKENDS, assert_agree, make_backend
from tests.tiny import CNN, GB, experiment, write_data
from tests.unit.test_layers_gb import gb_model

DTYPES = ("float64", "float32")
WI = {"type": "uniform", "low": -0.3, "high": 0.3}


def data(n, shape, nclasses, seed, dtype):
    """``n`` images ``shape`` in ``dtype`` whose class 0 is bright in the top-left corner, and labels."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, nclasses, n)
    x = rng.standard_normal((n,) + shape) * 0.5
    x[:, 0, :3, :3] += (y == 0)[:, None, None]
    return x.astype(dtype), y


def convnet(backend, dtype, micro_batches=1):
    model = Model(layers=[
        ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, activation=RectLin()),
        MaxPoolingLayer(fshape=2),
        ConvLayer(nofm=4, fshape=[2, 3], stride=[1, 2], weight_init=WI, activation=Tanh()),
        FullyConnectedNoBiasLayer(nout=6, weight_init=WI, activation=Tanh()),
        FullyConnectedLayer(nout=3, weight_init=dict(WI, bias_init=0.1), activation=Logistic())],
        num_epochs=2, batch_size=8, shuffle=True, learning_rate=0.1,
        momentum={"type": "nesterov", "coef": 0.5}, micro_batches=micro_batches)
    model.infer_shapes((2, 10, 12))
    model.configure(make_backend(backend, dtype=dtype, rng_seed=3), Topology.serial())
    model.init_params()
    return model


def state(model):
    """Every parameter's value and velocity on the host, by name."""
    out = {}
    for _, p in model._params:
        out[p.name] = model.backend.to_host(p.value).copy()
        if p.velocity is not None:
            out[p.name + ".velocity"] = model.backend.to_host(p.velocity).copy()
    return out


def train(make, backend, dtype, train_data, test_x):
    """Fit a fresh model from ``make(backend, dtype)``; returns what the backends must agree on."""
    model = make(backend, dtype)
    costs = model.fit(*train_data, 3)
    return {"costs": np.array(costs), "pretrain": np.array([c[2:] for c in getattr(model, "pretrain_costs", [])]),
            "state": state(model), "pred": model.predict(test_x), "model": model}


def assert_runs_agree(ref, got, dtype):
    assert len(got["costs"]) == len(ref["costs"]) and np.all(np.isfinite(ref["costs"]))
    assert_agree(got["costs"], ref["costs"], dtype, "per-epoch costs")
    assert_agree(got["pretrain"], ref["pretrain"], dtype, "pretraining costs")
    assert sorted(got["state"]) == sorted(ref["state"])
    for name, value in ref["state"].items():
        assert got["state"][name].dtype == np.dtype(dtype), name
        assert_agree(got["state"][name], value, dtype, name)
    assert got["pred"].dtype == np.dtype(dtype) and isinstance(got["pred"], np.ndarray)
    assert_agree(got["pred"], ref["pred"], dtype, "predictions")


@pytest.mark.parametrize("micro_batches", [1, 3], ids=["plain", "micro3"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_convnet_agrees_with_numpy(backend, dtype, micro_batches):
    """``micro3``: GPipe micro-batches on one stage (the Pipeline's gradient accumulation and
    re-materialisation, layers returning fresh arrays instead of their reused buffers)."""
    x, y = data(30, (2, 10, 12), 3, seed=0, dtype=dtype)   # batches of 8: the last one has 6
    tx, _ = data(7, (2, 10, 12), 3, seed=1, dtype=dtype)

    def make(name, dt):
        return convnet(name, dt, micro_batches)
    ref = train(make, "numpy", dtype, (x, y), tx)
    got = train(make, backend, dtype, (x, y), tx)
    assert (got["model"].pipeline is None) == (micro_batches == 1)
    assert {"ConvLayer0.W", "ConvLayer0.W.velocity", "FullyConnectedLayer4.b"} <= set(got["state"])
    assert_runs_agree(ref, got, dtype)
    model = got["model"]
    assert type(model.layers[0].W).__module__.split(".")[0] == model.backend.xp.__name__
    assert model.misclass_rate(tx, np.arange(7) % 3) == ref["model"].misclass_rate(tx, np.arange(7) % 3)


def gb(backend, dtype):
    return gb_model(backend=backend, dtype=dtype, batch_size=4, shuffle=True,
                    momentum={"type": "constant", "coef": 0.5})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_gb_agrees_with_numpy(backend, dtype):
    x, y = data(10, (1, 12, 12), 3, seed=2, dtype=dtype)   # batches of 4: the last one has 2
    tx, _ = data(5, (1, 12, 12), 3, seed=3, dtype=dtype)
    ref = train(gb, "numpy", dtype, (x, y), tx)
    got = train(gb, backend, dtype, (x, y), tx)
    assert len(ref["pretrain"]) == 2 and len(ref["costs"]) == 2
    assert_runs_agree(ref, got, dtype)


@pytest.mark.parametrize("concat", [False, True], ids=["add", "concat"])
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_residual_graph_agrees_with_numpy(backend, concat):
    """A layer graph (batch norm, a residual addition or a channel concatenation, global average
    pooling) on a device: the concatenation's backward split the gradient at a numpy array of
    indices, which the device array module refused."""
    from tests.unit.test_graph import resnet
    x, y = data(9, (2, 7, 6), 3, seed=4, dtype="float64")   # batches of 4: the last one has 1

    def make(name, dt):
        model = resnet(make_backend(name, dtype=dt, rng_seed=2), concat)
        model.num_epochs = 2
        return model
    ref = train(make, "numpy", "float64", (x, y), x[:5])
    got = train(make, backend, "float64", (x, y), x[:5])
    assert_runs_agree(ref, got, "float64")


# -- device work per step -------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["convnet", "gb"])
def test_device_work_per_step_is_independent_of_batch_and_waits_once(model):
    """On a GPU, what costs beyond the arithmetic is the number of kernel launches (Python
    dispatch) and of waits for the device. Counted with the device-like module: the same two
    training steps per epoch at batch 4 and batch 16 make exactly the same number of device
    calls (no per-image loop anywhere), and the device is waited for once per training step
    (the batch loss, checked for NaN before the next step) and twice per pretraining epoch of
    each pretrained layer (its two cost sums), and once per parameter check (every
    ``finite.CHECK_EVERY`` steps and at each epoch's end), nowhere else."""
    from distnet.testing.devicelike import xp
    counts = []
    for B in (4, 16):
        if model == "convnet":
            m, shape = convnet("devicelike", "float32"), (2, 10, 12)
        else:
            m, shape = gb("devicelike", "float32"), (1, 12, 12)
        m.batch_size = B
        x, y = data(2 * B, shape, 3, seed=0, dtype="float32")
        xp.counts.clear()
        m.fit(x, y, 3)
        counts.append(dict(xp.counts))
    steps = 2 * m.num_epochs
    pretraining = 2 * m.num_pretrain_epochs * len(m.pretrained_layers()) if model == "gb" else 0
    checks = m.num_epochs  # the non-finite parameter check at each epoch's end (models/finite.py)
    assert counts[0] == counts[1], f"device calls depend on the batch size: B=4 {counts[0]}, B=16 {counts[1]}"
    assert counts[0]["syncs"] == steps + pretraining + checks, counts[0]


# -- the experiment path -------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _logger(restore_logger):
    """Experiments configure the distnet logger: restored after each test (tests/conftest.py)."""


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_data(tmp_path_factory.mktemp("backend-models") / "data.h5")


def run_experiment(template, path, backend, dtype, epochs, checkpoint=None, resume=None, eval_every=0,
                   dist=False):
    """A tiny YAML experiment (tests/tiny.py) with its backend replaced by ``backend``/``dtype``
    (the YAML's seed kept); returns (experiment, RunResult, per-epoch records). ``dist``: the
    distributed experiment (neon's Dist layer names, tiled dataset) on a 1x1 grid of this one
    process (a serial communicator: no MPI; one tile, so the window layers zero-pad)."""
    exp = load_experiment_text(experiment(template, path, dist=dist))
    exp.model.num_epochs = epochs
    exp.backend = make_backend(backend, dtype=dtype, rng_seed=exp.backend.rng_seed)
    exp.checkpoint_path = str(checkpoint) if checkpoint else None
    exp.eval_every = eval_every

    class Hooks(RunHooks):
        def __init__(self):
            self.records = []

        def epoch(self, record):
            self.records.append(record)

    hooks = Hooks()
    topology = Topology.from_world(grid=(1, 1), world=SerialComm()) if dist else None
    result = exp.run(topology=topology, hooks=hooks, resume=str(resume) if resume else None)
    return exp, result, hooks.records


@pytest.mark.parametrize("dist", [False, True], ids=["serial", "dist1x1"])
@pytest.mark.parametrize("template", [CNN, GB], ids=["cnn", "gb"])
@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_experiment_runs_on_device_backends(backend, template, dist, tiny_data, tmp_path):
    """FitPredictErrorExperiment end to end: costs, metrics per epoch, misclassification rates,
    and a checkpoint of the device run that equals the numpy run's."""
    dtype = "float64"
    _, ref, ref_records = run_experiment(template, tiny_data, "numpy", dtype, 2, tmp_path / "ref.h5",
                                         eval_every=1, dist=dist)
    exp, got, records = run_experiment(template, tiny_data, backend, dtype, 2, tmp_path / "dev.h5",
                                       eval_every=1, dist=dist)
    assert exp.backend.name == backend and config_name(exp.model).endswith("Dist") == dist
    assert_agree(got.epoch_costs, ref.epoch_costs, dtype, "per-epoch costs")
    assert [r["test_misclass"] for r in records] == [r["test_misclass"] for r in ref_records]
    assert (got.train_misclass, got.test_misclass) == (ref.train_misclass, ref.test_misclass)
    a, b = read_checkpoint(tmp_path / "ref.h5"), read_checkpoint(tmp_path / "dev.h5")
    assert a.epoch == b.epoch == 1 and [p["name"] for p in a.params] == [p["name"] for p in b.params]
    for pa, pb in zip(a.params, b.params):
        for key in ("value", "velocity"):
            if pa[key] is None:
                assert pb[key] is None
            else:
                assert isinstance(pb[key], np.ndarray)
                assert_agree(pb[key], pa[key], dtype, f"{pa['name']} {key}")


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
def test_device_checkpoint_resumes_to_the_uninterrupted_run(backend, tiny_data, tmp_path):
    """A checkpoint written by a device run, restored by a device run, reaches the weights of an
    uninterrupted device run; and a numpy run resumes from the device checkpoint as well."""
    dtype = "float64"
    _, full, _ = run_experiment(CNN, tiny_data, backend, dtype, 3, tmp_path / "full.h5")
    _, first, _ = run_experiment(CNN, tiny_data, backend, dtype, 2, tmp_path / "part.h5")
    _, rest, _ = run_experiment(CNN, tiny_data, backend, dtype, 3, tmp_path / "resumed.h5",
                                resume=tmp_path / "part.h5")
    assert rest.start_epoch == 2 and rest.epoch_costs == full.epoch_costs
    assert first.epoch_costs == full.epoch_costs[:2]
    _, host_rest, _ = run_experiment(CNN, tiny_data, "numpy", dtype, 3, tmp_path / "host.h5",
                                     resume=tmp_path / "part.h5")
    a, b, c = (read_checkpoint(tmp_path / n) for n in ("full.h5", "resumed.h5", "host.h5"))
    for pa, pb, pc in zip(a.params, b.params, c.params):
        np.testing.assert_array_equal(pb["value"], pa["value"], err_msg=pa["name"])
        np.testing.assert_array_equal(pb["velocity"], pa["velocity"], err_msg=pa["name"])
        assert_agree(pc["value"], pa["value"], dtype, pa["name"])
