"""Time 1x1 convolutions: the pointwise GEMM kernel (distnet.ops.conv.pointwise) against the
general kernels of distnet.ops.conv (forced with method=...), on ResNet-like shapes. Prints a
table; run with the BLAS thread count you train with. Not a test (timings are never asserted).

    .venv/bin/python benchmarks/conv_pointwise_timing.py [--repeat 5]
"""
import argparse
import time

import numpy as np

from distnet.ops.conv import conv2d_bprop, conv2d_fprop, use_flat
from distnet.ops.conv.pointwise import pointwise_bprop, pointwise_fprop

SHAPES = [  # (B, C, H, W), K, stride
    ((32, 64, 32, 32), 64, (1, 1)),
    ((32, 64, 32, 32), 128, (2, 2)),
    ((32, 128, 16, 16), 256, (2, 2)),
    ((32, 256, 8, 8), 256, (1, 1)),
    ((8, 64, 96, 96), 64, (1, 1)),
]


def best(fn, repeat):
    fn()
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'x shape':>20} {'K':>4} {'stride':>6} {'kernel':>7} | {'fprop ms':>9} {'bprop ms':>9} |"
          f" {'pointwise fprop':>15} {'bprop':>7} | {'speed-up f/b':>12}")
    for shape, K, stride in SHAPES:
        x = rng.standard_normal(shape).astype(a.dtype)
        w = rng.standard_normal((K, shape[1], 1, 1)).astype(a.dtype)
        y = conv2d_fprop(x, w, stride, method="im2col")
        dy = rng.standard_normal(y.shape).astype(a.dtype)
        method = "flat" if use_flat(shape, w.shape, stride) else "im2col"
        f0 = best(lambda: conv2d_fprop(x, w, stride, method=method), a.repeat)
        b0 = best(lambda: conv2d_bprop(x, w, dy, stride, method=method), a.repeat)
        f1 = best(lambda: pointwise_fprop(x, w, stride), a.repeat)
        b1 = best(lambda: pointwise_bprop(x, w, dy, stride), a.repeat)
        print(f"{str(shape):>20} {K:>4} {str(stride):>6} {method:>7} | {f0 * 1e3:9.2f} {b0 * 1e3:9.2f} |"
              f" {f1 * 1e3:15.2f} {b1 * 1e3:7.2f} | {f0 / f1:5.2f} {b0 / b1:5.2f}")


if __name__ == "__main__":
    main()
