"""`distnet data convert`: image folders (PNG/JPEG through Pillow) and .npy/.npz arrays to the
HDF5 layout, with class names, seeded test/validation splits and one-line errors for bad data."""
import builtins
import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.datasets import HDF5Dataset
from distnet.convert import convert
from distnet.convert.decode import parse_size
from distnet.errors import DataError, OptionError

Image = pytest.importorskip("PIL.Image")


def make_folder(root, classes=("cat", "dog", "eel"), n=5, size=(9, 11), mode="RGB", seed=0):
    """``root/<class>/<i>.png``: random pixels, class k brighter in row block k; returns pixels."""
    rng = np.random.RandomState(seed)
    pixels = {}
    for k, c in enumerate(classes):
        os.makedirs(root / c, exist_ok=True)
        for i in range(n):
            shape = size + ((3,) if mode == "RGB" else ())
            a = rng.randint(0, 100, shape).astype(np.uint8)
            a[3 * k:3 * k + 3] += 150
            Image.fromarray(a, mode).save(root / c / f"{i}.png")
            pixels[str(root / c / f"{i}.png")] = a
    return pixels


def test_image_folder(tmp_path):
    pixels = make_folder(tmp_path / "imgs")
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.2, valid_fraction=0.2, seed=3)
    assert info["splits"] == {"train": 9, "valid": 3, "test": 3}
    assert info["shape"] == (3, 9, 11) and info["dtype"] == "uint8" and info["classes"] == ["cat", "dog", "eel"]
    with h5py.File(tmp_path / "d.h5") as f:
        x = f["train/x"]
        assert x.chunks == (1, 3, 9, 11) and x.fletcher32 and x.dtype == np.uint8
        assert f.attrs["nclasses"] == 3 and list(f.attrs["class_names"]) == ["cat", "dog", "eel"]
        everything = np.concatenate([f[f"{s}/x"][()] for s in ("train", "valid", "test")])
        labels = np.concatenate([f[f"{s}/y"][()] for s in ("train", "valid", "test")])
    want = {(lab, a.transpose(2, 0, 1).tobytes()) for p, a in pixels.items()
            for lab in [["cat", "dog", "eel"].index(os.path.basename(os.path.dirname(p)))]}
    assert {(int(y), x.tobytes()) for x, y in zip(everything, labels)} == want
    again = convert(tmp_path / "imgs", tmp_path / "e.h5", test_fraction=0.2, valid_fraction=0.2, seed=3)
    with h5py.File(tmp_path / "d.h5") as f, h5py.File(tmp_path / "e.h5") as g:   # seeded: same split
        np.testing.assert_array_equal(f["test/x"][()], g["test/x"][()])
    assert again["splits"] == info["splits"]
    ds = HDF5Dataset(path=str(tmp_path / "d.h5"), scale="1/255")
    assert ds.nclasses == 3 and ds.image_shape == (3, 9, 11)
    assert len(ds.load()["valid"][1]) == 3


def test_resize_grayscale_and_given_splits(tmp_path):
    make_folder(tmp_path / "imgs" / "train", mode="L", size=(6, 6))
    make_folder(tmp_path / "imgs" / "test", mode="L", size=(8, 4), n=2, seed=1)
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", size="5x7")
    assert info["splits"] == {"train": 15, "test": 6} and info["shape"] == (1, 5, 7)


def test_bad_folders(tmp_path):
    make_folder(tmp_path / "mixed", n=2)
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "mixed" / "dog" / "odd.png")
    with pytest.raises(DataError, match=r"different sizes: .*\.png is \d+x\d+, .*odd.png is 4x4; .*--size"):
        convert(tmp_path / "mixed", tmp_path / "o.h5")
    assert not (tmp_path / "o.h5").exists()
    (tmp_path / "mixed" / "dog" / "odd.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"cannot read image .*odd.png"):
        convert(tmp_path / "mixed", tmp_path / "o.h5")
    os.unlink(tmp_path / "mixed" / "dog" / "odd.png")
    os.makedirs(tmp_path / "mixed" / "empty")
    (tmp_path / "mixed" / "empty" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"class folder .*empty holds no images"):
        convert(tmp_path / "mixed", tmp_path / "o.h5")
    with pytest.raises(OptionError, match="size must be HxW"):
        parse_size("3y4")


def test_missing_pillow_names_the_extra(tmp_path, monkeypatch):
    make_folder(tmp_path / "imgs", n=2)
    real = builtins.__import__

    def no_pil(name, *a, **kw):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("no PIL")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    with pytest.raises(DataError, match=r"pip install 'distnet\[images\]'"):
        convert(tmp_path / "imgs", tmp_path / "d.h5")


def test_arrays(tmp_path):
    rng = np.random.RandomState(0)
    x = rng.randint(0, 255, (50, 8, 6)).astype(np.uint8)      # (N, H, W): one channel
    y = rng.randint(0, 4, 50)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    info = convert(tmp_path / "x.npy", tmp_path / "a.h5", labels=tmp_path / "y.npy", test_fraction=0.3, seed=1)
    assert info["splits"] == {"train": 35, "test": 15} and info["shape"] == (1, 8, 6)
    perm = np.random.RandomState(1).permutation(50)
    with h5py.File(tmp_path / "a.h5") as f:
        np.testing.assert_array_equal(f["test/x"][()][:, 0], x[perm[:15]])     # in the drawn order
        np.testing.assert_array_equal(f["train/y"][()], y[perm[15:]])
    np.savez(tmp_path / "d.npz", x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:])
    info = convert(tmp_path / "d.npz", tmp_path / "b.h5")
    assert info["splits"] == {"train": 40, "test": 10}
    with h5py.File(tmp_path / "b.h5") as f:
        np.testing.assert_array_equal(f["train/x"][()][:, 0], x[:40])          # given splits keep order


def test_bad_arrays(tmp_path):
    x = np.zeros((6, 1, 3, 3))
    np.savez(tmp_path / "neg.npz", x=x, y=np.array([0, 1, -1, 0, 1, 0]))
    with pytest.raises(DataError, match=r"neg.npz: train label -1 is out of range"):
        convert(tmp_path / "neg.npz", tmp_path / "o.h5")
    x[4, 0, 1, 1] = np.nan
    np.savez(tmp_path / "nan.npz", x_train=x, y_train=np.zeros(6, int), x_test=x[:2], y_test=[0, 0])
    with pytest.raises(DataError, match=r"nan.npz: train image 4 holds NaN or inf"):
        convert(tmp_path / "nan.npz", tmp_path / "o.h5")
    with pytest.raises(OptionError, match="--labels"):     # usage: exit 2
        np.save(tmp_path / "x.npy", x)
        convert(tmp_path / "x.npy", tmp_path / "o.h5")


def test_cli(tmp_path):
    make_folder(tmp_path / "imgs", n=4)
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "d.h5"),
                                  "--size", "6x6", "--valid-fraction", "0.25"])
    assert r.exit_code == 0, r.output
    assert "train 7, valid 3, test 2 images of 3x6x6 uint8, 3 classes (cat, dog, eel)" in r.output
    # an existing output is kept unless --force; an input is never the output
    before = (tmp_path / "d.h5").read_bytes()
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "d.h5")])
    assert r.exit_code != 0 and "d.h5 already exists; give another OUTPUT, or --force" in r.output
    assert (tmp_path / "d.h5").read_bytes() == before
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "d.h5"),
                                  "--size", "5x5", "--force"])
    assert r.exit_code == 0 and "of 3x5x5 uint8" in r.output, r.output
    np.save(tmp_path / "x.npy", np.zeros((4, 1, 3, 3), np.uint8))
    np.save(tmp_path / "y.npy", np.zeros(4, int))
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"),
                                  "--labels", str(tmp_path / "y.npy"), "--force"])
    assert r.exit_code != 0 and "is also an input" in r.output
    os.makedirs(tmp_path / "imgs" / "fox")
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "d2.h5")])   # data: 1
    assert r.exit_code == 1 and "distnet: error: class folder" in r.output and "fox holds no images" in r.output


def test_16_bit_images_are_scaled_to_8_bits_not_clipped(tmp_path):
    """A 16-bit grayscale PNG (mode I;16) once became 255 wherever its value was above 255."""
    a = np.array([[0, 257, 32768, 65535]], np.uint16).repeat(2, 0)
    for c in ("a", "b"):
        os.makedirs(tmp_path / "imgs" / c)
        Image.fromarray(a).save(tmp_path / "imgs" / c / "0.png")
        Image.fromarray(np.zeros((2, 4, 2), np.uint8), "LA").save(tmp_path / "imgs" / c / "1.png")
    assert Image.open(tmp_path / "imgs" / "a" / "0.png").mode.startswith("I")
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25)
    assert info["shape"] == (1, 2, 4)       # grayscale with alpha (LA) is grayscale too
    with h5py.File(tmp_path / "d.h5") as f:
        x = np.concatenate([f["train/x"][()], f["test/x"][()]])
    assert {tuple(r[0, 0]) for r in x} == {(0, 1, 128, 255), (0, 0, 0, 0)}
    Image.fromarray(np.full((2, 4), 0.5, np.float32)).save(tmp_path / "imgs" / "b" / "2.tif")
    with pytest.raises(DataError, match=r"cannot read image .*2.tif: .*floating-point pixels"):
        convert(tmp_path / "imgs", tmp_path / "e.h5")


def test_fractions_that_round_to_no_image_are_refused(tmp_path):
    """2 images with the default test_fraction 0.2 once wrote a file without a test split, which
    HDF5Dataset then refused; an .npy said "give a test_fraction > 0" to a user who had."""
    make_folder(tmp_path / "imgs", classes=("a", "b"), n=1)
    with pytest.raises(DataError, match=r"test_fraction 0.2 of 2 images is round\(0.4\) = 0 test images"):
        convert(tmp_path / "imgs", tmp_path / "o.h5")
    with pytest.raises(DataError, match=r"no test split .*test_fraction > 0"):
        convert(tmp_path / "imgs", tmp_path / "o.h5", test_fraction=0)
    np.save(tmp_path / "x.npy", np.zeros((10, 1, 3, 3), np.float32))
    np.save(tmp_path / "y.npy", np.arange(10) % 2)
    with pytest.raises(DataError, match=r"valid_fraction 0.04 of 10 images is round\(0.4\) = 0"):
        convert(tmp_path / "x.npy", tmp_path / "o.h5", labels=tmp_path / "y.npy", valid_fraction=0.04)
    assert not (tmp_path / "o.h5").exists()


def test_a_full_disk_is_one_line_before_writing(tmp_path, monkeypatch):
    """Converting onto a full disk printed h5py's traceback wall and died of a segfault."""
    import errno
    import shutil
    from collections import namedtuple
    make_folder(tmp_path / "imgs", n=4)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(DataError, match=r"cannot write .*d.h5: it needs about 0.0\d MiB but .* has 0.00 MiB free"):
        convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25)
    monkeypatch.undo()
    import distnet.convert.images as conv

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "Driver write request failed (file write failed: ...\n...)")
    monkeypatch.setattr(conv, "decode_image", full)
    with pytest.raises(DataError, match=r"^cannot write .*d.h5: No space left on device$"):
        convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25)
    assert os.listdir(tmp_path) == ["imgs"]


def test_channels_last_arrays_are_refused_or_transposed(tmp_path):
    """(N, H, W, C) arrays were stored as (C=H, H=W, W=C) images: 16x3 pictures of 16 channels."""
    rng = np.random.RandomState(0)
    x = rng.randint(0, 255, (20, 6, 5, 3)).astype(np.uint8)
    np.savez(tmp_path / "nhwc.npz", x=x, y=np.arange(20) % 2)
    with pytest.raises(DataError, match=r"nhwc.npz: train images are \(20, 6, 5, 3\), which looks like "
                                        r"\(N, H, W, C\).*--layout nhwc.*--layout nchw"):
        convert(tmp_path / "nhwc.npz", tmp_path / "o.h5")
    info = convert(tmp_path / "nhwc.npz", tmp_path / "o.h5", layout="nhwc", test_fraction=0.25)
    assert info["shape"] == (3, 6, 5)
    with h5py.File(tmp_path / "o.h5") as f:
        got = np.concatenate([f["train/x"][()], f["test/x"][()]])
    perm = np.random.RandomState(0).permutation(20)
    np.testing.assert_array_equal(got, x.transpose(0, 3, 1, 2)[np.concatenate([perm[5:], perm[:5]])])
    info = convert(tmp_path / "nhwc.npz", tmp_path / "p.h5", layout="nchw")
    assert info["shape"] == (6, 5, 3)
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "nhwc.npz"), str(tmp_path / "q.h5"),
                                  "--layout", "nhwc"])
    assert r.exit_code == 0 and "images of 3x6x5 uint8" in r.output, r.output


def test_an_npz_split_with_images_but_no_labels_is_refused(tmp_path):
    """x_test without y_test was ignored: the test split was drawn from the training images."""
    x = np.zeros((10, 1, 3, 3), np.uint8)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=np.arange(10) % 2, x_test=x[:4])
    with pytest.raises(DataError, match=r"d.npz holds x_test without y_test"):
        convert(tmp_path / "d.npz", tmp_path / "o.h5")
    np.savez(tmp_path / "e.npz", x_train=x, y_train=np.arange(10) % 2, y_valid=np.zeros(2, int))
    with pytest.raises(DataError, match=r"e.npz holds y_valid without x_valid"):
        convert(tmp_path / "e.npz", tmp_path / "o.h5")


def test_a_split_with_a_class_train_lacks_is_refused(tmp_path):
    """test/c/ (a class train/ does not have) was skipped without a word: its images were lost."""
    make_folder(tmp_path / "imgs" / "train", classes=("a", "b"), n=2)
    make_folder(tmp_path / "imgs" / "test", classes=("a", "b", "c"), n=2)
    with pytest.raises(DataError, match=r"imgs/test has class folder\(s\) c/ that .*train lacks"):
        convert(tmp_path / "imgs", tmp_path / "o.h5")


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_cannot_take_is_a_usage_error(tmp_path, seed):
    """--seed -1 was numpy's ValueError traceback ("Seed must be between 0 and 2**32 - 1")."""
    make_folder(tmp_path / "imgs", n=2)
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "d.h5"), "--seed", seed])
    assert r.exit_code == 2 and "--seed" in r.output and "0<=x<=4294967295" in r.output, r.output


def _classes_of(path):
    with h5py.File(path) as f:
        return [n.decode() if isinstance(n, bytes) else str(n) for n in f.attrs["class_names"]]


def test_numbered_class_folders_say_their_labels_and_can_be_ordered_by_value(tmp_path):
    """Folders 0..13 sorted as text made folder 10 label 2 without a word."""
    make_folder(tmp_path / "imgs", classes=[str(k) for k in range(14)], n=2, size=(4, 4))
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "t.h5"),
                                  "--test-fraction", "0.25"])
    assert r.exit_code == 0, r.output
    text_order = ["0", "1", "10", "11", "12", "13"] + [str(k) for k in range(2, 10)]
    assert _classes_of(tmp_path / "t.h5") == text_order          # torchvision's order stays the default
    assert r.output.count("distnet: warning: the class folders of") == 1
    assert "10/ is label 2, 11/ is label 3, 12/ is label 4, ... (12 in all)" in r.output
    assert "--class-order numeric" in r.output
    assert "labels: 0 = 0/, 1 = 1/, 2 = 10/, 3 = 11/, 4 = 12/, 5 = 13/, 6 = 2/" in r.output
    assert f"..., 13 = 9/ (all 14: distnet data info {tmp_path / 't.h5'})" in r.output
    with h5py.File(tmp_path / "t.h5") as f:
        assert f.attrs["class_order"] == "text"
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "n.h5"),
                                  "--test-fraction", "0.25", "--class-order", "numeric"])
    assert r.exit_code == 0 and "are numbers" not in r.output, r.output
    assert _classes_of(tmp_path / "n.h5") == [str(k) for k in range(14)]
    with h5py.File(tmp_path / "n.h5") as f:     # the pixels of folder 10 are label 10
        assert f.attrs["class_order"] == "numeric"
        x = np.concatenate([f["train/x"][()], f["test/x"][()]])
        y = np.concatenate([f["train/y"][()], f["test/y"][()]])
    row = np.asarray(Image.open(tmp_path / "imgs" / "10" / "0.png")).transpose(2, 0, 1)
    assert [int(y[i]) for i in range(len(x)) if (x[i] == row).all()] == [10]
    # names that are not all numbers: numeric order is refused; 7 and 007 are one number
    os.makedirs(tmp_path / "imgs" / "cat")
    with pytest.raises(DataError, match="named by integers, but .* has cat/"):
        convert(tmp_path / "imgs", tmp_path / "m.h5", class_order="numeric")
    os.rename(tmp_path / "imgs" / "cat", tmp_path / "imgs" / "007")
    with pytest.raises(DataError, match="folders 007/ and 7/ of .* are the same number"):
        convert(tmp_path / "imgs", tmp_path / "m.h5", class_order="numeric")
    # 01..12 sort alike either way: nothing to warn about
    make_folder(tmp_path / "padded", classes=[f"{k:02d}" for k in range(14)], n=2, size=(4, 4))
    notes = convert(tmp_path / "padded", tmp_path / "p.h5", test_fraction=0.25)["notes"]
    assert not any("are numbers" in n for n in notes), notes


def test_data_info_lists_every_label_with_its_class_and_images(tmp_path):
    make_folder(tmp_path / "imgs", classes=("cat", "dog", "eel"), n=4, size=(5, 6))
    convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25, seed=1)
    r = CliRunner().invoke(main, ["data", "info", str(tmp_path / "d.h5")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == f"{tmp_path / 'd.h5'}: train 9, test 3 images of 3x5x6 uint8 (C x H x W), 3 classes"
    assert lines[1] == (f"converted from {tmp_path / 'imgs'} (class folders in text order); seed 1, "
                        "test_fraction 0.25, valid_fraction 0")
    assert lines[2].split() == ["label", "class", "folder", "train", "test"]
    rows = [ln.split() for ln in lines[3:]]
    assert [r_[:2] for r_ in rows] == [["0", "cat/"], ["1", "dog/"], ["2", "eel/"]]
    assert all(int(tr) + int(te) == 4 for _, _, tr, te in rows)
    # a hand-written file: no names, an empty class (nclasses 4) said so
    with h5py.File(tmp_path / "h.h5", "w") as f:
        f["train/x"], f["train/y"] = np.zeros((3, 1, 2, 2), np.float32), np.array([0, 1, 1])
        f["test/x"], f["test/y"] = np.zeros((1, 1, 2, 2), np.float32), np.array([0])
        f.attrs["nclasses"] = 4
    r = CliRunner().invoke(main, ["data", "info", str(tmp_path / "h.h5")])
    assert r.exit_code == 0, r.output
    assert "no class names stored" in r.output and "label(s) 2, 3 have no image in any split" in r.output
    assert [ln.split() for ln in r.output.splitlines()[3:5]] == [["0", "0", "1", "1"], ["1", "1", "2", "0"]]
    with h5py.File(tmp_path / "bad.h5", "w") as f:
        f["train/x"] = np.zeros((3, 1, 2, 2))
    r = CliRunner().invoke(main, ["data", "info", str(tmp_path / "bad.h5")])
    assert r.exit_code != 0 and r.output.startswith("distnet: error: ") and "lacks dataset(s)" in r.output
    assert "Traceback" not in r.output


def test_exif_orientation_is_applied(tmp_path):
    """Phone photos store the sensor's pixels and an EXIF orientation; they came out turned."""
    a = np.zeros((4, 6, 3), np.uint8)
    a[0, 0] = 255                                       # a white corner, top left as stored
    for c in ("a", "b"):
        os.makedirs(tmp_path / "imgs" / c)
    exif = Image.Exif()
    exif[0x0112] = 6                                    # shown turned 90 degrees clockwise
    Image.fromarray(a).save(tmp_path / "imgs" / "a" / "phone.jpg", exif=exif, quality=100)
    Image.fromarray(a.transpose(1, 0, 2)[:, ::-1].copy()).save(tmp_path / "imgs" / "b" / "0.png")
    Image.fromarray(a.transpose(1, 0, 2)[:, ::-1].copy()).save(tmp_path / "imgs" / "b" / "1.png")
    Image.fromarray(a).save(tmp_path / "imgs" / "b" / "2.png")
    with pytest.raises(DataError, match="different sizes"):        # as shown: 6x4, not 4x6 ...
        convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.34)
    os.remove(tmp_path / "imgs" / "b" / "2.png")
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.34, seed=0)
    assert info["shape"] == (3, 6, 4)                   # ... and no size error for the others
    with h5py.File(tmp_path / "d.h5") as f:
        x = np.concatenate([f["train/x"][()], f["test/x"][()]])
        y = np.concatenate([f["train/y"][()], f["test/y"][()]])
    phone = x[list(y).index(0)]
    assert phone[:, 0, -1].min() > 200 and phone[:, 0, 0].max() < 60 and phone[:, -1, -1].max() < 60


def test_multi_frame_images_warn_naming_the_file_and_frames(tmp_path):
    for c in ("a", "b"):
        os.makedirs(tmp_path / "imgs" / c)
        for i in range(2):
            Image.fromarray(np.full((3, 3), 50 * i, np.uint8)).save(tmp_path / "imgs" / c / f"{i}.png")
    frames = [Image.fromarray(np.full((3, 3), v, np.uint8)) for v in (10, 100, 200)]
    frames[0].save(tmp_path / "imgs" / "a" / "anim.gif", save_all=True, append_images=frames[1:])
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "imgs"), str(tmp_path / "d.h5"),
                                  "--test-fraction", "0.2"])
    assert r.exit_code == 0, r.output
    assert (f"distnet: warning: 1 image(s) hold several frames (animated GIF, multi-page TIFF); only the "
            f"first frame of each is converted: {tmp_path / 'imgs' / 'a' / 'anim.gif'} (3 frames)") in r.output
    with h5py.File(tmp_path / "d.h5") as f:
        x = np.concatenate([f["train/x"][()], f["test/x"][()]])
    assert sorted(int(v) for v in x[:, 0, 0, 0]) == [0, 0, 10, 50, 50]


def test_hidden_and_foreign_files_subfolders_and_odd_names(tmp_path):
    """macOS's ._x.png (AppleDouble, not an image) stopped the conversion; __MACOSX became a
    class; images in subfolders of a class were dropped without a word; a folder name that is
    not UTF-8 was a UnicodeEncodeError traceback from h5py."""
    root = tmp_path / "imgs"
    make_folder(root, classes=("cat", "dog"), n=3, size=(4, 4))
    (root / "cat" / "._0.png").write_bytes(b"\0\5\26\7AppleDouble")
    (root / "cat" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "cat" / "notes.txt").write_text("shot on a phone")
    os.makedirs(root / "__MACOSX" / "cat")
    (root / "__MACOSX" / "cat" / "._0.png").write_bytes(b"\0\5\26\7")
    os.makedirs(root / ".ipynb_checkpoints")
    os.makedirs(root / "dog" / "more" / ".hidden")
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "dog" / "more" / "x.png")
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "dog" / "more" / ".hidden" / "y.png")
    os.symlink("..", root / "dog" / "more" / "up")                   # a loop, and other classes
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / "stray.png")
    odd = os.path.join(os.fsencode(root), b"caf\xc3\xa9 \xff")      # not UTF-8
    os.makedirs(odd)
    for i in range(3):
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(os.path.join(odd, f"ü{i}.png".encode()))
    info = convert(root, tmp_path / "d.h5", test_fraction=0.2)
    assert info["classes"] == ["caf\u00e9 \\xff", "cat", "dog"]
    assert sum(info["splits"].values()) == 3 + 3 + 4
    notes = "\n".join(info["notes"])
    assert f"skipped 1 file(s) that are not images (by the extension): {root / 'cat' / 'notes.txt'}" in notes
    assert f"skipped 1 image(s) in {root} itself, outside the class folders: {root / 'stray.png'}" in notes
    assert "._0.png" not in notes and "DS_Store" not in notes
    (root / "dog" / "IMG_0001.HEIC").write_bytes(b"\0\0\0\x18ftypheic")
    notes = "\n".join(convert(root, tmp_path / "e.h5", test_fraction=0.2)["notes"])
    assert (f"skipped 2 file(s) that are not images (by the extension): {root / 'dog' / 'IMG_0001.HEIC'}, "
            f"{root / 'cat' / 'notes.txt'} (1 HEIC/HEIF photo(s), the iPhone's format, which Pillow does "
            "not read: convert them to JPEG first)") in notes
    assert _classes_of(tmp_path / "d.h5") == info["classes"]


def test_train_and_val_folders_are_splits_not_two_classes(tmp_path):
    """A folder of train/ and val/ (ImageNet's names, no test/) was taken as two classes, 'train'
    and 'val'; other folders next to train/ were ignored without a word."""
    make_folder(tmp_path / "imgs" / "train", classes=("cat", "dog"), n=5, size=(4, 4))
    make_folder(tmp_path / "imgs" / "val", classes=("cat", "dog"), n=2, size=(4, 4), seed=1)
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.2)
    assert info["classes"] == ["cat", "dog"]
    assert info["splits"] == {"train": 8, "valid": 4, "test": 2}      # test drawn from train's 10
    with h5py.File(tmp_path / "d.h5") as f:
        valid = {x.tobytes() for x in f["valid/x"][()]}
    val_pixels = {np.asarray(Image.open(p)).transpose(2, 0, 1).tobytes()
                  for p in (tmp_path / "imgs" / "val").glob("*/*.png")}
    assert valid == val_pixels
    with pytest.raises(DataError, match=r"no test split \(give a test/ folder or a test_fraction > 0\)"):
        convert(tmp_path / "imgs", tmp_path / "e.h5", test_fraction=0)
    make_folder(tmp_path / "imgs" / "extra", classes=("cat",), n=1, size=(4, 4))
    with pytest.raises(DataError, match=r"holds the split folders train/, val/ and also extra/"):
        convert(tmp_path / "imgs", tmp_path / "e.h5")
    os.rename(tmp_path / "imgs" / "extra", tmp_path / "imgs" / "validation")
    with pytest.raises(DataError, match=r"has both val/ and validation/"):
        convert(tmp_path / "imgs", tmp_path / "e.h5")
    os.rename(tmp_path / "imgs" / "train", tmp_path / "imgs" / "Test")
    os.rename(tmp_path / "imgs" / "validation", tmp_path / "imgs" / "other")
    with pytest.raises(DataError, match=r"has Test/, val/ but no train/ folder"):
        convert(tmp_path / "imgs", tmp_path / "e.h5")


def test_a_stray_color_image_among_grayscale_ones_is_named(tmp_path):
    """One RGB file in a grayscale set made every image 3 channels without a word (a model
    built for 1 channel then failed on the input shape, far from the cause)."""
    make_folder(tmp_path / "imgs", classes=("a", "b"), n=4, size=(4, 4), mode="L")
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "imgs" / "b" / "rgb.png")
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.2)
    assert info["shape"] == (3, 4, 4)
    assert info["notes"] == [f"1 color image(s) among 8 grayscale ones: every image is stored as RGB (3 "
                             f"channels; a gray value in all three): {tmp_path / 'imgs' / 'b' / 'rgb.png'}"]


def test_16_bit_images_of_a_12_bit_sensor_say_how_few_levels_are_left(tmp_path):
    """12-bit microscope images in 16-bit PNGs (0..4095) became 0..16 in 8 bits without a word."""
    for c in ("a", "b"):
        os.makedirs(tmp_path / "imgs" / c)
        for i in range(2):
            a = np.array([[0, 1000 * i, 4000, 4095]], np.uint16)
            Image.fromarray(a).save(tmp_path / "imgs" / c / f"{i}.png")
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25)
    assert info["notes"][0] == ("4 16-bit image(s) hold values of at most 4095 (12 bits): 8 bits (v / 257) keep "
                             "17 gray levels of them; to keep them all, write the images to an (N, C, H, W) "
                             "uint16 .npy, convert that, and set scale: 1/4095 (or the sensor's range)")
    with h5py.File(tmp_path / "d.h5") as f:
        assert f["train/x"][()].max() == 16
    for c in ("a", "b"):            # the full 16-bit range: nothing to say
        Image.fromarray(np.array([[0, 65535]], np.uint16)).save(tmp_path / "imgs" / c / "0.png")
        Image.fromarray(np.array([[0, 65535]], np.uint16)).save(tmp_path / "imgs" / c / "1.png")
    assert not any("16-bit" in n for n in convert(tmp_path / "imgs", tmp_path / "e.h5", test_fraction=0.25)["notes"])


def test_one_class_folder_is_said(tmp_path):
    """SOURCE one level too high (data/ holding my_images/ with the classes) must not make one
    class of every image (images in subfolders of a class are taken); one class is said."""
    make_folder(tmp_path / "data" / "my_images", classes=("a", "b"), n=3, size=(4, 4))
    with pytest.raises(DataError, match=r"data has one class folder, my_images/, and its images are in its "
                                        r"subfolders a/, b/: give .*data/my_images as SOURCE"):
        convert(tmp_path / "data", tmp_path / "d.h5", test_fraction=0.25)
    make_folder(tmp_path / "one", classes=("cat",), n=4, size=(4, 4))
    info = convert(tmp_path / "one", tmp_path / "d.h5", test_fraction=0.25)
    assert info["classes"] == ["cat"]
    assert info["notes"] == [f"{tmp_path / 'one'} has one class folder (cat/): every image is label 0; "
                             "SOURCE is the folder that holds one subfolder per class"]


def test_one_based_labels_are_said(tmp_path):
    """Labels 1..10 (SVHN, MATLAB) became 11 classes with label 0 empty; a 10-output model was
    then refused with '10 outputs but the dataset has 11 classes', far from the cause."""
    np.savez(tmp_path / "svhn.npz", x=np.zeros((40, 3, 4, 4), np.uint8), y=np.arange(40) % 10 + 1)
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "svhn.npz"), str(tmp_path / "s.h5")])
    assert r.exit_code == 0, r.output
    assert ("distnet: warning: label 0 has no image: labels 1 .. 10 look 1-based (MATLAB, SVHN), which makes "
            "11 classes; store y - 1 for 10 classes 0 .. 9") in r.output
    np.savez(tmp_path / "gap.npz", x=np.zeros((6, 1, 2, 2), np.uint8), y=np.array([0, 1, 3, 0, 1, 3]))
    assert convert(tmp_path / "gap.npz", tmp_path / "g.h5", test_fraction=0.34)["notes"] == [
        "label(s) 2 of 0 .. 3 have no image"]
    np.savez(tmp_path / "ok.npz", x=np.zeros((6, 1, 2, 2), np.uint8), y=np.array([0, 1, 2, 0, 1, 2]),
             x_test=np.zeros((3, 1, 2, 2), np.uint8), y_test=np.array([0, 1, 2]))
    with pytest.raises(DataError, match=r"ok.npz holds x, y and x_test, y_test: name the training arrays "
                                        r"x_train, y_train \(x, y alone are split by --test-fraction\)"):
        convert(tmp_path / "ok.npz", tmp_path / "o.h5")        # x_test was ignored, a test split drawn
    np.savez(tmp_path / "ok.npz", x_train=np.zeros((6, 1, 2, 2), np.uint8), y_train=np.array([0, 1, 2, 0, 1, 2]),
             x_test=np.zeros((3, 1, 2, 2), np.uint8), y_test=np.array([0, 1, 2]))
    assert convert(tmp_path / "ok.npz", tmp_path / "o.h5")["notes"] == []


def test_a_broken_link_to_a_class_folder_is_refused(tmp_path):
    """A class folder linked from storage that is not mounted was skipped without a word, and
    every later class took the label before it."""
    make_folder(tmp_path / "imgs", classes=("a", "c"), n=3, size=(4, 4))
    os.symlink(tmp_path / "unmounted" / "b", tmp_path / "imgs" / "b")
    with pytest.raises(DataError, match=r"imgs/b is a link to .*unmounted/b, which does not exist"):
        convert(tmp_path / "imgs", tmp_path / "d.h5")


def test_a_split_without_images_of_a_class_is_said(tmp_path):
    """A split drawn at random can miss a small class: its error rate then says nothing about
    that class, and nothing said so."""
    make_folder(tmp_path / "imgs", classes=("big", "rare"), n=1, size=(4, 4))
    make_folder(tmp_path / "imgs", classes=("big",), n=9, size=(4, 4), seed=1)
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.2, seed=0)
    with h5py.File(tmp_path / "d.h5") as f:
        missing = [s for s in ("train", "test") if 1 not in f[f"{s}/y"][()]]
    assert len(missing) == 1
    assert info["notes"] == [f"{missing[0]} has no image of rare/ (see distnet data info)"]
    np.savez(tmp_path / "a.npz", x_train=np.zeros((4, 1, 2, 2), np.uint8), y_train=[0, 1, 2, 0],
             x_test=np.zeros((2, 1, 2, 2), np.uint8), y_test=[0, 0])
    assert convert(tmp_path / "a.npz", tmp_path / "a.h5")["notes"] == ["test has no image of 1, 2 (see distnet data info)"]


def test_class_names_of_arrays(tmp_path):
    """Arrays had no way to name their classes: the file said 0, 1, 2 and so did data info."""
    np.savez(tmp_path / "a.npz", x_train=np.zeros((6, 1, 2, 2), np.uint8), y_train=[0, 1, 2, 0, 1, 2],
             x_test=np.zeros((3, 1, 2, 2), np.uint8), y_test=[0, 1, 2])
    (tmp_path / "names.txt").write_bytes("\ufeffairplane\r\nautomobile\r\nbird\r\n".encode())
    r = CliRunner().invoke(main, ["data", "convert", str(tmp_path / "a.npz"), str(tmp_path / "a.h5"),
                                  "--class-names", str(tmp_path / "names.txt")])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == "labels: 0 = airplane, 1 = automobile, 2 = bird"
    assert _classes_of(tmp_path / "a.h5") == ["airplane", "automobile", "bird"]
    r = CliRunner().invoke(main, ["data", "info", str(tmp_path / "a.h5")])
    assert [ln.split()[:2] for ln in r.output.splitlines()[-3:]] == [["0", "airplane"], ["1", "automobile"],
                                                                     ["2", "bird"]]
    for text, err in (("cat\ndog\n", r"label 2 is out of range for the 2 class names \(cat, dog\)"),
                      ("cat\n\ndog\n", r"names.txt:2: empty line"),
                      ("cat\ndog\ncat\n", r"names.txt:3: class name 'cat' again \(line 1\)")):
        (tmp_path / "names.txt").write_text(text)
        with pytest.raises(DataError, match=err):
            convert(tmp_path / "a.npz", tmp_path / "b.h5", class_names=tmp_path / "names.txt")
    make_folder(tmp_path / "imgs", n=2, size=(3, 3))
    with pytest.raises(OptionError, match="--class-names names the labels of arrays"):   # usage: exit 2
        convert(tmp_path / "imgs", tmp_path / "c.h5", class_names=tmp_path / "names.txt")


def test_every_unreadable_image_is_named_at_once(tmp_path):
    """Scraped datasets hold HTML pages saved as .jpg: the converter stopped at the first, so
    fifty bad files took fifty runs to find."""
    make_folder(tmp_path / "imgs", classes=("a", "b"), n=3, size=(4, 4))
    for c, i in (("a", 7), ("a", 8), ("b", 9)):
        (tmp_path / "imgs" / c / f"{i}.jpg").write_text("<html>404 Not Found</html>")
    with pytest.raises(DataError) as e:
        convert(tmp_path / "imgs", tmp_path / "d.h5")
    msg = str(e.value)
    assert msg.startswith(f"3 images cannot be read (remove or replace them): cannot read image "
                          f"{tmp_path / 'imgs' / 'a' / '7.jpg'}: UnidentifiedImageError"), msg
    assert msg.endswith(f"; and {tmp_path / 'imgs' / 'a' / '8.jpg'}, {tmp_path / 'imgs' / 'b' / '9.jpg'}"), msg


def test_one_class_in_a_folder_of_splits(tmp_path):
    make_folder(tmp_path / "imgs" / "train", classes=("cat",), n=4, size=(4, 4))
    make_folder(tmp_path / "imgs" / "test", classes=("cat",), n=1, size=(4, 4))
    info = convert(tmp_path / "imgs", tmp_path / "d.h5")
    assert info["notes"] == [f"{tmp_path / 'imgs' / 'train'} has one class folder (cat/): every image is label "
                             "0; SOURCE is the folder that holds one subfolder per class"]


def test_predictions_name_the_class_of_every_label(tmp_path):
    """distnet predict wrote label 2 and nothing else: which class folder that was took the
    converter's sorting rules to work out (folder 10 is label 2 of 0..11)."""
    from tests.tiny import CNN, experiment
    make_folder(tmp_path / "imgs", classes=("cat", "dog", "eel, the fish"), n=6, size=(12, 10), mode="L")
    convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25)
    exp = tmp_path / "e.yaml"
    exp.write_text(experiment(CNN, tmp_path / "d.h5").replace("{path:", "{scale: 1/255, path:")
                   .replace("num_epochs: 4", "num_epochs: 1"))
    run = CliRunner().invoke(main, ["run", str(exp), "--no-run-dir", "--checkpoint", str(tmp_path / "ck.h5")])
    assert run.exit_code == 0, run.output
    np.save(tmp_path / "new.npy", np.zeros((2, 1, 12, 10), np.uint8))
    for out in ("p.csv", "p.h5"):
        r = CliRunner().invoke(main, ["predict", str(exp), "--checkpoint", str(tmp_path / "ck.h5"), "--data",
                                      str(tmp_path / "new.npy"), "-o", str(tmp_path / out)])
        assert r.exit_code == 0, r.output
    import csv
    with open(tmp_path / "p.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["label", "class", "p_cat", "p_dog", "p_eel, the fish"] and len(rows) == 3
    names = ["cat", "dog", "eel, the fish"]
    assert all(r[1] == names[int(r[0])] and len(r) == 5 for r in rows[1:])
    with h5py.File(tmp_path / "p.h5") as f:
        assert list(f["labels"].attrs["class_names"]) == ["cat", "dog", "eel, the fish"]
    from distnet.data.predict_files import write_predictions
    write_predictions(str(tmp_path / "q.csv"), np.array([[0.1, 0.9, 0.0]]), np.array([1]))   # no names
    assert (tmp_path / "q.csv").read_text().splitlines() == ["label,p0,p1,p2", "1,0.1,0.9,0"]
    write_predictions(str(tmp_path / "q.csv"), np.array([[0.1, 0.0, 0.9]]), np.array([2]),
                      ["cat", "dog", 'eel "the fish"'])
    assert (tmp_path / "q.csv").read_text().splitlines() == ['label,class,p_cat,p_dog,"p_eel ""the fish"""',
                                                              '2,"eel ""the fish""",0.1,0,0.9']


def test_labels_for_a_source_that_has_its_own_are_refused(tmp_path):
    """--labels with a folder or an .npz was ignored without a word."""
    make_folder(tmp_path / "imgs", n=2, size=(3, 3))
    np.save(tmp_path / "y.npy", np.zeros(6, int))
    with pytest.raises(OptionError, match="--labels gives the labels of an .npy of images; the class folders"):
        convert(tmp_path / "imgs", tmp_path / "d.h5", labels=tmp_path / "y.npy")
    np.savez(tmp_path / "a.npz", x=np.zeros((6, 1, 2, 2), np.uint8), y=np.zeros(6, int))
    with pytest.raises(OptionError, match=r"a.npz holds its own \(y_train, or y\)"):
        convert(tmp_path / "a.npz", tmp_path / "d.h5", labels=tmp_path / "y.npy")


def test_a_valid_fraction_beside_a_given_validation_split_is_said(tmp_path):
    make_folder(tmp_path / "imgs" / "train", classes=("a", "b"), n=4, size=(3, 3))
    make_folder(tmp_path / "imgs" / "val", classes=("a", "b"), n=1, size=(3, 3))
    info = convert(tmp_path / "imgs", tmp_path / "d.h5", test_fraction=0.25, valid_fraction=0.25)
    assert info["splits"]["valid"] == 2
    assert f"valid_fraction 0.25 is not used: {tmp_path / 'imgs' / 'val'} is the validation split" in info["notes"]
    z = {f"{a}_{s}": np.zeros((4, 1, 2, 2), np.uint8) if a == "x" else np.arange(4) % 2
         for a in "xy" for s in ("train", "test", "valid")}
    np.savez(tmp_path / "a.npz", **z)
    info = convert(tmp_path / "a.npz", tmp_path / "a.h5", valid_fraction=0.25)
    assert info["notes"] == [f"valid_fraction 0.25 is not used: {tmp_path / 'a.npz'} holds the validation split "
                             "(x_valid, y_valid)"]
