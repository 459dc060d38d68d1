"""distnet data convert --masks: the demo sets (experiments/make_segmentation_demo.py,
make_volume_demo.py) convert to the documented layout, NIfTI and TIFF stacks give the .npy
volumes' arrays, data info counts the classes' pixels, and hostile input (a mask of another size,
class ids out of range, an RGB mask, an empty folder, a 2-D file among volumes, a missing extra)
is one line, a non-zero exit and no traceback."""
import os
import shutil
import sys

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.datasets import HDF5Dataset
from distnet.geometry import tile_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from make_segmentation_demo import make_segmentation_demo  # noqa: E402
from make_volume_demo import make_volume_demo  # noqa: E402


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, words):
    assert result.exit_code not in (0, None), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("distnet: error")]
    assert len(errors) == 1 and words in errors[0], result.stderr


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    d = tmp_path_factory.mktemp("demos")
    make_segmentation_demo(d / "seg")
    make_volume_demo(d / "vol")
    return d


def test_segmentation_demo_converts_to_the_layout(demos, tmp_path):
    out = tmp_path / "segmentation_demo.h5"
    r = cli("data", "convert", demos / "seg/images", out, "--masks", demos / "seg/masks", "--classes",
            demos / "seg/classes.txt")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == (f"wrote {out}: train 38, test 10 images of 3x37x53 uint8 with masks (uint8 per "
                                        "pixel, ignore label 255), 4 classes (background, disc, square, bar)")
    with h5py.File(out, "r") as f:
        assert f["train/x"].shape == (38, 3, 37, 53) and f["train/x"].chunks == (1, 3, 37, 53)
        assert f["train/y"].shape == (38, 37, 53) and f["train/y"].dtype == np.uint8
        assert f["train/y"].chunks == (1, 37, 53) and f["train/y"].fletcher32
        assert f.attrs["nclasses"] == 4 and int(f.attrs["ignore_label"]) == 255
        assert list(f.attrs["class_colors"]) == ["000000", "dc3c3c", "3cb44b", "466ee6"]
        values = np.unique(np.concatenate([f["train/y"][()].ravel(), f["test/y"][()].ravel()]))
    assert values.tolist() == [0, 1, 2, 3, 255]
    from PIL import Image       # every stored mask is its file's palette indices, its image the PNG
    perm = np.random.RandomState(0).permutation(48)
    ds = HDF5Dataset(path=str(out), scale=1 / 255)
    tile = tile_of(ds.plane, (2, 3), (1, 2))
    x, y = ds.load(tile=tile, dtype=np.float64)["test"]
    for i, k in enumerate(perm[:10]):
        mask = np.asarray(Image.open(demos / f"seg/masks/{k:03d}.png"))
        image = np.asarray(Image.open(demos / f"seg/images/{k:03d}.png")).transpose(2, 0, 1)
        np.testing.assert_array_equal(y[i], mask[tile.y0:tile.y1, tile.x0:tile.x1])
        np.testing.assert_array_equal(x[i], image[:, tile.y0:tile.y1, tile.x0:tile.x1] * (1 / 255))
    info = cli("data", "info", out)
    assert info.exit_code == 0
    lines = info.stdout.splitlines()
    assert lines[1] == "labels per pixel (masks, uint8); ignore label 255; the table counts pixels"
    with h5py.File(out, "r") as f:      # the table: pixels per class and split, then the ignored ones
        counts = {s: np.bincount(f[f"{s}/y"][()].ravel(), minlength=256) for s in ("train", "test")}
    rows = [line.split() for line in lines[lines.index(next(x for x in lines if x.startswith("label  "))) + 1:]]
    assert rows == [[str(k), name, str(counts["train"][k]), str(counts["test"][k])]
                    for k, name in enumerate(("background", "disc", "square", "bar"))] + [
        ["ignored", str(counts["train"][255]), str(counts["test"][255])]]


def test_volume_demo_and_its_nifti_and_tiff_copies(demos, tmp_path):
    out = tmp_path / "volume_demo.h5"
    r = cli("data", "convert", demos / "vol/volumes", out, "--masks", demos / "vol/masks", "--classes",
            demos / "vol/classes.txt")
    assert r.exit_code == 0, r.output
    assert "train 19, test 5 volumes of 1x19x23x29 float32 with masks (uint8 per voxel" in r.stdout
    with h5py.File(out, "r") as f:
        assert f["train/x"].chunks == (1, 1, 19, 23, 29) and f["train/y"].shape == (19, 19, 23, 29)
        want = {s: (f[f"{s}/x"][()], f[f"{s}/y"][()]) for s in ("train", "test")}
    nib, tifffile = pytest.importorskip("nibabel"), pytest.importorskip("tifffile")
    for fmt in ("nii", "tif"):
        for sub in ("volumes", "masks"):
            os.makedirs(tmp_path / fmt / sub)
        for i in range(24):
            v, m = (np.load(demos / f"vol/{sub}/{i:03d}.npy") for sub in ("volumes", "masks"))
            if fmt == "nii":        # NIfTI's (X, Y, Z) voxel axes; a float mask as scanners write them
                nib.save(nib.Nifti1Image(v.T, np.eye(4)), tmp_path / f"nii/volumes/{i:03d}.nii.gz")
                nib.save(nib.Nifti1Image(m.T.astype(np.float32), np.eye(4)), tmp_path / f"nii/masks/{i:03d}.nii")
            else:
                tifffile.imwrite(tmp_path / f"tif/volumes/{i:03d}.tif", v)
                tifffile.imwrite(tmp_path / f"tif/masks/{i:03d}.tiff", m)
        r = cli("data", "convert", tmp_path / fmt / "volumes", tmp_path / f"{fmt}.h5", "--masks",
                tmp_path / fmt / "masks", "--classes", demos / "vol/classes.txt")
        assert r.exit_code == 0, r.output
        with h5py.File(tmp_path / f"{fmt}.h5", "r") as f:
            for s, (x, y) in want.items():
                np.testing.assert_array_equal(f[f"{s}/x"][()], x)
                np.testing.assert_array_equal(f[f"{s}/y"][()], y)


@pytest.fixture
def hostile(demos, tmp_path):
    shutil.copytree(demos / "seg", tmp_path / "seg")
    shutil.copytree(demos / "vol", tmp_path / "vol")
    return tmp_path


def _seg(d, *extra):
    return cli("data", "convert", d / "seg/images", d / "o.h5", "--masks", d / "seg/masks", *extra)


def _vol(d, *extra):
    return cli("data", "convert", d / "vol/volumes", d / "o.h5", "--masks", d / "vol/masks", *extra)


def test_a_mask_of_another_size(hostile):
    from PIL import Image
    path = hostile / "seg/masks/003.png"
    Image.fromarray(np.asarray(Image.open(path))[:30]).save(path)
    one_line_error(_seg(hostile), f"mask {path} is 30x53 but its image {hostile}/seg/images/003.png is 37x53")


def test_class_ids_beyond_the_classes_name_the_file_and_the_palette_colour(hostile):
    (hostile / "two.txt").write_text("background\ndisc\n")
    one_line_error(_seg(hostile, "--classes", hostile / "two.txt"),
                   f"mask {hostile}/seg/masks/000.png holds class id 3 (palette colour #466ee6), out of range 0..1 "
                   "(2 classes in --classes; ignore label 255)")


def test_a_palette_of_more_colours_than_classes(hostile):
    """A palette mask whose pixels use palette entries past the classes: named with its colour;
    entries the pixels do not use are fine."""
    from PIL import Image
    path = hostile / "seg/masks/010.png"
    im = Image.open(path)
    ids = np.asarray(im).copy()
    ids[0, :5] = 7
    out = Image.fromarray(ids, "P")
    out.putpalette([v for k in range(256) for v in ((9, 8, 7) if k == 7 else im.getpalette()[3 * k:3 * k + 3])])
    out.save(path)
    one_line_error(_seg(hostile, "--classes", hostile / "seg/classes.txt"),
                   f"mask {path} holds class id 7 (palette colour #090807), out of range 0..3")


def test_an_rgb_mask(hostile):
    from PIL import Image
    path = hostile / "seg/masks/005.png"
    Image.open(path).convert("RGB").save(path)
    one_line_error(_seg(hostile), f"mask {path} is an image of mode RGB: a mask holds one class id per pixel")


def test_an_empty_folder_and_an_image_without_its_mask(hostile):
    os.makedirs(hostile / "empty")
    one_line_error(cli("data", "convert", hostile / "empty", hostile / "o.h5", "--masks", hostile / "seg/masks"),
                   f"{hostile}/empty holds no images (.png,")
    os.remove(hostile / "seg/masks/007.png")
    one_line_error(_seg(hostile), f"1 image(s) of {hostile}/seg/images have no mask of the same name")


def test_volumes_of_another_rank_or_shape(hostile):
    np.save(hostile / "vol/volumes/002.npy", np.zeros((23, 29), np.float32))
    one_line_error(_vol(hostile), f"{hostile}/vol/volumes/002.npy is a 2-D (H, W) array of float32 (23, 29), not a "
                                  "volume")
    shutil.copy(hostile / "vol/volumes/003.npy", hostile / "vol/volumes/002.npy")
    np.save(hostile / "vol/masks/004.npy", np.zeros((19, 23, 28), np.uint8))
    one_line_error(_vol(hostile), f"mask {hostile}/vol/masks/004.npy is 19x23x28 but its volume "
                                  f"{hostile}/vol/volumes/004.npy is 19x23x29 (D x H x W)")
    shutil.copy(hostile / "seg/images/000.png", hostile / "vol/volumes/000.png")
    one_line_error(_vol(hostile), "holds volumes and also 2-D images (000.png, ...)")


def test_a_missing_extra_says_which_pip_install(hostile, monkeypatch):
    for f in os.listdir(hostile / "vol/volumes"):
        os.remove(hostile / "vol/volumes" / f)
    (hostile / "vol/volumes/000.nii.gz").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "nibabel", None)       # import nibabel: ImportError
    one_line_error(_vol(hostile), "reading NIfTI volumes (.nii, .nii.gz) needs nibabel, which is not installed: "
                                  "pip install 'distnet[nifti]'")


@pytest.mark.parametrize("args,words", [
    (("--classes", "CLASSES"), "--classes is an option of masks: give the masks' folder with --masks"),
    (("--masks", "MASKS", "--stratify"), "--stratify: not options of a conversion with --masks"),
    (("--masks", "MASKS", "--ignore-label", "2"), "--ignore-label 2 lies among the class ids of"),
])
def test_options_that_do_not_fit(hostile, args, words):
    args = [a.replace("CLASSES", str(hostile / "seg/classes.txt")).replace("MASKS", str(hostile / "seg/masks"))
            for a in args]
    one_line_error(cli("data", "convert", hostile / "seg/images", hostile / "o.h5", *args), words)
    one_line_error(cli("data", "convert", hostile / "vol/volumes", hostile / "o.h5"),
                   "holds volumes: they convert with per-voxel labels, so give their masks' folder with --masks")
