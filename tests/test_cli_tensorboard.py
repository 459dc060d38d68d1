"""``distnet run --tensorboard``: event files that TensorBoard's own reader parses, holding the
numbers of metrics.jsonl, written once (rank 0) under mpiexec, with the same values as the
single-process run; a missing writer is refused before anything runs."""
import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.comm.launcher import launch_env, mpiexec_path
from tests import tiny

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
pytest.importorskip("tensorboardX")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tb")
    data = tiny.write_data(d / "d.h5")
    for name, dist in (("cnn", False), ("cnn_dist", True)):
        (d / f"{name}.yaml").write_text(tiny.experiment(tiny.CNN, data, dist))
    return d


def _run(folder, n, name, run_dir):
    cmd = ["timeout", "180"] + ([mpiexec_path(), "-n", str(n)] if n > 1 else []) + [
        sys.executable, "-m", "distnet", "run", f"{name}.yaml", "--tensorboard", "--run-dir", run_dir,
        "--no-progress", "--set", "eval_every=1"]
    proc = subprocess.run(cmd, cwd=folder, env=launch_env(n), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return folder / run_dir


def _scalars(run_dir):
    """``{tag: [(step, value)]}`` as TensorBoard reads the run's event files."""
    acc = event_accumulator.EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_event_files_hold_the_metrics_and_agree_across_ranks(files):
    one = _run(files, 1, "cnn", "one")
    two = _run(files, 2, "cnn_dist", "two")
    for run_dir in (one, two):   # one writer: rank 0
        assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    records = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in records if "epoch" in r and not r.get("final")]
    final = records[-1]
    got = _scalars(one)
    assert len(epochs) == 4
    # float32 event values: the metrics' float64 numbers to float32 precision
    np.testing.assert_allclose([v for _, v in got["cost/train"]], [r["cost"] for r in epochs], rtol=1e-6)
    for split in ("train", "test"):
        assert [s for s, _ in got[f"misclass/{split}"]] == [0, 1, 2, 3]
        np.testing.assert_allclose([v for _, v in got[f"misclass/{split}"]],
                                   [r[f"{split}_misclass"] for r in epochs], rtol=1e-6)
        assert got[f"final_misclass/{split}"] == [(3, pytest.approx(final[f"{split}_misclass"], rel=1e-6))]
    np.testing.assert_allclose([v for _, v in got["throughput/images_per_second"]],
                               [30 / r["seconds"] for r in epochs], rtol=1e-6)   # 30 training images
    assert got["learning_rate/conv"] == [(e, pytest.approx(0.1)) for e in range(4)]
    other = _scalars(two)
    assert set(other) == set(got)
    for tag in ("cost/train", "misclass/train", "misclass/test", "learning_rate/out"):
        np.testing.assert_allclose([v for _, v in other[tag]], [v for _, v in got[tag]], rtol=1e-6)


@pytest.mark.parametrize("unit,want_out", [
    ("epoch", [0.1, 0.1, 0.05, 0.05]),              # StepSchedule(2) at t = epoch
    ("step", [0.1, 0.05, 0.05, 0.025]),            # StepSchedule(6) at the epoch's last step: 4 per epoch
])
def test_learning_rate_of_every_epoch_follows_the_schedule(files, unit, want_out):
    """``learning_rate/<layer>`` is the rate that layer trained at in that epoch (the one resolver:
    the layer's own rate or the rule's, times the schedule's factor), not the rate at the start."""
    step_size = 2 if unit == "epoch" else 6
    text = (files / "cnn.yaml").read_text().replace(
        "momentum: {type: nesterov, coef: 0.5},",
        "learning_rule: !obj:distnet.learning_rules.GradientDescent {momentum: {type: nesterov, coef: 0.5}, "
        f"schedule_unit: {unit}, schedule: [!obj:distnet.schedules.StepSchedule {{step_size: {step_size}, "
        "gamma: 0.5}]},").replace("name: conv, nofm: 3,", "name: conv, nofm: 3, learning_rate: 0.2,")
    (files / f"sched_{unit}.yaml").write_text(text)
    got = _scalars(_run(files, 1, f"sched_{unit}", f"sched_{unit}"))
    for layer, scale in (("out", 1.0), ("hidden", 1.0), ("conv", 2.0)):
        assert [s for s, _ in got[f"learning_rate/{layer}"]] == [0, 1, 2, 3]
        np.testing.assert_allclose([v for _, v in got[f"learning_rate/{layer}"]], np.multiply(want_out, scale),
                                   rtol=1e-6)


def test_without_the_writer_or_a_run_directory_it_is_refused_first(files, monkeypatch, tmp_path):
    r = CliRunner().invoke(main, ["run", str(files / "cnn.yaml"), "--tensorboard", "--no-run-dir"])
    assert r.exit_code == 2 and "--tensorboard and --no-run-dir contradict each other" in r.output, r.output
    monkeypatch.setitem(sys.modules, "tensorboardX", None)    # import fails as if not installed
    r = CliRunner().invoke(main, ["run", str(files / "cnn.yaml"), "--tensorboard", "--run-dir", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    assert "--tensorboard needs tensorboardX" in r.output and "pip install 'distnet[tensorboard]'" in r.output
    assert not (tmp_path / "r").exists()


def test_the_experiment_key_is_the_option(files, tmp_path):
    """``tensorboard: true`` in the experiment (here by --set) does what --tensorboard does, and
    is refused with --no-run-dir alike; resolved.yaml says it."""
    base = ["run", str(files / "cnn.yaml"), "--set", "tensorboard=true", "--set", "model.num_epochs=1", "--no-progress"]
    r = CliRunner().invoke(main, base + ["--no-run-dir"])
    assert r.exit_code == 2 and "tensorboard: true writes event files into the run directory" in r.output, r.output
    r = CliRunner().invoke(main, base + ["--run-dir", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "r" / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert "tensorboard: true" in (tmp_path / "r" / "resolved.yaml").read_text()
