"""Layers declare their placement; one chunk seam; one training step; one grid resolver.

* Every distribution fact is read from :class:`~distnet.layers.placement.Placement` values, never
  inferred from attribute presence (a grep over the source).
* Placements are pure: computed for any rank on one process, they agree with what the built
  model holds (global shapes and this rank's slices), and the index of a sharded parameter
  cuts the global tensor into disjoint parts covering it.
* Zero padding and the GlobalArray exchange share one interface; the zero-padding exchange is
  the adjoint pair the halo exchange is (dot test).
* The forward -> cost -> backward -> update sequence is one object, used by MLP, the pipeline
  schedule, GB's supervised phase and LocalFiltering pretraining.
* The world is cut by one resolver, used by run, show and plan alike.
"""
import ast
import re
from pathlib import Path

import numpy as np
import pytest

from distnet.comm.topology import Topology
from distnet.config import load_experiment
from distnet.config.builder import config_name
from distnet.errors import TopologyError
from distnet.geometry import Box, Window, plan_halo, tile_of
from distnet.geometry.grid import GridLayout, GridPosition, resolve_layout
from distnet.layers.placement import SPATIAL
from distnet.layers.step import TrainingStep
from distnet.ops.padding import ZeroPadding
from distnet.plan import plan_model

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ["mnist_cnn_dist.yaml", "mnist_gb_dist.yaml", "mnist_mlp_vecpar.yaml",
               "mnist_cnn_hybrid.yaml", "mnist_mlp_pipeline.yaml"]

# Packages where distribution facts live: attribute-presence tests are refused there.
STRICT = ["layers", "models", "experiments", "plan", "cli/show.py", "cli/plan.py",
          "comm/topology.py", "comm/reduce.py", "comm/traffic.py", "geometry"]


def _calls(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield node


def test_no_distribution_fact_from_attribute_presence():
    """``hasattr`` appears nowhere in distnet; a ``getattr`` with a default (``getattr(x, name,
    default)``, "use it if it is there") nowhere where distribution facts live."""
    bad = []
    for path in sorted((ROOT / "distnet").rglob("*.py")):
        rel = path.relative_to(ROOT / "distnet").as_posix()
        strict = any(rel == s or rel.startswith(s + "/") for s in STRICT)
        for call in _calls(path):
            if call.func.id == "hasattr" or (strict and call.func.id == "getattr" and len(call.args) == 3):
                bad.append(f"distnet/{rel}:{call.lineno}: {call.func.id}(...)")
    assert not bad, "\n".join(bad)


def test_no_caller_name_inspection():
    """Traffic kinds are passed explicitly, not read off the caller's frame."""
    for path in (ROOT / "distnet").rglob("*.py"):
        assert not re.search(r"sys\._getframe", path.read_text()), path


# -- placements are pure and agree with the built model ------------------------------------------

def _exp(name):
    exp = load_experiment(str(ROOT / "experiments" / name))
    exp.model.infer_shapes(exp.dataset.image_shape)
    return exp


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_serial_placements_equal_the_built_model(name):
    exp = _exp(name)
    placements = exp.model.placements(GridPosition())
    exp.model.configure(exp.backend, Topology.serial())
    exp.model.init_params()
    for layer, pl in zip(exp.model.layers, placements):
        assert [pp.name for pp in pl.params] == [p.name for p in layer.params()], layer.name
        for pp, p in zip(pl.params, layer.params()):
            assert tuple(p.value.shape) == pp.local_shape == pp.global_shape
            assert p.reduce_over == pp.reduce_over and not pp.sharded
        assert layer.placement.out_layout == pl.out_layout


@pytest.mark.parametrize("name,grid", [("mnist_cnn_dist.yaml", (2, 2)), ("mnist_cnn_dist.yaml", (1, 3)),
                                       ("mnist_gb_dist.yaml", (2, 3)), ("mnist_gb_dist.yaml", (3, 3)),
                                       ("mnist_mlp_vecpar.yaml", (1, 4))])
def test_sharded_parameters_partition_their_global_tensor(name, grid):
    """Over all ranks of a grid, the slices of a sharded parameter cover its global tensor exactly
    once; replicated ones are whole everywhere; output tiles partition the global planes."""
    exp = _exp(name)
    ranks = [exp.model.placements(GridPosition(grid, (iy, ix))) for iy in range(grid[0]) for ix in range(grid[1])]
    for i, layer in enumerate(exp.model.layers):
        for j, pp in enumerate(ranks[0][i].params):
            count = np.zeros(pp.global_shape, dtype=int)
            for pls in ranks:
                q = pls[i].params[j]
                assert (q.global_shape, q.sharded, q.reduce_over) == (pp.global_shape, pp.sharded, pp.reduce_over)
                part = q.local_part(np.ones(pp.global_shape))
                assert part.shape == q.local_shape
                if q.index is Ellipsis:
                    count += 1
                else:
                    count[q.index] += 1
            expect = 1 if pp.sharded else len(ranks)
            assert (count == expect).all(), (layer.name, pp.name)
        out = ranks[0][i].out_layout
        if out.kind == SPATIAL and len(out.global_shape) == 3:
            cells = sum(int(np.prod(pls[i].out_layout.local_shape[1:])) for pls in ranks)
            assert cells == int(np.prod(out.global_shape[1:]))


def test_vecpar_layers_place_as_shards_before_a_run():
    """``distnet show`` asks an MLPDist for its placements before anything is configured: its FC
    weights are feature-block shards there too, as in the run (they read as replicated)."""
    exp = _exp("mnist_mlp_vecpar.yaml")
    for coords in ((0, 0), (0, 3)):
        for pl in exp.model.placements(GridPosition((1, 4), coords)):
            w = pl.params[0]
            assert w.sharded and w.local_shape[0] == w.global_shape[0] and w.local_shape[1] < w.global_shape[1]


def test_placement_names_the_halo_exchanges_and_their_bytes():
    exp = _exp("mnist_gb_dist.yaml")
    pls = exp.model.placements(GridPosition((2, 2), (0, 0)))
    lcn = next(pl for layer, pl in zip(exp.model.layers, pls) if config_name(layer) == "LCNLayerDist")
    assert lcn.halos[0].per_step == 2              # x, then s
    for layer, pl in zip(exp.model.layers, pls):
        for h in pl.halos:
            assert h.sent() == h.channels * sum(t.box.size for t in h.plan.sends)
            assert h.received() == h.channels * sum(t.box.size for t in h.plan.recvs)
            assert h.plan.coords == (0, 0) and h.plan.grid == (2, 2)


def _facts(pl):
    """What a placement says about the distribution, comparable between two models."""
    return (pl.in_layout, pl.out_layout, pl.chunk_shape, pl.macs,
            [(p.name, p.global_shape, p.local_shape, str(p.index), p.reduce_over, p.sharded) for p in pl.params],
            [(h.channels, h.per_step, h.split, h.sent(), h.received()) for h in pl.halos],
            [(c.over, c.per_sample, c.backward) for c in pl.collectives])


def test_a_plain_layer_on_a_grid_places_as_its_dist_alias():
    """One class per layer kind: ``ConvLayer`` in a distributed run distributes itself, exactly
    as neon's ``ConvLayerDist`` (the same class) does; the placement says so on every rank."""
    plain = load_experiment(str(ROOT / "experiments" / "mnist_cnn.yaml")).model
    dist = load_experiment(str(ROOT / "experiments" / "mnist_cnn_dist.yaml")).model
    assert [config_name(layer) for layer in plain.layers][:2] == ["ConvLayer", "MaxPoolingLayer"]
    assert [config_name(layer) for layer in dist.layers][:2] == ["ConvLayerDist", "MaxPoolingLayerDist"]
    for model in (plain, dist):
        model.infer_shapes((1, 28, 28))
    for coords in ((0, 0), (1, 1)):
        pos = GridPosition((2, 2), coords)
        a, b = plain.placements(pos), dist.placements(pos)
        assert [_facts(p) for p in a] == [_facts(p) for p in b]
        assert all(h.split for p in a for h in p.halos) and any(p.sharded for p in a)   # tiles, FC columns
    one = plain.placements(GridPosition((1, 1), (0, 0)))
    assert not any(h.split for p in one for h in p.halos) and not any(p.sharded for p in one)


# -- one seam for chunks --------------------------------------------------------------------------

@pytest.mark.parametrize("window", [Window(3, 1, 1, 1), Window(5, 2, 2, 1), Window(2, 2, 0, 0), Window(3, 3, 0, 0)])
def test_zero_padding_is_an_adjoint_pair_with_out_buffers(window):
    plan = plan_halo((11, 9), window, window, (1, 1), (0, 0))
    ex = ZeroPadding(plan)
    rng = np.random.RandomState(0)
    x = rng.standard_normal((2, 3) + plan.own.shape)
    y = rng.standard_normal((2, 3) + plan.chunk.shape)
    cx = ex.exchange(x)
    assert np.vdot(cx, y) == pytest.approx(np.vdot(x, ex.exchange_adjoint(y)), rel=1e-12)
    buf = np.zeros((2, 3) + plan.chunk.shape)
    np.testing.assert_array_equal(ex.exchange(x, out=buf), cx)
    out = np.full((2, 3) + plan.own.shape, 7.0)
    np.testing.assert_array_equal(ex.exchange_adjoint(y, out=out), ex.exchange_adjoint(y))


def test_window_layers_run_through_their_exchange():
    """A window layer's chunk exchange comes from its placement: on a grid of one tile zero
    padding, whatever name the file used (a GlobalArray halo exchange on several tiles: the
    tests under tests/mpi); both are reached through the same attribute and methods."""
    for name in ("mnist_cnn.yaml", "mnist_cnn_dist.yaml"):
        exp = _exp(name)
        exp.model.configure(exp.backend, Topology.serial())
        windows = [layer for layer in exp.model.layers if layer.placement.halos]
        assert windows and all(isinstance(layer.input, ZeroPadding) for layer in windows)
        assert not any(layer.placement.halos[0].split for layer in windows)


# -- one training step ----------------------------------------------------------------------------

@pytest.fixture
def counted_steps(monkeypatch):
    calls = []
    original = TrainingStep.__call__

    def counting(self, run, params, *args, **kwargs):
        calls.append(len(params))
        return original(self, run, params, *args, **kwargs)
    monkeypatch.setattr(TrainingStep, "__call__", counting)
    return calls


def _tiny_data(exp, n=6, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.uniform(0, 1, (n,) + tuple(exp.dataset.image_shape)).astype(exp.backend.dtype)
    return x, rng.randint(0, exp.dataset.nclasses, n)


@pytest.mark.parametrize("name,sets", [("mnist_cnn.yaml", {}),
                                       ("mnist_mlp_pipeline.yaml", {"micro_batches": 2}),
                                       ("mnist_gb.yaml", {"num_pretrain_epochs": 1})])
def test_every_training_path_runs_the_one_step(name, sets, counted_steps):
    overrides = [f"model.num_epochs=1", "model.batch_size=3"] + [f"model.{k}={v}" for k, v in sets.items()]
    exp = load_experiment(str(ROOT / "experiments" / name), overrides)
    exp.model.infer_shapes(exp.dataset.image_shape)
    exp.model.configure(exp.backend, Topology.serial())
    exp.model.init_params()
    x, y = _tiny_data(exp)
    exp.model.fit(x, y, exp.dataset.nclasses)
    pretrain = len(exp.model.pretrained_layers()) * 2 if name == "mnist_gb.yaml" else 0
    assert len(counted_steps) == 2 + pretrain      # 2 supervised batches (+ 2 per pretrained layer)
    if pretrain:
        assert counted_steps[:pretrain] == [2] * pretrain   # LF pretraining: decoder V and W


# -- one grid resolver ------------------------------------------------------------------------------

def test_resolver_cuts_worlds_as_run_does():
    planes = [(28, 28), (12, 12), (4, 4)]
    assert resolve_layout(1) == GridLayout(1, 1, (1, 1))
    assert resolve_layout(4, dist_flag=True, planes=planes) == GridLayout(1, 1, (2, 2))
    assert resolve_layout(4, dist_flag=True, dist_mode="datapar", planes=planes) == GridLayout(4, 1, (1, 1))
    assert resolve_layout(8, dist_flag=True, dist_mode="datapar", pipe=2) == GridLayout(4, 2, (1, 1))
    assert resolve_layout(8, dist_flag=True, data=2, pipe=2, planes=planes) == GridLayout(2, 2, (1, 2))
    assert resolve_layout(6, dist_flag=True, grid=(3, 2), planes=planes) == GridLayout(1, 1, (3, 2))
    assert resolve_layout(2, data=2) == GridLayout(2, 1, (1, 1))
    with pytest.raises(TopologyError, match="dist_flag: False"):
        resolve_layout(4)
    with pytest.raises(TopologyError, match="Rank counts that work: 1, 2, 3, 4, 6, 8, 9, 12, 16"):
        resolve_layout(7, dist_flag=True, planes=planes)
    lay = GridLayout(2, 2, (2, 3))
    assert [lay.position(r) for r in (0, 7, 13, 23)] == [
        GridPosition((2, 3), (0, 0), 2, 2, 0, 0), GridPosition((2, 3), (0, 1), 2, 2, 0, 1),
        GridPosition((2, 3), (0, 1), 2, 2, 1, 0), GridPosition((2, 3), (1, 2), 2, 2, 1, 1)]


def test_show_and_plan_use_the_layout_of_the_run():
    """A 4-rank datapar file is 4 replicas of whole images (plan once planned a 2x2 grid)."""
    from click.testing import CliRunner

    from distnet.cli.plan import plan as plan_cmd
    from distnet.cli.show import show as show_cmd
    exp = load_experiment(str(ROOT / "experiments" / "mnist_mlp_datapar.yaml"))
    assert exp.layout(4) == GridLayout(4, 1, (1, 1))
    for cmd in (show_cmd, plan_cmd):
        r = CliRunner().invoke(cmd, [str(ROOT / "experiments" / "mnist_mlp_datapar.yaml"), "-n", "4"])
        assert r.exit_code == 0, r.output
        assert "4 rank(s) = data 4 x pipe 1 x grid 1x1" in r.output
        assert "plan: 4 rank(s) = data 4 x pipe 1 x grid 1x1 on 1 node(s) of 4 rank(s), batch 50 (13 per replica)" in r.output
    p = plan_model(exp.model, exp.dataset.image_shape, 1, batch=50, data=4).totals()
    assert p["allreduce_grad"] == 397510 * 4       # every parameter summed over the 4 replicas
    hybrid = load_experiment(str(ROOT / "experiments" / "mnist_cnn_hybrid.yaml"))
    r = CliRunner().invoke(show_cmd, [str(ROOT / "experiments" / "mnist_cnn_hybrid.yaml"), "-n", "8", "--set", "data=2"])
    assert r.exit_code == 0 and "8 rank(s) = data 2 x pipe 2 x grid 1x2" in r.output, r.output
    assert hybrid.layout(8) == GridLayout(1, 2, (2, 2))


def test_halo_plans_touch_only_overlapping_peers():
    """plan_halo visits only the peers whose boxes meet (per-axis ranges): equal to the brute
    force over every rank, on a large grid."""
    w = Window(5, 1, 2, 2)
    grid, coords = (7, 9), (3, 4)
    plan = plan_halo((40, 50), w, w, grid, coords)
    out_plane = (40, 50)
    brute_r, brute_s = [], []
    chunk = plan.chunk
    for iy in range(grid[0]):
        for ix in range(grid[1]):
            if (iy, ix) == coords:
                continue
            r = tile_of((40, 50), grid, (iy, ix)).intersect(chunk)
            if not r.is_empty():
                brute_r.append(((iy, ix), r))
            t = tile_of(out_plane, grid, (iy, ix))
            c = Box(*w.input_span(t.y0, t.y1 - t.y0), *w.input_span(t.x0, t.x1 - t.x0))
            s = plan.own.intersect(c)
            if not s.is_empty():
                brute_s.append(((iy, ix), s))
    assert [(t.peer, t.box) for t in plan.recvs] == brute_r
    assert [(t.peer, t.box) for t in plan.sends] == brute_s
