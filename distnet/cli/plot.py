"""``distnet plot``: cost and error curves of one or more runs in one PNG
(matplotlib, an optional dependency: ``pip install 'distnet[plot]'``).

Each run is a run directory (``metrics.jsonl`` + ``run.json``) or a metrics JSON-lines file
(``distnet run --metrics``). Left: the mean training cost per epoch, and the cost of the
evaluated splits (``eval_every``; thin lines, validation dash-dotted, test dotted). Right: the
error rates measured during training (test in the run's own dash, train dashed, validation
dash-dotted; the top-k error rates thin and dotted) and the final ones (a star for test, a
triangle for train, a diamond for validation, at the last epoch); a dotted vertical line marks
each run's best epoch (both panels). A regression's error panel draws the mean squared error of
every evaluated split and the final ones instead (the mean absolute error thin and dotted).
Where the runs recorded per-class accuracies (``eval_every``), a panel draws them per class, by
the class names of ``run.json``. Runs of a
per-pixel model add a panel of the mean IoU of every evaluated split (the splits' styles of the
error panel) and the final ones, with the mean Dice thin and dotted. Runs that agree (dist vs
non-dist) draw on top of each other; every run has its own marker and dash pattern, so each
stays visible.
"""
import os

import click

from ..errors import DistnetError
from ..experiments.rundir import read_run
from .job import Job

_MARKERS = ("o", "x", "s", "^", "v", "D", "+", "*")
_DASHES = ("-", "--", ":", "-.")


def _figure():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise DistnetError("plotting needs matplotlib, which is not installed: "
                           "pip install 'distnet[plot]' (or pip install matplotlib)") from None
    return Figure


_PNG = b"\x89PNG\r\n\x1a\n"


def check_target(out, runs=(), inputs=()):
    """DistnetError unless ``out`` may be written: never one of the files read (the metrics and
    ``run.json`` of ``runs`` given as paths, ``inputs``), and an existing file only when it is a
    PNG (an earlier plot); its folder must take files."""
    from ..fileio import check_writable, same_file
    files = list(inputs)
    for r in runs:
        if isinstance(r, str):
            files += [r] if os.path.isfile(r) else [os.path.join(r, "metrics.jsonl"), os.path.join(r, "run.json")]
    for f in files:
        if same_file(out, f):
            raise DistnetError(f"cannot write {out}: it is an input ({f}); give another name")
    if os.path.isfile(out):
        with open(out, "rb") as fh:
            if fh.read(len(_PNG)) != _PNG:
                raise DistnetError(f"cannot write {out}: it exists and is no PNG (only an earlier plot is "
                                   "replaced); give another name")
    folder = os.path.dirname(os.path.abspath(out))
    blocked = next((p for p in _up_to_root(folder) if os.path.exists(p) and not os.path.isdir(p)), None)
    if blocked is not None:
        raise DistnetError(f"cannot write plot {out}: {blocked} is not a directory")
    try:
        os.makedirs(folder, exist_ok=True)   # -o plots/run.png makes plots/, as the run directory is made
    except OSError as e:
        raise DistnetError(f"cannot write {out}: cannot create the folder {folder}: {e.strerror or e}") from None
    check_writable(out, "plot")   # its folder takes files: found before compare's runs, not after


def _up_to_root(folder):
    """``folder`` and the folders above it."""
    while True:
        yield folder
        up = os.path.dirname(folder)
        if up == folder:
            return
        folder = up


def plot_runs(runs, out, title=None, inputs=()):
    """Draw ``runs`` (dicts from :func:`~distnet.experiments.rundir.read_run`, or paths) to the
    PNG file ``out`` (:func:`check_target` first; ``inputs``: other files that must not be
    replaced). Returns ``out``."""
    _figure()
    check_target(out, runs, inputs)
    runs = [read_run(r) if isinstance(r, str) else r for r in runs]
    for run in runs:
        if not run["epochs"] and not run["final"]:      # an empty curve, drawn without a word
            click.echo(f"distnet: warning: {run['label']} recorded no epoch (it ended before its first "
                       "epoch did)", err=True)
    fig = draw_runs(runs, title)
    try:
        fig.savefig(out, format="png")
    except OSError as e:
        raise DistnetError(f"cannot write {out}: {e.strerror or e}") from None
    return out


def best_epoch(run):
    """``(epoch, what)`` of a run's best epoch (its final record's ``best_epoch``, else the last
    epoch record marked ``best``), or None."""
    best = run["final"].get("best_epoch")
    if isinstance(best, dict) and isinstance(best.get("epoch"), int):
        return best["epoch"], str(best.get("metric", "best"))
    marked = [r["epoch"] for r in run["epochs"] if r.get("best")]
    return (marked[-1], "best") if marked else None


def class_split(runs):
    """The split whose per-class accuracies the runs recorded (validation first), or None."""
    return next((s for s in ("valid", "test", "train")
                 if any(f"{s}_class_accuracy" in r for run in runs for r in run["epochs"])), None)


def recorded(runs, suffix):
    """Whether any epoch or final record of ``runs`` holds a key ending in ``suffix``."""
    return any(k.endswith(suffix) for run in runs for r in run["epochs"] + [run["final"]] for k in r)


def draw_runs(runs, title=None):
    """The matplotlib ``Figure`` of ``runs`` (dicts from
    :func:`~distnet.experiments.rundir.read_run`): the cost panel, the error panel (the best
    epoch marked): the misclassification rates, or a regression's mean squared and absolute
    errors; where the runs recorded per-class accuracies, a panel of them by class name, and a
    per-pixel model's overlaps."""
    Figure = _figure()
    per_class = class_split(runs)       # the split whose per-class accuracies get a panel, or None
    overlaps, regression = recorded(runs, "_miou"), recorded(runs, "_mse")
    n = 2 + bool(per_class) + bool(overlaps)
    fig = Figure(figsize=(5.5 + 5 * (n - 1), 4.2), dpi=100)
    axes = fig.subplots(1, n, sharex=True)
    extra = list(axes[2:])
    class_ax = extra.pop(0) if per_class else None
    overlap_ax = extra.pop(0) if overlaps else None
    cost_ax, err_ax = axes[:2]
    any_err = regression
    for i, run in enumerate(runs):
        marker, dash = _MARKERS[i % len(_MARKERS)], _DASHES[i % len(_DASHES)]
        color = _draw_costs(cost_ax, run, marker, dash)
        any_err = _draw_rates(err_ax, run, color, marker, dash) or any_err
        best = best_epoch(run)
        if best is not None:
            for ax in (cost_ax, err_ax):
                ax.axvline(best[0], color=color, linestyle=(0, (1, 3)), lw=1.2,
                           label=f"{run['label']}: best epoch {best[0]} ({best[1]})" if ax is err_ax else "_nolegend_")
            any_err = True
        if per_class:
            draw_classes(class_ax, run, per_class, dash, marker, len(runs) > 1)
    cost_ax.set(title="cost (training; evaluated splits thin)", xlabel="epoch", ylabel="mean cost per image")
    if regression:      # float targets: their errors, no rate
        _draw_split_pairs(err_ax, runs, ("mse", "mean squared error"), ("mae", "mean absolute error"))
        err_ax.set(title="regression error (MSE; MAE thin)", xlabel="epoch", ylabel="error (MSE, MAE)")
    else:
        err_ax.set(title="misclassification", xlabel="epoch", ylabel="error rate (%)")
    if overlaps:
        _draw_split_pairs(overlap_ax, runs, ("miou", "mean IoU"), ("dice", "mean Dice"))
        overlap_ax.set(title="overlap per pixel (mean IoU; mean Dice thin)", xlabel="epoch", ylabel="percent")
    _finish(axes, (cost_ax, overlap_ax), err_ax if any_err else None, class_ax)
    if not any_err:
        err_ax.text(0.5, 0.5, "no error rates recorded", ha="center", va="center", transform=err_ax.transAxes)
    if per_class:
        class_ax.set(title=f"{per_class} split: accuracy per class (recall)", xlabel="epoch", ylabel="accuracy (%)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _draw_costs(ax, run, marker, dash):
    """A run's mean training cost per epoch and its evaluated splits' costs (thin); returns the
    run's colour."""
    recs = run["epochs"]
    (line,) = ax.plot([r["epoch"] for r in recs], [r["cost"] for r in recs], linestyle=dash, marker=marker, ms=4,
                      label=run["label"])
    color = line.get_color()
    for split, style in (("valid", "-."), ("test", ":")):
        pts = [(r["epoch"], r[f"{split}_cost"]) for r in recs if f"{split}_cost" in r]
        if pts:
            ax.plot(*zip(*pts), linestyle=style, marker=marker, ms=3, lw=0.8, color=color,
                    label=f"{run['label']}: {split} cost")
    return color


def _draw_rates(ax, run, color, marker, dash):
    """A run's error rates per evaluated split (its top-k ones thin and dotted) and the final
    ones (markers at the last epoch); returns whether it drew any."""
    recs, drew = run["epochs"], False
    epochs = [r["epoch"] for r in recs]
    topk = sorted({k for r in recs for k in r if k.split("_", 1)[0] in ("train", "valid", "test")
                   and k.split("_", 1)[1].startswith("top") and k.endswith("_misclass")})
    for key in topk:
        pts = [(r["epoch"], r[key]) for r in recs if key in r]
        drew = True
        ax.plot(*zip(*pts), linestyle=":", marker=marker, ms=3, lw=0.8, color=color,
                label=f"{run['label']}: {key.replace('_misclass', '').replace('_', ' ')}")
    for split, style, final_marker in (("test", dash, "*"), ("train", "--", "^"), ("valid", "-.", "D")):
        pts = [(r["epoch"], r[f"{split}_misclass"]) for r in recs if f"{split}_misclass" in r]
        if pts:
            drew = True
            ax.plot(*zip(*pts), linestyle=style, marker=marker, ms=4, color=color, label=f"{run['label']}: {split}")
        final = run["final"].get(f"{split}_misclass")
        if final is not None:
            drew = True
            label = "_nolegend_" if pts else f"{run['label']}: {split} (final)"
            ax.plot([epochs[-1] if epochs else 0], [final], linestyle="none", marker=final_marker, ms=11,
                    color=color, markerfacecolor="none", label=label)
    return drew


def _finish(axes, with_legend, err_ax, class_ax):
    """Grid lines, whole epochs on the x axes and the legends: of the panels ``with_legend``,
    ``err_ax`` (None: it drew nothing) and the classes' while it stays readable."""
    from matplotlib.ticker import MaxNLocator
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        classes = ax is class_ax and 0 < len(ax.get_lines()) <= 24
        if ax in with_legend or ax is err_ax or classes:
            ax.legend(fontsize=7)
def draw_classes(ax, run, split, dash, marker, with_run):
    """Per class, its accuracy on ``split`` over the evaluated epochs, labelled by the class
    name the run recorded (``run.json``'s ``class_names``, else ``class k``)."""
    pts = [(r["epoch"], r[f"{split}_class_accuracy"]) for r in run["epochs"] if f"{split}_class_accuracy" in r]
    if not pts:
        return
    k = len(pts[-1][1])
    names = run["info"].get("class_names")
    names = names if isinstance(names, list) and len(names) == k else [f"class {c}" for c in range(k)]
    for c in range(k):
        xs = [(e, acc[c]) for e, acc in pts if len(acc) == k and acc[c] is not None]
        if xs:
            ax.plot(*zip(*xs), linestyle=dash, marker=marker, ms=3, lw=1,
                    label=f"{run['label']}: {names[c]}" if with_run else str(names[c]))


def _draw_split_pairs(ax, runs, main, thin):
    """Each run's metric ``main`` per evaluated split (the splits' styles of the error panel) and
    ``thin`` thin and dotted, both ``(key, what a legend calls it)`` (a per-pixel model's mean IoU
    and Dice, a regression's MSE and MAE), and the final ``main`` (markers as the final error
    rates)."""
    for i, run in enumerate(runs):
        recs, marker = run["epochs"], _MARKERS[i % len(_MARKERS)]
        color = f"C{i % 10}"
        for split, style, final_marker in (("test", _DASHES[i % len(_DASHES)], "*"), ("train", "--", "^"),
                                           ("valid", "-.", "D")):
            for (metric, what), width in ((main, 1.5), (thin, 0.8)):
                pts = [(r["epoch"], r[f"{split}_{metric}"]) for r in recs if f"{split}_{metric}" in r]
                if pts:
                    ax.plot(*zip(*pts), linestyle=style if width > 1 else ":", marker=marker, ms=3, lw=width,
                            color=color, label=f"{run['label']}: {split} {what}")
            final = run["final"].get(f"{split}_{main[0]}")
            if final is not None:
                x = recs[-1]["epoch"] if recs else 0
                ax.plot([x], [final], linestyle="none", marker=final_marker, ms=11, color=color,
                        markerfacecolor="none", label=f"{run['label']}: {split} {main[1]} (final)")


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True), metavar="RUN_DIR...")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="distnet-plot.png",
              show_default=True, help="The PNG file to write.")
@click.option("--title", help="A title over both panels.")
def plot(runs, output, title):
    """Draw the cost and error curves (error rates; a regression's mean squared and absolute
    errors) of RUN_DIR... (run directories, or metrics JSON-lines files from --metrics) into one
    PNG, e.g. a dist and a non-dist run together."""
    with Job("plot", one_process=True):
        plot_runs(list(runs), output, title)
    click.echo(output)
