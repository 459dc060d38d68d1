"""Window rules for dense prediction (transposed convolution, nearest and linear upsampling,
cropping, dilated windows) against brute force from each layer's definition, and the U-Net
alignment problem: a U-Net-shaped chain of rules on odd sizes, in 2-D and 3-D, whose halo plans
move to every rank exactly what its output tile reads."""
import itertools

import pytest

from distnet.errors import GeometryError
from distnet.geometry import Crop, LinearUpsample, NearestUpsample, TransposedWindow, Window, output_plane
from distnet.geometry.overlap import border_boxes, early_output_box
from tests.geometry_oracles import (check_plans, check_span, conv_reads, crop_reads, linear_reads,
                                    nearest_reads, separable_reads, transposed_length,
                                    transposed_reads)

LENGTHS = range(1, 14)


@pytest.mark.parametrize("size,stride,pad_lo,pad_hi,dilation",
                         [(k, s, p, q, d) for k in (1, 2, 3, 5) for s in (1, 2, 3) for p in (0, 1, 3)
                          for q in (0, 2) for d in (1, 2, 3)])
def test_dilated_window_against_brute_force(size, stride, pad_lo, pad_hi, dilation):
    w = Window(size, stride, pad_lo, pad_hi, dilation)
    for L in LENGTHS:
        reads = conv_reads(size, stride, pad_lo, dilation)
        n = sum(1 for o in range(4 * L + 8) if max(reads(o, L)) < L + pad_hi)   # inside the padding
        if n == 0:
            with pytest.raises(GeometryError):
                w.output_length(L)
            continue
        assert w.output_length(L) == n
        check_span(w, reads, L)


@pytest.mark.parametrize("size,stride,pad,output_padding",
                         [(k, s, p, op) for k in (1, 2, 3, 4, 5) for s in (1, 2, 3) for p in (0, 1, 2)
                          for op in range(s)])
def test_transposed_window_against_brute_force(size, stride, pad, output_padding):
    """Odd and even kernels, strides larger than the kernel (outputs that read nothing),
    padding that crops, PyTorch's output_padding."""
    for pad_lo, pad_hi in ((pad, pad), (pad, 0), (0, pad)):
        rule = TransposedWindow(size, stride, pad_lo, pad_hi, output_padding)
        reads = transposed_reads(size, stride, pad_lo, pad_hi, output_padding)
        for L in LENGTHS:
            n = transposed_length(L, size, stride, pad_lo, pad_hi, output_padding)
            if n < 1:
                with pytest.raises(GeometryError):
                    rule.output_length(L)
                continue
            assert rule.output_length(L) == n
            check_span(rule, reads, L)


@pytest.mark.parametrize("factor", [1, 2, 3, 4])
def test_upsampling_against_pytorch_formulas(factor):
    for L in LENGTHS:
        near, lin = NearestUpsample(factor), LinearUpsample(factor, L)
        assert near.output_length(L) == lin.output_length(L) == L * factor
        check_span(near, nearest_reads(factor), L)
        check_span(lin, linear_reads(factor), L)
        # the linear halo stays inside the input (the border repeats its last value)
        assert lin.input_span(0, L * factor) == (0, L)


def test_linear_upsampling_reads_both_neighbours_and_clamps():
    rule = LinearUpsample(2, 5)
    # output 0 sits at -0.25 -> clamped to input 0 (reads 0 and 1); output 9 at 4.25 -> 4 and 4
    assert [rule.input_span(o, 1) for o in range(10)] == [
        (0, 2), (0, 2), (0, 2), (1, 3), (1, 3), (2, 4), (2, 4), (3, 5), (3, 5), (4, 5)]
    with pytest.raises(GeometryError, match="made for input length 5"):
        rule.output_length(6)


def test_crop_against_brute_force():
    for lo, hi in itertools.product(range(-2, 4), repeat=2):
        for L in LENGTHS:
            rule = Crop(lo, hi)
            if L - lo - hi < 1:
                with pytest.raises(GeometryError):
                    rule.output_length(L)
                continue
            assert rule.output_length(L) == L - lo - hi
            check_span(rule, crop_reads(lo), L)
    assert Crop.center(13, 12) == Crop(0, 1) and Crop.center(11, 6) == Crop(2, 3)


@pytest.mark.parametrize("args", [(0,), (3, 0), (3, 1, -1), (2, 2, 0, 0, 2), (3, 1, 0, 0, 1)])
def test_transposed_window_rejects_bad_parameters(args):
    with pytest.raises(GeometryError):
        TransposedWindow(*args)


@pytest.mark.parametrize("make", [lambda: NearestUpsample(0), lambda: LinearUpsample(2, 0),
                                  lambda: Window(3, 1, 0, 0, 0)])
def test_rules_reject_bad_parameters(make):
    with pytest.raises(GeometryError):
        make()


# -- the U-Net alignment problem ------------------------------------------------------------------

def conv3():
    return Window(3, 1, 1, 1), conv_reads(3, 1, 1)


def pool2():
    return Window(2, 2), conv_reads(2, 2)


UPSAMPLERS = {
    "nearest": lambda L: (NearestUpsample(2), nearest_reads(2)),
    "linear": lambda L: (LinearUpsample(2, L), linear_reads(2)),
    "transposed2s2": lambda L: (TransposedWindow(2, 2), transposed_reads(2, 2)),
    "transposed3s2p1": lambda L: (TransposedWindow(3, 2, 1, 1, 1), transposed_reads(3, 2, 1, 1)),
}


def unet_steps(shape, up):
    """The layers of a one-level U-Net on ``shape`` as ``(name, input shape, per-axis rules,
    per-axis reads)``: conv 3 pad 1, pool 2, conv, upsample x2 (``up``), crop the first conv's
    output to the upsampled size (the skip connection), conv after the concatenation."""
    steps, enc1 = [], tuple(shape)

    def step(name, in_shape, makers):
        rules, reads = zip(*makers)
        steps.append((name, in_shape, rules, reads))
        return output_plane(in_shape, *rules)

    step("conv1", shape, [conv3() for _ in shape])
    pooled = step("pool", enc1, [pool2() for _ in shape])
    enc2 = step("conv2", pooled, [conv3() for _ in shape])
    upped = step("up", enc2, [UPSAMPLERS[up](n) for n in enc2])
    crops = [Crop.center(n, m) for n, m in zip(enc1, upped)]
    cropped = step("crop", enc1, [(c, crop_reads(c.lo)) for c in crops])
    assert cropped == upped         # the two halves of the concatenation have one shape ...
    step("conv3", upped, [conv3() for _ in shape])
    return steps


UNET_CASES = [((13, 11), (3, 3)), ((13, 11), (2, 3)), ((9, 7, 5), (3, 2, 1)), ((9, 7, 5), (2, 2, 2)),
              ((21,), (4,))]


@pytest.mark.parametrize("up", list(UPSAMPLERS))
@pytest.mark.parametrize("shape,grid", UNET_CASES, ids=[f"{'x'.join(map(str, s))}-on-{'x'.join(map(str, g))}"
                                                        for s, g in UNET_CASES])
def test_unet_chain_plans_move_exactly_what_each_tile_reads(shape, grid, up):
    """Every layer's output is cut by tile_of; each rank's chunk is the hull of what its output
    tile reads (from the layers' definitions) and is assembled from its own tile, one box from
    each rank whose tile it meets, and padding (check_plans)."""
    tiles = {}
    for name, in_shape, rules, reads in unet_steps(shape, up):
        plans = check_plans(in_shape, rules, reads, grid)
        tiles[name] = {c: p.out_tile for c, p in plans.items()}
    # the two halves of the concatenation have one shape, so the same tiles: it is local
    assert tiles["up"] == tiles["crop"]


def test_unet_misalignment_costs_a_row_per_cut():
    """13 rows on 3 ranks: tiles 5, 4, 4. After pool and x2 upsampling the decoder map has 12
    rows, tiles 4, 4, 4, so the crop of the 13-row encoder map moves one row across each of the
    two cuts: ranks 1 and 2 each receive one row (of the 10 cropped columns) from the rank
    above."""
    steps = {name: (s, rules) for name, s, rules, _ in unet_steps((13, 11), "nearest")}
    in_shape, rules = steps["crop"]
    plans = check_plans(in_shape, rules, [crop_reads(r.lo) for r in rules], (3, 1))
    got = {c: [(t.peer, t.box.shape) for t in p.recvs] for c, p in plans.items()}
    assert got == {(0, 0): [], (1, 0): [((0, 0), (1, 10))], (2, 0): [((1, 0), (1, 10))]}
    # nearest upsampling of 6 rows (tiles 2, 2, 2) into 12 (tiles 4, 4, 4) is aligned: no message
    in_shape, rules = steps["up"]
    assert all(not p.recvs for p in check_plans(in_shape, rules, [nearest_reads(2)] * 2, (3, 1)).values())


@pytest.mark.parametrize("up", list(UPSAMPLERS))
def test_early_outputs_of_decoder_rules_read_no_ghost(up):
    """The overlap split (outputs computable before the halo arrives) for the new rules, 3-D."""
    for name, in_shape, rules, reads in unet_steps((9, 7, 5), up):
        for coords, plan in check_plans(in_shape, rules, reads, (3, 2, 1)).items():
            early = early_output_box(plan, *rules)
            ghosts = {p for t in plan.recvs for p in itertools.product(*(range(a, b) for a, b in t.box.spans))}
            for o in itertools.product(*(range(a, b) for a, b in early.spans)):
                assert not separable_reads(reads, o, in_shape) & ghosts, (name, coords, o)
            tile = plan.out_tile
            parts = border_boxes(tile, early) + ([early] if not early.is_empty() else [])
            assert sum(b.size for b in parts) == tile.size
            if not plan.recvs:
                assert early == tile
