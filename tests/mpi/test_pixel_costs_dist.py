"""The per-pixel costs and metrics on tiled outputs equal the one-process numbers: on 2x2, 3x3
(uneven tiles of 13x11) and 2 data replicas x 1x2, every rank holds only its tile of its
replica's rows, ONE Allreduce completes the cost's sums, and in float64

* the cross-entropies' gradients are the one-process bits (their normaliser is formed from
  integer counts) and their loss agrees to summation order; Dice's loss and gradient agree to
  summation order (its sums of probabilities are float sums);
* trainings record the one-process costs (to 1e-12), the same pixel confusion matrices, IoU and
  Dice (identical: integer counts), and end with the same weights; so do 2 pipeline stages."""
import numpy as np
import pytest

from distnet.cli.compare import overlaps_agree
from distnet.comm import Topology, allreduce_sum
from distnet.geometry.partition import tile_of
from distnet.layers.pixel_cost import TiledCost
from distnet.ops.pixel_costs import DiceLoss, PixelBinaryCrossEntropy, PixelSoftmaxCrossEntropy
from tests.pixel_data import pixel_experiment
from tests.tiny import run_recorded

MPI_SIZES = (1, 4, 9)
MPI_TIMEOUT = 900
B, K, H, W = 5, 4, 13, 11
#: ``(data replicas, grid)`` per world size.
LAYOUTS = {1: [(1, (1, 1))], 4: [(1, (2, 2)), (2, (1, 2))], 9: [(1, (3, 3))]}
COSTS = {
    "ce": lambda: PixelSoftmaxCrossEntropy(ignore_label=255, class_weights=[0.5, 1.0, 2.0, 0.25]),
    "ce_plain": lambda: PixelSoftmaxCrossEntropy(),
    "bce": lambda: PixelBinaryCrossEntropy(ignore_label=9),
    "dice": lambda: DiceLoss(ignore_label=255, class_weights=[1.0, 2.0, 0.5, 1.5]),
    "dice_batch": lambda: DiceLoss(batch=True, include_background=False, ignore_label=0),
}
#: Costs whose gradient is the one-process bits on every layout.
BITWISE = ("ce", "ce_plain", "bce")


def _data(name):
    rng = np.random.default_rng(11)
    if name == "bce":
        y = 1 / (1 + np.exp(-2 * rng.standard_normal((B, 1, H, W))))
        t = rng.integers(0, 2, (B, H, W))
        t[rng.uniform(size=t.shape) < 0.1] = 9
        return y, t
    y = 3 * rng.standard_normal((B, K, H, W))
    t = rng.integers(0, K, (B, H, W))
    if name != "ce_plain":
        t[rng.uniform(size=t.shape) < 0.1] = 255
    return y, t


def _mine(topo, a):
    """This rank's rows (its replica's contiguous block) and tile of ``a (B, [K,] H, W)``."""
    rows = np.array_split(np.arange(len(a)), topo.ndata)[topo.data_index]
    box = tile_of((H, W), topo.grid, topo.coords)
    tile = (slice(box.y0, box.y1), slice(box.x0, box.x1))
    return np.ascontiguousarray(a[(rows,) + (slice(None),) * (a.ndim - 3) + tile])


@pytest.mark.parametrize("name", sorted(COSTS))
def test_tiled_cost_equals_one_process(comm, name):
    cost = COSTS[name]()
    y, t = _data(name)
    want_loss = float(cost.loss_of(cost.partial_sums(y, t), B))
    want = cost.delta(y, t, cost.partial_sums(y, t), B)
    for ndata, grid in LAYOUTS[comm.size]:
        topo = Topology.from_world(grid=grid, data=ndata, world=comm)
        try:
            loss, delta = TiledCost(cost, topo).loss_delta(_mine(topo, y), _mine(topo, t), B)
            allreduce_sum([loss], topo.data)        # what the training step sums
            if name in BITWISE:
                np.testing.assert_array_equal(delta, _mine(topo, want), err_msg=f"{name} {ndata} {grid}")
            else:
                np.testing.assert_allclose(delta, _mine(topo, want), rtol=1e-12, atol=1e-15 * np.abs(want).max())
            np.testing.assert_allclose(loss[0], want_loss, rtol=1e-13, err_msg=f"{name} {ndata} {grid}")
        finally:
            topo.free()


COUNTED = ("misclass", "confusion", "class_accuracy", "pixel_acc", "class_iou", "miou", "class_dice", "dice")
#: 13 rows: tiles of 5, 4, 4 rows on 3 grid rows.
TALL = {"n_valid: 4": "n_valid: 4, height: 13"}


def _params(exp):
    return [p.value for layer in exp.model.layers for p in layer.params()]


@pytest.mark.parametrize("name", ["ce", "dice", "dice_batch", "bce"])
def test_training_on_tiles_equals_one_process(comm, name):
    ref, ref_res, ref_hist = run_recorded(pixel_experiment(name, **TALL))
    for ndata, grid in LAYOUTS[comm.size]:
        exp, res, hist = run_recorded(pixel_experiment(name, dist=True, **TALL), grid, ndata, comm)
        where = (name, ndata, grid)
        np.testing.assert_allclose(res.epoch_costs, ref_res.epoch_costs, rtol=1e-12, err_msg=str(where))
        for mine, theirs in zip(hist, ref_hist, strict=True):
            for split in ("train", "valid", "test"):
                for metric in COUNTED:
                    assert mine[f"{split}_{metric}"] == theirs[f"{split}_{metric}"], (*where, split, metric)
                np.testing.assert_allclose(mine[f"{split}_cost"], theirs[f"{split}_cost"], rtol=1e-12)
        assert res.final_metrics == ref_res.final_metrics and res.test_misclass == ref_res.test_misclass
        verdict = overlaps_agree(ref_res.final_metrics, res.final_metrics, 0.0)   # distnet compare's
        assert verdict[1].endswith("identical")
        for a, b in zip(_params(exp), _params(ref), strict=True):   # conv filters: replicated
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13, err_msg=str(where))


@pytest.mark.mpi_size(4)
def test_pipeline_stages_train_as_one_process(comm):
    """2 stages of a 1x2 grid: the cost (on the last stage's tiles) and the metrics as on one
    process."""
    staged = {"num_epochs: 3,": "num_epochs: 3, stages: [1],"}
    _, ref, _ = run_recorded(pixel_experiment("dice", **staged))
    staged["FitPredictErrorExperiment { dist_flag: True,"] = "FitPredictErrorExperiment { dist_flag: True, pipe: 2,"
    _, res, _ = run_recorded(pixel_experiment("dice", dist=True, **staged), (1, 2), 1, comm, pipe=2)
    np.testing.assert_allclose(res.epoch_costs, ref.epoch_costs, rtol=1e-12)
    assert res.final_metrics == ref.final_metrics
