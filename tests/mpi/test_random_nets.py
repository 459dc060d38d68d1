"""The promise on networks nobody wrote down: small random layer graphs, each on a random layout
of the world (data replicas x an uneven spatial grid), equal the one-process run (float64).

A seed draws an input plane (4..13 x 4..13, 1-2 channels) and 2..7 nodes, each reading earlier
nodes: convolutions, max / average / L2 pooling, locally connected filters and LCN with random
rectangular windows, strides and paddings (paddings wider than the window included, where the
layer allows them); batch norm and dropout (also on vectors); residual additions and channel
concatenations of equal planes (a node read several times, the model's input too); fully
connected layers and global average pooling from planes to vectors. Every node nobody reads
feeds an FC head, and the heads are added into the logits (softmax cross-entropy). The learning
rule is Adam with clipping, SGD with Nesterov momentum and weight decay, or AdamW with a per-step
warm-up and cosine schedule. 5..12 images in batches of 4, reshuffled: the last batch is short,
and some replicas get none of it.

Grids that cannot cut some plane are skipped (the refusal itself is tested elsewhere); the 24 seeds
hold every node kind (paddings wider than the window 21 times, a value read twice 22 times).
Against the oracle: per-epoch costs (1e-10 relative), the error rate, outputs (one replica) and
every gathered weight. Found by this generator: a layer reading one value twice crashed (KeyError);
run on the device-like backend (distnet/testing/devicelike.py), a concatenation's backward handed
the device module a numpy array (tests/unit/test_backend_models.py now covers it).
"""
import numpy as np
import pytest

from distnet.backend import Numpy64
from distnet.comm import Topology
from distnet.geometry import tile_of
from distnet.geometry.grid import factor_pairs, grid_failure
from distnet import layers as L
from distnet.layers.batchnorm import BatchNormLayer
from distnet.layers.dropout import DropoutLayer
from distnet.layers.global_pool import GlobalAveragePoolingLayer
from distnet.models import Model
from distnet.models.global_params import gather_params
from distnet.ops.activations import RectLin, Tanh
from distnet.ops.costs import SoftmaxCrossEntropy
from distnet.optim.rules import Adam, AdamW, GradientDescent
from distnet.optim.schedules import CosineSchedule, LinearWarmup

MPI_SIZES = (4, 6)
MPI_TIMEOUT = 300

K = 3
WI = {"type": "uniform", "low": -0.4, "high": 0.4}
SEEDS = range(24)


def draw(rng):
    """``(input shape, nodes)``: node ``i + 1`` is ``(kind, keys, output shape)``, node 0 the input."""
    C, H, W = int(rng.randint(1, 3)), int(rng.randint(4, 14)), int(rng.randint(4, 14))
    nodes = [("input", {}, (C, H, W))]
    while len(nodes) < 3 or (len(nodes) < 8 and rng.rand() < 0.8):
        images = [i for i, n in enumerate(nodes) if len(n[2]) == 3]
        kind = str(rng.choice(["window", "window", "bn", "drop", "add", "cat", "vector"]))
        src = int(rng.choice(images)) if kind in ("window", "vector") and images else int(rng.randint(len(nodes)))
        shape = nodes[src][2]
        if kind == "window" and len(shape) == 3:
            c, h, w = shape
            op = str(rng.choice(["conv", "max", "avg", "l2", "lf", "lcn"]))
            f = [int(rng.randint(1, 5)), int(rng.randint(1, 5))]
            s = [int(rng.randint(1, 3)), int(rng.randint(1, 3))]
            p = [int(rng.randint(0, f[0] + (op in ("conv", "avg", "l2")) * 2)),
                 int(rng.randint(0, f[1] + (op in ("conv", "avg", "l2")) * 2))]
            if op == "max" or op == "lf":
                p = [min(p[0], f[0] - 1), min(p[1], f[1] - 1)]
            if op == "lcn":
                f, s, p = [3, 3], [1, 1], [0, 0]
            ho, wo = (h if op == "lcn" else (h + 2 * p[0] - f[0]) // s[0] + 1,
                      w if op == "lcn" else (w + 2 * p[1] - f[1]) // s[1] + 1)
            if min(ho, wo) < 1:
                continue
            nofm = int(rng.randint(1, 4)) if op in ("conv", "lf") else c
            nodes.append((op, {"src": [src], "fshape": f, "stride": s, "padding": p, "nofm": nofm}, (nofm, ho, wo)))
        elif kind in ("bn", "drop") and src > 0:
            nodes.append((kind, {"src": [src]}, shape))
        elif kind in ("add", "cat"):
            fits = [i for i, n in enumerate(nodes)
                    if (n[2] == shape if kind == "add" else (len(n[2]) == len(shape) and n[2][1:] == shape[1:]))]
            srcs = [int(rng.choice(fits)) for _ in range(rng.randint(2, 4))]
            out = shape if kind == "add" else (sum(nodes[i][2][0] for i in srcs),) + shape[1:]
            nodes.append((kind, {"src": srcs}, out))
        elif kind == "vector":
            if len(shape) == 3 and rng.randint(2):
                nodes.append(("gap", {"src": [src]}, shape[:1]))
            else:
                nout = int(rng.randint(2, 6))
                nodes.append(("fc", {"src": [src], "nout": nout}, (nout,)))
    return nodes[0][2], nodes


def layers_of(nodes):
    """The model's layers for ``nodes`` (the same classes on one process and on a grid: each
    distributes itself) and FC heads summed into the logits."""
    cls = L.__dict__.get
    BN, Drop, GAP = (BatchNormLayer, DropoutLayer, GlobalAveragePoolingLayer)
    name = ["input"] + [f"n{i}" for i in range(1, len(nodes))]
    out, read = [], set()
    for i, (kind, k, shape) in enumerate(nodes[1:], start=1):
        win = {key: k[key] for key in ("fshape", "stride", "padding") if key in k}
        layer = {"conv": lambda: cls("ConvLayer")(nofm=k["nofm"], weight_init=WI, activation=Tanh(), **win),
                 "max": lambda: cls("MaxPoolingLayer")(**win),
                 "avg": lambda: cls("AveragePoolingLayer")(**win),
                 "l2": lambda: cls("L2PoolingLayer")(**win),
                 "lf": lambda: cls("LocalFilteringLayer")(nofm=k["nofm"], weight_init=WI, **win),
                 "lcn": lambda: cls("LCNLayer")(fshape=3),
                 "bn": lambda: BN(activation=RectLin()),
                 "drop": lambda: Drop(p=0.25),
                 "add": lambda: L.AddLayer(),
                 "cat": lambda: L.ConcatLayer(),
                 "gap": lambda: GAP(),
                 "fc": lambda: cls("FullyConnectedLayer")(nout=k["nout"], weight_init=WI, activation=Tanh())}[kind]()
        layer.name, layer.inputs = name[i], [name[j] for j in k["src"]]
        read.update(k["src"])
        out.append(layer)
    heads = []
    for j in range(1, len(nodes)):
        if j not in read:
            head = cls("FullyConnectedNoBiasLayer")(nout=K, weight_init=WI)
            head.name, head.inputs = f"head{j}", [name[j]]
            out.append(head)
            heads.append(head.name)
    if len(heads) > 1:
        total = L.AddLayer()
        total.name, total.inputs = "logits", heads
        out.append(total)
    return out


RULES = [lambda: Adam(learning_rate=0.01, max_grad_norm=0.5),
         lambda: GradientDescent(learning_rate=0.1, momentum={"type": "nesterov", "coef": 0.9}, weight_decay=0.01),
         lambda: AdamW(learning_rate=0.02, weight_decay=0.1, schedule=[LinearWarmup(2), CosineSchedule(5)],
                       schedule_unit="step")]


def fit(nodes, shape, rule, dist, topo, x, labels):
    model = (Model if dist else Model)(layers=layers_of(nodes), num_epochs=2, batch_size=4,
                                               shuffle=True, cost=SoftmaxCrossEntropy(), learning_rule=RULES[rule]())
    model.infer_shapes(shape)
    model.configure(Numpy64(rng_seed=1), topo)
    model.init_params()
    return model, model.fit(x, labels, K)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_net_equals_one_process(comm, seed):
    rng = np.random.RandomState(seed)
    shape, nodes = draw(rng)
    size = comm.Get_size()
    ndata = int(rng.choice([d for d in range(1, size + 1) if size % d == 0]))
    grids = factor_pairs(size // ndata)
    grid = tuple(grids[rng.randint(len(grids))])
    n = int(rng.randint(5, 13))
    x, labels = rng.standard_normal((n,) + shape), rng.randint(0, K, n)
    rule = int(rng.randint(len(RULES)))

    ref, ref_costs = fit(nodes, shape, rule, False, Topology.serial(), x, labels)
    if grid != (1, 1) and grid_failure(grid, [p[:2] for p in ref.planes()]) is not None:
        pytest.skip(f"grid {grid} cannot cut every plane of this net")
    topo = Topology.from_world(grid=grid, data=ndata, world=comm)
    try:
        t = tile_of(shape[1:], topo.grid, topo.coords)
        xt = x[:, :, t.y0:t.y1, t.x0:t.x1]
        model, costs = fit(nodes, shape, rule, grid != (1, 1), topo, xt, labels)
        assert_same_run(model, costs, topo, xt, ref, ref_costs, x, labels)
    finally:
        topo.free()


def assert_same_run(model, costs, topo, xt, ref, ref_costs, x, labels):
    """``model`` trained on ``topo`` (its tiles ``xt`` of the images ``x``) equals the
    one-process ``ref``: per-epoch costs, the error rate, the outputs (one replica) and every
    gathered weight (float64)."""
    np.testing.assert_allclose(costs, ref_costs, rtol=1e-10)
    assert model.misclass_rate(xt, labels) == ref.misclass_rate(x, labels)
    if topo.ndata == 1:
        np.testing.assert_allclose(model.predict(xt), ref.predict(x), rtol=1e-9, atol=1e-12)
    got, want = gather_params(model, topo), gather_params(ref, Topology.serial(len(topo.grid)))
    if topo.rank == 0:
        assert [g["name"] for g in got] == [w["name"] for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g["value"], w["value"], rtol=1e-9, atol=1e-12, err_msg=w["name"])
