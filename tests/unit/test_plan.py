"""distnet.plan (the cost model) and the `distnet plan` command: halo bytes equal those of the
halo plans GlobalArray carries out (every rank, grids up to 9 ranks, padding, strides, LCN), the
FC / conv Allreduce payloads, the alpha-beta time model, and the command's output. The figures
are checked against a real multi-rank run in tests/mpi/test_halo_bytes.py."""
import json

import pytest
from click.testing import CliRunner

from distnet.cli.plan import plan as plan_cmd
from distnet.comm import valid_grids
from distnet.config import load_experiment
from distnet.geometry import grid_coords, plan_halo
from distnet.layers.lcn import LCNLayer
from distnet.layers.spatial import WindowLayer
from distnet.plan import Machine, format_plan, plan_model

MODELS = {"mnist_cnn": ("experiments/mnist_cnn_dist.yaml", (1, 28, 28)),
          "mnist_gb": ("experiments/mnist_gb_dist.yaml", (1, 28, 28)),
          "bigimage": ("benchmarks/experiments/bigimage_dist.yaml", (3, 256, 256))}


def model_of(name):
    return load_experiment(MODELS[name][0]).model


def geometry_bytes(model, grid, B, isz=4):
    """Per-rank halo bytes from the HaloPlans themselves: (fwd sent, bwd sent) lists."""
    fwd, bwd = [], []
    for coords in grid_coords(grid):
        f = b = 0
        for i, layer in enumerate(model.layers):
            if not isinstance(layer, WindowLayer):
                continue
            hp = plan_halo(layer.in_shape[1:], *layer.windows, grid, coords)
            n = 2 if isinstance(layer, LCNLayer) else 1
            per = B * layer.in_shape[0] * isz
            f += n * per * sum(t.box.size for t in hp.sends)
            if i > 0:
                b += n * per * sum(t.box.size for t in hp.recvs)
        fwd.append(f)
        bwd.append(b)
    return fwd, bwd


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("n", range(1, 10))
def test_halo_bytes_equal_the_halo_plans(name, n):
    model = model_of(name)
    model.infer_shapes(MODELS[name][1])
    for grid in valid_grids(n, model.planes())[:2]:
        p = plan_model(model_of(name), MODELS[name][1], n, grid=grid, batch=7)
        t = p.totals()
        fwd, bwd = geometry_bytes(model, grid, 7)
        assert (t["halo_fwd_total"], t["halo_bwd_total"]) == (sum(fwd), sum(bwd))
        assert (t["halo_fwd_max"], t["halo_bwd_max"]) == (max(fwd), max(bwd))
        if n == 1:
            assert t["halo_fwd_total"] == t["allreduce_grad"] == t["allreduce_act"] == 0


def test_allreduce_payloads_and_flops():
    p = plan_model(model_of("bigimage"), (3, 256, 256), 4, batch=16)
    t = p.totals()
    assert p.grid == (2, 2)
    conv = [lp for lp in p.layers if lp.kind == "ConvLayerDist"]
    assert t["allreduce_grad"] == 4 * sum(32 * 3 * 9 if i == 0 else (32 if i == 1 else 64) * 32 * 9
                                          for i in range(3))
    assert t["allreduce_act"] == 16 * 10 * 4              # the FC partial pre-activations
    assert conv[0].flops_max == 2 * 2.0 * 16 * 32 * 3 * 9 * 128 * 128   # no input gradient
    assert conv[1].flops_max == 3 * 2.0 * 16 * 32 * 32 * 9 * 128 * 128
    assert conv[0].tile == (32, 128, 128) and conv[0].chunk == (3, 130, 130)
    single = plan_model(model_of("bigimage"), (3, 256, 256), 1, batch=16).totals()
    assert single["flops_max"] == pytest.approx(4 * t["flops_max"], rel=0.01)
    assert single["act_bytes_max"] > 3.5 * t["act_bytes_max"]


def test_time_model_uses_the_constants():
    m = model_of("mnist_gb")
    slow = plan_model(m, (1, 28, 28), 4, batch=100, machine=Machine(alpha=1e-3, beta=1e6)).totals()
    fast = plan_model(model_of("mnist_gb"), (1, 28, 28), 4, batch=100).totals()
    assert slow["time"]["halo"] > 100 * fast["time"]["halo"] > 0
    assert slow["time"]["compute"] == fast["time"]["compute"]


def test_thousands_of_ranks_are_cheap():
    p = plan_model(model_of("bigimage"), (3, 256, 256), 4096, batch=16)
    assert p.grid == (64, 64)
    assert p.layers[0].tile == (32, 4, 4)
    assert "predicted step" in format_plan(p)


def test_cli_plan_text_and_json():
    r = CliRunner().invoke(plan_cmd, ["experiments/mnist_gb_dist.yaml", "-n", "4"])
    assert r.exit_code == 0, r.output
    assert "grid 2x2" in r.output and "lcn1" in r.output and "predicted step" in r.output
    r = CliRunner().invoke(plan_cmd, ["benchmarks/experiments/bigimage_dist.yaml", "-n", "6",
                                      "--input-shape", "3,256,256", "--json", "--alpha", "1e-5"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["grid"] == [2, 3] and d["machine"]["alpha"] == 1e-5 and d["totals"]["halo_fwd_max"] > 0


def test_cli_plan_errors():
    # plan is show's other name: a rank count the images cannot take is not an error in the
    # experiment file (exit 1, as `distnet show`; exit 2 is kept for the file's own errors)
    r = CliRunner().invoke(plan_cmd, ["experiments/mnist_cnn_dist.yaml", "-n", "4096"])
    assert r.exit_code == 1 and "Rank counts that work" in r.output
    r = CliRunner().invoke(plan_cmd, ["benchmarks/experiments/bigimage_dist.yaml", "-n", "2"])
    assert r.exit_code != 0 and "--input-shape" in r.output


@pytest.mark.parametrize("path, state", [("experiments/mnist_gb.yaml", ()),
                                         ("experiments/mnist_cnn.yaml", ("velocity",)),
                                         ("experiments/mnist_cnn_bn_adam.yaml", ("m", "v"))])
def test_parameter_memory_counts_the_optimisers_state(path, state):
    # plain SGD keeps value + gradient, momentum a velocity too, Adam two moments
    exp = load_experiment(path)
    assert exp.model.optimizer_state_names() == state
    shape = exp.dataset.image_shape
    totals = {n: plan_model(load_experiment(path).model, shape, 1, state_arrays=n).totals()["param_bytes"]
              for n in (0, len(state))}
    assert totals[len(state)] * 2 == totals[0] * (2 + len(state))
    r = CliRunner().invoke(plan_cmd, [path])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("parameters:"))
    assert f"x{2 + len(state)} counting gradients" in line and all(n in line for n in state)
    assert f"parameters {totals[len(state)] / 2**20:.1f} MiB" in r.output
