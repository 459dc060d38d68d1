"""`distnet plan` against what a run sends: per-step halo bytes (forward exchanges and adjoint
exchanges, per rank and in total, per layer), Allreduce payloads, local tile / chunk shapes and
activation memory, on every grid of up to 9 ranks, for a conv net with padding and strides, the
MNIST CNN and the GB network (LCN: two exchanges per step, L2 pooling with overlapping windows).
The counters of distnet.comm.traffic measure what GlobalArray and allreduce_sum really send."""
import numpy as np
import pytest

from distnet.backend import Numpy
from distnet.comm import valid_grids
from distnet.comm.traffic import counting
from distnet.config import load_experiment
from distnet.geometry import tile_of
from distnet.layers import (ConvLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer)
from distnet.layers.spatial import WindowLayer
from distnet.models import Model
from distnet.ops.activations import Logistic, RectLin
from distnet.plan import plan_model

MPI_SIZES = (1, 2, 4, 6, 9)
WI = {"type": "uniform", "low": -0.1, "high": 0.1}
B = 4


def strided_net():
    return Model(layers=[
        ConvLayer(nofm=3, fshape=3, padding=1, weight_init=WI, activation=RectLin()),
        MaxPoolingLayer(fshape=3, stride=2),
        ConvLayer(nofm=4, fshape=[2, 3], stride=[1, 2], padding=[1, 0], weight_init=WI),
        FullyConnectedNoBiasLayer(nout=5, weight_init=WI, activation=Logistic())],
        num_epochs=1, learning_rate=0.1, batch_size=B)


def from_yaml(path):
    def make():
        model = load_experiment(path).model
        model.batch_size = B
        return model
    return make


MODELS = {"strided": (strided_net, (2, 19, 17), 5),
          "mnist_cnn": (from_yaml("experiments/mnist_cnn_dist.yaml"), (1, 28, 28), 10),
          "mnist_gb": (from_yaml("experiments/mnist_gb_dist.yaml"), (1, 28, 28), 10)}


def grids_for(n, planes):
    return valid_grids(n, planes)[:2]


@pytest.mark.parametrize("name", list(MODELS))
def test_plan_matches_measured_bytes_and_tiles(name, comm, mpi, topologies):
    make, shape, nout = MODELS[name]
    probe = make()
    probe.infer_shapes(shape)
    for grid in grids_for(comm.Get_size(), probe.planes()):
        topo = topologies(grid)
        model = make()
        model.infer_shapes(shape)
        model.configure(Numpy(rng_seed=0), topo)
        model.init_params()
        rng = np.random.RandomState(0)
        x = rng.uniform(0, 1, (B,) + shape).astype(np.float32)
        t = np.eye(nout, dtype=np.float32)[rng.randint(0, nout, B)]
        tile = tile_of(shape[1:], topo.grid, topo.coords)
        xt = np.ascontiguousarray(x[:, :, tile.y0:tile.y1, tile.x0:tile.x1])
        epoch = getattr(model, "num_initial_epochs", 0)               # GB: every layer learns
        model.train_step(xt, t, epoch)                                 # warm-up (plans buffers)
        with counting() as traffic:
            model.train_step(xt, t, epoch)
            snap = traffic.snapshot()
        got = comm.allgather(snap)
        plan = plan_model(make(), shape, comm.Get_size(), grid=grid, batch=B)
        tot = plan.totals()
        kinds = ("halo_fwd", "halo_bwd", "allreduce_grad", "allreduce_act")
        per_rank = {k: [g["bytes"].get(k, 0) for g in got] for k in kinds}
        where = f"{name} grid {grid}"
        mpi.assert_all(sum(per_rank["halo_fwd"]) == tot["halo_fwd_total"],
                       f"{where}: halo fwd {sum(per_rank['halo_fwd'])} != plan {tot['halo_fwd_total']}")
        mpi.assert_all(sum(per_rank["halo_bwd"]) == tot["halo_bwd_total"],
                       f"{where}: halo bwd {sum(per_rank['halo_bwd'])} != plan {tot['halo_bwd_total']}")
        mpi.assert_all(max(per_rank["halo_fwd"]) == tot["halo_fwd_max"], f"{where}: halo fwd max")
        mpi.assert_all(max(per_rank["halo_bwd"]) == tot["halo_bwd_max"], f"{where}: halo bwd max")
        mpi.assert_all(max(per_rank["allreduce_grad"]) == tot["allreduce_grad"],
                       f"{where}: grad allreduce {per_rank['allreduce_grad']} != plan {tot['allreduce_grad']}")
        mpi.assert_all(max(per_rank["allreduce_act"]) == tot["allreduce_act"],
                       f"{where}: act allreduce {per_rank['allreduce_act']} != plan {tot['allreduce_act']}")
        # per layer: GlobalArray tags are layer indices
        for lp in plan.layers:
            for kind, planned in (("halo_fwd", lp.halo_fwd_total), ("halo_bwd", lp.halo_bwd_total)):
                measured = sum(g["by_tag"].get(f"{kind}/{lp.index}", 0) for g in got)
                mpi.assert_all(measured == planned, f"{where} layer {lp.name}: {kind} {measured} != {planned}")
        # local shapes and activation memory: the plan's largest tile / chunk, from the real plans
        for lp, layer in zip(plan.layers, model.layers):
            if isinstance(layer, WindowLayer):
                tiles = comm.allgather((layer.plan.out_tile.shape, layer.plan.chunk.shape))
                mpi.assert_all(tuple(lp.tile[1:]) == tuple(max(t[0][i] for t in tiles) for i in range(2)),
                               f"{where} layer {lp.name}: tile {lp.tile} vs {tiles}")
                mpi.assert_all(tuple(lp.chunk[1:]) == tuple(max(t[1][i] for t in tiles) for i in range(2)),
                               f"{where} layer {lp.name}: chunk {lp.chunk} vs {tiles}")
        act = sum(B * 4 * (layer.out_shape[0] * layer.plan.out_tile.size
                           + layer.in_shape[0] * layer.plan.chunk.size)
                  for layer in model.layers if isinstance(layer, WindowLayer))
        mpi.assert_all(max(comm.allgather(act)) <= tot["act_bytes_max"] <= 1.5 * max(comm.allgather(act)) + 2 ** 16,
                       f"{where}: activation memory {tot['act_bytes_max']} vs measured {act}")


def test_planned_buffers_train_like_one_process(comm, mpi, topologies):
    """Layers that reuse their buffers (``reuse_buffers``: in-place adjoint exchanges, chunk
    buffers filled by the halo exchange) train on a grid exactly as one process does."""
    from distnet.backend import Numpy64
    from distnet.comm import Topology
    shape, nout = (2, 19, 17), 5
    rng = np.random.RandomState(1)
    x = rng.uniform(0, 1, (3 * B,) + shape)
    t = np.eye(nout)[rng.randint(0, nout, 3 * B)]

    def train(topo, reuse):
        model = strided_net()
        model.infer_shapes(shape)
        model.configure(Numpy64(rng_seed=0), topo)
        model.init_params()
        for layer in model.layers:
            layer.reuse_buffers = reuse
        tile = tile_of(shape[1:], topo.grid, topo.coords)
        xt = np.ascontiguousarray(x[:, :, tile.y0:tile.y1, tile.x0:tile.x1])
        losses = [model.train_step(xt[i * B:(i + 1) * B], t[i * B:(i + 1) * B], 0) for i in range(3)]
        return losses, model
    ref_losses, ref = train(Topology.serial(), False)
    probe = strided_net()
    probe.infer_shapes(shape)
    for grid in grids_for(comm.Get_size(), probe.planes()):
        topo = topologies(grid)
        losses, model = train(topo, True)
        mpi.assert_all(np.allclose(losses, ref_losses, rtol=1e-10), f"grid {grid}: {losses} != {ref_losses}")
        for a, b in zip(model.layers, ref.layers):
            if hasattr(a, "W") and a.W is not None and a.W.shape == b.W.shape:
                mpi.assert_all(np.allclose(a.W, b.W, rtol=1e-9, atol=1e-12), f"grid {grid}: {a.name}")
