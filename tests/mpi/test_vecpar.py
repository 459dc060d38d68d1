"""neon's other distribution modes against the single-process run (float64, 1e-10 relative):

* ``MLPDist`` (vecpar): every FC layer sharded by blocks of its input features over a ``1 x P``
  grid (uneven blocks), alone and composed with data replicas and pipeline stages;
* the dataset key ``dist_mode`` through the experiment: ``halopar`` (spatial tiles), ``vecpar``
  / ``1`` (whole images + MLPDist), ``datapar`` / ``2`` (whole images + ``data`` = all ranks),
  and ``halopar`` with ``pipe: 2`` stages.
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.data.sources import ArraySource
from distnet.datasets.base import Dataset
from distnet.errors import ConfigError
from distnet.experiments.fit import FitPredictErrorExperiment
from distnet.layers import ConvLayer, FullyConnectedLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer
from distnet.models import Model
from distnet.models.mlp_dist import MLPDist
from distnet.ops.activations import Logistic, RectLin, Tanh

MPI_SIZES = (1, 2, 3, 4)

N, C, H, W, K = 23, 2, 7, 6, 3   # 84 input features; 23 images in batches of 5 (the last has 3)
WI = {"type": "uniform", "low": -0.3, "high": 0.3}


def fc_net():
    """FC(bias) 84->7 tanh -> FC 7->5 rectlin -> FC(bias) 5->3 logistic: with P = 2, 3, 4 ranks
    the 7 and 5 features split unevenly (4+3; 3+2+2, 2+2+1; 2+2+2+1, 2+1+1+1)."""
    FCb, FC = (FullyConnectedLayer, FullyConnectedNoBiasLayer)
    return [FCb(nout=7, weight_init=dict(WI, bias_init=0.1), learning_rate=0.2, activation=Tanh()),
            FC(nout=5, weight_init=WI, learning_rate=0.2, activation=RectLin()),
            FCb(nout=K, weight_init=WI, learning_rate=0.2, activation=Logistic())]


def cnn():
    Conv, Pool, FC = (ConvLayer, MaxPoolingLayer, FullyConnectedNoBiasLayer)
    return [Conv(nofm=3, fshape=3, padding=1, weight_init=WI, learning_rate=0.1),
            Pool(fshape=2, stride=2),
            FC(nout=5, weight_init=WI, learning_rate=0.1, activation=Tanh()),
            FC(nout=K, weight_init=WI, learning_rate=0.1, activation=Logistic())]


def model_keys():
    return dict(num_epochs=2, batch_size=5, shuffle=True, momentum={"type": "constant", "coef": 0.5})


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(42)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def _fit(model, topo, x, labels):
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=3), topo)
    model.init_params()
    return model.fit(x, labels, K)


@pytest.fixture(scope="module")
def reference(data):
    x, labels = data
    model = Model(layers=fc_net(), **model_keys())
    costs = _fit(model, Topology.serial(), x, labels)
    return model, costs, model.predict(x), model.misclass_rate(x, labels)


# -- MLPDist (vecpar) at the model level ---------------------------------------------------------

# (data, pipe, stages): the grid is 1 x (size / (data * pipe))
VECPAR = {"vecpar": (1, 1, None), "vecpar-data2": (2, 1, None), "vecpar-pipe2": (1, 2, [1]),
          "vecpar-pipe2-m2": (1, 2, [2])}


def _vecpar_cases():
    out = []
    for name, (d, p, _) in VECPAR.items():
        sizes = [n for n in MPI_SIZES if n % (d * p) == 0 and 1 <= n // (d * p) <= 5]
        out.append(pytest.param(name, id=name, marks=pytest.mark.mpi_size(*sizes)))
    return out


@pytest.mark.parametrize("name", _vecpar_cases())
def test_mlpdist_equals_mlp(comm, data, reference, name):
    ndata, npipe, stages = VECPAR[name]
    x, labels = data
    ref, ref_costs, ref_out, ref_rate = reference
    topo = Topology.from_world(grid=(1, comm.Get_size() // (ndata * npipe)), data=ndata, pipe=npipe, world=comm)
    try:
        model = MLPDist(layers=fc_net(), stages=stages, micro_batches=2 if name.endswith("m2") else 1,
                        **model_keys())
        costs = _fit(model, topo, x, labels)       # whole images on every rank
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert model.misclass_rate(x, labels) == ref_rate
        if ndata == 1:
            np.testing.assert_allclose(model.predict(x), ref_out, rtol=1e-10, atol=1e-12)
        P = topo.grid[1]
        for lr, ld in zip(ref.layers, model.layers):
            if not ld.params():                     # another pipeline stage's layer
                continue
            if P > 1:                               # my block of contiguous input features
                np.testing.assert_array_equal(ld.cols, np.array_split(np.arange(ld.nfeat), P)[topo.coords[1]])
                assert ld.W.shape[1] == len(ld.cols) < ld.nfeat
            for pr, pd in zip(lr.params(), ld.params()):
                want = pr.value[:, ld.cols] if pd.sharded else pr.value
                np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)
        # the feature blocks of one spatial group tile every layer's input exactly once
        for layer in model.layers:
            if layer.params():
                counts = np.zeros(layer.nfeat, int)
                counts[layer.cols if layer.cols is not None else slice(None)] += 1
                assert (topo.spatial.allreduce(counts) == 1).all()
    finally:
        topo.free()


@pytest.mark.mpi_size(1)
def test_mlpdist_refuses_other_layers():
    """Only fully connected layers (any of their names: test_mlpdist_equals_mlp trains the
    plain classes) can be sharded by input features."""
    model = MLPDist(layers=cnn(), num_epochs=1)
    model.infer_shapes((C, H, W))
    with pytest.raises(ConfigError, match="cannot hold a ConvLayer"):
        model.configure(Numpy64(), Topology.serial())


# -- dist_mode through the experiment ------------------------------------------------------------

class Synthetic(Dataset):
    """Random images ``(C, H, W)`` (23 train, 9 test), the same on every rank (the dataset cuts
    each rank's tile)."""

    repo_required = False
    scale_255 = False
    nclasses = K
    image_shape = (C, H, W)

    def source_files(self):
        return []

    def file_sources(self):
        rng = np.random.RandomState(5)
        out = {}
        for split, n in (("train", N), ("test", 9)):
            x, y = rng.standard_normal((n, C, H, W)), rng.randint(0, K, n)
            out[split] = ArraySource("synthetic", split, x, y)
        return out


def _experiment(model, dataset, **keys):
    return FitPredictErrorExperiment(model=model, datasets=[dataset], backend=Numpy64(rng_seed=3),
                                     dist_flag=dataset.dist_flag, **keys)


# mode (as written in YAML), model class, net, experiment keys, model keys, sizes
MODES = {
    "halopar": ("halopar", Model, cnn, {}, {}, MPI_SIZES),
    "vecpar": ("vecpar", MLPDist, fc_net, {}, {}, MPI_SIZES),
    "vecpar-int": (1, MLPDist, fc_net, {}, {}, (2,)),
    "datapar": ("datapar", Model, cnn, {}, {}, MPI_SIZES),
    "datapar-int": (2, Model, cnn, {}, {}, (3,)),
    "halopar-pipe2": ("halopar", Model, cnn, {"pipe": 2}, {"stages": [2], "micro_batches": 2}, (2, 4)),
    "datapar-pipe2": ("datapar", Model, cnn, {"pipe": 2}, {"stages": [1]}, (4,)),
}


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(*m[-1])) for n, m in MODES.items()])
def test_dist_mode_equals_single_process(comm, name):
    mode, model_cls, net, exp_keys, keys, _ = MODES[name]
    serial_cls = Model if model_cls is MLPDist else Model
    ref = _experiment(serial_cls(layers=net(), **model_keys()), Synthetic())
    ref_result = ref.run(topology=Topology.serial())
    exp = _experiment(model_cls(layers=net(), **model_keys(), **keys),
                      Synthetic(dist_flag=True, dist_mode=mode), **exp_keys)
    try:
        result = exp.run()
        t = exp.topology
        size, npipe = comm.Get_size(), exp_keys.get("pipe", 1)
        want_grid = {"halopar": None, "vecpar": (1, size // npipe), "datapar": (1, 1)}[exp.dataset.dist_mode]
        if want_grid is not None:
            assert t.grid == want_grid
        assert t.ndata == (size // npipe if exp.dataset.dist_mode == "datapar" else 1)
        np.testing.assert_allclose(result.epoch_costs, ref_result.epoch_costs, rtol=1e-10)
        assert result.train_misclass == ref_result.train_misclass
        assert result.test_misclass == ref_result.test_misclass
    finally:
        exp.topology.free()


@pytest.mark.mpi_size(1)
def test_dist_mode_key():
    assert Synthetic(dist_flag=True).dist_mode == "halopar"
    assert Synthetic().dist_mode is None
    for value, want in (("halopar", "halopar"), ("VecPar", "vecpar"), (0, "halopar"), (1, "vecpar"),
                        (2, "datapar")):
        assert Synthetic(dist_flag=True, dist_mode=value).dist_mode == want
    for bad in (3, -1, True, "pipepar", 1.0):
        with pytest.raises(ConfigError, match="halopar, vecpar, datapar"):
            Synthetic(dist_flag=True, dist_mode=bad)
    with pytest.raises(ConfigError, match="set dist_flag: True"):
        Synthetic(dist_mode="vecpar")
    grid, coords = (2, 3), (1, 2)
    assert Synthetic(dist_flag=True).rank_tile(grid, coords).shape == (3, 2)
    for mode in ("vecpar", "datapar"):
        assert Synthetic(dist_flag=True, dist_mode=mode).rank_tile(grid, coords) is None


@pytest.mark.mpi_size(1)
def test_dist_mode_must_fit_the_model():
    with pytest.raises(ConfigError, match="MLPDist"):
        _experiment(Model(layers=cnn(), **model_keys()), Synthetic(dist_flag=True, dist_mode="vecpar"))
    with pytest.raises(ConfigError, match="dist_mode: vecpar"):
        _experiment(MLPDist(layers=fc_net(), **model_keys()), Synthetic(dist_flag=True))
    with pytest.raises(ConfigError, match="no spatial grid"):
        _experiment(Model(layers=cnn(), **model_keys()), Synthetic(dist_flag=True, dist_mode=2),
                    grid=[1, 1])
