"""Checkpoint memory and time per rank: the single-file path (world rank 0 gathers, writes,
reads and broadcasts the whole checkpoint) against the sharded one (every rank writes and reads
its own slices), and weight initialisation whole-then-slice against by share.

    .venv/bin/python benchmarks/checkpoint_memory.py               # 4 ranks, a 440 MiB checkpoint
    .venv/bin/python benchmarks/checkpoint_memory.py --nout 20000  # quicker (20 MiB)

The model: an MLPDist whose first layer (vecpar over a 1x4 grid) maps the 120 features of a
small synthetic data set to ``--nout`` units (float64 ``W (nout, 120)`` sharded by feature
blocks, its bias and the ``(3, nout + 1)`` output layer replicated). Every phase runs in fresh
processes (``mpiexec -n 4``): the model is set up (initialised by share), then the phase runs
while ``tracemalloc`` (numpy's arrays and MPI's pickles) follows it; ``ru_maxrss`` before and
after the phase is recorded too (it catches HDF5's own buffers; it only says how far the phase
raised the peak above set-up's). Per rank: share (its parameters' bytes), the phase's peak
traced allocation, what stays allocated after it (``ck`` held as the caller holds it), the
RSS peak raise, and seconds. Phases:

* ``init whole``: every layer's global tensors drawn and sliced (the code path before init by
  share); ``init share``: ``Model.init_params`` (by share).
* ``save single`` / ``save sharded``: ``save_any`` to a file / a folder.
* ``save async``: a sharded save in the background (``checkpoint: {async: true}``): the staged
  copy, then a thread per rank writes it while the caller goes on (and finishes it at once here,
  so ``seconds`` is the whole save and ``peak`` includes the staged copy).
* ``restore single`` / ``restore sharded``: ``restore_any`` of them (the single file: rank 0
  reads and sends each rank its slices; the release before broadcast the whole checkpoint: run
  its copy of this script for that figure).
* ``train while saving``: what a save costs the training: ``--epochs`` epochs of training steps
  alone, then after a sharded save in the foreground, then while a background save writes (and
  its finish); the seconds the training waited and the steps' seconds.
"""
import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXPERIMENT = """!obj:distnet.experiments.FitPredictErrorExperiment {{ dist_flag: True,
  backend: !obj:distnet.backends.Numpy64 {{rng_seed: 0}},
  datasets: [!obj:distnet.datasets.HDF5Dataset {{path: {data}, dist_flag: True, dist_mode: vecpar}}],
  model: !obj:distnet.models.MLPDist {{
    num_epochs: 1, batch_size: 10, shuffle: True,
    cost: !obj:distnet.costs.CrossEntropy {{}},
    momentum: {{type: constant, coef: 0.9}},
    layers: [
      !obj:distnet.layers.LayerDist {{name: h0, nout: {nout}, learning_rate: 0.01,
        weight_init: {{type: normal, loc: 0.0, scale: 0.01}}, activation: !obj:distnet.activations.RectLin {{}}}},
      !obj:distnet.layers.LayerDist {{name: output, nout: 3, learning_rate: 0.01,
        weight_init: {{type: node_normalized, scale: 4.0, bias_init: 0.0}},
        activation: !obj:distnet.activations.Logistic {{}}}},
    ],
  }},
}}
"""
PHASES = ["init whole", "init share", "save single", "save sharded", "save async", "restore single",
          "restore sharded", "train while saving"]
MIB = 2**20


def worker(folder, phase):
    """One phase on this rank; writes ``folder/<phase>-<rank>.json``."""
    import numpy as np

    from distnet.config import load_experiment
    from distnet.models.global_params import model_params
    from distnet.models.sharded import restore_any, save_any
    exp = load_experiment(os.path.join(folder, "exp.yaml"))
    t = exp.setup()
    model, rank = exp.model, t.world.Get_rank()
    share = sum(a.nbytes for _, p in model_params(model) for a in (p.value,)) + \
        sum(p.value.nbytes for layer in model.layers for p in layer.buffers())
    gc.collect()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t.world.Barrier()
    traced = phase != "train while saving"    # tracing slows every allocation of the steps timed
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    held = None
    if phase == "init whole":      # the code path before init by share: global draw, then slice
        rng = np.random.RandomState(0)
        held = []
        for layer in model.layers:
            held += [pp.local_part(v) for pp, v in zip(layer.placement.params, layer.draw_params(rng))]
    elif phase == "init share":
        model.backend.rng = np.random.RandomState(0)
        model.init_params()
    elif phase == "save async":
        save_any(os.path.join(folder, "ck-async"), model, t, 0, sharded=True, background=True).finish()
    elif phase.startswith("save"):
        kind = phase.split()[1]
        path = os.path.join(folder, "ck-" + kind)
        save_any(path, model, t, 0, sharded=(kind == "sharded"))
    elif phase == "train while saving":
        held = train_while_saving(exp, folder)
    else:
        kind = phase.split()[1]
        held = restore_any(model, os.path.join(folder, "ck-" + kind), t)
    seconds = time.perf_counter() - t0
    gc.collect()
    now, peak = tracemalloc.get_traced_memory()
    if traced:
        tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t.world.Barrier()
    out = {"rank": rank, "phase": phase, "share": share, "peak": peak - base, "after": now - base,
           "rss_raise": (rss1 - rss0) * 1024, "seconds": seconds}
    if phase == "train while saving":
        out.update(held)
    with open(os.path.join(folder, f"{phase.replace(' ', '-')}-{rank}.json"), "w") as f:
        json.dump(out, f)
    del held


def train_while_saving(exp, folder, epochs=None):
    """Seconds of ``epochs`` epochs of training steps alone (``alone``), the seconds a sharded
    save in the foreground held the training (``sync``), and for a background save the seconds
    the training waited (``async_wait``: its staging and its finish) and the seconds of the same
    epochs while it wrote (``during``)."""
    from distnet.models.sharded import save_any
    epochs = epochs or int(os.environ.get("CKMEM_EPOCHS", "5"))
    model, clock = exp.model, time.perf_counter
    data = exp.load_data()
    model.start(None)

    def steps():
        t0 = clock()
        for e in range(epochs):
            model.fit_epoch(data["train"], e)
        return clock() - t0
    alone = steps()
    t0 = clock()
    save_any(os.path.join(folder, "ck-train-sync"), model, exp.topology, 0, sharded=True)
    sync = clock() - t0
    t0 = clock()
    pending = save_any(os.path.join(folder, "ck-train-async"), model, exp.topology, 0, sharded=True,
                       background=True)
    staged = clock() - t0
    during = steps()
    t0 = clock()
    pending.finish()
    return {"alone": alone, "sync": sync, "async_wait": staged + clock() - t0, "during": during}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nout", type=int, default=440_000, help="Units of the sharded layer.")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dir", help="Working folder (kept; default: a temporary one, deleted).")
    ap.add_argument("--phases", help="Comma-separated phases to run (default: all).")
    ap.add_argument("--worker", nargs=2, metavar=("DIR", "PHASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(*args.worker)
    from distnet.comm.launcher import launch_env, mpiexec_path
    from tests.tiny import write_data
    folder = args.dir or tempfile.mkdtemp(prefix="distnet-ckmem-")
    os.makedirs(folder, exist_ok=True)
    try:
        write_data(os.path.join(folder, "data.h5"))
        with open(os.path.join(folder, "exp.yaml"), "w") as f:
            f.write(EXPERIMENT.format(data=os.path.join(folder, "data.h5"), nout=args.nout))
        rows = []
        for phase in (args.phases.split(",") if args.phases else PHASES):
            cmd = [mpiexec_path(), "-n", str(args.ranks), sys.executable, os.path.abspath(__file__),
                   "--worker", folder, phase]
            subprocess.run(cmd, env=launch_env(args.ranks), check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL)
            for r in range(args.ranks):
                with open(os.path.join(folder, f"{phase.replace(' ', '-')}-{r}.json")) as f:
                    rows.append(json.load(f))
        sizes = {k: sum(os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(os.path.join(folder, "ck-" + k))
                        for n in ns) if os.path.isdir(os.path.join(folder, "ck-" + k))
                 else os.path.getsize(os.path.join(folder, "ck-" + k)) if os.path.exists(os.path.join(folder, "ck-" + k))
                 else 0 for k in ("single", "sharded")}
        print(f"{args.ranks} ranks, MLPDist 120 -> {args.nout} (vecpar 1x{args.ranks}) -> 3, float64; "
              f"checkpoint single {sizes['single'] / MIB:.1f} MiB, sharded {sizes['sharded'] / MIB:.1f} MiB")
        print(f"{'phase':16} {'rank':>4} {'share MiB':>10} {'peak MiB':>9} {'after MiB':>9} "
              f"{'RSS raise MiB':>13} {'seconds':>8}")
        for r in rows:
            print(f"{r['phase']:16} {r['rank']:>4} {r['share'] / MIB:>10.1f} {r['peak'] / MIB:>9.1f} "
                  f"{r['after'] / MIB:>9.1f} {r['rss_raise'] / MIB:>13.1f} {r['seconds']:>8.2f}")
        print(f"\n{'training and a save':19} {'rank':>4} {'steps alone s':>13} {'sync save s':>11} "
              f"{'async wait s':>12} {'steps while writing s':>21}")
        for r in rows:
            if "alone" in r:
                print(f"{'':19} {r['rank']:>4} {r['alone']:>13.2f} {r['sync']:>11.2f} {r['async_wait']:>12.2f} "
                      f"{r['during']:>21.2f}")
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
