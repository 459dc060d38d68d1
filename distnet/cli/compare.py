"""``distnet compare``: run one experiment on one process and another on N ranks, then print
their per-epoch costs and error rates side by side with the largest difference."""
import json
import os
import subprocess
import sys
import tempfile

from ..comm.launcher import launch_env, mpiexec_path


def run_experiment(path, nranks, metrics, overrides=(), timeout=None):
    """Run ``distnet run path`` on ``nranks`` processes (1 = no launcher) with no run directory;
    returns the exit code."""
    cmd = [sys.executable, "-m", "distnet", "run", path, "--metrics", metrics, "--no-run-dir"]
    for o in overrides:
        cmd += ["--set", o]
    if nranks > 1:
        launcher = mpiexec_path()
        if launcher is None:
            raise FileNotFoundError("mpiexec not found: pip install mpich (or load your MPI)")
        cmd = [launcher, "-n", str(nranks), *cmd]
    return subprocess.run(cmd, timeout=timeout, env=launch_env(nranks)).returncode


def read_metrics(path):
    """``(epoch costs, final record)`` from a ``--metrics`` JSON-lines file."""
    costs, final = [], {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("final"):
                final = rec
            else:
                costs.append(rec["cost"])
    return costs, final


def compare_runs(a, b):
    """Rows ``(label, a, b, |a - b|, relative)`` for the side-by-side table, the largest relative
    cost difference and the largest error-rate difference (points)."""
    (ca, fa), (cb, fb) = a, b
    rows, max_cost, max_rate = [], 0.0, 0.0
    for e in range(max(len(ca), len(cb))):
        x = ca[e] if e < len(ca) else None
        y = cb[e] if e < len(cb) else None
        d = abs(x - y) if x is not None and y is not None else float("inf")
        rel = d / abs(x) if x else d
        max_cost = max(max_cost, rel)
        rows.append((f"epoch {e} cost", x, y, d, rel))
    for key in ("train_misclass", "valid_misclass", "test_misclass"):
        x, y = fa.get(key), fb.get(key)
        if x is None and y is None:
            continue
        d = abs(x - y) if x is not None and y is not None else float("inf")
        max_rate = max(max_rate, d)
        rows.append((key.replace("_", " ") + " %", x, y, d, None))
    return rows, max_cost, max_rate


def format_table(rows, name_a, name_b):
    def f(v):
        return "-" if v is None else f"{v:.8f}"
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':<{width}}  {name_a:>14}  {name_b:>14}  {'|diff|':>10}  {'relative':>10}"]
    lines += [f"{r[0]:<{width}}  {f(r[1]):>14}  {f(r[2]):>14}  {r[3]:>10.2e}  "
              f"{'' if r[4] is None else format(r[4], '.2e'):>10}" for r in rows]
    return "\n".join(lines)


def costs_agree(rows, rtol, atol):
    """Every epoch's costs satisfy ``|a - b| <= atol + rtol * |a|`` (numpy's allclose rule)."""
    return all(r[3] <= atol + rtol * abs(r[1]) for r in rows
               if r[0].endswith(" cost") and r[1] is not None and r[2] is not None) and \
        all(r[1] is not None and r[2] is not None for r in rows if r[0].endswith(" cost"))


def compare(path_a, path_b, nranks, cost_tol, rate_tol, out=print, overrides=(), plot=None,
            cost_atol=0.0):
    """Run both, print the table; returns True when they agree within the tolerances: every
    epoch's cost within ``cost_atol + cost_tol * |cost|`` and every error rate within
    ``rate_tol`` points. ``plot``: also draw both runs' curves into this PNG file
    (:mod:`distnet.cli.plot`)."""
    with tempfile.TemporaryDirectory() as tmp:
        ma, mb = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
        out(f"== {path_a} on 1 process")
        if run_experiment(path_a, 1, ma, overrides) != 0:
            out(f"distnet: error: {path_a} failed")
            return False
        out(f"== {path_b} on {nranks} ranks")
        if run_experiment(path_b, nranks, mb, overrides) != 0:
            out(f"distnet: error: {path_b} failed")
            return False
        rows, max_cost, max_rate = compare_runs(read_metrics(ma), read_metrics(mb))
        if plot:
            from ..experiments.rundir import read_run
            from .plot import plot_runs
            runs = [read_run(ma), read_run(mb)]
            runs[0]["label"] = f"{os.path.basename(path_a)} (1 process)"
            runs[1]["label"] = f"{os.path.basename(path_b)} ({nranks} ranks)"
            plot_runs(runs, plot, title=f"{os.path.basename(path_a)} vs {os.path.basename(path_b)}")
            out(f"plot: {plot}")
    out("")
    out(format_table(rows, "1 process", f"{nranks} ranks"))
    ok = costs_agree(rows, cost_tol, cost_atol) and max_rate <= rate_tol
    atol = f" + {cost_atol:g} absolute" if cost_atol else ""
    out(f"\nlargest difference: cost {max_cost:.2e} relative (tolerance {cost_tol:g}{atol}), error "
        f"rate {max_rate:.2e} points (tolerance {rate_tol:g}) -> {'AGREE' if ok else 'DIFFER'}")
    return ok
