"""The shipped U-Net (experiments/unet.yaml, unet_dist.yaml) end to end, as docs/segmentation.md
runs it: the demo masks made and converted, then one process against 4 ranks (a 2x2 grid of
uneven tiles of 37x53 images) and against 2 replicas of a 1x2 grid, in float64: the costs agree
to rounding and the pixel counts, IoU and Dice are identical."""
import pytest

from tests.test_cli import ROOT, _segmentation_demo_h5, distnet

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return _segmentation_demo_h5(tmp_path_factory.mktemp("seg"))


@pytest.mark.parametrize("layout", [[], ["--set", "data=2", "--reference-set", "data=1"]], ids=["2x2", "2x1x2"])
def test_the_unet_on_4_ranks_is_the_one_process_unet(demo, layout):
    proc = distnet("compare", str(ROOT / "experiments" / "unet.yaml"), str(ROOT / "experiments" / "unet_dist.yaml"),
                   "-n", "4", "--set", f"datasets.0.path={demo}", "--set", "backend.dtype=float64",
                   "--set", "model.num_epochs=1", "--cost-tol", "1e-9", "--rate-tol", "0", *layout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "IoU and Dice (mean and per class, every split): identical" in proc.stdout
    assert proc.stdout.rstrip().endswith("-> AGREE")
    assert ("grid 1x2, data 2" if layout else "grid 2x2") in proc.stdout + proc.stderr
