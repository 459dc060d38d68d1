"""Device memory of one convolution's forward and backward pass: the largest array the device path
allocates and its patch matrix, built whole (the budget raised past it) against the default
blocks of output rows (the budget ``distnet.ops.conv.blocked.cols_budget`` sizes from the
device's free memory: 256 MiB for the device-like module's figure), on any machine.

    .venv/bin/python benchmarks/device_conv_memory.py [--size 512] [--channels 64] [--batch 1]

Runs distnet's device code path on the device-like array module of the test suite
(distnet/testing/devicelike.py: numpy data behind cupy's rules) and records the bytes of every
array it allocates (views excluded). float32, 3x3 filters, padding 1, ``K = C``, a fused ReLU. The
patch matrix whole is ``C*9`` times the input, so the whole-matrix run needs that much host memory
here (about 0.6 GB per image at the defaults); ``--blocks-only`` skips it, and ``--dry-run`` runs
nothing, printing both patch matrices' sizes from the geometry alone (e.g. ``--batch 16``).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import distnet.ops.conv as conv  # noqa: E402
from distnet.ops.conv import blocked  # noqa: E402
from distnet.testing import measure  # noqa: E402
from distnet.testing.devicelike import xp  # noqa: E402


def step(x, w, dy):
    """Forward with a fused ReLU, backward with the input gradient (a middle layer's pass)."""
    pad = ((1, 1), (1, 1))
    y = conv.conv2d_fprop(x, w, (1, 1), pad=pad, relu=True)
    conv.conv2d_bprop(x, w, dy, (1, 1), pad=pad, relu_y=y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--blocks-only", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    B, C, S = a.batch, a.channels, a.size
    if a.dry_run:
        a.blocks_only = True
    if not a.dry_run:
        rng = np.random.default_rng(0)
        x = xp.asarray(rng.standard_normal((B, C, S, S), dtype=np.float32))
        w = xp.asarray(rng.standard_normal((C, C, 3, 3), dtype=np.float32) / 24)
        dy = xp.asarray(rng.standard_normal((B, C, S, S), dtype=np.float32))
    whole = 4 * C * 9 * S * S * B
    budget = blocked.cols_budget(xp)

    def block_rows(b):
        return blocked.block_rows((B, C, S, S), (C, C, 3, 3), (1, 1), (S, S), 4, b, ((1, 1), (1, 1)))
    rows = block_rows(budget)
    mib = 1 << 20
    print(f"conv 3x3 pad 1, {C} -> {C} channels, {S}x{S}, batch {B}, float32; "
          f"block budget {budget / mib:.0f} MiB")
    print("| patch matrix | output rows per block | blocks | patch matrix bytes | largest allocation |")
    print("|---|---:|---:|---:|---:|")
    runs = [("blocks", budget)] + ([] if a.blocks_only else [("whole", 2 * whole)])
    for name, b in runs:
        blocked.DEVICE_COLS_BYTES = b
        n = block_rows(b)
        largest = ""
        if not a.dry_run:
            with measure.allocations() as sizes:
                step(x, w, dy)
            largest = f"{max(sizes) / mib:.1f} MiB"
        print(f"| {name} | {min(n, S)} | {-(-S // n)} | {4 * C * 9 * min(n, S) * S * B / mib:.1f} MiB "
              f"| {largest} |", flush=True)
    blocked.DEVICE_COLS_BYTES = None
    if a.blocks_only:
        print(f"| whole | {S} | 1 | {whole / mib:.1f} MiB | |")
    print(f"blocks of {rows} rows keep the patch matrix at {4 * C * 9 * rows * S * B / whole:.3f} "
          "of the whole")


if __name__ == "__main__":
    main()
