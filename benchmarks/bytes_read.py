"""What each rank reads of a data set with masks: the bytes of its HDF5 reads (the hyperslabs it
selects, images and masks) and the bytes the process read from files (``rchar`` of
``/proc/self/io``: what HDF5 actually fetched, whole chunks and metadata included), against the
file's size, for a plane set and a volume set, on 1, 4 and 6 ranks (``read: every``).

    .venv/bin/python benchmarks/bytes_read.py                  # 1, 4 and 6 ranks
    .venv/bin/python benchmarks/bytes_read.py --ranks 4 --images 8 --volumes 4   # quicker

Writes into a temporary folder, as ``distnet data convert --masks`` lays them out (chunks of one
image and at most 128x128 pixels, 64^3 voxels; Fletcher-32): ``planes.h5``, 3x768x640 uint8
images with uint8 masks, and ``volumes.h5``, 1x96x96x96 float32 volumes with uint8 masks
(``--images`` and ``--volumes`` of each, a fifth more as the test split). Then, per world size,
one ``mpiexec`` job whose ranks each load their tile of every image of both splits (the grid
``distnet`` would choose: 2x2 and 2x3, 1x2x2 and 1x2x3 for volumes), once in memory and once
streamed (one epoch of minibatches of 4, and the checks at the start), and report per rank.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GRIDS = {1: ((1, 1), (1, 1, 1)), 4: ((2, 2), (1, 2, 2)), 6: ((2, 3), (1, 2, 3))}


def write_sets(folder, images, volumes):
    """The two data sets (module docstring); ``{name: path}``."""
    import h5py

    from distnet.convert.writer import chunks
    rng = np.random.RandomState(0)
    out = {}
    for name, n, shape, dtype in (("planes", images, (3, 768, 640), np.uint8),
                                  ("volumes", volumes, (1, 96, 96, 96), np.float32)):
        out[name] = os.path.join(folder, f"{name}.h5")
        with h5py.File(out[name], "w") as f:
            for split, count in (("train", n), ("test", max(1, n // 5))):
                x = f.create_dataset(f"{split}/x", (count,) + shape, dtype, chunks=(1, shape[0]) + chunks(shape[1:]),
                                     fletcher32=True)
                y = f.create_dataset(f"{split}/y", (count,) + shape[1:], np.uint8, chunks=(1,) + chunks(shape[1:]),
                                     fletcher32=True)
                for i in range(count):
                    x[i] = (rng.standard_normal(shape) * 40 + 100).astype(dtype)
                    y[i] = rng.randint(0, 4, shape[1:]).astype(np.uint8)
            f.attrs["nclasses"], f.attrs["ignore_label"] = 4, 255
    return out


def _rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar")).split()[1])


def worker(paths):
    """One rank: its tile of both sets, in memory and streamed; prints rank 0's JSON table."""
    import h5py
    from mpi4py import MPI

    from distnet.datasets import HDF5Dataset
    from distnet.geometry.partition import coords_of, tile_of
    comm = MPI.COMM_WORLD
    selected = [0]
    plain = h5py.Dataset.read_direct

    def counting(self, dest, source_sel=None, dest_sel=None):
        shape = [len(range(*s.indices(n))) for s, n in zip(source_sel, self.shape)]
        selected[0] += int(np.prod(shape)) * self.dtype.itemsize
        return plain(self, dest, source_sel, dest_sel)
    h5py.Dataset.read_direct = counting
    rows = []
    for (name, path), grid in zip(sorted(paths.items()), GRIDS[comm.size]):
        for in_memory in (True, False):
            ds = HDF5Dataset(path=path, scale=1, in_memory=in_memory, dist_flag=True)
            tile = tile_of(ds.plane, grid, coords_of(grid, comm.rank))
            comm.Barrier()
            selected[0], before = 0, _rchar()
            data = ds.load(tile=tile, dtype=np.float32, rank=comm.rank, size=comm.size, grid=grid)
            if not in_memory:
                for x, y in data.values():
                    for a in range(0, len(y), 4):
                        batch = np.arange(a, min(a + 4, len(y)))
                        x[batch], y[batch]
            done = (name, "memory" if in_memory else "stream, 1 epoch", list(grid), list(tile.shape),
                    selected[0], _rchar() - before, os.path.getsize(path))
            rows.append(comm.gather(done, root=0))
    if comm.rank == 0:
        print(json.dumps(rows))


def table(results):
    """Markdown lines of the per-size results (``{size: rows}``)."""
    lines = ["| set | ranks | grid | tile | data | file MiB | selected per rank, max (MiB) | read per rank, max (MiB) "
             "| max read / file | 1 / ranks |", "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for size, rows in sorted(results.items()):
        for per_rank in rows:
            name, mode, grid, tile, _, _, nbytes = per_rank[0]
            sel = max(r[4] for r in per_rank)
            got = max(r[5] for r in per_rank)
            lines.append(f"| {name} | {size} | {'x'.join(map(str, grid))} | {'x'.join(map(str, tile))} | {mode} | "
                         f"{nbytes / 2**20:.1f} | {sel / 2**20:.1f} | {got / 2**20:.1f} | {got / nbytes:.3f} | "
                         f"{1 / size:.3f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,4,6")
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--volumes", type=int, default=10)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    from distnet.comm.launcher import launch_env, mpiexec_path
    with tempfile.TemporaryDirectory() as folder:
        paths = write_sets(folder, args.images, args.volumes)
        results = {}
        for size in (int(v) for v in args.ranks.split(",")):
            proc = subprocess.run([mpiexec_path(), "-n", str(size), sys.executable, __file__, "--worker",
                                   json.dumps(paths)], env=launch_env(size), capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"{size} ranks failed:\n{proc.stderr}")
            results[size] = json.loads(proc.stdout.strip().splitlines()[-1])
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
