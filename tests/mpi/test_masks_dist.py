"""Masks and volumes on many ranks: every rank's tile of the images and of their masks, augmented
(crops, flips per axis, resized crops, quarter turns, jitter) or not, equals the one-process
image cut to the tile, bit for bit: 1 rank, 4 (a 2x2 grid; 2 data replicas of a 1x2 grid; a
2x2x1 grid of volumes), 6 (a 2x3 grid, uneven on 12x10 images; a 1x2x3 grid of volumes; 2
replicas of 1x3), with every rank reading its files (``read: every``) or rank 0 reading for all
(``root``, ``node``), in memory and streamed. With ``read: every`` each rank's HDF5 reads select
exactly its tile of the images and the masks (augmented: the reach of its tile; a streamed test
split, not augmented, its tile). Float targets per volume reach every rank alike."""
import h5py
import numpy as np
import pytest

from distnet.datasets import HDF5Dataset
from distnet.geometry.partition import coords_of, tile_of
from tests.tiny import write_masked_data, write_target_data

MPI_SIZES = (1, 4, 6)
MPI_TIMEOUT = 600

SPATIAL = {2: (12, 10), 3: (5, 7, 6)}
AUGMENT = {2: {"crop": {"padding": 2}, "flip": "both", "resized_crop": {"scale": [0.4, 1]},
               "brightness": 0.2, "contrast": {"range": 0.3, "center": 0.4}},
           3: {"crop": {"padding": [1, 2, 2], "mode": "reflect"}, "flip": "all", "rotate90": True,
               "brightness": 0.3}}
SQUARE = {2: (11, 11), 3: (5, 7, 7)}


def _layouts(size):
    """``(data replicas, spatial grid)`` cases for this world size."""
    return {1: [(1, (1, 1)), (1, (1, 1, 1))],
            4: [(1, (2, 2)), (2, (1, 2)), (1, (2, 2, 1))],
            6: [(1, (2, 3)), (2, (1, 3)), (1, (1, 2, 3))]}[size]


@pytest.fixture(scope="module")
def files(comm, tmp_path_factory):
    """``{(ndim, square): path}`` of masked data sets written by rank 0."""
    out = {}
    if comm.rank == 0:
        folder = tmp_path_factory.mktemp("masks")
        for nd in (2, 3):
            for square in (False, True):
                spatial = SQUARE[nd] if square else SPATIAL[nd]
                out[nd, square] = str(write_masked_data(folder / f"m{nd}{'s' * square}.h5", spatial, seed=nd))
    return comm.bcast(out)


def _position(comm, ndata, grid):
    """This rank's spatial coordinates (ranks: ``data x grid``, row-major)."""
    per = int(np.prod(grid))
    return coords_of(grid, comm.rank % per)


def _dense(a):
    return a[np.arange(len(a))]


@pytest.mark.parametrize("read", ["every", "root", "node"])
@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize("augmented", [False, True])
def test_tiles_of_images_and_masks_equal_the_one_process_ones(comm, files, read, in_memory, augmented):
    for ndata, grid in _layouts(comm.size):
        nd = len(grid)
        aug = dict(AUGMENT[nd]) if augmented else None
        if augmented and nd == 2 and comm.size == 4:
            aug["rotate90"] = True          # quarter turns need a square plane
        path = files[nd, bool(aug and aug.get("rotate90"))]
        ds = HDF5Dataset(path=path, scale=1 / 250, in_memory=in_memory, read=read, read_chunk_mb=0.001,
                         valid_fraction=0.2, dist_flag=True, augment=aug)
        ref = HDF5Dataset(path=path, scale=1 / 250, in_memory=True, valid_fraction=0.2, augment=aug)
        tile = tile_of(ds.plane, grid, _position(comm, ndata, grid))
        got = ds.load(tile=tile, seed=7, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
        want = ref.load(seed=7, dtype=np.float64)
        inside = tuple(slice(a, b) for a, b in tile.spans)
        for split, (x, y) in got.items():
            wx, wy = want[split]
            for epoch in ((None, 0, 3) if split == "train" and augmented else (None,)):
                if split == "train" and augmented:
                    ds.set_epoch(x, epoch)
                    ref.set_epoch(wx, epoch)
                np.testing.assert_array_equal(_dense(x), _dense(wx)[(slice(None), slice(None)) + inside],
                                              err_msg=f"{split} images, epoch {epoch}, grid {grid}")
                np.testing.assert_array_equal(_dense(y), _dense(wy)[(slice(None),) + inside],
                                              err_msg=f"{split} masks, epoch {epoch}, grid {grid}")
        comm.Barrier()


@pytest.mark.parametrize("read", ["every", "root", "node"])
@pytest.mark.parametrize("in_memory", [True, False])
def test_targets_reach_every_rank_of_a_grid_alike(comm, tmp_path_factory, read, in_memory):
    """Float targets per volume (regression): every rank of a grid (and of a data replica) gets
    every row's targets, the one-process ones, as float32 (N, T), in the rows' order, whichever
    rank reads; augmentation moves the voxels and leaves the targets alone."""
    folder = tmp_path_factory.mktemp("targets") if comm.rank == 0 else None
    path = comm.bcast(str(write_target_data(folder / "t.h5", SQUARE[3])) if comm.rank == 0 else None)
    layouts = {1: [(1, (1, 1, 1))], 4: [(1, (2, 2, 1)), (2, (1, 2, 1))], 6: [(1, (1, 2, 3)), (2, (1, 1, 3))]}
    with h5py.File(path, "r") as f:
        stored = {s: f[f"{s}/y"][()] for s in ("train", "test")}
    for ndata, grid in layouts[comm.size]:
        ds = HDF5Dataset(path=path, in_memory=in_memory, read=read, read_chunk_mb=0.001, valid_fraction=0.2,
                         dist_flag=True, augment=AUGMENT[3])
        ref = HDF5Dataset(path=path, in_memory=True, valid_fraction=0.2)
        assert ds.regression and ds.nclasses == 3 and ds.class_names() == ["t0", "t1", "t2"]
        tile = tile_of(ds.plane, grid, _position(comm, ndata, grid))
        got = ds.load(tile=tile, seed=7, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
        want = ref.load(seed=7, dtype=np.float64)
        for split, (x, y) in got.items():
            if split == "train":
                ds.set_epoch(x, 2)      # augmented voxels; the targets stay
            assert y.dtype == np.float32 and y.shape == (len(x), 3), (split, y.dtype, y.shape)
            np.testing.assert_array_equal(y, want[split][1], err_msg=f"{split} targets, grid {grid}")
        np.testing.assert_array_equal(got["test"][1], stored["test"])    # the file's rows, in order
        comm.Barrier()


@pytest.mark.parametrize("in_memory", [True, False])
def test_each_rank_reads_the_hyperslab_of_its_tile(comm, files, monkeypatch, in_memory):
    """read: every: every HDF5 read of a rank selects its tile over the spatial axes (images:
    every channel), of the images and of the masks; augmented, its reach."""
    seen = []
    plain = h5py.Dataset.read_direct

    def recording(self, dest, source_sel=None, dest_sel=None):
        seen.append((self.name, source_sel))
        return plain(self, dest, source_sel, dest_sel)
    monkeypatch.setattr(h5py.Dataset, "read_direct", recording)
    for ndata, grid in _layouts(comm.size):
        nd = len(grid)
        for aug in (None, AUGMENT[nd]):
            seen.clear()
            path = files[nd, bool(aug and aug.get("rotate90"))]
            ds = HDF5Dataset(path=path, scale=1, in_memory=in_memory, dist_flag=True, augment=aug)
            tile = tile_of(ds.plane, grid, _position(comm, ndata, grid))
            box = tile if aug is None else ds.augment.reach(tile, ds.plane)
            for x, y in ds.load(tile=tile, rank=comm.rank, size=comm.size, grid=grid).values():
                x[np.array([0, 2])], y[np.array([0, 2])]      # streamed: a minibatch read now
            reach, own = (tuple(slice(a, b) for a, b in t.spans) for t in (box, tile))
            assert {name for name, _ in seen} == {"/train/x", "/train/y", "/test/x", "/test/y"}
            for name, sel in seen:      # train: the reach; test: the reach loaded, or the tile streamed
                spatial = sel[2:] if name.endswith("/x") else sel[1:]
                assert spatial == reach or name.startswith("/test") and spatial == own, (name, sel, grid)
    comm.Barrier()


@pytest.mark.parametrize("in_memory", [True, False])
def test_reader_fills_the_caches_with_the_masks(comm, files, tmp_path_factory, in_memory):
    """read: root with cache_dir: the first load fills every rank's cache from the reader's
    stream (in memory: images and masks as arrays; streamed: its tile cache, the masks a split of
    their own), a second load gives the same tiles from the caches."""
    folder = comm.bcast(str(tmp_path_factory.mktemp("cache")) if comm.rank == 0 else None)
    ndata, grid = _layouts(comm.size)[-1]           # volumes
    tile = tile_of(SPATIAL[3], grid, _position(comm, ndata, grid))
    kw = dict(path=files[3, False], scale=1, in_memory=in_memory, read="root", read_chunk_mb=0.001,
              dist_flag=True, cache_dir=f"{folder}/rank{comm.rank}")
    load = dict(tile=tile, seed=1, dtype=np.float64, rank=comm.rank, size=comm.size, grid=grid)
    want = HDF5Dataset(path=files[3, False], scale=1).load(seed=1, dtype=np.float64)
    inside = tuple(slice(a, b) for a, b in tile.spans)
    for _ in range(2):
        got = HDF5Dataset(**kw).load(**load)
        for split, (x, y) in got.items():
            np.testing.assert_array_equal(_dense(x), want[split][0][(slice(None), slice(None)) + inside])
            np.testing.assert_array_equal(_dense(y), want[split][1][(slice(None),) + inside])
        cache = f"{kw['cache_dir']}/m3{'' if in_memory else '.tile'}.rank{comm.rank}of{comm.size}.h5"
        with h5py.File(cache, "r") as f:
            masks = f["train/y"] if in_memory else f["train/mask/x"]
            assert masks.shape[-3:] == tuple(tile.shape)
    comm.Barrier()
