"""The distributed recipes of the statistics ops, with real MPI: every rank holds a tile of every
image of its data replica's share of the batch, computes partial sums, ONE Allreduce sums them,
and every rank finishes the formula; the results equal the single-process computation on the
whole array (built on every rank). Batch norm (forward, backward, parameter gradients, running
averages), global average pooling, dropout masks, and the global gradient norm."""
import numpy as np
import pytest

from distnet.comm import allreduce_sum
from distnet.geometry.partition import block_of, tile_of
from distnet.ops.batchnorm import (bn_bprop_dx, bn_bprop_partial, bn_fprop, bn_stats_finish,
                                   bn_stats_partial, bn_update_running)
from distnet.ops.dropout import dropout_mask, stream_key
from distnet.ops.global_pool import gap_bprop, gap_finish, gap_partial, global_avg_pool_bprop, global_avg_pool_fprop
from distnet.optim.clipping import clip_coefficient, sum_of_squares

MPI_SIZES = (1, 2, 3, 4)
N, C, H, W = 6, 3, 9, 10


def layouts(size):
    """``(data replicas, (Py, Px))`` layouts of ``size`` ranks."""
    out = [(1, (1, size)), (1, (size, 1))]
    if size == 4:
        out += [(1, (2, 2)), (2, (1, 2)), (2, (2, 1)), (4, (1, 1))]
    if size == 2:
        out += [(2, (1, 1))]
    return out


def place(comm, data, grid):
    """This rank's (batch slice, pixel slices) and its spatial communicator."""
    Py, Px = grid
    d, s = divmod(comm.rank, Py * Px)
    iy, ix = divmod(s, Px)
    b0, nb = block_of(N, data, d)
    box = tile_of((H, W), grid, (iy, ix))
    index = (slice(b0, b0 + nb), slice(None), slice(box.y0, box.y1), slice(box.x0, box.x1))
    return index, comm.Split(d, s)


def whole():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((N, C, H, W)) * 2 + 3, rng.standard_normal(C) + 1, rng.standard_normal(C),
            rng.standard_normal((N, C, H, W)))


@pytest.mark.parametrize("one_pass", [True, False])
def test_batchnorm_over_tiles_and_replicas(comm, one_pass):
    x, gamma, beta, dy = whole()
    count = N * H * W
    # the single-process computation
    shift = np.array([2.5, 3.0, 3.5]) if one_pass else None
    s = bn_stats_partial(x, shift)
    mean, var = bn_stats_finish(s, count, shift)
    y, xhat, inv = bn_fprop(x, mean, var, gamma, beta)
    g = bn_bprop_partial(dy, xhat)
    dx = bn_bprop_dx(dy, xhat, gamma, inv, g, count)
    rm, rv = np.zeros(C), np.ones(C)
    bn_update_running(rm, rv, mean, var, count)
    for data, grid in layouts(comm.size):
        t, spatial = place(comm, data, grid)
        xt = np.ascontiguousarray(x[t])
        if one_pass:
            st = allreduce_sum([bn_stats_partial(xt, shift)], comm)[0]
            mt, vt = bn_stats_finish(st, count, shift)
        else:                                   # two passes, two Allreduces
            st = allreduce_sum([bn_stats_partial(xt)], comm)[0]
            m0, _ = bn_stats_finish(st, count)
            st = allreduce_sum([bn_stats_partial(xt, m0)], comm)[0]
            mt, vt = bn_stats_finish(st, count, m0)
        np.testing.assert_allclose(mt, mean, rtol=1e-13)
        np.testing.assert_allclose(vt, var, rtol=1e-12)
        yt, xhat_t, inv_t = bn_fprop(xt, mt, vt, gamma, beta)
        np.testing.assert_allclose(yt, y[t], rtol=1e-11, atol=1e-12)
        gt = allreduce_sum([bn_bprop_partial(np.ascontiguousarray(dy[t]), xhat_t)], comm)[0]
        np.testing.assert_allclose(gt, g, rtol=1e-11, atol=1e-11)      # dbeta, dgamma: global
        dxt = bn_bprop_dx(np.ascontiguousarray(dy[t]), xhat_t, gamma, inv_t, gt, count)
        np.testing.assert_allclose(dxt, dx[t], rtol=1e-10, atol=1e-12)
        rmt, rvt = np.zeros(C), np.ones(C)
        bn_update_running(rmt, rvt, mt, vt, count)
        np.testing.assert_allclose(rmt, rm, rtol=1e-13)
        np.testing.assert_allclose(rvt, rv, rtol=1e-12)
        spatial.Free()


def test_global_average_pooling_over_tiles(comm):
    x, _, _, dy4 = whole()
    dy = dy4[:, :, 0, 0].copy()
    y, dx = global_avg_pool_fprop(x), global_avg_pool_bprop(dy, x.shape)
    for data, grid in layouts(comm.size):
        t, spatial = place(comm, data, grid)          # sums over the tiles of one image only
        s = allreduce_sum([gap_partial(np.ascontiguousarray(x[t]))], spatial)[0]
        np.testing.assert_allclose(gap_finish(s, H * W), y[t[0]], rtol=1e-13)
        h, w = t[2].stop - t[2].start, t[3].stop - t[3].start
        np.testing.assert_array_equal(gap_bprop(dy[t[0]], (h, w), H * W), dx[t])
        spatial.Free()


def test_dropout_tiles_use_the_global_mask(comm):
    key = stream_key(17, 3, 5)
    mask = dropout_mask(key, 0.3, (N, C, H, W), dtype="float64")
    for data, grid in layouts(comm.size):
        t, spatial = place(comm, data, grid)
        np.testing.assert_array_equal(dropout_mask(key, 0.3, (N, C, H, W), t, dtype="float64"), mask[t])
        spatial.Free()


def test_global_gradient_norm(comm):
    rng = np.random.default_rng(5)
    sharded, replicated = rng.standard_normal((8, 12)), rng.standard_normal(7)
    norm2 = float((sharded ** 2).sum() + (replicated ** 2).sum())
    o, n = block_of(12, comm.size, comm.rank)
    mine = [sharded[:, o:o + n]] + ([replicated] if comm.rank == 0 else [])   # replicated: counted once
    total = allreduce_sum([np.asarray([float(sum_of_squares(mine))])], comm)[0][0]
    assert total == pytest.approx(norm2, rel=1e-13)
    factor, norm = clip_coefficient(total, 1.0)
    assert norm == pytest.approx(np.sqrt(norm2), rel=1e-13) and factor < 1
