"""Strong scaling measured so that a drifting machine cannot fake it: one ``mpiexec`` job that
times, round after round, the three steps whose ratios matter.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/scaling.py --grid 1x2 --rounds 12

Per round, with one BLAS and kernel thread per rank (set before numpy loads):

* **one rank**: rank 0 trains one step of the single-process model on the whole image while the
  other ranks sleep (an ``Ibarrier`` polled every 0.5 ms, so they leave their cores idle);
* **no communication**: every rank trains, at the same time and without any message, one step of
  the single-process model on an image the size of its own tile (rank 0's tile on a grid that
  does not cut evenly): the work of the distributed step on the same cores, with the halo
  exchanges, the sums and the waits for the slowest rank taken out. Its speed-up is what the
  machine allows (cores sharing caches, memory bandwidth and clock), the ceiling of the
  distributed step;
* **distributed**: one step of the Dist model on the grid (the slowest rank's time).

A round takes the three one after the other, so a machine that slows down over minutes (other
virtual machines on the host) slows all three alike; the speed-ups are computed per round and
reported as their median and range. Printed: the medians of the step times, speed-up vs one rank
of the ceiling and of the distributed step, and the distributed step's efficiency against the
ceiling (the part communication and synchronisation cost).
"""
import argparse
import json
import os
import statistics
import sys
import time

for _k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "DISTNET_KERNEL_THREADS"):
    os.environ[_k] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _solo_model(workload, shape):
    """A single-process run of ``workload`` on images of ``shape`` ``(C, H, W)``."""
    import numpy as np
    from benchmarks.workloads import BATCH, DistnetRun, SHAPES
    from distnet.comm import Topology
    full = DistnetRun(workload, Topology.serial())
    if tuple(shape) == tuple(SHAPES[workload]):
        return full
    from distnet.config import load_experiment
    from benchmarks.workloads import experiment_path
    exp = load_experiment(experiment_path(workload))
    model = exp.model
    model.batch_size = BATCH[workload]
    model.infer_shapes(tuple(shape))
    model.configure(exp.backend, Topology.serial())
    model.init_params()
    for layer in model.layers:
        layer.reuse_buffers = model.graph.is_chain
    full.model = model
    full.x = np.ascontiguousarray(full.x[:, :, :shape[1], :shape[2]])
    return full


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="bigimage")
    ap.add_argument("--grid", required=True, help="PyxPx, Py*Px = the ranks of the job")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one line RESULT {json} instead of the table")
    a = ap.parse_args()

    from distnet.comm.launcher import prepare_mpi_env
    prepare_mpi_env()                 # as `distnet run`: MPICH yields when ranks outnumber cores
    from mpi4py import MPI
    from benchmarks.workloads import DistnetRun, SHAPES
    from distnet.comm import Topology
    from distnet.geometry import tile_of

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    grid = tuple(int(v) for v in a.grid.split("x"))
    if grid[0] * grid[1] != comm.Get_size():
        sys.exit(f"scaling: grid {a.grid} needs {grid[0] * grid[1]} ranks, the job has {comm.Get_size()}")
    C, H, W = SHAPES[a.workload]
    tile = tile_of((H, W), grid, (0, 0))
    dist = DistnetRun(a.workload, Topology.from_world(grid=grid), dist=True)
    part = _solo_model(a.workload, (C,) + tile.shape)
    whole = _solo_model(a.workload, (C, H, W)) if rank == 0 else None

    def idle_barrier():
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(0.0005)

    def timed(step, everyone=True):
        if everyone:
            comm.Barrier()
        t0 = time.perf_counter()
        step()
        t = time.perf_counter() - t0
        return comm.allreduce(t, MPI.MAX) if everyone else t

    times = {"one rank": [], "no communication": [], "distributed": []}
    for r in range(a.warmup + a.rounds):
        idle_barrier()
        one = timed(whole.step, everyone=False) if rank == 0 else 0.0
        idle_barrier()
        ceiling = timed(part.step)
        distributed = timed(dist.step)
        if r >= a.warmup:
            for k, v in zip(times, (one, ceiling, distributed)):
                times[k].append(v)
    if rank != 0:
        return
    one = times["one rank"]
    ratios = {k: sorted(o / t for o, t in zip(one, times[k])) for k in ("no communication", "distributed")}
    eff = sorted(c / d for c, d in zip(times["no communication"], times["distributed"]))
    if a.json:
        print("RESULT " + json.dumps({"workload": a.workload, "grid": a.grid, "rounds": a.rounds,
                                      "times": times, "speedup_per_round": ratios,
                                      "efficiency_per_round": eff}), flush=True)
        return

    def speedups(k):
        s = ratios[k]
        return f"{statistics.median(s):.2f}x ({s[0]:.2f}-{s[-1]:.2f})"

    print(f"{a.workload}, grid {a.grid} ({comm.Get_size()} ranks), one thread per rank, {a.rounds} "
          f"interleaved rounds, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print()
    print("| step | median | speed-up vs one rank, per round (range) |")
    print("| --- | ---: | --- |")
    for k in times:
        print(f"| {k} | {statistics.median(times[k]) * 1e3:.1f} ms | "
              + ("-" if k == "one rank" else speedups(k)) + " |")
    print()
    print(f"distributed / no-communication efficiency per round: {statistics.median(eff):.2f} "
          f"({eff[0]:.2f}-{eff[-1]:.2f})")


if __name__ == "__main__":
    main()
