"""Per-pixel labels (masks) and volumes in the data engine, on one process: what a rank loads is
its tile of the file's images and masks (in memory, streamed, from caches), read by hyperslab
(the HDF5 selections asserted, not timed), checked (class ids, the ignore label, the layout), and
augmented with its images' draws."""
import h5py
import numpy as np
import pytest

from distnet.data.pixel_labels import LabelStream
from distnet.datasets import HDF5Dataset
from distnet.errors import ConfigError, DataError
from distnet.geometry import tile_of
from distnet.geometry.partition import grid_coords
from tests.tiny import write_masked_data

SHAPES = {"2d": ((12, 10), (2, 3)), "3d": ((5, 7, 6), (1, 2, 3))}


def _file(path):
    with h5py.File(path, "r") as f:
        return {s: (f[f"{s}/x"][()], f[f"{s}/y"][()]) for s in ("train", "test")}


def _dense(a):
    return a[np.arange(len(a))]


def _cut(tile, channels=True):
    return (slice(None),) * (2 if channels else 1) + tuple(slice(a, b) for a, b in tile.spans)


@pytest.mark.parametrize("dims", sorted(SHAPES))
@pytest.mark.parametrize("in_memory", [True, False])
def test_a_rank_loads_its_tile_of_images_and_masks(tmp_path, dims, in_memory):
    spatial, grid = SHAPES[dims]
    path = write_masked_data(tmp_path / "m.h5", spatial)
    stored = _file(path)
    ds = HDF5Dataset(path=str(path), scale=1, in_memory=in_memory, valid_fraction=0.25, sample_pct=80)
    assert ds.per_pixel and ds.ignore_label == 255 and ds.nclasses == 3 and ds.plane == spatial
    rows = ds.split_rows(seed=4)
    for coords in grid_coords(grid):
        tile = tile_of(spatial, grid, coords)
        data = ds.load(tile=tile, seed=4, dtype=np.float64)
        assert ds.mode == ("memory" if in_memory else "stream")
        for split, (x, y) in data.items():
            file_x, file_y = stored["test" if split == "test" else "train"]
            r = rows[split]
            assert isinstance(y, np.ndarray if in_memory else LabelStream)
            assert y.shape == (len(r),) + tuple(tile.shape) and y.dtype == np.uint8
            np.testing.assert_array_equal(_dense(x), file_x[r][_cut(tile)].astype(np.float64))
            np.testing.assert_array_equal(_dense(y), file_y[r][_cut(tile, False)])


class _Reads(list):
    """``(dataset name, selection)`` of every HDF5 read, and ``files``: the files read."""

    def clear(self):
        super().clear()
        self.files = set()


@pytest.fixture
def hyperslabs(monkeypatch):
    """Every HDF5 read of a data set (:class:`_Reads`)."""
    seen = _Reads()
    seen.clear()
    plain = h5py.Dataset.read_direct

    def recording(self, dest, source_sel=None, dest_sel=None):
        seen.append((self.name, source_sel))
        seen.files.add(self.file.filename)
        return plain(self, dest, source_sel, dest_sel)
    monkeypatch.setattr(h5py.Dataset, "read_direct", recording)
    return seen


@pytest.mark.parametrize("dims", sorted(SHAPES))
@pytest.mark.parametrize("in_memory", [True, False])
def test_images_and_masks_are_read_by_hyperslabs_of_the_tile(tmp_path, hyperslabs, dims, in_memory):
    """Every read of train/x, train/y, test/x, test/y selects exactly the rank's tile over the
    spatial axes (all channels, runs of rows), so a rank reads its part of the file and no more:
    the elements selected are its tile of each image read."""
    spatial, grid = SHAPES[dims]
    path = write_masked_data(tmp_path / "m.h5", spatial)
    tile = tile_of(spatial, grid, grid_coords(grid)[-1])
    ds = HDF5Dataset(path=str(path), scale=1, in_memory=in_memory)
    data = ds.load(tile=tile, dtype=np.float32)
    for split, (x, y) in data.items():      # streamed: the minibatches read now
        x[np.array([3, 0, 1])], y[np.array([3, 0, 1])]
    names = {name for name, _ in hyperslabs}
    assert names == {"/train/x", "/train/y", "/test/x", "/test/y"}
    spans = tuple(slice(a, b) for a, b in tile.spans)
    for name, sel in hyperslabs:
        spatial_sel = sel[2:] if name.endswith("/x") else sel[1:]
        assert spatial_sel == spans, (name, sel)
        if name.endswith("/x"):
            assert sel[1] == slice(None)
    read = sum(sel[0].stop - sel[0].start for name, sel in hyperslabs if name == "/train/y")
    assert read == 14 + (0 if in_memory else 3)     # every mask (streamed: checked once), then a minibatch


@pytest.mark.parametrize("in_memory", [True, False])
def test_caches_hold_the_masks(tmp_path, hyperslabs, in_memory):
    """cache_dir: the first load writes the rank's cache (float arrays and masks in memory mode;
    the tile as stored, masks as a split of their own, streaming); the second reads nothing of
    the data file and gives the same arrays."""
    spatial, grid = SHAPES["3d"]
    path = write_masked_data(tmp_path / "m.h5", spatial)
    tile = tile_of(spatial, grid, (0, 1, 2))
    kw = dict(path=str(path), scale=1, in_memory=in_memory, cache_dir=str(tmp_path / "cache"))
    first = HDF5Dataset(**kw).load(tile=tile, dtype=np.float64, rank=5, size=6, grid=grid)
    hyperslabs.clear()
    again = HDF5Dataset(**kw).load(tile=tile, dtype=np.float64, rank=5, size=6, grid=grid)
    assert str(path) not in hyperslabs.files
    for split in first:
        for a, b in zip(first[split], again[split]):
            np.testing.assert_array_equal(_dense(a), _dense(b))
    cache = tmp_path / "cache" / ("m.rank5of6.h5" if in_memory else "m.tile.rank5of6.h5")
    with h5py.File(cache, "r") as f:
        if in_memory:
            assert f["train/y"].shape == (14,) + tuple(tile.shape)
        else:
            assert f["train/mask/x"].shape == (14, 1) + tuple(tile.shape)


def test_mask_values_out_of_range_name_the_image_and_pixel(tmp_path):
    path = write_masked_data(tmp_path / "m.h5")
    with h5py.File(path, "r+") as f:
        f["train/y"][5, 7, 4] = 3
    for in_memory in (True, False):
        with pytest.raises(DataError, match=r"m.h5 \(train masks\): mask of image 5 holds 3 at row 7, column 4, not "
                                            r"a class id 0 \.\. 2 or the ignore label 255"):
            HDF5Dataset(path=str(path), scale=1, in_memory=in_memory).load()


@pytest.mark.parametrize("edit,words", [
    (lambda f: f.attrs.__delitem__("nclasses"), "holds per-pixel labels but no attribute nclasses"),
    (lambda f: f.attrs.__setitem__("ignore_label", 1), "attribute ignore_label must be an integer that is no class"),
    (lambda f: (f.__delitem__("test/y"), f.__setitem__("test/y", np.zeros(6, int))), "test/y and train/y differ"),
    (lambda f: (f.__delitem__("test/y"), f.__setitem__("test/y", np.zeros((6, 12, 9), np.uint8))),
     r"test/y must be the per-pixel labels of test/x, integers of shape \(6, 12, 10\)"),
    (lambda f: (f.__delitem__("test/y"), f.__setitem__("test/y", np.zeros((6, 12, 10)))), "got float64"),
])
def test_a_bad_layout_is_one_line_naming_the_file(tmp_path, edit, words):
    path = write_masked_data(tmp_path / "m.h5")
    with h5py.File(path, "r+") as f:
        edit(f)
    with pytest.raises(DataError, match=words):
        HDF5Dataset(path=str(path), scale=1).image_shape


def test_the_ignore_label_key(tmp_path):
    path = write_masked_data(tmp_path / "m.h5", ignore=None)
    assert HDF5Dataset(path=str(path), scale=1).ignore_label is None
    ds = HDF5Dataset(path=str(path), scale=1, ignore_label=9)
    assert ds.ignore_label == 9
    ds.check()
    with pytest.raises(ConfigError, match="ignore_label.*2 is a class"):
        HDF5Dataset(path=str(path), scale=1, ignore_label=2).check()
    with pytest.raises(ConfigError, match="must be an integer >= 0"):
        HDF5Dataset(path=str(path), ignore_label=-1)
    from tests.tiny import write_data
    plain = write_data(tmp_path / "d.h5")
    with pytest.raises(ConfigError, match="holds one class per image: ignore_label applies to per-pixel labels"):
        HDF5Dataset(path=str(plain), ignore_label=255).check()


def test_augmented_masks_follow_their_images(tmp_path):
    """The training masks draw what their images draw (the images' epoch), pad with the ignore
    label, and are stored masks again when no epoch is set."""
    path = write_masked_data(tmp_path / "m.h5", (9, 9), ignore=255)
    ds = HDF5Dataset(path=str(path), scale=1, augment={"crop": 3, "rotate90": True, "flip": "both"})
    x, y = ds.load(dtype=np.float64, seed=2)["train"]
    stored_x, stored_y = _file(path)["train"]
    rows = np.arange(len(y))
    ds.set_epoch(x, 1)
    got_x, got_y = x[rows], y[rows]
    twin = ds.augment.apply(stored_y[:, None], rows, 1, 2, ds.full_tile(), ds.full_tile(), (9, 9), mask_fill=255)[:, 0]
    np.testing.assert_array_equal(got_y, twin)
    # where the crop padded the image with fill 0 the mask holds the ignore label
    padded = ds.augment.apply(np.ones_like(stored_x[:, :1], dtype=np.float64), rows, 1, 2, ds.full_tile(),
                              ds.full_tile(), (9, 9))[:, 0] == 0
    assert padded.any() and (got_y[padded] == 255).all()
    assert not np.array_equal(got_x, stored_x.astype(np.float64))
    ds.set_epoch(x, None)
    np.testing.assert_array_equal(y[rows], stored_y)


def test_memory_fingerprint_and_grids_know_the_masks(tmp_path):
    spatial, grid = SHAPES["3d"]
    path = write_masked_data(tmp_path / "m.h5", spatial)
    ds = HDF5Dataset(path=str(path), scale=1)
    tile = tile_of(spatial, grid, (0, 0, 0))
    m = ds.memory_per_rank(tile, batch_size=4, dtype=np.float32)
    pixels = int(np.prod(tile.shape))
    assert m["memory"] == 20 * (2 * pixels * 4 + pixels)      # floats and uint8 masks of 20 images
    parts = [p[0] for p in ds.fingerprint()]
    assert parts == ["test images", "test masks", "train images", "train masks"]
    with pytest.raises(DataError, match=r"volumes of 2x5x7x6 \(C x D x H x W\) but the run cuts them on a 2-D grid"):
        HDF5Dataset(path=str(path), scale=1, dist_flag=True).rank_tile((2, 2), (0, 0))


def test_numpy_arrays_of_masks_say_where_masks_are_read(tmp_path):
    from distnet.datasets import NumpyDataset
    rng = np.random.RandomState(0)
    for s in ("train", "test"):
        np.save(tmp_path / f"{s}_x.npy", rng.rand(4, 1, 6, 5))
        np.save(tmp_path / f"{s}_y.npy", rng.randint(0, 3, (4, 6, 5)))
    ds = NumpyDataset(**{f"{s}_{a}": str(tmp_path / f"{s}_{a}.npy") for s in ("train", "test") for a in "xy"})
    with pytest.raises(DataError, match=r"are per pixel \(masks\), and NumpyDataset reads one class per image"):
        ds.image_shape


def test_data_stats_of_a_volume_file(tmp_path):
    from distnet.convert.info import describe_stats
    path = write_masked_data(tmp_path / "m.h5", (5, 7, 6))
    lines = describe_stats(str(path), store=True)
    with h5py.File(path, "r") as f:
        x = f["train/x"][()].astype(np.float64)
        np.testing.assert_allclose(f.attrs["channel_mean"], x.mean(axis=(0, 2, 3, 4)))
        np.testing.assert_allclose(f.attrs["channel_std"], x.std(axis=(0, 2, 3, 4)))
    assert lines[-1].endswith("; stored in the file")


def test_an_ignore_label_the_masks_cannot_hold(tmp_path):
    path = write_masked_data(tmp_path / "m.h5", ignore=None)
    with pytest.raises(ConfigError, match="ignore_label.*300 does not fit the masks' uint8"):
        HDF5Dataset(path=str(path), scale=1, ignore_label=300).check()


def test_an_augmentation_that_does_not_fit_is_refused_at_its_yaml_line(tmp_path):
    from distnet.config import load_experiment_text
    from tests.tiny import CNN, experiment
    path = write_masked_data(tmp_path / "m.h5")
    text = experiment(CNN, path).replace("{path: " + str(path) + "}",
                                         "{path: " + str(path) + ", scale: 1,\n     augment: {rotate90: true}}")
    ds = load_experiment_text(text, filename="exp.yaml").dataset
    with pytest.raises(ConfigError, match=r"exp.yaml:4.*rotate90 .* not square \(12x10\)"):
        ds.check()
