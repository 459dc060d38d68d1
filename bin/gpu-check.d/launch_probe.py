"""Milliseconds per training step at batch B and 4B, distnet on the GPU backend, one process.

A time ratio near 1 between the two batch sizes means the step is launch-bound (the time goes to
issuing kernels, not to the arithmetic); benchmarks/device_calls.py counts the launches on a CPU.
Batch B is also timed with the fused kernels off (``generic``: the array-module code, one launch
per filter tap or window offset), so the probe gives the step time before and after them, and
bigimage at batch B with its convolutions' patch matrices built whole (``one block``: no
block budget, ``distnet.ops.conv.blocked.DEVICE_COLS_BYTES`` raised past every matrix), which
says what the blocks that keep a 512x512 batch in memory cost at 256x256.
``--cpu``: the device-like array module stands in for cupy (a rehearsal without a GPU).
Writes ``{"<workload>@<batch>": seconds per step}`` to ``--json``.
Run from the repository root (it imports ``benchmarks`` and ``tests``)."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--cpu", action="store_true", help="distnet.testing.devicelike in place of cupy")
ap.add_argument("--json", required=True, help="where to write the results")
a = ap.parse_args()

import benchmarks.workloads as W  # noqa: E402
from distnet.comm import Topology  # noqa: E402
from distnet.ops.conv import blocked  # noqa: E402
from distnet.ops.cuda import launch  # noqa: E402

if a.cpu:
    from distnet.testing.devicelike import DeviceLike
    W.gpu_backend = lambda like: DeviceLike(rng_seed=like.rng_seed, dtype=like.dtype.name)
    sync, plan = (lambda: None), [("mnist_cnn", (100, 200), 2)]
else:
    import cupy as cp
    sync = lambda: cp.cuda.get_current_stream().synchronize()  # noqa: E731
    plan = [("mnist_cnn", (100, 400), 20), ("gb_train", (100, 400), 10), ("resnet", (100, 400), 10),
            ("bigimage", (16, 32), 3)]
res = {}
for w, batches, n in plan:
    variants = [(b, True, "") for b in batches] + [(batches[0], False, " generic")]
    if w == "bigimage":
        variants.append((batches[0], True, " one block"))
    for b, fused, tag in variants:
        launch.ENABLED = fused
        blocked.DEVICE_COLS_BYTES = 1 << 50 if tag == " one block" else None
        key = f"{w}@{b}{tag}"
        try:
            run = W.DistnetRun(w, Topology.serial(), batch=b, backend="gpu")
            run.step()
            run.step()
            sync()
            t = time.perf_counter()
            for _ in range(n):
                run.step()
            sync()
            dt = (time.perf_counter() - t) / n
            res[key] = dt
            print(f"probe {w:10s} batch {b:4d}{tag}: {dt * 1e3:8.2f} ms/step "
                  f"{b / dt:10.0f} img/s", flush=True)
            del run
        except Exception as e:  # noqa: BLE001
            print(f"probe {key}: FAILED {type(e).__name__}: {e}", flush=True)
    ks = [f"{w}@{b}" for b in batches]
    if all(k in res for k in ks):
        print(f"probe {w:10s} time({batches[1]}) / time({batches[0]}) = {res[ks[1]] / res[ks[0]]:.2f} "
              f"(1.0: launch-bound; {batches[1] / batches[0]:.0f}: compute-bound)", flush=True)
    if ks[0] in res and f"{ks[0]} generic" in res:
        print(f"probe {w:10s} generic / fused kernels at batch {batches[0]}: "
              f"{res[ks[0] + ' generic'] / res[ks[0]]:.2f}x the time", flush=True)
    if ks[0] in res and f"{ks[0]} one block" in res:
        print(f"probe {w:10s} blocks / one block at batch {batches[0]}: "
              f"{res[ks[0]] / res[ks[0] + ' one block']:.2f}x the time", flush=True)
launch.ENABLED = True
blocked.DEVICE_COLS_BYTES = None
with open(a.json, "w") as f:
    json.dump(res, f, indent=1)
