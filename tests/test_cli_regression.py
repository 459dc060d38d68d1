"""Float targets per volume (regression): ``distnet data convert --targets`` writes them, checked
row by row (one line naming the CSV and its line otherwise); ``MeanSquared`` / ``SumSquared`` on
them, and a cost that does not fit the data's kind, one line at the cost on every rank; predict
writes the values of every target (one process and a 2x2x2 grid alike), plot draws the errors."""
import json
import sys

import h5py
import numpy as np
import pytest

from distnet.convert import convert
from distnet.datasets import HDF5Dataset
from distnet.errors import DataError, OptionError
from distnet.experiments.rundir import read_metrics_file
from tests.test_cli import ROOT, distnet
from tests.test_cli_files import one_line_error

HEADER = "name,omega_m,sigma_8"


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    """A folder of 6 volumes ``(1, 16, 16, 16)`` and their targets (a row per file)."""
    d = tmp_path_factory.mktemp("targets")
    (d / "v").mkdir()
    rng = np.random.RandomState(0)
    for i in range(6):
        np.save(d / "v" / f"b{i}.npy", rng.standard_normal((16, 16, 16)).astype(np.float32))
    rows = [f"b{i}{'.npy' if i % 2 else ''},{0.1 * i},{1 - 0.1 * i}" for i in range(6)]   # with or without .npy
    return d, rows


def _csv(folder, name, lines):
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_targets_are_stored_as_float32_rows_with_their_names(volumes, tmp_path):
    d, rows = volumes
    out = tmp_path / "t.h5"
    info = convert(d / "v", out, targets=_csv(tmp_path, "t.csv", [HEADER] + rows[::-1]), test_fraction=0.34)
    assert info["targets"] and info["classes"] == ["omega_m", "sigma_8"]
    with h5py.File(out, "r") as f:
        got = {s: f[f"{s}/y"][()] for s in ("train", "test")}
        assert list(f.attrs["target_names"]) == ["omega_m", "sigma_8"] and "nclasses" not in f.attrs
        # each volume's row: the volume b<i> holds the draw of file i, its targets 0.1 i and 1 - 0.1 i
        for s, y in got.items():
            assert y.dtype == np.float32 and y.shape[1] == 2
            for x, t in zip(f[f"{s}/x"][()], y):
                i = next(k for k in range(6) if np.array_equal(x[0], np.load(d / "v" / f"b{k}.npy")))
                np.testing.assert_array_equal(t, np.float32([0.1 * i, 1 - 0.1 * i]))
    ds = HDF5Dataset(path=str(out))
    assert ds.regression and ds.nclasses == 2 and ds.class_names() == ["omega_m", "sigma_8"]
    proc = distnet("data", "info", str(out))
    assert proc.returncode == 0 and "2 float targets per sample (regression)" in proc.stdout, proc.stderr


@pytest.mark.parametrize("edit, words", [
    (lambda rows: [HEADER] + rows[1:], "t.csv has no row for 1 volume(s) of"),
    (lambda rows: [HEADER] + rows + ["b9,1,2"], "t.csv:8: b9 names no volume of"),
    (lambda rows: [HEADER] + rows[:2] + ["b2,abc,2"] + rows[3:], "t.csv:4: omega_m is 'abc', not a finite number"),
    (lambda rows: [HEADER] + rows[:3] + ["b3.npy,1"] + rows[4:], "t.csv:5: 1 value(s), but the header names 2 targets"),
    (lambda rows: [HEADER] + rows[:1] + ["b1.npy,1,inf"] + rows[2:], "t.csv:3: sigma_8 is 'inf', not a finite number"),
    (lambda rows: [HEADER] + rows + ["b1,1,2"], "t.csv:8: b1 again (line 3)"),
    (lambda rows: ["name"] + rows, "t.csv:1: the first row names the targets"),
])
def test_bad_rows_are_one_line_naming_the_file_and_line(volumes, tmp_path, edit, words):
    d, rows = volumes
    with pytest.raises(DataError) as e:
        convert(d / "v", tmp_path / "t.h5", targets=_csv(tmp_path, "t.csv", edit(rows)))
    assert words in str(e.value)
    assert not (tmp_path / "t.h5").exists()


def test_targets_take_a_folder_of_volumes_and_no_masks(volumes, tmp_path):
    d, rows = volumes
    csv = _csv(tmp_path, "t.csv", [HEADER] + rows)
    with pytest.raises(OptionError, match="--masks: not options of a conversion with --targets"):
        convert(d / "v", tmp_path / "t.h5", targets=csv, masks=d / "v")
    np.save(tmp_path / "a.npy", np.zeros((6, 1, 4, 4), np.float32))
    with pytest.raises(OptionError, match="is not a folder of volumes"):
        convert(tmp_path / "a.npy", tmp_path / "t.h5", targets=csv)


def _experiment(tmp_path, cost, data, name="cosmoflow.yaml"):
    text = (ROOT / "experiments" / name).read_text()
    text = text.replace("datasets/cosmo_demo.h5", str(data)).replace("MeanSquared {}", cost)
    path = tmp_path / ("exp.yaml" if name == "cosmoflow.yaml" else name)
    path.write_text(text)
    return path


def test_a_cost_that_does_not_fit_the_data_is_one_line(volumes, tmp_path):
    d, rows = volumes
    data = tmp_path / "t.h5"
    convert(d / "v", data, targets=_csv(tmp_path, "t.csv", [HEADER] + rows), test_fraction=0.34)
    proc = distnet("run", str(_experiment(tmp_path, "SoftmaxCrossEntropy {}", data)), "--no-run-dir", n=2,
                   cwd=tmp_path)
    errors = [line for line in proc.stderr.splitlines() if "distnet: error" in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 2, proc.stderr   # every rank
    assert all("exp.yaml:23: the data set gives float targets per sample, but the cost SoftmaxCrossEntropy "
               "scores class labels; use MeanSquared or SumSquared" in line for line in errors), proc.stderr
    classes = tmp_path / "c.h5"
    with h5py.File(classes, "w") as f:
        for s in ("train", "test"):
            f[f"{s}/x"] = np.zeros((4, 1, 8, 8, 8), np.float32)
            f[f"{s}/y"] = np.arange(4) % 2
    proc = distnet("check", str(_experiment(tmp_path, "SumSquared {}", classes)), cwd=tmp_path)
    one_line_error(proc, "the cost SumSquared regresses float targets per sample, but the data set gives class "
                         "labels per image", code=2)


@pytest.fixture(scope="module")
def trained(volumes, tmp_path_factory):
    """``(folder, experiment, run directory)``: one float64 epoch of cosmoflow.yaml on the volumes."""
    d, rows = volumes
    tmp = tmp_path_factory.mktemp("trained")
    data = tmp / "t.h5"
    convert(d / "v", data, targets=_csv(tmp, "t.csv", [HEADER] + rows), test_fraction=0.34)
    exp = _experiment(tmp, "MeanSquared {}", data)
    proc = distnet("run", str(exp), "--set", "model.num_epochs=1", "--set", "model.batch_size=2", *FLOAT64,
                   cwd=tmp, check=True)
    return tmp, exp, tmp / (proc.stdout + proc.stderr).split("run directory: ")[-1].split()[0]


FLOAT64 = ("--set", "backend.dtype=float64")


def test_a_regression_run_records_and_evaluates_its_errors(trained):
    tmp_path, exp, run = trained
    epochs, final = read_metrics_file(run / "metrics.jsonl")
    assert epochs[0]["test_mse"] == final["test_mse"] and len(final["test_target_mae"]) == 2
    assert final["test_mse"] == pytest.approx(np.mean(final["test_target_mse"]), rel=1e-12)
    proc = distnet("evaluate", str(exp), "--checkpoint", str(run / "checkpoint.h5"), *FLOAT64, cwd=tmp_path,
                   check=True)
    assert f"test set mean squared error {final['test_mse']:.6g}" in proc.stdout and "omega_m" in proc.stdout
    assert "misclass" not in proc.stdout
    out = json.loads(distnet("evaluate", str(exp), "--checkpoint", str(run / "checkpoint.h5"), "--json", *FLOAT64,
                             cwd=tmp_path, check=True).stdout)
    assert out["target_names"] == ["omega_m", "sigma_8"] and "class_names" not in out
    assert out["splits"]["test"]["mse"] == pytest.approx(final["test_mse"], rel=1e-12)


def _values(path):
    """``(header, files, values (N, T))`` of a predictions CSV."""
    lines = path.read_text().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    return lines[0], [r[0] for r in rows], np.array([[float(v) for v in r[1:]] for r in rows])


def test_predict_writes_the_value_of_every_target_on_one_process_and_a_grid(volumes, trained):
    from click.testing import CliRunner

    from distnet import api
    from distnet.cli.main import main
    from distnet.config import load_experiment
    d, _ = volumes
    tmp, exp, run = trained
    dist = _experiment(tmp, "MeanSquared {}", tmp / "t.h5", "cosmoflow_dist.yaml")
    for out in ("one.csv", "one.h5"):
        r = CliRunner().invoke(main, ["predict", str(exp), "--checkpoint", str(run), "--data", str(d / "v"),
                                      "-o", str(tmp / out), *FLOAT64])
        assert r.exit_code == 0 and f"{out}: 6 samples, 2 targets" in r.output, r.output
    proc = distnet("predict", str(dist), "--checkpoint", str(run), "--data", str(d / "v"), "-o", str(tmp / "eight.csv"),
                   *FLOAT64, n=8, cwd=tmp, check=True)
    assert "predicted on 8 rank(s), grid 2x2x2" in proc.stdout, proc.stdout
    head, files, values = _values(tmp / "one.csv")
    assert head == "file,omega_m,sigma_8" and files == [f"b{i}.npy" for i in range(6)]
    head8, files8, values8 = _values(tmp / "eight.csv")
    assert (head8, files8) == (head, files)
    # the first fully connected layer adds its 8 tiles' products in another order: the last bits
    np.testing.assert_allclose(values8, values, rtol=1e-13, atol=0)
    with h5py.File(tmp / "one.h5", "r") as f:
        np.testing.assert_array_equal(f["values"][()], values)       # the CSV's digits round-trip
        assert list(f["values"].attrs["target_names"]) == ["omega_m", "sigma_8"] and "labels" not in f
    by_hand = load_experiment(str(exp), overrides=["backend.dtype=float64"])
    by_hand.setup()
    by_hand.restore(str(run / "checkpoint.h5"))
    x = np.stack([np.load(d / "v" / f)[None] for f in files]).astype(np.float64)
    # (another BLAS thread count in this process may round a last bit otherwise)
    np.testing.assert_allclose(by_hand.model.predict(x), values, rtol=1e-13, atol=0)
    got = api.load(run).predict(d / "v")
    np.testing.assert_allclose(got.values, values, rtol=1e-13, atol=0)
    assert got.target_names == ["omega_m", "sigma_8"] and list(got.rows()[0]) == ["file", "omega_m", "sigma_8"]
    assert [row["sigma_8"] for row in got.rows()] == got.values[:, 1].tolist()
    with pytest.raises(ValueError, match="values per target"):
        got.classes


def test_plot_draws_the_errors_of_a_regression(trained):
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import draw_runs
    from distnet.experiments.rundir import read_run
    tmp, _, run = trained
    cost_ax, err_ax = draw_runs([read_run(str(run))]).axes
    labels = [line.get_label() for line in err_ax.get_lines()]
    assert "regression error" in err_ax.get_title() and "misclassification" not in err_ax.get_title()
    for want in ("test mean squared error", "train mean absolute error", "test mean squared error (final)"):
        assert any(label.endswith(want) for label in labels), labels
    _, final = read_metrics_file(run / "metrics.jsonl")
    final_mse = [line.get_ydata()[0] for line in err_ax.get_lines() if line.get_label().endswith("error (final)")]
    assert final_mse == [final["test_mse"], final["train_mse"]]
    proc = distnet("plot", str(run), "-o", str(tmp / "plot.png"), cwd=tmp, check=True)
    assert (tmp / "plot.png").read_bytes()[:4] == b"\x89PNG", proc.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
