"""Time one process's 3-D convolution, forward and backward (input and filter gradients), in
distnet (:mod:`distnet.ops.conv`: the algorithm it picks, the flat-shift kernel here, and the
N-d tiled im2col, padding done as they read) against PyTorch's CPU ``conv3d`` of the same shape, side by side in one run, both in float32 on the same
number of threads. Prints a markdown table; not a test (timings are never asserted).

    OPENBLAS_NUM_THREADS=2 .venv/bin/python benchmarks/conv3d_timing.py [--repeat 3] [--threads 2]
"""
import argparse
import statistics
import time

import numpy as np

from distnet.ops.conv import conv_bprop, conv_fprop
from distnet.ops.workspace import Workspace

SHAPES = [  # (B, C, D, H, W), K, filter
    ((2, 16, 64, 64, 64), 16, 3),
    ((2, 1, 64, 64, 64), 16, 3),
    ((2, 32, 32, 32, 32), 64, 3),
]


def distnet_step(x, w, pad, work, method=None):
    def step():
        y = conv_fprop(x, w, (1, 1, 1), pad=pad, work=work, method=method)
        conv_bprop(x, w, y, (1, 1, 1), pad=pad, work=work, method=method)
    return step


def torch_step(torch, x, w, p):
    xt = torch.from_numpy(x).requires_grad_(True)
    wt = torch.from_numpy(w).requires_grad_(True)

    def step():
        y = torch.nn.functional.conv3d(xt, wt, padding=p)
        y.backward(y.detach())        # the same dy as distnet's: the output itself
        xt.grad = wt.grad = None
    return step


def timed(step, repeat):
    step()                            # warm-up: workspace, allocator
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    print("| x (B, C, D, H, W) | K | filter | distnet ms | im2col ms | PyTorch ms | PyTorch / distnet |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(0)
    for shape, K, f in SHAPES:
        x = rng.standard_normal(shape, dtype=np.float32)
        w = rng.standard_normal((K, shape[1], f, f, f), dtype=np.float32) * 0.1
        p = f // 2
        mine = conv_fprop(x, w, (1, 1, 1), pad=((p, p),) * 3)      # the same numbers first
        ref = torch.nn.functional.conv3d(torch.from_numpy(x), torch.from_numpy(w), padding=p).numpy()
        np.testing.assert_allclose(mine, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
        ours = distnet_step(x, w, ((p, p),) * 3, Workspace())
        cols = distnet_step(x, w, ((p, p),) * 3, Workspace(), method="im2col")
        theirs = torch_step(torch, x, w, p)
        d, c, t = [], [], []
        for _ in range(2):            # interleaved: all see the same machine load
            d.append(timed(ours, a.repeat))
            c.append(timed(cols, a.repeat))
            t.append(timed(theirs, a.repeat))
        d, c, t = min(d), min(c), min(t)
        print(f"| {'x'.join(map(str, shape))} | {K} | {f}x{f}x{f} | {d * 1e3:.0f} | {c * 1e3:.0f} | {t * 1e3:.0f} "
              f"| {t / d:.2f} |", flush=True)


if __name__ == "__main__":
    main()
