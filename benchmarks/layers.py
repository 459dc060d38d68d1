"""Achieved GFLOP/s per conv layer (forward, data gradient, weight gradient) next to the
machine's measured sgemm peak: how far each kernel is from the limit.

    .venv/bin/python benchmarks/layers.py --threads 2 --rounds 3        # distnet and PyTorch

Every measurement is a fresh process (``--worker``) with ``OPENBLAS/OMP/MKL_NUM_THREADS = T``;
the frameworks alternate round by round. Each worker first measures the sgemm peak (numpy
float32 ``a @ b``, 2048^3, T BLAS threads, median of 7; again after the layers, the larger
of the two counts: on a shared machine the load moves between minutes), then every layer: forward, weight
gradient alone (``conv2d_bprop(need_dx=False)``), and the data gradient as (both gradients) -
(weight gradient alone), measured in back-to-back pairs, because distnet computes them in one
call (flat-shift layers: the kernel's data-gradient pass alone, ``_flat_bprop(need_dw=False)``);
PyTorch: ``F.conv2d``,
``torch.nn.grad.conv2d_weight`` and ``conv2d_input``. FLOPs = 2 * B * K * C * fh * fw * Ho * Wo
for each of the three; no ReLU fused. Reported: per layer the median over all rounds of the
per-round median time, as GFLOP/s and as a percentage of the median sgemm peak of the same run.

**GEMM ceiling** (distnet workers, flat-shift layers): the GFLOP/s of exactly the GEMMs the
flat-shift kernel issues for that pass (same shapes, strides and stacking, from
``distnet.ops.conv``'s own tile plan and buffers; the batch's images shared out over the
kernel threads as in the kernel, nothing copied or added; timed right after the pass itself,
so both see the same machine load), counted with the pass's
useful FLOPs: what the pass would reach if its copies, sums and writes were free. The pass's
GFLOP/s over its ceiling is the share of its time spent in GEMMs; the ceiling over the sgemm
peak is what the thin GEMM shapes (32 or 64 outputs) cost against 2048^3.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

#: (name, batch, C, H, W, K, fh, fw, pad): the conv layers of the benchmark workloads
#: (experiments/neon_mnist_numpy_cnn-20-50-500-10.yaml, benchmarks/experiments/bigimage.yaml).
LAYERS = [
    ("mnist_cnn conv1", 100, 1, 28, 28, 20, 5, 5, 0),
    ("mnist_cnn conv2", 100, 20, 12, 12, 50, 5, 5, 0),
    ("bigimage conv1", 16, 3, 256, 256, 32, 3, 3, 1),
    ("bigimage conv2", 16, 32, 256, 256, 32, 3, 3, 1),
    ("bigimage conv3", 16, 32, 128, 128, 64, 3, 3, 1),
]


def flops(layer):
    _, B, C, H, W, K, fh, fw, p = layer
    Ho, Wo = H + 2 * p - fh + 1, W + 2 * p - fw + 1
    return 2.0 * B * K * C * fh * fw * Ho * Wo


def timeit(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def sgemm_peak(n=2048, reps=7):
    """float32 GFLOP/s of numpy's ``a @ b`` (n x n), median of ``reps`` after one warm-up."""
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    return 2.0 * n ** 3 / timeit(lambda: np.matmul(a, b, out=out), reps) / 1e9


def reps_for(layer):
    return max(3, min(20, int(2e10 / flops(layer))))


def flat_gemm_ceiling(layer):
    """``{"fwd", "dgrad", "wgrad": fn}``: ``fn()`` runs only the GEMMs the flat-shift kernel
    issues for the whole batch of ``layer`` in that pass (None for layers that take the batch
    im2col kernel): the images shared out over the kernel threads as in the kernel, each thread
    on its own tile buffers, every tile of every image (shapes, strides and stacking from
    ``distnet.ops.conv.flat``'s own tile plan and :class:`~distnet.ops.conv.flat.TileCols`)."""
    import numpy as np
    from distnet.ops import conv
    from distnet.ops.parallel import parallel_map, shares
    _, B, C, H, W, K, fh, fw, p = layer
    Hp, Wp = H + 2 * p, W + 2 * p
    if not conv.use_flat((B, C, Hp, Wp), (K, C, fh, fw), (1, 1), np):
        return None
    rng = np.random.default_rng(2)
    images = shares(B, np)

    def plan(cin, cout, width, rows_out, summed):
        n = conv.flat.tile_rows(cin, fh, fw, width, rows_out, 4, cout if summed else 0)
        tiles = [min(n, rows_out - i0) * width - (fw - 1) for i0 in range(0, rows_out, n)]
        gemms = []
        for _ in images:
            like = np.empty(1, np.float32)
            cols = conv.flat.TileCols(cin, fh, fw, width, n, None, "c", like, cout if summed else 0)
            cols.buf[...] = rng.standard_normal(cols.buf.shape, dtype=np.float32)
            if summed:
                wg = cols.filters(rng.standard_normal((cout, cin, fh, fw), dtype=np.float32))
                parts = np.empty((wg.shape[0], cout, n * width), np.float32)
                gemms.append(lambda L, c=cols, wg=wg, o=parts: np.matmul(wg, c.stack(L), out=o[:, :, :L]))
            else:
                dyw = rng.standard_normal((cout, n * width), dtype=np.float32)
                part = np.empty(cols.stack(1).shape[:2] + (cout,), np.float32)
                gemms.append(lambda L, c=cols, d=dyw, o=part: np.matmul(c.stack(L), d[:, :L].T, out=o))

        def run(share):
            s, mine = share
            for _ in mine:
                for L in tiles:
                    gemms[s](L)
        return lambda: parallel_map(run, images, np)

    Ho = Hp - fh + 1
    return {"fwd": plan(C, K, Wp, Ho, True),
            "dgrad": plan(K, C, (Wp - fw + 1) + 2 * (fw - 1) - 2 * p, H, True),
            "wgrad": plan(C, K, Wp, Ho, False)}


def distnet_layer(layer, threads):
    import numpy as np
    from distnet.ops import conv
    from distnet.ops.threads import ThreadPlan, apply_plan
    from distnet.ops.workspace import Workspace
    apply_plan(ThreadPlan(threads, threads, "benchmark"))
    _, B, C, H, W, K, fh, fw, p = layer
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, C, H, W), dtype=np.float32)
    w = rng.standard_normal((K, C, fh, fw), dtype=np.float32)
    pad = ((p, p), (p, p)) if p else None
    ws = Workspace()
    y = conv.conv2d_fprop(x, w, (1, 1), work=ws, pad=pad)
    dy = rng.standard_normal(y.shape, dtype=np.float32)
    out = np.empty_like(y)
    n = reps_for(layer)
    ceiling = flat_gemm_ceiling(layer)
    res = {}
    # each pass, then (flat-shift layers) its GEMMs alone, back to back: the same machine load
    fwd = timeit(lambda: conv.conv2d_fprop(x, w, (1, 1), out=out, work=ws, pad=pad), n)
    gemm = {"fwd": timeit(ceiling["fwd"], n)} if ceiling else {}
    wgrad = timeit(lambda: conv.conv2d_bprop(x, w, dy, (1, 1), need_dx=False, work=ws, pad=pad), n)
    if ceiling:
        gemm["wgrad"] = timeit(ceiling["wgrad"], n)
    both = timeit(lambda: conv.conv2d_bprop(x, w, dy, (1, 1), need_dx=True, work=ws, pad=pad), n)
    # both gradients minus the weight gradient alone, measured in pairs back to back (the median
    # of the differences; <= 0 when the load moved more than the data gradient costs: no figure)
    pairs = [timeit(lambda: conv.conv2d_bprop(x, w, dy, (1, 1), need_dx=True, work=ws, pad=pad), 1) -
             timeit(lambda: conv.conv2d_bprop(x, w, dy, (1, 1), need_dx=False, work=ws, pad=pad), 1)
             for _ in range(n)]
    dgrad = statistics.median(pairs)
    if ceiling:   # the flat kernel's data gradient alone (as conv2d_bprop calls it after dw)
        dx = np.empty_like(x)
        dgrad = timeit(lambda: conv.flat.bprop(x, w, dy, pad or ((0, 0), (0, 0)), ws, pad, need_dw=False,
                                               dx_out=dx), n)
        gemm["dgrad"] = timeit(ceiling["dgrad"], n)
        res["gemm"] = gemm
    res.update({"fwd": fwd, "wgrad": wgrad, "dgrad": dgrad, "both": both})
    return res


def torch_layer(layer, threads):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    _, B, C, H, W, K, fh, fw, p = layer
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, C, H, W, generator=g)
    w = torch.randn(K, C, fh, fw, generator=g)
    n = reps_for(layer)
    with torch.no_grad():
        y = F.conv2d(x, w, padding=p)
        dy = torch.randn(y.shape, generator=g)
        fwd = timeit(lambda: F.conv2d(x, w, padding=p), n)
        wgrad = timeit(lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, padding=p), n)
        dgrad = timeit(lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, padding=p), n)
    return {"fwd": fwd, "wgrad": wgrad, "dgrad": dgrad}


def worker(framework, threads):
    first = sgemm_peak()
    fn = distnet_layer if framework == "distnet" else torch_layer
    layers = {layer[0]: fn(layer, threads) for layer in LAYERS}
    return {"framework": framework, "threads": threads, "sgemm_gflops": max(first, sgemm_peak()),
            "sgemm_first": first, "layers": layers}


def env_for(threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    env["PYTHONPATH"] = ROOT
    return env


def run_rounds(threads, rounds, frameworks, log=print):
    runs = {fw: [] for fw in frameworks}
    for r in range(rounds):
        for fw in frameworks:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", fw, "--threads",
                                str(threads)], cwd=ROOT, env=env_for(threads), capture_output=True,
                               text=True, timeout=1800)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                log(f"  layers round {r + 1} {fw}: failed: {p.stderr[-500:]}")
                continue
            res = json.loads(line[7:])
            runs[fw].append(res)
            log(f"  layers round {r + 1}/{rounds} {fw:7s} sgemm {res['sgemm_gflops']:.0f} GFLOP/s")
    return runs


def table(runs):
    """Markdown: per layer and pass, GFLOP/s of each framework (median over rounds) and % of the
    largest sgemm figure of the run."""
    peaks = [r["sgemm_gflops"] for v in runs.values() for r in v]
    peak = max(peaks) if peaks else float("nan")
    fws = [fw for fw in runs if runs[fw]]
    names = {"distnet": "distnet", "torch": "PyTorch"}
    ceil = "distnet" in fws
    head = "| layer | pass | GFLOP | " + " | ".join(f"{names[f]} GFLOP/s | {names[f]} % of peak" for f in fws) + \
        (" | distnet GEMM ceiling GFLOP/s (% of peak) | distnet / ceiling" if ceil else "") + " |"
    lines = [f"sgemm peak (numpy float32 2048^3, the largest of every worker's measurements): "
             f"{peak:.0f} GFLOP/s (per worker {min(peaks):.0f}-{max(peaks):.0f})" if peaks else "no result", "", head,
             "| --- | --- | ---: |" + " ---: | ---: |" * len(fws) + (" ---: | ---: |" if ceil else "")]
    for layer in LAYERS:
        f = flops(layer)
        for key, label in (("fwd", "forward"), ("dgrad", "data gradient"), ("wgrad", "weight gradient")):
            cells = []
            for fw in fws:
                t = statistics.median(r["layers"][layer[0]][key] for r in runs[fw])
                g = f / t / 1e9 if t > 0 else float("nan")
                cells.append(f"{g:.1f} | {100 * g / peak:.0f}%" if t > 0 else "- | -")
            if ceil:
                gemm = [r["layers"][layer[0]]["gemm"][key] for r in runs["distnet"] if "gemm" in r["layers"][layer[0]]]
                if gemm:
                    gc = f / statistics.median(gemm) / 1e9
                    t = statistics.median(r["layers"][layer[0]][key] for r in runs["distnet"])
                    share = f"{100 * f / t / 1e9 / gc:.0f}%" if t > 0 else "-"
                    cells.append(f"{gc:.1f} ({100 * gc / peak:.0f}%) | {share}")
                else:
                    cells.append("- | -")
            lines.append(f"| {layer[0]} | {label} | {f / 1e9:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines), peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=["distnet", "torch"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frameworks", default="distnet,torch")
    ap.add_argument("--json", help="write the raw results here")
    a = ap.parse_args()
    if a.worker:
        print("RESULT " + json.dumps(worker(a.worker, a.threads)), flush=True)
        return
    runs = run_rounds(a.threads, a.rounds, a.frameworks.split(","))
    text, _ = table(runs)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
