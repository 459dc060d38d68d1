"""What ``read: root`` costs against a shared copy (``read: every``): time to the first training
step and bytes moved, on 4 ranks (a 2x2 halopar grid), for a data set big enough to matter.

    .venv/bin/python benchmarks/root_read.py                      # 20000 CIFAR-size images, 3 rounds
    .venv/bin/python benchmarks/root_read.py --train 5000 --rounds 1   # quicker

Writes an HDF5 file of random uint8 images ``3 x 32 x 32`` (``--train`` training images and a
fifth of that as test images) into a temporary folder, then launches, per round and mode, a
fresh ``mpiexec -n 4`` job that builds a small ConvnetDist on it and measures, from a barrier
after MPI starts:

* **setup**: experiment built, shapes checked (``read: root``: the header broadcast);
* **data ready**: every rank has its tiles of both splits, as float32 (``load_data``);
* **first step**: one training step done on every rank (the time to first step);
* **file bytes**: what the ranks read from the data file (``every``: each rank its tile of every
  row; ``root``: rank 0, one bounding box of the tiles per chunk);
* **MPI bytes**: pixels sent by the reader (its ``stats``), and the largest message;
* **peak RSS** of rank 0 (the reader) and the largest of the others (``ru_maxrss``).

Modes alternate within a round (every, root); the table gives the median over rounds and the
ratio root / every of each round's times (median, min..max).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXPERIMENT = """!obj:distnet.experiments.FitExperiment {{
  dist_flag: True,
  backend: !obj:distnet.backends.Numpy {{rng_seed: 0}},
  datasets: [!obj:distnet.datasets.HDF5Dataset {{path: {path}, scale: 1/255, in_memory: true,
                                                dist_flag: True, read: {mode}, read_chunk_mb: {chunk}}}],
  model: !obj:distnet.models.ConvnetDist {{
    num_epochs: 1, batch_size: 64, shuffle: True, learning_rate: 0.01,
    layers: [
      !obj:distnet.layers.ConvLayerDist {{name: conv, nofm: 8, fshape: 3, padding: 1,
                                         weight_init: {{type: normal, scale: 0.1}}}},
      !obj:distnet.layers.MaxPoolingLayerDist {{name: pool, fshape: 2}},
      !obj:distnet.layers.LayerDist {{name: out, nout: 10, weight_init: {{type: normal, scale: 0.01}},
                                     activation: !obj:distnet.activations.Logistic {{}}}},
    ],
  }},
}}
"""


class _FirstStepDone(Exception):
    pass


def worker(args):
    from mpi4py import MPI

    from distnet.comm.root_read import job_reader
    from distnet.config import load_experiment_text
    world = MPI.COMM_WORLD
    world.Barrier()
    t0 = time.perf_counter()
    exp = load_experiment_text(EXPERIMENT.format(path=args.data, mode=args.mode, chunk=args.chunk_mb))
    exp.setup()
    t_setup = time.perf_counter() - t0
    data = exp.load_data()
    world.Barrier()
    t_data = time.perf_counter() - t0
    exp.model.start()

    def stop(epoch, batch, nbatches, cost):
        if batch == 1:
            raise _FirstStepDone
    try:
        exp.model.fit_epoch(data["train"], 0, on_batch=stop)
    except _FirstStepDone:
        pass
    world.Barrier()
    t_step = time.perf_counter() - t0
    t = exp.topology
    tile = exp.dataset.rank_tile(t.grid, t.coords)
    rows = sum(len(y) for _, y in data.values())
    file_bytes = rows * exp.dataset.image_shape[0] * tile.size      # uint8: its tile of every row
    reader = job_reader(args.mode)
    mine = {"setup": t_setup, "data": t_data, "step": t_step,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "file_bytes": file_bytes if args.mode == "every" else 0,
            "mpi_bytes": reader.stats["bytes"] if reader and reader.is_reader else 0,
            "max_message": reader.stats["max_message"] if reader and reader.is_reader else 0}
    if args.mode == "root" and world.rank == 0:
        mine["file_bytes"] = rows * exp.dataset.image_shape[0] * exp.dataset.plane[0] * exp.dataset.plane[1]
    every = world.gather(mine)
    if world.rank == 0:
        with open(args.out, "w") as f:
            json.dump(every, f)


def write_data(path, n_train, seed=0):
    import h5py
    rng = np.random.RandomState(seed)
    with h5py.File(path, "w") as f:
        for split, n in (("train", n_train), ("test", max(1, n_train // 5))):
            x = f.create_dataset(f"{split}/x", (n, 3, 32, 32), np.uint8, chunks=(min(n, 256), 3, 32, 32))
            for a in range(0, n, 4096):
                b = min(n, a + 4096)
                x[a:b] = rng.randint(0, 256, (b - a, 3, 32, 32), dtype=np.uint8)
            f[f"{split}/y"] = rng.randint(0, 10, n)


def launch(args, mode, data, out):
    from distnet.comm.launcher import launch_env, mpiexec_path
    cmd = ["timeout", "600", mpiexec_path(), "-n", "4", sys.executable, os.path.abspath(__file__), "--worker",
           "--mode", mode, "--data", data, "--out", out, "--chunk-mb", str(args.chunk_mb)]
    subprocess.run(cmd, check=True, env=launch_env(4), cwd=ROOT)
    with open(out) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chunk-mb", type=float, default=16)
    p.add_argument("--dir")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--mode")
    p.add_argument("--data")
    p.add_argument("--out")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    folder = args.dir or tempfile.mkdtemp(prefix="distnet-root-read-")
    try:
        data = os.path.join(folder, "data.h5")
        write_data(data, args.train)
        runs = {"every": [], "root": []}
        for r in range(args.rounds):
            for mode in ("every", "root"):
                runs[mode].append(launch(args, mode, data, os.path.join(folder, f"{mode}{r}.json")))
        report(args, runs, os.path.getsize(data))
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)


def report(args, runs, file_size):
    def med(mode, key, rank=0):
        return float(np.median([run[rank][key] for run in runs[mode]]))

    def ratio(key):
        rs = [root[0][key] / every[0][key] for root, every in zip(runs["root"], runs["every"])]
        return f"{np.median(rs):.2f} ({min(rs):.2f}..{max(rs):.2f})"
    n_test = max(1, args.train // 5)
    print(f"{args.train} + {n_test} images 3x32x32 uint8 ({file_size / 2**20:.1f} MiB file), 4 ranks "
          f"(grid 2x2, one machine), read_chunk_mb {args.chunk_mb:g}, {args.rounds} round(s); seconds from "
          "a barrier after MPI starts, median over rounds\n")
    print("| | read: every (shared copy) | read: root | root / every |")
    print("| --- | ---: | ---: | ---: |")
    for key, name in (("setup", "setup (header)"), ("data", "data ready"), ("step", "first step done")):
        print(f"| {name} | {med('every', key):.3f} s | {med('root', key):.3f} s | {ratio(key)} |")
    fb = {m: sum(r[k]["file_bytes"] for k in range(4)) for m, r in ((m, runs[m][0]) for m in runs)}
    print(f"| bytes read from the file (all ranks) | {fb['every'] / 2**20:.1f} MiB | {fb['root'] / 2**20:.1f} MiB | |")
    print(f"| bytes sent over MPI (reader) | 0 | {runs['root'][0][0]['mpi_bytes'] / 2**20:.1f} MiB "
          f"(largest message {runs['root'][0][0]['max_message'] / 2**20:.2f} MiB) | |")
    for mode in runs:
        others = max(med(mode, "rss_mib", k) for k in range(1, 4))
        print(f"| peak RSS, {mode}: rank 0 / largest other | {med(mode, 'rss_mib'):.0f} / {others:.0f} MiB | | |")


if __name__ == "__main__":
    main()
