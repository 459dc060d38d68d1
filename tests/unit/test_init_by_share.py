"""Initialisation by share: a rank draws the global weight stream in bounded pieces and keeps
only its slice, with exactly the values (bit for bit) and the RNG state that drawing the global
tensor whole and slicing it gives, on any grid; its peak memory is its slice plus one piece."""
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from distnet.config import load_experiment
from distnet.errors import ConfigError
from distnet.geometry.grid import GridPosition
from distnet.layers.params import gen_weights, gen_weights_part

ROOT = Path(__file__).resolve().parents[2]
INITS = [{"type": "uniform", "low": -0.3, "high": 0.2}, {"type": "normal", "loc": 0.1, "scale": 0.5},
         {"type": "gaussian"}, {"type": "node_normalized", "scale": 2.0}]


@pytest.mark.parametrize("init", INITS, ids=lambda i: i["type"])
@pytest.mark.parametrize("chunk", [1, 3, 7, 16, 10**6])   # odd pieces split gaussian pairs
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_part_equals_the_slice_of_the_whole_draw(init, chunk, dtype):
    shape = (9, 11)
    rows, cols = np.array([0, 2, 3, 8]), slice(4, 10)
    whole_rng, part_rng = np.random.RandomState(5), np.random.RandomState(5)
    whole_rng.normal(size=3), part_rng.normal(size=3)     # a spare gaussian cached before the draw
    whole = gen_weights(whole_rng, shape, init, dtype)
    got = gen_weights_part(part_rng, shape, init, dtype, rows=rows, cols=cols, chunk=chunk)
    assert got.dtype == whole.dtype and np.array_equal(got, whole[rows][:, cols])
    # the RNG continues where the whole draw leaves it (the next layer's weights)
    assert np.array_equal(whole_rng.normal(size=5), part_rng.normal(size=5))


def test_several_column_selections_and_the_default_keeps_everything():
    init = {"type": "normal"}
    whole = gen_weights(np.random.RandomState(1), (5, 6), init, np.float64)
    a, b = gen_weights_part(np.random.RandomState(1), (5, 6), init, np.float64,
                            cols=(slice(0, 2), np.array([5])), chunk=4)
    assert np.array_equal(a, whole[:, :2]) and np.array_equal(b, whole[:, 5:])
    assert np.array_equal(gen_weights_part(np.random.RandomState(1), (5, 6), init, np.float64), whole)


def _exp(name):
    exp = load_experiment(str(ROOT / "experiments" / name))
    exp.model.infer_shapes(exp.dataset.image_shape)
    return exp


@pytest.mark.parametrize("name,grid", [("mnist_gb_dist.yaml", (2, 3)), ("mnist_gb_dist.yaml", (3, 3)),
                                       ("mnist_cnn_dist.yaml", (2, 2)), ("mnist_cnn_dist.yaml", (1, 3)),
                                       ("mnist_mlp_vecpar.yaml", (1, 4)), ("mnist_mlp_vecpar.yaml", (1, 3))])
def test_layers_draw_their_share_bit_for_bit(name, grid):
    """Every rank of ``grid``: each layer's parts equal the slices of its global draw, and the
    backend's stream stays in step with the whole-tensor draws."""
    exp = _exp(name)
    for iy in range(grid[0]):
        for ix in range(grid[1]):
            placements = exp.model.placements(GridPosition(grid, (iy, ix)))
            whole_rng, part_rng = np.random.RandomState(0), np.random.RandomState(0)
            for layer, pl in zip(exp.model.layers, placements):
                layer.placement, layer.dtype = pl, np.float32
                want = [pp.local_part(v) for pp, v in zip(pl.params, layer.draw_params(whole_rng))]
                got = layer.draw_local_params(part_rng)
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), layer.name
            assert np.array_equal(whole_rng.uniform(size=3), part_rng.uniform(size=3))


def test_a_wide_vecpar_layer_holds_its_share_plus_one_piece():
    """An FC layer of 784 -> 20000 features split over 8 ranks (vecpar): drawing rank 3's
    columns peaks at its share plus one piece (2**20 values: 8 MiB of float64, with numpy's
    temporaries of the draw and the cast at most 3 such), not at the global tensor."""
    exp = _exp("mnist_mlp_vecpar.yaml")
    layer = exp.model.layers[0]
    layer.nout = 20000
    pl = exp.model.placements(GridPosition((1, 8), (0, 3)))[0]
    assert pl.params[0].sharded
    layer.placement, layer.dtype = pl, np.float32
    share = sum(int(np.prod(pp.local_shape)) for pp in pl.params) * np.dtype(layer.dtype).itemsize
    whole = int(np.prod(pl.params[0].global_shape)) * 8
    tracemalloc.start()
    try:
        layer.draw_local_params(np.random.RandomState(0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    piece = 2**20 * 8
    assert peak < share + 3 * piece, (peak, share, whole)
    assert peak < whole / 2


def test_a_value_the_dtype_cannot_hold_is_refused_naming_the_layer():
    """Every rank sees every piece of the stream, so every rank refuses alike."""
    exp = _exp("mnist_mlp_vecpar.yaml")
    layer = exp.model.layers[0]
    layer.weight_init = {"type": "uniform", "low": -1e300, "high": 1e300}
    layer.placement, layer.dtype = exp.model.placements(GridPosition((1, 2), (0, 1)))[0], np.float32
    with pytest.raises(ConfigError, match="cannot hold"):
        layer.init_params(np.random.RandomState(0))
