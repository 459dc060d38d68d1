"""distnet predict of the shipped U-Net (experiments/unet.yaml) trained one epoch on a small demo:
a palette mask PNG per picture and the class maps in HDF5, the same files bit for bit (float64)
on one process and on a 2x2 grid of 4 ranks, where rank 0 assembles the tiles band by band."""
import filecmp

import h5py
import numpy as np
import pytest

from distnet.data.predict_files import check_prediction_target, images_source
from distnet.errors import DataError, OptionError
from tests.test_cli import ROOT, _segmentation_demo_h5, distnet
from tests.test_cli_files import one_line_error

Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("masks")
    data = _segmentation_demo_h5(d)
    distnet("run", str(ROOT / "experiments" / "unet.yaml"), "--set", f"datasets.0.path={data}",
            "--set", "backend.dtype=float64", "--set", "model.num_epochs=1", "--run-dir", str(d / "run"), check=True)
    return d, data


def _predict(d, data, exp, out, n=1, *extra, images=None):
    return distnet("predict", str(ROOT / "experiments" / exp), "--checkpoint", str(d / "run"),
                   "--set", f"datasets.0.path={data}", "--set", "backend.dtype=float64",
                   "--data", str(images or d / "seg_demo" / "images"), "-o", f"{d / out}/", *extra, n=n)


def test_masks_on_4_ranks_are_the_one_process_masks(trained):
    d, data = trained
    one = _predict(trained[0], data, "unet.yaml", "m1", 1, "--probabilities", str(d / "p1.h5"))
    assert one.returncode == 0, one.stdout + one.stderr
    assert "m1/: 20 masks of 37x53 pixels, 4 classes" in one.stdout
    four = _predict(trained[0], data, "unet_dist.yaml", "m4", 4, "--probabilities", str(d / "p4.h5"))
    assert four.returncode == 0, four.stdout + four.stderr
    assert "grid 2x2" in four.stdout
    names = sorted(p.name for p in (d / "seg_demo" / "images").iterdir())
    assert sorted(p.name for p in (d / "m1").iterdir()) == names
    assert all(filecmp.cmp(d / "m1" / n, d / "m4" / n, shallow=False) for n in names)
    with h5py.File(d / "p1.h5", "r") as a, h5py.File(d / "p4.h5", "r") as b:
        probs, labels = a["probabilities"][()], a["labels"][()]
        assert probs.shape == (20, 4, 37, 53) and probs.dtype == np.float32 and labels.shape == (20, 37, 53)
        np.testing.assert_array_equal(b["probabilities"][()], probs)
        np.testing.assert_array_equal(b["labels"][()], labels)
        colors = list(h5py.File(data, "r").attrs["class_colors"])
    np.testing.assert_array_equal(labels, probs.argmax(axis=1))       # every pixel its argmax class
    im = Image.open(d / "m1" / names[3])
    assert im.mode == "P"
    np.testing.assert_array_equal(np.array(im), labels[3])
    assert im.getpalette()[:12] == [int(c[i:i + 2], 16) for c in colors for i in (0, 2, 4)]


def test_stored_images_on_6_ranks_give_masks_named_by_row(trained):
    d, data = trained        # the data file's test/x: 4 images, on a 2x3 grid of uneven tiles
    for n, exp in ((1, "unet.yaml"), (6, "unet_dist.yaml")):
        proc = _predict(d, data, exp, f"s{n}", n, images=data)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [f"{i:06d}.png" for i in range(4)]
    assert sorted(p.name for p in (d / "s6").iterdir()) == names
    assert all(filecmp.cmp(d / "s1" / m, d / "s6" / m, shallow=False) for m in names)


def test_a_csv_for_a_per_pixel_model_is_refused_naming_the_choices(trained):
    d, data = trained
    proc = distnet("predict", str(ROOT / "experiments" / "unet.yaml"), "--checkpoint", str(d / "run"),
                   "--set", f"datasets.0.path={data}", "--data", str(data), "-o", str(d / "out.csv"))
    assert proc.returncode == 2
    assert "this model scores every pixel; give a folder for its mask PNGs (-o OUT_DIR/)" in proc.stderr
    assert proc.stderr.count("\n") <= 3 and "Traceback" not in proc.stderr


def test_outputs_must_fit_the_model():
    check_prediction_target(True, "masks/", "masks", "p.h5")
    check_prediction_target(False, "p.csv", "csv")
    with pytest.raises(OptionError, match="a folder takes the masks of a per-pixel model"):
        check_prediction_target(False, "out/", "masks")
    with pytest.raises(OptionError, match="--probabilities writes a per-pixel model's class maps"):
        check_prediction_target(False, "p.h5", "hdf5", "q.h5")


def test_volumes_given_to_a_2d_model_are_one_line(trained, tmp_path):
    d, data = trained
    (tmp_path / "vols").mkdir()
    np.save(tmp_path / "vols" / "a.npy", np.zeros((4, 37, 53), np.float32))
    proc = _predict(d, data, "unet.yaml", "v", images=tmp_path / "vols")
    one_line_error(proc, f"--data {tmp_path / 'vols'}: volumes (.npy, NIfTI, TIFF stacks), but this model takes "
                         "2-D images")
    with h5py.File(tmp_path / "v.h5", "w") as f:        # stored volumes (N, C, D, H, W)
        f["x"] = np.zeros((2, 1, 4, 37, 53), np.float32)
    with pytest.raises(DataError, match=r"an array of shape \(2, 1, 4, 37, 53\), but the experiment takes images "
                                        r"\(N, C, H, W\) of \(1, 37, 53\)"):
        images_source(str(tmp_path / "v.h5"), (1, 37, 53))
    with pytest.raises(DataError, match=r"volumes of shape \(1, 4, 37, 53\), but the experiment takes "
                                        r"\(1, 5, 37, 53\) \(C, D, H, W\)"):
        images_source(str(tmp_path / "v.h5"), (1, 5, 37, 53))
