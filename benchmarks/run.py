"""Run every benchmark, print the tables, write JSON (benchmarks/results/). Use benchmarks/run.sh
(it installs torch and threadpoolctl into .venv if missing and unsets OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE); see benchmarks/README.md.

Every measurement is a fresh process (one "job": warm-up steps, then timed steps). The jobs
of one comparison run interleaved, round after round (distnet, torch, distnet, torch, ...), so
both see the same machine load; a ratio is the median over rounds of the per-round ratio of
median step times. Images/s = batch / median step time (forward + backward + update).

``--backend gpu`` runs the same comparisons on an NVIDIA GPU: distnet with
``distnet.backends.GPU`` (cupy), PyTorch on ``cuda``, every step timed between device
synchronisations; it stops at once with one line (exit 1) where cupy, a GPU or a CUDA build of
PyTorch is missing. Results go to ``results-<date>-gpu.json`` and ``latest-gpu.md``.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from benchmarks.workloads import BATCH, SHAPES, experiment_path  # noqa: E402

SINGLE = ["mnist_cnn", "bigimage", "gb_pretrain", "gb_train", "local", "resnet"]
STEPS = {"bigimage": (1, 3), "unet": (2, 8), "unet3d": (2, 6)}   # (warm-up, timed); others: DEFAULT_STEPS
DEFAULT_STEPS = (3, 15)


def _env(threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
           and not k.startswith(("PMI_", "PMIX_", "HYDRA_"))}
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    env["PYTHONPATH"] = ROOT
    from distnet.comm.launcher import MPICH_YIELD_ENV
    env.update({k: env.get(k, v) for k, v in MPICH_YIELD_ENV.items()})
    return env


def job(framework, workload, threads=1, grid=None, steps=None, timeout=900, backend="cpu"):
    """Run one worker; returns its RESULT dict (or {"error": ...})."""
    warm, n = steps or STEPS.get(workload, DEFAULT_STEPS)
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), "--framework", framework, "--workload",
           workload, "--threads", str(threads), "--warmup", str(warm), "--steps", str(n),
           "--backend", backend]
    if grid:
        py, px = (int(v) for v in grid.split("x"))
        from distnet.comm.launcher import mpiexec_path
        cmd = [mpiexec_path(), "-n", str(py * px)] + cmd + ["--grid", grid]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=_env(threads), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "cmd": cmd}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall"] = time.time() - t0
            return r
    return {"error": f"exit {p.returncode}: {p.stderr[-2000:]}", "cmd": cmd}


def median(v):
    return statistics.median(v) if v else float("nan")


def summarize(results, workload):
    ok = [r for r in results if "error" not in r]
    times = [t for r in ok for t in r["step_times"]]
    med = median(times)
    return {"images_per_s": BATCH[workload] / med if med == med else float("nan"),
            "median_step_s": med, "steps": len(times),
            "peak_rss_max": max((max(r["peak_rss"]) for r in ok), default=0),
            "device_bytes_max": max((max(b or 0 for b in r.get("device_bytes") or [0]) for r in ok), default=0),
            "errors": [r["error"] for r in results if "error" in r]}


def round_ratios(a, b):
    """Median over rounds of median(a step)/median(b step) -> b's speed relative to a's."""
    rs = [median(ra["step_times"]) / median(rb["step_times"]) for ra, rb in zip(a, b)
          if "error" not in ra and "error" not in rb]
    return median(rs), rs


def spread(values):
    """``0.91-1.12x``: the smallest and largest of per-round ratios."""
    v = [x for x in values or () if x == x]
    return f"{min(v):.2f}-{max(v):.2f}x" if v else "-"


def mib(n):
    return f"{n / 2**20:.0f} MiB"


def kib(n):
    return f"{n / 1024:.1f} KiB"


def compare_single(workloads, threads, rounds, log, backend="cpu"):
    out = {}
    for w in workloads:
        runs = {"distnet": [], "torch": []}
        for r in range(rounds):
            for fw in ("distnet", "torch"):
                res = job(fw, w, threads, backend=backend)
                runs[fw].append(res)
                log(f"  {w:12s} round {r + 1}/{rounds} {fw:7s} "
                    + (f"median step {median(res['step_times']) * 1e3:8.1f} ms" if "error" not in res
                       else res["error"][:300]))
        d, t = summarize(runs["distnet"], w), summarize(runs["torch"], w)
        ratio, per_round = round_ratios(runs["torch"], runs["distnet"])   # distnet speed / torch speed
        first = [r for r in runs["distnet"] + runs["torch"] if "error" not in r]
        loss_d = next((r["first_loss"] for r in first if r["framework"] == "distnet"), None)
        loss_t = next((r["first_loss"] for r in first if r["framework"] == "torch"), None)
        out[w] = {"distnet": d, "torch": t, "ratio": ratio, "ratio_per_round": per_round,
                  "first_loss": {"distnet": loss_d, "torch": loss_t}, "raw": runs}
    return out


def scaling(workload, grids, rounds, log, backend="cpu"):
    """distnet at 1 thread per rank on each grid, interleaved per round."""
    runs = {g: [] for g in grids}
    for r in range(rounds):
        for g in grids:
            res = job("distnet", workload, 1, grid=None if g == "1x1" else g, backend=backend)
            runs[g].append(res)
            log(f"  {workload:12s} round {r + 1}/{rounds} grid {g:5s} "
                + (f"median step {median(res['step_times']) * 1e3:8.1f} ms" if "error" not in res
                   else res["error"][:300]))
    base = runs["1x1"]
    out = {}
    for g in grids:
        s = summarize(runs[g], workload)
        s["speedup"], s["speedup_per_round"] = round_ratios(base, runs[g])
        ok = [r for r in runs[g] if "error" not in r]
        if ok:
            r0 = ok[0]
            s["peak_rss_per_rank"] = r0["peak_rss"]
            s["held_bytes_per_rank"] = r0["held_bytes"]
            s["device_bytes_per_rank"] = r0.get("device_bytes")
            s["bytes_per_step"] = r0["bytes_per_step"]
            s["by_tag_per_step"] = r0["by_tag_per_step"]
        s["raw"] = runs[g]
        out[g] = s
    if backend == "cpu":     # the speed-ups again, the machine's drift taken out (benchmarks/scaling.py)
        for g in grids:
            if g != "1x1":
                out[g]["interleaved"] = interleaved_scaling(workload, g, rounds, log)
    b = out["1x1"].get("peak_rss_per_rank", [0])[0]
    for g in grids:
        pr = out[g].get("peak_rss_per_rank")
        out[g]["peak_rss_ratio"] = max(pr) / b if pr and b else float("nan")
    return out


def interleaved_scaling(workload, grid, rounds, log):
    """:mod:`benchmarks.scaling` on ``grid``: one rank, the no-communication ceiling and the
    distributed step timed round by round in one job; its RESULT dict, or ``{"error": ...}``."""
    from distnet.comm.launcher import mpiexec_path
    py, px = (int(v) for v in grid.split("x"))
    cmd = [mpiexec_path(), "-n", str(py * px), sys.executable, os.path.join(HERE, "scaling.py"),
           "--workload", workload, "--grid", grid, "--rounds", str(max(rounds, 5)), "--json"]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=_env(1), capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    res = json.loads(line[7:]) if line else {"error": (p.stderr or p.stdout)[-300:]}
    if line:
        d = res["speedup_per_round"]["distributed"]
        log(f"  {workload:12s} grid {grid:5s} interleaved in one job: distributed {median(d):.2f}x, "
            f"no-communication ceiling {median(res['speedup_per_round']['no communication']):.2f}x")
    else:
        log(f"  {workload:12s} grid {grid:5s} interleaved: {res['error']}")
    return res


def plan_check(workload, grid, measured):
    """The plan's per-rank bytes next to the measured ones (max over ranks, and sums); None
    (with the error logged) if the plan cannot be made."""
    try:
        return _plan_check(workload, grid, measured)
    except Exception as e:  # a benchmark run must not die on its report
        print(f"  plan check {workload} {grid} failed: {type(e).__name__}: {e}", flush=True)
        return None


def _plan_check(workload, grid, measured):
    from distnet.config import load_experiment
    from distnet.plan import plan_model
    py, px = (int(v) for v in grid.split("x"))
    exp = load_experiment(experiment_path(workload, dist=True))
    p = plan_model(exp.model, SHAPES[workload], py * px, grid=(py, px), batch=BATCH[workload])
    t = p.totals()
    per_rank = measured.get("bytes_per_step") or []
    get = lambda k: [r.get(k, 0) for r in per_rank]  # noqa: E731
    return {"grid": grid,
            "halo_fwd_max": {"plan": t["halo_fwd_max"], "measured": max(get("halo_fwd"), default=0)},
            "halo_bwd_max": {"plan": t["halo_bwd_max"], "measured": max(get("halo_bwd"), default=0)},
            "halo_total": {"plan": t["halo_fwd_total"] + t["halo_bwd_total"],
                           "measured": sum(get("halo_fwd")) + sum(get("halo_bwd"))},
            "allreduce_grad": {"plan": t["allreduce_grad"], "measured": max(get("allreduce_grad"), default=0)},
            "allreduce_act": {"plan": t["allreduce_act"], "measured": max(get("allreduce_act"), default=0)},
            "predicted_step_s": t["time"]["step"]}


def machine_info():
    import numpy as np
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read().splitlines()
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in text if line.startswith("model name"))
        flags = next((line.split(":", 1)[1].split() for line in text if line.startswith("flags")), [])
        simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
        info["cpu"] += f" ({', '.join(simd) or 'no AVX2'})"
        info["loadavg_start"] = os.getloadavg()
    except (OSError, StopIteration):
        pass
    return info


def gpu_unavailable(check_torch=True):
    """Why ``--backend gpu`` cannot run here (one line), or None: distnet's GPU backend must
    build (cupy importable, a CUDA device) and PyTorch must see CUDA."""
    from distnet.errors import ConfigError
    from benchmarks.workloads import gpu_backend
    from distnet.backend import Backend
    try:
        gpu_backend(Backend())
    except ConfigError as e:
        return e.bare_message
    if check_torch:
        try:
            import torch
        except Exception as e:  # noqa: BLE001
            return f"the PyTorch baseline needs torch ({type(e).__name__}: {e})"
        if not torch.cuda.is_available():
            return (f"PyTorch {torch.__version__} sees no CUDA device (a CPU-only build?); install "
                    "a CUDA build of torch for the baseline (https://pytorch.org/get-started/locally/)")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cpu", "gpu"], default="cpu",
                    help="gpu: distnet on distnet.backends.GPU (cupy) and PyTorch on cuda")
    ap.add_argument("--preflight", action="store_true",
                    help="only check that the backend can run (distnet's side) and exit")
    ap.add_argument("--threads", type=int, default=2, help="threads for the single-process comparison")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(SINGLE))
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--grids", default="1x1,1x2,2x2", help="bigimage scaling grids (1 thread/rank)")
    ap.add_argument("--extra-dist", default="mnist_cnn:2x2,gb_train:2x2,gb_pretrain:2x2",
                    help="workload:grid pairs run once for bytes and memory")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--no-profile", action="store_true", help="skip benchmarks/profile_step.py")
    ap.add_argument("--no-layers", action="store_true",
                    help="skip benchmarks/layers.py (sgemm peak and GFLOP/s per conv layer)")
    a = ap.parse_args()
    gpu = a.backend == "gpu"
    if gpu:
        why = gpu_unavailable(check_torch=not a.preflight)
        if why:
            sys.exit(f"benchmarks: --backend gpu cannot run here: {why}")
    if a.preflight:
        return
    os.makedirs(a.out, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    info = machine_info()
    log(f"distnet benchmarks {info['date']} on {info['cpu']} ({info['cores']} cores), load {info.get('loadavg_start')}"
        + (", backend gpu" if gpu else ""))
    report = {"machine": info, "threads": a.threads, "rounds": a.rounds, "backend": a.backend}
    if not (a.no_layers or gpu):
        from benchmarks import layers
        log(f"sgemm peak, then GFLOP/s per conv layer, {a.threads} thread(s), frameworks alternating:")
        report["layers"] = layers.run_rounds(a.threads, a.rounds, ["distnet", "torch"], log)
    log(f"single process, {a.threads} thread(s) each (OPENBLAS/OMP/MKL_NUM_THREADS, torch.set_num_threads)"
        + (", distnet on distnet.backends.GPU, PyTorch on cuda:" if gpu else ":"))
    report["single"] = compare_single([w for w in a.workloads.split(",") if w], a.threads, a.rounds, log,
                                      backend=a.backend)
    if not a.no_scaling:
        grids = a.grids.split(",")
        log("spatial scaling of bigimage, 1 thread per rank" + (", one GPU per rank (shared if fewer):" if gpu else ":"))
        report["scaling"] = scaling("bigimage", grids, a.rounds, log, backend=a.backend)
        report["plan_check"] = [c for c in (plan_check("bigimage", g, report["scaling"][g])
                                            for g in grids if g != "1x1") if c is not None]
    report["extra_dist"] = {}
    for pair in filter(None, a.extra_dist.split(",")):
        w, g = pair.split(":")
        res = job("distnet", w, 1, grid=g, backend=a.backend)
        log(f"  {w:12s} grid {g}: " + (f"median step {median(res['step_times']) * 1e3:.1f} ms"
                                       if "error" not in res else res["error"][:300]))
        # the plan models the supervised step: no check for GB's pretraining step
        check = plan_check(w, g, res) if "error" not in res and w != "gb_pretrain" else None
        report["extra_dist"][pair] = {"result": res, "plan_check": check}
    report["profile"] = {}
    if gpu and not a.no_profile:
        log("  profile_step.py measures the CPU backend (py-spy, tracemalloc): skipped with --backend gpu")
    for w, extra in (("mnist_cnn", []), ("bigimage", ["--steps", "2", "--no-spy"])):
        if w not in report["single"] or a.no_profile or gpu:
            continue
        p = subprocess.run([sys.executable, os.path.join(HERE, "profile_step.py"), w, "--json"] + extra,
                           cwd=ROOT, env=_env(a.threads), capture_output=True, text=True, timeout=1800)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        report["profile"][w] = json.loads(line[7:]) if line else {"error": p.stderr[-1500:]}
        log(f"  profile {w}: " + ("ok" if line else p.stderr[-300:]))
    report["machine"]["loadavg_end"] = os.getloadavg()
    blas = next((r for v in report["single"].values() for r in v["raw"]["distnet"] if "blas" in r), {})
    report["blas"] = blas.get("blas")
    text = tables(report)
    print(text)
    stamp = info["date"].replace(":", "") + ("-gpu" if gpu else "")
    latest = "latest-gpu.md" if gpu else "latest.md"
    with open(os.path.join(a.out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    with open(os.path.join(a.out, latest), "w") as f:
        f.write(text + "\n")
    log(f"wrote {a.out}/results-{stamp}.json and {a.out}/{latest}")


def gpu_line(rep):
    """The devices and GPU software versions the workers reported (``--backend gpu``)."""
    seen = {}
    for v in rep["single"].values():
        for fw in ("distnet", "torch"):
            for r in v["raw"][fw]:
                if "device" in r:
                    seen.setdefault(fw, r)
    parts = []
    for fw, r in seen.items():
        dv = r.get("device_versions") or {}
        if fw == "distnet":
            cu = lambda k: f"{dv[k] // 1000}.{dv[k] % 1000 // 10}" if dv.get(k) else "?"  # noqa: E731
            parts.append(f"distnet on {r['device']} (cupy {dv.get('cupy')}, CUDA runtime {cu('cuda_runtime')}, "
                         f"driver {cu('cuda_driver')})")
        else:
            parts.append(f"PyTorch {r.get('torch')} on {r['device']} (CUDA {dv.get('torch_cuda')})")
    return "; ".join(parts) or "no GPU job succeeded"


def _interleaved_cells(res):
    """The two scaling.py cells of a scaling row: distributed and ceiling speed-ups (spread)."""
    if not res or "error" in res:
        return "- | -"
    r = res["speedup_per_round"]
    return " | ".join(f"{median(r[k]):.2f}x ({spread(r[k])})" for k in ("distributed", "no communication"))


def tables(rep):
    m = rep["machine"]
    gpu = rep.get("backend") == "gpu"
    blas = [b for b in (rep.get("blas") or []) if b.get("user_api") == "blas"]
    bl = ", ".join(f"{b['internal_api']} {b.get('version')} kernel {b.get('architecture')} "
                   f"{b.get('num_threads')} thread(s)" for b in blas) or "unknown"
    lines = [f"Date {m['date']}; {m['cpu']}, {m['cores']} cores; load average {m.get('loadavg_start')} -> "
             f"{m.get('loadavg_end')}; numpy {m['numpy']} ({bl}); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset.",
             ""]
    if gpu:
        lines += [f"Backend gpu: {gpu_line(rep)}. Steps timed between device synchronisations; "
                  "device memory: cupy's memory pool / torch.cuda.max_memory_reserved.", ""]
    dev_head = " distnet device mem | PyTorch device mem |" if gpu else ""
    lines += [f"Single process, {rep['threads']} thread(s) each, {rep['rounds']} interleaved rounds "
              "(images/s = batch / median step; ratio = median over rounds of the per-round ratio; "
              "spread = the smallest and largest per-round ratio):",
              "",
              "| workload | batch | distnet img/s | PyTorch img/s | distnet / PyTorch | per-round spread | "
              f"distnet peak RSS | PyTorch peak RSS |{dev_head} first-step loss distnet / torch |",
              "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |" + (" ---: | ---: |" if gpu else "") + " --- |"]
    for w, r in rep["single"].items():
        fl = r["first_loss"]
        loss = (f"{fl['distnet']:.4f} / {fl['torch']:.4f}" if fl["distnet"] is not None and fl["torch"] is not None
                else "-")
        dev = (f" {mib(r['distnet'].get('device_bytes_max', 0))} | {mib(r['torch'].get('device_bytes_max', 0))} |"
               if gpu else "")
        lines.append(f"| {w} | {BATCH[w]} | {r['distnet']['images_per_s']:.1f} | {r['torch']['images_per_s']:.1f} | "
                     f"{r['ratio']:.2f}x | {spread(r.get('ratio_per_round'))} | "
                     f"{mib(r['distnet']['peak_rss_max'])} | {mib(r['torch']['peak_rss_max'])} |"
                     f"{dev} {loss} |")
    if rep.get("layers"):
        from benchmarks import layers
        text, _ = layers.table(rep["layers"])
        lines += ["", f"GFLOP/s per conv layer (benchmarks/layers.py), {rep['threads']} thread(s), "
                  "the sgemm peak measured first in every worker (and again at its end):", "", text]
    if "scaling" in rep:
        lines += ["", "Spatial scaling, bigimage (batch 16), distnet, 1 thread per rank"
                  + (", one GPU per rank (ranks share the GPUs when there are fewer)" if gpu else "") + ":", "",
                  "| ranks (grid) | img/s | speedup vs 1 rank (per-round spread) | peak RSS per rank (max) | vs 1 rank | "
                  "halo sent/step/rank (max) | grad allreduce/step/rank | FC allreduce/step/rank |"
                  + (" device mem per rank (max) |" if gpu else
                     " speedup in one job (scaling.py) | no-communication ceiling |"),
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if gpu else " ---: | ---: |")]
        for g, s in rep["scaling"].items():
            py, px = (int(v) for v in g.split("x"))
            bps = s.get("bytes_per_step") or [{}]
            halo = max(b.get("halo_fwd", 0) + b.get("halo_bwd", 0) for b in bps)
            lines.append(f"| {py * px} ({g}) | {s['images_per_s']:.2f} | {s['speedup']:.2f}x ({spread(s.get('speedup_per_round'))}) | "
                         f"{mib(max(s.get('peak_rss_per_rank', [0])))} | {s['peak_rss_ratio']:.2f} | {kib(halo)} | "
                         f"{kib(max(b.get('allreduce_grad', 0) for b in bps))} | "
                         f"{kib(max(b.get('allreduce_act', 0) for b in bps))} |"
                         + (f" {mib(max(d or 0 for d in s.get('device_bytes_per_rank') or [0]))} |" if gpu
                            else f" {_interleaved_cells(s.get('interleaved'))} |"))
    checks = list(rep.get("plan_check") or []) + [v["plan_check"] for v in rep.get("extra_dist", {}).values()
                                                  if v.get("plan_check")]
    names = [f"bigimage {c['grid']}" for c in rep.get("plan_check") or []] + \
        [k.replace(":", " ") for k, v in rep.get("extra_dist", {}).items() if v.get("plan_check")]
    if checks:
        lines += ["", "Bytes per step: measured (GlobalArray / allreduce_sum counters) vs `distnet plan` "
                  "(analytic minimum: every ghost pixel once, from its owner):", "",
                  "| run | halo fwd max/rank | halo bwd max/rank | halo all ranks | grad allreduce/rank | act allreduce/rank |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name, c in zip(names, checks):
            cell = lambda k: f"{kib(c[k]['measured'])} / {kib(c[k]['plan'])}"  # noqa: E731
            lines.append(f"| {name} | {cell('halo_fwd_max')} | {cell('halo_bwd_max')} | {cell('halo_total')} | "
                         f"{cell('allreduce_grad')} | {cell('allreduce_act')} |")
    prof = {w: p for w, p in (rep.get("profile") or {}).items() if "error" not in p}
    if prof:
        lines += ["", f"Per-step overhead and allocations (benchmarks/profile_step.py, distnet, {rep['threads']} threads):", "",
                  "| workload | step | main thread holding the GIL (py-spy) | fixed cost per step (batch-size intercept) | "
                  "held by the layers | allocated and freed inside a step |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for w, p in prof.items():
            g = p.get("gil_fraction")
            lines.append(f"| {w} | {p['step_s'] * 1e3:.1f} ms | {'-' if g is None else f'{100 * g:.1f}%'} | "
                         f"{p['fixed_s'] * 1e3:.1f} ms ({100 * p['fixed_fraction']:.0f}%) | {mib(p['held_bytes'])} | "
                         f"{p['transient_peak_bytes'] / 2**20:.1f} MiB |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
