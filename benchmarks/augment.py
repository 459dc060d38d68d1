"""What augmentation costs per minibatch: ``x[rows]`` of an augmented training split (random crop
with padding 4, reflect, horizontal flip) against the plain in-memory split, the same rows, in
one process, CIFAR-size images (3x32x32, float32, batch 128 of 10000), whole images and a 2x2 tile.

    .venv/bin/python benchmarks/augment.py [--rounds 5]

Prints the median time per minibatch of both and their ratio (interleaved rounds; the ratio is
the figure to read on a shared machine).
"""
import argparse
import time

import numpy as np

from distnet.data.augment import Augmentation, AugmentedArray
from distnet.geometry import tile_of


def per_batch(x, batches):
    t = time.perf_counter()
    for rows in batches:
        x[rows]
    return (time.perf_counter() - t) / len(batches)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--images", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    plane = (32, 32)
    stored = np.random.RandomState(0).standard_normal((args.images, 3) + plane).astype(np.float32)
    aug = Augmentation.from_config({"crop": {"padding": 4, "mode": "reflect"}, "flip": "horizontal"})
    order = np.random.RandomState(1).permutation(args.images)
    batches = [np.sort(order[a:a + args.batch]) for a in range(0, args.images, args.batch)]
    print("| layout | plain ms/batch | augmented ms/batch | ratio |\n| --- | ---: | ---: | ---: |")
    for name, tile in (("whole image", tile_of(plane, (1, 1), (0, 0))), ("2x2 tile (0, 1)", tile_of(plane, (2, 2), (0, 1)))):
        reach = aug.reach(tile, plane)
        plain = np.ascontiguousarray(stored[:, :, tile.y0:tile.y1, tile.x0:tile.x1])
        augmented = AugmentedArray(np.ascontiguousarray(stored[:, :, reach.y0:reach.y1, reach.x0:reach.x1]),
                                   aug, tile, reach, plane, seed=0)
        times = {"plain": [], "aug": []}
        for r in range(args.rounds):
            augmented.set_epoch(r)
            times["plain"].append(per_batch(plain, batches))
            times["aug"].append(per_batch(augmented, batches))
        p, a = np.median(times["plain"]), np.median(times["aug"])
        print(f"| {name} | {p * 1e3:.3f} | {a * 1e3:.3f} | {a / p:.2f} |")


if __name__ == "__main__":
    main()
