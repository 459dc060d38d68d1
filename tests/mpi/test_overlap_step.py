"""The overlapped training step (``DISTNET_OVERLAP``, :mod:`distnet.comm.overlap`) gives the
blocking step's numbers (the blocking sum: one bucket per communicator and dtype, started after
the backward): gradient buckets started during the backward and halo exchanges
overlapped with the interior of the output tile change no sum and no dot product. float64;
the gradient buckets bitwise on 1-2 ranks (a sum of two terms does not depend on how the
messages were cut), else to 1e-12 relative (MPICH may pick another Allreduce algorithm for
another message size; the conv split calls the GEMM on other matrix sizes).

Cases: uneven tiles (13x12 images on 1x3 and 2x2 grids), stride and padding
(``net_padded_strided``, ``net_rect_pools``), 2 data replicas alone and with a 1x2 grid,
per-layer buckets (0 bytes) and the default size, and a pipeline of 2 stages.
"""
import numpy as np
import pytest

from tests.mpi.test_convnet_dist import C, H, K, W, N, net_padded_strided, net_rect_pools, train
from distnet.comm import Topology
from distnet.comm import buckets as buckets_module
from distnet.comm.overlap import overlap_mode
from distnet.geometry import tile_of
from distnet.layers import ConvLayer, spatial
from distnet.models import Model

MPI_SIZES = (1, 2, 3, 4)

# (data replicas, spatial grid)
LAYOUTS = [(1, (1, 1)), (1, (1, 2)), (1, (2, 1)), (2, (1, 1)), (1, (1, 3)), (1, (2, 2)), (2, (1, 2))]
NETS = {"padded_strided": net_padded_strided, "rect_pools": net_rect_pools}


def _layouts():
    return [pytest.param(d, g, id=f"data{d}-grid{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(d * g[0] * g[1]))
            for d, g in LAYOUTS]


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(42)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def _run(mode, bucket, net, topo, x, labels):
    started = []
    real = buckets_module.allreduce_sum_start

    def counting(*a, **k):
        started.append(1)
        return real(*a, **k)

    buckets_module.allreduce_sum_start = counting
    min_outputs, spatial.OVERLAP_MIN_OUTPUTS = spatial.OVERLAP_MIN_OUTPUTS, 0   # small test tiles split too
    try:
        with overlap_mode(mode, bucket):
            model, costs, out = train(NETS[net](), Model, topo, x, labels)
    finally:
        buckets_module.allreduce_sum_start = real
        spatial.OVERLAP_MIN_OUTPUTS = min_outputs
    return model, costs, out, len(started)


def _same(a, b, exact, what):
    if exact:
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15, err_msg=what)


def _same_weights(ref, got, exact, prefix=""):
    for lr, ld in zip(ref.layers, got.layers):
        for pr, pd in zip(lr.params(), ld.params()):
            _same(pd.value, pr.value, exact, f"{prefix}{pd.name}")


@pytest.mark.parametrize("bucket", [0, None], ids=["per-layer", "default-bucket"])
@pytest.mark.parametrize("net", list(NETS))
@pytest.mark.parametrize("ndata,grid", _layouts())
def test_overlapped_step_equals_blocking(comm, data, ndata, grid, net, bucket):
    """Gradient buckets alone (``grad``): bitwise on 1-2 ranks. Both parts (the default): the
    interior/border split of a conv output calls the GEMM on other matrix sizes, so the BLAS
    may round a dot product differently (float64: 1e-16)."""
    x, labels = data
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        ref, ref_costs, ref_out, n_blocking = _run(False, bucket, net, topo, xt, labels)
        for mode, exact in (("grad", comm.Get_size() <= 2), (True, False)):
            got, costs, out, n_overlap = _run(mode, bucket, net, topo, xt, labels)
            # with more than one rank the sums are started during the backward; without the
            # overlap, after it, one per communicator and dtype: never more than with it
            assert (n_overlap > 0) == (n_blocking > 0) == (comm.Get_size() > 1)
            assert n_blocking <= n_overlap
            _same(costs, ref_costs, exact, f"{mode}: costs")
            _same(out, ref_out, exact, f"{mode}: outputs")
            _same_weights(ref, got, exact, f"{mode}: ")
    finally:
        topo.free()


@pytest.mark.parametrize("mode", ["grad", "halo"])
@pytest.mark.mpi_size(2, 4)
def test_each_part_alone_equals_blocking(comm, data, mode):
    """Only the gradient buckets, only the halo exchanges: the same numbers."""
    x, labels = data
    grid = (1, comm.Get_size())
    topo = Topology.from_world(grid=grid, world=comm)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        ref, ref_costs, _, _ = _run(False, None, "padded_strided", topo, xt, labels)
        boxes = []
        real = ConvLayer._conv_box
        ConvLayer._conv_box = lambda self, *a: boxes.append(1) or real(self, *a)
        try:
            got, costs, _, _ = _run(mode, None, "padded_strided", topo, xt, labels)
        finally:
            ConvLayer._conv_box = real
        # the interior/border split ran (on the ranks whose interior is large enough)
        assert (comm.allreduce(len(boxes)) > 0) == (mode == "halo")
        exact = comm.Get_size() <= 2 and mode == "grad"
        _same(costs, ref_costs, exact, "costs")
        _same_weights(ref, got, exact)
    finally:
        topo.free()


@pytest.mark.parametrize("grid", [pytest.param(g, id=f"{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(g[0] * g[1]))
                                  for g in [(1, 2), (2, 1), (2, 2), (1, 3)]])
def test_stale_ghost_pixels_never_reach_an_output(comm, data, grid):
    """The split computes the whole tile while the ghosts are in flight, then its border outputs
    again: with the chunk's ghost pixels set to NaN before every exchange, no NaN survives and
    the numbers are the blocking step's."""
    from distnet.comm import GlobalArray
    x, labels = data
    topo = Topology.from_world(grid=grid, world=comm)
    real = GlobalArray.exchange_begin

    def poisoned(self, x_local, out=None):
        if out is not None:
            for t in self.plan.recvs:
                out[(Ellipsis,) + t.box.relative_to(self.plan.chunk)] = np.nan
        return real(self, x_local, out)

    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        ref, ref_costs, ref_out, _ = _run(False, None, "padded_strided", topo, xt, labels)
        GlobalArray.exchange_begin = poisoned
        try:
            got, costs, out, _ = _run("halo", None, "padded_strided", topo, xt, labels)
        finally:
            GlobalArray.exchange_begin = real
        _same(costs, ref_costs, False, "costs")
        _same(out, ref_out, False, "outputs")
        _same_weights(ref, got, False)
    finally:
        topo.free()


PIPES = {"pipe2-data2": (2, (1, 1), 2, 1), "pipe2-data2-m3": (2, (1, 1), 2, 3),
         "pipe2-grid1x2-m2": (2, (1, 2), 1, 2)}


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(4)) for n in PIPES])
def test_pipeline_overlapped_equals_blocking(comm, data, name):
    """Pipeline stages hand their layers to the hook once their gradients are final (after the
    last micro-batch): the same numbers as the blocking step."""
    from distnet.backend import Numpy64
    npipe, grid, ndata, micro = PIPES[name]
    x, labels = data
    topo = Topology.from_world(grid=grid, data=ndata, pipe=npipe, world=comm)
    try:
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        runs = []
        for mode in (False, True):
            with overlap_mode(mode, 0):
                model = Model(layers=net_padded_strided(), num_epochs=2, batch_size=5,
                                    shuffle=True, momentum={"type": "constant", "coef": 0.5},
                                    stages=[3], micro_batches=micro)
                model.infer_shapes((C, H, W))
                model.configure(Numpy64(rng_seed=3), topo)
                model.init_params()
                runs.append((model, model.fit(xt, labels, K)))
        (ref, ref_costs), (got, costs) = runs
        _same(costs, ref_costs, False, "costs")
        for lr, ld in zip(ref.layers, got.layers):
            for pr, pd in zip(lr.params(), ld.params()):
                _same(pd.value, pr.value, False, pd.name)
    finally:
        topo.free()
