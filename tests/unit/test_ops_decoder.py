"""The decoder's ops (distnet/ops/decoder: transposed convolution, nearest and linear upsampling,
cropping) in 1, 2 and 3 spatial axes: against naive loops from their definitions, against PyTorch
where it is installed (float64 and float32), their backward against central differences
(float64) and as exact adjoints; and a rank's output tile computed from its chunk (a halo plan of
the layer's rules on a process grid, uneven tiles) equal to that tile of the whole computation,
the chunk gradients adding up to the whole gradient."""
import itertools

import numpy as np
import pytest

from distnet.errors import GeometryError
from distnet.geometry import Crop, LinearUpsample, NearestUpsample, TransposedWindow, plan_halo
from distnet.ops.decoder import (Section, conv_transpose_bprop, conv_transpose_fprop, crop, crop_bprop,
                                 linear_bprop, linear_fprop, nearest_bprop, nearest_fprop)
from tests import decoder_oracles as oracle
from tests.numgrad import check_grad

# (input spatial shape, kernel, stride, padding (lo, hi) per axis, output padding)
TRANSPOSED = [
    ((5,), (3,), (2,), ((1, 1),), (1,)),
    ((4,), (4,), (3,), ((0, 2),), (2,)),          # stride > 1, asymmetric padding
    ((5, 4), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),    # the U-Net's odd kernel
    ((3, 5), (2, 3), (2, 1), ((0, 0), (1, 1)), (0, 0)),
    ((4, 3), (2, 2), (3, 3), ((0, 0), (0, 0)), (2, 1)),    # stride > kernel: outputs that read nothing
    ((2, 3), (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 0)),    # 1x1 filters
    ((3, 4, 2), (3, 2, 3), (2, 2, 1), ((1, 1), (0, 0), (1, 1)), (1, 1, 0)),
    ((2, 2, 3), (2, 2, 2), (2, 2, 2), ((0, 0),) * 3, (0, 0, 0)),
]
UPSAMPLE = [((7,), (2,)), ((5,), (3,)), ((5, 4), (2, 2)), ((3, 4), (3, 2)), ((1, 3), (2, 4)),
            ((3, 4, 2), (2, 2, 2)), ((2, 3, 3), (1, 3, 2))]
MODES = {"nearest": (nearest_fprop, nearest_bprop, oracle.nearest),
         "linear": (linear_fprop, linear_bprop, oracle.linear)}


def ids(case):
    return "x".join(map(str, case[0])) + "-" + "x".join(map(str, case[1]))


def draw(*shapes, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def transposed_case(case, seed=0):
    n, f, s, pads, op = case
    x, w = draw((2, 3) + n, (3, 2) + f, seed=seed)
    return x, w, s, pads, op


# ------------------------------------------------------------------------------ against loops

@pytest.mark.parametrize("case", TRANSPOSED, ids=ids)
def test_transposed_conv_against_loops(case):
    x, w, s, pads, op = transposed_case(case)
    want = oracle.transposed_conv(x, w, s, pads, op)
    np.testing.assert_allclose(conv_transpose_fprop(x, w, s, pads, op), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", UPSAMPLE, ids=ids)
def test_upsampling_against_loops(case, mode):
    fprop, _, naive = MODES[mode]
    n, factor = case
    x, = draw((2, 3) + n)
    y = fprop(x, factor)
    assert y.flags.c_contiguous
    np.testing.assert_allclose(y, naive(x, factor), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("lo,hi", [((1, 0), (2, 1)), ((0, 0), (0, 0)), ((-2, 1), (1, -3)), ((-1, -1), (-1, -1)),
                                   ((5, 0), (-3, 0)), ((-2, 0), (6, 0))])
def test_crop_against_loops_and_adjoint(lo, hi):
    x, = draw((2, 3, 5, 4))
    y = crop(x, lo, hi)
    np.testing.assert_array_equal(y, oracle.crop(x, lo, hi))
    g, = draw(y.shape, seed=1)
    assert np.vdot(y, g) == pytest.approx(np.vdot(x, crop_bprop(g, lo, hi)), rel=1e-13)
    assert crop_bprop(g, lo, hi).shape == x.shape


def test_crop_in_one_and_three_axes():
    x, = draw((1, 2, 6))
    np.testing.assert_array_equal(crop(x, (2,), (-1,)), oracle.crop(x, (2,), (-1,)))
    v, = draw((1, 1, 3, 4, 5))
    np.testing.assert_array_equal(crop(v, (1, -1, 0), (0, 2, 3)), oracle.crop(v, (1, -1, 0), (0, 2, 3)))
    with pytest.raises(GeometryError, match="leave nothing"):
        crop(v, (2, 0, 0), (2, 0, 0))


# ------------------------------------------------------------------------- backward: gradients

@pytest.mark.parametrize("case", TRANSPOSED, ids=ids)
def test_transposed_conv_backward_against_central_differences(case):
    x, w, s, pads, op = transposed_case(case, seed=1)
    g, = draw(conv_transpose_fprop(x, w, s, pads, op).shape, seed=2)
    dx, dw = conv_transpose_bprop(x, w, g, s, pads, op)

    def loss():
        return float((conv_transpose_fprop(x, w, s, pads, op) * g).sum())
    check_grad(loss, x, dx)
    check_grad(loss, w, dw)
    assert conv_transpose_bprop(x, w, g, s, pads, op, need_dx=False)[0] is None


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", UPSAMPLE, ids=ids)
def test_upsampling_backward_against_central_differences(case, mode):
    fprop, bprop, _ = MODES[mode]
    n, factor = case
    x, = draw((2, 2) + n, seed=3)
    g, = draw(fprop(x, factor).shape, seed=4)
    dx = bprop(g, factor, x.shape)
    check_grad(lambda: float((fprop(x, factor) * g).sum()), x, dx)
    # a linear map: its backward is its exact adjoint
    assert np.vdot(fprop(x, factor), g) == pytest.approx(np.vdot(x, dx), rel=1e-13)


# ---------------------------------------------------------------------------------- PyTorch

def torch_run(fn, *arrays):
    """PyTorch's ``fn(F, *tensors)`` (``F``: ``torch.nn.functional``) and the gradients of
    ``sum(y * g)`` for a random ``g``: ``(y, g, [gradient of each array])``."""
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(torch.nn.functional, *ts)
    g = np.random.default_rng(9).standard_normal(tuple(y.shape)).astype(arrays[0].dtype)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), g, [t.grad.numpy() for t in ts]


def assert_close(got, want, tol):
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
@pytest.mark.parametrize("case", [c for c in TRANSPOSED if all(lo == hi for lo, hi in c[3])], ids=ids)
def test_transposed_conv_equals_pytorch(case, dtype, tol):
    x, w, s, pads, op = transposed_case(case, seed=5)
    x, w = x.astype(dtype), w.astype(dtype)
    name = f"conv_transpose{x.ndim - 2}d"
    y_t, g, (dx_t, dw_t) = torch_run(lambda F, xt, wt: getattr(F, name)(
        xt, wt, stride=s, padding=[lo for lo, _ in pads], output_padding=op), x, w)
    dx, dw = conv_transpose_bprop(x, w, g, s, pads, op)
    for got, want in ((conv_transpose_fprop(x, w, s, pads, op), y_t), (dx, dx_t), (dw, dw_t)):
        assert_close(got, want, tol)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 1e-5)])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", UPSAMPLE, ids=ids)
def test_upsampling_equals_pytorch(case, mode, dtype, tol):
    fprop, bprop, _ = MODES[mode]
    n, factor = case
    x, = draw((2, 3) + n, seed=6, dtype=dtype)
    torch_mode = mode if mode == "nearest" else ("linear", "bilinear", "trilinear")[len(n) - 1]
    extra = {} if mode == "nearest" else {"align_corners": False}
    y_t, g, (dx_t,) = torch_run(lambda F, xt: F.interpolate(xt, scale_factor=factor, mode=torch_mode, **extra), x)
    assert_close(fprop(x, factor), y_t, tol)
    assert_close(bprop(g, factor, x.shape), dx_t, tol)


# ----------------------------------------------------------------- tiles computed from chunks

def sections(in_plane, rules, grid):
    """``(plan, Section)`` of every rank of ``grid`` for a layer with ``rules`` on ``in_plane``."""
    for coords in itertools.product(*map(range, grid)):
        plan = plan_halo(in_plane, *rules, grid, coords)
        yield plan, Section.of_plan(plan)


def assert_tiles(in_shape, rules, grid, fprop, bprop, out_channels=None, rtol=0.0):
    """Every rank's output tile, computed from its chunk, equals the whole output's tile; the
    ranks' chunk gradients, added back where their chunks lie, equal the whole gradient."""
    x, = draw(in_shape, seed=7)
    y = fprop(x, None)
    g, = draw(y.shape, seed=8)
    dx = bprop(x, g, None)
    total = np.zeros_like(x)
    for plan, section in sections(in_shape[2:], rules, grid):
        xc = oracle.chunk_of(x, plan.chunk)
        yt = fprop(xc, section)
        np.testing.assert_allclose(yt, oracle.tile(y, plan.out_tile), rtol=rtol, atol=0)
        oracle.add_chunk(total, bprop(xc, oracle.tile(g, plan.out_tile), section), plan.chunk)
    np.testing.assert_allclose(total, dx, rtol=1e-12, atol=1e-14)


GRIDS = {1: [(3,), (4,)], 2: [(2, 3), (3, 3), (3, 1)], 3: [(2, 2, 2), (3, 1, 2)]}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", [((13,), (2,)), ((9,), (3,)), ((13, 11), (2, 2)), ((7, 6), (3, 2)),
                                  ((7, 5, 4), (2, 2, 2))], ids=ids)
def test_upsampled_tiles_from_chunks_equal_the_whole(case, mode):
    """Bit for bit forward (the same elementwise terms); the gradients to rounding (two ranks'
    partial sums meet in the exchange's adjoint)."""
    fprop, bprop, _ = MODES[mode]
    n, factor = case
    rule = (lambda f, L: NearestUpsample(f)) if mode == "nearest" else LinearUpsample
    for grid in GRIDS[len(n)]:
        assert_tiles((2, 2) + n, [rule(f, L) for f, L in zip(factor, n)], grid,
                     lambda x, s: fprop(x, factor, s), lambda x, g, s: bprop(g, factor, x.shape, s))


@pytest.mark.parametrize("case", [((13,), (3,), (2,), ((1, 1),), (1,)), ((9,), (2,), (3,), ((0, 0),), (2,)),
                                  ((4,), (1,), (3,), ((0, 6),), (0,)),
                                  ((6, 5), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),
                                  ((7, 5), (2, 4), (2, 3), ((0, 0), (2, 2)), (0, 2)),
                                  ((5, 4, 3), (3, 2, 3), (2, 2, 1), ((1, 1), (0, 0), (1, 1)), (1, 0, 0))],
                         ids=ids)
def test_transposed_conv_tiles_from_chunks_equal_the_whole(case):
    """Uneven tiles, strides larger than the kernel (a tile's outputs may read no input at all:
    an empty chunk)."""
    n, f, s, pads, op = case
    _, w = draw((1,), (2, 3) + f, seed=9)
    rules = [TransposedWindow(k, st, lo, hi, o) for k, st, (lo, hi), o in zip(f, s, pads, op)]
    for grid in GRIDS[len(n)]:
        assert_tiles((2, 2) + n, rules, grid,
                     lambda x, sec: conv_transpose_fprop(x, w, s, pads, op, section=sec),
                     lambda x, g, sec: conv_transpose_bprop(x, w, g, s, pads, op, section=sec)[0],
                     rtol=1e-12)


def test_transposed_conv_weight_gradient_is_the_sum_over_tiles():
    n, f, s, pads, op = (7, 5), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)
    x, w = draw((2, 2) + n, (2, 3) + f, seed=10)
    g, = draw(conv_transpose_fprop(x, w, s, pads, op).shape, seed=11)
    rules = [TransposedWindow(k, st, lo, hi, o) for k, st, (lo, hi), o in zip(f, s, pads, op)]
    total = sum(conv_transpose_bprop(oracle.chunk_of(x, plan.chunk), w, oracle.tile(g, plan.out_tile), s, pads,
                                     section=sec)[1] for plan, sec in sections(n, rules, (3, 2)))
    np.testing.assert_allclose(total, conv_transpose_bprop(x, w, g, s, pads, op)[1], rtol=1e-12)


@pytest.mark.parametrize("lo,hi", [((0, 1), (1, 1)), ((-1, 2), (2, -2))])
def test_cropped_tiles_are_their_chunks(lo, hi):
    """A crop's chunk is exactly its output tile (the halo plan moves the shifted rows and
    columns): the layer's output is its chunk."""
    x, = draw((1, 2, 13, 11))
    whole = crop(x, lo, hi)
    for plan, _ in sections((13, 11), [Crop(a, b) for a, b in zip(lo, hi)], (3, 3)):
        np.testing.assert_array_equal(oracle.chunk_of(x, plan.chunk), oracle.tile(whole, plan.out_tile))


def test_sections_that_read_outside_their_chunk_are_refused():
    x, = draw((1, 1, 4, 4))
    with pytest.raises(GeometryError, match="outside the chunk"):
        nearest_fprop(x, (2, 2), Section((8, 8), (0, 0), (0, 0), (10, 8)))
    with pytest.raises(GeometryError, match="outside the chunk"):
        linear_fprop(x, (2, 2), Section((8, 8), (1, 0), (0, 0), (8, 8)))
    with pytest.raises(GeometryError, match="factors"):
        nearest_fprop(x, (2,))
    with pytest.raises(GeometryError, match="a gradient of shape"):
        linear_bprop(np.zeros((1, 1, 8, 7)), (2, 2), x.shape)
    with pytest.raises(GeometryError, match="do not match"):
        conv_transpose_fprop(x, np.zeros((2, 1, 3, 3)), (1, 1))
