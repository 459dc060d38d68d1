"""distnet.ops.padding (zero padding and its adjoint) and distnet.ops.workspace (reused scratch
buffers), on every array backend (distnet/testing/backends.py)."""
import numpy as np
import pytest

from distnet.geometry.partition import Box
from distnet.ops.padding import crop_from_chunk, pad_to_chunk
from distnet.ops.workspace import Workspace, scratch
from distnet.testing.backends import make_backend


@pytest.fixture
def be(backend_name):
    return make_backend(backend_name)


OWN = Box(0, 5, 0, 6)                       # the whole 5 x 6 image
CHUNKS = [Box(-1, 6, -2, 7), Box(-2, 4, 1, 8), Box(1, 4, 2, 5)]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_pad_to_chunk_and_its_adjoint(chunk, be):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 6))
    p = be.to_host(pad_to_chunk(be.asarray(x), OWN, chunk))
    expected = np.zeros((2, 3, chunk.y1 - chunk.y0, chunk.x1 - chunk.x0))
    for i in range(chunk.y0, chunk.y1):                 # written out pixel by pixel
        for j in range(chunk.x0, chunk.x1):
            if 0 <= i < 5 and 0 <= j < 6:
                expected[:, :, i - chunk.y0, j - chunk.x0] = x[:, :, i, j]
    np.testing.assert_array_equal(p, expected)
    g = rng.standard_normal(p.shape)
    c = be.to_host(crop_from_chunk(be.asarray(g), OWN, chunk))
    assert c.shape == x.shape
    assert np.vdot(p, g) == pytest.approx(np.vdot(x, c), rel=1e-12)


def test_same_box_is_the_identity(be):
    x = be.asarray(np.ones((1, 1, 5, 6)))
    assert pad_to_chunk(x, OWN, OWN) is x and crop_from_chunk(x, OWN, OWN) is x


def test_workspace_reuses_buffers_per_name_shape_dtype_and_module(be):
    ws = Workspace()
    like = be.xp.zeros(1)
    a = ws.get("a", (2, 3), "float32", like=like, zeroed=True)
    assert type(a) is type(like) and a.dtype == np.float32 and not be.to_host(a).any()
    a.fill(7)
    assert ws.get("a", (2, 3), np.float32, like=like) is a          # handed back unchanged
    assert ws.get("a", (3, 2), np.float32, like=like) is not a      # another shape: new buffer
    b = ws.get("b", (4,), "float64", like=like)
    assert ws.nbytes == 3 * 2 * 4 + 4 * 8 and "2 buffers" in repr(ws)
    if be.name != "numpy":                                          # a numpy caller gets numpy
        assert isinstance(ws.get("b", (4,), "float64"), np.ndarray)
    s = scratch(None, "c", (2, 2), "float64", like=like, zeroed=True)
    assert type(s) is type(like) and not be.to_host(s).any()
    assert b is not None
