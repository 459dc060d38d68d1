"""The 3-D U-Net users start from (experiments/unet3d.yaml, unet3d_dist.yaml) on a small volume
demo made and converted as docs/volumes.md does: `distnet compare` of one process against a
2x2x1 grid of 4 ranks in float64 agrees to the last bit of the error rates, with identical IoU
and Dice (the per-voxel cost and metrics summed over the tiles of (B, 3, D, H, W) maps and
(B, D, H, W) labels)."""
import re

from tests.test_cli import ROOT, _demo_volumes_h5, distnet


def test_unet3d_on_four_ranks_equals_one_process(tmp_path):
    data = _demo_volumes_h5(tmp_path)
    proc = distnet("compare", str(ROOT / "experiments" / "unet3d.yaml"), str(ROOT / "experiments" / "unet3d_dist.yaml"),
                   "-n", "4", "--set", f"datasets.0.path={data}", "--set", "backend.dtype=float64",
                   "--set", "model.num_epochs=1", "--cost-tol", "1e-9", "--rate-tol", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "grid 2x2x1, halopar" in out + proc.stderr
    assert "IoU and Dice (mean and per class, every split): identical (tolerance 0 points)" in out
    assert re.search(r"-> AGREE$", out.strip())
    for split in ("train", "valid", "test"):     # both columns print the same number
        one, dist = re.search(rf"^{split} miou %\s+(\S+)\s+(\S+)", out, re.M).groups()
        assert one == dist
