"""``distnet run``'s checkpoint policy from the command line: {epoch} paths, keep_last, the best
checkpoint, early stopping, the run record; a run interrupted and resumed makes the decisions of
the uninterrupted run (same best epoch, same files, same stop); the test split is refused for
selection unless asked."""
import json

import h5py
import numpy as np
import pytest

from tests.test_cli import distnet
from tests.tiny import CNN, experiment, write_data

POLICY = ("checkpoint: {every: 1, keep_last: 2, keep_best: true, monitor: valid_misclass, patience: 2, "
          "min_delta: 0.5},")


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    text = experiment(CNN, write_data(d / "data.h5", n_train=40, n_test=12, seed=4))
    text = text.replace("HDF5Dataset {", "HDF5Dataset {valid_fraction: 0.25, ").replace("num_epochs: 4", "num_epochs: 12")
    path = d / "policy.yaml"
    path.write_text(text.replace("FitPredictErrorExperiment {", "FitPredictErrorExperiment { eval_every: 1, top_k: 2, "
                                 + POLICY, 1))
    return d, path


def _records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _decisions(recs):
    keys = ("epoch", "best", "since_best", "stop", "valid_cost", "valid_confusion")
    return [{k: r.get(k) for k in keys} for r in recs if "epoch" in r]


def _names(paths):
    return [p.rsplit("/", 1)[-1] for p in paths]


def test_resumed_run_decides_as_the_uninterrupted_one(exp):
    d, path = exp
    for sub in ("whole", "cut"):
        (d / sub).mkdir()
    distnet("run", str(path), "--run-dir", str(d / "r_whole"), "--checkpoint", str(d / "whole" / "ck_{epoch:02d}.h5"),
            check=True)
    distnet("run", str(path), "--run-dir", str(d / "r_cut1"), "--checkpoint", str(d / "cut" / "ck_{epoch:02d}.h5"),
            "--set", "model.num_epochs=3", check=True)
    assert sorted(p.name for p in (d / "cut").iterdir()) == ["ck_01.h5", "ck_02.h5", "ck_best.h5"]
    proc = distnet("run", str(path), "--run-dir", str(d / "r_cut2"), "--resume", str(d / "r_cut1"),   # its run.json names ck_02.h5
                   "--checkpoint", str(d / "cut" / "ck_{epoch:02d}.h5"), check=True)
    whole, cut = _records(d / "r_whole"), _records(d / "r_cut2")
    assert _decisions(cut) == _decisions(whole)
    final_w, final_c = whole[-1], cut[-1]
    assert final_w["stop"]["reason"] == "early_stopping"   # the run stops before num_epochs (12)
    assert final_w["stop"]["epoch"] < 11 and "stopping early after epoch" in proc.stderr
    assert final_c["stop"] == final_w["stop"] and final_c["best_epoch"] == final_w["best_epoch"]
    assert _names(final_c["checkpoints"]) == _names(final_w["checkpoints"])
    assert sorted(p.name for p in (d / "cut").iterdir()) == sorted(p.name for p in (d / "whole").iterdir()) \
        == sorted(_names(final_w["checkpoints"]))
    assert len(final_w["checkpoints"]) == 3   # the last two and the best
    info = json.loads((d / "r_whole" / "run.json").read_text())
    assert info["stop"] == final_w["stop"] and info["best_epoch"]["epoch"] == final_w["best_epoch"]["epoch"]
    # the best checkpoint holds the best epoch's weights: evaluate gives its recorded metrics
    best = final_w["best_epoch"]
    for sub in ("whole", "cut"):
        out = json.loads(distnet("evaluate", str(path), "--checkpoint", str(d / sub / "ck_best.h5"), "--json",
                                 check=True).stdout)
        assert out["epoch"] == best["epoch"]
        assert out["splits"]["valid"]["confusion"] == whole[best["epoch"]]["valid_confusion"]
        assert out["splits"]["valid"]["misclass"] == best["value"] == best["misclass"]
        assert out["splits"]["valid"]["cost"] == pytest.approx(whole[best["epoch"]]["valid_cost"], rel=1e-12)


def test_selecting_on_the_test_split_is_refused_unless_asked(exp, tmp_path):
    d, path = exp
    proc = distnet("run", str(path), "--no-run-dir", "--no-checkpoint", "--set", "checkpoint.monitor=test_misclass")
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert f"{path}:" in err and "selects on the test split" in err and "select_on_test: true" in err
    proc = distnet("run", str(path), "--no-run-dir", "--no-checkpoint", "--set", "checkpoint.monitor=test_misclass",
                   "--set", "checkpoint.select_on_test=true", "--set", "model.num_epochs=2", check=True)
    assert "best epoch: " in proc.stderr and "(test misclass " in proc.stderr


def test_checkpoint_path_fields(exp, tmp_path):
    d, path = exp
    proc = distnet("run", str(path), "--no-run-dir", "--checkpoint", str(tmp_path / "ck_{step}.h5"))
    assert proc.returncode == 2 and "only {epoch}" in proc.stderr
    proc = distnet("run", str(path), "--no-run-dir", "--checkpoint", str(tmp_path / "plain.h5"))
    assert proc.returncode != 0 and "keep_last needs {epoch} in the checkpoint path" in proc.stderr
    assert not (tmp_path / "plain.h5").exists()


def test_evaluate_on_two_ranks_counts_as_one_process(exp, tmp_path):
    d, path = exp
    run = tmp_path / "r"
    distnet("run", str(path), "--run-dir", str(run), "--checkpoint", str(tmp_path / "ck_{epoch}.h5"),
            "--set", "model.num_epochs=2", check=True)
    dist = tmp_path / "dist.yaml"
    distnet("distribute", str(path), "-o", str(dist), check=True)
    last = f"{run}:last"
    one = json.loads(distnet("evaluate", str(path), "--checkpoint", last, "--json", check=True).stdout)
    two = json.loads(distnet("evaluate", str(dist), "--checkpoint", last, "--json", n=2, check=True).stdout)
    assert one["epoch"] == two["epoch"] == 1 and list(one["splits"]) == ["train", "valid", "test"]
    assert one["checkpoint"] == str(tmp_path / "ck_1.h5") and one["checkpoint_choice"] == "last"
    for split, m in one["splits"].items():
        for key in ("images", "misclass", "top2_misclass", "class_accuracy", "precision", "recall", "f1",
                    "macro_f1", "confusion"):
            assert two["splits"][split][key] == m[key], (split, key)
        assert two["splits"][split]["cost"] == pytest.approx(m["cost"], rel=1e-10)
    text = distnet("evaluate", str(path), "--checkpoint", last, check=True).stdout.splitlines()
    assert text[0].startswith(f"{run}: its last checkpoint, {tmp_path / 'ck_1.h5'}; {run}:best names ")
    assert text[2].startswith("train set misclass rate: ") and text[3].startswith("train set cost ")
    assert ", top-2 misclass " in text[3]
    assert text[4] == "train set per class (recall: the share of the class's images classified right):"
    assert text[5].split() == ["class", "images", "precision", "recall", "F1"] and text[6].split()[0] == "0"
    assert text[9].startswith("  macro average")
    assert text[10] == "train set confusion matrix (rows: true class, columns: predicted class):"
    assert text[11].split() == ["0", "1", "2"]            # the classes head the columns ...
    assert [int(v) for v in text[12].split()[1:]] == one["splits"]["train"]["confusion"][0]   # ... and rows


def test_plot_draws_validation_costs_and_top_k(exp, tmp_path):
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import draw_runs
    from distnet.experiments.rundir import read_run
    d, path = exp
    run = tmp_path / "r"
    distnet("run", str(path), "--run-dir", str(run), "--no-checkpoint", "--set", "model.num_epochs=2", check=True)
    cost_ax, err_ax, class_ax = draw_runs([read_run(str(run))]).axes
    label = read_run(str(run))["label"]
    assert {f"{label}: valid cost", f"{label}: test cost"} <= {line.get_label() for line in cost_ax.lines}
    curves = {line.get_label(): list(line.get_ydata()) for line in err_ax.lines}
    recs = _records(run)[:-1]
    assert curves[f"{label}: valid"] == [r["valid_misclass"] for r in recs]
    assert curves[f"{label}: valid top2"] == [r["valid_top2_misclass"] for r in recs]
    per_class = {line.get_label(): list(line.get_ydata()) for line in class_ax.lines}
    assert list(per_class) == ["class 0", "class 1", "class 2"]    # the data names no class
    assert per_class["class 1"] == [r["valid_class_accuracy"][1] for r in recs if r["valid_class_accuracy"][1] is not None]


def test_a_run_directory_means_its_best_checkpoint_and_the_closing_lines_name_both(exp, tmp_path):
    """predict and evaluate of a run directory used its last checkpoint without a word while the
    run kept a better one, and the run's closing error rates were the last epoch's alone."""
    d, path = exp
    run = tmp_path / "r"
    proc = distnet("run", str(path), "--run-dir", str(run), "--set", "checkpoint={keep_best: true, patience: 0}",
                   "--set", "model.num_epochs=5", check=True)
    recs = _records(run)
    final, best = recs[-1], recs[-1]["best_epoch"]
    assert best["rates"] == {s: recs[best["epoch"]][f"{s}_misclass"] for s in ("train", "valid", "test")}
    for split in ("train", "valid", "test"):
        line = next(x for x in proc.stderr.splitlines() if x.startswith(f"{split} set misclass rate: "))
        assert line == (f"{split} set misclass rate: {final[f'{split}_misclass']:.5f}% (the last epoch's model, "
                        f"epoch 4; the best epoch, {best['epoch']}: {best['rates'][split]:.5f}%)")
    with h5py.File(d / "data.h5", "r") as f:
        np.save(tmp_path / "x.npy", f["test/x"][()])
    out = {}
    for given in (str(run), f"{run}:best", f"{run}:last"):
        p = distnet("predict", str(path), "--checkpoint", given, "--data", str(tmp_path / "x.npy"), "-o",
                    str(tmp_path / "p.csv"), "--force", check=True)
        out[given] = p.stdout.splitlines()
    assert out[str(run)] == out[f"{run}:best"]
    assert out[str(run)][0] == (f"{run}: its best checkpoint (the best epoch's), {run / 'checkpoint-best.h5'}; "
                                f"{run}:last names {run / 'checkpoint.h5'}")
    assert out[str(run)][1].startswith(f"{run / 'checkpoint-best.h5'}: epoch {best['epoch']} (written on ")
    assert out[f"{run}:last"][1].startswith(f"{run / 'checkpoint.h5'}: epoch 4 (written on ")
    resumed = distnet("run", str(path), "--no-run-dir", "--no-checkpoint", "--resume", str(run), "--set",
                      "model.num_epochs=5", check=True)     # resuming goes on from the last
    assert f"resumed from {run / 'checkpoint.h5'}: epoch 4 done" in resumed.stderr
    bad = distnet("evaluate", str(path), "--checkpoint", f"{tmp_path / 'x.npy'}:best")
    assert bad.returncode == 2 and ":best follows a run directory" in bad.stderr


def test_check_refuses_a_monitor_no_evaluation_records(exp):
    d, path = exp
    for monitor, words in (("valid_misclas", "checkpoint monitor valid_misclas: the evaluations record no 'misclas' "
                                             "of the valid split; a monitor names one of valid_cost, valid_misclass, "
                                             "valid_top2_misclass, valid_macro_precision, valid_macro_recall, "
                                             "valid_macro_f1"),
                           ("vaild_misclass", "checkpoint monitor must name a metric of an evaluated split")):
        bad = distnet("check", str(path), "--set", f"checkpoint.monitor={monitor}")
        assert bad.returncode == 2 and words in bad.stderr, bad.stderr
        assert f"{path}:" in bad.stderr                     # the file and line of the key
    no_valid = distnet("check", str(path), "--set", "checkpoint.monitor=valid_cost", "--set",
                       "datasets.0.valid_fraction=0")
    assert no_valid.returncode == 2 and ("checkpoint monitor valid_cost: the run evaluates no valid split (it "
                                         "evaluates: train, test)") in no_valid.stderr, no_valid.stderr
    distnet("check", str(path), "--set", "checkpoint.monitor=valid_macro_f1", check=True)


def test_plot_of_runs_without_evaluated_epochs_has_two_panels_and_marks_the_best_epoch():
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import best_epoch, draw_runs
    plain = {"label": "a", "epochs": [{"epoch": 0, "cost": 1.0}, {"epoch": 1, "cost": 0.5}],
             "final": {"test_misclass": 5.0, "train_misclass": 4.0}, "info": {}}
    cost_ax, err_ax = draw_runs([plain]).axes
    assert {line.get_label() for line in err_ax.lines} == {"a: test (final)", "a: train (final)"}
    assert best_epoch(plain) is None
    best = dict(plain, final=dict(plain["final"], best_epoch={"epoch": 0, "metric": "valid_misclass"}))
    assert best_epoch(best) == (0, "valid_misclass")
    marks = [line for line in draw_runs([best]).axes[1].lines if "best epoch" in line.get_label()]
    assert [m.get_label() for m in marks] == ["a: best epoch 0 (valid_misclass)"] and list(marks[0].get_xdata()) == [0, 0]
