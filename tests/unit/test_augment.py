"""Augmentation of the training split (distnet.data.augment): each transform against a direct
numpy oracle (np.pad, a slice, a flip), the draws against their stated hash function, tiles and
their reach, and the dataset hooks (in memory and streamed, train only, config errors)."""
import numpy as np
import pytest

from distnet.config import load_experiment_text
from distnet.data.augment import Augmentation, draw_hash
from distnet.errors import ConfigError
from distnet.geometry import tile_of
from distnet.geometry.partition import Box
from tests.tiny import CNN, experiment, write_data

M64 = (1 << 64) - 1


def _mix_int(v):
    """SplitMix64's finaliser on a Python int (the oracle of the vectorised uint64 code)."""
    v = (v + 0x9E3779B97F4A7C15) & M64
    v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & M64
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & M64
    return v ^ (v >> 31)


def _oracle(img, d, i, aug):
    """Image ``img`` (C, H, W) augmented by draw ``i`` of ``d``: pad, crop, then flip."""
    p = aug.padding
    if aug.mode == "constant":
        padded = np.pad(img, ((0, 0), (p, p), (p, p)), mode="constant", constant_values=aug.fill)
    else:
        padded = np.pad(img, ((0, 0), (p, p), (p, p)), mode=aug.mode)
    H, W = img.shape[1:]
    oy, ox = d["offset"][i]
    out = padded[:, oy:oy + H, ox:ox + W]
    if d["flip"][i, 1]:
        out = out[:, :, ::-1]
    if d["flip"][i, 0]:
        out = out[:, ::-1, :]
    return out


def _images(n=40, shape=(2, 7, 9), seed=0):
    return np.random.RandomState(seed).standard_normal((n,) + shape)


def test_draw_hash_is_the_stated_function():
    idx = np.array([0, 1, 7, 123456789, 2 ** 40])
    for seed, epoch, stream in ((0, 0, 0), (5, 3, 1), (2 ** 63 + 11, 17, 3), (-1, 2, 2)):
        want = [_mix_int(_mix_int(_mix_int(_mix_int(seed & M64) ^ epoch) ^ int(i)) ^ stream) for i in idx]
        assert draw_hash(seed, epoch, idx, stream).tolist() == want


def test_draws_follow_the_hash_and_differ_across_epochs_and_images():
    aug = Augmentation.from_config({"crop": 4, "flip": "both"})
    idx = np.arange(2000)
    plane = (12, 10)
    d = aug.draws(7, 3, idx, plane)
    assert d["offset"][:, 0].tolist() == (draw_hash(7, 3, idx, 0) % np.uint64(9)).astype(int).tolist()
    assert d["offset"][:, 1].tolist() == (draw_hash(7, 3, idx, 1) % np.uint64(9)).astype(int).tolist()
    assert d["flip"][:, 1].tolist() == [bool(h >> 63) for h in draw_hash(7, 3, idx, 2).tolist()]
    assert d["flip"][:, 0].tolist() == [bool(h >> 63) for h in draw_hash(7, 3, idx, 3).tolist()]
    for k in (0, 1):          # every offset occurs, roughly uniformly, and images differ
        assert sorted(set(d["offset"][:, k].tolist())) == list(range(9))
        assert np.bincount(d["offset"][:, k]).min() > 2000 / 9 * 0.7
        assert 0.4 < d["flip"][:, k].mean() < 0.6
    other = aug.draws(7, 4, idx, plane)     # the next epoch draws anew for most images
    assert (other["offset"] != d["offset"]).any(1).mean() > 0.8 and (other["flip"] != d["flip"]).any(1).mean() > 0.5
    again = aug.draws(7, 3, idx[::-1], plane)   # a function of the index only, not of the order asked
    assert again["offset"][::-1].tolist() == d["offset"].tolist()
    assert (aug.draws(8, 3, idx, plane)["offset"] != d["offset"]).any(1).mean() > 0.8    # the seed matters
    own = Augmentation.from_config({"crop": 4, "seed": 99})            # ...and a mapping's own seed wins
    assert own.draws(7, 3, idx, plane)["offset"].tolist() == own.draws(1, 3, idx, plane)["offset"].tolist()


@pytest.mark.parametrize("cfg", [
    {"crop": 2},
    {"crop": {"padding": 3, "fill": -0.5}},
    {"crop": {"padding": 2, "mode": "reflect"}},
    {"crop": {"padding": 3, "mode": "edge"}},
    {"flip": "horizontal"},
    {"flip": "vertical"},
    {"crop": {"padding": 4, "mode": "reflect"}, "flip": "both"},
    {"crop": 8, "flip": "horizontal"},          # padding wider than the image
    {"crop": {"padding": 8, "mode": "reflect"}, "flip": "both"},
    {"crop": {"padding": 10, "mode": "edge"}, "flip": "vertical"},
])
def test_transforms_equal_numpy_oracle_on_whole_images_and_tiles(cfg):
    aug = Augmentation.from_config(cfg)
    x = _images()
    plane = x.shape[2:]
    idx = np.arange(len(x))
    for epoch in (0, 1):
        d = aug.draws(3, epoch, idx, plane)
        full = Box(0, plane[0], 0, plane[1])
        got = aug.apply(x, idx, epoch, 3, full, full, plane)
        want = np.stack([_oracle(x[i], d, i, aug) for i in idx])
        assert np.array_equal(got, want)
        for grid in ((2, 2), (3, 2), (1, 4), (7, 1)):
            for cy in range(grid[0]):
                for cx in range(grid[1]):
                    tile = tile_of(plane, grid, (cy, cx))
                    reach = aug.reach(tile, plane)
                    stored = x[:, :, reach.y0:reach.y1, reach.x0:reach.x1]
                    part = aug.apply(stored, idx, epoch, 3, tile, reach, plane)
                    assert np.array_equal(part, want[:, :, tile.y0:tile.y1, tile.x0:tile.x1])


def test_reach_is_the_smallest_box_of_every_source():
    plane = (7, 9)
    for cfg in ({"crop": 2}, {"crop": {"padding": 2, "mode": "reflect"}, "flip": "both"},
                {"flip": "horizontal"}, {"crop": {"padding": 1, "mode": "edge"}, "flip": "vertical"}):
        aug = Augmentation.from_config(cfg)
        span = 2 * aug.padding + 1
        n = span * span * 4
        every = aug.draws(0, 0, np.arange(n), plane)
        every["offset"] = np.stack([np.repeat(np.arange(span), span * 4),
                                    np.tile(np.repeat(np.arange(span), 4), span)], 1)
        every["flip"] = np.stack([np.tile([0, 0, 1, 1], span * span).astype(bool) & ("y" in aug.flips),
                                  np.tile([0, 1, 0, 1], span * span).astype(bool) & ("x" in aug.flips)], 1)
        for tile in (tile_of(plane, (2, 3), (0, 0)), tile_of(plane, (2, 3), (1, 1)), Box(0, 7, 0, 9)):
            my, mx = aug.axis_maps(every, tile, Box(0, 7, 0, 9), plane, False)
            ys = my.index if my.valid is None else my.index[my.valid]
            xs = mx.index if mx.valid is None else mx.index[mx.valid]
            assert aug.reach(tile, plane) == Box(ys.min(), ys.max() + 1, xs.min(), xs.max() + 1)


@pytest.mark.parametrize("value,words", [
    ([4], "expected a mapping"),
    ({"crop": 2, "rotate": 3}, "unknown key 'rotate'"),
    ({"crop": -1}, "padding must be an integer >= 0"),
    ({"crop": 2.5}, "padding must be an integer >= 0"),
    ({"crop": {"padding": 2, "mode": "wrap"}}, "mode must be one of constant, reflect, edge"),
    ({"crop": {"padding": 2, "fill": "x"}}, "fill must be a finite number"),
    ({"crop": {"pad": 2}}, "unknown key 'pad' in augment: crop"),
    ({"flip": True}, "flip must be one of horizontal, vertical, both"),
    ({"flip": ["x", "w"]}, "or a list of axes such as"),
    ({"rotate90": "yes"}, "rotate90 must be true or false"),
    ({"resized_crop": {"scale": [0.5, 1.5]}}, "scale must be a pair"),
    ({"resized_crop": {"ratio": [2, 1]}}, "ratio must be a pair"),
    ({"resized_crop": {"interpolation": "cubic"}}, "interpolation must be one of linear, nearest"),
    ({"resized_crop": {"size": 3}}, "unknown key 'size' in augment: resized_crop"),
    ({"brightness": -0.1}, "brightness must be a number >= 0"),
    ({"contrast": {"range": 0.2, "centre": 0.5}}, "unknown key 'centre' in augment: contrast"),
    ({"contrast": {"range": 0.2, "center": "mid"}}, "contrast center must be a finite number"),
    ({"crop": [2, -1]}, "padding must be an integer >= 0"),
    ({"flip": "horizontal", "seed": 1.5}, "seed must be an integer"),
])
def test_bad_augment_values_name_the_entry(value, words):
    with pytest.raises(ConfigError, match=words):
        Augmentation.from_config(value)


def test_config_error_names_the_yaml_line(tmp_path):
    data = write_data(tmp_path / "d.h5")
    text = experiment(CNN, data).replace("{path: DATA}".replace("DATA", str(data)),
                                         "{path: " + str(data) + ",\n     augment: {crop: {padding: 2, mode: wrap}}}")
    with pytest.raises(ConfigError) as e:
        load_experiment_text(text, filename="exp.yaml")
    assert "exp.yaml:4" in str(e.value) and "augment" in str(e.value) and "wrap" in str(e.value)


def _augmented_text(path, keys, augment="{crop: {padding: 2, mode: reflect}, flip: horizontal}"):
    return experiment(CNN, path).replace("HDF5Dataset {", f"HDF5Dataset {{augment: {augment}, {keys}")


@pytest.mark.parametrize("in_memory", ["true", "false"])
def test_dataset_augments_train_only_in_memory_and_streamed(tmp_path, in_memory):
    path = write_data(tmp_path / "d.h5", n_train=12, n_test=6)
    plain = load_experiment_text(experiment(CNN, path)).dataset.load(dtype=np.float64, seed=5)
    ds = load_experiment_text(_augmented_text(path, f"in_memory: {in_memory}, valid_fraction: 0.25, ")).dataset
    held = load_experiment_text(experiment(CNN, path).replace(
        "HDF5Dataset {", "HDF5Dataset {valid_fraction: 0.25, ")).dataset.load(dtype=np.float64, seed=5)
    aug = ds.augment
    plane = ds.plane
    for tile in (None, tile_of(plane, (2, 2), (1, 0)), tile_of(plane, (1, 3), (0, 2))):
        data = ds.load(tile=tile, dtype=np.float64, seed=5)
        box = tile or Box(0, plane[0], 0, plane[1])
        x_train, y_train = data["train"]
        ref_x = held["train"][0]
        assert x_train.shape == (len(ref_x), 1, box.y1 - box.y0, box.x1 - box.x0)
        assert np.array_equal(y_train, held["train"][1])
        for epoch in (0, 2):
            x_train.set_epoch(epoch)
            rows = np.array([5, 0, 3])
            d = aug.draws(5, epoch, rows, plane)
            want = np.stack([_oracle(ref_x[r], d, i, aug) for i, r in enumerate(rows)])
            assert np.array_equal(x_train[rows], want[:, :, box.y0:box.y1, box.x0:box.x1])
        x_train.set_epoch(None)                  # metrics, evaluate, pretraining: as stored
        assert np.array_equal(x_train[np.arange(len(ref_x))], ref_x[:, :, box.y0:box.y1, box.x0:box.x1])
        for split in ("valid", "test"):          # never augmented, cut to the tile as before
            got = data[split][0]
            got = got[np.arange(len(got))]
            assert np.array_equal(got, held[split][0][:, :, box.y0:box.y1, box.x0:box.x1])
    assert np.array_equal(held["test"][0], plain["test"][0])


def test_augmented_run_streams_like_in_memory_and_changes_the_numbers(tmp_path):
    path = write_data(tmp_path / "d.h5")
    mem = load_experiment_text(_augmented_text(path, "in_memory: true, ")).run()
    exp = load_experiment_text(_augmented_text(path, "in_memory: false, "))
    stream = exp.run()
    assert exp.dataset.mode == "stream"
    assert stream.epoch_costs == mem.epoch_costs and stream.test_misclass == mem.test_misclass
    plain = load_experiment_text(experiment(CNN, path)).run()
    assert plain.epoch_costs[0] != mem.epoch_costs[0]
    x, y = load_experiment_text(experiment(CNN, path)).dataset.load(dtype=np.float64, seed=5)["train"]
    assert stream.train_misclass == exp.model.misclass_rate(x, y)     # measured on the images as stored


def test_no_random_key_means_no_augmentation():
    assert Augmentation.from_config({}) is None
    assert Augmentation.from_config({"crop": 0}) is None
    assert Augmentation.from_config(None) is None


def test_streamed_augmented_split_keeps_the_prefetch(tmp_path):
    path = write_data(tmp_path / "d.h5", n_train=12, n_test=6)
    ds = load_experiment_text(_augmented_text(path, "in_memory: false, ")).dataset
    x = ds.load(tile=tile_of(ds.plane, (2, 2), (0, 1)), dtype=np.float64, seed=5)["train"][0]
    schedule = ds.read_ahead(x)
    assert schedule is not None
    batches = [np.array([3, 1, 4]), np.array([0, 5])]
    x.set_epoch(1)
    schedule(batches)
    got = [x[b] for b in batches]
    assert x.stored.stats["prefetched"] == 2
    assert all(np.array_equal(g, x[b]) for g, b in zip(got, batches))   # read again directly: the same


def test_memory_per_rank_counts_the_reach(tmp_path):
    path = write_data(tmp_path / "d.h5")
    plain = load_experiment_text(experiment(CNN, path)).dataset
    ds = load_experiment_text(_augmented_text(path, "")).dataset
    tile = tile_of(ds.plane, (2, 2), (0, 0))           # 6x5 of 12x10; reach: 8 rows, the full width
    reach = ds.augment.reach(tile, ds.plane)
    assert reach == Box(0, 8, 0, 10)
    assert ds.memory_per_rank(tile, 8)["memory"] == plain.memory_per_rank(reach, 8)["memory"]
    assert ds.memory_per_rank(tile, 8)["memory"] > plain.memory_per_rank(tile, 8)["memory"]


def test_the_loop_sets_the_epoch_for_the_steps_only(tmp_path, monkeypatch):
    from distnet.data.augment import AugmentedArray
    calls = []
    original = AugmentedArray.set_epoch
    monkeypatch.setattr(AugmentedArray, "set_epoch", lambda self, e: (calls.append(e), original(self, e)))
    load_experiment_text(_augmented_text(write_data(tmp_path / "d.h5"), "")).run()
    assert calls == [0, None, 1, None, 2, None, 3, None]     # metrics after each epoch: as stored
