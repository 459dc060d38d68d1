"""`distnet plan`'s predictions against measured runs on this machine (1-9 ranks): step time,
halo and Allreduce bytes, and peak memory per rank.

The machine constants are calibrated first, from micro-measurements that are not the runs being
checked: distnet's own convolution kernels (forward and backward) on a layer of no workload's
shape (FLOP/s of one rank, as distnet's kernels reach them), a large array copy (memory bytes/s)
and an MPI ping-pong between two ranks of this node (alpha from 8-byte messages, beta from 4 MiB
ones). On a machine with fewer cores than ranks the ranks share the cores, so the
model's per-rank rates are divided by ranks/cores there (stated in the table). Each layout then
runs ``benchmarks/worker.py`` (warm-up steps, then timed steps; the median step of the slowest
rank) and is set beside the plan of the same layout.

Usage: ``.venv/bin/python benchmarks/plan_check.py [--rounds R] [--quick]``; prints a Markdown
table (pasted into benchmarks/README.md) and writes benchmarks/results/plan_check.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")      # one rank's rates, before numpy starts

from benchmarks.run import _env, job  # noqa: E402
from benchmarks.workloads import BATCH, SHAPES, experiment_path  # noqa: E402

#: (workload, grids) checked; ``--quick``: the first grid of each.
LAYOUTS = [("mnist_cnn", ["1x1", "1x2", "2x2", "1x4", "3x3"]),
           ("bigimage", ["1x1", "2x2", "3x3"])]

_PINGPONG = r"""
import sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
out = {}
for n in (8, 4 * 2**20):
    buf = np.zeros(n, dtype=np.uint8)
    reps = 200 if n == 8 else 20
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        if comm.rank == 0:
            comm.Send(buf, 1); comm.Recv(buf, 1)
        else:
            comm.Recv(buf, 0); comm.Send(buf, 0)
    out[n] = (time.perf_counter() - t0) / (2 * reps)
if comm.rank == 0:
    print("PINGPONG", out[8], out[4 * 2**20])
"""


def calibrate():
    """``{"flop_rate", "mem_rate", "alpha", "beta"}`` of one rank of this machine."""
    import numpy as np

    from distnet.ops.conv import conv2d_bprop, conv2d_fprop
    rng = np.random.RandomState(0)
    # 24 maps of 40x40 -> 24 maps, 3x3, batch 8: a layer of none of the checked workloads
    B, C, H, K, f = 8, 24, 40, 24, 3
    x = rng.standard_normal((B, C, H, H)).astype(np.float32)
    w = rng.standard_normal((K, C, f, f)).astype(np.float32)
    dy = rng.standard_normal((B, K, H - f + 1, H - f + 1)).astype(np.float32)

    def step():
        conv2d_fprop(x, w, (1, 1))
        conv2d_bprop(x, w, dy, (1, 1))
    step()
    t = min(_timed(step) for _ in range(5))
    flop_rate = 3 * 2 * B * K * C * f * f * (H - f + 1) ** 2 / t     # forward, dx and dw
    x = np.random.rand(32 * 2**20 // 4).astype(np.float32)
    y = np.empty_like(x)
    t = min(_timed(lambda: np.copyto(y, x)) for _ in range(5))
    mem_rate = 2 * x.nbytes / t                            # read + write
    from distnet.comm.launcher import mpiexec_path
    p = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-c", _PINGPONG], capture_output=True,
                       text=True, env=_env(1), cwd=ROOT, timeout=300)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("PINGPONG"))
    small, big = (float(v) for v in line.split()[1:])
    beta = 4 * 2**20 / max(big - small, 1e-9)
    return {"flop_rate": flop_rate, "mem_rate": mem_rate, "alpha": small, "beta": beta}


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def predict(workload, grid, rates, cores):
    """The plan's figures for ``workload`` on ``grid`` with this machine's ``rates`` (shared
    among ranks beyond ``cores``)."""
    from distnet.config import load_experiment
    from distnet.plan import Machine, plan_model
    from distnet.plan.memory import memory_totals
    py, px = (int(v) for v in grid.split("x"))
    n = py * px
    share = min(1.0, cores / n)
    m = Machine(alpha=rates["alpha"], beta=rates["beta"], flop_rate=rates["flop_rate"] * share,
                mem_rate=rates["mem_rate"] * share, ranks_per_node=n)
    exp = load_experiment(experiment_path(workload, dist=n > 1))
    p = plan_model(exp.model, SHAPES[workload], n, grid=(py, px), batch=BATCH[workload], machine=m,
                   state_arrays=len(exp.model.optimizer_state_names()))
    t = p.totals()
    mem = memory_totals(p)["rank"]
    halo = (p.per_rank("halo_fwd") + p.per_rank("halo_bwd")).max()   # the rank sending most, both ways
    return {"step_s": t["time"]["step"], "halo_bytes_max": float(halo),
            "allreduce_bytes_max": t["allreduce_grad"] + t["allreduce_act"],
            "memory_bytes": mem["parameters"] + mem["gradients"] + mem["optimizer"] + mem["activations"]}


def measure(workload, grid, rounds):
    runs = [job("distnet", workload, grid=None if grid == "1x1" else grid) for _ in range(rounds)]
    ok = [r for r in runs if "error" not in r]
    if not ok:
        raise RuntimeError(runs[0]["error"])
    per_rank = ok[0]["bytes_per_step"]
    return {"step_s": statistics.median(t for r in ok for t in r["step_times"]),
            "halo_bytes_max": max(b.get("halo_fwd", 0) + b.get("halo_bwd", 0) for b in per_rank),
            "allreduce_bytes_max": max(b.get("allreduce_grad", 0) + b.get("allreduce_act", 0) for b in per_rank),
            # what the step itself added to the process (held arrays), largest rank
            "memory_bytes": max(p - b for p, b in zip(ok[0]["peak_rss"], ok[0]["base_rss"]))}


def _err(pred, meas):
    return (pred - meas) / meas if meas else (0.0 if pred == 0 else float("inf"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="one small layout per workload")
    a = ap.parse_args()
    from distnet.comm.node import own_cores
    cores = len(own_cores())
    rates = calibrate()
    print(f"calibrated on this machine ({cores} cores): {rates['flop_rate'] / 1e9:.1f} GFLOP/s, memory "
          f"{rates['mem_rate'] / 1e9:.1f} GB/s, alpha {rates['alpha'] * 1e6:.2f} us, beta {rates['beta'] / 1e9:.2f} GB/s "
          "per rank (rates shared by the ranks beyond the cores)", flush=True)
    rows = []
    layouts = [(w, grids[:2] if a.quick else grids) for w, grids in LAYOUTS]
    for workload, grids in layouts:
        for grid in grids:
            pred, meas = predict(workload, grid, rates, cores), measure(workload, grid, a.rounds)
            rows.append({"workload": workload, "grid": grid, "predicted": pred, "measured": meas})
            print(f"  {workload} {grid}: step {pred['step_s'] * 1e3:.1f} ms predicted, "
                  f"{meas['step_s'] * 1e3:.1f} ms measured", flush=True)
    head = ("| workload | grid | step ms plan / run (error) | halo B/rank plan / run | Allreduce B/rank "
            "plan / run | memory MiB/rank plan / run (error) |")
    lines = [head, "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        p, m = r["predicted"], r["measured"]
        lines.append(f"| {r['workload']} | {r['grid']} | {p['step_s'] * 1e3:.1f} / {m['step_s'] * 1e3:.1f} "
                     f"({_err(p['step_s'], m['step_s']):+.0%}) | {p['halo_bytes_max']:,.0f} / {m['halo_bytes_max']:,.0f} "
                     f"| {p['allreduce_bytes_max']:,.0f} / {m['allreduce_bytes_max']:,.0f} | "
                     f"{p['memory_bytes'] / 2**20:.1f} / {m['memory_bytes'] / 2**20:.1f} "
                     f"({_err(p['memory_bytes'], m['memory_bytes']):+.0%}) |")
    print("\n".join(lines))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "plan_check.json"), "w") as f:
        json.dump({"cores": cores, "rates": rates, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
