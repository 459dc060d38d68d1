"""Per-channel statistics of a train split (what ``distnet data convert`` stores for
``normalize: per_channel``): streamed in blocks against reading the whole split into float64
at once, each in a fresh process, on the same file in the same run.

    .venv/bin/python benchmarks/channel_stats.py                     # 4000 images 3x128x128
    .venv/bin/python benchmarks/channel_stats.py --images 1000       # quicker

Writes random uint8 images ``(N, 3, 128, 128)`` as ``train/x`` (chunked one image per chunk, as
the converter does) into a temporary folder, then reports seconds, peak resident memory
(``ru_maxrss``) and the ratios blocks / whole, and checks that both give the same numbers
(relative difference of the means and standard deviations).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def measure(path, how):
    """In this process: ``{"seconds", "peak_mib", "mean", "std"}`` of ``how`` (blocks | whole)."""
    import h5py
    from distnet.data.stats import channel_stats
    with h5py.File(path, "r") as f:
        t = time.perf_counter()
        if how == "blocks":
            mean, std = channel_stats(f["train/x"])
        else:
            x = f["train/x"][()].astype(np.float64)
            mean, std = x.mean(axis=(0, 2, 3)), x.std(axis=(0, 2, 3))
        seconds = time.perf_counter() - t
    return {"seconds": seconds, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "mean": mean.tolist(), "std": std.tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--measure", nargs=2, metavar=("FILE", "HOW"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    import h5py
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "d.h5")
        rng = np.random.RandomState(0)
        with h5py.File(path, "w") as f:
            d = f.create_dataset("train/x", (args.images, 3, 128, 128), np.uint8, chunks=(1, 3, 128, 128))
            for a in range(0, args.images, 500):
                n = min(500, args.images - a)
                d[a:a + n] = rng.randint(0, 256, (n, 3, 128, 128), dtype=np.uint8)
        out = {}
        for how in ("whole", "blocks"):
            proc = subprocess.run([sys.executable, __file__, "--measure", path, how], capture_output=True,
                                  text=True, check=True)
            out[how] = json.loads(proc.stdout)
    size = args.images * 3 * 128 * 128 / 2**20
    print(f"train/x: {args.images} images 3x128x128 uint8 ({size:.0f} MiB stored)")
    for how, r in out.items():
        print(f"{how:>6}: {r['seconds']:7.2f} s, peak RSS {r['peak_mib']:7.0f} MiB")
    w, b = out["whole"], out["blocks"]
    diff = max(abs(x - y) / abs(y) for k in ("mean", "std") for x, y in zip(b[k], w[k]))
    print(f"blocks / whole: time {b['seconds'] / w['seconds']:.2f}, peak memory {b['peak_mib'] / w['peak_mib']:.2f}; "
          f"largest relative difference of the statistics {diff:.1e}")


if __name__ == "__main__":
    main()
