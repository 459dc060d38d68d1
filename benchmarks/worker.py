"""One benchmark job: ``--framework distnet|torch``, ``--backend cpu|gpu``, one workload, warm-up
then timed steps. Run by benchmarks/run.py (under mpiexec for multi-rank distnet jobs); prints one
line ``RESULT {json}`` on rank 0 with per-step seconds (slowest rank per step), peak RSS per rank,
comm bytes per step per rank, the first-step loss and the BLAS that ran; on the GPU also the
device memory per rank and the device's name.

On the GPU a step is timed from a synchronised device to a synchronised device (cupy: the current
stream, where distnet queues its kernels and its staging copies; torch: ``torch.cuda.synchronize``),
so no kernel of the step is still running when its time is taken."""
import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def blas_info():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("user_api", "internal_api", "prefix", "version", "num_threads", "architecture",
            "threading_layer")
    return [{k: d.get(k) for k in keep} for d in threadpool_info()]


def device_info(framework):
    """``(device name, {package: version})`` of the current CUDA device."""
    if framework == "torch":
        import torch
        return torch.cuda.get_device_name(), {"torch_cuda": torch.version.cuda}
    import cupy
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return name, {"cupy": cupy.__version__, "cuda_runtime": rt.runtimeGetVersion(),
                  "cuda_driver": rt.driverGetVersion()}


def device_bytes(framework):
    """Device memory this process holds at its peak: torch's ``max_memory_reserved``; for cupy
    the default memory pool's size (the pool keeps what it once allocated, so after the steps its
    size is the peak the steps needed, plus fragmentation)."""
    if framework == "torch":
        import torch
        return torch.cuda.max_memory_reserved()
    import cupy
    return cupy.get_default_memory_pool().total_bytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=["distnet", "torch"], required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--backend", choices=["cpu", "gpu"], default="cpu",
                    help="gpu: distnet with distnet.backends.GPU, PyTorch on cuda")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--grid", default=None, help="PyxPx for a multi-rank distnet job")
    ap.add_argument("--no-reuse", action="store_true", help="distnet: layers allocate their outputs")
    a = ap.parse_args()

    import numpy as np
    comm = None
    if a.framework == "torch":
        import torch
        torch.set_num_threads(a.threads)
    from distnet.comm import Topology
    if a.grid:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        grid = tuple(int(v) for v in a.grid.split("x"))
        topo = Topology.from_world(grid=grid)
    else:
        from benchmarks.workloads import serial_topology
        topo = serial_topology(a.workload)
    base = rss_bytes()
    from benchmarks.workloads import DistnetRun, synchronizer, torch_twin
    from distnet.comm.traffic import counting
    gpu = a.backend == "gpu"
    if a.framework == "torch":
        if gpu and not torch.cuda.is_available():
            sys.exit(f"worker: PyTorch {torch.__version__} sees no CUDA device (a CPU build?)")
        step, run = torch_twin(a.workload, device="cuda" if gpu else "cpu"), None
    else:
        from distnet.errors import ConfigError
        try:
            run = DistnetRun(a.workload, topo, dist=bool(a.grid), reuse_buffers=not a.no_reuse,
                             backend=a.backend)
        except ConfigError as e:   # no cupy / no GPU
            sys.exit(f"worker: {e}")
        step = run.step
    sync = synchronizer(a.framework, a.backend)
    first_loss = step()
    for _ in range(a.warmup - 1):
        step()
    times = []
    with counting() as traffic:
        for _ in range(a.steps):
            sync()
            if comm is not None:
                comm.Barrier()
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        snap = traffic.snapshot()
    per_step = {k: v / a.steps for k, v in snap["bytes"].items()}
    mine = {"times": times, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "base_rss": base, "bytes_per_step": per_step,
            "by_tag_per_step": {k: v / a.steps for k, v in snap["by_tag"].items()},
            "held_bytes": run.held_bytes() if run is not None else None,
            "device_bytes": device_bytes(a.framework) if gpu else None}
    ranks = comm.gather(mine, root=0) if comm is not None else [mine]
    if comm is None or comm.Get_rank() == 0:
        n = len(ranks)
        out = {"framework": a.framework, "backend": a.backend, "workload": a.workload, "threads": a.threads,
               "ranks": n, "grid": a.grid or "1x1", "reuse_buffers": not a.no_reuse,
               "step_times": [max(r["times"][i] for r in ranks) for i in range(a.steps)],
               "peak_rss": [r["peak_rss"] for r in ranks], "base_rss": [r["base_rss"] for r in ranks],
               "bytes_per_step": [r["bytes_per_step"] for r in ranks],
               "by_tag_per_step": [r["by_tag_per_step"] for r in ranks],
               "held_bytes": [r["held_bytes"] for r in ranks],
               "device_bytes": [r["device_bytes"] for r in ranks],
               "first_loss": float(first_loss), "blas": blas_info(),
               "numpy": np.__version__,
               "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                      "MKL_NUM_THREADS", "OPENBLAS_CORETYPE",
                                                      "OPENBLAS_L2_SIZE")}}
        if gpu:
            out["device"], out["device_versions"] = device_info(a.framework)
        if a.framework == "torch":
            import torch
            out["torch"] = torch.__version__
            out["torch_threads"] = torch.get_num_threads()
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
