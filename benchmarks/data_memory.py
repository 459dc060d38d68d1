"""Data memory and throughput: in memory vs streamed, 1x vs 10x images, 1 process and 4 ranks.

    .venv/bin/python benchmarks/data_memory.py                 # the whole table (minutes)
    .venv/bin/python benchmarks/data_memory.py --small 200 --big 2000 --batches 10   # quicker

Writes two HDF5 files of random uint8 images ``3 x 256 x 256`` (``--small`` and ``--big`` training
images, plus a fifth of that as test images) in the layout of ``distnet data convert`` into a
temporary folder (``--dir``; deleted at the end unless given), then runs a small ConvnetDist on
them for ``--batches`` minibatches of 32 (shuffled) per configuration and reports, per rank, the
peak resident memory (``ru_maxrss``) and the median seconds per minibatch after the first few.

Configurations: 1 process; 4 ranks as a 2x2 spatial grid; 4 ranks as 2 data replicas x a 1x2 grid;
4 data replicas (``datapar``). Each in memory (``in_memory: true``, small file only: the big one
would need ``--big x 3 x 256 x 256 x 4`` bytes per process) and streamed (``in_memory: false``).
``memory_per_rank`` (the prediction ``show``/``plan`` print) is listed next to the measurement.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXPERIMENT = """!obj:distnet.experiments.FitExperiment {{
  dist_flag: {dist}, {topo}
  backend: !obj:distnet.backends.Numpy {{rng_seed: 0}},
  datasets: [!obj:distnet.datasets.HDF5Dataset {{path: {path}, scale: 1/255, in_memory: {mem},
                                                dist_flag: {dist}{mode}}}],
  model: !obj:distnet.models.{model} {{
    num_epochs: 1, batch_size: 32, shuffle: True, learning_rate: 0.01,
    layers: [
      !obj:distnet.layers.ConvLayer{d} {{name: conv, {conv},
                                       weight_init: {{type: normal, scale: 0.01}},
                                       activation: !obj:distnet.activations.RectLin {{}}}},
      !obj:distnet.layers.MaxPoolingLayer{d} {{name: pool, fshape: {pool}}},
      !obj:distnet.layers.Layer{d} {{name: out, nout: 10, weight_init: {{type: normal, scale: 0.01}},
                                   activation: !obj:distnet.activations.Logistic {{}}}},
    ],
  }},
}}
"""

CONFIGS = [  # name, ranks, extra experiment keys, dist_mode
    ("1 process", 1, "", None),
    ("4 ranks, grid 2x2", 4, "grid: [2, 2],", None),
    ("4 ranks, data 2 x grid 1x2", 4, "grid: [1, 2], data: 2,", None),
    ("4 ranks, datapar (data 4)", 4, "", "datapar"),
]


def make_file(path, n_train, seed=0):
    """Random uint8 images (3, 256, 256), 10 classes, written in blocks (memory flat)."""
    from distnet.convert.writer import write
    n_test = max(1, n_train // 5)
    rng = np.random.RandomState(seed)

    def fill(split, dset):
        for a in range(0, dset.shape[0], 500):
            n = min(500, dset.shape[0] - a)
            dset[a:a + n] = rng.randint(0, 256, (n, 3, 256, 256), dtype=np.uint8)

    labels = {"train": rng.randint(0, 10, n_train), "test": rng.randint(0, 10, n_test)}
    write(path, {"train": (n_train, (3, 256, 256), np.uint8), "test": (n_test, (3, 256, 256), np.uint8)},
          fill, labels, [str(k) for k in range(10)], "random", seed, 0.0, 0.0)


def warm_page_cache(path):
    """Read ``path`` once, so that a timed run reads from the page cache as a steady-state epoch
    would (a file that fits in memory stays there after the first epoch)."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


class Enough(Exception):
    pass


def worker(args):
    """One rank: run the experiment for ``--batches`` minibatches; print one JSON line per rank
    (rank 0 gathers)."""
    from distnet.config import load_experiment_text
    from distnet.experiments.loop import RunHooks
    text = open(args.experiment).read()
    exp = load_experiment_text(text)
    stamps, cpu = [], []

    class Hooks(RunHooks):
        def batch(self, epoch, b, n, running_cost):
            stamps.append(time.perf_counter())
            cpu.append(time.process_time())
            if b == args.batches:
                raise Enough()

    try:
        exp.run(hooks=Hooks())
    except Enough:
        pass
    t = exp.topology
    skip = 3 if len(stamps) > 4 else 0
    steps = np.diff(stamps)[skip:]
    tile = exp.dataset.rank_tile(t.grid, t.coords) if exp.dist_flag else None
    pred = exp.dataset.memory_per_rank(tile, exp.model.batch_size, t.ndata, exp.backend.dtype)
    rec = {"rank": t.rank, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "step_s": float(np.median(steps)), "mode": exp.dataset.mode,
           "cpu_s": float(np.median(np.diff(cpu)[skip:])),
           "predicted_mib": pred[exp.dataset.mode] / 2**20}
    recs = t.world.gather(rec, root=0) if t.size > 1 else [rec]
    if t.rank == 0:
        print("RESULT " + json.dumps(recs), flush=True)


#: The network of the memory table (cheap: the data path dominates) and of the throughput rounds
#: (a 3x3 convolution over the whole image: compute dominates, as in a real experiment).
NETS = {"light": ("nofm: 8, fshape: 8, stride: 8", 2),
        "conv3x3": ("nofm: 16, fshape: 3, padding: 1", 8)}


def run_config(path, ranks, topo, dist_mode, mem, batches, folder, net="light"):
    dist = ranks > 1
    d = "Dist" if dist and dist_mode != "datapar" else ""
    model = "ConvnetDist" if d else "Convnet"
    conv, pool = NETS[net]
    text = EXPERIMENT.format(dist=dist, topo=topo, path=path, mem=str(mem).lower(), d=d, model=model,
                             conv=conv, pool=pool,
                             mode=f", dist_mode: {dist_mode}" if dist_mode else "")
    exp_path = os.path.join(folder, "exp.yaml")
    with open(exp_path, "w") as f:
        f.write(text)
    py = sys.executable
    cmd = [py, __file__, "--worker", exp_path, "--batches", str(batches)]
    if ranks > 1:
        from distnet.comm.launcher import launch_env, mpiexec_path
        cmd = [mpiexec_path(), "-n", str(ranks)] + cmd
        env = launch_env(ranks)
    else:
        env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--big", type=int, default=20000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--dir", help="Keep the generated files here (default: a temporary folder, deleted).")
    ap.add_argument("--configs", default="0,1,2,3", help="Indices of the configurations to run (empty: none).")
    ap.add_argument("--json", help="Also write the raw records here.")
    ap.add_argument("--throughput-net", default="conv3x3", choices=sorted(NETS),
                    help="Network of the throughput rounds.")
    ap.add_argument("--throughput-rounds", type=int, default=3,
                    help="Rounds of 1 process in memory / streamed (1x, alternating) for the throughput ratio.")
    args = ap.parse_args()
    if args.worker:
        args.experiment = args.worker
        return worker(args)
    folder = args.dir or tempfile.mkdtemp(prefix="distnet-data-bench-")
    os.makedirs(folder, exist_ok=True)
    try:
        files = {}
        for label, n in (("1x", args.small), ("10x", args.big)):
            files[label] = os.path.join(folder, f"images_{n}.h5")
            if not os.path.exists(files[label]):
                t0 = time.time()
                make_file(files[label], n)
                print(f"wrote {files[label]} ({n} train images) in {time.time() - t0:.0f} s", file=sys.stderr)
        rows, raw = [], []
        chosen = [int(c) for c in args.configs.split(",") if c.strip()]
        for i in chosen:
            name, ranks, topo, dist_mode = CONFIGS[i]
            for mem, label in ((True, "1x"), (False, "1x"), (False, "10x")):
                recs = run_config(files[label], ranks, topo, dist_mode, mem, args.batches, folder)
                raw.append({"config": name, "in_memory": mem, "data": label, "ranks": recs})
                rss = [r["rss_mib"] for r in recs]
                rows.append((name, "in memory" if mem else "streaming", label, max(rss),
                             max(r["predicted_mib"] for r in recs), np.median([r["step_s"] for r in recs])))
                print(f"{rows[-1]}", file=sys.stderr, flush=True)
        if rows:
            print("| configuration | data mode | images | peak RSS per rank (MiB, max) | predicted data (MiB) | s per batch |")
            print("| --- | --- | --- | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.0f} | {r[4]:.1f} | {r[5]:.4f} |")
        print()
        by = {(r[0], r[1], r[2]): r for r in rows}
        for name, *_ in [CONFIGS[i] for i in chosen]:
            s1, s10, m1 = by[(name, "streaming", "1x")], by[(name, "streaming", "10x")], by[(name, "in memory", "1x")]
            print(f"{name}: streaming RSS 10x / 1x = {s10[3] / s1[3]:.3f}; "
                  f"streaming / in-memory time per batch (1x) = {s1[5] / m1[5]:.3f}")
        times, cpus = {True: [], False: []}, {True: [], False: []}
        for _ in range(args.throughput_rounds):
            for mem in (True, False):
                warm_page_cache(files["1x"])
                recs = run_config(files["1x"], 1, "", None, mem, args.batches * 2, folder, args.throughput_net)
                times[mem].append(recs[0]["step_s"])
                cpus[mem].append(recs[0]["cpu_s"])
                raw.append({"config": "throughput", "in_memory": mem, "data": "1x", "ranks": recs})
        if args.throughput_rounds:
            m, s_ = np.median(times[True]), np.median(times[False])
            print(f"\nthroughput ({args.throughput_net} net), 1 process, {args.batches * 2} batches x "
                  f"{args.throughput_rounds} rounds: "
                  f"in memory {m:.4f} s/batch, streaming {s_:.4f} s/batch, ratio {s_ / m:.3f} "
                  f"(rounds: memory {[round(t, 4) for t in times[True]]}, "
                  f"streaming {[round(t, 4) for t in times[False]]}); CPU seconds per batch (both "
                  f"threads): in memory {np.median(cpus[True]):.4f}, streaming {np.median(cpus[False]):.4f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(raw, f, indent=1)
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
