"""Where a distnet training step spends its time, and what it allocates, after warm-up.

    .venv/bin/python benchmarks/profile_step.py mnist_cnn [--steps 20]

Per-step Python overhead is measured as the *fixed cost per step*: the intercept of the step
time fitted against the batch size (the array work grows with the batch, the interpreter's work
and numpy's per-call dispatch do not), as a fraction of the step at the workload's batch. A
cProfile split is printed too (its "Python frames" include inline array operators such as
``a += b``, which cProfile cannot separate, so it over-counts). Memory: what the layers hold
after a step, and the tracemalloc peak *above* the steady state during one step (everything
allocated and freed inside the step; numpy reports its buffers to tracemalloc).
"""
import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _median_step(run, steps):
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        run.step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def profile(workload, steps=20, warmup=3, batches=None):
    """``{"fit": per-step fixed cost and per-image cost, "python": cProfile split,
    "transient": tracemalloc peak above the steady state during one step, ...}``."""
    from benchmarks.workloads import BATCH, DistnetRun
    from distnet.comm import Topology
    B = BATCH[workload]
    batches = batches or sorted({B, max(1, B // 2), max(1, B // 4), max(1, B // 10)})
    # 1. fixed cost per step: the intercept of step time against batch size
    times = {}
    for _ in range(2):                      # two interleaved passes: less sensitive to load
        for b in batches:
            run = DistnetRun(workload, Topology.serial(), batch=b)
            for _ in range(warmup):
                run.step()
            times.setdefault(b, []).append(_median_step(run, steps))
    tb = {b: min(v) for b, v in times.items()}
    xs, ys = list(tb), [tb[b] for b in tb]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    fixed = my - slope * mx
    # 2. cProfile at the workload's batch: Python frames vs C-level calls
    run = DistnetRun(workload, Topology.serial())
    for _ in range(warmup):
        run.step()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        run.step()
    pr.disable()
    builtin = python = 0.0
    top = []
    for (fname, line, func), (cc, nc, tt, ct, callers) in pstats.Stats(pr).stats.items():
        if fname == "~" or fname.startswith("<"):
            builtin += tt
        else:
            python += tt
            where = os.path.relpath(fname) if fname.startswith("/") else fname
            top.append((tt / steps, f"{where}:{line}({func})"))
    top.sort(reverse=True)
    # 3. memory allocated and freed inside one step (numpy reports its buffers to tracemalloc)
    tracemalloc.start()
    run.step()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    run.step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"workload": workload, "batch": B, "step_s": tb[B], "fixed_s": fixed,
            "per_image_s": slope, "fixed_fraction": fixed / tb[B], "step_by_batch": tb,
            "cprofile_python_s": python / steps, "cprofile_c_s": builtin / steps,
            "top_python": [{"s": s, "where": w} for s, w in top[:8]],
            "held_bytes": run.held_bytes(), "transient_peak_bytes": max(0, peak - base)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = profile(a.workload, a.steps)
    if a.json:
        print("RESULT " + json.dumps(r))
        return
    print(f"{a.workload} (batch {r['batch']}): {r['step_s'] * 1e3:.1f} ms/step; fixed cost per step "
          f"(intercept over batches {sorted(r['step_by_batch'])}) {r['fixed_s'] * 1e3:.1f} ms = "
          f"{100 * r['fixed_fraction']:.1f}% of the step; {r['per_image_s'] * 1e3:.3f} ms per image")
    print(f"cProfile: Python frames {r['cprofile_python_s'] * 1e3:.1f} ms (includes inline array "
          f"operators), C-level calls {r['cprofile_c_s'] * 1e3:.1f} ms; top Python frames:")
    for t in r["top_python"]:
        print(f"  {t['s'] * 1e3:7.2f} ms  {t['where']}")
    print(f"held by the layers: {r['held_bytes'] / 2**20:.1f} MiB; allocated and freed inside one "
          f"step (tracemalloc peak above the steady state): {r['transient_peak_bytes'] / 2**20:.2f} MiB")

if __name__ == "__main__":
    main()
