"""The 3-D U-Net users start from (experiments/unet3d.yaml, unet3d_dist.yaml) on a small volume
demo made and converted as docs/volumes.md does: `distnet compare` of one process against a
2x2x1 grid of 4 ranks in float64 agrees to the last bit of the error rates, with identical IoU
and Dice (the per-voxel cost and metrics summed over the tiles of (B, 3, D, H, W) maps and
(B, D, H, W) labels). `distnet predict` of volumes writes the same mask files and class maps bit
for bit (float64) on one process, 2x2x2 and 3x2x1, and `distnet.load` predicts the same numbers;
volumes the model cannot take are one line on every rank."""
import filecmp
import re

import h5py
import numpy as np
import pytest

from distnet.api import load
from tests.test_cli import ROOT, _demo_volumes_h5, distnet
from tests.test_cli_files import one_line_error

UNET3D, UNET3D_DIST = (str(ROOT / "experiments" / f) for f in ("unet3d.yaml", "unet3d_dist.yaml"))


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


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The U-Net trained one epoch in float64 on 6 volumes of 11x7x9 (two poolings of the padded
    12x8x12 leave 3x2x3: a 2x2x2 and a 3x2x1 grid cut every layer)."""
    d = tmp_path_factory.mktemp("predict3d")
    data = _demo_volumes_h5(d, shape=(11, 7, 9))
    distnet("run", UNET3D, "--set", f"datasets.0.path={data}", "--set", "backend.dtype=float64",
            "--set", "model.num_epochs=1", "--run-dir", str(d / "run"), check=True)
    return d, data


def _predict(d, data, exp, n, images, out, *extra):
    return distnet("predict", exp, "--checkpoint", str(d / "run"), "--set", f"datasets.0.path={data}",
                   "--set", "backend.dtype=float64", "--data", *images, "-o", f"{d / out}/", *extra, n=n)


def test_predicted_masks_of_volumes_on_2x2x2_and_3x2x1_are_the_one_process_files(trained):
    d, data = trained
    volumes = d / "vol_demo" / "volumes"
    names = sorted(p.name for p in volumes.iterdir())
    for n, exp in ((1, UNET3D), (8, UNET3D_DIST)):
        proc = _predict(d, data, exp, n, [str(volumes)], f"m{n}", "--probabilities", str(d / f"p{n}.h5"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"m{n}/: 6 masks of 11x7x9 voxels, 3 classes" in proc.stdout
        assert f"p{n}.h5: probabilities (6, 3, 11, 7, 9) float32, labels (6, 11, 7, 9)" in proc.stdout
        assert sorted(p.name for p in (d / f"m{n}").iterdir()) == names     # named as the volumes
    assert "grid 2x2x2" in proc.stdout
    assert all(filecmp.cmp(d / "m1" / m, d / "m8" / m, shallow=False) for m in names)
    with h5py.File(d / "p1.h5", "r") as a, h5py.File(d / "p8.h5", "r") as b:
        probs, labels = a["probabilities"][()], a["labels"][()]
        np.testing.assert_array_equal(b["probabilities"][()], probs)
        np.testing.assert_array_equal(b["labels"][()], labels)
    np.testing.assert_array_equal(labels, probs.argmax(axis=1))      # every voxel its argmax class
    mask = np.load(d / "m1" / names[4])
    assert mask.dtype == np.uint8 and mask.shape == (11, 7, 9)
    np.testing.assert_array_equal(mask, labels[4])
    # distnet.load: the same numbers in Python, from the volume files and from the stored test split
    model = load(str(d / "run"))
    got = model.predict(str(volumes))
    assert got.files == names
    np.testing.assert_array_equal(got.probabilities, probs)
    np.testing.assert_array_equal(got.labels, labels)
    proc = _predict(d, data, UNET3D_DIST, 6, [str(data)], "s6")         # the stored volumes, uneven tiles
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "grid 3x2x1" in proc.stdout
    with h5py.File(data, "r") as f:
        stored = f["test/x"][()]
    np.testing.assert_array_equal(model.predict(stored).labels[0], np.load(d / "s6" / "000000.npy"))


def test_volumes_the_model_cannot_take_are_one_line_on_every_rank(trained, tmp_path):
    d, data = trained
    v = np.load(d / "vol_demo" / "volumes" / "000.npy")
    np.save(tmp_path / "two.npy", np.stack([v, v]))
    np.save(tmp_path / "plane.npy", v[0])
    (tmp_path / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    proc = _predict(d, data, UNET3D_DIST, 2, [str(tmp_path / "two.npy")], "bad")
    for rank in (0, 1):
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"[rank {rank}] distnet: error")]
        assert len(errors) == 1 and "two.npy is a volume of 2x11x7x9 and the model takes 1x11x7x9 (C x D x H x " \
                                    "W): another channel count" in errors[0], proc.stderr
    assert proc.returncode not in (0, 124, 137) and "Traceback" not in proc.stderr
    one_line_error(_predict(d, data, UNET3D, 1, [str(tmp_path / "plane.npy")], "bad"),
                   "plane.npy is a 2-D (H, W) array of float32 (7, 9), not a volume")
    one_line_error(_predict(d, data, UNET3D, 1, [str(tmp_path / "picture.png")], "bad"),
                   "picture.png: a 2-D picture; this model takes volumes")
    assert not (d / "bad").exists()


def test_nifti_and_tiff_volumes_predict_as_their_npy(trained, tmp_path):
    nib, tifffile = pytest.importorskip("nibabel"), pytest.importorskip("tifffile")
    d, _ = trained
    v = np.load(d / "vol_demo" / "volumes" / "001.npy")                 # (D, H, W)
    nib.save(nib.Nifti1Image(v.transpose(2, 1, 0), np.eye(4)), tmp_path / "a.nii.gz")   # NIfTI's (X, Y, Z)
    tifffile.imwrite(tmp_path / "b.tif", v)                              # D pages of H x W
    model = load(str(d / "run"))
    got = model.predict([str(tmp_path / "a.nii.gz"), str(tmp_path / "b.tif")])
    want = model.predict(v[None, None])
    for i in range(2):
        np.testing.assert_array_equal(got.labels[i], want.labels[0])
        np.testing.assert_array_equal(got.probabilities[i], want.probabilities[0])
