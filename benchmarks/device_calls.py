"""Device calls and device waits per training step of each benchmark workload, on any machine.

    .venv/bin/python benchmarks/device_calls.py [--steps 4]

On a GPU a step costs, beyond its arithmetic, one kernel launch (plus Python dispatch) per array
operation and a stall of the launch queue at every wait for the device (a scalar read back, a
device -> host copy). Both are counted here by running the distnet GPU code path (the benchmark's
``--backend gpu`` setup: data on the device, ``cuda_aware_mpi`` False) on the device-like array
module of the test suite (distnet/testing/devicelike.py), which counts ``calls`` (array operations)
and ``syncs`` (waits), at the workload's batch size and at 4x that batch: equal counts mean that no
loop runs over the images of a batch. Counts, not timings; one process.

Each workload is counted twice: with the fused CUDA kernels (distnet/ops/cuda; the device-like
module runs their CUDA C compiled for the host) and without them (``DISTNET_CUDA_KERNELS=0``:
the generic array-module code, one launch per filter tap or window offset), so the table shows
the launches the kernels save.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import benchmarks.workloads as workloads  # noqa: E402
from distnet.comm import Topology  # noqa: E402
from distnet.ops.cuda import launch  # noqa: E402
from distnet.testing.devicelike import DeviceLike, xp  # noqa: E402


def count(workload, batch, steps, fused=True):
    """``(calls, syncs)`` per step of ``workload`` at ``batch``, after one warm-up step, with or
    without the fused kernels."""
    launch.ENABLED = fused
    run = workloads.DistnetRun(workload, Topology.serial(), batch=batch, backend="gpu")
    run.step()
    xp.counts.clear()
    for _ in range(steps):
        float(run.step())   # the benchmark reads each step's loss back, as training does
    return xp.counts["calls"] / steps, xp.counts["syncs"] / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    workloads.gpu_backend = lambda like: DeviceLike(rng_seed=like.rng_seed, dtype=like.dtype.name)
    if not launch.available(xp):
        sys.exit("no C++ compiler: the device-like module cannot run the fused kernels here")
    print("| workload | batch | device calls / step, generic | fused kernels | fused at 4x batch "
          "| device waits / step |")
    print("|---|---|---|---|---|---|")
    for w in workloads.BATCH:
        B = workloads.BATCH[w]
        generic, _ = count(w, B, a.steps, fused=False)
        calls, syncs = count(w, B, a.steps)
        calls4, _ = count(w, 4 * B, a.steps)
        print(f"| {w} | {B} | {generic:.0f} | {calls:.0f} | {calls4:.0f} | {syncs:.0f} |", flush=True)


if __name__ == "__main__":
    main()
