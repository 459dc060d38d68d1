"""distnet compare's verdict: costs within atol + rtol*|a| per epoch, rates within points."""
import pytest

from distnet.cli.compare import allowance_used, compare_runs, costs_agree


def test_costs_agree_uses_absolute_plus_relative_tolerance():
    a = ([1.0, 0.05], {"test_misclass": 2.6})
    b = ([1.0001, 0.052], {"test_misclass": 2.8})
    rows, max_cost, max_rate = compare_runs(a, b)
    assert abs(max_cost - 0.04) < 1e-12 and abs(max_rate - 0.2) < 1e-12
    assert not costs_agree(rows, rtol=0.01, atol=0.0)      # 4% relative on the small cost
    assert costs_agree(rows, rtol=0.01, atol=0.002)        # 0.002 <= 0.002 + 0.0005
    assert not costs_agree(rows, rtol=0.0, atol=0.0001)
    # epoch 1 is the closest: 0.002 of 0.002 + 0.01 * 0.05 = 0.0025 allowed
    assert allowance_used(rows, rtol=0.01, atol=0.002) == pytest.approx(0.8)
    assert allowance_used(rows, rtol=0.0, atol=0.0) == float("inf")
    assert allowance_used(compare_runs(a, a)[0], rtol=0.0, atol=0.0) == 0.0
    nan = compare_runs(([1.0, float("nan")], {}), ([1.0, 0.5], {}))[0]
    assert allowance_used(nan, rtol=0.05, atol=0.01) == float("inf") and not costs_agree(nan, 0.05, 0.01)


def test_regression_errors_are_held_to_the_cost_tolerance():
    a = ([1.0], {"test_mse": 0.5, "test_mae": 0.25})
    rows, _, max_rate = compare_runs(a, ([1.0], {"test_mse": 0.5 + 1e-12, "test_mae": 0.25}))
    assert [r[0] for r in rows] == ["epoch 0 cost", "test mse", "test mae"] and max_rate == 0.0
    assert costs_agree(rows, rtol=1e-9, atol=0.0) and not costs_agree(rows, rtol=1e-13, atol=0.0)
    assert not costs_agree(compare_runs(a, ([1.0], {"test_mse": 0.5}))[0], rtol=1.0, atol=1.0)   # MAE missing


def test_missing_epochs_never_agree():
    rows, _, _ = compare_runs(([1.0, 0.5], {}), ([1.0], {}))
    assert not costs_agree(rows, rtol=1.0, atol=1.0)


# -- pretraining rows, checks before running, tolerances by dtype, the float64 rerun ----------

from distnet.cli.compare import TOLERANCES, check_runs, read_metrics, rerun_command  # noqa: E402
from distnet.errors import TopologyError  # noqa: E402
from tests import tiny  # noqa: E402


def test_pretraining_costs_are_rows_of_the_table(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"pretrain": "lf", "pretrain_epoch": 0, "cost": 2.0, "reconstruction": 1.5, "sparsity": 0.5}\n'
                    '{"epoch": 0, "cost": 1.0, "seconds": 1}\n{"final": true, "test_misclass": 5.0}\n')
    a = read_metrics(path)
    assert a[0] == [1.0] and a[1]["test_misclass"] == 5.0 and a[2][0]["pretrain"] == "lf"
    b = ([1.0], {"test_misclass": 5.0}, [dict(a[2][0], cost=2.2)])
    rows, max_cost, _ = compare_runs(a, b)
    assert rows[0][0] == "pretrain lf epoch 0 cost" and abs(max_cost - 0.1) < 1e-12
    assert not costs_agree(rows, rtol=0.05, atol=0.0) and costs_agree(rows, rtol=0.11, atol=0.0)
    rows, _, _ = compare_runs(a, ([1.0], {}, []))            # missing on one side: never agrees
    assert not costs_agree(rows, rtol=1.0, atol=1.0)


@pytest.fixture
def files(tmp_path):
    data = tiny.write_data(tmp_path / "d.h5")
    paths = {}
    for name, text in (("a", tiny.experiment(tiny.CNN, data)), ("b", tiny.experiment(tiny.CNN, data, dist=True))):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    return {k: str(v) for k, v in paths.items()}


def test_check_runs_refuses_a_rank_count_before_running(files):
    assert check_runs(files["a"], files["b"], 4) == "float64"     # tiny is Numpy64
    assert check_runs(files["a"], files["b"], 4, ["backend.dtype=float32"]) == "float32"
    with pytest.raises(TopologyError, match=r"b.yaml on -n 200: .*Rank counts that work"):
        check_runs(files["a"], files["b"], 200)
    with pytest.raises(TopologyError, match=r"a.yaml cannot run on one process: .*--reference-set data=1"):
        check_runs(files["a"], files["b"], 4, ["data=2"])
    # --reference-set applies to A only: B keeps data=2 and runs on 2 x 2 ranks
    assert check_runs(files["a"], files["b"], 4, ["data=2"], ["data=1"]) == "float64"


def test_default_tolerances_are_bin_main_s():
    main = open(tiny.__file__.replace("tests/tiny.py", "bin/main")).read()
    assert "--cost-tol 0.05 --cost-atol 0.01 --rate-tol 0.5" in main and "--cost-tol 1e-9 --rate-tol 0" in main
    assert TOLERANCES["float32"] == {"cost_tol": 0.05, "cost_atol": 0.01, "rate_tol": 0.5, "rate_images": 1}
    assert TOLERANCES["float64"] == {"cost_tol": 1e-9, "cost_atol": 0.0, "rate_tol": 0.0, "rate_images": 0}


def test_one_image_of_a_small_split_is_within_the_float32_rate_tolerance():
    """One image of a 180-image split is 0.556 points, more than the 0.5 points a float32
    comparison allowed: exact runs (float64 proves it) were called DIFFER."""
    from distnet.cli.compare import rates_agree
    tol = TOLERANCES["float32"]
    a = {"test_misclass": 100 * 20 / 180, "train_misclass": 10.0, "split_images": {"test": 180, "train": 1000}}
    one = dict(a, test_misclass=100 * 21 / 180)
    two = dict(a, test_misclass=100 * 22 / 180)
    assert rates_agree(a, one, tol["rate_tol"], tol["rate_images"]) == (True, {"train": 0.5, "test": 100 / 180})
    assert not rates_agree(a, two, tol["rate_tol"], tol["rate_images"])[0]
    assert not rates_agree(a, one, tol["rate_tol"], 0)[0]                 # points only, as before
    assert rates_agree(a, dict(a, train_misclass=10.4), tol["rate_tol"], tol["rate_images"])[0]  # 0.5 points
    assert not rates_agree(a, dict(a, train_misclass=10.6), tol["rate_tol"], tol["rate_images"])[0]
    assert not rates_agree(a, one, 0.0, 0)[0] and rates_agree(a, dict(a), 0.0, 0)[0]   # float64
    assert not rates_agree(a, {k: v for k, v in a.items() if k != "test_misclass"}, 1.0, 1)[0]


def test_rerun_command_replaces_the_dtype():
    cmd = rerun_command("a.yaml", "my dist.yaml", 4, ["backend.dtype=float32", "model.num_epochs=3"],
                        ["pipe=1"], ["backend.dtype=float64"])
    assert cmd == ("distnet compare a.yaml 'my dist.yaml' -n 4 --set model.num_epochs=3 "
                   "--set backend.dtype=float64 --reference-set pipe=1")


def test_the_best_epochs_are_rows_beside_the_verdict():
    best = {"epoch": 5, "metric": "valid_misclass", "value": 0.0, "rates": {"valid": 0.0, "test": 12.5}}
    a = ([1.0, 0.5], {"test_misclass": 1.0, "best_epoch": best})
    b = ([1.0, 0.5], {"test_misclass": 1.0, "best_epoch": dict(best, epoch=6)})
    rows, max_cost, max_rate = compare_runs(a, b)
    assert rows[-3:] == [("best epoch (valid_misclass)", 5, 6, 1, None),
                         ("best epoch valid misclass %", 0.0, 0.0, 0.0, None),
                         ("best epoch test misclass %", 12.5, 12.5, 0.0, None)]
    assert max_rate == 0.0 and costs_agree(rows, 1e-9, 0)     # shown, not judged
    assert compare_runs(([1.0], {}), ([1.0], {}))[0] == [("epoch 0 cost", 1.0, 1.0, 0.0, 0.0)]
