"""Memory per rank of a 3-D U-Net on a volume one process should not hold: the peak RSS of one
training run on one process against the same run cut over a 2x2x2 grid of 8 ranks, beside the
memory and step time ``distnet plan`` predicts for each, with this machine's rates (``distnet plan
--calibrate`` once, then ``--machine``), and the plan's errors in percent; with ``--dims 2``
the same for the 2-D U-Net of experiments/unet.yaml on one large image (benchmarks/experiments/
unet2d_bench*.yaml, RGB images of SxS from experiments/make_segmentation_demo.py).

    .venv/bin/python benchmarks/volume_memory.py                  # 128^3, budget 2048 MiB (2 min)
    .venv/bin/python benchmarks/volume_memory.py --size 96 --budget-mib 1024
    .venv/bin/python benchmarks/volume_memory.py --dims 2         # 2048x2048 on 1, 4 and 16 ranks

The net: benchmarks/experiments/unet3d_bench.yaml (one process) and unet3d_bench_dist.yaml (the
grid), a ScaFFold-shaped two-level U-Net (two 3x3x3 convs with batch norm per level, 8/16/32
channels, transposed convs up, skips concatenated), float32, batch 1. The data: 4 volumes of
``S^3`` from experiments/make_volume_demo.py, converted to an HDF5 file in a scratch folder
(train 2, valid 1, test 1). Each side runs ``distnet run`` for ``--epochs`` epochs with one BLAS thread
per rank; a wrapper records every rank's ``ru_maxrss`` at exit and its RSS after the imports
(``base``: the interpreter, numpy, h5py, distnet). The step time is the last epoch's training
seconds (metrics.jsonl) over its steps: on this machine's cores 8 ranks are oversubscribed,
so compare ratios only, and on as many cores as ranks for a real speed-up.
"""
import argparse
import atexit
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MIB = 2**20
#: Per number of spatial dimensions: the one-process and grid files, the default side, ranks and
#: budget, and the words of the table's title.
NETS = {
    3: dict(one="benchmarks/experiments/unet3d_bench.yaml", dist="benchmarks/experiments/unet3d_bench_dist.yaml",
            size=128, ranks="8", budget=2048, title="3-D U-Net (unet3d_bench), volume 1x{s}^3"),
    2: dict(one="benchmarks/experiments/unet2d_bench.yaml", dist="benchmarks/experiments/unet2d_bench_dist.yaml",
            size=2048, ranks="4,16", budget=2048, title="2-D U-Net (unet2d_bench), image 3x{s}x{s}"),
}


def rss_now():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def rank_wrapper(out, argv):
    """Run ``distnet ARGV`` in this process (one rank under mpiexec) and write its base and peak
    RSS to ``out-<rank>.json`` at exit."""
    import h5py  # noqa: F401  (in the base: every run reads its volumes through it)
    import numpy  # noqa: F401

    import distnet.cli.main  # noqa: F401
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    base = rss_now()

    def write():
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        with open(f"{out}-{rank}.json", "w") as f:
            json.dump({"rank": rank, "base": base, "peak": peak}, f)
    atexit.register(write)
    sys.argv = ["distnet"] + argv
    from distnet.cli.main import main
    main()


def make_data(dims, size, work):
    """4 volumes of ``size^3`` (``dims`` 3) or RGB images of ``size x size`` (``dims`` 2) and their
    masks in ``work/bench.h5`` (train 2, valid 1, test 1)."""
    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    folder, data = os.path.join(work, "samples"), os.path.join(work, "bench.h5")
    if dims == 3:
        from make_volume_demo import make_volume_demo
        make_volume_demo(folder, count=4, shape=(size,) * 3)
        samples = f"{folder}/volumes"
    else:
        from make_segmentation_demo import make_segmentation_demo
        make_segmentation_demo(folder, count=4, size=(size, size))
        samples = f"{folder}/images"
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "distnet"), "data", "convert",
                    samples, data, "--masks", f"{folder}/masks", "--classes",
                    f"{folder}/classes.txt", "--valid-fraction", "0.25"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return data


def measure(exp, nranks, epochs, work, data):
    """Peak and base RSS per rank and the last epoch's seconds per step of ``distnet run exp``."""
    from distnet.comm.launcher import mpiexec_path
    out, run_dir = os.path.join(work, f"rss{nranks}"), os.path.join(work, f"run{nranks}")
    cmd = [sys.executable, os.path.abspath(__file__), "--rank-wrapper", out, "--", "run", exp, "-q",
           "--no-checkpoint", "--run-dir", run_dir, "--set", f"model.num_epochs={epochs}",
           "--set", f"datasets.0.path={data}"]
    if nranks > 1:
        cmd = [mpiexec_path(), "-n", str(nranks)] + cmd
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    ranks = [json.load(open(p)) for p in sorted(glob.glob(out + "-*.json"))]
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        epochs_seen = [r for r in map(json.loads, f) if "seconds" in r]
    steps = 2   # two training volumes or images, batch 1
    return ranks, epochs_seen[-1]["seconds"] / steps


def distnet_plan(exp, nranks, shape, *options):
    """``distnet plan EXP -n N --input-shape SHAPE --batch 1 --json OPTIONS...`` as a dict."""
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "distnet"), "plan", exp, "-n",
                        str(nranks), "--input-shape", shape, "--batch", "1", "--json", *options],
                       check=True, cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))
    return json.loads(p.stdout)


def calibrate(exp, shape, work):
    """This machine's rates for the net (``distnet plan --calibrate``, one process, one thread),
    saved to ``work/machine.json`` for the plans of every run."""
    path = os.path.join(work, "machine.json")
    distnet_plan(exp, 1, shape, "--calibrate", "--save-machine", path)
    return path


def planned(exp, nranks, shape, machine):
    """``distnet plan --json``'s memory per rank (total and activations, bytes), the halo
    exchanges' share of its step time and the step time (s) on ``machine`` (a machine file), for
    an input of ``shape`` (C,[D,]H,W) and batch 1."""
    plan = distnet_plan(exp, nranks, shape, "--machine", machine)
    rank, time = plan["memory"]["rank"], plan["totals"]["time"]
    return rank["total"], rank["activations"], time["halo"] / time["step"], time["step"]


def _error(predicted, measured):
    """The plan's error in percent of the measured figure, signed (+: the plan says more)."""
    return f"{100 * (predicted - measured) / measured:+.0f}%"


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--rank-wrapper":
        return rank_wrapper(sys.argv[2], sys.argv[4:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", type=int, choices=sorted(NETS), default=3,
                    help="3: the 3-D U-Net on volumes; 2: the 2-D U-Net on images")
    ap.add_argument("--size", type=int, help="side S of the volume or image, a multiple of 4 "
                    "(default 128 for 3-D, 2048 for 2-D)")
    ap.add_argument("--ranks", help="ranks of the grid runs, comma-separated (default 8: 2x2x2 for "
                    "3-D; 4,16 for 2-D)")
    ap.add_argument("--budget-mib", type=float, help="the per-process memory budget (default 2048)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs of 2 steps (the last one timed)")
    a = ap.parse_args()
    net = NETS[a.dims]
    size, budget = a.size or net["size"], a.budget_mib or net["budget"]
    ranks = [int(n) for n in (a.ranks or net["ranks"]).split(",")]
    if size % 4:
        sys.exit(f"volume_memory: --size must be a multiple of 4 (two poolings by 2), got {size}")
    shape = ",".join([str(1 if a.dims == 3 else 3)] + [str(size)] * a.dims)
    with tempfile.TemporaryDirectory(prefix="volume_memory-") as work:
        data = make_data(a.dims, size, work)
        machine = calibrate(net["one"], shape, work)
        rows = []
        for n in [1] + ranks:
            exp = net["one"] if n == 1 else net["dist"]
            per_rank, step = measure(exp, n, a.epochs, work, data)
            peak = max(r["peak"] for r in per_rank)
            base = max(r["base"] for r in per_rank)
            rows.append((n, peak, base) + planned(exp, n, shape, machine) + (step,))
    cores = len(os.sched_getaffinity(0))
    print(net["title"].format(s=size) + f" float32, batch 1, budget {budget:.0f} MiB per process; "
          f"{','.join(map(str, ranks))} ranks on {cores} cores"
          + (" (oversubscribed)" if max(ranks) > cores else "") + "; plan calibrated on this machine")
    print(f"{'ranks':>5} {'peak RSS':>10} {'base':>8} {'peak-base':>10} {'plan mem':>9} {'plan act':>9} "
          f"{'mem err':>8} {'budget':>7} {'halo %':>7} {'s/step':>7} {'plan s':>7} {'time err':>8}")
    for n, peak, base, total, act, halo, plan_step, step in rows:
        fits = "fits" if peak <= budget * MIB else "over"
        print(f"{n:>5} {peak / MIB:>9.0f}M {base / MIB:>7.0f}M {(peak - base) / MIB:>9.0f}M "
              f"{total / MIB:>8.0f}M {act / MIB:>8.0f}M {_error(total, peak - base):>8} {fits:>7} "
              f"{100 * halo:>6.2f}% {step:>7.2f} {plan_step:>7.2f} {_error(plan_step, step):>8}")
    _, p1, b1, *_, s1 = rows[0]
    for n, p, b, *_, s in rows[1:]:
        print(f"{n} ranks per rank / one process: peak RSS {p / p1:.3f}, above base {(p - b) / (p1 - b1):.3f}; "
              f"step time {s / s1:.2f}x one process's (ratio only)")


if __name__ == "__main__":
    main()
