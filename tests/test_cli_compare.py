"""distnet compare end to end: one error before running for a rank count that does not fit,
GB pretraining costs in metrics.jsonl and in the table, --reference-set on side A only, and the
float64 rerun after a float32 DIFFER."""
import json

import pytest

from tests import tiny
from tests.test_cli import distnet


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    data = tiny.write_data(d / "d.h5")
    out = {}
    for name, template, dist in (("cnn", tiny.CNN, False), ("cnn_dist", tiny.CNN, True),
                                 ("gb", tiny.GB, False), ("gb_dist", tiny.GB, True)):
        out[name] = d / f"{name}.yaml"
        out[name].write_text(tiny.experiment(template, data, dist))
    return d, {k: str(v) for k, v in out.items()}


def test_a_rank_count_that_does_not_fit_is_one_error_before_any_run(files):
    d, f = files
    proc = distnet("compare", f["cnn"], f["cnn_dist"], "-n", "200")
    assert proc.returncode == 1 and proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(f"distnet: error: {f['cnn_dist']} on -n 200: ")


def test_compare_under_mpiexec_is_one_line_on_every_rank(files, tmp_path):
    """compare starts its own runs (mpiexec -n N for the distributed one): under mpiexec every
    rank ran both, and the one-process run died in MPI_Init with an MPI error stack."""
    d, f = files
    proc = distnet("compare", f["cnn"], f["cnn_dist"], "-n", "2", n=2)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("distnet: error: distnet compare starts its own runs") == 2, proc.stderr
    assert "MPI_Init" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag, value", [("--cost-tol", "-1"), ("--cost-tol", "nan"), ("--cost-atol", "-0.1"),
                                         ("--rate-tol", "-5"), ("--rate-tol", "inf")])
def test_a_negative_or_non_finite_tolerance_is_refused_before_any_run(files, flag, value):
    """A nan tolerance made every comparison AGREE, a negative one every comparison DIFFER."""
    from click.testing import CliRunner
    from distnet.cli.main import main
    d, f = files
    r = CliRunner().invoke(main, ["compare", f["cnn"], f["cnn_dist"], "-n", "2", flag, value])
    assert r.exit_code == 2 and flag in r.output and "AGREE" not in r.output and "DIFFER" not in r.output, r.output


def test_gb_pretraining_costs_in_metrics_and_in_the_table(files, tmp_path):
    d, f = files
    distnet("run", f["gb"], "--run-dir", str(tmp_path / "r"), "--set", "model.num_epochs=2", check=True)
    recs = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert recs[0]["pretrain"] == "lf" and recs[0]["pretrain_epoch"] == 0
    assert recs[0]["cost"] == pytest.approx(recs[0]["reconstruction"] + recs[0]["sparsity"])
    assert [r.get("epoch") for r in recs[1:]] == [0, 1, None]
    proc = distnet("compare", f["gb"], f["gb_dist"], "-n", "2", "--set", "model.num_epochs=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout.split("\n\n")[1].splitlines()
    assert table[1].startswith("pretrain lf epoch 0 cost") and table[2].startswith("epoch 0 cost")
    assert "(tolerance 1e-09)" in proc.stdout and "-> AGREE" in proc.stdout   # float64 defaults


def test_reference_set_applies_to_a_only_and_float32_differ_reruns_in_float64(files):
    d, f = files
    # A drawn from another seed: the runs differ, in float32 and in the float64 rerun
    proc = distnet("compare", f["cnn"], f["cnn_dist"], "-n", "2", "--set", "backend.dtype=float32",
                   "--reference-set", "backend.rng_seed=1")
    assert proc.returncode == 1 and "-> DIFFER" in proc.stdout
    assert "(tolerance 0.05 + 0.01 absolute per epoch; at most " in proc.stdout
    lines = proc.stdout.rstrip().splitlines()
    assert lines.index("== float64 rerun") == lines.index(
        f"  distnet compare {f['cnn']} {f['cnn_dist']} -n 2 --set backend.dtype=float64 "
        "--reference-set backend.rng_seed=1") + 2
    assert lines[-1] == "-> the runs differ in float64 too: a real difference, not rounding"
    # --no-rerun: the command only
    proc = distnet("compare", f["cnn"], f["cnn_dist"], "-n", "2", "--set", "backend.dtype=float32",
                   "--reference-set", "backend.rng_seed=1", "--no-rerun")
    assert proc.returncode == 1 and "== float64 rerun" not in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("  distnet compare ")
    # data: 2 on both sides; --reference-set data=1 makes A one process (same numbers)
    proc = distnet("compare", f["cnn"], f["cnn_dist"], "-n", "4", "--set", "data=2",
                   "--reference-set", "data=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[rank 0] distnet: 4 rank(s), grid 1x2, data 2" in proc.stderr


def test_a_float32_difference_that_is_rounding_agrees_in_the_float64_rerun(files):
    """float32 with no tolerance at all: the 2-rank run sums in another order, so the float32
    costs differ in the last bits; the float64 rerun agrees, and that verdict is the exit status."""
    d, f = files
    proc = distnet("compare", f["cnn"], f["cnn_dist"], "-n", "2", "--set", "backend.dtype=float32",
                   "--cost-tol", "0", "--cost-atol", "0")
    lines = proc.stdout.rstrip().splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sum(line.endswith("-> DIFFER") for line in lines) == 1 and "== float64 rerun" in lines
    assert lines[-2].endswith("(tolerance 1e-09), error rate 0.00e+00 points (tolerance 0) -> AGREE")
    assert lines[-1] == "-> the float32 difference is rounding: the float64 runs agree"


def test_a_side_that_fails_is_an_error_not_a_difference(files, tmp_path):
    """A run that failed (NaN pixels in the data of the distributed side) printed 'distnet: error:
    X failed' on stdout among the table's lines, the same exit as runs that differ."""
    d, f = files
    nan = tiny.write_data(tmp_path / "nan.h5", nan_at=3)
    bad = tmp_path / "bad_dist.yaml"
    bad.write_text(tiny.experiment(tiny.CNN, nan, True))
    proc = distnet("compare", f["cnn"], str(bad), "-n", "2")
    assert proc.returncode == 1 and "AGREE" not in proc.stdout and "DIFFER" not in proc.stdout
    assert "error" not in proc.stdout, proc.stdout
    assert f"distnet: error: {bad} failed on 2 ranks (exit status 1): nothing to compare" in proc.stderr
    assert "non-finite" in proc.stderr or "NaN" in proc.stderr      # the run's own reason, above


def test_the_final_record_says_how_many_images_each_rate_counts(files, tmp_path):
    """What one image is worth in each error rate (compare's per-image tolerance reads it)."""
    d, f = files
    proc = distnet("run", f["cnn_dist"], "--no-run-dir", "--no-checkpoint", "--no-progress",
                   "--metrics", str(tmp_path / "m.jsonl"))
    assert proc.returncode == 0, proc.stderr
    final = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])
    assert final["final"] and final["split_images"] == {"train": 30, "test": 10}
