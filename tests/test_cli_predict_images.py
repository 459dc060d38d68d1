"""From a folder of pictures to predictions: ``distnet data convert`` (--size, --resize pad,
--stratify), a run with ``normalize: per_channel``, and ``distnet predict`` on new pictures
(files, a flat folder, a folder per class, an unlabeled conversion) on one process and on 4
ranks of a 2x2 grid, whose CSV must equal the one-process CSV."""
import csv
import io
import os

import numpy as np
import pytest

from tests.test_cli import distnet
from tests.tiny import CNN, experiment

Image = pytest.importorskip("PIL.Image")
CLASSES = ("dark", "light", "striped")


def _picture(rng, k, h, w):
    a = rng.randint(0, 90, (h, w, 3)).astype(np.uint8)
    if k == 1:
        a += 140
    elif k == 2:
        a[::2] += 160
    return Image.fromarray(a)


def _pictures(root, n, seed, sizes=((16, 12), (20, 15), (12, 12), (18, 12))):
    """``root/<class>/<i>.png``: ``n`` pictures per class of several sizes and aspect ratios."""
    rng = np.random.RandomState(seed)
    for k, c in enumerate(CLASSES):
        os.makedirs(root / c, exist_ok=True)
        for i in range(n):
            _picture(rng, k, *sizes[i % len(sizes)]).save(root / c / f"{c}{i}.png")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("pictures")
    _pictures(d / "train_pics", 10, seed=0)
    out = distnet("data", "convert", str(d / "train_pics"), str(d / "data.h5"), "--size", "8x6", "--resize",
                  "pad", "--stratify", "--test-fraction", "0.2", check=True)
    text = experiment(CNN, d / "data.h5").replace("HDF5Dataset {", "HDF5Dataset {scale: 1/255, normalize: "
                                                                   "per_channel, ")
    exp = d / "pics.yaml"
    exp.write_text(text.replace("num_epochs: 4", "num_epochs: 2"))
    dist = d / "pics_dist.yaml"
    dist.write_text(experiment(CNN, d / "data.h5", dist=True).replace(
        "HDF5Dataset {", "HDF5Dataset {scale: 1/255, normalize: per_channel, ").replace("num_epochs: 4", "num_epochs: 2"))
    distnet("run", str(exp), "--run-dir", str(d / "run"), check=True)
    _pictures(d / "new", 3, seed=7, sizes=((10, 30), (24, 18), (8, 6)))
    return d, exp, dist, out


def _rows(path):
    return list(csv.reader(io.StringIO(path.read_text())))


def test_convert_states_the_resize_and_the_stratified_split(trained):
    d, exp, dist, out = trained
    lines = out.stdout.splitlines()
    assert lines[0] == (f"wrote {d / 'data.h5'}: train 24, test 6 images of 3x8x6 uint8, 3 classes "
                        "(dark, light, striped)")
    assert lines[1] == ("resized to 8x6 (bilinear): 12 of 30 image(s) have another aspect ratio, scaled to fit "
                        "inside it and padded with black (letterbox, --resize pad)")
    assert lines[2].startswith("test drawn stratified by class (--stratify)")
    assert lines[3] == "labels: 0 = dark/, 1 = light/, 2 = striped/"


def test_predict_a_folder_per_class_on_one_process_and_on_4_ranks(trained):
    d, exp, dist, _ = trained
    ck = str(d / "run" / "checkpoint.h5")
    one = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "new"), "-o", str(d / "one.csv"),
                  check=True)
    assert one.stdout.splitlines() == [f"{ck}: epoch 1 (written on 1 rank(s), grid 1x1), predicted on 1 rank(s), "
                                       "grid 1x1", f"{d / 'one.csv'}: 9 images, 3 classes"]
    four = distnet("predict", str(dist), "--checkpoint", str(d / "run"), "--data", str(d / "new"), "-o",
                   str(d / "four.csv"), n=4, check=True)   # the run directory: its last (no best kept)
    assert four.stdout.splitlines() == [
        f"{d / 'run'}: its last checkpoint, {ck} (the run kept no best checkpoint: checkpoint keep_best: true keeps "
        "one)", f"{ck}: epoch 1 (written on 1 rank(s), grid 1x1), predicted on 4 rank(s), grid 2x2",
        f"{d / 'four.csv'}: 9 images, 3 classes"]
    a, b = _rows(d / "one.csv"), _rows(d / "four.csv")
    assert a[0] == ["file", "label", "class", "true_label", "true_class", "p_dark", "p_light", "p_striped"] == b[0]
    assert [r[0] for r in a[1:]] == [f"{c}/{c}{i}.png" for c in CLASSES for i in range(3)]
    assert [r[3:5] for r in a[1:]] == [[str(k), c] for k, c in enumerate(CLASSES) for _ in range(3)]
    assert [r[:5] for r in a] == [r[:5] for r in b]
    pa, pb = (np.array([[float(v) for v in r[5:]] for r in rows[1:]]) for rows in (a, b))
    np.testing.assert_allclose(pb, pa, rtol=1e-9, atol=1e-12)   # float64, another summation order
    assert [CLASSES[int(r[1])] for r in a[1:]] == [r[2] for r in a[1:]]
    np.testing.assert_array_equal(pa.argmax(axis=1), [int(r[1]) for r in a[1:]])


def test_pictures_are_decoded_as_the_converter_decoded_the_training_images(trained, tmp_path):
    """The test split's own pictures, predicted from their files, give the outputs of the same
    images read from the converted file (pad resize and normalization alike)."""
    import h5py
    d, exp, dist, _ = trained
    ck = str(d / "run" / "checkpoint.h5")
    folder = d / "train_pics" / "light"
    pictures = sorted(folder.iterdir())[:4]
    with h5py.File(d / "data.h5") as f:     # the converter's pixels of the same files, decoded by hand
        stored = np.concatenate([f["train/x"][()], f["test/x"][()]])
    from distnet.convert.decode import decode_image
    mine = np.stack([decode_image(Image, str(p), 3, (8, 6), resize="pad") for p in pictures])
    assert all(any((m == s).all() for s in stored) for m in mine)
    np.save(tmp_path / "mine.npy", mine)
    distnet("predict", str(exp), "--checkpoint", ck, *sum((["--data", str(p)] for p in pictures), []), "-o",
            str(tmp_path / "files.csv"), check=True)
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "mine.npy"), "-o",
            str(tmp_path / "npy.csv"), check=True)
    files, npy = _rows(tmp_path / "files.csv"), _rows(tmp_path / "npy.csv")
    assert files[0] == ["file", "label", "class", "p_dark", "p_light", "p_striped"]   # no class folders: no truth
    assert [r[0] for r in files[1:]] == [str(p) for p in pictures]
    assert [r[1:] for r in files[1:]] == [r for r in npy[1:]]


def test_an_unlabeled_conversion_predicts_with_its_file_names(trained, tmp_path):
    d, exp, dist, _ = trained
    ck = str(d / "run" / "checkpoint.h5")
    distnet("data", "convert", str(d / "new"), str(tmp_path / "u.h5"), "--unlabeled", "--like", str(d / "data.h5"),
            check=True)
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "u.h5"), "-o",
            str(tmp_path / "u.csv"), check=True)
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "new"), "-o", str(tmp_path / "f.csv"),
            check=True)
    u, f = _rows(tmp_path / "u.csv"), _rows(tmp_path / "f.csv")
    assert u[0] == ["file", "label", "class", "p_dark", "p_light", "p_striped"]
    assert [r[:3] + r[5:] for r in f[1:]] == u[1:]
    import h5py
    distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "new"), "-o", str(tmp_path / "f.h5"),
            check=True)
    with h5py.File(tmp_path / "f.h5") as h:
        assert [n.decode() for n in h["files"][()]] == [r[0] for r in f[1:]]
        assert h["true_labels"][()].tolist() == [int(r[3]) for r in f[1:]]
        assert [n.decode() for n in h["true_classes"][()]] == [r[4] for r in f[1:]]
        assert h["labels"][()].tolist() == [int(r[1]) for r in f[1:]]
    (d / "new" / "loose.png").write_bytes((d / "new" / "dark" / "dark0.png").read_bytes())
    try:                                    # a picture outside the class folders: no true class
        distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "new"), "-o", str(tmp_path / "g.csv"),
                check=True)
    finally:
        os.remove(d / "new" / "loose.png")
    g = _rows(tmp_path / "g.csv")
    loose = next(r for r in g if r[0] == "loose.png")      # sorted by path among the others
    assert loose[3:5] == ["", ""] and loose[5:] == g[1][5:] and g[1][0] == "dark/dark0.png"
    assert [r for r in g if r[0] != "loose.png"] == f


def test_pictures_without_a_recipe_are_refused_on_every_rank(trained, tmp_path):
    import h5py
    d, exp, dist, _ = trained
    with h5py.File(d / "data.h5") as f, h5py.File(tmp_path / "plain.h5", "w") as g:
        for k in ("train/x", "train/y", "test/x", "test/y"):
            g[k] = f[k][()]
        g.attrs["channel_mean"], g.attrs["channel_std"] = f.attrs["channel_mean"], f.attrs["channel_std"]
    plain = tmp_path / "plain.yaml"
    plain.write_text(exp.read_text().replace(str(d / "data.h5"), str(tmp_path / "plain.h5")))
    ck = str(d / "run" / "checkpoint.h5")
    bad = distnet("predict", str(plain), "--checkpoint", ck, "--data", str(d / "new"), "-o", str(tmp_path / "p.csv"))
    assert bad.returncode == 2 and "decoding recipe of pictures: training {\"size\": [8, 6], \"resize\": \"pad\", " \
        "\"channels\": 3}, experiment none" in bad.stderr, bad.stderr    # the checkpoint knows the training's
    for n, yaml in ((1, plain), (2, None)):
        if yaml is None:
            yaml = tmp_path / "plain_dist.yaml"
            yaml.write_text(dist.read_text().replace(str(d / "data.h5"), str(tmp_path / "plain.h5")))
        bad = distnet("predict", str(yaml), "--checkpoint", ck, "--data", str(d / "new"), "-o",
                      str(tmp_path / "p.csv"), "--preprocessing", "experiment", n=n)
        assert bad.returncode == 1, bad.stderr
        assert (f"--data gives pictures, which must be decoded as the training images were, but the data set "
                f"{tmp_path / 'plain.h5'} keeps none") in bad.stderr
        assert "give --recipe DATA.h5" in bad.stderr and "Traceback" not in bad.stderr
        assert bad.stderr.count("distnet: error: --data gives pictures") == n     # every rank says it
        assert not (tmp_path / "p.csv").exists()
    ok = distnet("predict", str(plain), "--checkpoint", ck, "--data", str(d / "new"), "--recipe", str(d / "data.h5"),
                 "-o", str(tmp_path / "p.csv"), "--preprocessing", "experiment", check=True)
    assert ok.returncode == 0 and len(_rows(tmp_path / "p.csv")) == 10
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(d / "new"), "--data",
                  str(tmp_path / "plain.h5"), "-o", str(tmp_path / "q.csv"))
    assert bad.returncode == 1 and "an HDF5, .npy or IDX file of images is given alone" in bad.stderr
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "plain.h5"), "--recipe",
                  str(d / "data.h5"), "-o", str(tmp_path / "q.csv"))
    assert bad.returncode == 2 and "--recipe decodes pictures (image files, folders)" in bad.stderr
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "none"), "-o",
                  str(tmp_path / "q.csv"))
    assert bad.returncode == 1 and f"--data {tmp_path / 'none'}: no such file or folder" in bad.stderr
    os.makedirs(tmp_path / "empty")
    bad = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(tmp_path / "empty"), "-o",
                  str(tmp_path / "q.csv"))
    assert bad.returncode == 1 and "the folder holds no images (PNG, JPEG, ...)" in bad.stderr


def test_the_python_api_predicts_as_the_command(trained, tmp_path):
    """distnet.api.load + predict on picture folders, files and arrays gives distnet predict's
    rows, by the training's recipe and normalize statistics that the checkpoint keeps."""
    from distnet.api import load
    d, exp, dist, _ = trained
    model = load(d / "run")                     # a run directory: its last checkpoint (no best kept)
    assert (model.epoch, model.class_names, model.image_shape) == (1, list(CLASSES), (3, 8, 6))
    assert repr(model) == (f"<distnet model {d / 'run' / 'checkpoint.h5'}: epoch 1, images 3x8x6, classes dark, "
                           "light, striped>")
    result = model.predict(d / "new")
    distnet("predict", str(exp), "--checkpoint", str(d / "run"), "--data", str(d / "new"), "-o",
            str(tmp_path / "p.csv"), check=True)
    rows = _rows(tmp_path / "p.csv")
    assert result.files == [r[0] for r in rows[1:]] and result.classes == [r[2] for r in rows[1:]]
    assert result.true_classes == [r[4] for r in rows[1:]] and len(result) == 9
    np.testing.assert_allclose(result.probabilities, [[float(v) for v in r[5:]] for r in rows[1:]], rtol=1e-8)
    assert result.rows()[0] == {"file": "dark/dark0.png", "label": int(rows[1][1]), "class": rows[1][2],
                                "true_class": "dark", **{f"p_{c}": result.probabilities[0, k]
                                                         for k, c in enumerate(CLASSES)}}
    from distnet.convert.decode import decode_image
    files = [str(d / "new" / "light" / f"light{i}.png") for i in range(3)]
    x = np.stack([decode_image(Image, f, 3, (8, 6), resize="pad") for f in files])
    by_file, by_array = model.predict(files), model.predict(x)
    np.testing.assert_array_equal(by_file.probabilities, by_array.probabilities)
    assert by_array.files is None and by_file.files == files
    np.testing.assert_array_equal(model.predict(x[0]).probabilities, by_array.probabilities[:1])
    from distnet.errors import DataError
    with pytest.raises(DataError, match=r"it looks like \(N, H, W, C\): give x.transpose\(0, 3, 1, 2\)"):
        model.predict(x.transpose(0, 2, 3, 1))
    gray = tmp_path / "gray.png"
    Image.open(files[0]).convert("L").save(gray)
    with pytest.raises(DataError, match="gray.png is grayscale \\(1 channel\\) and the model takes RGB"):
        model.predict([str(gray)])
    with pytest.raises(DataError, match=r"\(skip_bad=True predicts the others; convert_channels=True converts"):
        model.predict([str(gray)])      # the keywords that go on, not the command's flags
    converted = model.predict([str(gray)], convert_channels=True)
    assert converted.converted == [str(gray)] and len(converted) == 1


def test_gray_pictures_for_an_rgb_model_are_refused_or_converted_and_counted(trained, tmp_path):
    d, exp, dist, _ = trained
    ck = str(d / "run" / "checkpoint.h5")
    new = tmp_path / "new"
    for c in CLASSES:
        os.makedirs(new / c)
        Image.open(d / "new" / c / f"{c}0.png").convert("L").save(new / c / f"{c}0.png")
        Image.open(d / "new" / c / f"{c}1.png").save(new / c / f"{c}1.png")
    (new / "dark" / "broken.png").write_bytes(b"not a picture")
    bad = distnet("predict", str(dist), "--checkpoint", ck, "--data", str(new), "-o", str(tmp_path / "p.csv"), n=2)
    assert bad.returncode == 1 and not (tmp_path / "p.csv").exists()
    err = [line for line in bad.stderr.splitlines() if "distnet: error: " in line]
    assert len(err) == 2 and err[0].split("] ", 1)[1] == err[1].split("] ", 1)[1]   # every rank says it
    assert "4 of 7 picture(s) cannot be used (--skip-bad predicts the others; --convert-channels converts" in err[0]
    assert all(f"{new / c / (c + '0.png')} is grayscale (1 channel)" in err[0] for c in CLASSES)
    ok = distnet("predict", str(exp), "--checkpoint", ck, "--data", str(new), "-o", str(tmp_path / "p.csv"),
                 "--skip-bad", "--convert-channels", check=True)
    assert ok.stdout.splitlines()[-1] == f"{tmp_path / 'p.csv'}: 6 images, 3 classes"
    assert ok.stderr.splitlines() == [
        f"distnet: warning: skipped 1 of 7 picture(s) (--skip-bad): cannot read image {new / 'dark' / 'broken.png'}: "
        "UnidentifiedImageError: cannot identify image file " + repr(str(new / 'dark' / 'broken.png')),
        "distnet: warning: converted 3 of 7 picture(s) from grayscale to RGB (a gray value in all three channels) "
        f"(--convert-channels): {new / 'dark' / 'dark0.png'}, {new / 'light' / 'light0.png'}, "
        f"{new / 'striped' / 'striped0.png'}"]
    assert [r[0] for r in _rows(tmp_path / "p.csv")[1:]] == [f"{c}/{c}{i}.png" for c in CLASSES for i in (0, 1)]


def test_the_python_page_shows_the_script_it_runs():
    """docs/python.md runs experiments/predict_pictures.py and shows its code: the two stay one."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    code = (root / "experiments" / "predict_pictures.py").read_text().split('"""', 2)[2].strip()
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs" / "python.md").read_text(), re.S)
    assert code + "\n" in blocks
