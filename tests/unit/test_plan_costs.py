"""The cost model's formulas against hand calculations: Allreduce by recursive doubling and by
Rabenseifner's algorithm on one node and across nodes, halo bytes split into intra- and
inter-node parts by rank placement, the job's throughput, memory per rank and node, warnings,
and `distnet plan --input-shape` on a file whose own images are small."""
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.plan import plan as plan_cmd
from distnet.config import load_experiment
from distnet.plan import Machine, plan_model
from distnet.plan.collectives import allreduce, members_per_node, rabenseifner, recursive_doubling, ring
from distnet.plan.memory import memory_totals

M = Machine(alpha=1e-6, beta=1e10, alpha_inter=1e-5, beta_inter=1e9)


def test_recursive_doubling_on_one_node():
    # log2(8) = 3 steps, each the whole message
    assert recursive_doubling(1000, 8, M) == pytest.approx(3 * (1e-6 + 1000 / 1e10))
    assert recursive_doubling(1000, 1, M) == 0.0 and recursive_doubling(0, 8, M) == 0.0
    assert recursive_doubling(1000, 5, M) == pytest.approx(3 * (1e-6 + 1000 / 1e10))   # ceil(log2 5)


def test_rabenseifner_on_one_node():
    n, p = 8_000_000, 8
    assert rabenseifner(n, p, M) == pytest.approx(2 * 3 * 1e-6 + 2 * (p - 1) / p * n / 1e10)


def test_across_nodes_the_far_steps_cross_the_network():
    m = Machine(alpha=1e-6, beta=1e10, alpha_inter=1e-5, beta_inter=1e9, ranks_per_node=4)
    # 16 ranks, 4 per node: 2 steps inside a node, 2 across, 4 ranks sharing the interface
    n = 1000
    assert recursive_doubling(n, 16, m) == pytest.approx(2 * (1e-6 + n / 1e10) + 2 * (1e-5 + n * 4 / 1e9))
    big = 16_000_000
    inter = (1 - 1 / 4) * big
    intra = 15 / 16 * big - inter
    assert rabenseifner(big, 16, m) == pytest.approx(2 * (2 * 1e-6 + 2 * 1e-5 + intra / 1e10 + inter * 4 / 1e9))


def test_the_cheaper_algorithm_is_taken_and_far_below_a_ring_at_scale():
    small, big = 3.3 * 1024, 100 * 2**20
    for m in (Machine(ranks_per_node=1), Machine(ranks_per_node=64)):
        t = allreduce(small, 4096, m)
        assert t == min(recursive_doubling(small, 4096, m), rabenseifner(small, 4096, m))
        assert ring(small, 4096, m) > 50 * t and t < 2e-4    # the old model: 2 (P-1) latencies, 16 ms
        assert allreduce(big, 4096, m) == rabenseifner(big, 4096, m) < recursive_doubling(big, 4096, m)
    one = Machine(ranks_per_node=1)      # no interface shared: a short message goes by doubling
    assert allreduce(small, 4096, one) == recursive_doubling(small, 4096, one) == pytest.approx(12 * (5e-6 + small / 12.5e9))


def test_members_per_node_follow_block_placement():
    m = Machine(ranks_per_node=4)
    assert members_per_node(range(16), m) == 4
    assert members_per_node([0, 4, 8, 12], m) == 1       # one member per node (data replicas)
    assert members_per_node([0, 1, 8, 9], m) == 2
    assert members_per_node(range(16), Machine()) == 16


def _bigimage():
    return load_experiment("benchmarks/experiments/bigimage_dist.yaml").model


def test_halo_time_grows_when_neighbours_sit_on_another_node():
    shape, grid = (3, 256, 256), (2, 2)
    one = plan_model(_bigimage(), shape, 4, grid=grid, batch=8, machine=Machine(ranks_per_node=4))
    two = plan_model(_bigimage(), shape, 4, grid=grid, batch=8, machine=Machine(ranks_per_node=2))
    t1, t2 = one.totals(), two.totals()
    assert t1["halo_fwd_max"] == t2["halo_fwd_max"] and t1["halo_inter_max"] == 0
    # ranks 0, 1 on node 0, ranks 2, 3 on node 1: the row above / below is on the other node
    conv0 = two.layers[0]
    per_row = 8 * 3 * 4 * 128          # batch x channels x bytes x a 128-pixel edge, one row of halo
    assert conv0.halo_inter_max >= per_row
    assert t2["halo_inter_max"] > 0 and t2["time"]["halo"] > t1["time"]["halo"]


def test_throughput_is_the_job_s_and_memory_adds_up():
    exp = load_experiment("experiments/mnist_mlp_datapar.yaml")
    p1 = plan_model(exp.model, (1, 28, 28), 1, batch=48, data=1)
    p4 = plan_model(load_experiment("experiments/mnist_mlp_datapar.yaml").model, (1, 28, 28), 1, batch=48, data=4)
    t1, t4 = p1.totals(), p4.totals()
    assert t4["images_per_s"] == pytest.approx(48 / t4["time"]["step"])
    assert t4["images_per_s_replica"] == pytest.approx(12 / t4["time"]["step"])
    assert t4["images_per_s"] > t1["images_per_s"]      # replicas add throughput for the job
    mem = memory_totals(p4)
    r = mem["rank"]
    assert r["total"] == sum(r[k] for k in ("parameters", "gradients", "optimizer", "activations", "workspace",
                                             "transient", "data", "runtime"))
    assert r["parameters"] * (2 + p4.state_arrays) == t4["param_bytes"]
    assert r["data"] == 12 * 784 * 4                     # one replica's minibatch, without the files
    assert mem["node"]["total"] == 4 * r["total"]        # one node by default: all 4 ranks
    assert r["single_file_restore"] == sum(lp.param_global for lp in p4.layers) * 4 * 2


def test_more_replicas_than_images_in_a_batch_is_warned():
    p = plan_model(load_experiment("experiments/mnist_mlp_datapar.yaml").model, (1, 28, 28), 1, batch=50, data=64)
    assert any("64 data replicas for a batch of 50 images" in n for n in p.notes)
    p = plan_model(load_experiment("experiments/mnist_mlp_datapar.yaml").model, (1, 28, 28), 1, batch=50, data=4)
    assert not p.notes


def _narrow_tiles_model():
    """A 9x9 convolution (a halo of 4 pixels) then a fully connected layer."""
    from distnet.layers import ConvLayer, FullyConnectedLayer
    from distnet.models import Model
    wi = {"type": "uniform", "low": -0.1, "high": 0.1}
    return Model(layers=[ConvLayer(nofm=2, fshape=9, padding=4, weight_init=wi, learning_rate=0.1),
                         FullyConnectedLayer(nout=3, weight_init=wi, learning_rate=0.1)], num_epochs=1, batch_size=4)


def _volume_model():
    from distnet.layers import ConvLayer, FullyConnectedNoBiasLayer, MaxPoolingLayer
    from distnet.models import Model
    wi = {"type": "uniform", "low": -0.1, "high": 0.1}
    return Model(layers=[ConvLayer(nofm=3, fshape=[3, 2, 3], padding=1, weight_init=wi), MaxPoolingLayer(fshape=2),
                         ConvLayer(nofm=2, fshape=3, stride=[1, 2, 1], padding=1, weight_init=wi),
                         FullyConnectedNoBiasLayer(nout=4, weight_init=wi)], num_epochs=1, learning_rate=0.1)


def test_tiles_narrower_than_the_halo_are_warned():
    # 16 columns on 8 ranks: 2-pixel tiles, a halo of 4 pixels reaches two ranks away
    p = plan_model(_narrow_tiles_model(), (1, 16, 16), 8, grid=(1, 8), batch=4)
    assert any("layer" in n and "narrower than its halo" in n for n in p.notes), p.notes
    assert not plan_model(_narrow_tiles_model(), (1, 16, 16), 2, grid=(1, 2), batch=4).notes


def test_plan_of_any_input_shape_at_4096_ranks():
    r = CliRunner().invoke(plan_cmd, ["experiments/mnist_cnn_dist.yaml", "--input-shape", "3,2048,2048",
                                      "-n", "4096", "--ranks-per-node", "64"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "grid 64x64 on 64 node(s) of 64 rank(s)" in out and "images/s for the job" in out
    assert "data per rank" not in out          # the file's own images say nothing of 2048x2048 ones
    assert "memory per rank:" in out and "memory per node (64 rank(s)):" in out
    step = float(out.split("predicted step: ")[1].split(" ms")[0])
    assert math.isfinite(step) and step > 0
    # the ranks of one node hold 64 tiles side by side: some neighbours are on other nodes
    assert "of its halo to other nodes" in out


def test_default_is_one_node_and_says_so(monkeypatch):
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(var, raising=False)
    r = CliRunner().invoke(plan_cmd, ["experiments/mnist_cnn_dist.yaml", "-n", "4"])
    assert r.exit_code == 0 and "on 1 node(s) of 4 rank(s)" in r.output
    assert "give --ranks-per-node R for a job across nodes" in r.output
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    r = CliRunner().invoke(plan_cmd, ["experiments/mnist_cnn_dist.yaml", "-n", "4"])
    assert r.exit_code == 0 and "on 2 node(s) of 2 rank(s)" in r.output
    assert "--ranks-per-node R" not in r.output


def test_json_has_the_memory_and_the_machine():
    import json
    r = CliRunner().invoke(plan_cmd, ["experiments/mnist_cnn_dist.yaml", "-n", "4", "--json",
                                      "--ranks-per-node", "2", "--beta-inter", "1e9"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["machine"]["ranks_per_node"] == 2 and d["machine"]["beta_inter"] == 1e9
    assert d["memory"]["rank"]["total"] > 0 and d["memory"]["node"]["ranks"] == 2
    assert np.isclose(d["totals"]["images_per_s"], 50 / d["totals"]["time"]["step"])


def test_per_rank_figures_sum_to_the_totals():
    p = plan_model(_bigimage(), (3, 256, 256), 6, grid=(2, 3), batch=4)
    t = p.totals()
    both = p.per_rank("halo_fwd") + p.per_rank("halo_bwd")
    assert p.per_rank("halo_fwd").shape == (2, 3)
    assert both.sum() == t["halo_fwd_total"] + t["halo_bwd_total"]
    assert both.max() <= t["halo_fwd_max"] + t["halo_bwd_max"]
    assert not p.per_rank("nothing such").any()


@pytest.mark.parametrize("model, shape, grid, per_node", [
    (lambda: load_experiment("experiments/mnist_gb_dist.yaml").model, (1, 28, 28), (3, 2), 4),
    (lambda: load_experiment("benchmarks/experiments/bigimage_dist.yaml").model, (3, 64, 48), (4, 3), 5),
    (_narrow_tiles_model, (1, 16, 16), (1, 8), 3),
    (_volume_model, (2, 6, 8, 7), (3, 2, 2), 5)])
def test_a_halo_exchange_states_every_ranks_cost(model, shape, grid, per_node):
    """What a halo exchange states for every rank of its grid at once (per axis, what the cost
    model sums) is what each rank's own placement says: elements sent and received, messages,
    the part of them for ranks of another node, tiles, chunks, peers beyond the neighbours."""
    from distnet.geometry import grid_coords
    from distnet.geometry.grid import GridPosition
    m = model()
    m.infer_shapes(shape)
    machine = Machine(ranks_per_node=per_node)
    rank_of = lambda c: int(np.ravel_multi_index(c, grid))   # noqa: E731 - world ranks of the grid
    for i, pl in enumerate(m.placements(GridPosition(grid, (0,) * len(grid)))):
        if not pl.halos:
            continue
        every = pl.halos[0].grid_costs()
        far = False
        f_x, b_x, m_x = every.to_other_nodes(machine.node_of)
        for coords in grid_coords(grid):
            own = m.placements(GridPosition(grid, coords))[i]
            h = own.halos[0]
            assert (every.sent[coords], every.received[coords], every.messages[coords]) == \
                (h.sent(), h.received(), h.messages())
            other = [t for t in h.plan.sends if machine.node_of(rank_of(t.peer)) != machine.node_of(rank_of(coords))]
            back = [t for t in h.plan.recvs if machine.node_of(rank_of(t.peer)) != machine.node_of(rank_of(coords))]
            assert f_x[coords] == h.channels * sum(t.box.size for t in other) and m_x[coords] == len(other)
            assert b_x[coords] == h.channels * sum(t.box.size for t in back)
            assert every.out_pixels[coords] == np.prod(own.out_layout.local_shape[1:])
            assert every.chunk_pixels[coords] == np.prod(own.chunk_shape[1:])
            assert all(a >= b for a, b in zip(every.largest()[0], own.out_layout.local_shape[1:]))
            far |= any(max(abs(p - c) for p, c in zip(t.peer, coords)) > 1 for t in h.plan.sends)
        assert every.far_peers == far
        assert every.far_peers == (grid == (1, 8))


def test_a_collective_states_its_payload():
    """A backward Allreduce's rows only with an input gradient; its float64 statistics always."""
    from distnet.layers.placement import Collective
    c = Collective("grad", per_sample=5, backward=True, per_step=3)
    assert c.payload(4, 8) == 4 * 8 * 5 + 8 * 3 and c.payload(4, 8, input_gradient=False) == 8 * 3
    assert Collective("spatial", per_sample=5).payload(4, 8, input_gradient=False) == 4 * 8 * 5


def _plan_json(*args):
    r = CliRunner().invoke(plan_cmd, ["benchmarks/experiments/unet3d_bench_dist.yaml", "--batch", "1", "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_plan_of_volumes_weak_scaling_512_to_2048():
    # --input-shape C,D,H,W: 512^3 on 4x4x4 and 2048^3 on 16x16x16 give every rank a 128^3 tile,
    # so the largest rank (one with neighbours on all sides) holds and sends the same bytes
    small, big = (_plan_json("-n", str(n), "--input-shape", f"1,{s},{s},{s}") for n, s in ((64, 512), (4096, 2048)))
    assert small["grid"] == [4, 4, 4] and big["grid"] == [16, 16, 16]
    for p in (small, big):
        first = p["layers"][0]
        assert first["tile"] == [8, 128, 128, 128] and first["chunk"] == [1, 130, 130, 130]
        # the first conv's ghost voxels: the 130^3 chunk less the 128^3 tile, 4-byte numbers
        assert first["halo_fwd_max"] == 4 * (130**3 - 128**3)
    assert small["memory"]["rank"] == big["memory"]["rank"]
    assert small["totals"]["halo_fwd_max"] == big["totals"]["halo_fwd_max"]
    # one process on a 128^3 volume holds the activations such a rank holds (its 'same' convs'
    # zero padding takes the chunk the halo fills on the grid); the rank keeps its chunks'
    # gradients besides, for the halo's adjoint
    one, rank = _plan_json("-n", "1", "--input-shape", "1,128,128,128")["memory"]["rank"], small["memory"]["rank"]
    assert {k: v for k, v in one.items() if k not in ("workspace", "total")} == \
        {k: v for k, v in rank.items() if k not in ("workspace", "total")}
    assert one["workspace"] < rank["workspace"]


def test_input_shape_says_it_takes_volumes():
    r = CliRunner().invoke(plan_cmd, ["benchmarks/experiments/unet3d_bench_dist.yaml", "--input-shape", "1,0,8,8"])
    assert r.exit_code == 2 and "expected C,H,W or C,D,H,W of positive sizes" in r.output
    r = CliRunner().invoke(plan_cmd, ["--help"])
    assert "C,[D,]H,W" in r.output and "[PZx]PYxPX" in r.output
