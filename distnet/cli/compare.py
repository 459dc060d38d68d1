"""``distnet compare``: run one experiment on one process and another on N ranks, then print
their per-epoch costs and error rates side by side with the largest difference."""
import json
import os
import subprocess
import sys
import tempfile

import click

from ..comm.launcher import launch_env, mpiexec_path
from ..errors import DistnetError
from .job import Job, fail, launched_on_many
from .options import finite_number, given_path


class RunFailed(DistnetError):
    """One side of a comparison ended with an error: ``distnet compare`` exits with its status
    (2 for its experiment file, else 1), not as for runs that differ."""

    def __init__(self, message, code):
        super().__init__(message)
        self.exit_code = 2 if code == 2 else 1


def run_experiment(path, nranks, metrics, overrides=(), timeout=None, threads=None):
    """Run ``distnet run path`` on ``nranks`` processes (1 = no launcher) with no run directory
    and ``threads`` BLAS/kernel threads per process (None: 1 on several ranks, the run's own
    plan on one); returns the exit code."""
    cmd = [sys.executable, "-m", "distnet", "run", path, "--metrics", metrics, "--no-run-dir"]
    for o in overrides:
        cmd += ["--set", o]
    if nranks > 1:
        launcher = mpiexec_path()
        if launcher is None:
            raise FileNotFoundError("mpiexec not found: pip install mpich (or load your MPI)")
        cmd = [launcher, "-n", str(nranks), *cmd]
    return subprocess.run(cmd, timeout=timeout, env=launch_env(nranks, threads=threads)).returncode


def compare_threads(nranks, env=None):
    """The :class:`~distnet.ops.threads.ThreadPlan` both sides of a comparison run with: the
    plan of one of ``nranks`` ranks on this machine (the user's variables win, as in a run), so
    that the one-process side sums in the same order (a different BLAS / kernel thread count
    moves a float32 cost by about 1e-5 relative)."""
    from ..comm.node import own_cores
    from ..ops.threads import thread_plan
    cores = len(own_cores())
    return thread_plan(cores, nranks, own_cores=cores, env=env)


def read_metrics(path):
    """``(epoch costs, final record, pretraining records)`` from a ``--metrics`` JSON-lines
    file (pretraining: GB's ``{"pretrain", "pretrain_epoch", "cost", ...}``, in order)."""
    costs, final, pretrain = [], {}, []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("final"):
                final = rec
            elif "pretrain" in rec:
                pretrain.append(rec)
            else:
                costs.append(rec["cost"])
    return costs, final, pretrain


def _cost_row(label, x, y):
    d = abs(x - y) if x is not None and y is not None else float("inf")
    return (label, x, y, d, d / abs(x) if x else d)


def compare_runs(a, b):
    """Rows ``(label, a, b, |a - b|, relative)`` for the side-by-side table, the largest relative
    cost difference and the largest error-rate difference (points). ``a``, ``b``: what
    :func:`read_metrics` returns (the pretraining records may be left out)."""
    (ca, fa), (cb, fb) = a[:2], b[:2]
    pa, pb = (a[2] if len(a) > 2 else []), (b[2] if len(b) > 2 else [])
    rows = []
    keyed_b = {(r["pretrain"], r["pretrain_epoch"]): r["cost"] for r in pb}
    keys = [(r["pretrain"], r["pretrain_epoch"]) for r in pa]
    keys += [k for k in ((r["pretrain"], r["pretrain_epoch"]) for r in pb) if k not in keys]
    keyed_a = {(r["pretrain"], r["pretrain_epoch"]): r["cost"] for r in pa}
    for layer, e in keys:
        rows.append(_cost_row(f"pretrain {layer} epoch {e} cost", keyed_a.get((layer, e)), keyed_b.get((layer, e))))
    for e in range(max(len(ca), len(cb))):
        rows.append(_cost_row(f"epoch {e} cost", ca[e] if e < len(ca) else None, cb[e] if e < len(cb) else None))
    max_cost = max([r[4] for r in rows], default=0.0)
    max_rate = 0.0
    for key in ("train_misclass", "valid_misclass", "test_misclass"):
        x, y = fa.get(key), fb.get(key)
        if x is None and y is None:
            continue
        d = abs(x - y) if x is not None and y is not None else float("inf")
        max_rate = max(max_rate, d)
        rows.append((key.replace("_", " ") + " %", x, y, d, None))
    rows += [(f"{split} {metric.replace('_', ' ')} %", x, y, d, None)
             for split, metric, x, y, d in _overlaps(fa, fb) if metric in OVERLAPS]
    rows += [_cost_row(f"{split} {metric}", fa.get(f"{split}_{metric}"), fb.get(f"{split}_{metric}"))
             for split in ("train", "valid", "test") for metric in ERRORS
             if f"{split}_{metric}" in fa or f"{split}_{metric}" in fb]
    rows += best_epoch_rows(fa, fb)
    return rows, max_cost, max_rate


#: A regression's final errors (float sums, held to the cost's tolerance), shown side by side.
ERRORS = ("mse", "mae")
#: A per-pixel model's final overlaps (percent) shown side by side, and their per-class lists.
OVERLAPS = ("pixel_acc", "miou", "dice")
_PER_CLASS = ("class_iou", "class_dice")


def _overlaps(final_a, final_b):
    """``(split, metric, a, b, |a - b|)`` of every final overlap either record holds, a per-class
    list entry by entry (``class_iou[k]``)."""
    out = []
    for split in ("train", "valid", "test"):
        for metric in OVERLAPS + _PER_CLASS:
            x, y = final_a.get(f"{split}_{metric}"), final_b.get(f"{split}_{metric}")
            if x is None and y is None:
                continue
            if metric in OVERLAPS:
                out.append((split, metric, x, y, _difference(x, y)))
            elif len(x or []) != len(y or []):
                out.append((split, metric, None, None, float("inf")))
            else:
                out += [(split, f"{metric}[{k}]", u, v, _difference(u, v)) for k, (u, v) in enumerate(zip(x, y))]
    return out


def _difference(u, v):
    """``|u - v|``; 0 for two missing values (a class neither labelled nor predicted) or two
    NaN (no labelled pixel), inf for one."""
    if u is None or v is None:
        return 0.0 if u is v else float("inf")
    if u != u or v != v:
        return 0.0 if u != u and v != v else float("inf")
    return abs(u - v)


def overlaps_agree(final_a, final_b, rate_tol):
    """``(ok, line)`` of a per-pixel model's final overlaps (pixel accuracy, IoU and Dice, mean
    and per class: :func:`_overlaps`): each within ``rate_tol`` points; ``line`` says whether
    they are identical (float64: the counts are integers summed exactly) or by how much they
    differ. ``(True, None)`` when neither record has any."""
    diffs = [d for *_, d in _overlaps(final_a, final_b)]
    if not diffs:
        return True, None
    worst = max(diffs)
    if worst == 0:
        return True, "IoU and Dice (mean and per class, every split): identical"
    return worst <= rate_tol, f"IoU and Dice (mean and per class): differ by up to {worst:.2e} points"


def best_epoch_rows(fa, fb):
    """The rows of the runs' best epochs (``best_epoch`` of their final records, by the monitored
    metric) and of its error rates where recorded: shown beside the final rates, not part of the
    verdict (rounding may tie-break two equal validation rates differently in float32)."""
    ba, bb = (f.get("best_epoch") if isinstance(f.get("best_epoch"), dict) else {} for f in (fa, fb))
    if not ba and not bb:
        return []
    metric = ba.get("metric") or bb.get("metric") or "best"
    ea, eb = ba.get("epoch"), bb.get("epoch")
    rows = [(f"best epoch ({metric})", ea, eb, abs(ea - eb) if None not in (ea, eb) else float("inf"), None)]
    for split in ("train", "valid", "test"):
        x, y = (b.get("rates", {}).get(split) for b in (ba, bb))
        if x is not None or y is not None:
            rows.append((f"best epoch {split} misclass %", x, y,
                         abs(x - y) if None not in (x, y) else float("inf"), None))
    return rows


def format_table(rows, name_a, name_b):
    def f(v):
        return "-" if v is None else str(v) if isinstance(v, int) else f"{v:.8f}"
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':<{width}}  {name_a:>14}  {name_b:>14}  {'|diff|':>10}  {'relative':>10}"]
    lines += [f"{r[0]:<{width}}  {f(r[1]):>14}  {f(r[2]):>14}  {r[3]:>10.2e}  "
              f"{'' if r[4] is None else format(r[4], '.2e'):>10}" for r in rows]
    return "\n".join(lines)


def allowance_used(rows, rtol, atol):
    """The largest share of its allowance ``atol + rtol * |a|`` that one epoch's cost difference
    uses (1.0 at the bound, above 1 beyond it; inf for a difference where nothing is allowed, or
    a missing epoch): how close the runs came to DIFFER."""
    used = 0.0
    for r in rows:
        if not r[0].endswith(" cost"):
            continue
        if r[1] is None or r[2] is None:
            return float("inf")
        bound = atol + rtol * abs(r[1])
        share = r[3] / bound if bound > 0 else (0.0 if r[3] == 0 else float("inf"))
        used = max(used, share if share == share else float("inf"))   # a NaN cost uses it all
    return used


def _float_sum(label):
    """Whether a row of the table is a float sum held to the cost's tolerance: an epoch's cost,
    a regression's final error."""
    return label.endswith((" cost",) + tuple(f" {m}" for m in ERRORS))


def costs_agree(rows, rtol, atol):
    """Every epoch's costs (and a regression's final errors) satisfy ``|a - b| <= atol + rtol *
    |a|`` (numpy's allclose rule)."""
    return all(r[3] <= atol + rtol * abs(r[1]) for r in rows
               if _float_sum(r[0]) and r[1] is not None and r[2] is not None) and \
        all(r[1] is not None and r[2] is not None for r in rows if _float_sum(r[0]))


#: Default tolerances by the runs' dtype (float32 when either run is float32): float32 runs
#: start equal and drift apart by rounding over a long training (bin/main's figures: at most
#: 2e-3 in a per-epoch cost, 0.2 points of error rate over 12 epochs of the MNIST CNN); float64
#: runs agree to ~1e-12, so any difference beyond 1e-9 is a bug. ``rate_images``: an error rate
#: may also differ by this many images of its split (rounding flips whole images: one image of
#: a 180-image split is 0.56 points, more than ``rate_tol``).
TOLERANCES = {"float32": {"cost_tol": 0.05, "cost_atol": 0.01, "rate_tol": 0.5, "rate_images": 1},
              "float64": {"cost_tol": 1e-9, "cost_atol": 0.0, "rate_tol": 0.0, "rate_images": 0}}


def rates_agree(final_a, final_b, rate_tol, rate_images=0):
    """``(ok, allowed)``: every error rate of the two final records (:func:`read_metrics`)
    differs by at most ``max(rate_tol, rate_images * 100 / n)`` points, ``n`` the split's images
    (``split_images`` of the record; without it only ``rate_tol`` counts). ``allowed``:
    ``{split: points}``."""
    sizes = final_a.get("split_images") or final_b.get("split_images") or {}
    ok, allowed = True, {}
    for split in ("train", "valid", "test"):
        x, y = final_a.get(f"{split}_misclass"), final_b.get(f"{split}_misclass")
        if x is None and y is None:
            continue
        n = sizes.get(split)
        allowed[split] = max(rate_tol, 100.0 * rate_images / n) if n else rate_tol
        ok = ok and x is not None and y is not None and abs(x - y) <= allowed[split]
    return ok, allowed


def check_runs(path_a, path_b, nranks, overrides=(), reference_overrides=()):
    """Before running anything: A must run on one process (with ``overrides`` and
    ``reference_overrides``), B on ``nranks`` ranks (with ``overrides``): the grid, ``data`` and
    ``pipe`` must fit (:meth:`FitExperiment.layout`, the rule ``distnet run`` uses).
    Raises one DistnetError naming the file and the fix. Returns the dtype the tolerances
    default by: ``"float64"`` when both runs are float64, else ``"float32"``."""
    import numpy as np
    from ..config import load_experiment
    from ..errors import TopologyError
    exp_a = load_experiment(path_a, list(overrides) + list(reference_overrides))
    exp_b = load_experiment(path_b, list(overrides))
    try:
        exp_a.layout(1)
    except TopologyError as e:
        raise TopologyError(f"{path_a} cannot run on one process: {e}; compare a file with data/pipe "
                            f"against its own one-process run with --reference-set data=1 / "
                            f"--reference-set pipe=1 (applied to {path_a} only)") from None
    try:
        exp_b.layout(nranks)
    except TopologyError as e:
        raise TopologyError(f"{path_b} on -n {nranks}: {e}") from None
    wide = all(np.dtype(x.backend.dtype) == np.float64 for x in (exp_a, exp_b))
    return "float64" if wide else "float32"


def rerun_command(path_a, path_b, nranks, overrides, reference_overrides, extra):
    """The ``distnet compare`` command line of these runs with ``extra`` ``--set`` values."""
    import shlex
    words = ["distnet", "compare", path_a, path_b, "-n", str(nranks)]
    for o in [o for o in overrides if not o.startswith("backend.dtype=")] + list(extra):
        words += ["--set", o]
    for o in reference_overrides:
        words += ["--reference-set", o]
    return " ".join(shlex.quote(w) for w in words)


def compare(path_a, path_b, nranks, cost_tol=None, rate_tol=None, out=print, overrides=(), plot=None,
            cost_atol=None, reference_overrides=(), rate_images=None, rerun=True):
    """Check both files (:func:`check_runs`), run both, print the table; returns True when they
    agree within the tolerances: every epoch's cost (GB: also every pretraining epoch's) within
    ``cost_atol + cost_tol * |cost|``, every error rate within ``rate_tol`` points or
    ``rate_images`` images of its split, whichever is more (:func:`rates_agree`), and a per-pixel
    model's final IoU and Dice within ``rate_tol`` points (:func:`overlaps_agree`; float64:
    identical). A tolerance
    left None takes its default for the runs' dtype (:data:`TOLERANCES`); ``rate_images``
    defaults so only while ``rate_tol`` does too. ``overrides`` apply to both runs,
    ``reference_overrides`` to A only. ``plot``: also draw both runs' curves into this PNG file
    (:mod:`distnet.cli.plot`). ``rerun``: float32 runs that differ are run again in float64,
    whose verdict is returned (rounding drift or a real difference)."""
    dtype = check_runs(path_a, path_b, nranks, overrides, reference_overrides)
    tol = TOLERANCES[dtype]
    cost_tol = tol["cost_tol"] if cost_tol is None else cost_tol
    cost_atol = tol["cost_atol"] if cost_atol is None else cost_atol
    if rate_images is None:
        rate_images = tol["rate_images"] if rate_tol is None else 0
    rate_tol = tol["rate_tol"] if rate_tol is None else rate_tol
    plan = compare_threads(nranks)
    with tempfile.TemporaryDirectory() as tmp:
        ma, mb = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
        out(f"== both sides with {plan.describe()}")
        out(f"== {path_a} on 1 process")
        code = run_experiment(path_a, 1, ma, list(overrides) + list(reference_overrides), threads=plan.blas)
        if code != 0:       # its own error is on stderr above; nothing to compare (not a DIFFER)
            raise RunFailed(f"{path_a} failed on 1 process (exit status {code}): nothing to compare", code)
        out(f"== {path_b} on {nranks} ranks")
        code = run_experiment(path_b, nranks, mb, overrides, threads=plan.blas)
        if code != 0:
            raise RunFailed(f"{path_b} failed on {nranks} ranks (exit status {code}): nothing to compare", code)
        metrics_a, metrics_b = read_metrics(ma), read_metrics(mb)
        rows, max_cost, max_rate = compare_runs(metrics_a, metrics_b)
        if plot:
            from ..experiments.rundir import read_run
            from .plot import plot_runs
            runs = [read_run(ma), read_run(mb)]
            runs[0]["label"] = f"{os.path.basename(path_a)} (1 process)"
            runs[1]["label"] = f"{os.path.basename(path_b)} ({nranks} ranks)"
            plot_runs(runs, plot, title=f"{os.path.basename(path_a)} vs {os.path.basename(path_b)}",
                      inputs=[path_a, path_b])
            out(f"plot: {plot}")
    out("")
    out(format_table(rows, "1 process", f"{nranks} ranks"))
    rates_ok, allowed = rates_agree(metrics_a[1], metrics_b[1], rate_tol, rate_images)
    overlaps_ok, overlaps = overlaps_agree(metrics_a[1], metrics_b[1], rate_tol)
    ok = costs_agree(rows, cost_tol, cost_atol) and rates_ok and overlaps_ok
    if overlaps:
        out(f"\n{overlaps} (tolerance {rate_tol:g} points)")
    # with an absolute part the relative figure alone looks alarming on a small late cost:
    # say how much of the per-epoch allowance the closest epoch used
    atol = (f" + {cost_atol:g} absolute per epoch; at most {allowance_used(rows, cost_tol, cost_atol):.0%} "
            "of it used" if cost_atol else "")
    per_image = ", ".join(f"{split} {points:.3g}" for split, points in allowed.items() if points > rate_tol)
    images = (f" or {rate_images:g} image(s) of the split, whichever is more" if rate_images else "") + \
        (f": {per_image}" if per_image else "")
    errors = [r[4] for r in rows if _float_sum(r[0]) and not r[0].endswith(" cost")]
    second = (f"regression errors (MSE, MAE) {max(errors):.2e} relative (tolerance {cost_tol:g})" if errors else
              f"error rate {max_rate:.2e} points (tolerance {rate_tol:g}{images})")
    out(f"\nlargest difference: cost {max_cost:.2e} relative (tolerance {cost_tol:g}{atol}), {second} -> "
        f"{'AGREE' if ok else 'DIFFER'}")
    if ok or dtype != "float32":
        return ok
    out("float32 runs drift apart by rounding over a long training; float64 tells rounding from a "
        "real difference (it agrees to ~1e-12):")
    out("  " + rerun_command(path_a, path_b, nranks, overrides, reference_overrides, ["backend.dtype=float64"]))
    if not rerun:
        return ok
    out("\n== float64 rerun")
    ok64 = compare(path_a, path_b, nranks, out=out, overrides=list(overrides) + ["backend.dtype=float64"],
                   reference_overrides=reference_overrides, rerun=False)
    out("-> the float32 difference is rounding: the float64 runs agree" if ok64 else
        "-> the runs differ in float64 too: a real difference, not rounding")
    return ok64


#: A tolerance of ``distnet compare``: finite and >= 0 (nan would make every comparison agree).
_TOLERANCE = click.FloatRange(min=0)


@click.command("compare")
@click.argument("single", type=click.Path(exists=True, dir_okay=False))
@click.argument("distributed", type=click.Path(exists=True, dir_okay=False))
@click.option("-n", "nranks", type=int, default=4, show_default=True, help="Ranks for DISTRIBUTED.")
@click.option("--cost-tol", type=_TOLERANCE, callback=finite_number, default=None,
              help="Accepted relative difference of a per-epoch mean cost [default: 0.05 in "
                   "float32, 1e-9 when both runs are float64].")
@click.option("--cost-atol", type=_TOLERANCE, callback=finite_number, default=None,
              help="Accepted absolute difference of a per-epoch mean cost, added to the relative "
                   "one (|a - b| <= atol + tol * |a|) [default: 0.01 in float32, 0 in float64].")
@click.option("--rate-tol", type=_TOLERANCE, callback=finite_number, default=None,
              help="Largest accepted |difference| of an error rate, in percentage points "
                   "[default: 0.5 in float32, 0 in float64].")
@click.option("--rate-tol-images", "rate_images", type=_TOLERANCE, callback=finite_number, default=None,
              help="An error rate may also differ by this many images of its split, where that "
                   "is more than --rate-tol [default: 1 in float32, 0 in float64; 0 when "
                   "--rate-tol is given].")
@click.option("--no-rerun", is_flag=True,
              help="float32 runs that DIFFER: print the float64 command instead of running it.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value in both experiments, e.g. --set backend.dtype=float64.")
@click.option("--reference-set", "reference_overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a value in SINGLE only, e.g. --reference-set pipe=1 to compare a file "
                   "with pipe:/data: against its own one-process run.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), metavar="OUT.png", callback=given_path,
              help="Also draw both runs' cost and error curves into a PNG (needs matplotlib).")
def compare_command(single, distributed, nranks, cost_tol, cost_atol, rate_tol, rate_images, no_rerun, overrides,
                    reference_overrides, plot_path):
    """Run SINGLE on one process and DISTRIBUTED on N ranks (compare starts both: not under
    mpiexec); print per-epoch costs (GB: and pretraining costs) and error rates side by side.
    The rank count is checked against DISTRIBUTED's grid, data and pipe before anything runs.
    Exit status 1 if they differ beyond the tolerances: costs must satisfy |a - b| <= cost-atol + cost-tol * |a|, error rates differ
    by at most rate-tol points (or rate-tol-images images of the split). The defaults depend on
    the dtype: float32 allows the drift of rounding over a long training, float64 (both runs)
    almost nothing. float32 runs that differ are run again in float64, whose verdict counts. A
    per-pixel model's final IoU and Dice (mean and per class) are compared too: within rate-tol
    points (float64: identical)."""
    if launched_on_many():    # every rank would start both runs, the one-process one inside this job's MPI
        fail(f"distnet compare starts its own runs (the distributed one with mpiexec -n {nranks}): run it "
             f"without mpiexec: distnet compare SINGLE DISTRIBUTED -n {nranks}")
    with Job():
        if plot_path:
            from .plot import _figure, check_target
            _figure()  # fail before the runs, not after
            check_target(plot_path, inputs=[single, distributed])
        ok = compare(single, distributed, nranks, cost_tol, rate_tol, out=click.echo,
                     overrides=overrides, plot=plot_path, cost_atol=cost_atol,
                     reference_overrides=reference_overrides, rate_images=rate_images, rerun=not no_rerun)
    sys.exit(0 if ok else 1)
