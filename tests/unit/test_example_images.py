"""The shipped "your own images" example: synthetic PNGs (experiments/make_demo_images.py) ->
`distnet data convert` -> experiments/my_images.yaml, in memory and streamed (identical numbers),
with the validation split evaluated every epoch and the best epoch reported."""
import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.config import load_experiment_text

pytest.importorskip("PIL")
ROOT = Path(__file__).resolve().parents[2]


def _make_images():
    spec = importlib.util.spec_from_file_location("make_demo_images", ROOT / "experiments" / "make_demo_images.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_demo_images


def test_my_images_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _make_images()("my_images", per_class=12) == 36
    r = CliRunner().invoke(main, ["data", "convert", "my_images", "datasets/my_images.h5", "--size", "32x32",
                                  "--valid-fraction", "0.1"])
    assert r.exit_code == 0, r.output
    assert "train 25, valid 4, test 7 images of 3x32x32 uint8, 3 classes (bars, columns, spot)" in r.output
    text = (ROOT / "experiments" / "my_images.yaml").read_text().replace("num_epochs: 8", "num_epochs: 2")
    results = {}
    for mode in ("true", "false"):
        exp = load_experiment_text(text.replace("mean: 0.5,", f"mean: 0.5, in_memory: {mode},"))
        results[mode] = exp.run()
    assert results["true"].epoch_costs == results["false"].epoch_costs
    assert results["true"].valid_misclass == results["false"].valid_misclass is not None
    assert results["false"].best_epoch["split"] == "valid"
    dist = load_experiment_text((ROOT / "experiments" / "my_images_dist.yaml").read_text())
    assert dist.dist_flag and dist.dataset.image_shape == (3, 32, 32)
    metrics = tmp_path / "m.jsonl"
    r = CliRunner().invoke(main, ["run", str(ROOT / "experiments" / "my_images.yaml"), "--set",
                                  "model.num_epochs=1", "--no-run-dir", "-q", "--metrics", str(metrics)])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert "valid_misclass" in recs[0] and recs[-1]["best_epoch"]["epoch"] == 0
