"""Write a small set of 3-D volumes with masks to try `distnet data convert --masks` on volumes:

    python experiments/make_volume_demo.py vol_demo      # vol_demo/volumes/*.npy, vol_demo/masks/*.npy
    distnet data convert vol_demo/volumes datasets/volume_demo.h5 --masks vol_demo/masks \
        --classes vol_demo/classes.txt

24 volumes of 1x19x23x29 float32 (depth, height and width that are not powers of two) in
Gaussian noise, each with one to three spheres (class 1 ``sphere``) and shells (class 2
``shell``: a hollow sphere) of random radii at random places; the masks are uint8 ``(D, H, W)``
``.npy`` files of the same names, class 0 ``background``. Needs numpy only. Seeded: the same
files every time.

With ``--targets``, volumes to regress on instead (a CosmoFlow-shaped task, experiments/cosmoflow.yaml):

    python experiments/make_volume_demo.py cosmo_demo --targets   # cosmo_demo/volumes/*.npy, cosmo_demo/targets.csv
    distnet data convert cosmo_demo/volumes datasets/cosmo_demo.h5 --targets cosmo_demo/targets.csv

64 volumes of 1x16x16x16 float32, each one ball of random radius (2 to 5 voxels) and intensity
(0.5 to 2) at a random place in Gaussian noise; ``targets.csv`` holds each file's ``radius`` and
``intensity``, which the volume shows (so a net can learn them).
"""
import os
import sys

import numpy as np

CLASSES = ("background", "sphere", "shell")


def _volume(rng, shape):
    """One volume ``(D, H, W)`` float32 and its mask ``(D, H, W)`` uint8."""
    volume = rng.standard_normal(shape).astype(np.float32) * 0.3
    mask = np.zeros(shape, np.uint8)
    zz, yy, xx = np.mgrid[:shape[0], :shape[1], :shape[2]]
    for _ in range(rng.randint(1, 4)):
        kind = rng.randint(1, 3)
        centre = [rng.randint(0, n) for n in shape]
        r = rng.uniform(3, 7)
        d = np.sqrt((zz - centre[0]) ** 2 + (yy - centre[1]) ** 2 + (xx - centre[2]) ** 2)
        inside = d <= r if kind == 1 else (d <= r) & (d >= r - 1.5)
        mask[inside] = kind
        volume[inside] += 1.0 if kind == 1 else -1.0
    return volume, mask


def make_volume_demo(folder, count=24, shape=(19, 23, 29), seed=0):
    """Write the volumes, masks and classes.txt under ``folder``; returns the number of volumes."""
    rng = np.random.RandomState(seed)
    samples = [_volume(rng, shape) for _ in range(count)]      # 24 x 50 KiB: small
    for k, sub in enumerate(("volumes", "masks")):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
        for i, pair in enumerate(samples):
            np.save(os.path.join(folder, sub, f"{i:03d}.npy"), pair[k])
    np.savetxt(os.path.join(folder, "classes.txt"), CLASSES, fmt="%s")
    return count


def make_target_demo(folder, count=64, shape=(16, 16, 16), seed=0):
    """Write ``count`` volumes (one ball each, module docstring) and ``targets.csv`` (``name,radius,
    intensity``) under ``folder``; returns the number of volumes."""
    rng = np.random.RandomState(seed)
    os.makedirs(os.path.join(folder, "volumes"), exist_ok=True)
    zz, yy, xx = np.mgrid[:shape[0], :shape[1], :shape[2]]
    rows = ["name,radius,intensity"]
    for i in range(count):
        radius, intensity = rng.uniform(2, 5), rng.uniform(0.5, 2)
        centre = [rng.uniform(radius, n - 1 - radius) for n in shape]
        d = np.sqrt((zz - centre[0]) ** 2 + (yy - centre[1]) ** 2 + (xx - centre[2]) ** 2)
        volume = rng.standard_normal(shape) * 0.3 + intensity * (d <= radius)
        np.save(os.path.join(folder, "volumes", f"{i:03d}.npy"), volume.astype(np.float32))
        rows.append(f"{i:03d}.npy,{radius:.4f},{intensity:.4f}")
    with open(os.path.join(folder, "targets.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return count


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--targets"]
    if "--targets" in sys.argv[1:]:
        out = args[0] if args else "cosmo_demo"
        print(f"wrote {make_target_demo(out)} volumes under {out}/volumes and their targets in {out}/targets.csv")
    else:
        out = args[0] if args else "vol_demo"
        print(f"wrote {make_volume_demo(out)} volumes and masks under {out}/volumes, {out}/masks")
