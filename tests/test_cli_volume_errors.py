"""Volumes given to what cannot take them: one line naming the problem and a non-zero exit (on
every rank), never a traceback. A 2-D experiment (per-axis keys of two sizes) on a volume data
set, per-voxel masks whose shape is not their volumes', a grid that the volume or the U-Net's
depth cannot cut (``distnet plan`` and a run on 2 ranks); a NIfTI folder without nibabel is
tests/test_cli_masks.py's."""
import h5py
import pytest

from tests.test_cli import ROOT, _demo_volumes_h5, distnet
from tests.test_cli_files import one_line_error

BENCH = str(ROOT / "benchmarks" / "experiments" / "unet3d_bench_dist.yaml")


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    """The volume demo at 4^3 (two poolings leave one voxel) and at 8^3."""
    d = tmp_path_factory.mktemp("volumes")
    return {s: _demo_volumes_h5(d / str(s), shape=(s,) * 3) for s in (4, 8)}


def test_a_2d_experiment_on_volumes(volumes, tmp_path):
    text = (ROOT / "experiments" / "unet.yaml").read_text()
    two_d = tmp_path / "unet2d.yaml"
    two_d.write_text(text.replace("fshape: 3, padding: 1,", "fshape: [3, 3], padding: [1, 1],"))
    proc = distnet("run", str(two_d), "--no-run-dir", "--set", f"datasets.0.path={volumes[8]}", cwd=tmp_path)
    one_line_error(proc, "layer 'enc1': fshape [3, 3] has 2 sizes, but the input has 3 spatial axes", code=2)
    assert f"{two_d}:" in proc.stderr     # the file and line of the key


@pytest.mark.parametrize("split, cut", [("train", (slice(None), slice(None), slice(None), slice(0, 7))),
                                        ("test", (slice(None), slice(0, 7)))])
def test_masks_of_another_shape_than_their_volumes(volumes, tmp_path, split, cut):
    path = tmp_path / "mismatch.h5"
    path.write_bytes(volumes[8].read_bytes())
    with h5py.File(path, "a") as f:
        y = f[f"{split}/y"][()]
        want = y.shape
        del f[f"{split}/y"]
        f[f"{split}/y"] = y[cut]
        got = f[f"{split}/y"].shape
    proc = distnet("run", BENCH.replace("_dist", ""), "--no-run-dir", "--set", f"datasets.0.path={path}", cwd=tmp_path)
    one_line_error(proc, f"{split}/y must be the per-pixel labels of {split}/x, integers of shape "
                         f"{want} (N, D, H, W), got uint8 {got}")


def test_a_grid_the_unets_depth_cannot_cut(tmp_path):
    # 8^3 on 64 ranks: the second pooling leaves 2x2x2 voxels for a 4x4x4 grid
    proc = distnet("plan", BENCH, "-n", "64", "--input-shape", "1,8,8,8", cwd=tmp_path)
    one_line_error(proc, "no process grid of 64 spatial ranks cuts every plane into non-empty tiles "
                         "(4x4x4 fails on volume 2x2x2 (the output of layer 'pool2'): 2 slices < 4", code=1)
    assert "Rank counts that work: 1, 2, 4, 8" in proc.stderr
    proc = distnet("plan", BENCH, "-n", "8", "--grid", "2x2x2", "--input-shape", "1,4,4,4", cwd=tmp_path)
    one_line_error(proc, "key 'grid': grid 2x2x2 cannot cut volume 1x1x1 (the output of layer 'pool2'): "
                         "1 slice < 2", code=1)


def test_a_run_on_a_volume_too_small_for_its_ranks_stops_every_rank(volumes, tmp_path):
    proc = distnet("run", BENCH, "--no-run-dir", "--set", f"datasets.0.path={volumes[4]}", n=2, cwd=tmp_path)
    assert proc.returncode not in (0, 124, 137) and "Traceback" not in proc.stderr, proc.stderr
    for rank in (0, 1):
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"[rank {rank}] distnet: error")]
        assert len(errors) == 1 and "no process grid of 2 spatial ranks cuts every plane" in errors[0], proc.stderr
