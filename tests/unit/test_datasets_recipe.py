"""What ``distnet data convert`` does to aspect ratios (--resize stretch / crop / pad), the
stratified split, the decoding recipe and per-channel statistics kept with the data set, the
dataset key ``normalize``, unlabeled conversions and ``distnet data stats``."""
import json
import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from distnet.cli.main import main
from distnet.config import load_experiment_text
from distnet.datasets import HDF5Dataset
from distnet.convert import convert
from distnet.convert.decode import fit_image
from distnet.convert.pictures import decode_for_model
from distnet.convert.folders import list_pictures
from distnet.convert.recipe import read_recipe
from distnet.data.stats import channel_stats, read_stats
from distnet.errors import ConfigError, DataError, OptionError

Image = pytest.importorskip("PIL.Image")


def _folder(root, sizes, classes=("a", "b"), seed=0):
    """``root/<class>/<i>.png`` RGB images of the sizes ``sizes`` (one per image, per class)."""
    rng = np.random.RandomState(seed)
    for c in classes:
        os.makedirs(root / c, exist_ok=True)
        for i, (h, w) in enumerate(sizes):
            Image.fromarray(rng.randint(0, 256, (h, w, 3)).astype(np.uint8)).save(root / c / f"{i}.png")
    return root


def test_resize_modes_against_pillow_by_hand():
    """crop: the middle of the image at the target aspect ratio, scaled; pad: scaled to fit,
    centered on black; stretch: Pillow's plain resize; an image of the size already: as is."""
    a = np.arange(6 * 12 * 3, dtype=np.uint8).reshape(6, 12, 3)
    im = Image.fromarray(a)
    stretch = np.asarray(fit_image(Image, im, (4, 4), "stretch"))
    np.testing.assert_array_equal(stretch, np.asarray(im.resize((4, 4), Image.BILINEAR)))
    crop = np.asarray(fit_image(Image, im, (3, 3), "crop")).astype(int)   # the middle 6x6, halved
    by_hand = np.asarray(im.crop((3, 0, 9, 6)).resize((3, 3), Image.BILINEAR)).astype(int)
    assert np.abs(crop - by_hand).max() <= 1    # Pillow rounds a box resize's weights its own way
    pad = np.asarray(fit_image(Image, im, (4, 4), "pad"))        # 6x12 -> 2x4, rows 1..2 of 4
    np.testing.assert_array_equal(pad[1:3], np.asarray(im.resize((4, 2), Image.BILINEAR)))
    assert not pad[0].any() and not pad[3].any()
    assert fit_image(Image, im, (6, 12), "pad") is im
    with pytest.raises(OptionError, match="resize must be one of stretch, crop, pad"):
        fit_image(Image, im, (4, 4), "squash")


@pytest.mark.parametrize("mode", [None, "crop", "pad"])
def test_convert_says_what_size_did_to_aspect_ratios_and_keeps_the_recipe(tmp_path, mode):
    src = _folder(tmp_path / "imgs", [(8, 8), (8, 16), (16, 8), (4, 4), (10, 10)])
    info = convert(src, tmp_path / "d.h5", size="4x4", resize=mode, test_fraction=0.2)
    assert info["resize"].startswith("resized to 4x4 (bilinear): 4 of 10 image(s) have another aspect ratio, ")
    want = {None: "stretched to it, distorted (--resize stretch, the default; --resize crop or pad keep the "
                  "aspect ratio)",
            "crop": "scaled to cover it and center-cropped (--resize crop)",
            "pad": "scaled to fit inside it and padded with black (letterbox, --resize pad)"}[mode]
    assert info["resize"].endswith(want)
    recipe = read_recipe(tmp_path / "d.h5")
    assert recipe == {"version": 1, "size": (4, 4), "resize": mode or "stretch", "channels": 3,
                      "class_names": ["a", "b"]}
    # the recipe decodes a picture exactly as the converter stored it
    with h5py.File(tmp_path / "d.h5") as f:
        stored = {f["train/x"][i].tobytes() for i in range(len(f["train/x"]))}
        stored |= {f["test/x"][i].tobytes() for i in range(len(f["test/x"]))}
    pictures = list_pictures([str(src)])
    assert [(name, true) for _, name, true in pictures][:2] == [("a/0.png", "a"), ("a/1.png", "a")]
    decoded = decode_for_model([path for path, _, _ in pictures], recipe, "d.h5")
    assert {d.tobytes() for d in decoded.x} == stored and decoded.kept == list(range(len(pictures)))


def test_no_size_keeps_a_recipe_that_refuses_other_sizes(tmp_path):
    src = _folder(tmp_path / "imgs", [(5, 6)] * 3)
    info = convert(src, tmp_path / "d.h5", test_fraction=0.34)
    assert info["resize"] is None
    recipe = read_recipe(tmp_path / "d.h5")
    assert recipe["resize"] is None and recipe["size"] == (5, 6)
    Image.fromarray(np.zeros((7, 6, 3), np.uint8)).save(tmp_path / "big.png")
    with pytest.raises(DataError, match=r"big.png is 7x6 but the training images of d.h5 were all 5x6 and "
                                        r"converted without --size, so there is no resize to repeat: resize "
                                        r"the picture to that size, or give --recipe DATA.h5, a data set "
                                        r"converted with --size 5x6"):
        decode_for_model([str(tmp_path / "big.png")], recipe, "d.h5")


def test_resize_without_size_and_arrays_without_recipe(tmp_path):
    src = _folder(tmp_path / "imgs", [(5, 6)] * 3)
    with pytest.raises(OptionError, match="--resize says how --size treats another aspect ratio"):
        convert(src, tmp_path / "d.h5", resize="crop")
    np.savez(tmp_path / "a.npz", x=np.zeros((10, 1, 2, 2), np.uint8), y=np.arange(10) % 2)
    convert(tmp_path / "a.npz", tmp_path / "a.h5")
    assert read_recipe(tmp_path / "a.h5") is None and read_stats(tmp_path / "a.h5") is not None


def _labels(path):
    with h5py.File(path) as f:
        return {s: f[f"{s}/y"][()] for s in ("train", "valid", "test") if s in f}


def test_stratify_puts_every_class_in_every_split_in_proportion(tmp_path):
    """90 images of class 0, 10 of class 1: a plain 10% draw can miss class 1; --stratify
    takes 9 + 1 for test, 9 + 1 for valid, every split in the draw's shuffled order."""
    y = np.array([0] * 90 + [1] * 10)
    np.savez(tmp_path / "a.npz", x=np.arange(100, dtype=np.uint8).reshape(100, 1, 1, 1), y=y)
    info = convert(tmp_path / "a.npz", tmp_path / "s.h5", test_fraction=0.1, valid_fraction=0.1, seed=4,
                   stratify=True)
    got = _labels(tmp_path / "s.h5")
    assert {s: np.bincount(v).tolist() for s, v in got.items()} == {"train": [72, 8], "valid": [9, 1],
                                                                   "test": [9, 1]}
    assert info["split"].startswith("test and valid drawn stratified by class (--stratify)")
    with h5py.File(tmp_path / "s.h5") as f:     # images follow their labels, the rows the draw's order
        x = np.concatenate([f[f"{s}/x"][()].ravel() for s in ("train", "valid", "test")])
        assert sorted(x.tolist()) == list(range(100))
        np.testing.assert_array_equal(y[x], np.concatenate(list(got.values())))
        perm = np.random.RandomState(4).permutation(100)
        rank = np.argsort(perm)
        assert all(np.all(np.diff(rank[f[f"{s}/x"][()].ravel()]) > 0) for s in ("train", "valid", "test"))


def test_stratify_names_a_class_too_small_for_a_split(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((21, 1, 1, 1), np.uint8), y=np.array([0] * 20 + [1]))
    info = convert(tmp_path / "a.npz", tmp_path / "s.h5", test_fraction=0.2, stratify=True)
    assert info["notes"] == ["test has no image of 1 (see distnet data info)"]
    assert np.bincount(_labels(tmp_path / "s.h5")["test"]).tolist() == [4]


def test_stratify_on_the_command_line_for_image_folders(tmp_path):
    src = _folder(tmp_path / "imgs", [(3, 3)] * 10, classes=("big", "small"))
    for i in range(2, 10):
        os.remove(src / "small" / f"{i}.png")
    r = CliRunner().invoke(main, ["data", "convert", str(src), str(tmp_path / "d.h5"), "--stratify",
                                  "--test-fraction", "0.5"])
    assert r.exit_code == 0, r.output
    assert "test drawn stratified by class (--stratify): each class in proportion" in r.output
    assert {s: np.bincount(v).tolist() for s, v in _labels(tmp_path / "d.h5").items()} == {
        "train": [5, 1], "test": [5, 1]}


def test_channel_stats_streamed_in_blocks_equal_numpy_in_one_go():
    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, (37, 3, 5, 4)).astype(np.uint8)
    mean, std = channel_stats(x, block_bytes=5 * 3 * 5 * 4 * 8)      # 5 images per block
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(axis=(0, 2, 3)), rtol=1e-14)
    np.testing.assert_allclose(std, x.astype(np.float64).std(axis=(0, 2, 3)), rtol=1e-13)
    big = np.full((4, 1, 2, 2), 1e9) + np.arange(16).reshape(4, 1, 2, 2)    # no cancellation
    np.testing.assert_allclose(channel_stats(big, block_bytes=32)[1], np.arange(16).std(), rtol=1e-12)


def _experiment(path, keys):
    return load_experiment_text(f"""!obj:distnet.experiments.FitPredictErrorExperiment {{
  backend: !obj:distnet.backends.Numpy64 {{rng_seed: 5}},
  datasets: [!obj:distnet.datasets.HDF5Dataset {{path: {path}, {keys}}}],
  model: !obj:distnet.models.Convnet {{num_epochs: 1, batch_size: 4, learning_rate: 0.1, layers: [
      !obj:distnet.layers.Layer {{name: out, nout: 2, weight_init: {{type: normal, scale: 0.1}}, activation: !obj:distnet.activations.Logistic {{}}}}]}},
}}""")


def test_normalize_applies_the_train_statistics_after_scale(tmp_path):
    src = _folder(tmp_path / "imgs", [(4, 5)] * 6)
    convert(src, tmp_path / "d.h5", test_fraction=0.25)
    with h5py.File(tmp_path / "d.h5") as f:
        train = f["train/x"][()].astype(np.float64)
        test = f["test/x"][()].astype(np.float64)
    m, s = train.mean(axis=(0, 2, 3)), train.std(axis=(0, 2, 3))
    ds = HDF5Dataset(path=str(tmp_path / "d.h5"), scale="1/255", normalize="per_channel")
    data = ds.load(dtype=np.float64)
    scale = 1 / 255
    c = (1, -1, 1, 1)
    want = (test * scale - (m * scale).reshape(c)) / (s * scale).reshape(c)
    np.testing.assert_allclose(data["test"][0], want, rtol=1e-13)
    assert abs(data["train"][0].mean()) < 1e-12 and np.allclose(data["train"][0].std(axis=(0, 2, 3)), 1)
    # the same as giving those numbers as mean and std
    by_hand = HDF5Dataset(path=str(tmp_path / "d.h5"), scale="1/255", mean=list(m * scale), std=list(s * scale))
    np.testing.assert_array_equal(by_hand.load(dtype=np.float64)["test"][0], data["test"][0])
    np.testing.assert_array_equal(ds.prepare_images(test.astype(np.uint8)), data["test"][0])
    assert HDF5Dataset(path=str(tmp_path / "d.h5"), scale=1, normalize=True).normalize == "per_channel"
    assert HDF5Dataset(path=str(tmp_path / "d.h5"), scale=1, normalize="false").normalize is None
    exp = _experiment(tmp_path / "d.h5", "scale: 1/255, normalize: per_channel")
    exp.check()


def test_normalize_refusals_name_the_key(tmp_path):
    src = _folder(tmp_path / "imgs", [(4, 5)] * 6)
    convert(src, tmp_path / "d.h5", test_fraction=0.25)
    with pytest.raises(ConfigError, match="normalize.*give either it or mean and std"):
        _experiment(tmp_path / "d.h5", "scale: 1/255, normalize: per_channel, mean: 0.5")
    with pytest.raises(ConfigError, match="expected per_channel, true or false, got 'global'"):
        _experiment(tmp_path / "d.h5", "scale: 1/255, normalize: global")
    with h5py.File(tmp_path / "h.h5", "w") as f:        # written by hand: no statistics
        f["train/x"], f["train/y"] = np.ones((4, 1, 2, 2), np.uint8), np.array([0, 1, 0, 1])
        f["test/x"], f["test/y"] = np.ones((2, 1, 2, 2), np.uint8), np.array([0, 1])
    exp = _experiment(tmp_path / "h.h5", "scale: 1/255, normalize: per_channel")
    with pytest.raises(ConfigError, match=r"h.h5 keeps no per-channel statistics .*distnet data stats --write") as e:
        exp.check()
    assert e.value.where and "normalize" in str(e.value)
    r = CliRunner().invoke(main, ["data", "stats", str(tmp_path / "h.h5"), "--write"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        f"{tmp_path / 'h.h5'}: no convert recipe (not converted from an image folder)",
        "per-channel mean 1, std 0 (train images as stored; the dataset key normalize: per_channel applies them); "
        "stored in the file"]
    exp = _experiment(tmp_path / "h.h5", "scale: 1/255, normalize: per_channel")
    with pytest.raises(ConfigError, match="channel 0 of the training images of .*h.h5 has standard deviation 0 "
                                          r"\(every value 1\)"):
        exp.check()


def test_normalize_of_numpy_files_says_to_convert_them(tmp_path):
    from distnet.datasets import NumpyDataset
    np.savez(tmp_path / "a.npz", x_train=np.ones((4, 1, 2, 2), np.uint8), y_train=np.array([0, 1, 0, 1]),
             x_test=np.ones((2, 1, 2, 2), np.uint8), y_test=np.array([0, 1]))
    with pytest.raises(ConfigError, match="NumpyDataset's files keep none: convert them"):
        NumpyDataset(path=str(tmp_path / "a.npz"), scale=1, normalize="per_channel").check()


def test_data_stats_prints_what_convert_stored(tmp_path):
    src = _folder(tmp_path / "imgs", [(4, 4), (4, 8)])
    convert(src, tmp_path / "d.h5", size="4x4", resize="pad", test_fraction=0.5)
    r = CliRunner().invoke(main, ["data", "stats", str(tmp_path / "d.h5")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == (f"{tmp_path / 'd.h5'}: images decoded as 3 channel(s), pad to 4x4 (distnet predict repeats "
                        "it on new pictures)")
    mean, std = read_stats(tmp_path / "d.h5")
    assert lines[1].startswith(f"per-channel mean {mean[0]:.6g}, {mean[1]:.6g}, {mean[2]:.6g}, std {std[0]:.6g}, ")


def test_unlabeled_conversion_with_the_recipe_of_a_data_set(tmp_path):
    src = _folder(tmp_path / "imgs", [(8, 8), (8, 16)])
    convert(src, tmp_path / "d.h5", size="4x4", resize="crop", test_fraction=0.5)
    new = tmp_path / "new"
    os.makedirs(new / "sub")
    Image.fromarray(np.full((6, 9, 3), 200, np.uint8)).save(new / "x.png")
    Image.fromarray(np.full((9, 6), 50, np.uint8)).save(new / "sub" / "y.jpg")
    (new / "notes.txt").write_text("not an image")
    r = CliRunner().invoke(main, ["data", "convert", str(new), str(tmp_path / "u.h5"), "--unlabeled", "--like",
                                  str(tmp_path / "d.h5")])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [     # the gray picture made RGB is said, as the converter says it
        f"distnet: warning: 1 of 2 picture(s) converted to the 3 channel(s) of {tmp_path / 'd.h5'}'s images: "
        f"{new / 'sub' / 'y.jpg'}",
        f"wrote {tmp_path / 'u.h5'}: 2 unlabeled images of 3x4x4 uint8 (datasets x and files; distnet predict "
        f"--data {tmp_path / 'u.h5'})",
        f"decoded as the images of {tmp_path / 'd.h5'}: 3 channel(s), crop to 4x4"]
    with h5py.File(tmp_path / "u.h5") as f:
        assert [n.decode() for n in f["files"][()]] == ["sub/y.jpg", "x.png"]
        x = f["x"][()]
        assert json.loads(f.attrs["image_recipe"])["resize"] == "crop"
    assert (x[1] == 200).all() and (x[0] == 50).all()   # gray became RGB, as the training images
    bad = CliRunner().invoke(main, ["data", "convert", str(new), str(tmp_path / "v.h5"), "--like",
                                    str(tmp_path / "d.h5")])
    assert bad.exit_code == 2 and "--like gives an unlabeled conversion the recipe" in bad.output
    bad = CliRunner().invoke(main, ["data", "convert", str(new), str(tmp_path / "v.h5"), "--unlabeled",
                                    "--stratify"])
    assert bad.exit_code == 2 and "--stratify: not options of an unlabeled conversion" in bad.output


def test_pictures_of_another_channel_count_and_bad_files_are_named_together(tmp_path):
    """A grayscale picture given to an RGB model was copied into three channels without a word,
    and only the first unreadable file was named; now every one is, or they are skipped."""
    src = _folder(tmp_path / "imgs", [(4, 4)] * 3)
    convert(src, tmp_path / "d.h5", test_fraction=0.34)
    recipe = read_recipe(tmp_path / "d.h5")
    new = tmp_path / "new"
    os.makedirs(new)
    rgb = np.random.RandomState(1).randint(0, 256, (4, 4, 3)).astype(np.uint8)
    Image.fromarray(rgb).save(new / "0.png")
    Image.fromarray(rgb[..., 0]).save(new / "1.png")          # grayscale
    (new / "2.png").write_bytes(b"not a picture")
    Image.fromarray(rgb[:3]).save(new / "3.png")               # 3x4: the training resized none
    paths = [str(new / f"{i}.png") for i in range(4)]
    with pytest.raises(DataError) as e:
        decode_for_model(paths, recipe, "d.h5")
    message = str(e.value)
    assert message.startswith("3 of 4 picture(s) cannot be used (--skip-bad predicts the others; "
                              "--convert-channels converts the channel count): ")
    assert f"{paths[1]} is grayscale (1 channel) and the model takes RGB (3 channels)" in message
    assert f"cannot read image {paths[2]}" in message and f"{paths[3]} is 3x4 but the training images" in message
    kept = decode_for_model(paths, recipe, "d.h5", skip_bad=True)
    assert kept.kept == [0] and [p for p, _ in kept.skipped] == paths[1:] and kept.converted == []
    np.testing.assert_array_equal(kept.x[0], rgb.transpose(2, 0, 1))
    both = decode_for_model(paths, recipe, "d.h5", skip_bad=True, convert_channels=True)
    assert both.kept == [0, 1] and both.converted == [paths[1]]
    np.testing.assert_array_equal(both.x[1], np.repeat(rgb[None, :, :, 0], 3, axis=0))   # gray in all three
    gray = dict(recipe, channels=1)
    with pytest.raises(DataError, match=r"0.png is color \(mode RGB, 3 channels\) and the model takes grayscale"):
        decode_for_model(paths[:1], gray, "d.h5")


def test_a_folder_given_as_a_path_object_is_walked_as_its_text(tmp_path):
    """The Python API takes pathlib paths: ``walk(Path)`` once skipped its own top folder."""
    from distnet.convert.folders import walk
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").write_bytes(b"")
    assert walk(tmp_path) == walk(str(tmp_path)) == ["a/x.png"]
