"""distnet evaluate / predict of a checkpoint (one process, and on a grid of ranks against the
one-process oracle), and what every run prints and keeps: progress lines without a terminal,
the run directory at the start, log.txt."""
import json

import h5py
import numpy as np
import pytest

from tests.test_cli import distnet, tiny  # noqa: F401 - the tiny experiment fixture


@pytest.fixture(scope="module")
def trained(tiny):  # noqa: F811
    """A 1-process run of the tiny float64 CNN with its checkpoint, the distributed experiment,
    and images to classify (the test split as a .npy file and as HDF5 x)."""
    d, exp = tiny
    run = d / "run1"
    proc = distnet("run", str(exp), "--run-dir", str(run), "--progress-every", "1b", check=True)
    dist = d / "tiny_dist_eval.yaml"
    distnet("distribute", str(exp), "-o", str(dist), check=True)
    with h5py.File(d / "data.h5", "r") as f:
        x = f["test/x"][()]
    np.save(d / "images.npy", x)
    with h5py.File(d / "images.h5", "w") as f:
        f["x"] = x
    return d, exp, dist, run, proc


def _final(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]


def _rates(stdout):
    return {line.split()[0]: line.split()[4] for line in stdout.splitlines() if "misclass rate" in line}


def test_run_prints_its_directory_first_and_keeps_log_txt(trained):
    d, exp, dist, run, proc = trained
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("distnet: 1 rank(s)") and lines[1] == f"run directory: {run}"
    assert lines[-1] == f"run directory: {run}"
    # no terminal: a progress line every batch here (--progress-every 1b): 30 images of 8 -> 4 batches
    progress = [line for line in lines if line.startswith("progress: ")]
    assert progress[0].startswith("progress: epoch 1/2, batch 1/4, ") and " img/s, cost " in progress[0]
    assert "ETA " in progress[0] and len(progress) == 6   # batches 1..3 of both epochs
    assert (run / "log.txt").read_text().splitlines() == lines


def test_failed_run_keeps_its_error_in_log_txt(trained, tmp_path):
    d, exp, dist, run, proc = trained
    bad = distnet("run", str(exp), "--run-dir", str(tmp_path / "r"), "--resume", str(tmp_path / "none.h5"))
    assert bad.returncode == 1
    log = (tmp_path / "r" / "log.txt").read_text()
    assert log.startswith("distnet: 1 rank(s)") and "distnet: error: checkpoint" in log.splitlines()[-1]


def test_progress_lines_under_mpiexec_on_rank_0(trained, tmp_path):
    d, exp, dist, run, proc = trained
    out = distnet("run", str(dist), "--run-dir", str(tmp_path / "r2"), "--progress-every", "2b",
                  "--set", "model.num_epochs=1", n=2, check=True)
    progress = [line for line in out.stderr.splitlines() if "progress:" in line]
    assert [p.split(", ")[1] for p in progress] == ["batch 2/4"]
    assert progress[0].startswith("[rank 0] progress: epoch 1/1, ")
    assert "progress: epoch 1/1" in (tmp_path / "r2" / "log.txt").read_text()


def test_evaluate_gives_the_run_s_error_rates(trained):
    d, exp, dist, run, proc = trained
    out = distnet("evaluate", str(exp), "--checkpoint", str(run / "checkpoint.h5"), check=True)
    final = _final(run)
    rates = _rates(out.stdout)
    assert float(rates["train"].rstrip("%")) == pytest.approx(final["train_misclass"], abs=1e-5)
    assert float(rates["test"].rstrip("%")) == pytest.approx(final["test_misclass"], abs=1e-5)
    assert out.stdout.splitlines()[0].endswith("(written on 1 rank(s), grid 1x1), evaluated on 1 rank(s), grid 1x1")
    assert list(rates) == ["train", "test"]     # as the README and a run print them
    out = distnet("evaluate", str(exp), "--checkpoint", str(run / "checkpoint.h5"), "--set",
                  "datasets.0.serialized_path=null", "--set", "datasets.0.valid_fraction=0.2", check=True)
    assert list(_rates(out.stdout)) == ["train", "valid", "test"]   # HDF5 without a cache: test came first


@pytest.mark.parametrize("n", [2, 4])
def test_evaluate_a_one_process_checkpoint_on_a_grid_equals_one_process(trained, n):
    d, exp, dist, run, proc = trained
    oracle = distnet("evaluate", str(exp), "--checkpoint", str(run / "checkpoint.h5"), check=True)
    out = distnet("evaluate", str(dist), "--checkpoint", str(run), n=n, check=True)   # a run directory: its checkpoint
    assert _rates(out.stdout) == _rates(oracle.stdout)
    assert f"evaluated on {n} rank(s)" in out.stdout
    assert out.stdout.count("test set misclass rate") == 1       # rank 0 prints


def test_predict_csv_and_hdf5_one_process_and_on_a_grid(trained):
    d, exp, dist, run, proc = trained
    ck = str(run / "checkpoint.h5")
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "images.npy"), "-o", str(d / "p.csv"),
            check=True)
    out = distnet("predict", str(dist), "--checkpoint", ck, "--data", str(d / "images.h5"),
                  "-o", str(d / "p.h5"), n=2, check=True)
    assert out.stdout.splitlines() == [f"{ck}: epoch 1 (written on 1 rank(s), grid 1x1), predicted on 2 rank(s), "
                                       "grid 1x2", f"{d / 'p.h5'}: 10 images, 3 classes"]
    rows = (d / "p.csv").read_text().splitlines()
    assert rows[0] == "label,p0,p1,p2" and len(rows) == 11
    csv = np.array([[float(v) for v in r.split(",")] for r in rows[1:]])
    with h5py.File(d / "p.h5", "r") as f:
        probs, labels = f["probabilities"][()], f["labels"][()]
    np.testing.assert_allclose(probs, csv[:, 1:], rtol=1e-8)
    assert (labels == csv[:, 0]).all() and (labels == probs.argmax(1)).all()
    # the labels give the test error rate that evaluate prints
    with h5py.File(d / "data.h5", "r") as f:
        y = f["test/y"][()]
    assert 100.0 * (labels != y).mean() == pytest.approx(_final(run)["test_misclass"])


def test_predict_writes_probabilities_of_a_model_that_ends_in_logits(trained, tmp_path):
    """Under SoftmaxCrossEntropy the last layer gives logits (activation Identity): predict's
    p0..pK-1 columns are their softmax (rows of probabilities summing to 1, the same labels)."""
    d, exp, *_ = trained
    text = exp.read_text().replace("activation: !obj:distnet.activations.Logistic {}",
                                   "activation: !obj:distnet.activations.Identity {}")
    text = text.replace("num_epochs: 2,", "num_epochs: 2, cost: !obj:distnet.costs.SoftmaxCrossEntropy {},")
    logits = tmp_path / "logits.yaml"
    logits.write_text(text.replace(str(d / "cache.h5"), str(tmp_path / "cache.h5")))
    distnet("run", str(logits), "--run-dir", str(tmp_path / "run"), check=True)
    distnet("predict", str(logits), "--checkpoint", str(tmp_path / "run" / "checkpoint.h5"), "--data",
            str(d / "images.npy"), "-o", str(tmp_path / "p.csv"), check=True)
    rows = np.array([[float(v) for v in r.split(",")] for r in (tmp_path / "p.csv").read_text().splitlines()[1:]])
    probs = rows[:, 1:]
    assert probs.shape == (10, 3) and (probs >= 0).all() and (probs <= 1).all()
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=1e-7)
    assert (rows[:, 0] == probs.argmax(axis=1)).all()


def test_predict_refuses_a_wrong_extension_and_wrong_images(trained, tmp_path):
    d, exp, dist, run, proc = trained
    ck = str(run / "checkpoint.h5")
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "images.npy"), "-o",
                  str(tmp_path / "p.txt"))
    assert bad.returncode == 2 and ".h5, .hdf5 (HDF5) or .csv" in bad.stderr   # usage: 2
    np.save(tmp_path / "small.npy", np.zeros((2, 1, 5, 5)))
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "small.npy"), "-o",
                  str(tmp_path / "p.csv"))
    assert bad.returncode == 1 and "(1, 5, 5)" in bad.stderr and "(1, 12, 10)" in bad.stderr
    assert not (tmp_path / "p.csv").exists()


def test_predict_and_evaluate_with_data_replicas_equal_one_process(trained):
    d, exp, dist, run, proc = trained
    ck = str(run / "checkpoint.h5")
    oracle = distnet("evaluate", str(exp), "--checkpoint", ck, check=True)
    shard = f"serialized_path={d / 'cache-{rank}of{size}.h5'}"
    out = distnet("evaluate", str(exp), "--checkpoint", ck, "--set", "data=2", "--set", "datasets.0." + shard,
                  n=2, check=True)
    assert _rates(out.stdout) == _rates(oracle.stdout)
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "images.npy"), "-o", str(d / "one.h5"),
            check=True)
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "images.npy"), "-o", str(d / "two.h5"),
            "--set", "data=2", "--set", "model.batch_size=3", "--set", "datasets.0." + shard, n=2, check=True)
    with h5py.File(d / "one.h5", "r") as f, h5py.File(d / "two.h5", "r") as g:
        np.testing.assert_allclose(g["probabilities"][()], f["probabilities"][()], rtol=1e-12)
        assert (g["labels"][()] == f["labels"][()]).all()


def test_predict_onto_a_full_disk_is_one_line(trained, tmp_path, monkeypatch):
    """h5py's ENOSPC text runs over two lines (time, file descriptor, buffer address)."""
    from click.testing import CliRunner
    import distnet.data.predict_files as arrays
    from distnet.cli.main import main
    d, exp, dist, run, proc = trained

    def full(*a):
        raise RuntimeError("Can't close file (file write failed: time = Mon Nov 23 04:04:49 2026\n, "
                           "errno = 28, error message = 'No space left on device', buf = 0x55a2)")
    monkeypatch.setattr(arrays, "write_predictions", full)
    r = CliRunner().invoke(main, ["predict", str(exp), "--checkpoint", str(run / "checkpoint.h5"), "--data",
                                  str(d / "images.npy"), "-o", str(tmp_path / "p.h5")])
    assert r.exit_code == 1 and r.output.strip().splitlines()[-1] == (
        f"distnet: error: -o {tmp_path / 'p.h5'}: No space left on device"), r.output


def test_predict_refuses_outputs_that_are_not_finite(trained, tmp_path, monkeypatch):
    """A row of inf logits has no softmax (inf - inf): predict says which images and why, exit 1,
    and writes nothing, instead of a file of NaN probabilities."""
    from click.testing import CliRunner
    from distnet.cli.main import main
    from distnet.models import Model
    d, exp, dist, run, proc = trained
    predict = Model.predict

    def overflowing(self, x):
        y = predict(self, x)
        y[1] = np.inf
        return y
    monkeypatch.setattr(Model, "predict", overflowing)
    out = tmp_path / "p.csv"
    r = CliRunner().invoke(main, ["predict", str(exp), "--checkpoint", str(run / "checkpoint.h5"), "--data",
                                  str(d / "images.npy"), "-o", str(out)])
    assert r.exit_code == 1 and not out.exists(), r.output
    assert "outputs are not finite (NaN or inf) for 1 of 10 images" in r.output.strip().splitlines()[-1]


def test_predict_scales_new_images_as_the_dataset_scales_its_own(trained, tmp_path):
    """predict fed the images as stored to a model trained on (stored * scale - mean) / std: an
    HDF5Dataset's scale, mean and std were ignored, so the labels disagreed with evaluate's."""
    d, exp, dist, run, proc = trained
    ck = str(run / "checkpoint.h5")
    keys = ["--set", "datasets.0.mean=0.4", "--set", "datasets.0.std=0.5", "--set", "datasets.0.scale=2"]
    x = np.load(d / "images.npy")
    np.save(tmp_path / "scaled.npy", (x * 2 - 0.4) / 0.5)
    refused = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "images.npy"), "-o",
                      str(tmp_path / "p.h5"), *keys)   # not the training's scaling: said, not done
    assert refused.returncode == 2 and not (tmp_path / "p.h5").exists()
    assert refused.stderr.strip() == (
        f"distnet: error: the experiment's preprocessing differs from the training's kept in checkpoint {ck}: "
        "scale: training 1, experiment 2; mean: training none, experiment [0.4]; std: training none, experiment "
        "[0.5]. Values other than the training's give wrong outputs: give the experiment the training's (the run "
        "directory's resolved.yaml), or say which to use: --preprocessing training (the checkpoint's) or "
        "--preprocessing experiment")
    keys += ["--preprocessing", "experiment"]
    for data, k, out in (("images.npy", keys, "p.h5"), (tmp_path / "scaled.npy", [], "q.h5"),
                         ("images.npy", [], "r.h5")):
        distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / data), "-o", str(tmp_path / out),
                *k, check=True)
    p, q, r = (h5py.File(tmp_path / f"{n}.h5", "r")["probabilities"][()] for n in "pqr")
    np.testing.assert_allclose(p, q, rtol=1e-12)
    assert not np.allclose(p, r)        # the images as stored give other outputs
    x[3, 0, 2, 1] = np.nan
    np.save(tmp_path / "nan.npy", x)
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "nan.npy"), "-o",
                  str(tmp_path / "q.csv"))
    assert bad.returncode == 1 and "nan.npy: image 3 holds NaN or inf values" in bad.stderr, bad.stderr
    np.save(tmp_path / "empty.npy", x[:0])
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "empty.npy"), "-o",
                  str(tmp_path / "q.csv"))
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"distnet: error: --data {tmp_path / 'empty.npy'}: holds no images"


def test_predict_never_replaces_its_inputs_and_an_existing_file_only_with_force(trained, tmp_path):
    """-o naming the --data file or the checkpoint wrote the predictions over it (the data or the
    trained model was gone); any existing file was replaced without --force."""
    import shutil
    d, exp, dist, run, proc = trained
    ck = tmp_path / "ck.h5"
    shutil.copy(run / "checkpoint.h5", ck)
    data = tmp_path / "images.h5"
    shutil.copy(d / "images.h5", data)
    keep = {p: p.read_bytes() for p in (ck, data)}
    for out in (data, ck):
        bad = distnet("predict", str(exp), "--checkpoint", str(ck), "--data", str(data), "-o", str(out), "--force")
        assert bad.returncode == 1 and f"-o {out} is also an input" in bad.stderr, bad.stderr
    assert all(p.read_bytes() == b for p, b in keep.items())
    (tmp_path / "p.csv").write_text("mine\n")
    bad = distnet("predict", str(exp), "--checkpoint", str(ck), "--data", str(data), "-o", str(tmp_path / "p.csv"))
    assert bad.returncode == 1 and "p.csv already exists; give another -o, or --force" in bad.stderr, bad.stderr
    assert (tmp_path / "p.csv").read_text() == "mine\n"
    distnet("predict", str(exp), "--checkpoint", str(ck), "--data", str(data), "-o", str(tmp_path / "p.csv"),
            "--force", check=True)
    assert (tmp_path / "p.csv").read_text().startswith("label,p0")


def test_predict_to_an_unwritable_output_under_mpiexec_every_rank_says_why(trained, tmp_path):
    d, exp, dist, run, proc = trained
    out = str(tmp_path / "missing" / "dir" / "p.csv")
    (tmp_path / "missing").write_text("a file, not a folder")   # the folder cannot be made
    bad = distnet("predict", str(dist), "--checkpoint", str(run / "checkpoint.h5"), "--data",
                  str(d / "images.npy"), "-o", out, n=2)
    assert bad.returncode == 1
    for rank in (0, 1):   # not only rank 0: the others are not killed without a word
        line = next(l for l in bad.stderr.splitlines() if l.startswith(f"[rank {rank}] distnet: error:"))
        assert f"cannot write predictions {out}" in line
    assert "Traceback" not in bad.stderr


def test_predict_onto_a_full_disk_under_mpiexec_every_rank_says_why(trained, tmp_path):
    """Rank 0 writes OUT after the collective prediction: its failure reached rank 0's stderr only."""
    from tests.test_cli_files import completely_full
    d, exp, dist, run, proc = trained
    with completely_full(tmp_path / "full") as full:
        out = full / "p.csv"
        bad = distnet("predict", str(dist), "--checkpoint", str(run / "checkpoint.h5"), "--data",
                      str(d / "images.npy"), "-o", str(out), n=2)
        assert bad.returncode == 1, bad.stderr
        for rank in (0, 1):
            line = next(l for l in bad.stderr.splitlines() if l.startswith(f"[rank {rank}] distnet: error:"))
            assert f"-o {out}: No space left on device" in line
        assert sorted(p.name for p in full.iterdir()) == ["filler"]
