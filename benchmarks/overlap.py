"""How much communication the overlapped training step hides: real models, or a stand-in.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/overlap.py --model mnist_cnn --grid 1x2
    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/overlap.py --model bigimage --grid 1x2
    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/overlap.py --delay 0,0.005,0.02

**Models** (``--model``: a workload of benchmarks/workloads.py on the ``--grid`` process grid,
float32, one BLAS thread per rank): training steps of the real model in four modes, interleaved
round by round (the order rotates each round), ``--steps`` timed steps per mode and round (the
slowest rank's time per step), medians per round; the table gives the median over ``--rounds``
rounds and the spread (min-max of the round medians):

* ``blocking`` (``DISTNET_OVERLAP=0``), ``grad`` (gradient buckets only), ``halo`` (the conv
  split: the tile while the halo flies, then its border outputs again) and ``overlapped``
  (both, ``DISTNET_OVERLAP=1``; the default is ``grad``);

for each injected delay (``--delay``, seconds; ``--inject grad``: every gradient Allreduce,
:data:`DISTNET_COMM_DELAY <distnet.comm.delay>`; ``--inject halo``: every forward halo
exchange, ``DISTNET_HALO_DELAY``; ``--inject bandwidth``: that many seconds per MiB of
gradients, the Allreduces sharing one wire, ``DISTNET_COMM_SECONDS_PER_MIB``). Each round also
times the blocking step without the delay ("no delay"); hidden = (blocking - overlapped) /
(blocking - no delay), per round (median and range over the rounds): the fraction of the
injected communication time the overlap removed from the step.
The first step's loss of every mode is checked equal (to 1e-5: the conv split may round a
float32 dot product differently).

**Stand-in** (no ``--model``): a model's backward imitated by
``--layers`` layers, each a one-thread float32 GEMM (``--work``: its size n for an n x n x n
product) followed by a gradient bucket of ``--bucket-kib`` KiB. Three modes, interleaved
repetition by repetition (medians over ``--reps``):

* ``compute``: the GEMMs alone (no communication);
* ``blocking``: the GEMMs, then one blocking :func:`~distnet.comm.allreduce_sum` per bucket
  (the sums follow the whole backward);
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


def _stand_in(a):
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


MODES = {"blocking": False, "grad": "grad", "halo": "halo", "overlapped": True}


def _model(a):
    import numpy as np
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits
    from benchmarks.workloads import DistnetRun
    from distnet.comm import Topology
    from distnet.comm.delay import injected_bandwidth, injected_delay, injected_halo_delay
    from distnet.comm.overlap import overlap_mode
    threadpool_limits(1, user_api="blas")
    comm = MPI.COMM_WORLD
    grid = tuple(int(v) for v in a.grid.split("x"))
    topo = Topology.from_world(grid=grid, data=comm.size // (grid[0] * grid[1]))
    run = DistnetRun(a.model, topo, dist=True)
    inject = {"grad": injected_delay, "halo": injected_halo_delay, "bandwidth": injected_bandwidth}[a.inject]
    modes = [m for m in MODES if m in a.modes.split(",")]

    params = [p for layer in run.model.layers for p in layer.params()]
    start = [p.value.copy() for p in params]
    first = {}
    for m in modes:                       # warm-up (buffers planned); first losses from one state
        for p, v in zip(params, start):
            p.value[...] = v
            p.velocity = None
        run.i = 0
        with overlap_mode(MODES[m], a.bucket):
            first[m] = run.step()
            run.step()
    ref = first[modes[0]]
    for m in modes:
        assert abs(first[m] - ref) <= 1e-5 * abs(ref), f"first loss {m} {first[m]} != {ref}"

    def timed(mode):
        if mode == "no delay":            # the blocking step without the injected delay
            with inject(0):
                return timed("blocking")
        ts = []
        with overlap_mode(MODES[mode], a.bucket):
            for _ in range(a.steps):
                comm.Barrier()
                t0 = time.perf_counter()
                run.step()
                ts.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        return statistics.median(ts)

    rows = {}
    for d in [float(x) for x in a.delay.split(",")]:
        timed_modes = modes + (["no delay"] if d > 0 and "blocking" in modes else [])
        per = {m: [] for m in timed_modes}
        with inject(d):
            for r in range(a.rounds):
                for k in range(len(timed_modes)):
                    m = timed_modes[(r + k) % len(timed_modes)]
                    per[m].append(timed(m))
        rows[d] = per
    if comm.rank == 0:
        try:
            load = os.getloadavg()
        except OSError:
            load = (float("nan"),) * 3
        what = {"grad": "delay on every gradient Allreduce", "halo": "delay on every forward halo exchange",
                "bandwidth": "delay per MiB of gradient Allreduce (one shared wire)"}[a.inject]
        print(f"{a.model} on grid {a.grid} ({comm.size} ranks), batch {run.B}, float32, injected {what}; "
              f"medians of {a.rounds} interleaved rounds of {a.steps} steps (min-max of the round medians); "
              f"bucket {a.bucket if a.bucket is not None else 'default'} bytes; load average "
              f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
        print("| delay | " + " | ".join(modes) + " | blocking, no delay | hidden (per-round range) |")
        print("| ---: | " + " | ".join("---:" for _ in modes) + " | ---: | ---: |")
        for d, per in rows.items():
            med = {m: statistics.median(v) for m, v in per.items()}
            cells = [f"{med[m] * 1e3:.1f} ms ({min(per[m]) * 1e3:.0f}-{max(per[m]) * 1e3:.0f})" for m in modes]
            base, hidden = "", ""
            if "no delay" in per:
                base = f"{med['no delay'] * 1e3:.1f} ms"
            if "no delay" in per and "overlapped" in modes:
                # per round: (blocking - overlapped) / (blocking - blocking without the delay)
                fr = [(b - o) / (b - n) for b, o, n in zip(per["blocking"], per["overlapped"], per["no delay"])
                      if b > n]
                if fr:
                    hidden = f"{100 * statistics.median(fr):.0f}% ({100 * min(fr):.0f} to {100 * max(fr):.0f}%)"
            print(f"| {d * 1e3:.0f} ms | " + " | ".join(cells) + f" | {base} | {hidden} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a workload (mnist_cnn, bigimage, ...); none: the stand-in")
    ap.add_argument("--grid", default=None, help="PyxPx process grid of --model (default: 1 x ranks)")
    ap.add_argument("--inject", choices=["grad", "halo", "bandwidth"], default="grad",
                    help="grad: --delay per gradient Allreduce; halo: per forward halo exchange; "
                         "bandwidth: --delay per MiB of gradients")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bucket", type=int, default=None, help="gradient bucket bytes (default: the library's)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--work", type=int, default=384, help="n of each layer's n^3 GEMM")
    ap.add_argument("--bucket-kib", type=int, default=256)
    ap.add_argument("--delay", default="0,0.005,0.02", help="injected seconds per Allreduce")
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    if a.model is None:
        _stand_in(a)
    else:
        if a.grid is None:
            from mpi4py import MPI
            a.grid = f"1x{MPI.COMM_WORLD.size}"
        _model(a)


if __name__ == "__main__":
    main()
