"""The metrics of an evaluated split of a regression (a cost that ``regresses``: ``MeanSquared``,
``SumSquared``): the cost, the mean squared and mean absolute error over the samples and targets,
and both per target, from one forward pass.

Every data replica predicts its own rows (:meth:`~distnet.models.model.Model.predict`; the
outputs are complete on every spatial rank); the float sums are added over the replicas
(``topology.data``, one Allreduce), so any layout gives the one-process numbers up to the order
of summation.
"""
import numpy as np

from ..comm.reduce import allreduce_scalars
from ..errors import TrainingError

#: The one-number metrics an evaluated split of a regression records (a checkpoint ``monitor``
#: may name ``valid_mse``).
REGRESSION_METRICS = ("cost", "mse", "mae")


def own_rows(model, n):
    """The rows of ``n`` that this data replica evaluates: its block of every minibatch."""
    bs = model.batch_size or n
    if not n:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([model.replica_rows(np.arange(i, min(i + bs, n))) for i in range(0, n, bs)])


def regression_split_metrics(model, x, targets):
    """``{"cost", "mse", "mae", "target_mse", "target_mae"}`` of the samples ``x (N, C, *s)``
    (this rank's tiles) with float targets ``targets (N, T)``: ``cost`` the mean cost per
    sample (as the epoch's training cost), ``mse`` / ``mae`` over every sample and target,
    ``target_mse`` / ``target_mae`` lists of ``T``. Collective over ``model.topology.data``;
    the same on every rank."""
    n, ntargets = len(targets), model.layers[-1].out_shape[0]
    mine = own_rows(model, n)
    y = model.predict(x) if n else np.zeros((0, ntargets))
    t = np.asarray(targets)[mine]
    bad = int(np.count_nonzero(~np.isfinite(y).all(axis=1))) if len(y) else 0
    d = y.astype(np.float64) - t
    cost = float(model.cost.loss_sum(y, t)) if len(y) and not bad else 0.0
    summed = allreduce_scalars([bad, cost, *(d * d).sum(axis=0), *np.abs(d).sum(axis=0)], model.topology.data)
    if summed[0]:   # every rank agrees: the counts are summed over the replicas
        raise TrainingError(f"the model's outputs are not finite (NaN or inf) for {int(summed[0])} of {n} "
                            "samples, so its errors mean nothing; check the weights (weight_init), the learning "
                            "rate and the data")
    squares, absolute = np.array(summed[2:2 + ntargets]), np.array(summed[2 + ntargets:])
    per = max(n, 1)
    return {"cost": summed[1] / n if n else float("nan"), "mse": squares.sum() / (per * ntargets),
            "mae": absolute.sum() / (per * ntargets), "target_mse": (squares / per).tolist(),
            "target_mae": (absolute / per).tolist()}


def final_regression_fields(split, metrics):
    """The fields of a split's regression ``metrics`` that the run's final record keeps
    (``test_mse``, ``test_mae``, ``test_target_mse``, ``test_target_mae``)."""
    return {f"{split}_{k}": metrics[k] for k in ("mse", "mae", "target_mse", "target_mae")}


def regression_line(split, metrics, names):
    """What a run and ``distnet evaluate`` print of a split's regression ``metrics`` (``names``:
    the targets' names, or None)."""
    names = names or [str(k) for k in range(len(metrics["target_mse"]))]
    per = ", ".join(f"{n} {m:.5g} / {a:.5g}" for n, m, a in zip(names, metrics["target_mse"], metrics["target_mae"]))
    return (f"{split} set mean squared error {metrics['mse']:.6g}, mean absolute error {metrics['mae']:.6g} "
            f"(per target, MSE / MAE: {per})")
