"""Where a distnet training step spends its time, and what it allocates, after warm-up.

    .venv/bin/python benchmarks/profile_step.py mnist_cnn [--steps 20]

Prints (and returns, for benchmarks/run.py) per step: wall time; time inside C-level calls
(numpy functions, BLAS, MPI: cProfile's built-in entries); time in Python frames (distnet's own
code, which *includes* array operators such as ``a += b`` written inline: an upper bound of
the interpreter overhead); and, from tracemalloc, the allocations of 1 MiB or more made during
the step (numpy reports its buffers to tracemalloc): with planned buffers there are none in
the layers' hot paths.
"""
import argparse
import cProfile
import json
import os
import pstats
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def profile(workload, steps=20, warmup=3):
    from benchmarks.workloads import DistnetRun
    from distnet.comm import Topology
    run = DistnetRun(workload, Topology.serial())
    for _ in range(warmup):
        run.step()
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    for _ in range(steps):
        run.step()
    pr.disable()
    wall = (time.perf_counter() - t0) / steps
    st = pstats.Stats(pr)
    builtin = python = 0.0
    top = []
    for (fname, line, func), (cc, nc, tt, ct, callers) in st.stats.items():
        if fname == "~" or fname.startswith("<"):
            builtin += tt
        else:
            python += tt
            top.append((tt / steps, f"{os.path.relpath(fname, os.getcwd()) if fname.startswith('/') else fname}:{line}({func})"))
    top.sort(reverse=True)
    total = builtin + python
    # allocations >= 1 MiB during one step, after warm-up
    tracemalloc.start(5)
    run.step()
    snap0 = tracemalloc.take_snapshot()
    tracemalloc.reset_peak()
    big = []
    tracemalloc.stop()
    tracemalloc.start(8)
    run.step()
    snap = tracemalloc.take_snapshot()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del snap0
    for stat in snap.statistics("traceback"):
        if stat.size >= 2**20:
            fr = stat.traceback[-1]
            big.append({"bytes": stat.size, "where": f"{fr.filename}:{fr.lineno}"})
    return {"workload": workload, "step_s": wall,
            "c_level_s": builtin / steps, "python_s": python / steps,
            "python_fraction": python / total if total else 0.0,
            "top_python": [{"s": s, "where": w} for s, w in top[:8]],
            "large_live_allocations_after_step": big, "traced_peak_bytes": peak}


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
    print(f"{a.workload}: {r['step_s'] * 1e3:.1f} ms/step (profiled); C-level calls "
          f"{r['c_level_s'] * 1e3:.1f} ms, Python frames {r['python_s'] * 1e3:.1f} ms "
          f"({100 * r['python_fraction']:.1f}%, includes inline array operators)")
    for t in r["top_python"]:
        print(f"  {t['s'] * 1e3:7.2f} ms  {t['where']}")
    print(f"allocations >= 1 MiB still live after a step: {len(r['large_live_allocations_after_step'])}")
    for b in r["large_live_allocations_after_step"]:
        print(f"  {b['bytes'] / 2**20:.1f} MiB at {b['where']}")


if __name__ == "__main__":
    main()
