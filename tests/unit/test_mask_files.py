"""Band assembly of tiled label maps (distnet predict's masks on a grid of ranks)."""
import numpy as np
import pytest

from distnet.data.mask_files import BandAssembler, mask_names
from distnet.errors import DataError
from distnet.geometry import tile_of


@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (3, 2), (2, 3)])
def test_tiles_in_grid_order_make_the_bands_of_each_image(grid):
    plane = (7, 10)
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 4, size=(2,) + plane).astype(np.uint8)
    probs = rng.rand(2, 3, *plane).astype(np.float32)
    got, maps = np.full((2,) + plane, 255, np.uint8), np.zeros_like(probs)
    bands = []

    def on_band(i, y0, band):
        bands.append((i, y0, band.shape))
        got[i, y0:y0 + len(band)] = band

    def on_tile(i, box, p):
        (y0, y1), (x0, x1) = box.spans
        maps[i, :, y0:y1, x0:x1] = p
    assemble = BandAssembler(plane, grid, on_band, on_tile)
    for i in range(2):
        for iy in range(grid[0]):
            for ix in range(grid[1]):
                (y0, y1), (x0, x1) = tile_of(plane, grid, (iy, ix)).spans
                assemble.receive((i, iy, ix), [labels[i, y0:y1, x0:x1].copy(), probs[i, :, y0:y1, x0:x1].copy()])
    np.testing.assert_array_equal(got, labels)
    np.testing.assert_array_equal(maps, probs)
    heights = [tile_of(plane, grid, (iy, 0)).shape[0] for iy in range(grid[0])]
    assert [b[2] for b in bands] == [(h, plane[1]) for h in heights] * 2     # one band per grid row


def test_masks_are_named_as_the_pictures_or_by_row():
    assert mask_names(None, 3) == ["000000.png", "000001.png", "000002.png"]
    assert mask_names(["a/cat.jpg", "b/dog.png"], 2) == ["cat.png", "dog.png"]
    with pytest.raises(DataError, match="both write the mask cat.png"):
        mask_names(["a/cat.jpg", "b/cat.png"], 2)


def test_volumes_and_pipelines_are_refused_in_one_line():
    from types import SimpleNamespace

    from distnet.errors import ConfigError
    from distnet.experiments.predict_masks import check_maskable
    from distnet.ops.pixel_costs import PixelSoftmaxCrossEntropy

    def exp(plane, pipe=1, k=3):
        last = SimpleNamespace(out_shape=(k,) + plane)
        model = SimpleNamespace(input_shape=(1,) + plane, cost=PixelSoftmaxCrossEntropy(), layers=[last])
        return SimpleNamespace(model=model, topology=SimpleNamespace(npipe=pipe))
    check_maskable(exp((8, 8)))
    with pytest.raises(ConfigError, match="outputs are volumes 4x8x8 .D x H x W., which it does not write"):
        check_maskable(exp((4, 8, 8)))
    with pytest.raises(ConfigError, match="one pipeline stage"):
        check_maskable(exp((8, 8), pipe=2))
    with pytest.raises(ConfigError, match="at most 256 classes"):
        check_maskable(exp((8, 8), k=300))
