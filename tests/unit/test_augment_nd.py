"""Augmentation beyond 2-D crops and flips (distnet.data.augment): random resized crops, quarter
turns, brightness/contrast, flips and crops per axis in 3-D, and masks that follow their images.

Every transform is checked against an independent numpy oracle on whole images (np.pad, slices,
np.flip, np.rot90, a per-pixel bilinear resize), and every grid's tiles (2x2, 2x3 uneven, 3-D
grids) against the whole augmented image cut to the tile, bit for bit, for images and masks."""
import itertools

import numpy as np
import pytest

from distnet.data.augment import Augmentation
from distnet.data.draws import STREAMS, draw_hash
from distnet.errors import ConfigError
from distnet.geometry import tile_of
from distnet.geometry.partition import Box, grid_coords

IGNORE = 255


def _resize_oracle(box, size, linear):
    """``box`` ``(C, *L)`` stretched to ``size``, pixel by pixel (torchvision's bilinear with
    align_corners=False, or nearest-exact)."""
    C, lengths = box.shape[0], box.shape[1:]
    out = np.empty((C,) + tuple(size), np.float64 if linear else box.dtype)
    for o in itertools.product(*(range(s) for s in size)):
        if not linear:
            at = tuple(min(int(np.floor((c + 0.5) * L / S)), L - 1) for c, L, S in zip(o, lengths, size))
            out[(slice(None),) + o] = box[(slice(None),) + at]
            continue
        corners = []
        for c, L, S in zip(o, lengths, size):
            u = min(max((c + 0.5) * L / S - 0.5, 0.0), L - 1.0)
            lo = int(np.floor(u))
            corners.append(((lo, 1 - (u - lo)), (min(lo + 1, L - 1), u - lo)))
        value = 0.0
        for combo in itertools.product(*corners):
            weight = np.prod([w for _, w in combo])
            value = value + weight * box[(slice(None),) + tuple(i for i, _ in combo)]
        out[(slice(None),) + o] = value
    return out


def _oracle(img, d, j, aug, mask_fill=None):
    """Image ``img`` ``(C, *S)`` augmented by draw ``j`` of ``d`` the plain way: resized crop,
    pad and crop, flips, quarter turns, jitter (masks: nearest, the ignore label, no jitter)."""
    spatial = img.shape[1:]
    nd = len(spatial)
    out = img.astype(np.float64) if mask_fill is None else img
    if aug.resized_crop is not None:
        box = out[(slice(None),) + tuple(slice(s, s + n) for s, n in zip(d["start"][j], d["length"][j]))]
        out = _resize_oracle(box, spatial, mask_fill is None and aug.resized_crop[2] == "linear")
    pads = aug.pads(nd)
    if any(pads):
        width = ((0, 0),) + tuple((p, p) for p in pads)
        if aug.mode == "constant":
            out = np.pad(out, width, constant_values=aug.fill if mask_fill is None else mask_fill)
        else:
            out = np.pad(out, width, mode=aug.mode)
        out = out[(slice(None),) + tuple(slice(o, o + n) for o, n in zip(d["offset"][j], spatial))]
    for a in range(nd):
        if d["flip"][j, a]:
            out = np.flip(out, 1 + a)
    out = np.rot90(out, int(d["turns"][j]), axes=(nd - 1, nd))
    if mask_fill is None:
        out = (out * d["brightness"][j] - aug.center) * d["contrast"][j] + aug.center
    return out


def _data(spatial, n=12, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.standard_normal((n, 2) + spatial)
    y = rng.randint(0, 5, (n, 1) + spatial).astype(np.uint8)
    return x, y


CONFIGS_2D = [
    {"rotate90": True},
    {"rotate90": True, "flip": "both", "crop": {"padding": 2, "mode": "reflect"}},
    {"resized_crop": True},
    {"resized_crop": {"scale": [0.3, 0.9], "ratio": [0.5, 2], "interpolation": "nearest"}},
    {"resized_crop": {"scale": [0.2, 1]}, "flip": "horizontal", "crop": 3, "rotate90": True},
    {"brightness": 0.4, "contrast": {"range": 0.3, "center": 0.5}},
    {"crop": [1, 3], "flip": ["y"], "contrast": 0.2},
]
CONFIGS_3D = [
    {"crop": 2, "flip": "all"},
    {"crop": {"padding": [1, 2, 3], "mode": "edge"}, "flip": ["z", "x"]},
    {"crop": {"padding": 2, "mode": "reflect"}, "rotate90": True, "brightness": 0.3},
    {"resized_crop": {"scale": [0.3, 1]}, "flip": "all", "rotate90": True},
]


@pytest.mark.parametrize("cfg", CONFIGS_2D, ids=range(len(CONFIGS_2D)))
def test_2d_transforms_equal_the_numpy_oracle(cfg):
    aug = Augmentation.from_config(cfg)
    x, y = _data((9, 9))
    plane, idx = (9, 9), np.arange(len(x))
    full = Box(0, 9, 0, 9)
    for epoch in (0, 3):
        d = aug.draws(4, epoch, idx, plane)
        got = aug.apply(x, idx, epoch, 4, full, full, plane)
        masks = aug.apply(y, idx, epoch, 4, full, full, plane, mask_fill=IGNORE)
        for j in idx:
            np.testing.assert_allclose(got[j], _oracle(x[j], d, j, aug), rtol=1e-12, atol=1e-12)
            assert np.array_equal(masks[j], _oracle(y[j], d, j, aug, IGNORE))


@pytest.mark.parametrize("cfg", CONFIGS_3D, ids=range(len(CONFIGS_3D)))
def test_3d_transforms_equal_the_numpy_oracle(cfg):
    aug = Augmentation.from_config(cfg)
    x, y = _data((5, 7, 7), n=8)
    plane, idx = (5, 7, 7), np.arange(len(x))
    full = Box(0, 5, 0, 7, 0, 7)
    d = aug.draws(1, 2, idx, plane)
    got = aug.apply(x, idx, 2, 1, full, full, plane)
    masks = aug.apply(y, idx, 2, 1, full, full, plane, mask_fill=IGNORE)
    for j in idx:
        np.testing.assert_allclose(got[j], _oracle(x[j], d, j, aug), rtol=1e-12, atol=1e-12)
        assert np.array_equal(masks[j], _oracle(y[j], d, j, aug, IGNORE))


def _grids(ndim):
    return [(1, 1), (2, 2), (2, 3), (3, 2), (1, 4)] if ndim == 2 else [(1, 1, 1), (2, 2, 1), (1, 2, 3), (2, 3, 2)]


@pytest.mark.parametrize("cfg,spatial", [(c, (9, 9)) for c in CONFIGS_2D] + [(c, (11, 8)) for c in CONFIGS_2D
                                                                            if "rotate90" not in c]
                         + [(c, (5, 7, 7)) for c in CONFIGS_3D])
def test_tiles_of_any_grid_are_the_whole_image_cut(cfg, spatial):
    """Each rank's tile, gathered from the reach it holds, is the one-process augmented image
    cut to the tile, bit for bit (images and masks; uneven grids; volumes)."""
    aug = Augmentation.from_config(cfg)
    x, y = _data(spatial, n=6)
    idx = np.arange(len(x))
    full = Box.of_spans((0, n) for n in spatial)
    for epoch in (0, 5):
        want = aug.apply(x, idx, epoch, 9, full, full, spatial)
        want_y = aug.apply(y, idx, epoch, 9, full, full, spatial, mask_fill=IGNORE)
        for grid in _grids(len(spatial)):
            for coords in grid_coords(grid):
                tile = tile_of(spatial, grid, coords)
                reach = aug.reach(tile, spatial)
                cut = (slice(None), slice(None)) + tuple(slice(a, b) for a, b in reach.spans)
                inside = (slice(None), slice(None)) + tuple(slice(a, b) for a, b in tile.spans)
                got = aug.apply(x[cut], idx, epoch, 9, tile, reach, spatial)
                got_y = aug.apply(y[cut], idx, epoch, 9, tile, reach, spatial, mask_fill=IGNORE)
                assert np.array_equal(got, want[inside]), (grid, coords)
                assert np.array_equal(got_y, want_y[inside]), (grid, coords)


def test_reach_holds_every_source_pixel():
    """Over many draws, every stored pixel an index map reads lies in the reach (so a rank's
    tile never needs a pixel it does not hold)."""
    for cfg, plane in [(c, (9, 9)) for c in CONFIGS_2D] + [(c, (5, 7, 7)) for c in CONFIGS_3D]:
        aug = Augmentation.from_config(cfg)
        d = aug.draws(0, 0, np.arange(400), plane)
        full = Box.of_spans((0, n) for n in plane)
        for grid in _grids(len(plane))[1:3]:
            for coords in grid_coords(grid):
                tile = tile_of(plane, grid, coords)
                reach = aug.reach(tile, plane)
                for m in aug.axis_maps(d, tile, full, plane, True):
                    for j in range(len(m.source)):
                        b = int(m.source[j])
                        used = m.index[j] if m.valid is None else m.index[j][m.valid[j]]
                        if m.upper is not None:
                            used = np.concatenate([used, m.upper[j][m.weight[j] > 0]])
                        assert not used.size or reach.lo[b] <= used.min() and used.max() < reach.hi[b], (cfg, tile)


def test_new_draws_use_their_own_streams():
    """The quarter turns, the resized crop's box and the jitter factors are the documented
    functions of their streams; 2-D crops and flips keep streams 0 to 3."""
    aug = Augmentation.from_config({"rotate90": True, "brightness": 0.5, "contrast": 0.25, "crop": 2,
                                    "flip": "all", "resized_crop": {"scale": [0.5, 0.5], "ratio": [1, 1]}})
    idx = np.arange(500)
    d = aug.draws(3, 1, idx, (6, 16, 16))

    def h(name):
        return draw_hash(3, 1, idx, STREAMS[name])
    assert np.array_equal(d["turns"], (h("turns") >> np.uint64(62)).astype(int))
    assert set(d["turns"].tolist()) == {0, 1, 2, 3}
    u = (h("brightness") >> np.uint64(11)).astype(float) * 2.0 ** -53
    np.testing.assert_array_equal(d["brightness"], 0.5 + 1.0 * u)
    assert 0.75 <= d["contrast"].min() and d["contrast"].max() < 1.25
    assert np.array_equal(d["offset"][:, 0], (h("offset_z") % np.uint64(5)).astype(int))
    assert np.array_equal(d["flip"][:, 0], (h("flip_z") >> np.uint64(63)).astype(bool))
    # scale 0.5 of a 6x16x16 volume: depth round(6 * 0.5^(1/3)) = 5, plane sides round(16 * 0.5^(1/3)) = 13
    assert (d["length"] == [5, 13, 13]).all()
    assert np.array_equal(d["start"][:, 1], (h("start_y") % np.uint64(4)).astype(int))
    plane_only = Augmentation.from_config({"crop": 2, "flip": "both"}).draws(3, 1, idx, (16, 16))
    assert np.array_equal(plane_only["offset"][:, 1], (draw_hash(3, 1, idx, 1) % np.uint64(5)).astype(int))


@pytest.mark.parametrize("cfg,plane,per_pixel,ignore,words", [
    ({"rotate90": True}, (9, 8), False, None, r"rotate90 .* not square \(9x8\)"),
    ({"flip": ["z"]}, (9, 8), False, None, "flip names axis z, which 9x8 images lack"),
    ({"crop": [1, 2, 3]}, (9, 8), False, None, "crop padding gives 3 values but the images have 2 spatial axes"),
    ({"crop": 2}, (9, 8), True, None, "pads the masks with the ignore label, and the data has none"),
])
def test_what_does_not_fit_the_data_is_refused(cfg, plane, per_pixel, ignore, words):
    with pytest.raises(ConfigError, match=words):
        Augmentation.from_config(cfg).check_plane(plane, per_pixel, ignore)


def test_masks_without_an_ignore_label_may_reflect():
    aug = Augmentation.from_config({"crop": {"padding": 2, "mode": "reflect"}})
    aug.check_plane((9, 8), True, None)
    Augmentation.from_config({"crop": 2}).check_plane((9, 8), True, 255)


def test_flip_all_flips_the_axes_the_images_have():
    aug = Augmentation.from_config({"flip": "all"})
    aug.check_plane((9, 8))
    assert aug.flipped(2) == "yx" and aug.flipped(3) == "zyx"
    d = aug.draws(0, 0, np.arange(200), (9, 8))
    assert d["flip"].any(axis=0).all()
    with pytest.raises(ConfigError, match="flip names axis z"):
        Augmentation.from_config({"flip": ["z", "x"]}).check_plane((9, 8))
