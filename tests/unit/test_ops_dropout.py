"""distnet.ops.dropout: tile masks are exactly the slices of the global mask (any tiling, any
axis), the stream is a pure function of (seed, counters, position), and the probability and
scaling semantics (inverted dropout) hold, on every array backend."""
import numpy as np
import pytest

from distnet.errors import ConfigError
from distnet.ops.dropout import (dropout_bprop, dropout_fprop, dropout_mask, keep_mask, random_bits,
                                 stream_key, uniform)
from distnet.testing.backends import make_backend


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


def splitmix64_reference(key, i):
    """The textbook splitmix64 output for counter ``i`` (Python ints)."""
    M = (1 << 64) - 1
    z = (key + (i + 1) * 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def test_bits_match_reference_loop(be):
    key = stream_key(7, 3, 1)
    bits = be.to_host(random_bits(key, (2, 3, 4), xp=be.xp)).ravel()
    assert bits.dtype == np.uint64
    assert [int(b) for b in bits] == [splitmix64_reference(key, i) for i in range(24)]


@pytest.mark.parametrize("cuts", [(1, 1, 2, 1), (2, 1, 2, 2), (1, 1, 3, 3), (3, 1, 1, 1)])
def test_tile_masks_are_global_slices(cuts, be):
    shape = (6, 3, 7, 8)
    key = stream_key(1234, 5, 2)
    whole = be.to_host(dropout_mask(key, 0.3, shape, xp=be.xp, dtype="float64"))
    edges = [np.linspace(0, n, k + 1).astype(int) for n, k in zip(shape, cuts)]
    seen = np.zeros(shape, dtype=int)
    for a in zip(edges[0][:-1], edges[0][1:]):
        for b in zip(edges[2][:-1], edges[2][1:]):
            for c in zip(edges[3][:-1], edges[3][1:]):
                t = (slice(*a), slice(None), slice(*b), slice(*c))
                m = be.to_host(dropout_mask(key, 0.3, shape, t, xp=be.xp, dtype="float64"))
                np.testing.assert_array_equal(m, whole[t])
                seen[t] += 1
    assert (seen == 1).all()


def test_fc_and_partial_index(be):
    key = stream_key(0, 0)
    whole = be.to_host(keep_mask(key, 0.5, (8, 10), xp=be.xp))
    np.testing.assert_array_equal(be.to_host(keep_mask(key, 0.5, (8, 10), (slice(2, 5),), xp=be.xp)), whole[2:5])


def test_probability_and_scaling(be):
    shape = (64, 16, 32)
    key = stream_key(42, 0, 0)
    for p in (0.0, 0.1, 0.5, 0.9):
        m = be.to_host(dropout_mask(key, p, shape, xp=be.xp, dtype="float32"))
        assert m.dtype == np.float32
        kept = m != 0
        assert abs(kept.mean() - (1 - p)) < 4 * np.sqrt(p * (1 - p) / m.size) + 1e-12
        np.testing.assert_array_equal(np.unique(m[kept]), np.float32(1 / (1 - p)))
    u = be.to_host(uniform(key, shape, xp=be.xp))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    np.testing.assert_array_equal(be.to_host(keep_mask(key, 0.25, shape, xp=be.xp)), u >= 0.25)


def test_keys_differ_and_are_deterministic():
    keys = {stream_key(s, t, l) for s in range(3) for t in range(3) for l in range(3)}
    assert len(keys) == 27
    assert stream_key(1, 2, 3) == stream_key(1, 2, 3)
    a = random_bits(stream_key(1, 2, 3), (100,))
    b = random_bits(stream_key(1, 2, 4), (100,))
    assert (a != b).all()


def test_fprop_bprop(be):
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    m = dropout_mask(stream_key(3), 0.4, (4, 5), xp=be.xp, dtype="float64")
    mh = be.to_host(m)
    np.testing.assert_array_equal(be.to_host(dropout_fprop(be.asarray(x), m)), x * mh)
    np.testing.assert_array_equal(be.to_host(dropout_bprop(be.asarray(dy), m)), dy * mh)
    xd = be.asarray(x)
    assert dropout_fprop(xd, m, out=xd) is xd


def test_bad_probability_and_index():
    with pytest.raises(ConfigError):
        dropout_mask(1, 1.0, (3,))
    with pytest.raises(ConfigError):
        dropout_mask(1, -0.1, (3,))
    with pytest.raises(ConfigError):
        keep_mask(1, 0.5, (4, 4), (slice(0, 4, 2),))
    with pytest.raises(ConfigError):
        keep_mask(1, 0.5, (4,), (slice(None), slice(None)))
