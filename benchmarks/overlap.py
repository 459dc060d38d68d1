"""How much of the gradient Allreduce a nonblocking start hides behind the rest of the backward.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/overlap.py --delay 0,0.005,0.02

A stand-in for a model's backward (the model wiring is not done yet, see benchmarks/README.md):
``--layers`` layers, each a one-thread float32 GEMM (``--work``: its size n for an n x n x n
product) followed by a gradient bucket of ``--bucket-kib`` KiB. Three modes, interleaved
repetition by repetition (medians over ``--reps``):

* ``compute``: the GEMMs alone (no communication);
* ``blocking``: the GEMMs, then one blocking :func:`~distnet.comm.allreduce_sum` per bucket
  (today's models: the sums follow the whole backward);
* ``overlapped``: after each layer its bucket's :func:`~distnet.comm.allreduce_sum_start`,
  :func:`~distnet.comm.reduce.progress` between layers, every :meth:`wait` at the end.

``--delay`` injects a slow transport (:mod:`distnet.comm.delay`: every Allreduce takes that
many seconds more). hidden = (blocking - overlapped) / (blocking - compute): the fraction of the
communication time the overlap removed from the step. The sums are checked equal between modes.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--work", type=int, default=384, help="n of each layer's n^3 GEMM")
    ap.add_argument("--bucket-kib", type=int, default=256)
    ap.add_argument("--delay", default="0,0.005,0.02", help="injected seconds per Allreduce")
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()

    import numpy as np
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits
    from distnet.comm import allreduce_sum, allreduce_sum_start
    from distnet.comm.delay import injected_delay
    from distnet.comm.reduce import progress
    threadpool_limits(1, user_api="blas")
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(comm.rank)
    m = rng.standard_normal((a.work, a.work), dtype=np.float32)
    out = np.empty_like(m)
    nb = a.bucket_kib * 256
    grads0 = [rng.standard_normal(nb, dtype=np.float32) for _ in range(a.layers)]

    def step(mode):
        grads = [g.copy() for g in grads0]
        comm.Barrier()
        t0 = time.perf_counter()
        pending = []
        for i in range(a.layers):
            np.matmul(m, m, out=out)
            if mode == "overlapped":
                progress()
                pending.append(allreduce_sum_start([grads[i]], comm))
        if mode == "blocking":
            for g in grads:
                allreduce_sum([g], comm, kind="allreduce_grad")
        for p in pending:
            p.wait()
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        return t, grads

    rows = []
    for d in [float(x) for x in a.delay.split(",")]:
        times = {k: [] for k in ("compute", "blocking", "overlapped")}
        with injected_delay(d):
            step("blocking")
            step("overlapped")
            for _ in range(a.reps):
                for mode in times:
                    t, g = step(mode)
                    times[mode].append(t)
                    if mode == "blocking":
                        ref = g
                    elif mode == "overlapped":
                        assert all(np.array_equal(x, y) for x, y in zip(g, ref)), "sums differ"
        med = {k: statistics.median(v) for k, v in times.items()}
        comm_t = med["blocking"] - med["compute"]
        hidden = (med["blocking"] - med["overlapped"]) / comm_t if comm_t > 0 else float("nan")
        rows.append((d, med, hidden))
    if comm.rank == 0:
        print(f"{comm.size} ranks, {a.layers} layers x ({a.work}^3 GEMM + {a.bucket_kib} KiB bucket), "
              f"medians of {a.reps} interleaved repetitions:\n")
        print("| injected delay per Allreduce | compute only | blocking | overlapped | hidden |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for d, med, hidden in rows:
            print(f"| {d * 1e3:.0f} ms | {med['compute'] * 1e3:.1f} ms | {med['blocking'] * 1e3:.1f} ms | "
                  f"{med['overlapped'] * 1e3:.1f} ms | {100 * hidden:.0f}% |")


if __name__ == "__main__":
    main()
