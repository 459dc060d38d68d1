"""Tower networks (graph models with ``tower`` keys and TowerSumLayers; tests/towers_net.py: a
shared stem read by every tower, dropout in one tower, two exchanges, a shared reader of an
exchange) on the pipe ranks, with and without data replicas, T towers on T ranks or T/2 per rank:
float64, the single-process per-epoch costs (1e-10 relative), weights and error rate; the other
towers' layers hold no parameters on a rank."""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from tests.towers_net import tower_model

MPI_SIZES = (2, 4)
N, D, K = 31, 7, 3
# name: (towers T, pipe ranks, data replicas)
CASES = {"T2-pipe2": (2, 2, 1), "T2-pipe2-data2": (2, 2, 2), "T2-pipe1-data2": (2, 1, 2),
         "T4-pipe4": (4, 4, 1), "T4-pipe2": (4, 2, 1), "T4-pipe2-data2": (4, 2, 2)}


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(3)
    labels = rng.randint(0, K, N)
    x = rng.standard_normal((N, D))
    x[:, 0] += labels
    return x.reshape(N, 1, 1, D), labels


def _fit(T, topo, x, labels):
    model = tower_model(T, K)
    model.infer_shapes((1, 1, D))
    model.configure(Numpy64(rng_seed=2), topo)
    model.init_params()
    costs = model.fit(x, labels, K)
    return model, costs, model.misclass_rate(x, labels)


_refs = {}


def reference(T, x, labels):
    if T not in _refs:
        _refs[T] = _fit(T, Topology.serial(), x, labels)
    return _refs[T]


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(p * d))
                                  for n, (_, p, d) in CASES.items()])
def test_towers_equal_single_process(comm, data, name):
    T, npipe, ndata = CASES[name]
    x, labels = data
    ref, ref_costs, ref_rate = reference(T, x, labels)
    topo = Topology.from_world(grid=(1, 1), data=ndata, pipe=npipe, world=comm)
    try:
        model, costs, rate = _fit(T, topo, x, labels)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        rel = max(abs(a - b) / abs(b) for a, b in zip(costs, ref_costs))
        print(f"TOWERS {name}: costs {costs}, max relative diff {rel:.2e}, error rate {rate} (1 process {ref_rate})")
        assert rate == ref_rate
        mine = set(range(topo.pipe_index * T // npipe, (topo.pipe_index + 1) * T // npipe))
        for layer, rl in zip(model.layers, ref.layers):
            if layer.tower is not None and layer.tower not in mine:
                assert layer.params() == [], layer.name
                continue
            assert len(layer.params()) == len(rl.params())
            for p, pr in zip(layer.params(), rl.params()):
                np.testing.assert_allclose(p.value, pr.value, rtol=1e-10, atol=1e-13, err_msg=p.name)
        with model.evaluating():
            np.testing.assert_allclose(model.fprop(x[model.replica_rows(np.arange(N))]),
                                       ref.predict(x)[model.replica_rows(np.arange(N))], rtol=1e-10, atol=1e-12)
    finally:
        topo.free()


@pytest.mark.parametrize("npipe, ndata", [pytest.param(2, 1, id="pipe2", marks=pytest.mark.mpi_size(2)),
                                          pytest.param(2, 2, id="pipe2-data2", marks=pytest.mark.mpi_size(4))])
def test_towers_checkpoint_resumes_on_one_process(comm, data, tmp_path_factory, npipe, ndata):
    """2 epochs on the tower ranks, a checkpoint (each tower rank sends its towers' weights and
    Adam state), the third epoch on one process: the single-process run's third epoch."""
    from distnet.models.checkpoint import save_checkpoint
    from distnet.models.restore_single import restore_checkpoint
    from tests.towers_net import tower_model
    x, labels = data
    ref, ref_costs, _ = reference(2, x, labels)
    path = comm.bcast(str(tmp_path_factory.mktemp("towers") / "ck.h5") if comm.Get_rank() == 0 else None)
    topo = Topology.from_world(grid=(1, 1), data=ndata, pipe=npipe, world=comm)
    try:
        model = tower_model(2, K, num_epochs=2)
        model.infer_shapes((1, 1, D))
        model.configure(Numpy64(rng_seed=2), topo)
        model.init_params()
        model.fit(x, labels, K)
        save_checkpoint(path, model, topo, epoch=1)
    finally:
        topo.free()
    one = tower_model(2, K, num_epochs=3)
    one.infer_shapes((1, 1, D))
    serial = Topology.serial()
    one.configure(Numpy64(rng_seed=2), serial)
    one.init_params()
    ck = restore_checkpoint(one, path, serial)
    costs = one.fit(x, labels, K, resume=ck.resume)
    np.testing.assert_allclose(costs, ref_costs[2:], rtol=1e-10)
    for layer, rl in zip(one.layers, ref.layers):
        for p, pr in zip(layer.params(), rl.params()):
            np.testing.assert_allclose(p.value, pr.value, rtol=1e-10, atol=1e-13, err_msg=p.name)


# (grid, towers T, pipe, data)
CONV = {"grid1x2-T2-pipe2": ((1, 2), 2, 2, 1), "grid2x1-T2-pipe1": ((2, 1), 2, 1, 1),
        "grid1x2-T2-pipe1-data2": ((1, 2), 2, 1, 2)}
CH, CW = 6, 5


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(g[0] * g[1] * p * d))
                                  for n, (g, _, p, d) in CONV.items()])
def test_conv_towers_on_a_grid_equal_single_process(comm, name):
    """Towers of convolutions on spatial tiles: the exchanges sum tiles over the pipe ranks,
    each convolution exchanges its halos on its own grid."""
    from distnet.geometry import tile_of
    from distnet.models import Model
    from distnet.ops.costs import SoftmaxCrossEntropy
    from distnet.optim.rules import Adam
    from tests.towers_net import conv_tower_layers
    grid, T, npipe, ndata = CONV[name]
    rng = np.random.RandomState(5)
    labels = rng.randint(0, K, 11)
    x = rng.standard_normal((11, 1, CH, CW))
    x[:, 0, :2, :2] += labels[:, None, None]

    def fit(cls, topo, xs):
        model = cls(layers=conv_tower_layers(T, K), towers=T, num_epochs=2, batch_size=4, shuffle=True,
                    cost=SoftmaxCrossEntropy(), learning_rule=Adam(learning_rate=0.05))
        model.infer_shapes((1, CH, CW))
        model.configure(Numpy64(rng_seed=6), topo)
        model.init_params()
        return model, model.fit(xs, labels, K), model.misclass_rate(xs, labels)
    _, ref_costs, ref_rate = fit(Model, Topology.serial(), x)
    topo = Topology.from_world(grid=grid, data=ndata, pipe=npipe, world=comm)
    try:
        t = tile_of((CH, CW), topo.grid, topo.coords)
        _, costs, rate = fit(Model, topo, x[:, :, t.y0:t.y1, t.x0:t.x1])
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert rate == ref_rate
    finally:
        topo.free()
