"""Pipeline stages, alone and composed with the spatial split and data replicas: each stage ends
with the same weights (its own layers; the others are released), the same per-epoch costs, outputs
and error rates as the single-process model, float64 to 1e-10 relative.

Net (from test_convnet_dist): conv 3x3 pad 1 -> max pool 2x2 -> conv 3x3 -> FC tanh -> FC(bias)
logistic; 23 images in batches of 5 (the last batch has 3 rows), momentum, reshuffled epochs.
"""
import numpy as np
import pytest

from tests.mpi.test_convnet_dist import C, H, K, N, W, net_padded_strided
from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.models import Model

MPI_SIZES = (2, 3, 4)

# name: (pipe, grid, data, placement, micro-batches). placement: ("list", stages) = the model's
# `stages` key; ("keys", [...]) = per-layer `stage` keys (non-monotone allowed).
CASES = {
    "pipe2": (2, (1, 1), 1, ("list", [3]), 1),
    "pipe2-m3": (2, (1, 1), 1, ("list", [3]), 3),
    "pipe2-tile-boundary-m2": (2, (1, 1), 1, ("list", [2]), 2),
    "pipe3": (3, (1, 1), 1, ("list", [1, 3]), 1),
    "pipe3-m3": (3, (1, 1), 1, ("list", [1, 3]), 3),
    "pipe3-keys-201": (3, (1, 1), 1, ("keys", [2, 2, 0, 1, 1]), 2),
    "stages010": (2, (1, 1), 1, ("keys", [0, 0, 1, 1, 0]), 1),
    "stages010-m3": (2, (1, 1), 1, ("keys", [0, 0, 1, 1, 0]), 3),
    "pipe2-grid1x2": (2, (1, 2), 1, ("list", [2]), 1),
    "pipe2-grid1x2-m3": (2, (1, 2), 1, ("list", [2]), 3),
    "pipe2-grid1x2-keys01110-m2": (2, (1, 2), 1, ("keys", [0, 1, 1, 1, 0]), 2),
    "pipe2-data2": (2, (1, 1), 2, ("list", [3]), 1),
    "pipe2-data2-m3": (2, (1, 1), 2, ("keys", [0, 1, 1, 0, 0]), 3),
}


def _cases():
    return [pytest.param(name, id=name, marks=pytest.mark.mpi_size(p * g[0] * g[1] * d))
            for name, (p, g, d, _, _) in CASES.items()]


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(42)
    return rng.standard_normal((N, C, H, W)), rng.randint(0, K, N)


def _fit(layers, model_cls, topo, x, labels, **keys):
    model = model_cls(layers=layers, num_epochs=2, batch_size=5, shuffle=True,
                      momentum={"type": "constant", "coef": 0.5}, **keys)
    model.infer_shapes((C, H, W))
    model.configure(Numpy64(rng_seed=3), topo)
    model.init_params()
    return model, model.fit(x, labels, K)


@pytest.fixture(scope="module")
def reference(data):
    """The single-process model, trained once per module (every rank computes it)."""
    x, labels = data
    model, costs = _fit(net_padded_strided(), Model, Topology.serial(), x, labels)
    return model, costs, model.predict(x), model.misclass_rate(x, labels)


@pytest.mark.parametrize("name", _cases())
def test_pipeline_equals_single_process(comm, mpi, data, reference, name):
    npipe, grid, ndata, (how, placement), micro = CASES[name]
    x, labels = data
    ref, ref_costs, ref_out, ref_rate = reference
    topo = Topology.from_world(grid=grid, data=ndata, pipe=npipe, world=comm)
    try:
        layers = net_padded_strided()
        keys = {"micro_batches": micro}
        if how == "list":
            keys["stages"] = placement
        else:
            for layer, s in zip(layers, placement):
                layer.stage = s
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model, costs = _fit(layers, Model, topo, xt, labels, **keys)

        np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
        assert model.misclass_rate(xt, labels) == ref_rate
        if ndata == 1:
            np.testing.assert_allclose(model.predict(xt), ref_out, rtol=1e-10, atol=1e-12)
        stage_of = model.stage_of
        for i, (lr, ld) in enumerate(zip(ref.layers, model.layers)):
            if stage_of[i] != topo.pipe_index:
                assert ld.params() == [], f"layer {i} of stage {stage_of[i]} kept on stage {topo.pipe_index}"
                continue
            for pr, pd in zip(lr.params(), ld.params()):
                want = pr.value[:, ld.cols] if pd.sharded else pr.value
                np.testing.assert_allclose(pd.value, want, rtol=1e-10, atol=1e-13, err_msg=pd.name)
        # every layer with weights is owned by exactly one stage of each pipeline
        owned = np.array([len(layer.params()) > 0 for layer in model.layers], dtype=int)
        total = topo.pipe.allreduce(owned)
        expected = [int(len(lr.params()) > 0) for lr in ref.layers]
        mpi.assert_all(total.tolist() == expected, f"owners per layer {total.tolist()}, want {expected}")
    finally:
        topo.free()


@pytest.mark.mpi_size(2)
def test_stage_count_must_match_pipe(comm):
    from distnet.errors import ConfigError
    topo = Topology.from_world(grid=(1, 1), pipe=2, world=comm)
    try:
        model = Model(layers=net_padded_strided(), num_epochs=1, stages=[1, 3])
        model.infer_shapes((C, H, W))
        with pytest.raises(ConfigError, match="model has 3 pipeline stage.*pipe = 2"):
            model.configure(Numpy64(), topo)
    finally:
        topo.free()


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=pytest.mark.mpi_size(m))
                                  for n, m in (("stages010-m3", 2), ("pipe2-grid1x2-keys01110-m2", 4))])
def test_checkpoint_of_a_pipeline_is_complete(comm, data, reference, tmp_path_factory, name):
    """Every stage's parameters reach the file (in their global layout, model order); a model on
    one process and a pipelined one both restore from it."""
    from distnet.models.checkpoint import apply_checkpoint, read_checkpoint, save_checkpoint
    npipe, grid, ndata, (how, placement), micro = CASES[name]
    x, labels = data
    ref = reference[0]
    path = comm.bcast(str(tmp_path_factory.mktemp("ck") / "pipe.h5") if comm.Get_rank() == 0 else None)
    topo = Topology.from_world(grid=grid, data=ndata, pipe=npipe, world=comm)
    try:
        def pipelined():
            layers = net_padded_strided()
            for layer, s in zip(layers, placement):
                layer.stage = s
            return layers
        t = tile_of((H, W), topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model, _ = _fit(pipelined(), Model, topo, xt, labels, micro_batches=micro)
        save_checkpoint(path, model, topo, epoch=1)
        ck = read_checkpoint(path)
        want = [(lr.name, pr) for lr in ref.layers for pr in lr.params()]
        # one class on both sides: the same default names
        assert [e["name"] for e in ck.params] == [pr.name for _, pr in want]
        for e, (_, pr) in zip(ck.params, want):
            np.testing.assert_allclose(e["value"], pr.value, rtol=1e-10, atol=1e-13, err_msg=e["name"])
        # restore: a fresh pipelined model (its own stage's slices) and a one-process model
        again = Model(layers=pipelined(), num_epochs=2, micro_batches=micro)
        single = Model(layers=net_padded_strided(), num_epochs=2)
        for m, tp in ((again, topo), (single, Topology.serial())):
            m.infer_shapes((C, H, W))
            m.configure(Numpy64(rng_seed=99), tp)
            m.init_params()
            apply_checkpoint(m, ck)
        for la, lm in zip(again.layers, model.layers):
            for pa, pm in zip(la.params(), lm.params()):
                np.testing.assert_array_equal(pa.value, pm.value)
        for ls, lr in zip(single.layers, ref.layers):
            for ps, pr in zip(ls.params(), lr.params()):
                np.testing.assert_allclose(ps.value, pr.value, rtol=1e-10, atol=1e-13)
    finally:
        topo.free()
