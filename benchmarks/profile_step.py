"""Where a distnet training step spends its time, and what it allocates, after warm-up.

    .venv/bin/python benchmarks/profile_step.py mnist_cnn [--steps 20]

Per-step Python overhead: py-spy (``pip install py-spy``; run.sh installs it) samples the
process with and without ``--gil``; the fraction of the main thread's samples inside training
steps that hold the GIL is the time spent interpreting Python and dispatching numpy calls
(numpy and BLAS release the GIL for their kernels): an upper bound of the Python overhead.
Also printed: the *fixed cost per step*, the intercept of the step time fitted against the
batch size (it also contains weight-sized work: weight gradients, the SGD update), and a
cProfile split (its "Python frames" include inline array operators such as ``a += b``). Memory: what the layers hold
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
    from benchmarks.workloads import BATCH, DistnetRun, serial_topology
    B = BATCH[workload]
    batches = batches or sorted({B, max(1, B // 2), max(1, B // 4), max(1, B // 10)})
    # 1. fixed cost per step: the intercept of step time against batch size
    times = {}
    for _ in range(2):                      # two interleaved passes: less sensitive to load
        for b in batches:
            run = DistnetRun(workload, serial_topology(workload), batch=b)
            for _ in range(warmup):
                run.step()
            times.setdefault(b, []).append(_median_step(run, steps))
    tb = {b: min(v) for b, v in times.items()}
    xs, ys = list(tb), [tb[b] for b in tb]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    fixed = my - slope * mx
    # 2. cProfile at the workload's batch: Python frames vs C-level calls
    run = DistnetRun(workload, serial_topology(workload))
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


def loop(workload, seconds):
    """Train steps for ``seconds`` (the target process of :func:`gil_fraction`)."""
    from benchmarks.workloads import DistnetRun, serial_topology
    run = DistnetRun(workload, serial_topology(workload))
    for _ in range(3):
        run.step()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        run.step()


def gil_fraction(workload, seconds=15, rate=200):
    """Fraction of the main thread's samples, inside training steps, that hold the GIL (py-spy
    ``--gil``): Python bytecode plus numpy's dispatch of small operations; the time spent in
    numpy/BLAS kernels (GIL released) and waiting for the kernel threads is excluded. An upper
    bound of the per-step Python overhead. None if py-spy is not installed."""
    import shutil
    import subprocess
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return None
    counts = {}
    for mode in ("all", "gil"):
        out = f"/tmp/distnet-pyspy-{os.getpid()}-{mode}.txt"
        cmd = [spy, "record", "--idle", "--threads", "--format", "raw", "-r", str(rate), "-o", out]
        cmd += (["--gil"] if mode == "gil" else []) + ["--", sys.executable, os.path.abspath(__file__),
                                                       workload, "--loop", str(seconds)]
        subprocess.run(cmd, capture_output=True, timeout=seconds * 4 + 60)
        n = 0
        with open(out) as f:
            for line in f:
                line = line.rstrip()
                if line and "MainThread" in line.split(";")[0] and ".step (" in line:
                    n += int(line.rsplit(" ", 1)[1])
        os.remove(out)
        counts[mode] = n
    return counts["gil"] / counts["all"] if counts["all"] else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--loop", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-spy", action="store_true", help="skip the py-spy GIL measurement")
    a = ap.parse_args()
    if a.loop:
        loop(a.workload, a.loop)
        return
    r = profile(a.workload, a.steps)
    r["gil_fraction"] = None if a.no_spy else gil_fraction(a.workload)
    if a.json:
        print("RESULT " + json.dumps(r))
        return
    print(f"{a.workload} (batch {r['batch']}): {r['step_s'] * 1e3:.1f} ms/step; fixed cost per step "
          f"(intercept over batches {sorted(r['step_by_batch'])}) {r['fixed_s'] * 1e3:.1f} ms = "
          f"{100 * r['fixed_fraction']:.1f}% of the step; {r['per_image_s'] * 1e3:.3f} ms per image")
    g = r["gil_fraction"]
    print("py-spy: main thread holds the GIL (Python bytecode + numpy dispatch) during "
          + (f"{100 * g:.1f}% of the step time" if g is not None else "? (py-spy not installed)"))
    print(f"cProfile: Python frames {r['cprofile_python_s'] * 1e3:.1f} ms (includes inline array "
          f"operators), C-level calls {r['cprofile_c_s'] * 1e3:.1f} ms; top Python frames:")
    for t in r["top_python"]:
        print(f"  {t['s'] * 1e3:7.2f} ms  {t['where']}")
    print(f"held by the layers: {r['held_bytes'] / 2**20:.1f} MiB; allocated and freed inside one "
          f"step (tracemalloc peak above the steady state): {r['transient_peak_bytes'] / 2**20:.2f} MiB")

if __name__ == "__main__":
    main()
