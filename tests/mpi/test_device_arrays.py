"""Device arrays through MPI, on any machine: the device-like array module
(distnet/testing/devicelike.py: numpy data behind cupy's strict host/device separation) goes
through every distnet message path -- halo exchange and its adjoint, gradient sums, pipeline sends
-- either staged through host mirrors (an MPI that is not CUDA-aware, the GPU backend's default) or
handed to MPI directly through ``__cuda_array_interface__`` (``cuda_aware_mpi: True``). Each result
is compared with a numpy oracle built from the same global data; whole distributed trainings on the
device-like backend must equal the single-process numpy run (float64, 1e-10 relative).
"""
import numpy as np
import pytest

from distnet.comm import GlobalArray, Topology, allreduce_sum
from distnet.comm.p2p import PipeChannel
from distnet.geometry import Box, Window, plan_halo, tile_of
from distnet.models import Model
from distnet.testing.devicelike import DeviceLike, xp
from tests.mpi.test_convnet_dist import C, H, K, N, W, net_padded_strided

MPI_SIZES = (2, 4)

PLANE = (9, 10)
MARGIN = 4
paths = pytest.mark.parametrize("host_staging", [True, False], ids=["staged", "cuda-aware"])


def _grid(size):
    return {2: (1, 2), 4: (2, 2)}[size]


def _is_device(a):
    return type(a) is xp.ndarray


@pytest.fixture
def mpi_reads(host_staging):
    """Device memory readable by "MPI" exactly when it is CUDA-aware (not staged)."""
    saved, xp.cuda_aware_mpi = xp.cuda_aware_mpi, not host_staging
    yield
    xp.cuda_aware_mpi = saved


def test_unstaged_device_buffer_needs_a_cuda_aware_mpi(comm):
    """Without host staging, a device buffer reaching an MPI that is not CUDA-aware fails (on a
    GPU it would crash or send garbage): the stand-in refuses, on every rank."""
    saved, xp.cuda_aware_mpi = xp.cuda_aware_mpi, False
    try:
        with pytest.raises(TypeError):   # mpi4py: "message: expecting buffer or list/tuple"
            allreduce_sum([xp.ones(3)], comm, host_staging=False)
        a = xp.ones(3)
        allreduce_sum([a], comm, host_staging=True)
        assert xp.asnumpy(a).tolist() == [comm.size] * 3
        xp.cuda_aware_mpi = True
        allreduce_sum([a], comm, host_staging=False)
        assert xp.asnumpy(a).tolist() == [comm.size ** 2] * 3
    finally:
        xp.cuda_aware_mpi = saved


@paths
@pytest.mark.usefixtures("mpi_reads")
def test_halo_exchange_and_adjoint_of_device_arrays(mpi, topologies, host_staging):
    grid = _grid(mpi.size)
    topo = topologies(grid)
    win = Window(3, 1, 1, 1)
    plan = plan_halo(PLANE, win, win, grid, topo.coords)
    image = Box(0, PLANE[0], 0, PLANE[1])
    x = np.random.RandomState(1).standard_normal((2, 3) + PLANE)
    padded = np.pad(x, ((0, 0), (0, 0), (MARGIN, MARGIN), (MARGIN, MARGIN)))
    c = plan.chunk
    expect = padded[..., c.y0 + MARGIN:c.y1 + MARGIN, c.x0 + MARGIN:c.x1 + MARGIN]

    ga = GlobalArray(plan, topo.spatial, tag=3, host_staging=host_staging)
    for _ in range(2):   # the second call reuses the buffers (and their host mirrors)
        chunk = ga.exchange(xp.asarray(np.ascontiguousarray(x[(Ellipsis,) + plan.own.relative_to(image)])))
        assert _is_device(chunk)
        np.testing.assert_array_equal(xp.asnumpy(chunk), expect)

    # adjoint: against the same exchange on numpy arrays (itself checked against the global
    # scatter-add oracle in test_global_array.py)
    g = np.random.RandomState(100 + mpi.rank).standard_normal((2, 3) + c.shape)
    got = ga.exchange_adjoint(xp.asarray(g))
    want = GlobalArray(plan, topo.spatial, tag=4).exchange_adjoint(g)
    assert _is_device(got)
    np.testing.assert_array_equal(xp.asnumpy(got), want)


@paths
@pytest.mark.usefixtures("mpi_reads")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradient_sum_of_device_arrays(comm, host_staging, dtype):
    def parts(rank):
        rng = np.random.RandomState(10 + rank)
        return [rng.standard_normal(s).astype(dtype) for s in [(3, 4), (5,), (2, 3, 2)]]
    for bucket in (parts(comm.rank), parts(comm.rank)[:1]):   # packed, and one contiguous array
        arrays = [xp.asarray(a) for a in bucket]
        out = allreduce_sum(arrays, comm, host_staging)
        assert [id(a) for a in out] == [id(a) for a in arrays]   # in place, same objects
        expect = [sum(p) for p in zip(*(parts(r)[:len(bucket)] for r in range(comm.size)))]
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for a, e in zip(arrays, expect):
            assert _is_device(a) and a.dtype == dtype
            np.testing.assert_allclose(xp.asnumpy(a), e, rtol=tol, atol=tol)


@paths
@pytest.mark.usefixtures("mpi_reads")
def test_pipeline_messages_of_device_arrays(comm, host_staging):
    """Every rank sends a device array to the next rank around a ring and receives one from the
    previous rank (point-to-point on the pipe communicator's primitives)."""
    channel = PipeChannel(comm, host_staging)
    r, n = comm.rank, comm.size
    mine = np.arange(12.0).reshape(3, 4) + 100 * r
    incoming = channel.irecv((3, 2), np.float64, xp, (r - 1) % n, tag=5)
    channel.isend(xp.asarray(mine)[:, ::2], (r + 1) % n, tag=5)   # non-contiguous: copied first
    got = incoming.wait()
    channel.wait_sends()
    assert _is_device(got)
    prev = np.arange(12.0).reshape(3, 4) + 100 * ((r - 1) % n)
    np.testing.assert_array_equal(xp.asnumpy(got), prev[:, ::2])


def _fit(layers, model_cls, topo, backend, x, labels, **keys):
    model = model_cls(layers=layers, num_epochs=2, batch_size=5, shuffle=True,
                      momentum={"type": "constant", "coef": 0.5}, **keys)
    model.infer_shapes((C, H, W))
    model.configure(backend, topo)
    model.init_params()
    return model, model.fit(x, labels, K)


@pytest.fixture(scope="module")
def reference():
    """Data and the single-process numpy model (every rank computes it)."""
    from distnet.backend import Numpy64
    rng = np.random.RandomState(42)
    x, labels = rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)
    model, costs = _fit(net_padded_strided(), Model, Topology.serial(), Numpy64(rng_seed=3), x, labels)
    return x, labels, model, costs, model.predict(x)


# name: (grid, data, pipe, model keys); each runs at world size grid * data * pipe
TRAININGS = {
    "grid": (None, 1, 1, {}),
    "pipe2-grid": ("half", 1, 2, {"stages": [2], "micro_batches": 2}),
    "data2-grid": ("half", 2, 1, {}),
}


@paths
@pytest.mark.parametrize("name", list(TRAININGS))
def test_dist_training_on_device_arrays_equals_numpy(comm, mpi, reference, host_staging, name):
    grid, ndata, npipe, keys = TRAININGS[name]
    grid = _grid(mpi.size) if grid is None else (1, mpi.size // 2)
    x, labels, ref, ref_costs, ref_out = reference
    topo = Topology.from_world(grid=grid, data=ndata, pipe=npipe, world=comm)
    try:
        backend = DeviceLike(rng_seed=3, dtype="float64", cuda_aware_mpi=not host_staging)
        assert backend.host_staging == host_staging
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model, costs = _fit(net_padded_strided(), Model, topo, backend, xt, labels, **keys)
        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        if ndata == 1:
            np.testing.assert_allclose(model.predict(xt), ref_out, rtol=1e-10, atol=1e-12)
        for i, (lr, ld) in enumerate(zip(ref.layers, model.layers)):
            for pr, pd in zip(lr.params(), ld.params()):
                assert _is_device(pd.value), f"layer {i} {pd.name} is not on the device"
                want = pr.value[:, ld.cols] if pd.sharded else pr.value
                np.testing.assert_allclose(xp.asnumpy(pd.value), want, rtol=1e-10, atol=1e-13,
                                           err_msg=f"layer {i} {pd.name}")
    finally:
        topo.free()


@paths
@pytest.mark.parametrize("ndata", [1, 2], ids=["grid", "data2-grid"])
def test_gbdist_on_device_arrays_equals_numpy(mpi, comm, host_staging, ndata):
    """GB (LF / L2 / LCN pretraining, then supervised) on tiles of device arrays, alone or with
    two data replicas (pretraining gradients summed over Topology.data)."""
    from distnet.backend import Numpy64
    from distnet.models.gb import GB
    from tests.mpi.test_gb_dist import IMAGE, NCLASS, box, cut, cut_w, gb_layers
    rng = np.random.RandomState(14)
    x, labels = rng.rand(10, *IMAGE), rng.randint(0, NCLASS, 10)
    kw = dict(num_epochs=2, batch_size=4, learning_rate=0.2, num_pretrain_epochs=1,
              num_initial_epochs=1, pretraining=True, shuffle=True)
    ref = GB(gb_layers(), **kw)
    dist = GB(gb_layers(), **kw)
    grid = _grid(mpi.size) if ndata == 1 else (1, mpi.size // 2)
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        for model, backend, t in ((ref, Numpy64(), Topology.serial()),
                                  (dist, DeviceLike(dtype="float64", cuda_aware_mpi=not host_staging), topo)):
            model.infer_shapes(IMAGE)
            model.configure(backend, t)
            model.init_params()
        tile = box(dist.layers[0], "own")
        costs_ref, costs = ref.fit(x, labels, NCLASS), dist.fit(cut(x, tile), labels, NCLASS)
        out = dist.predict(cut(x, tile))
    finally:
        topo.free()
    np.testing.assert_allclose(costs, costs_ref, rtol=1e-10)
    np.testing.assert_allclose([c[2:] for c in dist.pretrain_costs], [c[2:] for c in ref.pretrain_costs],
                               rtol=1e-10)
    if ndata == 1:
        np.testing.assert_allclose(out, ref.predict(x), rtol=1e-10, atol=1e-12)
    for i in (0, 3):
        assert _is_device(dist.layers[i].W)
        np.testing.assert_allclose(xp.asnumpy(dist.layers[i].W),
                                   cut_w(ref.layers[i].W, box(dist.layers[i], "out_tile")), rtol=1e-10, atol=1e-13)


@paths
@pytest.mark.usefixtures("restore_logger")
@pytest.mark.parametrize("template", ["CNN", "GB"])
def test_experiment_on_device_arrays_over_the_world(comm, host_staging, template, tmp_path_factory):
    """The YAML experiment path on every rank (`distnet run` minus the command line): a tiny
    distributed experiment (tests/tiny.py) on the device-like backend over the world, data
    tiled from one HDF5 file, a checkpoint gathered from device arrays; against the same
    non-distributed experiment on numpy in one process (costs, error rates, global weights)."""
    import tests.tiny as tiny
    from distnet.backend import Numpy64
    from distnet.config import load_experiment_text
    from distnet.models.checkpoint import read_checkpoint
    where = comm.bcast(str(tmp_path_factory.mktemp("device-exp")) if comm.rank == 0 else None, root=0)
    data = f"{where}/data.h5"
    if comm.rank == 0:
        tiny.write_data(data)
    comm.Barrier()

    def run(dist, backend, checkpoint):
        exp = load_experiment_text(tiny.experiment(getattr(tiny, template), data, dist=dist))
        exp.model.num_epochs = 2
        exp.backend = backend
        exp.checkpoint_path = checkpoint
        return exp, exp.run(topology=None if dist else Topology.serial())   # dist: the world, as `run`

    seed = 5 if template == "CNN" else 2   # the YAML's
    ref_exp, ref = run(False, Numpy64(rng_seed=seed), None)
    _, got = run(True, DeviceLike(rng_seed=seed, dtype="float64", cuda_aware_mpi=not host_staging),
              f"{where}/ck-{host_staging}.h5")
    np.testing.assert_allclose(got.epoch_costs, ref.epoch_costs, rtol=1e-10)
    assert (got.train_misclass, got.test_misclass) == (ref.train_misclass, ref.test_misclass)
    assert got.size == comm.size
    comm.Barrier()
    ck = read_checkpoint(f"{where}/ck-{host_staging}.h5")
    ref_params = [p for layer in ref_exp.model.layers for p in layer.params()]
    assert ck.epoch == 1 and [e["name"] for e in ck.params] == [p.name for p in ref_params]
    for e, p in zip(ck.params, ref_params):   # the global weights, gathered from device tiles
        np.testing.assert_allclose(e["value"], p.value.reshape(e["value"].shape), rtol=1e-10, atol=1e-13,
                                   err_msg=e["name"])
