"""`distnet plan`'s machine: a machine file's rates per layer kind, cores and MPI memory give
the documented step time and memory (compute at the kind's rate, stretched by ranks / cores
where ranks outnumber cores), --save-machine writes what --machine reads, bad files fail in
one line; the calibration fills a machine with this machine's rates (plumbing only: no timing
is asserted)."""
import json

import pytest
from click.testing import CliRunner

from distnet.cli.plan import plan as plan_cmd
from distnet.config import load_experiment
from distnet.errors import ConfigError
from distnet.plan import Machine, plan_model
from distnet.plan.calibrate import calibration_shape, measure
from distnet.plan.memory import memory_totals

UNET = "benchmarks/experiments/unet2d_bench.yaml"
RATES = {"ConvLayer": 40e9, "DeconvLayer": 20e9, "BatchNormLayer": 1e9, "MaxPoolingLayer": 5e9,
         "UpsampleLayer": 2e9, "ConcatLayer": 4e9, "cost": 0.5e9}


def _plan(machine, n=1, exp=UNET, shape=(3, 256, 256)):
    return plan_model(load_experiment(exp).model, shape, n, batch=1, machine=machine)


def test_rates_per_kind_give_each_layer_its_time():
    machine = Machine(rates=RATES, cores=2, runtime_bytes=16 << 20)
    plan = _plan(machine)
    for lp in plan.layers:
        rate = RATES[lp.kind]
        want = lp.flops_max / rate if lp.flops_max else lp.mem_bytes_max / rate
        if lp is plan.layers[-1]:          # the cost and update, per byte of the last output
            want += 4 * 4 * 256 * 256 / RATES["cost"]
        assert sum(lp.time.values()) == pytest.approx(want)
    assert plan.totals()["time"]["step"] == pytest.approx(sum(sum(lp.time.values()) for lp in plan.layers))
    assert memory_totals(plan)["rank"]["runtime"] == 16 << 20
    # kinds without a rate keep the default ones
    default = _plan(Machine())
    assert all(lp.time["compute"] == pytest.approx(lp.flops_max / 50e9) for lp in default.layers)


def test_ranks_beyond_the_cores_stretch_compute_and_memory_time():
    one = _plan(Machine(rates=RATES, cores=2, ranks_per_node=2), n=4,
                exp="benchmarks/experiments/unet2d_bench_dist.yaml")
    shared = _plan(Machine(rates=RATES, cores=2), n=4, exp="benchmarks/experiments/unet2d_bench_dist.yaml")
    for a, b in zip(one.layers, shared.layers):      # 4 ranks on a node of 2 cores: twice as long
        assert b.time["compute"] == pytest.approx(2 * a.time["compute"])
        assert b.time["memory"] == pytest.approx(2 * a.time["memory"])
    assert Machine(cores=8).oversubscription(4) == 1 and Machine().oversubscription(64) == 1


def test_a_machine_file_round_trips_and_options_override_it(tmp_path):
    path = tmp_path / "machine.json"
    r = CliRunner().invoke(plan_cmd, [UNET, "--input-shape", "3,256,256", "--batch", "1", "--flops", "2e10",
                                      "--save-machine", str(path)])
    assert r.exit_code == 0, r.output
    saved = json.loads(path.read_text())
    assert saved["flop_rate"] == 2e10 and saved["rates"] == {} and saved["ranks_per_node"] is None
    saved.update(rates=RATES, cores=2)
    path.write_text(json.dumps(saved))
    r = CliRunner().invoke(plan_cmd, [UNET, "--input-shape", "3,256,256", "--batch", "1", "--json",
                                      "--machine", str(path), "--beta", "1e9"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["machine"]["rates"] == RATES and got["machine"]["beta"] == 1e9
    want = _plan(Machine(**dict(saved, beta=1e9, ranks_per_node=1))).totals()["time"]["step"]
    assert got["totals"]["time"]["step"] == pytest.approx(want)


@pytest.mark.parametrize("text,message", [
    ('{"flop_rate": 1e9, "bogus": 1}', "unknown machine keys ['bogus']"),
    ('{"cores": 0}', "cores must be an integer > 0 or null, got 0"),
    ('{"rates": {"ConvLayer": -1}}', "rates must be an object of numbers > 0"),
    ("nope", "not a machine file")])
def test_a_bad_machine_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="m.json: " + message.replace("[", r"\[").replace("]", r"\]")):
        Machine.load(path)
    r = CliRunner().invoke(plan_cmd, [UNET, "--input-shape", "3,64,64", "--machine", str(path)])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_the_calibration_measures_every_kind_of_the_net():
    assert calibration_shape((3, 2048, 2048)) == (3, 512, 512) and calibration_shape((1, 96, 96, 96)) == (1, 48, 48, 48)
    assert calibration_shape((3, 64, 64)) == (3, 64, 64)
    machine = measure(load_experiment(UNET), (3, 64, 64))
    assert set(machine.rates) == set(RATES) and all(v > 0 for v in machine.rates.values())
    assert machine.cores >= 1 and machine.runtime_bytes >= 0
