"""Band assembly of tiled label maps (distnet predict's masks on a grid of ranks), in 2-D and
3-D, and a volume's mask written slab by slab."""
import itertools

import numpy as np
import pytest

from distnet.data.mask_files import BandAssembler, mask_names
from distnet.data.mask_npy import NpyMask
from distnet.errors import DataError
from distnet.geometry import tile_of


@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (3, 2), (2, 3), (1, 1, 1), (2, 2, 2), (3, 2, 1), (1, 2, 3)])
def test_tiles_in_grid_order_make_the_bands_of_each_image(grid):
    plane = (7, 10) if len(grid) == 2 else (5, 7, 6)
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 4, size=(2,) + plane).astype(np.uint8)
    probs = rng.rand(2, 3, *plane).astype(np.float32)
    got, maps = np.full((2,) + plane, 255, np.uint8), np.zeros_like(probs)
    bands = []

    def on_band(i, y0, band):
        bands.append((i, y0, band.shape))
        got[i, y0:y0 + len(band)] = band

    def index(box):
        return tuple(slice(a, b) for a, b in box.spans)

    def on_tile(i, box, p):
        maps[(i, slice(None)) + index(box)] = p
    assemble = BandAssembler(plane, grid, on_band, on_tile)
    for i in range(2):
        for coords in itertools.product(*(range(g) for g in grid)):
            at = index(tile_of(plane, grid, coords))
            assemble.receive((i,) + coords, [labels[(i,) + at].copy(), probs[(i, slice(None)) + at].copy()])
    np.testing.assert_array_equal(got, labels)
    np.testing.assert_array_equal(maps, probs)
    heights = [tile_of(plane, grid, (iy,) + (0,) * (len(grid) - 1)).shape[0] for iy in range(grid[0])]
    assert [b[2] for b in bands] == [(h,) + plane[1:] for h in heights] * 2     # one band per grid row


def test_a_volume_mask_written_by_slabs_is_the_file_numpy_saves(tmp_path):
    mask = np.random.RandomState(1).randint(0, 3, size=(7, 9, 8)).astype(np.uint8)
    out = NpyMask(str(tmp_path / "m.npy"), mask.shape)
    for z0, z1 in ((0, 3), (3, 4), (4, 7)):
        out.write_rows(mask[z0:z1])
    out.close()
    np.save(tmp_path / "ref.npy", mask)
    assert (tmp_path / "m.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()
    short = NpyMask(str(tmp_path / "s.npy"), mask.shape)
    short.write_rows(mask[:2])
    with pytest.raises(ValueError, match="2 of 7 slices written"):
        short.close()


def test_masks_are_named_as_the_pictures_or_by_row():
    assert mask_names(None, 3) == ["000000.png", "000001.png", "000002.png"]
    assert mask_names(["a/cat.jpg", "b/dog.png"], 2) == ["cat.png", "dog.png"]
    assert mask_names(["v/a.npy", "b.nii.gz", "c.tif"], 3, ".npy") == ["a.npy", "b.npy", "c.npy"]
    assert mask_names(None, 2, ".npy") == ["000000.npy", "000001.npy"]
    with pytest.raises(DataError, match="both write the mask cat.png"):
        mask_names(["a/cat.jpg", "b/cat.png"], 2)


def test_4d_maps_and_pipelines_are_refused_in_one_line():
    from types import SimpleNamespace

    from distnet.errors import ConfigError
    from distnet.experiments.predict_masks import check_maskable
    from distnet.ops.pixel_costs import PixelSoftmaxCrossEntropy

    def exp(plane, pipe=1, k=3):
        last = SimpleNamespace(out_shape=(k,) + plane)
        model = SimpleNamespace(input_shape=(1,) + plane, cost=PixelSoftmaxCrossEntropy(), layers=[last])
        return SimpleNamespace(model=model, topology=SimpleNamespace(npipe=pipe))
    check_maskable(exp((8, 8)))
    check_maskable(exp((4, 8, 8)))
    with pytest.raises(ConfigError, match="outputs are 4-D maps 2x4x8x8, which it does not write"):
        check_maskable(exp((2, 4, 8, 8)))
    with pytest.raises(ConfigError, match="one pipeline stage"):
        check_maskable(exp((8, 8), pipe=2))
    with pytest.raises(ConfigError, match="at most 256 classes"):
        check_maskable(exp((8, 8), k=300))
