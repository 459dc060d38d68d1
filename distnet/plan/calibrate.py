"""Rates of this machine for the kinds of work of one model: ``distnet plan --calibrate``.

:func:`measure` trains the model itself for a few steps on one process, one thread (a rank's
share of a core), at a reduced input (:func:`calibration_shape`: the same net, a side halved
until an input plane holds at most :data:`PIXELS` pixels, so that it takes a second or two),
times every layer's forward and backward and divides the work the plan states for each layer
(:mod:`.model`: its FLOPs, or its memory traffic when it has none) by its seconds, summed per
kind of layer: the :attr:`~distnet.plan.machine.Machine.rates` that replace the one FLOP rate and
the one memory rate for those kinds. What the step spends outside the layers (the cost, its
gradient, the update) becomes the ``"cost"`` rate, per byte of the last layer's output. The
node's cores are this process's (its affinity mask). Each layer's seconds (and the rest's) are
the least of the timed steps: the least disturbed by other work on the machine. The memory
the MPI library adds to a process (:func:`runtime_bytes`) is measured first.
"""
import os
import subprocess
import sys
import time
from math import prod

import numpy as np

from .machine import Machine, work_kind

#: The most pixels (voxels) of one input plane the calibration runs on.
PIXELS = 1 << 18
#: Steps run: the first allocates the workspaces and is not timed.
STEPS = 4


def calibration_shape(shape, pixels=PIXELS):
    """``shape`` (C, *S) with every side halved (as long as all stay even) until ``prod(S) <=
    pixels``: the same net's shape at a size that a step takes little time on."""
    c, sides = shape[0], list(shape[1:])
    while prod(sides) > pixels and all(s % 2 == 0 and s >= 16 for s in sides):
        sides = [s // 2 for s in sides]
    return (c,) + tuple(sides)


def _timed(layer, seconds):
    """Time ``layer``'s fprop and bprop into ``seconds[name]`` (instance attributes: the class
    is untouched)."""
    for name in ("fprop", "bprop"):
        method = getattr(layer, name)

        def run(*args, _method=method, **kwargs):
            t = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                seconds[layer.name] = seconds.get(layer.name, 0.0) + time.perf_counter() - t
        setattr(layer, name, run)


def _train(model, backend, shape, batch):
    """Seconds per layer and of the whole step, the fastest of the timed steps."""
    from ..comm import Topology
    model.infer_shapes(shape)
    model.configure(backend, Topology.serial(len(shape) - 1))
    model.init_params()
    rng = np.random.RandomState(0)
    x = backend.asarray(rng.standard_normal((batch,) + shape).astype(backend.dtype))
    classes = model.layers[-1].out_shape[0]
    labels = rng.randint(0, classes, (batch,) + (shape[1:] if model.per_pixel else ()))
    t = model._targets(labels)
    per_layer = {}
    for layer in model.layers:
        _timed(layer, per_layer)
    best, best_step = {}, float("inf")
    for i in range(STEPS):
        per_layer.clear()
        start = time.perf_counter()
        model.train_step(x, t, 0)
        step = time.perf_counter() - start
        if i:
            best_step = min(best_step, step - sum(per_layer.values()))
            best = {k: min(v, best.get(k, v)) for k, v in per_layer.items()}
    return best, best_step + sum(best.values())


#: Run in a fresh interpreter: what initialising MPI adds to its resident memory.
_RUNTIME_PROBE = """
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
import distnet.cli.main
from distnet.comm import Topology
before = rss()
Topology.world_comm()
print(rss() - before)
"""


def runtime_bytes():
    """What initialising MPI adds to a process's resident memory beyond distnet's imports (the
    library and its shared-memory segments), measured in a fresh interpreter (Linux; 0 where
    it cannot tell): every run, one process too, holds it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_"))}
    try:
        out = subprocess.run([sys.executable, "-c", _RUNTIME_PROBE], capture_output=True, text=True,
                             timeout=60, env=env, check=True).stdout
        return max(0, int(out.split()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return 0


def measure(exp, shape, batch=None):
    """A :class:`Machine` with the rates of this machine for ``exp``'s model (an experiment
    loaded from its file: the calibration builds and trains its own copy) at
    :func:`calibration_shape` of ``shape``, ``batch`` rows (default: the model's batch size),
    one BLAS thread, this process's cores and the MPI library's memory."""
    from ..comm.node import own_cores
    from ..ops import parallel
    from ..ops.threads import ThreadPlan, apply_plan, blas_threads
    from .model import plan_model
    small = calibration_shape(tuple(shape))
    batch = int(batch or exp.model.batch_size or 1)
    runtime = runtime_bytes()
    before = parallel.current_plan() or ThreadPlan(max([n for _, n in blas_threads()], default=1),
                                                   parallel.kernel_threads(), "before the calibration")
    apply_plan(ThreadPlan(1, 1, "calibration: one rank's share of a core"))
    try:
        seconds, step = _train(exp.model, exp.backend, small, batch)
    finally:
        apply_plan(before)
    plan = plan_model(exp.model, small, 1, batch=batch, itemsize=exp.backend.dtype.itemsize)
    work, spent = {}, {}
    for lp in plan.layers:
        kind = work_kind(lp.kind)
        work[kind] = work.get(kind, 0.0) + (lp.flops_max or lp.mem_bytes_max)
        spent[kind] = spent.get(kind, 0.0) + seconds.get(lp.name, 0.0)
    rates = {k: work[k] / spent[k] for k in work if work[k] and spent[k] > 0}
    rest = step - sum(seconds.values())
    out_bytes = batch * plan.itemsize * prod(plan.layers[-1].tile)
    if rest > 0 and out_bytes:
        rates["cost"] = out_bytes / rest
    return Machine(cores=len(own_cores()), rates=rates, runtime_bytes=runtime)
