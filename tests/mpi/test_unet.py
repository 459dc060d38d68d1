"""A U-Net-shaped graph (conv, pool, conv with batch norm, a decoder layer, the skip connection
cropped to the decoder map, channel concatenation, conv; global average pooling and FC logits as
the cost's input) on 13x11 images in float64, on a process grid with uneven tiles and with data
replicas, against the single-process model that every rank also runs:

* one training step's forward and backward: every layer's output tile and every input-gradient
  tile equal the same tile of the one-process step, and every summed parameter gradient equals
  the one-process gradient (1e-10 relative);
* two epochs of training: the same costs, error rates, weights and batch-norm statistics.

The decoder layers: nearest and linear upsampling, transposed convolutions with an odd (3x3,
stride 2, padding 1, output padding 1) and an even (2x2, stride 2) kernel; and a chain of crops
that pad and cut, linear upsampling by 3x2 and a transposed convolution whose stride exceeds its
kernel (tests/unet_net.py)."""
import contextlib

import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.comm.reduce import allreduce_sum
from distnet.geometry import tile_of
from distnet.layers.placement import COMPLETE
from distnet.models.checkpoint import gather_params
from tests.unet_net import C, DECODERS, H, K, W, unet_model

MPI_SIZES = (1, 4, 9)

N = 6
# (data replicas, grid): 13x11 cut 5,4,4 x 4,4,3 on 3x3; the 5x4 pooled map 2,2,1 x 2,1,1
CASES = [(1, (1, 1)), (1, (2, 2)), (2, (1, 2)), (1, (4, 1)), (1, (3, 3))]


def build(decoder, topo):
    return unet_model(decoder, Numpy64(rng_seed=3), topo)


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(11)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def _cases():
    return [pytest.param(d, g, id=f"data{d}-grid{g[0]}x{g[1]}", marks=pytest.mark.mpi_size(d * g[0] * g[1]))
            for d, g in CASES]


def record(model):
    """Keep every layer's output and input gradient of the next step: ``{name: [y, dx]}``."""
    seen = {}
    for layer in model.layers:
        def fprop(x, layer=layer, inner=layer.fprop):
            y = inner(x)
            seen[layer.name] = [y.copy(), None]
            return y

        def bprop(delta, need_input_grad=True, layer=layer, inner=layer.bprop):
            dx = inner(delta, need_input_grad)
            seen[layer.name][1] = dx if dx is None or isinstance(dx, list) else dx.copy()
            return dx
        layer.fprop, layer.bprop = fprop, bprop
    return seen


def one_step(model, x, t, rows, batch):
    """Forward and backward of the global batch's ``rows`` (this replica's); the gradients summed
    over the communicators their placements name (as the training step sums them)."""
    seen = record(model)
    model.start_batch(batch)
    model.execution.forward_backward(x[rows], t[rows], batch)
    for _, p in model.trained_params():
        if p.reduce_over is not COMPLETE:
            allreduce_sum([p.grad], model.topology.comm(p.reduce_over.comm))
    return seen


def my_part(a, shape, topo):
    """This rank's part of a one-process activation ``a`` (rows: the caller's) of global
    ``shape``: its tile of image-like activations, the whole of vectors."""
    if len(shape) != 3:
        return a
    t = tile_of(shape[1:], topo.grid, topo.coords)
    return a[:, :, t.y0:t.y1, t.x0:t.x1]


def assert_same(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * max(1.0, float(np.abs(want).max(initial=0))),
                               err_msg=what)


@contextlib.contextmanager
def models(comm, ndata, grid, decoder):
    """``(topology, the one-process model, the distributed model)``; the topology freed after."""
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        yield topo, build(decoder, Topology.serial()), build(decoder, topo)
    finally:
        topo.free()


@pytest.mark.parametrize("decoder", list(DECODERS) + ["crops"])
@pytest.mark.parametrize("ndata,grid", _cases())
def test_unet_step_equals_single_process(comm, data, ndata, grid, decoder):
    x, labels = data
    with models(comm, ndata, grid, decoder) as (topo, ref, model):
        rows, targets = model.replica_rows(np.arange(N)), np.eye(K)[labels]
        want = one_step(ref, x, targets, np.arange(N), N)
        got = one_step(model, my_part(x, (C, H, W), topo), targets, rows, N)
        for layer in ref.layers:
            (y, dx), (gy, gdx) = want[layer.name], got[layer.name]
            assert_same(gy, my_part(y[rows], layer.out_shape, topo), f"{layer.name} output")
            ins = dx if isinstance(dx, list) else [dx]
            gins = gdx if isinstance(gdx, list) else [gdx]
            for k, (a, b, shape) in enumerate(zip(ins, gins, getattr(layer, "in_shapes", [layer.in_shape]))):
                if a is not None:
                    assert_same(b, my_part(a[rows], shape, topo), f"{layer.name} input gradient {k}")
        for (_, p), (_, q) in zip(ref.trained_params(), model.trained_params()):
            assert_same(q.grad, p.grad, f"{p.name} gradient")


@pytest.mark.parametrize("decoder", ["linear", "deconv3"])
@pytest.mark.parametrize("ndata,grid", _cases())
def test_unet_training_equals_single_process(comm, data, ndata, grid, decoder):
    x, labels = data
    with models(comm, ndata, grid, decoder) as (topo, ref, model):
        ref_costs = ref.fit(x, labels, K)
        xt = my_part(x, (C, H, W), topo)
        np.testing.assert_allclose(model.fit(xt, labels, K), ref_costs, rtol=1e-10)
        assert model.misclass_rate(xt, labels) == ref.misclass_rate(x, labels)
        for group in ("params", "buffers"):
            got, want = gather_params(model, topo, group), gather_params(ref, Topology.serial(), group)
            if topo.rank == 0:
                assert [e["name"] for e in got] == [e["name"] for e in want]
                for g, w in zip(got, want):
                    assert_same(g["value"], w["value"], g["name"])
