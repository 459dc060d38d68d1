"""A per-pixel model through the commands (in this process, where the test data set with
per-pixel labels is registered): ``distnet run`` records the pixels' metrics in
``metrics.jsonl`` (every evaluated epoch and the final record), TensorBoard gets them as
scalars, ``distnet evaluate`` prints IoU and Dice with the data set's class names (and all of
them with ``--json``), ``distnet plot`` draws their panel, ``distnet compare``'s table sets
them side by side; ``distnet predict`` refuses the maps in one line."""
import json

import pytest
from click.testing import CliRunner

from distnet.cli.compare import compare_runs, format_table, overlaps_agree, read_metrics
from distnet.cli.main import main
from tests.pixel_data import pixel_experiment

SEGMENTATION = ("pixel_acc", "miou", "dice", "class_iou", "class_dice")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``(folder, run directory)`` of one ``distnet run --tensorboard`` of the per-pixel CNN."""
    folder = tmp_path_factory.mktemp("pixels")
    (folder / "seg.yaml").write_text(pixel_experiment("ce"))
    args = ["run", str(folder / "seg.yaml"), "--run-dir", str(folder / "run"), "--no-progress"]
    try:
        import tensorboardX  # noqa: F401
        args.append("--tensorboard")
    except ImportError:
        pass
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return folder, folder / "run"


def test_metrics_jsonl_holds_the_pixels_metrics(run):
    _, run_dir = run
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    epochs, final = [r for r in records if not r.get("final")], records[-1]
    assert len(epochs) == 3 and final["final"]
    for split in ("train", "valid", "test"):
        for name in SEGMENTATION + ("misclass", "cost", "confusion"):
            assert f"{split}_{name}" in epochs[-1]
        for name in SEGMENTATION:
            assert final[f"{split}_{name}"] == epochs[-1][f"{split}_{name}"]   # the same weights
        assert abs(epochs[-1][f"{split}_pixel_acc"] + epochs[-1][f"{split}_misclass"] - 100) < 1e-9
        assert len(epochs[-1][f"{split}_class_iou"]) == 3


def test_tensorboard_has_the_overlaps_as_scalars(run):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _, run_dir = run
    acc = accumulator.EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"miou/test", "dice/valid", "pixel_acc/train", "class_iou/test/0", "class_dice/valid/2",
            "final_miou/test", "final_dice/train", "final_misclass/test"} <= tags
    final = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert acc.Scalars("final_miou/test")[0].value == pytest.approx(final["test_miou"], rel=1e-6)


def test_evaluate_prints_iou_and_dice_with_class_names(run):
    folder, run_dir = run
    r = CliRunner().invoke(main, ["evaluate", str(folder / "seg.yaml"), "--checkpoint", str(run_dir)])
    assert r.exit_code == 0, r.output
    final = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert f"test set pixel accuracy {final['test_pixel_acc']:.5f}%, mean IoU {final['test_miou']:.5f}%" in r.output
    line = next(x for x in r.output.splitlines() if x.startswith("test set IoU per class: "))
    assert line.startswith("test set IoU per class: background ") and ", shape1 " in line and ", shape2 " in line
    assert "test set Dice per class: background " in r.output
    r = CliRunner().invoke(main, ["evaluate", str(folder / "seg.yaml"), "--checkpoint", str(run_dir), "--json"])
    test = json.loads(r.output)["splits"]["test"]
    assert all(test[name] == final[f"test_{name}"] for name in SEGMENTATION)


def test_plot_draws_the_overlap_panel(run):
    pytest.importorskip("matplotlib")
    from distnet.cli.plot import draw_runs
    from distnet.experiments.rundir import read_run
    folder, run_dir = run
    fig = draw_runs([read_run(str(run_dir))])
    # cost, error rates, accuracy per class (of pixels), and the overlaps last
    assert len(fig.axes) == 4 and "per class" in fig.axes[2].get_title() and "mean IoU" in fig.axes[3].get_title()
    labels = [line.get_label() for line in fig.axes[3].get_lines()]
    assert any("valid mean IoU" in x for x in labels) and any("test mean IoU (final)" in x for x in labels)
    r = CliRunner().invoke(main, ["plot", str(run_dir), "-o", str(folder / "plot.png")])
    assert r.exit_code == 0 and (folder / "plot.png").stat().st_size > 0, r.output


def test_compare_sets_the_overlaps_side_by_side(run):
    _, run_dir = run
    a = read_metrics(str(run_dir / "metrics.jsonl"))
    rows, _, _ = compare_runs(a, a)
    table = format_table(rows, "1 process", "4 ranks")
    assert "test miou %" in table and "valid pixel acc %" in table and "train dice %" in table
    assert overlaps_agree(a[1], a[1], 0.0) == (True, "IoU and Dice (mean and per class, every split): identical")
    other = dict(a[1], test_class_iou=[v + 1e-9 if v is not None else None for v in a[1]["test_class_iou"]])
    ok, line = overlaps_agree(a[1], other, 0.0)
    assert not ok and "differ by up to 1.00e-09 points" in line
    assert overlaps_agree(({}), ({}), 0.0) == (True, None)      # a classifier's records: nothing to say


def test_predict_refuses_a_csv_for_per_pixel_maps(run, tmp_path):
    folder, run_dir = run
    import numpy as np
    np.save(tmp_path / "x.npy", np.zeros((2, 1, 12, 10)))
    r = CliRunner().invoke(main, ["predict", str(folder / "seg.yaml"), "--checkpoint", str(run_dir),
                                  "--data", str(tmp_path / "x.npy"), "-o", str(tmp_path / "p.csv")])
    assert r.exit_code == 2 and "this model scores every pixel; give a folder for its mask PNGs" in r.output, r.output
